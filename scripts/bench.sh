#!/usr/bin/env bash
# The benchmark harness (BENCHMARKS.md): builds the release artefacts, starts
# wool-worker, and measures in one run
#   1. sequential idle polls through every layer: raw tonic stub, WorkerConnection, C (wool_idle),
#      Go, Python ctypes, Wool 0.15.7's own Python client, the floor (1-byte TCP ping-pong), and
#      the anchor (h): plain grpc-go (benches/grpc-go, raw codec, no libwool);
#   2. 1 / 16 / 256 / 10,000 concurrent polls on one connection (Rust tasks, C threads, Wool's
#      Python client, grpc-go goroutines), failures counted;
#   3. fleet sweeps over 1,000 and 10,000 workers (served by 4 processes of 2,500), warm and
#      cold, side by side from Rust (wool::fleet::sweep), C (wool_idle_many), Go (IdleMany),
#      Python (libwool.aio.idle_many, libwool.fleet.sweep) and woolctl (cold: a process a sweep);
#   4. RSS and TCP connections for 1 and 10,000 handles;
#   5. echo dispatch throughput against a Wool Python worker, and the cost of a 1 kHz idle poller;
#   6. listing a 128-worker local registry (written by Wool 0.15.7's own LocalDiscovery
#      publisher) with LocalDiscovery::list, against one sequential idle poll;
#   7. a KEDA scaler (wool::scaler, in process) answering GetMetrics for 1,000 workers, with a
#      fresh sweep and from the cached sweep, against one warm wool::fleet::sweep of them;
#   8. mutual TLS (a throwaway PKI under target/bench/tls, a wool-worker requiring client
#      certificates): sequential and 256-concurrent polls, ours (WorkerConnection, wool_idle)
#      against grpc-go, and the first poll on a new connection, plaintext vs mTLS.
# Writes target/bench/results.json, prints a markdown table, renders BENCHMARKS.png and rewrites
# the generated block of BENCHMARKS.md (UPDATE_BENCHMARKS_MD=0 leaves it alone).
#
#   ./scripts/bench.sh            full run (~2.5 minutes of measuring on 2 cores, plus builds)
#   QUICK=1 ./scripts/bench.sh    smoke run (< 1 minute once built; writes results-quick.json and
#                                 target/bench/BENCHMARKS-quick.png, leaves BENCHMARKS.png alone)
#   PROFILE=1 ./scripts/bench.sh  then also counts, per poll, CPU, context switches, syscalls and
#                                 wake-ups of (g), (a), (b), (c) and the worker (perf stat), the
#                                 exact per-poll instructions, allocations, syscalls, writes,
#                                 reads and context switches of each side (benches/pollcount.py:
#                                 callgrind, perf tracepoints), and records perf profiles:
#                                 target/bench/profile.md (needs perf; valgrind for the exact
#                                 instructions and allocations)
#   BENCH_ONLY=sequential,dispatch ./scripts/bench.sh   run some sections only (no plot); of
#                                 BENCHMARKS.md's generated block, only those sections (fleet,
#                                 discovery, scaler, tls) and their targets are replaced
# Knobs (iteration counts, durations): see the docstring of benches/run.py. Not a test: it
# never fails on a slow number; it exits non-zero only when something could not run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="$ROOT/target/bench"
BIN="$OUT/bin"
mkdir -p "$BIN" "$OUT/tmp"
say() { printf '[bench.sh] %s\n' "$*" >&2; }

say "building release artefacts (cargo build --release --workspace --bins --lib)"
cargo build --release --workspace --bins --lib >&2
# libwool.so again on its own, as release.sh and cargo-c build it: in the workspace build it
# takes features other members turn on (kube-client turns on tracing's `log`, which costs a
# C poll ~12,000 instructions of span logging), so the C, Go and Python rows measure the
# library users install.
say "building the C library as shipped (cargo build --release -p libwool-capi)"
cargo build --release -p libwool-capi >&2
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

say "building the Go driver (the Go binding, linked to target/release)"
# The binding finds libwool through pkg-config ("wool", build tag woolpkgconfig): a wool.pc for this tree's release build
# (include/wool.h, target/release/libwool.so, its directory as the run path). CGO_LDFLAGS puts
# target/release first either way.
PC_DIR="$OUT/pkgconfig"
mkdir -p "$PC_DIR"
cat >"$PC_DIR/wool.pc" <<PC
Name: wool
Description: libwool, this tree's release build (written by scripts/bench.sh)
Version: $(sed -n 's/^version *= *"\(.*\)"/\1/p' Cargo.toml | head -n1)
Libs: -L$REL -Wl,-rpath,$REL -lwool
Cflags: -I$ROOT/include
PC
(cd benches/go && PKG_CONFIG_PATH="$PC_DIR${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}" \
    CGO_LDFLAGS="-L$REL -Wl,-rpath,$REL" go build -tags woolpkgconfig -o "$BIN/wool-bench-go" .)
say "building the grpc-go anchor (benches/grpc-go: google.golang.org/grpc, no libwool)"
(cd benches/grpc-go && go build -o "$BIN/grpc-go-bench" .)

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
    --grpc-go-bin "$BIN/grpc-go-bench" --wool-python "$WOOL_PY" --only "${BENCH_ONLY:-}"

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
