#!/usr/bin/env bash
# The benchmark harness (BENCHMARKS.md): builds the release artefacts, starts
# wool-worker, and measures in one run
#   1. sequential idle polls through every layer: raw tonic stub, WorkerConnection, C (wool_idle),
#      Go, Python ctypes, Wool 0.15.7's own Python client, and the floor (1-byte TCP ping-pong);
#   2. 1 / 16 / 256 / 10,000 concurrent polls on one connection (Rust tasks, C threads, Wool's
#      Python client), failures counted;
#   3. a sweep over 1,000 worker endpoints (served by one process);
#   4. RSS and TCP connections for 1 and 10,000 handles;
#   5. echo dispatch throughput against a Wool Python worker, and the cost of a 1 kHz idle poller.
# Writes target/bench/results.json, prints a markdown table, renders BENCHMARKS.png and rewrites
# the generated block of BENCHMARKS.md (UPDATE_BENCHMARKS_MD=0 leaves it alone).
#
#   ./scripts/bench.sh            full run (~2.5 minutes of measuring on 2 cores, plus builds)
#   QUICK=1 ./scripts/bench.sh    smoke run (< 1 minute once built; writes results-quick.json and
#                                 target/bench/BENCHMARKS-quick.png, leaves BENCHMARKS.png alone)
#   PROFILE=1 ./scripts/bench.sh  then also counts, per poll, CPU, context switches, syscalls and
#                                 wake-ups of (g), (a), (b), (c) and the worker (perf stat), and
#                                 records perf profiles: target/bench/profile.md (needs perf)
#   BENCH_ONLY=sequential,dispatch ./scripts/bench.sh   run some sections only (no plot)
# Knobs (iteration counts, durations): see the docstring of benches/run.py. Not a test: it
# never fails on a slow number; it exits non-zero only when something could not run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="$ROOT/target/bench"
BIN="$OUT/bin"
mkdir -p "$BIN" "$OUT/tmp"
say() { printf '[bench.sh] %s\n' "$*" >&2; }

say "building release artefacts (cargo build --release --bins --lib --features capi)"
cargo build --release --bins --lib --features capi >&2
say "building the Rust driver (cargo bench --no-run --bench wool_bench)"
BENCH_BIN="$(cargo bench --no-run --bench wool_bench --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "wool_bench" and m.get("executable"):
        print(m["executable"])')"
[[ -x "$BENCH_BIN" ]] || { say "could not find the wool_bench executable"; exit 1; }

say "building the C drivers (cc -O2 against target/release/libwool.so)"
REL="$ROOT/target/release"
cc -O2 -Wall -Wextra -Iinclude benches/c/idle_bench.c -o "$BIN/idle_bench" \
    -L"$REL" -Wl,-rpath,"$REL" -lwool -lpthread -lm
cc -O2 -Wall -Wextra benches/c/pingpong.c -o "$BIN/pingpong" -lm

say "building the Go driver (examples/go binding, linked to target/release)"
(cd benches/go && CGO_LDFLAGS="-L$REL -Wl,-rpath,$REL" go build -o "$BIN/wool-bench-go" .)

say "Python environments: Wool 0.15.7 (scripts/setup-venvs.sh) and matplotlib (target/venvs/bench)"
./scripts/setup-venvs.sh >&2
WOOL_PY="$ROOT/target/venvs/wool-0.15.7/bin/python"
PLOT_VENV="$ROOT/target/venvs/bench"
if [[ ! -f "$PLOT_VENV/.bench-ready" ]]; then
    rm -rf "$PLOT_VENV"
    python3 -m venv "$PLOT_VENV"
    "$PLOT_VENV/bin/python" -m pip install --quiet --disable-pip-version-check matplotlib >&2
    touch "$PLOT_VENV/.bench-ready"
fi

say "running (QUICK=${QUICK:-0})"
python3 benches/run.py --bench-bin "$BENCH_BIN" --c-bin "$BIN" --go-bin "$BIN/wool-bench-go" \
    --wool-python "$WOOL_PY" --only "${BENCH_ONLY:-}"

if [[ -z "${BENCH_ONLY:-}" ]]; then
    if [[ "${QUICK:-0}" != "0" ]]; then
        "$PLOT_VENV/bin/python" benches/plot.py "$OUT/results-quick.json" "$OUT/BENCHMARKS-quick.png"
    else
        "$PLOT_VENV/bin/python" benches/plot.py "$OUT/results.json" "$ROOT/BENCHMARKS.png"
    fi
fi

if [[ "${PROFILE:-0}" != "0" ]]; then
    say "profiling (perf record -g): (c) C sequential polls, (a) raw tonic, and the worker"
    python3 benches/profile.py --bench-bin "$BENCH_BIN" --c-bin "$BIN" >&2
fi
