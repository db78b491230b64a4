#!/usr/bin/env bash
# Short fuzzing run of every target (default 15 s each; CI gives 10 s).
# Exit status non-zero if a target crashes (libFuzzer leaves the input in artifacts/).
#
# Works on the STABLE toolchain: `cargo fuzz run --sanitizer none` needs no -Z flags
# (coverage instrumentation uses stable -C options). If cargo-fuzz cannot be installed or
# the build fails, falls back to the stable proptest garbage/round-trip tests.
set -euo pipefail
SECS="${1:-15}"
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
TARGETS=(sb_v1 sb_v090 bitmap_sb badblocks members reshape nbd_server)
export RUSTUP_TOOLCHAIN="${RUSTUP_TOOLCHAIN:-stable}"

fallback() {
    echo "run-short.sh: $1" >&2
    echo "run-short.sh: falling back to the stable proptest garbage/round-trip tests" >&2
    cd "$ROOT"
    PROPTEST_CASES="${PROPTEST_CASES:-20000}" cargo test -p raidkit-format --test format props::
    exit $?
}

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "run-short.sh: installing cargo-fuzz (cargo install cargo-fuzz --locked)" >&2
    cargo install cargo-fuzz --locked || fallback "cargo-fuzz could not be installed"
fi

cd "$HERE"
# Seed corpora from the golden superblocks made by the real mdadm.
G="$ROOT/crates/raidkit-format/tests/golden"
seed() { # target file offset length
    mkdir -p "corpus/$1"
    dd if="$G/$2" of="corpus/$1/golden-$2-$3" bs=1 skip="$3" count="$4" status=none 2>/dev/null || true
}
seed sb_v1 v1_2-raid5-head16k.bin 4096 4096
seed sb_v1 v1_0-raid1-bitmap-tail16k.bin 8192 4096
seed sb_v1 v1_1-raid1-head16k.bin 0 4096
seed sb_v090 v0_90-raid5-sb4k.bin 0 4096
seed bitmap_sb v1_0-raid1-bitmap-tail16k.bin 0 4096
seed bitmap_sb v1_2-raid1-bitmap-head16k.bin 8192 4096
mkdir -p corpus/badblocks
printf '\x00\x08\xa0\x0f\x00\x00\x00\x00\x00\x03\x20\x4e\x00\x00\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\xff' \
    > corpus/badblocks/example

cargo fuzz build --sanitizer none || fallback "cargo fuzz build failed on toolchain $RUSTUP_TOOLCHAIN"
status=0
for t in "${TARGETS[@]}"; do
    echo "=== $t (${SECS}s)"
    # -malloc_limit_mb: one allocation sized by an untrusted field is a crash, not a slow run.
    if ! cargo fuzz run --sanitizer none "$t" -- -max_total_time="$SECS" -max_len=8192 \
        -malloc_limit_mb=256 -rss_limit_mb=1024 -print_final_stats=1; then
        echo "run-short.sh: target $t FAILED (see fuzz/artifacts/$t/)" >&2
        status=1
    fi
done
exit $status
