#!/usr/bin/env bash
# The main job, in one command: builds libwool, the reference worker and the C host, starts a
# wool-worker, gives it a short burst of work (a few `sleep` tasks), and runs the C host
# (examples/c/poll_then_retire.c), which polls the worker's idle time through the C API: rising
# while nothing runs, exactly 0 during the burst, rising again after it, and then, once idle
# for long enough, retires the worker. Each line is stamped with the time of day (UTC).
#
# Then the fleet job: a real Wool pool (WorkerPool(spawn=3, discovery=LocalDiscovery(NS)), from
# the pinned wool==0.15.7 venv) with one task running, found by its namespace, and
# `woolctl reap` retiring its idle workers while it leaves the busy one alone.
#
#   scripts/demo.sh
#
# Environment: INTERVAL (poll interval, default 0.25 s), THRESHOLD (idle seconds before
# retiring, default 2), TASKS (default 3), TASK_SECONDS (default 2), CC (default cc).
#
# From cold (nothing built, no venv) the build is most of the time: it shows cargo's own progress,
# and each step's line gives the time elapsed since the demo began.
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

started=$SECONDS
# One line per step, with the time elapsed since the demo began.
step() {
    local elapsed=$((SECONDS - started))
    printf '== [%dm%02ds] %s\n' $((elapsed / 60)) $((elapsed % 60)) "$*"
}

step "building libwool (libwool.so), wool-worker, woolctl and the burst example" \
    "(from cold: several minutes; cargo shows its progress)"
cargo build --workspace --lib --bins --example burst
step "compiling the C host (examples/c/poll_then_retire.c)"
mkdir -p "$BUILD/c-examples"
"$CC" -std=c11 -Wall -Wextra -O2 -I include examples/c/poll_then_retire.c \
    -L "$BUILD" -lwool -Wl,-rpath,"$BUILD" -lm -o "$BUILD/c-examples/poll_then_retire"

scratch="$(mktemp -d)"
worker_pid=""
pool_pid=""
cleanup() {
    for pid in "$worker_pid" "$pool_pid"; do
        if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
            kill "$pid" 2>/dev/null || true
        fi
    done
    rm -rf "$scratch"
}
trap cleanup EXIT

step "starting wool-worker"
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
step "timeline: the C host polls every ${INTERVAL} s and retires the worker once idle >= ${THRESHOLD} s;"
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
step "C host exited with $host_status; burst exited with $burst_status; wool-worker exited with $worker_status"
if ((host_status != 0 || burst_status != 0 || worker_status != 0)); then
    echo "demo: FAILED" >&2
    cat "$scratch/worker.err" >&2
    exit 1
fi
step "part 1 OK: idle rose, read 0 during the burst, rose again, and the C host retired the worker"

echo
step "the fleet job: a real Wool pool found by namespace, its idle workers retired by woolctl"
if ! [[ -x target/venvs/wool-0.15.7/bin/python ]]; then
    step "creating the wool 0.15.7 venv (target/venvs/wool-0.15.7, pip from PyPI)"
fi
./scripts/setup-venvs.sh 0.15.7 >/dev/null
namespace="demo-$$"
target/venvs/wool-0.15.7/bin/python tests/interop/wool_pool.py pool "$namespace" --spawn 3 \
    --busy 30 >"$scratch/pool.out" 2>"$scratch/pool.err" &
pool_pid=$!
for _ in $(seq 1 600); do
    grep -q busy-dispatched "$scratch/pool.out" 2>/dev/null && break
    sleep 0.1
done
grep -q busy-dispatched "$scratch/pool.out" || { echo "demo: the Wool pool did not start" >&2; cat "$scratch/pool.err" >&2; exit 1; }
echo "   Wool pool (pid $pool_pid) up in namespace $namespace, one 30 s task dispatched to it"
sleep 3
echo "\$ woolctl discover $namespace"
"$BUILD/woolctl" discover "$namespace"
echo "\$ woolctl sweep --namespace $namespace"
"$BUILD/woolctl" sweep --namespace "$namespace"
echo "\$ woolctl reap --idle-over 2s --grace 10 --namespace $namespace"
"$BUILD/woolctl" reap --idle-over 2s --grace 10 --namespace "$namespace" | tee "$scratch/reap.out"
retired=$(grep -c ' retired ' "$scratch/reap.out" || true)
kept_busy=$(grep -cE ' keep +busy( |$)' "$scratch/reap.out" || true)
kill "$pool_pid" 2>/dev/null || true
wait "$pool_pid" 2>/dev/null || true
pool_pid=""
if ((retired != 2 || kept_busy != 1)); then
    echo "demo: FAILED: expected 2 retired and 1 kept busy" >&2
    exit 1
fi
step "demo OK: woolctl retired the pool's 2 idle workers and left the busy one alone"
