#!/usr/bin/env bash
# Runs the README's two commands as written, so they cannot break silently:
#  1. the first ```sh block under "## The two commands" (the demo) runs exactly as written,
#     from a scratch folder inside this checkout, until its NBD server is listening; the
#     export is then read with nbdinfo (where installed) and the server is stopped with
#     SIGINT, which must end it cleanly (exit 0) with the members marked clean;
#  2. the second block (the test command) must be the command .ci/run executes, which is
#     how CI runs it on a bare machine at every commit.
# Called by scripts/test.sh; safe to run by hand. Exit 0 = both hold.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
mapfile -t cmds < <(awk '
  /^## The two commands/ { on = 1; next }
  on && /^## / { exit }
  on && /^```sh$/ { inblk = 1; next }
  inblk && /^```$/ { inblk = 0; next }
  inblk { print }
' README.md)
[ ${#cmds[@]} = 2 ] || { echo "readme-check: expected 2 commands under '## The two commands' in README.md, found ${#cmds[@]}: ${cmds[*]-}" >&2; exit 1; }
demo_cmd=${cmds[0]}
test_cmd=${cmds[1]}
ci_cmd=$(sed -n 's/^exec //p' .ci/run | tail -1)
if [ "$ci_cmd" != "$test_cmd" ]; then
  echo "readme-check: README's test command is '$test_cmd' but .ci/run executes '$ci_cmd'" >&2
  exit 1
fi
echo "readme-check: the test command '$test_cmd' is what .ci/run executes"

work="$repo/target/readme-check"
rm -rf "$work" && mkdir -p "$work"
log="$work/demo.log"
: >"$log"  # exists before the wait below greps it
# The demo's own build first, with no deadline: a release build from scratch on a slow or
# busy 2-core machine can take longer than the deadline below, which is for the demo.
# The command as written then finds it built (the same profile and package).
case "$demo_cmd" in
  "cargo run "*) build_cmd="cargo build ${demo_cmd#cargo run }"; build_cmd=${build_cmd%% -- *}
                 echo "readme-check: building first: '$build_cmd'"
                 (cd "$work" && $build_cmd) ;;
esac
echo "readme-check: running '$demo_cmd' in ${work#"$repo"/}"
# A process group of its own, so that SIGINT reaches cargo and raidkit as Ctrl-C would.
(cd "$work" && exec setsid bash -c "exec $demo_cmd" >"$log" 2>&1) &
pid=$!
cleanup() { kill -KILL -- "-$pid" 2>/dev/null || true; }
trap cleanup EXIT
deadline=$((SECONDS + ${README_DEMO_TIMEOUT:-900}))
until grep -q 'raidkit: serving' "$log"; do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "readme-check: the demo exited before serving:" >&2; cat "$log" >&2; exit 1
  fi
  if [ $SECONDS -ge $deadline ]; then
    echo "readme-check: the demo was not serving after ${README_DEMO_TIMEOUT:-900} s:" >&2; cat "$log" >&2; exit 1
  fi
  sleep 1
done
for want in 'read back identical with every pair of members missing (6 combinations)' \
            'check: 0 mismatches' 'raidkit: listening on unix socket'; do
  grep -qF "$want" "$log" || { echo "readme-check: the demo did not print '$want':" >&2; cat "$log" >&2; exit 1; }
done
sock=$(sed -n 's/^raidkit: listening on unix socket //p' "$log" | head -1)
if command -v nbdinfo >/dev/null; then
  size=$(nbdinfo --size "nbd+unix:///demo?socket=$sock")
  [ "$size" = 132120576 ] || { echo "readme-check: nbdinfo says the demo export has $size bytes, expected 132120576" >&2; exit 1; }
  echo "readme-check: nbdinfo reads the demo export ($size bytes)"
fi
kill -INT -- "-$pid"
rc=0; wait "$pid" || rc=$?
trap - EXIT
if [ $rc != 0 ]; then echo "readme-check: the demo exited $rc after SIGINT:" >&2; cat "$log" >&2; exit 1; fi
bin="$repo/target/release/raidkit"
state=$("$bin" detail --json "$work"/raidkit-demo/disk*.img | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')
case "$state" in clean*) ;; *) echo "readme-check: after SIGINT the demo array is '$state', expected clean" >&2; exit 1 ;; esac
echo "readme-check: the demo served, stopped on SIGINT with exit 0, and left the array $state"
