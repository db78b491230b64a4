#!/usr/bin/env bash
# run-live.sh — run the raidkit → kernel interop test (crates/raidkit/tests/interop_live.rs)
# for a human, with its output shown.
#
#   tests/interop/run-live.sh [--full]
#
# Builds rk-pattern (release, copied into the mdref guest) and runs
# `cargo test -p raidkit --test interop_live -- --nocapture`. --full sets
# RAIDKIT_INTEROP=full: every kernel-fixture configuration (≈ 73 arrays, 12 VM boots,
# ≈ 2 min under TCG) instead of the default sample (18 arrays, 3 VM boots, ≈ 30 s).
# Needs mdref beside the repository (../shared/mdref/mdref-run) or
# RAIDKIT_MDREF=/path/to/mdref-run; without it the test prints "skip: ..." and passes.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO"
for arg in "$@"; do
	case "$arg" in
	--full) export RAIDKIT_INTEROP=full ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "run-live: unknown argument: $arg" >&2; exit 2 ;;
	esac
done

cargo build --quiet --release -p raidkit-testkit --bin rk-pattern
RK_PATTERN=${CARGO_TARGET_DIR:-target}/release/rk-pattern
case "$RK_PATTERN" in /*) ;; *) RK_PATTERN=$REPO/$RK_PATTERN ;; esac
export RK_PATTERN
echo "run-live: mdref: ${RAIDKIT_MDREF:-$REPO/../shared/mdref/mdref-run}; set: ${RAIDKIT_INTEROP:-sample}"
time cargo test -p raidkit --test interop_live -- --nocapture --test-threads=1
