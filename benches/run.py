#!/usr/bin/env python3
"""The benchmark run behind scripts/bench.sh: starts the workers, runs every driver, collects.

Not meant to be run by hand (scripts/bench.sh builds what it needs and passes the paths), but it
can be: ``python3 benches/run.py --bench-bin PATH --c-bin DIR --go-bin PATH --wool-python PATH``
(``--grpc-go-bin PATH``, default target/bench/bin/grpc-go-bench: the grpc-go anchor, layer (h)
and the "grpc_go" concurrency driver; left out, with a note, when that file does not exist).

The drivers (benches/wool_bench.rs, benches/c, benches/go, benches/grpc-go, benches/python)
print raw measurements: one sample per operation in integer nanoseconds, totals, counts. Every
statistic in the results is computed here, in one place (the "driver output, statistics"
section below), the same way for every driver.

Writes target/bench/results.json and prints a markdown table on stdout (progress goes to
stderr). ``--only SECTIONS`` (sequential, concurrency, fleet, memory, dispatch, discovery,
scaler, tls) runs some sections: written to results-SECTIONS.json and merged into results.json, and
(not QUICK) the generated block of BENCHMARKS.md gets those sections (fleet: 3, discovery: 6,
scaler: 7, tls: 8) and their target rows replaced, with a "Re-measured" line; the rest of the block is
left as it was. Nothing here asserts on time: the targets are *reported* (met / missed, with
the measured ratio), never enforced.

Every knob is an environment variable (defaults give a full run of about 3-4 minutes on a
2-core machine; QUICK=1 gives a smoke run well under a minute):

    SEQ_N, SEQ_WARMUP                sequential polls per round, warm-up polls
    SEQ_LAYOUTS                      CPU layouts and rounds for the sequential section, e.g.
                                     "split:5,shared:5" (the default; the first is the headline):
                                     split = client on CPU 0, worker on CPU 1 (two hosts: every
                                     wake-up crosses CPUs); shared = both on CPU 0 (no cross-CPU
                                     wake-ups: the software cost alone); free = not pinned. The
                                     layers are interleaved round by round; medians of rounds.
    FLOOR_N                          ping-pong round trips of the floor (g)
    LEVELS, BURST_SECONDS            concurrency levels and time per level (>= 1 burst each)
    C_MAX_THREADS                    (fixed at 256 in benches/c/idle_bench.c; reported)
    FLEET_SIZES, FLEET_CONCURRENCY,  fleet sizes ("1000,10000"; QUICK: "1000"; FLEET_N is an
    FLEET_SWEEPS, FLEET_COLD_RUNS    old name), polls in flight (max_in_flight, 100), warm sweeps
                                     per process, client processes per host and size (each
                                     starts with one cold sweep)
    FLEET_PER_SERVER, FLEET_TIMEOUT  workers per fleet-serve process (2500: the fd limit caps a
                                     process's listeners), each sweep's deadline (s)
    FLEET_HOSTS                      e.g. "rust,c,go,py_aio,py_sync,woolctl" (default: all found)
    SCALER_WORKERS, SCALER_REPS,     the scaler section: fleet size (1000; served by as many
    SCALER_RUNS                      fleet-serve processes as section 3's largest size, spread
                                     alike), GetMetrics calls with a fresh sweep per process (20;
                                     QUICK: 5; as many warm anchor sweeps, and 20x as many
                                     cached calls), driver processes (3; QUICK: 1); each sweep's
                                     deadline (sweepTimeout) is FLEET_TIMEOUT
    DISCOVERY_WORKERS, DISCOVERY_REPS, DISCOVERY_POLL_N, DISCOVERY_STRACE, DISCOVERY_STRACE_REPS
                                     registry size (128), listings timed, sequential polls in
                                     the same process, strace -c of DISCOVERY_STRACE_REPS
                                     listings (1; 0 in QUICK)
    MEM_HANDLES, MEM_WOOL            handle counts; MEM_WOOL=0 skips Wool's Python client
    DISPATCH_SECONDS, DISPATCH_CONCURRENCY, DISPATCH_BYTES, IDLE_COST_REPS, POLLER_HZ
    UDS                              1 (default; 0 in QUICK) adds "(c) over a Unix socket" (extra)
    TLS_ROUNDS, TLS_SEQ_N,           the mutual-TLS section (8): interleaved rounds (3; QUICK: 1)
    TLS_LEVELS, TLS_FIRST_N,         of sequential polls (TLS_SEQ_N a round, default SEQ_N, after
    TLS_FIRST_WARMUP                 SEQ_WARMUP) and of first polls on new connections
                                     (TLS_FIRST_N a process, 200; QUICK: 30; after
                                     TLS_FIRST_WARMUP untimed, 5; QUICK: 3); concurrency levels
                                     of its bursts ("256"; BURST_SECONDS each)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pollcount  # exact per-poll counts: callgrind and perf (benches/pollcount.py)

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "target" / "bench"
QUICK = os.environ.get("QUICK", "0") not in ("", "0")


def env(name: str, full, quick):
    value = os.environ.get(name)
    if value is None:
        return quick if QUICK else full
    return type(full)(value)


CFG = {
    "SEQ_N": env("SEQ_N", 4000, 1000),
    "SEQ_WARMUP": env("SEQ_WARMUP", 500, 100),
    "SEQ_LAYOUTS": env("SEQ_LAYOUTS", "split:5,shared:5", "split:1"),
    "FLOOR_N": env("FLOOR_N", 20000, 5000),
    "LEVELS": env("LEVELS", "1,16,256,10000", "1,16,256,10000"),
    "BURST_SECONDS": env("BURST_SECONDS", 2.0, 0.3),
    "FLEET_SIZES": env("FLEET_SIZES", os.environ.get("FLEET_N", "1000,10000"),
                       os.environ.get("FLEET_N", "1000")),
    "FLEET_CONCURRENCY": env("FLEET_CONCURRENCY", 100, 100),
    "FLEET_SWEEPS": env("FLEET_SWEEPS", 9, 2),
    "FLEET_COLD_RUNS": env("FLEET_COLD_RUNS", 3, 1),
    "FLEET_PER_SERVER": env("FLEET_PER_SERVER", 2500, 2500),
    "FLEET_TIMEOUT": env("FLEET_TIMEOUT", 30.0, 30.0),
    "FLEET_HOSTS": env("FLEET_HOSTS", "", ""),
    "SCALER_WORKERS": env("SCALER_WORKERS", 1000, 1000),
    "SCALER_REPS": env("SCALER_REPS", 20, 5),
    "SCALER_RUNS": env("SCALER_RUNS", 3, 1),
    "DISCOVERY_WORKERS": env("DISCOVERY_WORKERS", 128, 128),
    "DISCOVERY_REPS": env("DISCOVERY_REPS", 2000, 200),
    "DISCOVERY_POLL_N": env("DISCOVERY_POLL_N", 2000, 500),
    "DISCOVERY_STRACE": env("DISCOVERY_STRACE", 1, 0),
    "DISCOVERY_STRACE_REPS": env("DISCOVERY_STRACE_REPS", 100, 20),
    "MEM_HANDLES": env("MEM_HANDLES", "1,10000", "1,10000"),
    "MEM_WOOL": env("MEM_WOOL", 1, 0),
    "DISPATCH_SECONDS": env("DISPATCH_SECONDS", 3.0, 0.5),
    "DISPATCH_CONCURRENCY": env("DISPATCH_CONCURRENCY", 64, 64),
    "DISPATCH_BYTES": env("DISPATCH_BYTES", 16, 16),
    "IDLE_COST_REPS": env("IDLE_COST_REPS", 4, 1),
    "POLLER_HZ": env("POLLER_HZ", 1000.0, 1000.0),
    "UDS": env("UDS", 1, 0),
    "TLS_ROUNDS": env("TLS_ROUNDS", 3, 1),
    "TLS_LEVELS": env("TLS_LEVELS", "256", "256"),
    "TLS_FIRST_N": env("TLS_FIRST_N", 200, 30),
    "TLS_FIRST_WARMUP": env("TLS_FIRST_WARMUP", 5, 3),
}
CFG["TLS_SEQ_N"] = env("TLS_SEQ_N", CFG["SEQ_N"], CFG["SEQ_N"])

CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- processes


class Server:
    """A long-running process whose first stdout line is its address."""

    def __init__(self, name: str, argv: list[str], **kw):
        self.name = name
        argv = [str(x) for x in argv]
        log(f"starting {name}: {' '.join(argv)}")
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=kw.pop("stderr", None),
                                     stdin=kw.pop("stdin", subprocess.DEVNULL), text=True, **kw)
        line = self.proc.stdout.readline().strip()
        if not line or line.startswith("error"):
            self.stop()
            raise RuntimeError(f"{name} did not start: {line!r}")
        self.address = line

    def cpu_seconds(self, pid: int | None = None) -> float:
        """utime + stime of the process (and its threads), from /proc."""
        fields = Path(f"/proc/{pid or self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def set_affinity(pid: int, cpus: set[int]) -> None:
    """Sets the CPU affinity of every thread of process `pid`."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:
            pass


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_driver(argv: list[str], what: str, summary=None, timeout: float = 600, **kw) -> dict:
    """Runs a driver and reads its output (parse_output); `summary` (one of the functions
    below) turns the raw measurements into the figures the results keep. Adds the driver
    process's CPU time (_cpu_s) and wall time (_wall_s), as the harness measured them."""
    before = children_cpu()
    t = time.perf_counter()
    argv = [str(x) for x in argv]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    wall = time.perf_counter() - t
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    try:
        result = parse_output(done.stdout)
        if summary is not None:
            result = summary(result)
    except (ValueError, KeyError, IndexError, TypeError) as e:
        raise RuntimeError(f"{what}: unreadable output ({e!r}): {done.stdout[-500:]!r}") from e
    result["_cpu_s"] = children_cpu() - before
    result["_wall_s"] = wall
    return result


def proc_memory(pid: int, port: int) -> dict:
    """VmRSS and the process's TCP connections (to `port`, and all) from /proc."""
    rss_kb = 0
    threads = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss_kb = int(line.split()[1])
        elif line.startswith("Threads:"):
            threads = int(line.split()[1])
    inodes = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    for fd in fd_dir.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    to_port = established = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if cols[9] not in inodes:
                continue
            if cols[3] != "01":  # ESTABLISHED
                continue
            established += 1
            if int(cols[2].rsplit(":", 1)[1], 16) == port:
                to_port += 1
    return {"rss_mib": round(rss_kb / 1024, 2), "threads": threads, "sockets": len(inodes),
            "tcp_established": established, "tcp_to_worker": to_port}


# ---------------------------------------------------------------- driver output, statistics
#
# The drivers measure; this harness computes. A driver prints its raw measurements and the
# totals only it can know, nothing derived from them:
#
#   * durations of single operations (a poll, a sweep, a listing) as integer nanoseconds, in
#     lists named *_ns, one element per operation, in the order they ran;
#   * totals in seconds: elapsed_s (wall time of the timed part), cpu_s (the process's CPU
#     time over it, all threads);
#   * counts (ok, failed, bursts, ...) and the text of the first error (first_error, "" if none).
#
# The Rust, Go and Python drivers print that as one JSON object (their last line on stdout),
# written by serde_json, encoding/json and json. The C drivers print records (parse_records):
# C has no JSON writer to lean on. The statistics of a run (medians, percentiles, means,
# rates) are computed by the functions below, from those raw figures, the same for every
# driver; percentiles (the median included) are nearest-rank (quantile). The sections then
# combine runs (medians of rounds and processes: statistics.median) and take ratios.
#
# The driver outputs, and the function that summarises each (run_driver's `summary`):
#
#   latency           sequential polls: {"samples_ns": [one per poll], "elapsed_s", "cpu_s"}
#   burst_rates       bursts: {"levels": [{"concurrency", "bursts", "ok", "failed",
#                     "elapsed_s", "first_error"}, ...]}
#   closed_loop_rate  dispatch: {"concurrency", "elapsed_s", "ok", "failed", "first_error"}
#   poller_rate       the fixed-rate poller: {"ok", "failed", "elapsed_s"}
#   sweep_times       fleet sweeps: {"endpoints", "concurrency", "sweep_ns": [cold, warm...],
#                     "failures": [one per sweep], "first_error"}
#   listing_times     registry listings: {"namespace", "counts", "kept_ns": [...],
#                     "fresh_ns": [...], "cpu_s", "poll": <sequential polls>}
#   scaler_calls      a scaler's GetMetrics: {"endpoints", "sweep": <fleet sweeps>,
#                     "fresh", "cached": <sequential calls> with "ok", "failed", "first_error"}
#
# Other keys a driver adds (library, mode, max_threads, os_threads_max...) pass through.


def parse_output(stdout: str) -> dict:
    """A driver's stdout: a JSON object on its last non-blank line, or the C drivers'
    records (the whole output; a record line never starts with "{")."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    if not lines:
        raise ValueError("no output")
    if lines[-1].lstrip().startswith("{"):
        return json.loads(lines[-1])
    return parse_records(stdout)


def parse_records(text: str) -> dict:
    """The C drivers' output format (benches/c/timing.h), one field per line:

        NAME VALUE          a number (int or float)
        NAME[] V V V ...    a list of numbers (possibly empty)
        NAME: TEXT          text: the rest of the line after ": ", verbatim
        [NAME]              a new object appended to the top-level list NAME; the fields
                            after it, up to the next [NAME], are that object's

    into the dict the same driver would print as JSON."""
    out: dict = {}
    into = out
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.startswith("[") and line.endswith("]"):
            into = {}
            out.setdefault(line[1:-1], []).append(into)
            continue
        name, _, value = line.partition(" ")
        if name.endswith("[]"):
            into[name[:-2]] = [_number(v) for v in value.split()]
        elif name.endswith(":"):
            into[name[:-1]] = value
        else:
            into[name] = _number(value)
    return out


def _number(text: str) -> int | float:
    text = text.strip()
    try:
        return int(text)
    except ValueError:
        return float(text)


def quantile(ordered: list, q: float):
    """The q-quantile of `ordered` (sorted ascending), nearest rank: the smallest element with
    at least a q share of the elements at or below it."""
    if not ordered:
        raise ValueError("quantile of no samples")
    return ordered[min(max(math.ceil(q * len(ordered)), 1), len(ordered)) - 1]


def per_second(count: float, elapsed_s: float) -> float:
    return round(count / elapsed_s, 1) if elapsed_s > 0 else 0.0


def _us(ns: float) -> float:
    return round(ns / 1e3, 2)


def latency(raw: dict) -> dict:
    """A sequential run (one call at a time) -> n, median / p90 / p99 / mean / min (µs), calls
    per second over the timed loop, client CPU µs per call."""
    samples = sorted(raw.pop("samples_ns"))
    n = len(samples)
    out = {"n": n, "median_us": _us(quantile(samples, 0.5)),
           "p90_us": _us(quantile(samples, 0.9)), "p99_us": _us(quantile(samples, 0.99)),
           "mean_us": _us(sum(samples) / n),
           "min_us": _us(samples[0]), "polls_per_s": per_second(n, raw.pop("elapsed_s")),
           "cpu_us_per_poll": round(raw.pop("cpu_s") * 1e6 / n, 2)}
    out.update(raw)
    return out


def burst_rates(raw: dict) -> dict:
    """A burst driver's levels -> one row each, with polls/s (ok + failed) over the level's
    time (kept as _elapsed_s, for the section to divide the worker's CPU by)."""
    rows = []
    for level in raw["levels"]:
        elapsed = level.pop("elapsed_s")
        row = {"concurrency": level.pop("concurrency"), "bursts": level.pop("bursts"),
               "ok": level.pop("ok"), "failed": level.pop("failed")}
        row["polls_per_s"] = per_second(row["ok"] + row["failed"], elapsed)
        row["first_error"] = str(level.pop("first_error", ""))
        row.update(level)
        row["_elapsed_s"] = elapsed
        rows.append(row)
    raw["levels"] = rows
    return raw


def closed_loop_rate(raw: dict) -> dict:
    """A closed-loop run (CONCURRENCY callers back to back) -> tasks/s (successes)."""
    elapsed = raw.pop("elapsed_s")
    out = {"concurrency": raw.pop("concurrency"), "seconds": round(elapsed, 3),
           "ok": raw.pop("ok"), "failed": raw.pop("failed")}
    out["tasks_per_s"] = per_second(out["ok"], elapsed)
    out["first_error"] = str(raw.pop("first_error", ""))
    out.update(raw)
    return out


def poller_rate(raw: dict) -> dict:
    """The fixed-rate poller -> the rate it achieved (ok + failed)."""
    elapsed = raw.pop("elapsed_s")
    out = {"ok": raw.pop("ok"), "failed": raw.pop("failed")}
    out["polls_per_s"] = per_second(out["ok"] + out["failed"], elapsed)
    out.update(raw)
    return out


def sweep_times(raw: dict) -> dict:
    """One process's sweeps (the first cold, the rest warm) -> their times in ms."""
    ms = [round(ns / 1e6, 2) for ns in raw.pop("sweep_ns")]
    out = {"endpoints": raw.pop("endpoints"), "concurrency": raw.pop("concurrency"),
           "cold_ms": ms[0], "warm_ms": ms[1:], "failures": raw.pop("failures"),
           "first_error": str(raw.pop("first_error", ""))}
    out.update(raw)
    return out


def listing_times(raw: dict) -> dict:
    """Registry listings (kept LocalDiscovery, and a fresh one each time) -> the first, median,
    p90, min and mean (µs), CPU µs per kept listing, the fresh ones' median, and the polls made
    in the same process (latency)."""
    kept, fresh = raw.pop("kept_ns"), sorted(raw.pop("fresh_ns"))
    ordered = sorted(kept)
    counts = raw.pop("counts")
    out = {"namespace": raw.pop("namespace"), "reps": len(kept),
           "workers": max(counts, default=0), "counts": counts, "first_us": _us(kept[0]),
           "median_us": _us(quantile(ordered, 0.5)), "p90_us": _us(quantile(ordered, 0.9)),
           "min_us": _us(ordered[0]), "mean_us": _us(sum(kept) / len(kept)),
           "cpu_us_per_list": round(raw.pop("cpu_s") * 1e6 / len(kept), 2),
           "fresh_median_us": _us(quantile(fresh, 0.5))}
    if "poll" in raw:
        out["poll"] = latency(raw.pop("poll"))
    out.update(raw)
    return out


def scaler_calls(raw: dict) -> dict:
    """A scaler's GetMetrics calls -> the anchor's sweeps (sweep_times) and each kind of call
    (fresh, cached: latency, with its counts)."""
    out = {"endpoints": raw.pop("endpoints"), "sweep": sweep_times(raw.pop("sweep")),
           "fresh": latency(raw.pop("fresh")), "cached": latency(raw.pop("cached"))}
    out.update(raw)
    return out


def cross_cpu_wakeup(layouts: dict) -> dict | None:
    """What one cross-CPU wake-up costs on this machine, from the floor (g), a one-byte TCP
    ping-pong between two processes, measured in layout split (two CPUs: each round trip wakes
    the other CPU twice) and shared (one CPU: no cross-CPU wake-up): (split median - shared
    median) / 2 per one-way wake (the inter-processor interrupt, the sleeping CPU's way out of
    idle, the cache lines that move). With it, (b)'s split - shared difference in wakes: how
    much of a slow sequential poll is the machine's wake-ups, not the library. None unless
    both layouts ran."""
    split, shared = (layouts.get(k, {}) for k in ("split", "shared"))
    if "g" not in split or "g" not in shared:
        return None
    a, b = split["g"]["median_us"], shared["g"]["median_us"]
    out = {"per_wake_us": round((a - b) / 2, 2), "split_floor_median_us": a,
           "shared_floor_median_us": b,
           "formula": "(split floor (g) median - shared floor (g) median) / 2"}
    if "b" in split and "b" in shared:
        diff = split["b"]["median_us"] - shared["b"]["median_us"]
        out["b_split_minus_shared_us"] = round(diff, 2)
        out["b_difference_in_wakes"] = round(diff / out["per_wake_us"], 2) \
            if out["per_wake_us"] > 0 else None
    return out


# ---------------------------------------------------------------- the sections


LAYOUTS = {  # name: (client CPU, worker CPU) or None = not pinned
    "split": ("0", "1"),
    "shared": ("0", "0"),
    "free": None,
}


def section_sequential(tools: dict, addr: str, worker: Server, rounds: int,
                       layout: str = "free") -> dict:
    """Every layer, round by round, with client and worker placed on CPUs as `layout` says:
    client commands run under `taskset -c`, the worker's threads are pinned for the section."""
    n, warmup = CFG["SEQ_N"], CFG["SEQ_WARMUP"]
    cpus = LAYOUTS[layout]
    if cpus and max(int(c) for c in cpus) >= (os.cpu_count() or 1):
        log(f"layout {layout} needs CPU {max(cpus)}: running unpinned instead")
        cpus = None
    prefix = ["taskset", "-c", cpus[0]] if cpus else []
    all_cpus = set(range(os.cpu_count() or 1))
    bench = tools["bench"]
    py = tools["wool_python"]
    libenv = dict(os.environ, LIBWOOL_PATH=str(tools["libwool"]))
    layers = {
        "a": ("raw tonic stub, current_thread", [bench, "seq-raw", addr, n, warmup, "current"], {}),
        "a_mt": ("raw tonic stub, multi_thread", [bench, "seq-raw", addr, n, warmup, "multi"], {}),
        "b": ("WorkerConnection::idle, current_thread",
              [bench, "seq-conn", addr, n, warmup, "current"], {}),
        "b_mt": ("WorkerConnection::idle, multi_thread",
                 [bench, "seq-conn", addr, n, warmup, "multi"], {}),
        "b_nk": ("WorkerConnection::idle, current_thread, keepalive off (all others: on)",
                 [bench, "seq-conn", addr, n, warmup, "current", "no-keepalive"], {}),
        "c": ("wool_idle from C", [tools["c_idle"], "seq", addr, n, warmup], {}),
        "d": ("Go binding (cgo)", [tools["go"], addr, n, warmup], {}),
        "e": ("Python ctypes binding", [py, ROOT / "benches/python/ctypes_idle.py", addr, n, warmup],
              {"env": libenv}),
        "f": ("Wool 0.15.7 Python WorkerConnection.idle()",
              [py, ROOT / "benches/python/wool_client_bench.py", "seq", addr, n, warmup], {}),
    }
    if tools.get("grpc_go"):
        # The anchor: a stock gRPC client (grpc-go, raw []byte codec, no generated code).
        layers["h"] = ("grpc-go, raw codec, one ClientConn",
                       [tools["grpc_go"], "seq", addr, n, warmup], {})
    uds_worker = None
    if CFG["UDS"]:
        sock = OUT / "tmp" / f"wool-bench-{os.getpid()}.sock"
        uds_worker = Server("wool-worker (unix socket)",
                            [tools["worker"], "--listen", f"unix:{sock}"],
                            stderr=subprocess.DEVNULL)
        layers["c_uds"] = ("wool_idle from C over a Unix socket (extra)",
                           [tools["c_idle"], "seq", uds_worker.address, n, warmup], {})
    runs: dict[str, list[dict]] = {k: [] for k in layers}
    runs["g"] = []
    servers = [worker] + ([uds_worker] if uds_worker else [])
    if cpus:
        for server in servers:
            set_affinity(server.proc.pid, {int(cpus[1])})
    where = layout
    for r in range(rounds):
        for key, (label, argv, kw) in layers.items():
            log(f"sequential ({where}) round {r + 1}/{rounds}: ({key}) {label}")
            serving = uds_worker if key == "c_uds" else worker
            w0 = serving.cpu_seconds()
            res = run_driver(prefix + [str(x) for x in argv], label, latency, **kw)
            res["_worker_cpu_s"] = serving.cpu_seconds() - w0
            runs[key].append(res)
        log(f"sequential ({where}) round {r + 1}/{rounds}: (g) floor, one-byte TCP ping-pong")
        ping = [str(tools["pingpong"]), CFG["FLOOR_N"], 2000] + (list(cpus) if cpus else [])
        runs["g"].append(run_driver(ping, "pingpong", latency))
    if cpus:
        set_affinity(worker.proc.pid, all_cpus)
    if uds_worker is not None:
        uds_worker.stop()
    out = {}
    labels = {k: v[0] for k, v in layers.items()}
    labels["g"] = "floor: 1-byte TCP ping-pong, 2 processes"
    for key, rs in runs.items():
        med = lambda f: round(statistics.median(x[f] for x in rs), 2)  # noqa: E731
        calls = sum(x["n"] for x in rs) + (0 if key == "g" else warmup * len(rs))
        row = {"label": labels[key], "median_us": med("median_us"), "p99_us": med("p99_us"),
               "mean_us": med("mean_us"), "min_us": med("min_us"),
               "polls_per_s": med("polls_per_s"), "n_per_round": rs[0]["n"], "rounds": len(rs),
               "rounds_median_us": [x["median_us"] for x in rs]}
        # Client CPU: the driver's own process CPU over its timed loop (all threads; for (g)
        # the client half only). Worker CPU: wool-worker's /proc CPU over the whole run.
        row["client_cpu_us_per_poll"] = med("cpu_us_per_poll")
        if key != "g":
            row["worker_cpu_us_per_poll"] = round(
                sum(x["_worker_cpu_s"] for x in rs) / calls * 1e6, 1)
        out[key] = row
    a, g = out["a"]["median_us"], out["g"]["median_us"]
    h = out["h"]["median_us"] if "h" in out else None
    for row in out.values():
        row["ratio_to_a"] = round(row["median_us"] / a, 2)
        row["ratio_to_g"] = round(row["median_us"] / g, 2)
        if h:
            row["ratio_to_h"] = round(row["median_us"] / h, 2)
    return out


def section_concurrency(tools: dict, addr: str, worker: Server) -> dict:
    """Bursts on one connection, one driver process per (client, level), so that the worker's
    CPU can be read per cell: worker_busy = worker CPU seconds per second of measuring (1.0 = a
    whole core: a single-threaded worker is then the bottleneck)."""
    levels, secs = CFG["LEVELS"], CFG["BURST_SECONDS"]
    drivers = {
        "rust_tasks": ("Rust tasks on one WorkerConnection",
                       lambda lv: [tools["bench"], "burst", addr, lv, secs]),
        "rust_tasks_nk": ("Rust tasks on one WorkerConnection, keepalive off",
                          lambda lv: [tools["bench"], "burst", addr, lv, secs, "no-keepalive"]),
        "c_threads": ("C threads on one wool_connection handle (<= 256 threads)",
                      lambda lv: [tools["c_idle"], "burst", addr, lv, secs]),
        "c_queue": ("C, ONE thread, N in flight on one handle (completion queue)",
                    lambda lv: [tools["c_idle"], "queue", addr, lv, secs]),
        "wool_python": ("Wool's Python client, asyncio.gather on one WorkerConnection",
                        lambda lv: [tools["wool_python"],
                                    ROOT / "benches/python/wool_client_bench.py", "burst", addr,
                                    lv, secs]),
    }
    # The Go driver's burst mode (goroutines on one Connection), where the driver has one.
    go_source = ROOT / "benches/go/main.go"
    go_burst = [tools["go"], "burst"] if tools.get("go") and '"burst"' in go_source.read_text() \
        else None
    if go_burst:
        drivers["go_goroutines"] = ("Go goroutines on one Connection (binding, queue)",
                                    lambda lv: go_burst + [addr, lv, secs])
    asyncio_driver = ROOT / "benches/python/asyncio_idle.py"
    if asyncio_driver.exists():
        drivers["py_asyncio"] = ("libwool asyncio (Python), one connection",
                                 lambda lv: [tools["wool_python"], asyncio_driver, "burst", addr,
                                             lv, secs])
    if tools.get("grpc_go"):
        drivers["grpc_go"] = ("grpc-go goroutines on one ClientConn (raw codec)",
                              lambda lv: [tools["grpc_go"], "burst", addr, lv, secs])
    out: dict = {"levels": [int(x) for x in levels.split(",")], "c_max_threads": 256}
    for key, (label, argv) in drivers.items():
        rows = []
        for level in out["levels"]:
            if key == "c_threads" and level > out["c_max_threads"]:
                continue
            log(f"concurrency: {label}, N = {level}")
            w0 = worker.cpu_seconds()
            kw = {"env": dict(os.environ, LIBWOOL_PATH=str(tools["libwool"]))} \
                if key == "py_asyncio" else {}
            res = run_driver(argv(str(level)), f"{key} burst {level}", burst_rates, timeout=900,
                           **kw)
            busy_cpu = worker.cpu_seconds() - w0
            for row in res["levels"]:
                polls = row["ok"] + row["failed"]
                seconds = row.pop("_elapsed_s")
                row["worker_busy"] = round(busy_cpu / seconds, 2) if seconds else None
                row["worker_cpu_us_per_poll"] = round(busy_cpu / max(polls, 1) * 1e6, 1)
                # the whole driver process, start-up included (Python's is ~0.5 s of it)
                row["client_cpu_us_per_poll"] = round(res["_cpu_s"] / max(polls, 1) * 1e6, 1)
                row["client_busy"] = round(res["_cpu_s"] / seconds, 2) if seconds else None
                rows.append(row)
            out["c_max_threads"] = res.get("max_threads", out["c_max_threads"])
        out[key] = rows
    return out


FLEET_HOSTS = {  # key: label in the tables
    "rust": "Rust, wool::fleet::sweep",
    "c": "C, wool_idle_many",
    "go": "Go, IdleMany",
    "py_aio": "Python, libwool.aio.idle_many",
    "py_sync": "Python, libwool.fleet.sweep (blocking)",
    "woolctl": "woolctl sweep (a process per sweep: cold only)",
}


def fleet_serve(tools: dict, total: int, per_server: int) -> tuple[list, list[list[str]], float]:
    """Starts ceil(total / per_server) `wool_bench fleet-serve` processes at once (one port per
    Worker: the fd limit caps a process's listeners); returns them and their addresses."""
    count = max(1, -(-total // per_server))
    sizes = [total // count + (1 if i < total % count else 0) for i in range(count)]
    log(f"fleet: serving {total} workers from {count} process(es) ({', '.join(map(str, sizes))})")
    t = time.perf_counter()
    procs = [subprocess.Popen([str(tools["bench"]), "fleet-serve", str(n)], stdout=subprocess.PIPE,
                              stdin=subprocess.PIPE, text=True) for n in sizes]
    addrs: list[list[str]] = []
    for proc, n in zip(procs, sizes):
        got = []
        for line in proc.stdout:
            line = line.strip()
            if line == "ready":
                break
            got.append(line)
        if len(got) != n:
            stop_fleet(procs)
            raise RuntimeError(f"fleet-serve gave {len(got)} addresses, wanted {n}")
        addrs.append(got)
    return procs, addrs, time.perf_counter() - t


def interleave(per_server: list[list[str]]) -> list[str]:
    """The addresses round-robin over the servers, so that any prefix is spread over all."""
    out = [a for group in zip(*per_server) for a in group]
    return out + [a for group in per_server for a in group[min(map(len, per_server)):]]


def fleet_sizes() -> list[int]:
    return [int(x) for x in str(CFG["FLEET_SIZES"]).split(",") if x.strip()]


def stop_fleet(procs: list) -> None:
    for proc in procs:
        try:
            proc.stdin.close()
        except OSError:
            pass
    for proc in procs:
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def woolctl_sweep(tools: dict, addrs: list[str], conc: int, timeout: float) -> dict:
    """One `woolctl sweep` process over `addrs` (JSON output): its wall time is the cold sweep
    (process start, connections, polls, output)."""
    argv = [str(tools["woolctl"]), "--output", "json", "--max-in-flight", str(conc),
            "--rpc-timeout", f"{timeout:g}s", "sweep", *addrs]
    before = children_cpu()
    t = time.perf_counter_ns()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    wall_ns = time.perf_counter_ns() - t
    cpu = children_cpu() - before
    rows = [json.loads(l) for l in done.stdout.splitlines() if l.strip().startswith("{")]
    if done.returncode not in (0, 1) or len(rows) != len(addrs):
        raise RuntimeError(f"woolctl sweep failed ({done.returncode}, {len(rows)} rows): "
                           f"{done.stderr.strip()[-2000:]}")
    failed = [r for r in rows if not r.get("ok")]
    res = sweep_times({"endpoints": len(rows), "concurrency": conc, "sweep_ns": [wall_ns],
                       "failures": [len(failed)],
                       "first_error": json.dumps(failed[0].get("error")) if failed else ""})
    res["_cpu_s"] = cpu
    return res


def section_fleet(tools: dict) -> dict:
    """Sweeps of FLEET_SIZES workers from every host, side by side: the fleet is served once
    (several fleet-serve processes), each size is an interleaved subset of it (every server
    alike), and the hosts run round-robin, one process per (run, size, host): one cold sweep
    then FLEET_SWEEPS warm ones in that process (woolctl: the one cold sweep)."""
    sizes = fleet_sizes()
    conc, sweeps, timeout = CFG["FLEET_CONCURRENCY"], CFG["FLEET_SWEEPS"], CFG["FLEET_TIMEOUT"]
    libenv = dict(os.environ, LIBWOOL_PATH=str(tools["libwool"]))
    py = str(tools["wool_python"])
    driver = str(ROOT / "benches/python/fleet_sweep.py")
    hosts = {
        "rust": lambda path: [tools["bench"], "sweep", path, conc, sweeps, timeout],
        "c": lambda path: [tools["c_idle"], "many", path, conc, sweeps, timeout],
    }
    if tools.get("go") and '"sweep"' in (ROOT / "benches/go/main.go").read_text():
        hosts["go"] = lambda path: [tools["go"], "sweep", path, conc, sweeps, timeout]
    hosts["py_aio"] = lambda path: [py, driver, "aio", path, conc, sweeps, timeout]
    fleet_py = ROOT / "bindings/python/libwool/fleet.py"
    if fleet_py.exists() and "\ndef sweep(" in fleet_py.read_text():
        hosts["py_sync"] = lambda path: [py, driver, "sync", path, conc, sweeps, timeout]
    if tools.get("woolctl") and Path(tools["woolctl"]).is_file():
        hosts["woolctl"] = None
    wanted = set(filter(None, str(CFG["FLEET_HOSTS"]).split(",")))
    hosts = {k: v for k, v in hosts.items() if not wanted or k in wanted}
    procs, per_server, started = fleet_serve(tools, max(sizes), CFG["FLEET_PER_SERVER"])
    interleaved = interleave(per_server)
    runs: dict[int, dict[str, list[dict]]] = {n: {k: [] for k in hosts} for n in sizes}
    paths = {}
    for n in sizes:
        paths[n] = OUT / "tmp" / f"fleet-{n}.addrs"
        paths[n].write_text("\n".join(interleaved[:n]) + "\n")
    try:
        for r in range(CFG["FLEET_COLD_RUNS"]):
            for n in sizes:
                for key, argv in hosts.items():
                    log(f"fleet: run {r + 1}/{CFG['FLEET_COLD_RUNS']}, {n:,} workers, "
                        f"{FLEET_HOSTS[key]} ({conc} in flight)")
                    if key == "woolctl":
                        res = woolctl_sweep(tools, interleaved[:n], conc, timeout)
                    else:
                        res = run_driver([str(x) for x in argv(paths[n])], f"fleet {key} {n}",
                                       sweep_times, env=libenv)
                    runs[n][key].append(res)
                    # Let the servers close the last client's connections.
                    time.sleep(0.3 + n / 10000)
    finally:
        stop_fleet(procs)
    med = lambda xs: round(statistics.median(xs), 2) if xs else None  # noqa: E731
    out: dict = {"sizes": {}, "hosts": {k: FLEET_HOSTS[k] for k in hosts},
                 "concurrency": conc, "timeout_s": timeout, "sweeps_per_process": sweeps,
                 "processes_per_host": CFG["FLEET_COLD_RUNS"], "servers": len(procs),
                 "fleet_start_s": round(started, 2)}
    for n in sizes:
        table = {}
        for key, rs in runs[n].items():
            cold = [x["cold_ms"] for x in rs]
            warm = [t for x in rs for t in x["warm_ms"]]
            table[key] = {"cold_ms": cold, "cold_median_ms": med(cold), "warm_ms": warm,
                          "warm_median_ms": med(warm),
                          "warm_p90_ms": quantile(sorted(warm), 0.9) if warm else None,
                          "failures": sum(sum(x["failures"]) for x in rs),
                          "first_error": first_error(rs),
                          "client_cpu_s": [round(x.get("_cpu_s", 0), 3) for x in rs]}
        out["sizes"][str(n)] = table
    # The keys of the earlier single-size section (BENCHMARKS.png, older readers): the
    # smallest size, Rust and C.
    small = out["sizes"][str(min(sizes))]
    rust = small.get("rust", {})
    out.update({"endpoints": min(sizes), "cold_median_ms": rust.get("cold_median_ms"),
                "warm_median_ms": rust.get("warm_median_ms"), "failures": rust.get("failures", 0)})
    if "c" in small:
        out["c_many"] = {k: small["c"][k] for k in ("cold_median_ms", "warm_median_ms",
                                                     "failures")}
    return out


def section_scaler(tools: dict) -> dict:
    """A KEDA scaler (wool::scaler, in the driver's process) answering GetMetrics for
    SCALER_WORKERS workers named by `targets`, one call at a time: with a fresh sweep each
    (maxSweepAge 0) and from the cached sweep (1h), against the anchor, one warm
    wool::fleet::sweep of the same workers by the same process (`wool_bench scaler`). The
    workers are spread over as many fleet-serve processes as section 3 serves its largest size
    from, as its subset of that size is; SCALER_RUNS driver processes; medians of theirs."""
    n, reps, timeout = CFG["SCALER_WORKERS"], CFG["SCALER_REPS"], CFG["FLEET_TIMEOUT"]
    servers = max(1, -(-max(fleet_sizes() + [n]) // CFG["FLEET_PER_SERVER"]))
    procs, per_server, started = fleet_serve(tools, n, -(-n // servers))
    path = OUT / "tmp" / f"scaler-{n}.addrs"
    path.write_text("\n".join(interleave(per_server)) + "\n")
    runs = []
    try:
        for r in range(CFG["SCALER_RUNS"]):
            log(f"scaler: run {r + 1}/{CFG['SCALER_RUNS']}, {n:,} workers: {reps} warm sweeps, "
                f"{reps} fresh GetMetrics, then cached ones")
            runs.append(run_driver([tools["bench"], "scaler", path, reps, timeout],
                                   f"scaler {n}", scaler_calls))
            # Let the servers close the last client's connections.
            time.sleep(0.3 + n / 10000)
    finally:
        stop_fleet(procs)
    med = lambda xs: round(statistics.median(xs), 3)  # noqa: E731
    warm = [sorted(x["sweep"]["warm_ms"]) for x in runs]
    out: dict = {"workers": n, "servers": len(procs), "fleet_start_s": round(started, 2),
                 "runs": len(runs), "timeout_s": timeout,
                 "concurrency": runs[0]["sweep"]["concurrency"],
                 "sweep": {"warm_median_ms": med([quantile(w, 0.5) for w in warm]),
                           "warm_p90_ms": med([quantile(w, 0.9) for w in warm]),
                           "cold_median_ms": med([x["sweep"]["cold_ms"] for x in runs]),
                           "sweeps_per_run": len(warm[0]),
                           "failures": sum(sum(x["sweep"]["failures"]) for x in runs),
                           "first_error": first_error(x["sweep"] for x in runs)}}
    sweep_us = out["sweep"]["warm_median_ms"] * 1e3
    # Fresh calls back to back wait for the fleet's next allowed sweep: the scaler sweeps one
    # fleet at most POLLS_PER_SECOND_PER_FLEET polls a second (its tenant bound), so a fresh
    # answer cannot come sooner than n / that bound, however fast one sweep is.
    bound = runs[0].get("polls_per_second_per_fleet")
    out["polls_per_second_per_fleet"] = bound
    out["fresh_floor_ms"] = round(max(sweep_us, n / bound * 1e6 if bound else 0) / 1e3, 3)
    for kind in ("fresh", "cached"):
        anchor_us = out["fresh_floor_ms"] * 1e3 if kind == "fresh" else sweep_us
        rs = [x[kind] for x in runs]
        row = {k: med([x[k] for x in rs]) for k in ("median_us", "p90_us", "cpu_us_per_poll")}
        row.update(calls_per_run=rs[0]["n"], ok=sum(x["ok"] for x in rs),
                   failed=sum(x["failed"] for x in rs), first_error=first_error(rs))
        row["runs_median_us"] = [x["median_us"] for x in rs]
        row["ratio_to_sweep"] = round(row["median_us"] / anchor_us, 4) if anchor_us else None
        out[kind] = row
    return out


def first_error(results) -> str:
    """The first non-empty first_error of `results`."""
    return next((str(x["first_error"]) for x in results if x.get("first_error")), "")


def section_discovery(tools: dict, worker: Server) -> dict:
    """A local registry of DISCOVERY_WORKERS workers written by Wool 0.15.7's own publisher
    (benches/python/wool_registry.py, kept alive meanwhile), listed DISCOVERY_REPS times by
    `wool_bench discover` (LocalDiscovery::new(ns)?.list()), with sequential
    WorkerConnection::idle polls of wool-worker in the same process for comparison; then the
    same listings under `strace -c` for the syscalls per listing."""
    n, reps = CFG["DISCOVERY_WORKERS"], CFG["DISCOVERY_REPS"]
    namespace = f"libwool-bench-{os.getpid()}"
    log(f"discovery: Wool's LocalDiscovery publishing {n} workers in namespace {namespace}")
    registry = subprocess.Popen([str(tools["wool_python"]),
                                 str(ROOT / "benches/python/wool_registry.py"), namespace, str(n)],
                                stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True)
    out: dict = {"namespace": namespace, "published": n}
    try:
        line = registry.stdout.readline().strip()
        if not line.startswith("ready"):
            raise RuntimeError(f"wool_registry.py: expected ready, got {line!r}")
        out["publisher"] = json.loads(line[len("ready"):])
        log(f"discovery: {reps} listings, then {CFG['DISCOVERY_POLL_N']} sequential polls")
        res = run_driver([str(tools["bench"]), "discover", namespace, str(reps), worker.address,
                        str(CFG["DISCOVERY_POLL_N"])], "discover", listing_times)
        out.update({k: res[k] for k in ("reps", "workers", "counts", "first_us", "median_us",
                                        "p90_us", "min_us", "mean_us", "cpu_us_per_list",
                                        "fresh_median_us")})
        out["poll_same_process"] = {k: res["poll"][k] for k in ("n", "median_us", "p99_us",
                                                                "cpu_us_per_poll")}
        if CFG["DISCOVERY_STRACE"] and shutil.which("strace"):
            out["strace"] = strace_listings(tools, namespace, CFG["DISCOVERY_STRACE_REPS"], n)
    finally:
        try:
            registry.stdin.close()
        except OSError:
            pass
        try:
            registry.wait(30)
        except subprocess.TimeoutExpired:
            registry.kill()
            registry.wait()
    return out


def strace_listings(tools: dict, namespace: str, reps: int, workers: int) -> dict:
    """Syscalls of `reps` listings on a kept `LocalDiscovery` (strace -c -f; no fresh ones:
    WOOL_BENCH_FRESH=0), less those of a run with 1 listing, per listing and per record."""
    def counts(k: int) -> dict[str, int]:
        path = OUT / "tmp" / f"strace-discover-{k}.txt"
        subprocess.run(["strace", "-c", "-f", "-o", str(path), str(tools["bench"]), "discover",
                        namespace, str(k)], capture_output=True, text=True, check=True,
                       timeout=300, env=dict(os.environ, WOOL_BENCH_FRESH="0"))
        table = {}
        for row in path.read_text().splitlines():
            cols = row.split()
            # % time, seconds, usecs/call, calls, [errors,] syscall
            if len(cols) >= 5 and cols[-1] not in ("total", "syscall") and cols[3].isdigit():
                table[cols[-1]] = int(cols[3])
        return table
    log(f"discovery: strace -c of {reps} listings")
    one, many = counts(1), counts(reps + 1)
    per = {name: round((many.get(name, 0) - one.get(name, 0)) / reps, 2)
           for name in set(one) | set(many)}
    per = {k: v for k, v in sorted(per.items(), key=lambda kv: -kv[1]) if v > 0}
    total = sum(per.values())
    return {"reps": reps, "syscalls_per_list": round(total, 1),
            "syscalls_per_record": round(total / max(workers, 1), 2), "per_list": per}


def measure_handles(argv: list[str], port: int, what: str, **kw) -> dict:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True, **kw)
    try:
        line = proc.stdout.readline().strip()
        if not line.startswith("ready"):
            raise RuntimeError(f"{what}: expected ready, got {line!r}")
        info = json.loads(line[len("ready"):])
        time.sleep(0.2)
        mem = proc_memory(proc.pid, port)
        mem["failed_polls"] = info.get("failed", 0)
        proc.stdin.write("\n")
        proc.stdin.flush()
        proc.stdin.close()
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return mem


def section_memory(tools: dict, addr: str) -> dict:
    port = int(addr.rsplit(":", 1)[1])
    counts = [int(x) for x in CFG["MEM_HANDLES"].split(",")]
    out: dict[str, dict] = {"WorkerConnection (Rust)": {}, "wool_connect (C)": {}}
    if CFG["MEM_WOOL"]:
        out["Wool Python WorkerConnection"] = {}
    for count in counts:
        log(f"memory: {count} WorkerConnection handles (Rust)")
        out["WorkerConnection (Rust)"][str(count)] = measure_handles(
            [str(tools["bench"]), "handles", addr, str(count)], port, "rust handles")
        log(f"memory: {count} wool_connect handles (C)")
        out["wool_connect (C)"][str(count)] = measure_handles(
            [str(tools["c_idle"]), "handles", addr, str(count)], port, "c handles")
        if CFG["MEM_WOOL"]:
            log(f"memory: {count} Wool Python WorkerConnection objects")
            out["Wool Python WorkerConnection"][str(count)] = measure_handles(
                [str(tools["wool_python"]), str(ROOT / "benches/python/wool_client_bench.py"),
                 "handles", addr, str(count)], port, "wool handles")
    for per in out.values():
        if len(counts) >= 2:
            lo, hi = per[str(counts[0])], per[str(counts[-1])]
            per["bytes_per_extra_handle"] = round(
                (hi["rss_mib"] - lo["rss_mib"]) * 1024 * 1024 / (counts[-1] - counts[0]))
    return out


def section_dispatch(tools: dict, addr: str, worker: Server) -> dict:
    secs, conc, nbytes = CFG["DISPATCH_SECONDS"], CFG["DISPATCH_CONCURRENCY"], CFG["DISPATCH_BYTES"]
    bench, py = str(tools["bench"]), str(tools["wool_python"])
    tmp = OUT / "tmp"
    wool_tpl, rust_tpl = tmp / "task-wool.pb", tmp / "task-rust.pb"
    subprocess.run([py, ROOT / "benches/python/wool_dispatch.py", "template-wool", wool_tpl,
                    str(nbytes)], check=True)
    subprocess.run([py, ROOT / "benches/python/wool_dispatch.py", "template-rust", rust_tpl,
                    str(nbytes)], check=True)
    out: dict = {"concurrency": conc, "payload_bytes": nbytes, "seconds": secs}

    def ours(label: str) -> dict:
        w0 = worker.cpu_seconds()
        res = run_driver([bench, "dispatch", addr, str(conc), str(secs), str(nbytes)], label,
                       closed_loop_rate)
        res["worker_cpu_us_per_task"] = round(
            (worker.cpu_seconds() - w0) / max(res["ok"], 1) * 1e6, 1)
        return res

    log("dispatch: ours, WorkerConnection::dispatch(echo)")
    out["ours_connection"] = ours("dispatch")
    log("dispatch: ours, raw stub replaying a Task (the same client code as for Wool)")
    out["ours_raw"] = run_driver([bench, "dispatch-raw", addr, str(conc), str(secs), str(rust_tpl)],
                               "dispatch-raw ours", closed_loop_rate)

    log("dispatch: starting a Wool 0.15.7 Python worker (LocalWorker)")
    wool = Server("Wool Python worker", [py, str(ROOT / "tests/interop/wool_worker.py"),
                                         "--ignore-stdin"], stderr=subprocess.DEVNULL)
    try:
        log("dispatch: Wool worker, raw stub replaying Wool's own Task encoding")
        out["wool_raw"] = run_driver([bench, "dispatch-raw", wool.address, str(conc), str(secs),
                                    str(wool_tpl)], "dispatch-raw wool", closed_loop_rate)
        log("dispatch: Wool worker, Wool's own client (WorkerProxy + @wool.routine echo)")
        out["wool_e2e"] = run_driver([py, str(ROOT / "benches/python/wool_dispatch.py"), "e2e",
                                    wool.address, str(conc), str(secs), str(nbytes)], "wool e2e",
                                   closed_loop_rate)
    finally:
        wool.stop()

    # Idle accounting under load: alternate runs without / with a 1 kHz poller process.
    off, on, pollers = [], [], []
    for r in range(CFG["IDLE_COST_REPS"]):
        log(f"idle cost {r + 1}/{CFG['IDLE_COST_REPS']}: echo without a poller")
        off.append(ours("dispatch, no poller"))
        log(f"idle cost {r + 1}/{CFG['IDLE_COST_REPS']}: echo with a {CFG['POLLER_HZ']:.0f} Hz "
            f"idle poller")
        poller = subprocess.Popen([bench, "poller", addr, str(CFG["POLLER_HZ"]), str(secs + 30)],
                                  stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True)
        if poller.stdout.readline().strip() != "started":
            raise RuntimeError("poller did not start")
        p0 = Path(f"/proc/{poller.pid}/stat")
        try:
            on.append(ours("dispatch, with poller"))
            fields = p0.read_text().rsplit(")", 1)[1].split()
            poller_cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK
        finally:
            poller.stdin.close()
        res = poller_rate(parse_output(poller.stdout.read()))
        poller.wait(30)
        res["cpu_s"] = poller_cpu
        pollers.append(res)
    med = lambda rs, f: statistics.median(x[f] for x in rs)  # noqa: E731
    t_off, t_on = med(off, "tasks_per_s"), med(on, "tasks_per_s")
    out["idle_cost"] = {
        "without_poller": [x["tasks_per_s"] for x in off],
        "with_poller": [x["tasks_per_s"] for x in on],
        "median_without": t_off, "median_with": t_on,
        "cost_pct": round((t_off - t_on) / t_off * 100, 2),
        "worker_cpu_us_per_task_without": round(med(off, "worker_cpu_us_per_task"), 2),
        "worker_cpu_us_per_task_with": round(med(on, "worker_cpu_us_per_task"), 2),
        "poller": pollers,
        "failures": sum(x["failed"] for x in off + on),
    }
    # What answering the polls costs the worker, in CPU seconds per second (= share of one core),
    # and so the share of a single-threaded worker's capacity it would take were the worker the
    # bottleneck (on this 2-core machine the client usually is, and the throughput delta above
    # is then mostly noise).
    ic = out["idle_cost"]
    busy_off = ic["worker_cpu_us_per_task_without"] * t_off / 1e6
    busy_on = ic["worker_cpu_us_per_task_with"] * t_on / 1e6
    ic["worker_busy_without"] = round(busy_off, 3)
    ic["worker_busy_with"] = round(busy_on, 3)
    ic["poll_cpu_share_of_one_core_pct"] = round((busy_on - busy_off) * 100, 2)
    out["ratio_ours_to_wool_raw"] = round(out["ours_raw"]["tasks_per_s"] /
                                          out["wool_raw"]["tasks_per_s"], 1)
    out["ratio_ours_to_wool_e2e"] = round(out["ours_connection"]["tasks_per_s"] /
                                          out["wool_e2e"]["tasks_per_s"], 1)
    return out


def _rounds_row(label: str, rs: list[dict], warmup: int) -> dict:
    """Sequential runs of one driver (latency, with _worker_cpu_s): medians of the rounds."""
    med = lambda f: round(statistics.median(x[f] for x in rs), 2)  # noqa: E731
    calls = sum(x["n"] for x in rs) + warmup * len(rs)
    return {"label": label, "median_us": med("median_us"), "p90_us": med("p90_us"),
            "p99_us": med("p99_us"), "mean_us": med("mean_us"), "min_us": med("min_us"),
            "polls_per_s": med("polls_per_s"), "n_per_round": rs[0]["n"], "rounds": len(rs),
            "rounds_median_us": [x["median_us"] for x in rs],
            "client_cpu_us_per_poll": med("cpu_us_per_poll"),
            "worker_cpu_us_per_poll": round(sum(x["_worker_cpu_s"] for x in rs) / calls * 1e6, 1)}


def section_tls(tools: dict, plain: Server) -> dict:
    """Mutual TLS, ours against grpc-go. A throwaway PKI made now (`wool_bench tls-certs`,
    into target/bench/tls), a wool-worker requiring client certificates signed by its CA, and
    the drivers given the client's material through WOOL_BENCH_TLS (benches/wool_bench.rs,
    benches/c/idle_bench.c, benches/grpc-go). Three parts, each also in plaintext against
    `plain` (the plaintext wool-worker) for what TLS adds: sequential polls (layout split,
    TLS_ROUNDS interleaved rounds), bursts of TLS_LEVELS concurrent polls on one connection
    (unpinned, as section 2), and first polls on new connections (layout split, TLS_FIRST_N a
    process, one process per round and driver)."""
    certs = OUT / "tls"
    shutil.rmtree(certs, ignore_errors=True)
    log(f"tls: a throwaway CA, worker and client certificates in {certs.relative_to(ROOT)}")
    subprocess.run([str(tools["bench"]), "tls-certs", str(certs)], check=True, timeout=60)
    tls_env = dict(os.environ, WOOL_BENCH_TLS=str(certs))
    plain_env = {k: v for k, v in os.environ.items() if k != "WOOL_BENCH_TLS"}
    worker = Server("wool-worker (mutual TLS)",
                    [tools["worker"], "--tls-ca", certs / "ca.pem", "--tls-cert",
                     certs / "worker-cert.pem", "--tls-key", certs / "worker-key.pem"],
                    stderr=subprocess.DEVNULL)
    n, warmup, rounds = CFG["TLS_SEQ_N"], CFG["SEQ_WARMUP"], CFG["TLS_ROUNDS"]
    first_n, first_warmup = CFG["TLS_FIRST_N"], CFG["TLS_FIRST_WARMUP"]
    levels = [int(x) for x in str(CFG["TLS_LEVELS"]).split(",") if x.strip()]
    secs = CFG["BURST_SECONDS"]
    bench, c_idle, grpc_go = tools["bench"], tools["c_idle"], tools.get("grpc_go")
    ta, pa = worker.address, plain.address
    # key: (label, argv, env, worker serving it); grpc-go only where it was built.
    seq = {
        "b": ("(b) WorkerConnection::idle over mTLS, current_thread",
              [bench, "seq-conn", ta, n, warmup, "current"], tls_env, worker),
        "c": ("(c) wool_idle from C over mTLS", [c_idle, "seq", ta, n, warmup], tls_env, worker),
        "h": ("(h) grpc-go over mTLS (credentials.NewTLS, client certificate)",
              [grpc_go, "seq", ta, n, warmup], tls_env, worker),
        "b_plain": ("(b) WorkerConnection::idle, plaintext (the same rounds)",
                    [bench, "seq-conn", pa, n, warmup, "current"], plain_env, plain),
        "h_plain": ("(h) grpc-go, plaintext (the same rounds)",
                    [grpc_go, "seq", pa, n, warmup], plain_env, plain),
    }
    burst = {
        "rust_tasks": ("(b) Rust tasks on one WorkerConnection over mTLS",
                       lambda lv: [bench, "burst", ta, lv, secs], tls_env, worker),
        "c_threads": ("(c) C threads on one wool_connection handle over mTLS",
                      lambda lv: [c_idle, "burst", ta, lv, secs], tls_env, worker),
        "grpc_go": ("(h) grpc-go goroutines on one ClientConn over mTLS",
                    lambda lv: [grpc_go, "burst", ta, lv, secs], tls_env, worker),
        "rust_tasks_plain": ("(b) Rust tasks on one WorkerConnection, plaintext",
                             lambda lv: [bench, "burst", pa, lv, secs], plain_env, plain),
        "grpc_go_plain": ("(h) grpc-go goroutines on one ClientConn, plaintext",
                          lambda lv: [grpc_go, "burst", pa, lv, secs], plain_env, plain),
    }
    first = {
        "ours_plain": ("ours (WorkerConnection), plaintext",
                       [bench, "first", pa, first_n, first_warmup], plain_env, plain),
        "ours_tls": ("ours (WorkerConnection), mTLS",
                     [bench, "first", ta, first_n, first_warmup], tls_env, worker),
        "grpc_go_plain": ("grpc-go, plaintext",
                          [grpc_go, "first", pa, first_n, first_warmup], plain_env, plain),
        "grpc_go_tls": ("grpc-go, mTLS (credentials.NewTLS, client certificate)",
                        [grpc_go, "first", ta, first_n, first_warmup], tls_env, worker),
    }
    if not grpc_go:
        log("tls: no grpc-go anchor: its rows left out")
        for table in (seq, burst, first):
            for key in [k for k in table if k.startswith(("h", "grpc_go"))]:
                del table[key]
    cpus = LAYOUTS["split"]
    if (os.cpu_count() or 1) < 2:
        log("tls: layout split needs 2 CPUs: running unpinned instead")
        cpus = None
    prefix = ["taskset", "-c", cpus[0]] if cpus else []
    all_cpus = set(range(os.cpu_count() or 1))
    out: dict = {"layout": "split" if cpus else "free", "rounds": rounds,
                 "certificates": "rcgen: a CA, worker and client leaves (ECDSA P-256), "
                                 "client certificates required by the worker",
                 "worker_address": ta}
    seq_runs: dict[str, list] = {k: [] for k in seq}
    first_runs: dict[str, list] = {k: [] for k in first}
    try:
        if cpus:
            for server in (worker, plain):
                set_affinity(server.proc.pid, {int(cpus[1])})
        try:
            for r in range(rounds):
                for key, (label, argv, kw_env, serving) in seq.items():
                    log(f"tls: sequential round {r + 1}/{rounds}: {label}")
                    w0 = serving.cpu_seconds()
                    res = run_driver(prefix + [str(x) for x in argv], label, latency, env=kw_env)
                    res["_worker_cpu_s"] = serving.cpu_seconds() - w0
                    seq_runs[key].append(res)
                for key, (label, argv, kw_env, serving) in first.items():
                    log(f"tls: first polls round {r + 1}/{rounds}: {label}, {first_n} new "
                        f"connections")
                    w0 = serving.cpu_seconds()
                    res = run_driver(prefix + [str(x) for x in argv], label, latency, env=kw_env)
                    res["_worker_cpu_s"] = serving.cpu_seconds() - w0
                    first_runs[key].append(res)
        finally:
            if cpus:
                for server in (worker, plain):
                    set_affinity(server.proc.pid, all_cpus)
        out["sequential"] = {k: _rounds_row(seq[k][0], rs, warmup) for k, rs in seq_runs.items()}
        out["first_poll"] = {k: _rounds_row(first[k][0], rs, first_warmup)
                             for k, rs in first_runs.items()}
        out["first_poll_n"] = first_n
        conc: dict = {"levels": levels}
        for key, (label, argv, kw_env, serving) in burst.items():
            rows = []
            for level in levels:
                if key == "c_threads" and level > 256:
                    continue
                log(f"tls: concurrency: {label}, N = {level}")
                w0 = serving.cpu_seconds()
                res = run_driver([str(x) for x in argv(level)], f"tls {key} burst {level}",
                                 burst_rates, timeout=900, env=kw_env)
                busy = serving.cpu_seconds() - w0
                for row in res["levels"]:
                    seconds = row.pop("_elapsed_s")
                    row["worker_busy"] = round(busy / seconds, 2) if seconds else None
                    row["worker_cpu_us_per_poll"] = round(
                        busy / max(row["ok"] + row["failed"], 1) * 1e6, 1)
                    rows.append(row)
            conc[key] = {"label": label, "levels": rows}
        out["concurrency"] = conc
    finally:
        worker.stop()
    # The ratios the targets read: ours over grpc-go (time: lower is better; polls/s: higher
    # is better), and mTLS over plaintext.
    sq, fp = out["sequential"], out["first_poll"]
    ratios: dict = {}
    div = lambda a, b: round(a / b, 2) if a is not None and b else None  # noqa: E731
    if "h" in sq:
        ratios["seq_b_to_h"] = div(sq["b"]["median_us"], sq["h"]["median_us"])
        ratios["seq_c_to_h"] = div(sq["c"]["median_us"], sq["h"]["median_us"])
        ratios["seq_h_tls_to_plain"] = div(sq["h"]["median_us"], sq["h_plain"]["median_us"])
        ratios["seq_plain_b_to_h"] = div(sq["b_plain"]["median_us"], sq["h_plain"]["median_us"])
    ratios["seq_b_tls_to_plain"] = div(sq["b"]["median_us"], sq["b_plain"]["median_us"])
    at = lambda key, lv: next((r for r in conc.get(key, {}).get("levels", [])  # noqa: E731
                               if r["concurrency"] == lv), None)
    for lv in levels:
        ours, theirs, c = at("rust_tasks", lv), at("grpc_go", lv), at("c_threads", lv)
        if ours and theirs:
            ratios[f"burst_{lv}_rust_to_grpc_go"] = div(ours["polls_per_s"], theirs["polls_per_s"])
        if c and theirs:
            ratios[f"burst_{lv}_c_to_grpc_go"] = div(c["polls_per_s"], theirs["polls_per_s"])
    ratios["first_ours_tls_to_plain"] = div(fp["ours_tls"]["median_us"],
                                            fp["ours_plain"]["median_us"])
    if "grpc_go_tls" in fp:
        ratios["first_grpc_go_tls_to_plain"] = div(fp["grpc_go_tls"]["median_us"],
                                                   fp["grpc_go_plain"]["median_us"])
        ratios["first_tls_ours_to_grpc_go"] = div(fp["ours_tls"]["median_us"],
                                                  fp["grpc_go_tls"]["median_us"])
        ratios["first_plain_ours_to_grpc_go"] = div(fp["ours_plain"]["median_us"],
                                                    fp["grpc_go_plain"]["median_us"])
    out["ratios"] = ratios
    return out


# ---------------------------------------------------------------- report


def machine() -> dict:
    model = "?"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    def version(argv):
        try:
            return subprocess.run(argv, capture_output=True, text=True).stdout.strip().splitlines()[0]
        except Exception:
            return "?"
    commit = os.environ.get("BENCH_COMMIT") or version(["git", "-C", str(ROOT), "rev-parse",
                                                        "--short", "HEAD"])
    try:
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "src",
                                "Cargo.toml", "Cargo.lock"], capture_output=True,
                               text=True).stdout.strip()
        if dirty and not os.environ.get("BENCH_COMMIT"):
            commit += " + uncommitted changes"
    except Exception:
        pass
    return {"commit": commit, "nproc": os.cpu_count(), "cpu_model": model,
            "kernel": platform.release(),
            "loadavg_at_start": os.getloadavg(),
            "rustc": version(["rustc", "--version"]), "go": version(["go", "version"]),
            "cc": version(["cc", "--version"]), "python": platform.python_version()}


def targets(res: dict) -> list[dict]:
    seq, conc, disp = res["sequential"], res["concurrency"], res["dispatch"]
    rows = []

    def add(name, goal, value, met, note=""):
        rows.append({"target": name, "goal": goal, "measured": value,
                     "met": None if met is None else bool(met), "note": note})

    c_a = seq["c"]["ratio_to_a"]
    add("(c) wool_idle vs raw tonic (a)", "<= 1.10x", f"{c_a:.2f}x", c_a <= 1.10)
    c_g = seq["c"]["ratio_to_g"]
    add("(c) wool_idle vs floor (g)", "<= 2.0x", f"{c_g:.2f}x", c_g <= 2.0)
    shared = res.get("sequential_layouts", {}).get("shared")
    if shared and "c" in shared and "g" in shared:
        # Both processes on one CPU: no cross-CPU wake-up, so a poll's time is the CPU both
        # sides spend on it, serialised.
        ratio = shared["c"]["median_us"] / shared["g"]["median_us"]
        note = f"{shared['c']['median_us']:.1f} vs {shared['g']['median_us']:.1f} µs"
        if "h" in shared:
            note += f"; grpc-go (h) {shared['h']['median_us'] / shared['g']['median_us']:.2f}x"
        add("(c) wool_idle vs floor (g), shared CPU (the CPU both sides spend per poll)",
            "<= 5x", f"{ratio:.2f}x", ratio <= 5, note)
    by = lambda rows, n: next((r for r in rows if r["concurrency"] == n), None)  # noqa: E731
    r256 = by(conc["rust_tasks"], 256)
    wool_best = max(r["polls_per_s"] for r in conc["wool_python"])
    if r256:
        ratio = r256["polls_per_s"] / wool_best
        add("256 concurrent polls, one connection (Rust) vs Wool Python's best", ">= 4x",
            f"{ratio:.2f}x ({r256['polls_per_s']:.0f} vs {wool_best:.0f} polls/s)", ratio >= 4)
    c256 = by(conc["c_threads"], 256)
    if c256:
        ratio = c256["polls_per_s"] / wool_best
        rows.append({"target": "  same, C threads on one handle", "goal": ">= 4x",
                     "measured": f"{ratio:.2f}x ({c256['polls_per_s']:.0f} polls/s)",
                     "met": ratio >= 4, "note": ""})
    if "b_nk" in seq:
        ratio = seq["b"]["median_us"] / seq["b_nk"]["median_us"]
        add("keepalive on vs off: sequential (b) median", "<= 1.05x", f"{ratio:.2f}x",
            ratio <= 1.05, f"{seq['b']['median_us']:.1f} vs {seq['b_nk']['median_us']:.1f} µs")
    ki = res.get("keepalive_instructions")
    if ki:
        add("keepalive on / off, instructions per poll", "<= 1.05x", f"{ki['ratio']:.3f}x",
            ki["ratio"] <= 1.05, f"{ki['on']:,.0f} vs {ki['off']:,.0f} instructions (callgrind, "
            f"(b) over {ki['polls']:,} polls; allocations {ki['on_allocations']:.1f} vs "
            f"{ki['off_allocations']:.1f})")
    on, off = by(conc["rust_tasks"], 256), by(conc.get("rust_tasks_nk", []), 256)
    if on and off:
        ratio = on["polls_per_s"] / off["polls_per_s"]
        add("keepalive on vs off: 256 concurrent Rust polls/s", ">= 0.95x", f"{ratio:.2f}x",
            ratio >= 0.95, f"{on['polls_per_s']:.0f} vs {off['polls_per_s']:.0f} polls/s")
    r10k = by(conc["rust_tasks"], 10000)
    if r10k:
        add("0 failures at 10,000 concurrent (Rust)", "0", str(r10k["failed"]),
            r10k["failed"] == 0)
    # The grpc-go anchor (h / grpc_go): a stock gRPC client against the same worker. Ratios of
    # time (sequential: lower is better) and of polls/s (concurrent: higher is better).
    if "h" in seq:
        h = seq["h"]["median_us"]
        ratio = seq["c"]["median_us"] / h
        add("(c) wool_idle sequential vs grpc-go (h)", "<= 1.0x", f"{ratio:.2f}x", ratio <= 1.0,
            f"{seq['c']['median_us']:.1f} vs {h:.1f} µs median; (a) raw tonic "
            f"{seq['a']['median_us'] / h:.2f}x, (b) WorkerConnection "
            f"{seq['b']['median_us'] / h:.2f}x")
    for level in (256, 10000):
        ours, anchor = by(conc["rust_tasks"], level), by(conc.get("grpc_go", []), level)
        if not (ours and anchor and anchor["polls_per_s"]):
            continue
        ratio = ours["polls_per_s"] / anchor["polls_per_s"]
        add(f"Rust tasks at {level:,} vs grpc-go at {level:,} (polls/s, one connection each)",
            ">= 1.0x", f"{ratio:.2f}x", ratio >= 1.0,
            f"{ours['polls_per_s']:,.0f} vs {anchor['polls_per_s']:,.0f} polls/s; failed "
            f"{ours['failed']} vs {anchor['failed']}")
        c_lv = by(conc["c_threads"], level)
        if c_lv:
            ratio = c_lv["polls_per_s"] / anchor["polls_per_s"]
            rows.append({"target": "  same, C threads on one handle", "goal": ">= 1.0x",
                         "measured": f"{ratio:.2f}x ({c_lv['polls_per_s']:,.0f} polls/s)",
                         "met": ratio >= 1.0, "note": ""})
    # Calls that do not block (completion queue) and the bindings built on it.
    rust10k, q10k = by(conc["rust_tasks"], 10000), by(conc.get("c_queue", []), 10000)
    if rust10k and q10k:
        ratio = q10k["polls_per_s"] / rust10k["polls_per_s"]
        add("C, one thread, 10,000 in flight on one handle vs Rust tasks", ">= 0.9x",
            f"{ratio:.2f}x", ratio >= 0.9,
            f"{q10k['polls_per_s']:,.0f} vs {rust10k['polls_per_s']:,.0f} polls/s; "
            f"{q10k['failed']} failed")
    go256, grpc256 = by(conc.get("go_goroutines", []), 256), by(conc.get("grpc_go", []), 256)
    if go256 and grpc256:
        ratio = go256["polls_per_s"] / grpc256["polls_per_s"]
        add("Go, 256 goroutines on one Connection vs grpc-go at 256", ">= 1.5x", f"{ratio:.2f}x",
            ratio >= 1.5, f"{go256['polls_per_s']:,.0f} vs {grpc256['polls_per_s']:,.0f} polls/s")
    py256, wool256 = by(conc.get("py_asyncio", []), 256), by(conc["wool_python"], 256)
    if py256 and wool256:
        ratio = py256["polls_per_s"] / wool256["polls_per_s"]
        add("Python asyncio on libwool at 256 vs Wool's asyncio client at 256", ">= 4x",
            f"{ratio:.2f}x", ratio >= 4,
            f"{py256['polls_per_s']:,.0f} vs {wool256['polls_per_s']:,.0f} polls/s")
    rows.extend(fleet_targets(res))
    ic = disp["idle_cost"]
    cost = ic["cost_pct"]
    share = ic.get("poll_cpu_share_est_pct", ic["poll_cpu_share_of_one_core_pct"])
    # Run-to-run spread of the runs without a poller: a delta smaller than that is noise.
    base = ic["without_poller"]
    spread = (max(base) - min(base)) / statistics.median(base) * 100 if len(base) > 1 else 0.0
    verdict = (cost < 2) if abs(cost) > spread or len(base) < 2 else None
    add("idle accounting cost on echo throughput (1 kHz poller)", "< 2 %", f"{cost:.2f} %",
        verdict, f"runs without a poller spread {spread:.0f} %; the polls take {share:.1f} % of "
        f"one worker core")
    ratio = disp["ratio_ours_to_wool_raw"]
    add("echo dispatch, ours vs Wool Python worker (same raw client)", ">= 20x", f"{ratio:.1f}x",
        ratio >= 20, f"Wool's own client end to end: {disp['ratio_ours_to_wool_e2e']:.1f}x")
    rows.extend(discovery_targets(res))
    rows.extend(scaler_targets(res))
    rows.extend(tls_targets(res))
    return rows


def fleet_targets(res: dict) -> list[dict]:
    """The fleet section's targets (rows named "fleet: ..."), from whatever it measured."""
    fleet = res.get("fleet")
    rows: list[dict] = []
    if not fleet or "sizes" not in fleet:
        return rows

    def add(name, goal, value, met, note=""):
        rows.append({"target": "fleet: " + name, "goal": goal, "measured": value,
                     "met": met if met in (None, "n/a") else bool(met), "note": note})

    sizes = sorted(int(n) for n in fleet["sizes"])
    small, big = sizes[0], sizes[-1]
    hosts = fleet["hosts"]
    at = lambda n: fleet["sizes"][str(n)]  # noqa: E731
    rust = at(small).get("rust")
    if rust and rust["warm_median_ms"]:
        for key, label in hosts.items():
            if key == "rust":
                continue
            row = at(small).get(key)
            if not row:
                continue
            if not row["warm_median_ms"]:
                add(f"{small:,} workers, warm, {label} vs the Rust sweep", "<= 1.1x", "n/a",
                    "n/a", f"one sweep per process; its cold sweep is "
                    f"{row['cold_median_ms'] / rust['cold_median_ms']:.2f}x the Rust cold sweep "
                    f"({row['cold_median_ms']:.1f} vs {rust['cold_median_ms']:.1f} ms, process "
                    f"start and output included)")
                continue
            ratio = row["warm_median_ms"] / rust["warm_median_ms"]
            add(f"{small:,} workers, warm, {label} vs the Rust sweep", "<= 1.1x",
                f"{ratio:.2f}x", ratio <= 1.1,
                f"{row['warm_median_ms']:.1f} vs {rust['warm_median_ms']:.1f} ms; "
                f"{row['failures']} failed")
    if big != small:
        for key, label in hosts.items():
            a, b = at(small).get(key), at(big).get(key)
            if not (a and b and a["cold_median_ms"]):
                continue
            ratio = b["cold_median_ms"] / a["cold_median_ms"]
            add(f"{big:,} cold vs {small:,} cold, {label}", f"<= {big / small:g}x",
                f"{ratio:.2f}x", ratio <= big / small,
                f"{b['cold_median_ms']:.0f} vs {a['cold_median_ms']:.1f} ms; warm "
                + (f"{b['warm_median_ms'] / a['warm_median_ms']:.2f}x" if a["warm_median_ms"]
                   and b["warm_median_ms"] else "n/a")
                + f"; {b['failures']} failed")
    if rust and rust["warm_median_ms"]:
        warm = rust["warm_median_ms"]
        add(f"{small:,}-endpoint sweep (warm, Rust, {fleet['concurrency']} in flight)",
            "< 250 ms", f"{warm:.1f} ms", warm < 250,
            f"cold (connect + poll): {rust['cold_median_ms']:.1f} ms")
    return rows


def discovery_targets(res: dict) -> list[dict]:
    """The discovery section's target (rows named "discovery: ...")."""
    disc = res.get("discovery")
    if not disc:
        return []
    poll, source = discovery_poll(res)
    ratio = disc["median_us"] / poll
    note = (f"kept LocalDiscovery: {disc['median_us']:.1f} vs {poll:.1f} µs ({source}); p90 "
            f"{disc['p90_us']:.1f} µs; fresh LocalDiscovery each time "
            f"{disc.get('fresh_median_us', float('nan')):.1f} µs "
            f"({disc.get('fresh_median_us', float('nan')) / poll:.2f}x); "
            f"listed {disc['workers']} of {disc['published']}")
    st = disc.get("strace")
    if st:
        note += (f"; {st['syscalls_per_list']:.0f} syscalls per listing "
                 f"({st['syscalls_per_record']:.1f} per record)")
    return [{"target": f"discovery: listing {disc['published']} local workers vs one sequential "
             "idle poll", "goal": "< 1.0x", "measured": f"{ratio:.2f}x",
             "met": ratio < 1.0 and disc["workers"] == disc["published"], "note": note}]


def scaler_targets(res: dict) -> list[dict]:
    """The scaler section's targets (rows named "scaler: ..."): what we expect of a
    GetMetrics answer against one sweep of the fleet layer; met only with no failed call."""
    sc = res.get("scaler")
    if not sc:
        return []
    rows = []
    for kind, goal in (("fresh", 1.2), ("cached", 0.01)):
        row = sc[kind]
        ratio = row["ratio_to_sweep"]
        anchor, against = scaler_anchor(sc, kind)
        rows.append({"target": f"scaler: GetMetrics {SCALER_KINDS[kind]}, {sc['workers']:,} "
                     f"workers, vs {against}", "goal": f"<= {goal:g}x",
                     "measured": f"{ratio:.3f}x", "met": ratio <= goal and row["failed"] == 0,
                     "note": f"{_duration(row['median_us'])} vs {anchor}; p90 "
                             f"{_duration(row['p90_us'])}; {row['failed']} failed calls"})
    return rows


def scaler_anchor(sc: dict, kind: str) -> tuple[str, str]:
    """What a kind of GetMetrics call is measured against: its duration and its name. Fresh
    calls: one warm sweep, or the fleet's sweep interval under the scaler's bound on polls a
    second when that is longer (older results have no bound: the sweep); cached: the sweep."""
    sweep_ms = sc["sweep"]["warm_median_ms"]
    floor_ms = sc.get("fresh_floor_ms") if kind == "fresh" else None
    if floor_ms and floor_ms > sweep_ms:
        return (_duration(floor_ms * 1e3), f"the fleet's sweep interval ({sc['workers']:,} / "
                f"{sc['polls_per_second_per_fleet']:,} polls/s, the scaler's bound per fleet)")
    return _duration(sweep_ms * 1e3), "one warm wool::fleet::sweep"


SCALER_KINDS = {"fresh": "with a fresh sweep (maxSweepAge 0)",
                "cached": "from the cached sweep (maxSweepAge 1h)"}


def _duration(us: float) -> str:
    """A duration given in µs, in ms from 1 ms on."""
    return f"{us / 1e3:,.2f} ms" if us >= 1e3 else f"{us:,.1f} µs"


def discovery_poll(res: dict) -> tuple[float, str]:
    """The poll the listing is compared with: section 1's (b) median of this run (headline
    layout) if it ran, else the polls measured in the discover process."""
    seq = res.get("sequential")
    if seq and "b" in seq:
        return seq["b"]["median_us"], (f"(b) WorkerConnection::idle median, section 1, layout "
                                       f"{res.get('sequential_layout', 'free')}")
    disc = res["discovery"]
    return disc["poll_same_process"]["median_us"], ("WorkerConnection::idle median, same "
                                                     "process, unpinned")


# Row order of the sequential tables; keys missing from a run (older results, no grpc-go) are
# skipped.
SEQ_ORDER = ("a", "a_mt", "b", "b_mt", "b_nk", "c", "d", "e", "f", "g", "h", "c_uds")
CONC_COLUMNS = (("rust_tasks", "Rust tasks, one WorkerConnection"),
                ("c_threads", "C threads, one handle"),
                ("c_queue", "C, one thread, queue"),
                ("go_goroutines", "Go goroutines, one Connection"),
                ("py_asyncio", "libwool asyncio, one connection"),
                ("wool_python", "Wool Python client, one WorkerConnection"),
                ("grpc_go", "grpc-go goroutines, one ClientConn"))


def markdown_fleet(fleet: dict) -> list[str]:
    """Section 3 of the table."""
    lines = ["### 3. Fleet sweep\n"]
    if "sizes" not in fleet:  # results of the earlier single-size section
        lines.append(f"{fleet['endpoints']:,} workers; warm {fleet['warm_median_ms']:.1f} ms, "
                     f"cold {fleet['cold_median_ms']:.1f} ms.\n")
        return lines
    sizes = sorted(int(n) for n in fleet["sizes"])
    rust = {n: fleet["sizes"][str(n)].get("rust") for n in sizes}
    lines.append(f"Workers served by {fleet['servers']} `wool_bench fleet-serve` process(es) "
                 f"(one port per `wool::worker::Worker`); each sweep polls every worker once, at "
                 f"most {fleet['concurrency']} in flight, one {fleet['timeout_s']:g} s deadline; "
                 f"{fleet['processes_per_host']} client process(es) per host and size, each one "
                 f"cold sweep (connections made) then {fleet['sweeps_per_process']} warm ones "
                 f"(woolctl: the one cold sweep, a process per sweep, timed from spawn to exit). "
                 f"Medians in ms; ×Rust = over the Rust sweep of the same size.\n")
    head = "| host |"
    rule = "|---|"
    for n in sizes:
        head += f" {n:,} warm | ×Rust | {n:,} cold | ×Rust |"
        rule += "--:|--:|--:|--:|"
    if len(sizes) > 1:
        head += f" cold {sizes[-1]:,} / {sizes[0]:,} |"
        rule += "--:|"
    head += " failed polls |"
    rule += "--:|"
    lines += [head, rule]
    ratio = lambda a, b: f"{a / b:.2f}" if a and b else "–"  # noqa: E731
    for key, label in fleet["hosts"].items():
        cells, failed = [], 0
        for n in sizes:
            row = fleet["sizes"][str(n)].get(key)
            r = rust[n] or {}
            if not row:
                cells += ["–"] * 4
                continue
            failed += row["failures"]
            warm = row["warm_median_ms"]
            cells += [f"{warm:,.1f}" if warm else "n/a (cold only)",
                      ratio(warm, r.get("warm_median_ms")),
                      f"{row['cold_median_ms']:,.1f}",
                      ratio(row["cold_median_ms"], r.get("cold_median_ms"))]
        if len(sizes) > 1:
            a = fleet["sizes"][str(sizes[0])].get(key)
            b = fleet["sizes"][str(sizes[-1])].get(key)
            cells.append(ratio(b and b["cold_median_ms"], a and a["cold_median_ms"]) + "×"
                         if a and b else "–")
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {failed} |")
    lines.append("")
    return lines


def markdown_discovery(res: dict) -> list[str]:
    """Section 6 of the table."""
    disc = res["discovery"]
    poll, source = discovery_poll(res)
    lines = ["### 6. Local discovery (Wool's shared-memory registry)\n",
             f"A registry of {disc['published']} workers written by Wool 0.15.7's own publisher "
             f"(`LocalDiscovery(ns, capacity={disc['published']})` as the owner, "
             f"{disc['published']} `worker-added` events, kept alive while measuring), listed "
             f"{disc['reps']:,} times in one process by one kept `LocalDiscovery` (a fleet "
             f"manager's rounds: its first listing opens the segments, later ones `fstat` and "
             f"`pread` them), and {disc['reps'] // 4:,} times by a new one each time (a one-shot "
             f"tool, e.g. `woolctl discover`: every segment opened) (`wool_bench discover`):\n",
             "| | median µs | p90 µs | first µs | CPU µs | workers listed |",
             "|---|--:|--:|--:|--:|--:|",
             f"| `discovery.list()` on a kept `LocalDiscovery`, {disc['published']} workers | "
             f"{disc['median_us']:.1f} | {disc['p90_us']:.1f} | {disc['first_us']:.1f} | "
             f"{disc['cpu_us_per_list']:.1f} | {disc['workers']} |",
             f"| `LocalDiscovery::new(ns)?.list()` (fresh each time) | "
             f"{disc.get('fresh_median_us', float('nan')):.1f} | – | – | – | {disc['workers']} |",
             f"| one sequential idle poll, {source} | {poll:.1f} | – | – | – | – |"]
    same = disc["poll_same_process"]
    if "same process" not in source:
        lines.append(f"| one sequential idle poll, WorkerConnection::idle, same process, "
                     f"unpinned | {same['median_us']:.1f} | – | – | {same['cpu_us_per_poll']:.1f} "
                     f"| – |")
    lines.append("")
    st = disc.get("strace")
    if st:
        top = ", ".join(f"{name} {count:g}" for name, count in list(st["per_list"].items())[:8])
        lines.append(f"Syscalls per listing (`strace -c -f`, {st['reps']} listings less one): "
                     f"**{st['syscalls_per_list']:.0f}** ({st['syscalls_per_record']:.2f} per "
                     f"record): {top}.\n")
    return lines


def markdown_scaler(sc: dict) -> list[str]:
    """Section 7 of the table."""
    fresh, cached, sweep = sc["fresh"], sc["cached"], sc["sweep"]
    lines = ["### 7. KEDA scaler: GetMetrics for a fleet\n",
             f"A `wool::scaler::Scaler` in the driver's process (`wool_bench scaler`) answering "
             f"KEDA's `GetMetrics` for {sc['workers']:,} workers named by `targets` (served by "
             f"{sc['servers']} `wool_bench fleet-serve` process(es), spread as in section 3; "
             f"`idleThreshold` 0, so every worker that answers is idle and the metric is 0: any "
             f"other answer counts as a failed call), called over one tonic channel, one call at "
             f"a time. The anchor: one warm `wool::fleet::sweep` of the same workers by the same "
             f"process ({sc['concurrency']} in flight, as the scaler's sweeps); for fresh calls, "
             f"the fleet's sweep interval when longer: the scaler sweeps one fleet at most "
             f"{sc.get('polls_per_second_per_fleet') or '–'} polls a second (its bound per "
             f"tenant), so back-to-back fresh calls each wait for the next allowed sweep. "
             f"{sc['runs']} process(es), each 1 cold + {sweep['sweeps_per_run']} warm sweeps, then "
             f"{fresh['calls_per_run']} calls with `maxSweepAge` 0 (each sweeps the whole fleet, "
             f"on the scaler's own connections) and {cached['calls_per_run']:,} with "
             f"`maxSweepAge` 1h (answered from the cached sweep), each kind after one untimed "
             f"call. Medians of the processes' figures; CPU: the driver process's (client and "
             f"scaler) per call.\n",
             "| | median | p90 | CPU per call | ×anchor | failed |",
             "|---|--:|--:|--:|--:|--:|",
             f"| one warm `wool::fleet::sweep` (the anchor) | "
             f"{_duration(sweep['warm_median_ms'] * 1e3)} | "
             f"{_duration(sweep['warm_p90_ms'] * 1e3)} | – | 1.000 | {sweep['failures']} polls |"]
    if (sc.get("fresh_floor_ms") or 0) > sweep["warm_median_ms"]:
        lines.append(f"| the fleet's sweep interval (the fresh calls' anchor) | "
                     f"{_duration(sc['fresh_floor_ms'] * 1e3)} | – | – | 1.000 | – |")
    for kind in ("fresh", "cached"):
        row = sc[kind]
        lines.append(f"| `GetMetrics` {SCALER_KINDS[kind]} | {_duration(row['median_us'])} | "
                     f"{_duration(row['p90_us'])} | {_duration(row['cpu_us_per_poll'])} | "
                     f"{row['ratio_to_sweep']:.3f} | {row['failed']} of "
                     f"{row['ok'] + row['failed']} calls |")
    lines.append("")
    for kind in ("fresh", "cached"):
        if sc[kind]["failed"]:
            lines.append(f"First failed call {SCALER_KINDS[kind]}: {sc[kind]['first_error']}\n")
    if sweep["failures"]:
        lines.append(f"First failed poll of the anchor: {sweep['first_error']}\n")
    return lines


def tls_targets(res: dict) -> list[dict]:
    """The mutual-TLS section's targets (rows named "TLS: ..."): ours against grpc-go, both
    over mTLS; the first poll on a new connection is reported, with no goal."""
    tls = res.get("tls")
    if not tls:
        return []
    sq, fp, conc, ratios = tls["sequential"], tls["first_poll"], tls["concurrency"], \
        tls["ratios"]
    rows = []
    if "h" in sq:
        ratio = ratios["seq_b_to_h"]
        rows.append({"target": "TLS: (b) WorkerConnection::idle over mTLS vs (h) grpc-go over "
                     "mTLS, sequential median", "goal": "<= 1.0x", "measured": f"{ratio:.2f}x",
                     "met": ratio <= 1.0,
                     "note": f"{sq['b']['median_us']:.1f} vs {sq['h']['median_us']:.1f} µs; (c) "
                             f"wool_idle {ratios['seq_c_to_h']:.2f}x; plaintext, same rounds: "
                             f"(b) {ratios['seq_plain_b_to_h']:.2f}x (h)"})
    for lv in conc["levels"]:
        ratio = ratios.get(f"burst_{lv}_rust_to_grpc_go")
        if ratio is None:
            continue
        ours, theirs = (next(r for r in conc[key]["levels"] if r["concurrency"] == lv)
                        for key in ("rust_tasks", "grpc_go"))
        c = ratios.get(f"burst_{lv}_c_to_grpc_go")
        rows.append({"target": f"TLS: Rust tasks at {lv:,} over mTLS vs grpc-go at {lv:,} over "
                     "mTLS (polls/s, one connection each)", "goal": ">= 1.0x",
                     "measured": f"{ratio:.2f}x", "met": ratio >= 1.0,
                     "note": f"{ours['polls_per_s']:,.0f} vs {theirs['polls_per_s']:,.0f} "
                             f"polls/s; failed {ours['failed']} vs {theirs['failed']}"
                             + (f"; C threads {c:.2f}x" if c is not None else "")})
    measured = (f"ours {_duration(fp['ours_plain']['median_us'])} → "
                f"{_duration(fp['ours_tls']['median_us'])} "
                f"({ratios['first_ours_tls_to_plain']:.2f}x)")
    note = ""
    if "grpc_go_tls" in fp:
        measured += (f"; grpc-go {_duration(fp['grpc_go_plain']['median_us'])} → "
                     f"{_duration(fp['grpc_go_tls']['median_us'])} "
                     f"({ratios['first_grpc_go_tls_to_plain']:.2f}x)")
        note = (f"ours / grpc-go: mTLS {ratios['first_tls_ours_to_grpc_go']:.2f}x, plaintext "
                f"{ratios['first_plain_ours_to_grpc_go']:.2f}x")
    rows.append({"target": "TLS: first poll on a new connection: plaintext vs mTLS (TCP + TLS "
                 "handshake + HTTP/2), medians", "goal": "reported", "measured": measured,
                 "met": "n/a", "note": note})
    return rows


def markdown_tls(tls: dict) -> list[str]:
    """Section 8 of the table."""
    sq, fp, conc, ratios = tls["sequential"], tls["first_poll"], tls["concurrency"], \
        tls["ratios"]
    where = "layout split (client on CPU 0, worker on CPU 1)" if tls["layout"] == "split" \
        else "not pinned"
    lines = ["### 8. Mutual TLS: ours vs grpc-go\n",
             f"A throwaway PKI made at bench time (`wool_bench tls-certs`: a CA, worker and "
             f"client certificates, ECDSA P-256) and `wool-worker --tls-ca --tls-cert --tls-key` "
             f"(client certificates required); the clients present the client certificate: "
             f"`WorkerCredentials::from_files` (mutual), C `wool_credentials_from_files`, "
             f"grpc-go `credentials.NewTLS`. Sequential and first polls: {where}, medians of "
             f"{tls['rounds']} interleaved round(s); the plaintext rows are the same drivers "
             f"against the plaintext wool-worker in the same rounds.\n",
             "| sequential polls, one connection | median µs | p99 µs | polls/s | ×(h) mTLS | "
             "client CPU µs/poll | worker CPU µs/poll |",
             "|---|--:|--:|--:|--:|--:|--:|"]
    h = sq.get("h", {}).get("median_us")
    for key in ("b", "c", "h", "b_plain", "h_plain"):
        if key not in sq:
            continue
        r = sq[key]
        to_h = f"{r['median_us'] / h:.2f}" if h else "–"
        lines.append(f"| {r['label']} | {r['median_us']:.1f} | {r['p99_us']:.1f} | "
                     f"{r['polls_per_s']:,.0f} | {to_h} | {r['client_cpu_us_per_poll']} | "
                     f"{r['worker_cpu_us_per_poll']} |")
    lines.append("")
    keys = [k for k in ("rust_tasks", "c_threads", "grpc_go", "rust_tasks_plain",
                        "grpc_go_plain") if k in conc]
    lines.append("| N concurrent polls, one connection (polls/s) | "
                 + " | ".join(conc[k]["label"] for k in keys) + " | Rust / grpc-go, mTLS |")
    lines.append("|--:|" + "--:|" * (len(keys) + 1))
    for lv in conc["levels"]:
        cells = []
        for key in keys:
            r = next((x for x in conc[key]["levels"] if x["concurrency"] == lv), None)
            cells.append("–" if r is None else
                         f"{r['polls_per_s']:,.0f} ({r['failed']} failed, worker "
                         f"{r['worker_busy']:.2f} cores)")
        ratio = ratios.get(f"burst_{lv}_rust_to_grpc_go")
        cells.append("–" if ratio is None else f"{ratio:.2f}")
        lines.append(f"| {lv:,} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(f"First poll on a new connection (TCP connect, TLS handshake, HTTP/2 preface "
                 f"and settings, the call; timed from making the connection object to the "
                 f"answer): {tls['first_poll_n']} new connections a process, after untimed "
                 f"ones, kept open to the end.\n")
    lines.append("| first poll on a new connection | plaintext median | mTLS median | mTLS p90 | "
                 "mTLS / plaintext | client CPU per connection, mTLS |")
    lines.append("|---|--:|--:|--:|--:|--:|")
    for who, plain_key, tls_key, ratio_key in (
            ("ours (`WorkerConnection`)", "ours_plain", "ours_tls", "first_ours_tls_to_plain"),
            ("grpc-go (`grpc.NewClient`)", "grpc_go_plain", "grpc_go_tls",
             "first_grpc_go_tls_to_plain")):
        if tls_key not in fp:
            continue
        p, t = fp[plain_key], fp[tls_key]
        lines.append(f"| {who} | {_duration(p['median_us'])} | {_duration(t['median_us'])} | "
                     f"{_duration(t['p90_us'])} | {ratios[ratio_key]:.2f} | "
                     f"{_duration(t['client_cpu_us_per_poll'])} |")
    if "first_tls_ours_to_grpc_go" in ratios:
        lines.append(f"| ours / grpc-go | {ratios['first_plain_ours_to_grpc_go']:.2f} | "
                     f"{ratios['first_tls_ours_to_grpc_go']:.2f} | – | – | – |")
    lines.append("")
    return lines


def markdown_wakeup(res: dict) -> list[str]:
    """Section 1's line on the machine's cross-CPU wake-up (cross_cpu_wakeup)."""
    w = res.get("cross_cpu_wakeup")
    if not w:
        return ["Cross-CPU wake-up: not measured in this run (it needs the floor (g) in layouts "
                "split and shared: SEQ_LAYOUTS).\n"]
    line = (f"Cross-CPU wake-up on this machine: **{w['per_wake_us']:.1f} µs per one-way "
            f"wake** = (split floor (g) median {w['split_floor_median_us']:.1f} µs − shared "
            f"floor median {w['shared_floor_median_us']:.1f} µs) / 2 (a ping-pong round trip "
            f"wakes the other CPU twice)")
    if w.get("b_difference_in_wakes") is not None:
        line += (f"; (b)'s split − shared difference, {w['b_split_minus_shared_us']:.1f} µs, is "
                 f"{w['b_difference_in_wakes']:.1f} such wakes")
    return [line + ".\n"]


def markdown(res: dict) -> str:
    seq, conc, fleet, mem, disp = (res[k] for k in
                                   ("sequential", "concurrency", "fleet", "memory", "dispatch"))
    lines = []
    layout = res.get("sequential_layout", "free")
    where = {"split": "client on CPU 0, worker on CPU 1 (like two hosts)",
             "shared": "client and worker both on CPU 0",
             "free": "not pinned"}
    rounds = dict(item.partition(":")[::2] for item in res["config"]["SEQ_LAYOUTS"].split(","))
    lines.append("### 1. Sequential idle polls (one connection, one call at a time)\n")
    lines.append(f"Layout **{layout}**: {where.get(layout, layout)}; medians of "
                 f"{rounds.get(layout, '?')} interleaved rounds of {res['config']['SEQ_N']:,} "
                 f"polls each.\n")
    lines.append("| layer | median µs | p99 µs | polls/s | ×(a) | ×(g) | client CPU µs/poll | "
                 "worker CPU µs/poll |")
    lines.append("|---|--:|--:|--:|--:|--:|--:|--:|")
    for key in SEQ_ORDER:
        if key not in seq:
            continue
        r = seq[key]
        name = f"({key[0]}) {r['label']}" if len(key) == 1 else f"({key[0]}′) {r['label']}"
        lines.append(f"| {name} | {r['median_us']:.1f} | {r['p99_us']:.1f} | "
                     f"{r['polls_per_s']:,.0f} | {r['ratio_to_a']:.2f} | {r['ratio_to_g']:.2f} | "
                     f"{r.get('client_cpu_us_per_poll', '–')} | "
                     f"{r.get('worker_cpu_us_per_poll', '–')} |")
    lines.append("")
    lines.append("Client CPU: the client process's own CPU clock (all threads) over its timed loop; "
                 "for (g) the pinging process only. Worker CPU: wool-worker's utime + stime over "
                 "the driver's whole run, divided by its polls (warm-up included).\n")
    for other, table in res.get("sequential_layouts", {}).items():
        if other == layout:
            continue
        lines.append(f"Layout **{other}** ({where.get(other, other)}; {rounds.get(other, '?')} "
                     f"rounds):\n")
        lines.append("| layer | median µs | p99 µs | ×(a) | ×(g) | client CPU µs/poll | "
                     "worker CPU µs/poll |")
        lines.append("|---|--:|--:|--:|--:|--:|--:|")
        for key in SEQ_ORDER:
            if key in table:
                r = table[key]
                mark = "" if len(key) == 1 else "′"
                lines.append(f"| ({key[0]}{mark}) {r['label']} | {r['median_us']:.1f} | "
                             f"{r['p99_us']:.1f} | {r['ratio_to_a']:.2f} | {r['ratio_to_g']:.2f} | "
                             f"{r.get('client_cpu_us_per_poll', '–')} | "
                             f"{r.get('worker_cpu_us_per_poll', '–')} |")
        lines.append("")
    lines.extend(markdown_wakeup(res))
    ki = res.get("keepalive_instructions")
    if ki:
        lines.append(f"Keepalive on / off, instructions per poll of (b) (callgrind, exact): "
                     f"**{ki['on']:,.0f} / {ki['off']:,.0f} = {ki['ratio']:.3f}×** "
                     f"(allocations {ki['on_allocations']:.1f} / {ki['off_allocations']:.1f}).\n")
    lines.append("### 2. Concurrent polls on one connection (bursts of N; polls/s, failures)\n")
    columns = [(key, title) for key, title in CONC_COLUMNS if key in conc]
    lines.append("| N | " + " | ".join(title for _, title in columns) + " |")
    lines.append("|--:|" + "--:|" * len(columns))
    by = lambda rows, n: next((r for r in rows if r["concurrency"] == n), None)  # noqa: E731
    for n in conc["levels"]:
        cells = []
        for key, _ in columns:
            r = by(conc[key], n)
            busy = "" if r is None or r.get("worker_busy") is None else \
                f", worker {r['worker_busy']:.2f} cores"
            if r is None:
                cells.append("n/a (threads capped at %d)" % conc["c_max_threads"]
                             if key == "c_threads" else "–")
            else:
                cells.append(f"{r['polls_per_s']:,.0f} ({r['failed']} failed{busy})")
        lines.append(f"| {n:,} | " + " | ".join(cells) + " |")
    lines.append("")
    if conc.get("rust_tasks_nk"):
        lines.append("Keepalive's cost, same run (Rust tasks on one WorkerConnection, polls/s): "
                     + "; ".join(
                         f"N = {n:,}: on {by(conc['rust_tasks'], n)['polls_per_s']:,.0f}, "
                         f"off {by(conc['rust_tasks_nk'], n)['polls_per_s']:,.0f}"
                         for n in conc["levels"]
                         if by(conc["rust_tasks"], n) and by(conc["rust_tasks_nk"], n))
                     + ".\n")
    lines.extend(markdown_fleet(fleet))
    lines.append("### 4. Memory and sockets (handles to one worker, each polled once)\n")
    lines.append("| client | handles | RSS MiB | threads | TCP connections to the worker |")
    lines.append("|---|--:|--:|--:|--:|")
    for client, per in mem.items():
        for count, m in per.items():
            if not isinstance(m, dict):
                continue
            lines.append(f"| {client} | {int(count):,} | {m['rss_mib']:.1f} | {m['threads']} | "
                         f"{m['tcp_to_worker']} |")
    lines.append("")
    lines.append("### 5. Dispatch (`echo`, %d bytes, %d in flight)\n" %
                 (disp["payload_bytes"], disp["concurrency"]))
    lines.append("| worker | client | tasks/s | failed |")
    lines.append("|---|---|--:|--:|")
    for key, worker, client in (
            ("ours_connection", "wool-worker (Rust)", "WorkerConnection::dispatch"),
            ("ours_raw", "wool-worker (Rust)", "raw tonic stub, Task replay"),
            ("wool_raw", "Wool 0.15.7 Python worker", "raw tonic stub, Task replay (Wool's encoding)"),
            ("wool_e2e", "Wool 0.15.7 Python worker", "Wool's WorkerProxy + @wool.routine")):
        r = disp[key]
        lines.append(f"| {worker} | {client} | {r['tasks_per_s']:,.0f} | {r['failed']} |")
    ic = disp["idle_cost"]
    lines.append("")
    lines.append(f"Idle accounting under load: echo {ic['median_without']:,.0f} tasks/s without, "
                 f"{ic['median_with']:,.0f} with a {CFG['POLLER_HZ']:.0f} Hz idle poller "
                 f"(medians of {len(ic['without_poller'])} alternating runs): "
                 f"**{ic['cost_pct']:.2f} %**; worker CPU per task "
                 f"{ic['worker_cpu_us_per_task_without']} → {ic['worker_cpu_us_per_task_with']} µs "
                 f"(worker busy {ic['worker_busy_without']:.2f} → {ic['worker_busy_with']:.2f} "
                 f"cores). Answering {ic.get('poller_rate_median', 0):,.0f} polls/s takes "
                 f"**{ic.get('poll_cpu_share_est_pct', float('nan')):.1f} % of one core** "
                 f"(polls/s × {ic.get('worker_cpu_us_per_poll_used', 0)} µs, the worker CPU of one "
                 f"poll in section 1, layout shared if measured; from the CPU deltas above: "
                 f"{ic['poll_cpu_share_of_one_core_pct']:.1f} %): what the poller would cost a "
                 f"saturated single-threaded worker.\n")
    if res.get("discovery"):
        lines.extend(markdown_discovery(res))
    if res.get("scaler"):
        lines.extend(markdown_scaler(res["scaler"]))
    if res.get("tls"):
        lines.extend(markdown_tls(res["tls"]))
    lines.append("### Targets\n")
    lines.append("| target | goal | measured | met |")
    lines.append("|---|---|---|---|")
    lines.extend(target_row(t) for t in res["targets"])
    return "\n".join(lines) + "\n"


def target_row(t: dict) -> str:
    note = f" ({t['note']})" if t["note"] else ""
    met = {None: "inconclusive", "n/a": "n/a"}.get(t["met"]) if t["met"] in (None, "n/a") else \
        "yes" if t["met"] else "**no**"
    return f"| {t['target']} | {t['goal']} | {t['measured']}{note} | {met} |"


# The sections of the generated block a partial run (--only) can replace on their own: heading
# prefix -> (results key, its name in the "Re-measured" line, its markdown (of the results),
# its targets (of the results), the prefixes of its target rows (older names included)).
PARTIAL_SECTIONS = {
    "### 3.": ("fleet", "3 (fleet sweep)", lambda res: markdown_fleet(res["fleet"]),
               fleet_targets, ("| fleet: ", "| C fleet call (wool_idle_many)",
                               "| 1000-endpoint sweep")),
    "### 6.": ("discovery", "6 (local discovery)", markdown_discovery, discovery_targets,
               ("| discovery: ",)),
    "### 7.": ("scaler", "7 (KEDA scaler)", lambda res: markdown_scaler(res["scaler"]),
               scaler_targets, ("| scaler: ",)),
    "### 8.": ("tls", "8 (mutual TLS)", lambda res: markdown_tls(res["tls"]), tls_targets,
               ("| TLS: ",)),
}


def markdown_partial(res: dict) -> dict[str, list[str]]:
    """The sections a partial run (--only) measured that the generated block can take on
    their own: heading prefix -> lines; "targets" -> target rows."""
    parts: dict[str, list[str]] = {}
    rows: list[dict] = []
    for heading, (key, _, lines, targets_of, _) in PARTIAL_SECTIONS.items():
        if res.get(key):
            parts[heading] = lines(res)
            rows += targets_of(res)
    parts["targets"] = [target_row(t) for t in rows]
    return parts


START, END = "<!-- bench:generated:start -->", "<!-- bench:generated:end -->"


def update_doc(res: dict, table: str) -> None:
    """Replaces the generated block of BENCHMARKS.md (between the markers) with this run."""
    doc = ROOT / "BENCHMARKS.md"
    if not doc.exists():
        return
    text = doc.read_text()
    if START not in text or END not in text:
        log("BENCHMARKS.md has no generated block: left alone")
        return
    m = res["machine"]
    head = (f"Run of {res['started']} at commit `{m['commit']}`: {m['nproc']} × {m['cpu_model']}, "
            f"Linux {m['kernel']}, load average {m['loadavg_at_start'][0]:.2f} at the start and "
            f"{m['loadavg_at_end'][0]:.2f} at the end; {res['elapsed_s']:.0f} s of measurement.\n")
    block = f"{START}\n{head}\n{table}{END}"
    before, rest = text.split(START, 1)
    after = rest.split(END, 1)[1]
    doc.write_text(before + block + after)
    log("updated the generated block of BENCHMARKS.md")


def update_doc_partial(res: dict, only: set[str]) -> None:
    """A partial run (--only): replaces, in the generated block of BENCHMARKS.md, the sections
    it measured (PARTIAL_SECTIONS: fleet = "### 3.", discovery = "### 6.", scaler = "### 7.")
    and their target rows, and notes the run in a "Re-measured" line; the rest of the block
    (an earlier full run) is kept."""
    doc = ROOT / "BENCHMARKS.md"
    if not doc.exists():
        return
    text = doc.read_text()
    if START not in text or END not in text:
        log("BENCHMARKS.md has no generated block: left alone")
        return
    parts = markdown_partial(res)
    done = [k for k in PARTIAL_SECTIONS if k in parts]
    if not done:
        return
    before, rest = text.split(START, 1)
    block, after = rest.split(END, 1)
    # The block: intro lines, then sections, each from its "### " heading to the next.
    intro: list[str] = []
    sections: list[list[str]] = []
    for line in block.strip("\n").split("\n"):
        if line.startswith("### "):
            sections.append([line])
        elif sections:
            sections[-1].append(line)
        else:
            intro.append(line)
    number = lambda sec: float(sec[0][4:].split(".")[0]) if sec[0][4:5].isdigit() else 99  # noqa: E731
    for key in done:
        new = "\n".join(parts[key]).rstrip("\n").split("\n") + [""]
        at = next((i for i, sec in enumerate(sections) if sec[0].startswith(key)), None)
        if at is not None:
            sections[at] = new
        else:
            n = float(key[4:].rstrip("."))
            at = next((i for i, sec in enumerate(sections) if number(sec) > n), len(sections))
            sections.insert(at, new)
    # Target rows: drop this run's sections' old rows, append the new ones.
    stale = [prefix for k in done for prefix in PARTIAL_SECTIONS[k][4]]
    for sec in sections:
        if sec[0].startswith("### Targets"):
            rows = [l for l in sec if not any(l.startswith(p) for p in stale)]
            last = max(i for i, l in enumerate(rows) if l.startswith("|"))
            sec[:] = rows[:last + 1] + parts["targets"] + rows[last + 1:]
    m = res["machine"]
    which = " and ".join(PARTIAL_SECTIONS[k][1] for k in done)
    note = (f"Re-measured: section{'s' if len(done) > 1 else ''} {which} and {'their' if len(done) > 1 else 'its'} "
            f"target rows, in a run of {res['started']} (`BENCH_ONLY={','.join(sorted(only))}`) at "
            f"commit `{m['commit']}`: {m['nproc']} × {m['cpu_model']}, Linux {m['kernel']}, load average {m['loadavg_at_start'][0]:.2f} at the start and "
            f"{m['loadavg_at_end'][0]:.2f} at the end; {res['elapsed_s']:.0f} s of measurement. "
            f"The other sections are from the run above.")
    intro = [l for l in intro if not (l.startswith("Re-measured:") and which in l)]
    while intro and intro[-1] == "":
        intro.pop()
    intro += ["", note, ""]
    body = "\n".join(intro + [l for sec in sections for l in sec]).rstrip("\n")
    doc.write_text(before + START + "\n" + body + "\n" + END + after)
    log("updated sections " + which + " of the generated block of BENCHMARKS.md")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bench-bin", required=True)
    parser.add_argument("--c-bin", required=True, help="directory with idle_bench and pingpong")
    parser.add_argument("--go-bin", required=True)
    parser.add_argument("--wool-python", required=True)
    parser.add_argument("--grpc-go-bin", default=str(OUT / "bin" / "grpc-go-bench"),
                        help="the grpc-go anchor (benches/grpc-go); skipped if missing")
    parser.add_argument("--worker", default=str(ROOT / "target/release/wool-worker"))
    parser.add_argument("--libwool", default=str(ROOT / "target/release/libwool.so"))
    parser.add_argument("--woolctl", default=str(ROOT / "target/release/woolctl"))
    parser.add_argument("--only", default="", help="comma-separated sections (default: all)")
    args = parser.parse_args()
    tools = {"worker": Path(args.worker), "bench": Path(args.bench_bin), "c_idle": Path(args.c_bin) / "idle_bench",
             "pingpong": Path(args.c_bin) / "pingpong", "go": Path(args.go_bin),
             "wool_python": Path(args.wool_python), "libwool": Path(args.libwool),
             "woolctl": Path(args.woolctl)}
    if Path(args.grpc_go_bin).is_file():
        tools["grpc_go"] = Path(args.grpc_go_bin)
    else:
        log(f"no grpc-go anchor at {args.grpc_go_bin}: layer (h) and grpc_go left out")
    (OUT / "tmp").mkdir(parents=True, exist_ok=True)
    only = set(filter(None, args.only.split(",")))
    want = lambda s: not only or s in only  # noqa: E731
    started = time.time()
    results: dict = {"machine": machine(), "quick": QUICK, "config": CFG,
                     "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    worker = Server("wool-worker", [args.worker], stderr=subprocess.DEVNULL)
    results["worker_address"] = worker.address
    try:
        if want("sequential"):
            layouts = {}
            for item in CFG["SEQ_LAYOUTS"].split(","):
                name, _, rounds = item.partition(":")
                layouts[name.strip()] = section_sequential(
                    tools, worker.address, worker, int(rounds or 3), name.strip())
            first = next(iter(layouts))
            results["sequential"] = layouts[first]
            results["sequential_layout"] = first
            results["sequential_layouts"] = layouts
            results["cross_cpu_wakeup"] = cross_cpu_wakeup(layouts)
            log("keepalive on / off: instructions per poll of (b) (callgrind)")
            results["keepalive_instructions"] = pollcount.keepalive_cost(
                str(tools["bench"]), str(args.worker))
        if want("concurrency"):
            results["concurrency"] = section_concurrency(tools, worker.address, worker)
        if want("fleet"):
            results["fleet"] = section_fleet(tools)
        if want("scaler"):
            results["scaler"] = section_scaler(tools)
        if want("discovery"):
            results["discovery"] = section_discovery(tools, worker)
        if want("memory"):
            results["memory"] = section_memory(tools, worker.address)
        if want("dispatch"):
            results["dispatch"] = section_dispatch(tools, worker.address, worker)
        if want("tls"):
            results["tls"] = section_tls(tools, worker)
    finally:
        worker.stop()
    if "dispatch" in results and "sequential" in results:
        # A steadier estimate of what the 1 kHz poller costs the worker: the polls it made per
        # second times the worker CPU of one poll (section 1, WorkerConnection).
        ic = results["dispatch"]["idle_cost"]
        rate = statistics.median(p["polls_per_s"] for p in ic["poller"])
        # The shared layout's figure: no cross-CPU wake-up inflating it (a worker busy with
        # dispatches is awake anyway when a poll arrives).
        per_poll = results.get("sequential_layouts", {}).get(
            "shared", results["sequential"])["b"]["worker_cpu_us_per_poll"]
        ic["worker_cpu_us_per_poll_used"] = per_poll
        ic["poller_rate_median"] = rate
        ic["poll_cpu_share_est_pct"] = round(rate * per_poll / 1e4, 2)
    results["elapsed_s"] = round(time.time() - started, 1)
    results["machine"]["loadavg_at_end"] = os.getloadavg()
    if not only:
        results["targets"] = targets(results)
    path = OUT / ("results-quick.json" if QUICK else "results.json")
    if only:
        # A partial run: its own file, and merged into the last full run's results (if any).
        own = OUT / f"results-{'-'.join(sorted(only))}{'-quick' if QUICK else ''}.json"
        own.write_text(json.dumps(results, indent=2) + "\n")
        log(f"wrote {own.relative_to(ROOT)} in {results['elapsed_s']} s")
        if path.exists():
            merged = json.loads(path.read_text())
            for key in ("sequential", "sequential_layout", "sequential_layouts", "concurrency",
                        "fleet", "memory", "dispatch", "discovery", "scaler", "tls",
                        "cross_cpu_wakeup", "keepalive_instructions"):
                if key in results:
                    merged[key] = results[key]
            merged.setdefault("remeasured", []).append(
                {"sections": sorted(only), "started": results["started"],
                 "machine": results["machine"], "elapsed_s": results["elapsed_s"]})
            if all(k in merged for k in ("sequential", "concurrency", "fleet", "dispatch")):
                merged["targets"] = targets(merged)
            path.write_text(json.dumps(merged, indent=2) + "\n")
            log(f"merged it into {path.relative_to(ROOT)}")
        parts = markdown_partial(results)
        md = "\n".join(l for k, v in parts.items() if k != "targets" for l in v)
        md += "\n| target | goal | measured | met |\n|---|---|---|---|\n" + \
            "\n".join(parts["targets"]) + "\n"
        (OUT / ("table-partial-quick.md" if QUICK else "table-partial.md")).write_text(md)
        print(md)
        if not QUICK and os.environ.get("UPDATE_BENCHMARKS_MD", "1") != "0":
            update_doc_partial(results, only)
        return 0
    path.write_text(json.dumps(results, indent=2) + "\n")
    log(f"wrote {path.relative_to(ROOT)} in {results['elapsed_s']} s")
    if not only:
        md = markdown(results)
        (OUT / ("table-quick.md" if QUICK else "table.md")).write_text(md)
        print(md)
        if not QUICK and os.environ.get("UPDATE_BENCHMARKS_MD", "1") != "0":
            update_doc(results, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
