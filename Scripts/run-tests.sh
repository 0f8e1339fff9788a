#!/usr/bin/env bash
# Scripts/run-tests.sh SECONDS [ARGUMENTS...]: runs the package's test binary (Swift
# Testing, with ARGUMENTS such as --filter) and exits with its status; a run still going
# after SECONDS is reported and killed (status 124).
#
# The binary runs directly, not under `swift test`: SwiftPM holds its child's output in
# a buffer when its own output is a pipe, and a `timeout` that kills it loses the last
# few dozen lines, which are the ones that say which test never ended (a CI run hung
# after 91 s of the suite and its log stopped in the middle of a line). Here every line
# reaches the log as the test binary writes it, and at the deadline the report says:
#   - each test that started and has not ended,
#   - the processes the run started that are still alive (Rootcanal, Bumble, btctl...),
#   - every thread's stack in the test process (with gdb, when the machine has it),
# then the run and everything it started are killed by PID.
# Assumes `swift build --build-tests` has run.
set -uo pipefail
cd "$(dirname "$0")/.."
limit=${1:?usage: Scripts/run-tests.sh SECONDS [ARGUMENTS...]}
shift
xctest=$(ls -d .build/debug/*PackageTests.xctest | head -1)
log=$(mktemp "${TMPDIR:-/tmp}/run-tests.XXXXXX")
trap 'rm -f "$log"' EXIT

"$xctest" --testing-library swift-testing "$@" >"$log" 2>&1 &
pid=$!
tail -n +1 -f --pid="$pid" "$log" &
tailer=$!

# Every process below $1 (children first, then theirs), from ps.
descendants() {
  local children
  children=$(ps -o pid= --ppid "$1" 2>/dev/null | tr -d ' ')
  for c in $children; do
    echo "$c"
    descendants "$c"
  done
}

deadline=$((SECONDS + limit))
while kill -0 "$pid" 2>/dev/null && (( SECONDS < deadline )); do sleep 1; done

if kill -0 "$pid" 2>/dev/null; then
  kill -STOP "$pid" 2>/dev/null
  sleep 1  # tail's last read
  {
    echo "run-tests: the run has not ended after ${limit} s. Tests that started and have not ended:"
    # Console lines, colours removed: "◇ Test NAME started." and "✔/✘ Test NAME passed|failed…".
    sed 's/\x1b\[[0-9;]*m//g' "$log" | awk '
      /^◇ Test case / { next }
      /^◇ Test run started\.$/ { next }
      /^◇ Test .* started\.$/ { name = $0; sub(/^◇ Test /, "", name); sub(/ started\.$/, "", name); open[name] = 1; order[++n] = name; next }
      /^(✔|✘) Test / { name = $0; sub(/^(✔|✘) Test /, "", name); sub(/ (passed|failed|with [0-9]+ test case).*$/, "", name); delete open[name] }
      END { for (i = 1; i <= n; i++) if (order[i] in open) { print "  " order[i]; delete open[order[i]] } }'
    echo "run-tests: processes the run started that are still running:"
    kids=$(descendants "$pid" | tr '\n' ',')
    if [ -n "$kids" ]; then ps -o pid,ppid,etime,args -p "${kids%,}"; else echo "  none"; fi
    echo "run-tests: the test process's threads:"
    kill -CONT "$pid" 2>/dev/null
    if command -v gdb >/dev/null; then
      timeout 120 gdb -p "$pid" -batch -ex "thread apply all bt 24" 2>&1 | grep -E '^(Thread|#)' \
        | { if command -v swift >/dev/null; then swift demangle --simplified; else cat; fi; } | head -3000
    else
      echo "  (no gdb here)"
    fi
  } >&2
  for p in "$pid" $(descendants "$pid"); do kill -KILL "$p" 2>/dev/null; done
  wait "$pid" 2>/dev/null
  wait "$tailer" 2>/dev/null
  exit 124
fi

wait "$pid"
status=$?
wait "$tailer" 2>/dev/null
exit "$status"
