#!/usr/bin/env bash
# The main job, in one command: builds libwool, the reference worker and the C host, starts a
# wool-worker, gives it a short burst of work (a few `sleep` tasks), and runs the C host
# (examples/c/poll_then_retire.c), which polls the worker's idle time through the C API: rising
# while nothing runs, exactly 0 during the burst, rising again after it, and then, once idle
# for long enough, retires the worker. Each line is stamped with the time of day (UTC).
#
#   scripts/demo.sh
#
# Environment: INTERVAL (poll interval, default 0.25 s), THRESHOLD (idle seconds before
# retiring, default 2), TASKS (default 3), TASK_SECONDS (default 2), CC (default cc).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

INTERVAL="${INTERVAL:-0.25}"
THRESHOLD="${THRESHOLD:-2}"
TASKS="${TASKS:-3}"
TASK_SECONDS="${TASK_SECONDS:-2}"
CC="${CC:-cc}"
TARGET_DIR="$(cargo metadata --format-version 1 --no-deps 2>/dev/null |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
TARGET_DIR="${TARGET_DIR:-$ROOT/target}"
BUILD="$TARGET_DIR/debug"

echo "== building libwool (libwool.so), wool-worker, the burst example and the C host"
cargo build --quiet --features capi --lib --bin wool-worker --example burst
mkdir -p "$BUILD/c-examples"
"$CC" -std=c11 -Wall -Wextra -O2 -I include examples/c/poll_then_retire.c \
    -L "$BUILD" -lwool -Wl,-rpath,"$BUILD" -lm -o "$BUILD/c-examples/poll_then_retire"

scratch="$(mktemp -d)"
worker_pid=""
cleanup() {
    if [[ -n "$worker_pid" ]] && kill -0 "$worker_pid" 2>/dev/null; then
        kill "$worker_pid" 2>/dev/null || true
    fi
    rm -rf "$scratch"
}
trap cleanup EXIT

echo "== starting wool-worker"
"$BUILD/wool-worker" >"$scratch/worker.out" 2>"$scratch/worker.err" &
worker_pid=$!
for _ in $(seq 1 200); do
    [[ -s "$scratch/worker.out" ]] && break
    sleep 0.05
done
address="$(head -n 1 "$scratch/worker.out")"
if [[ -z "$address" ]]; then
    echo "demo: wool-worker printed no address" >&2
    cat "$scratch/worker.err" >&2
    exit 1
fi
echo "   wool-worker (pid $worker_pid) listens on $address"
echo "== timeline: the C host polls every ${INTERVAL} s and retires the worker once idle >= ${THRESHOLD} s;"
echo "   a burst of $TASKS x sleep ${TASK_SECONDS} s arrives half a second in"
echo

"$BUILD/c-examples/poll_then_retire" "$address" "$INTERVAL" "$THRESHOLD" 5 &
host_pid=$!
sleep 0.5
"$BUILD/examples/burst" "$address" "$TASKS" "$TASK_SECONDS" &
burst_pid=$!

host_status=0
wait "$host_pid" || host_status=$?
burst_status=0
wait "$burst_pid" || burst_status=$?
worker_status=0
wait "$worker_pid" || worker_status=$?
worker_pid=""

echo
echo "== C host exited with $host_status; burst exited with $burst_status; wool-worker exited with $worker_status"
if ((host_status != 0 || burst_status != 0 || worker_status != 0)); then
    echo "demo: FAILED" >&2
    cat "$scratch/worker.err" >&2
    exit 1
fi
echo "== demo OK: idle rose, read 0 during the burst, rose again, and the C host retired the worker"
