#!/usr/bin/env bash
# raidkit's whole test suite: formatting, lints, unit/property/integration tests (including
# the kernel interop tests through shared/mdref and real NBD/FUSE clients), and a short fuzz run.
#   scripts/test.sh            everything (what CI runs)
#   scripts/test.sh --quick    skip clippy and fuzzing
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0; [ "${1:-}" = "--quick" ] && quick=1
source scripts/deps.sh
export MDREF_ACCEL="${MDREF_ACCEL:-tcg}"
echo "== cargo fmt --check"
cargo fmt --all -- --check
if [ $quick = 0 ]; then
  echo "== cargo clippy"
  cargo clippy --workspace --all-targets --quiet -- -D warnings
  # The optional ISA-L anchor must be lint-clean without the library too.
  echo "== cargo clippy (without ISA-L)"
  RAIDKIT_NO_ISAL=1 cargo clippy -p raidkit-bench-isal --all-targets --quiet -- -D warnings
fi
mkdir -p target
echo "== cargo test"
cargo test --workspace --no-fail-fast 2>&1 | tee target/test.log
echo "== the README's two commands, as written"
scripts/readme-check.sh 2>&1 | tee -a target/test.log
if [ $quick = 0 ] && [ -x fuzz/run-short.sh ]; then
  echo "== short fuzz run"
  fuzz/run-short.sh "${RAIDKIT_FUZZ_SECONDS:-10}"
fi
echo "== summary"
grep -E '^test result:' target/test.log | awk '{p+=$4; f+=$6; i+=$8} END {printf "%d passed, %d failed, %d skipped\n", p, f, i}'
