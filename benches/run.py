#!/usr/bin/env python3
"""The benchmark run behind scripts/bench.sh: starts the workers, runs every driver, collects.

Not meant to be run by hand (scripts/bench.sh builds what it needs and passes the paths), but it
can be: ``python3 benches/run.py --bench-bin PATH --c-bin DIR --go-bin PATH --wool-python PATH``
(``--grpc-go-bin PATH``, default target/bench/bin/grpc-go-bench: the grpc-go anchor, layer (h)
and the "grpc_go" concurrency driver; left out, with a note, when that file does not exist).

Writes target/bench/results.json and prints a markdown table on stdout (progress goes to
stderr). Nothing here asserts on time: the targets are *reported* (met / missed, with
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
    FLEET_N, FLEET_CONCURRENCY,      endpoints, polls in flight, warm sweeps per process,
    FLEET_SWEEPS, FLEET_COLD_RUNS    sweep processes (each starts with one cold sweep)
    MEM_HANDLES, MEM_WOOL            handle counts; MEM_WOOL=0 skips Wool's Python client
    DISPATCH_SECONDS, DISPATCH_CONCURRENCY, DISPATCH_BYTES, IDLE_COST_REPS, POLLER_HZ
    UDS                              1 (default; 0 in QUICK) adds "(c) over a Unix socket" (extra)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

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
    "FLEET_N": env("FLEET_N", 1000, 1000),
    "FLEET_CONCURRENCY": env("FLEET_CONCURRENCY", 64, 64),
    "FLEET_SWEEPS": env("FLEET_SWEEPS", 9, 2),
    "FLEET_COLD_RUNS": env("FLEET_COLD_RUNS", 3, 1),
    "MEM_HANDLES": env("MEM_HANDLES", "1,10000", "1,10000"),
    "MEM_WOOL": env("MEM_WOOL", 1, 0),
    "DISPATCH_SECONDS": env("DISPATCH_SECONDS", 3.0, 0.5),
    "DISPATCH_CONCURRENCY": env("DISPATCH_CONCURRENCY", 64, 64),
    "DISPATCH_BYTES": env("DISPATCH_BYTES", 16, 16),
    "IDLE_COST_REPS": env("IDLE_COST_REPS", 4, 1),
    "POLLER_HZ": env("POLLER_HZ", 1000.0, 1000.0),
    "UDS": env("UDS", 1, 0),
}

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


def run_json(argv: list[str], what: str, timeout: float = 600, **kw) -> dict:
    """Runs a driver; returns its last stdout line as JSON plus its CPU time."""
    before = children_cpu()
    t = time.perf_counter()
    argv = [str(x) for x in argv]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    wall = time.perf_counter() - t
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    lines = [l for l in done.stdout.splitlines() if l.strip()]
    result = json.loads(lines[-1])
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
            res = run_json(prefix + [str(x) for x in argv], label, **kw)
            res["_worker_cpu_s"] = serving.cpu_seconds() - w0
            runs[key].append(res)
        log(f"sequential ({where}) round {r + 1}/{rounds}: (g) floor, one-byte TCP ping-pong")
        ping = [str(tools["pingpong"]), CFG["FLOOR_N"], 2000] + (list(cpus) if cpus else [])
        runs["g"].append(run_json(ping, "pingpong"))
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
            res = run_json(argv(str(level)), f"{key} burst {level}", timeout=900, **kw)
            busy_cpu = worker.cpu_seconds() - w0
            for row in res["levels"]:
                polls = row["ok"] + row["failed"]
                seconds = polls / row["polls_per_s"] if row["polls_per_s"] else 0
                row["worker_busy"] = round(busy_cpu / seconds, 2) if seconds else None
                row["worker_cpu_us_per_poll"] = round(busy_cpu / max(polls, 1) * 1e6, 1)
                # the whole driver process, start-up included (Python's is ~0.5 s of it)
                row["client_cpu_us_per_poll"] = round(res["_cpu_s"] / max(polls, 1) * 1e6, 1)
                row["client_busy"] = round(res["_cpu_s"] / seconds, 2) if seconds else None
                rows.append(row)
            out["c_max_threads"] = res.get("max_threads", out["c_max_threads"])
        out[key] = rows
    return out


def section_fleet(tools: dict) -> dict:
    n = CFG["FLEET_N"]
    log(f"fleet: serving {n} workers in one process")
    fleet = subprocess.Popen([str(tools["bench"]), "fleet-serve", str(n)], stdout=subprocess.PIPE,
                             stdin=subprocess.PIPE, text=True)
    addrs = []
    try:
        t = time.perf_counter()
        for line in fleet.stdout:
            line = line.strip()
            if line == "ready":
                break
            addrs.append(line)
        started = time.perf_counter() - t
        if len(addrs) != n:
            raise RuntimeError(f"fleet-serve gave {len(addrs)} addresses, wanted {n}")
        path = OUT / "tmp" / "fleet.addrs"
        path.write_text("\n".join(addrs) + "\n")
        runs, c_runs = [], []
        libenv = dict(os.environ)
        for r in range(CFG["FLEET_COLD_RUNS"]):
            log(f"fleet: sweep process {r + 1}/{CFG['FLEET_COLD_RUNS']} (1 cold + "
                f"{CFG['FLEET_SWEEPS']} warm sweeps, {CFG['FLEET_CONCURRENCY']} in flight)")
            runs.append(run_json([str(tools["bench"]), "sweep", str(path),
                                  str(CFG["FLEET_CONCURRENCY"]), str(CFG["FLEET_SWEEPS"])],
                                 "sweep"))
            time.sleep(0.5)
            log(f"fleet: C wool_idle_many {r + 1}/{CFG['FLEET_COLD_RUNS']}")
            c_runs.append(run_json([str(tools["c_idle"]), "many", str(path),
                                    str(CFG["FLEET_CONCURRENCY"]), str(CFG["FLEET_SWEEPS"])],
                                   "wool_idle_many", env=libenv))
            time.sleep(0.5)
    finally:
        fleet.stdin.close()
        try:
            fleet.wait(30)
        except subprocess.TimeoutExpired:
            fleet.kill()
            fleet.wait()
    warm = [t for r in runs for t in r["warm_ms"]]
    cold = [r["cold_ms"] for r in runs]
    return {"endpoints": n, "concurrency": CFG["FLEET_CONCURRENCY"],
            "fleet_start_s": round(started, 2),
            "cold_ms": cold, "cold_median_ms": round(statistics.median(cold), 2),
            "warm_ms": warm, "warm_median_ms": round(statistics.median(warm), 2) if warm else None,
            "failures": sum(sum(r["failures"]) for r in runs),
            "c_many": {
                "cold_median_ms": round(statistics.median(r["cold_ms"] for r in c_runs), 2),
                "warm_median_ms": round(statistics.median(
                    t for r in c_runs for t in r["warm_ms"]), 2),
                "failures": sum(sum(r["failures"]) for r in c_runs)} if c_runs else None}


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
        res = run_json([bench, "dispatch", addr, str(conc), str(secs), str(nbytes)], label)
        res["worker_cpu_us_per_task"] = round(
            (worker.cpu_seconds() - w0) / max(res["ok"], 1) * 1e6, 1)
        return res

    log("dispatch: ours, WorkerConnection::dispatch(echo)")
    out["ours_connection"] = ours("dispatch")
    log("dispatch: ours, raw stub replaying a Task (the same client code as for Wool)")
    out["ours_raw"] = run_json([bench, "dispatch-raw", addr, str(conc), str(secs), str(rust_tpl)],
                               "dispatch-raw ours")

    log("dispatch: starting a Wool 0.15.7 Python worker (LocalWorker)")
    wool = Server("Wool Python worker", [py, str(ROOT / "tests/interop/wool_worker.py"),
                                         "--ignore-stdin"], stderr=subprocess.DEVNULL)
    try:
        log("dispatch: Wool worker, raw stub replaying Wool's own Task encoding")
        out["wool_raw"] = run_json([bench, "dispatch-raw", wool.address, str(conc), str(secs),
                                    str(wool_tpl)], "dispatch-raw wool")
        log("dispatch: Wool worker, Wool's own client (WorkerProxy + @wool.routine echo)")
        out["wool_e2e"] = run_json([py, str(ROOT / "benches/python/wool_dispatch.py"), "e2e",
                                    wool.address, str(conc), str(secs), str(nbytes)], "wool e2e")
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
        res = json.loads(poller.stdout.read().strip().splitlines()[-1])
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
    many = res["fleet"].get("c_many")
    if many and res["fleet"]["warm_median_ms"]:
        ratio = many["warm_median_ms"] / res["fleet"]["warm_median_ms"]
        add(f"C fleet call (wool_idle_many) over {res['fleet']['endpoints']:,} workers, warm, "
            "vs the Rust sweep", "<= 1.1x", f"{ratio:.2f}x", ratio <= 1.1,
            f"{many['warm_median_ms']:.1f} vs {res['fleet']['warm_median_ms']:.1f} ms; cold "
            f"{many['cold_median_ms']:.1f} ms; {many['failures']} failed")
    fleet = res["fleet"]
    warm = fleet["warm_median_ms"]
    add(f"{fleet['endpoints']}-endpoint sweep (warm, {fleet['concurrency']} in flight)",
        "< 250 ms", f"{warm:.1f} ms", warm is not None and warm < 250,
        f"cold (connect + poll): {fleet['cold_median_ms']:.1f} ms")
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
    return rows


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
    lines.append("### 3. Fleet sweep\n")
    lines.append(f"{fleet['endpoints']:,} workers served by one process; each sweep polls every "
                 f"endpoint once, {fleet['concurrency']} in flight: **warm sweep (median) "
                 f"{fleet['warm_median_ms']:.1f} ms**, cold sweep (new process: TCP + HTTP/2 "
                 f"handshakes + poll) median {fleet['cold_median_ms']:.1f} ms; "
                 f"{fleet['failures']} failed polls." + (
                     f" The same from C in one wool_idle_many call per sweep: warm "
                     f"{fleet['c_many']['warm_median_ms']:.1f} ms, cold "
                     f"{fleet['c_many']['cold_median_ms']:.1f} ms." if fleet.get("c_many")
                     else "") + "\n")
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
    lines.append("### Targets\n")
    lines.append("| target | goal | measured | met |")
    lines.append("|---|---|---|---|")
    for t in res["targets"]:
        note = f" ({t['note']})" if t["note"] else ""
        lines.append(f"| {t['target']} | {t['goal']} | {t['measured']}{note} | "
                     f"{'inconclusive' if t['met'] is None else 'yes' if t['met'] else '**no**'} |")
    return "\n".join(lines) + "\n"


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
    parser.add_argument("--only", default="", help="comma-separated sections (default: all)")
    args = parser.parse_args()
    tools = {"worker": Path(args.worker), "bench": Path(args.bench_bin), "c_idle": Path(args.c_bin) / "idle_bench",
             "pingpong": Path(args.c_bin) / "pingpong", "go": Path(args.go_bin),
             "wool_python": Path(args.wool_python), "libwool": Path(args.libwool)}
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
        if want("concurrency"):
            results["concurrency"] = section_concurrency(tools, worker.address, worker)
        if want("fleet"):
            results["fleet"] = section_fleet(tools)
        if want("memory"):
            results["memory"] = section_memory(tools, worker.address)
        if want("dispatch"):
            results["dispatch"] = section_dispatch(tools, worker.address, worker)
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
