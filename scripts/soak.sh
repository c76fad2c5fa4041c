#!/usr/bin/env bash
# A soak of the C API against a worker that keeps dying:
#   scripts/soak.sh [MINUTES]        (default 30; a decimal such as 0.5 works too)
# Environment: SOAK_PROFILE=release builds and uses the release profile (default: debug, the
# profile the other suites build); SOAK_ARGS adds options to the soak program (see below).
#
# What it does:
#   1. builds libwool's C ABI and wool-worker (`cargo build --workspace --lib --bins
#      --examples`, as scripts/test.sh's set-up does, so nothing is rebuilt twice),
#      copies both into target/soak/ (a cargo build during the run changes nothing under it)
#      and compiles tests/c/soak.c against include/wool.h and that libwool.so (-Werror);
#   2. starts a real wool-worker on a fixed free port of 127.0.0.1, chosen below the kernel's
#      ephemeral range (net.ipv4.ip_local_port_range) so that none of the soak's own outgoing
#      connections can take the port (or connect to itself on it) while the worker is down;
#   3. runs the soak program for MINUTES and, for the whole run, SIGKILLs the worker 10 s after
#      each start and starts it again on the same port (each restart waits for the new worker's
#      address line; a port still busy is retried for up to 10 s, then the run fails);
#   4. prints the program's report, the restarts done and the CPU the workers used; exits with
#      the program's status (or 1 when the worker could not be restarted). The worker is
#      killed on any exit (trap). The workers' log goes to target/soak/run.XXXXXX/worker.log,
#      removed when the run passes, kept (and named) when it fails.
#
# The soak program (tests/c/soak.c) polls through the C API: 16 threads doing blocking
# wool_idle with a 1 s deadline and 10 ms between calls (8 on one shared handle, 8 on handles
# of their own with their own channel options, hence their own pooled channels and TCP
# connections, each freed and re-made every 1000 calls), and one thread keeping 64
# wool_idle_start calls in flight on a wool_queue (each slot resting 250 ms between calls),
# woken by poll(2) on the queue's descriptor and collecting with wool_queue_next: about
# 1,500 calls a second, some 40 % of a core for the program and 30 % for the worker in the
# debug profile (a debug-built call costs about 250 us of client CPU; the 10 ms pause, not
# 1-5 ms, keeps the pair under one of the machine's two cores). It fails (exit 1) when:
#   - any call ends with a status other than WOOL_STATUS_OK or WOOL_STATUS_TRANSIENT
#     (printed with wool_last_error / the completion's message);
#   - any call takes longer than its deadline + 1 s (the margin: a slow 2-core machine running
#     other work can delay a thread's wake-up by tens of milliseconds, never by a second), or
#     never returns (a watchdog reports calls running past that while they run);
#   - a completion arrives that is not in flight (wrong tag, twice), or an OK reading is
#     negative or not finite;
#   - resources grew. RSS and open descriptors are sampled every 5 s; the last window
#     (min(5 min, run / 3)) is compared with the first window of the same length:
#       fds: last-window max <= first-window max + 16. In steady state the program holds a
#            fixed set, about 20 (stdio, the runtime's epoll and wakers, the queue's eventfd,
#            one TCP socket per pooled channel: 9 here); restarts make a few sockets overlap
#            for a moment (an old connection closing while its replacement dials), so a
#            sample may see a handful more. 16 is well above that jitter and far below what a
#            leak of one descriptor per restart (6 a minute) or per failed call (100-200 a
#            minute) would add.
#       RSS: last-window max <= first-window max x 1.25 + 8 MiB. RSS is mostly not heap:
#            about 10 MiB of the debug libwool.so's pages, 20 threads' stacks (~200 KiB
#            touched each) and glibc's per-thread malloc arenas, which keep freed memory and
#            grow by a few KiB each for minutes before they level off (about +1 MiB over the
#            first 5 minutes here, flat after); the heap actually in use is under 1 MiB. The
#            first window already holds the warmed-up state; 8 MiB covers the arenas' slow
#            growth for a small process and 25 % a large one. A leak of 200 bytes per call
#            (about 90,000 calls a minute) exceeds it within the 2-minute run; one of 5 KiB per
#            failed call, or of 100 KiB per restart, within a 30-minute run.
#     For a human to judge smaller trends, the report also gives RSS's and the heap's
#     least-squares trend (KiB/min) after the first window, and the heap in use (glibc's
#     mallinfo2: allocated and not freed, which RSS is not) over time.
# Options of the soak program (SOAK_ARGS, e.g. SOAK_ARGS="--threads 8 --pause-ms 5"):
#   --threads N --deadline S --margin S --pause-ms MS --in-flight N --queue-pause-ms MS
#   --churn N --sample S --fd-slack N --rss-factor F --rss-slack-mib MIB
#
# Takes MINUTES plus the build (seconds when built already) plus about 5 s (`soak.sh 2`: about
# 2 min 10 s when built).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

MINUTES="${1:-30}"
[[ "$MINUTES" =~ ^[0-9]+([.][0-9]+)?$ ]] && awk "BEGIN { exit !($MINUTES > 0) }" || {
    echo "usage: scripts/soak.sh [MINUTES]   (a positive number; default 30)" >&2
    exit 2
}
SECONDS_TO_RUN="$(awk "BEGIN { printf \"%.0f\", $MINUTES * 60 }")"
((SECONDS_TO_RUN >= 1)) || SECONDS_TO_RUN=1
KILL_EVERY=10

profile="${SOAK_PROFILE:-debug}"
case "$profile" in
    debug) cargo_profile=() ;;
    release) cargo_profile=(--release) ;;
    *) echo "soak.sh: SOAK_PROFILE must be debug or release" >&2; exit 2 ;;
esac
lib="$ROOT/target/$profile"
out="$ROOT/target/soak"
mkdir -p "$out"

echo "soak.sh: building libwool (capi) and wool-worker ($profile)"
cargo build --quiet "${cargo_profile[@]}" --workspace --lib --bins --examples
# The run uses copies of the library and the worker (replaced by rename, so a run still going
# keeps its own), so that a cargo build during a long run changes neither under it.
for file in libwool.so wool-worker; do
    cp "$lib/$file" "$out/.$file.new"
    mv -f "$out/.$file.new" "$out/$file"
done
"${CC:-cc}" -std=c11 -g -O2 -Wall -Wextra -Werror -pedantic -I include tests/c/soak.c \
    -o "$out/.soak.new" -L "$out" "-Wl,-rpath,$out" -lwool -lpthread -lm
mv -f "$out/.soak.new" "$out/soak"

worker_pid=""
soak_pid=""
run=""
passed=0
cleanup() {
    [[ -n "$worker_pid" ]] && kill -KILL "$worker_pid" 2>/dev/null
    [[ -n "$soak_pid" ]] && kill -TERM "$soak_pid" 2>/dev/null
    wait 2>/dev/null
    ((passed)) && [[ -n "$run" ]] && rm -rf "$run"
    return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM

run="$(mktemp -d "$out/run.XXXXXX")"   # this run's worker output and log (kept on failure)
log="$run/worker.log"
: >"$log"
now_ms() { echo $(( ${EPOCHREALTIME/./} / 1000 )); }

# start_worker PORT: a worker on 127.0.0.1:PORT, its pid in worker_pid once it has printed
# its address; fails (status 1) when it exits first (the port is taken) or says nothing in 10 s.
start_worker() {
    local port="$1" line="" i
    : >"$run/worker.out"
    "$out/wool-worker" --listen "127.0.0.1:$port" >"$run/worker.out" 2>>"$log" &
    worker_pid=$!
    for ((i = 0; i < 1000; i++)); do
        if IFS= read -r line <"$run/worker.out" && [[ -n "$line" ]]; then
            [[ "$line" == "127.0.0.1:$port" ]] && return 0
            echo "soak.sh: the worker says it listens on $line, not 127.0.0.1:$port" >&2
            break
        fi
        kill -0 "$worker_pid" 2>/dev/null || break
        sleep 0.01
    done
    kill -KILL "$worker_pid" 2>/dev/null
    wait "$worker_pid" 2>/dev/null || true
    worker_pid=""
    return 1
}

# A fixed port below the ephemeral range: the first one a worker can bind, tried at random.
read -r ephemeral_low _ </proc/sys/net/ipv4/ip_local_port_range
port=""
for ((try = 0; try < 50; try++)); do
    lowest=$(( ephemeral_low - 20000 > 1024 ? ephemeral_low - 20000 : 1024 ))
    candidate=$(( lowest + RANDOM % (ephemeral_low - lowest) ))
    if start_worker "$candidate"; then port="$candidate"; break; fi
done
[[ -n "$port" ]] || { echo "soak.sh: no free port for the worker (see $log)" >&2; exit 1; }
target="127.0.0.1:$port"
echo "soak.sh: worker on $target (pid $worker_pid); soaking for $SECONDS_TO_RUN s," \
    "SIGKILL + restart every $KILL_EVERY s"

# shellcheck disable=SC2086
"$out/soak" ${SOAK_ARGS:-} "$target" "$SECONDS_TO_RUN" &
soak_pid=$!
soak_started_ms="$(now_ms)"

# The CPU the worker has used (utime + stime, clock ticks), added up over its lives.
worker_ticks=0
worker_cpu() {
    local stat fields
    stat="$(cat "/proc/$worker_pid/stat" 2>/dev/null)" || return 0
    read -ra fields <<<"${stat##*) }"
    worker_ticks=$((worker_ticks + fields[11] + fields[12]))
}

restarts=0
retries=0
max_gap_ms=0
restart_failed=0
worker_started_ms="$(now_ms)"
while kill -0 "$soak_pid" 2>/dev/null; do
    if (( $(now_ms) - worker_started_ms < KILL_EVERY * 1000 )); then
        sleep 0.1
        continue
    fi
    worker_cpu
    killed_ms="$(now_ms)"
    kill -KILL "$worker_pid" 2>/dev/null || true
    wait "$worker_pid" 2>/dev/null || true
    worker_pid=""
    kill -0 "$soak_pid" 2>/dev/null || break
    until start_worker "$port"; do
        retries=$((retries + 1))
        if (( $(now_ms) - killed_ms > 10000 )); then restart_failed=1; break; fi
        sleep 0.05
    done
    ((restart_failed)) && break
    restarts=$((restarts + 1))
    worker_started_ms="$(now_ms)"
    gap=$((worker_started_ms - killed_ms))
    ((gap > max_gap_ms)) && max_gap_ms=$gap
done

[[ -n "$worker_pid" ]] && worker_cpu
soak_run_s=$(( ($(now_ms) - soak_started_ms) / 1000 ))
status=0
if ((restart_failed)); then
    echo "soak.sh: FAIL: the worker could not be restarted on $target for 10 s (see $log):" >&2
    tail -5 "$log" >&2
    kill -TERM "$soak_pid" 2>/dev/null || true
    wait "$soak_pid" 2>/dev/null || true
    soak_pid=""
    status=1
else
    wait "$soak_pid" || status=$?
    soak_pid=""
fi
echo "  worker restarts: $restarts (SIGKILL every $KILL_EVERY s on $target; longest kill-to-listening" \
    "gap ${max_gap_ms} ms; $retries bind retries)"
ticks_per_s="$(getconf CLK_TCK)"
echo "  worker CPU: $(awk "BEGIN { t = $worker_ticks / $ticks_per_s; s = $soak_run_s > 0 ? $soak_run_s : 1;
    printf \"%.1f s (%.0f %% of one core)\", t, 100 * t / s }")"
if ((status)); then
    echo "soak.sh: FAIL (exit $status); the worker's log: $log" >&2
else
    passed=1
    echo "soak.sh: PASS"
fi
exit "$status"
