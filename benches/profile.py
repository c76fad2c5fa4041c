#!/usr/bin/env python3
"""Where the time of one idle poll goes: per-poll event counts and perf profiles.

Run by ``PROFILE=1 scripts/bench.sh`` (or by hand, with the paths bench.sh builds):

    python3 benches/profile.py --bench-bin PATH --c-bin DIR [--n 20000]

Starts its own wool-worker, then for the floor (g), the raw tonic stub (a), WorkerConnection (b)
and wool_idle from C (c) counts, per poll, with ``perf stat`` on the client and on the worker:
CPU time, context switches, syscalls and wake-ups. Counts, unlike latencies, barely move when
the machine is busy, so this table is the evidence for "thread hops and wake-ups". Then, for
(a), (b) and (c), the exact per-poll counts of each side (benches/pollcount.py: differences of
runs with two poll counts): instructions and allocations (callgrind), syscalls, writes, reads,
context switches (perf tracepoints), user CPU, and hardware instructions where the machine
exposes them. Then records ``perf record -g`` profiles of (a) and (c) (client and worker) and
writes the top symbols.

Output: target/bench/profile.md (the tables + top symbols), target/bench/profile.json,
target/bench/prof/*.data and *.txt. Needs perf (``perf stat -e task-clock true`` must work);
valgrind for instructions and allocations. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pollcount  # exact per-poll counts, each side: callgrind, perf tracepoints
from run import latency, parse_output  # the drivers print raw samples; run.py summarises them

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "target" / "bench"
PROF = OUT / "prof"
EVENTS = "task-clock,context-switches,cpu-migrations,raw_syscalls:sys_enter,sched:sched_wakeup"


def log(msg: str) -> None:
    print(f"[profile] {msg}", file=sys.stderr, flush=True)


def counted(argv: list[str], worker_pid: int, calls: int, tag: str) -> dict:
    """perf stat on the client command and, meanwhile, on the worker; per-call figures."""
    cfile, wfile = PROF / f"stat-{tag}-client.csv", PROF / f"stat-{tag}-worker.csv"
    wstat = subprocess.Popen(["perf", "stat", "-x,", "-e", EVENTS, "-o", str(wfile), "-p",
                              str(worker_pid)], stderr=subprocess.DEVNULL)
    time.sleep(0.3)
    done = subprocess.run(["perf", "stat", "-x,", "-e", EVENTS, "-o", str(cfile), "--", *argv],
                          capture_output=True, text=True, check=True)
    wstat.send_signal(signal.SIGINT)
    wstat.wait(30)
    row = {"median_us": latency(parse_output(done.stdout))["median_us"]}
    for who, f in (("client", cfile), ("worker", wfile)):
        if who == "worker" and worker_pid <= 0:
            continue
        s = pollcount.parse_perf(f)
        row[f"{who}_cpu_us"] = s.get("task-clock", 0) * 1e3 / calls  # task-clock is in ms
        row[f"{who}_cs"] = s.get("context-switches", 0) / calls
        row[f"{who}_syscalls"] = s.get("raw_syscalls:sys_enter", 0) / calls
        row[f"{who}_wakeups"] = s.get("sched:sched_wakeup", 0) / calls
    return row


CATEGORIES = [  # (name, predicate on (dso, symbol)), first match wins
    ("kernel: scheduler, sleep and wake-ups", lambda d, s: d.startswith("[kernel") and any(
        k in s for k in ("task_switch", "schedule", "wake", "futex", "spin_unlock", "enqueue",
                         "dequeue", "pick_next", "update_curr", "psi_", "select_task", "hrtimer",
                         "idle", "switch_", "ttwu", "rseq", "mm_cid", "restore_fpregs"))),
    ("kernel: TCP/IP and sockets", lambda d, s: d.startswith("[kernel") and any(
        k in s for k in ("tcp", "ip_", "sock", "skb", "netif", "net_rx", "napi", "backlog",
                         "loopback", "dev_", "inet", "csum", "__qdisc", "copy_", "memcg"))),
    ("kernel: syscall entry/exit, epoll, other", lambda d, s: d.startswith("[kernel")),
    ("tokio runtime", lambda d, s: "tokio::" in s or "mio::" in s),
    ("h2 / hyper (HTTP/2)", lambda d, s: "h2::" in s or "hyper" in s),
    ("tonic / tower / http / prost", lambda d, s: any(
        k in s for k in ("tonic::", "tower", "http::", "http_body", "prost", "bytes::"))),
    ("wool (this library)", lambda d, s: "wool::" in s or "wool_" in s),
    ("malloc / free / memcpy", lambda d, s: any(
        k in s for k in ("malloc", "free", "memmove", "memcpy", "memset", "realloc",
                         "_int_", "tcache"))),
    ("libc syscall stubs, vdso", lambda d, s: "libc" in d or "vdso" in d or "ld-linux" in d),
    ("other user code", lambda d, s: True),
]


def categories(data: Path) -> list[tuple[str, float]]:
    report = subprocess.run(
        ["perf", "report", "-i", str(data), "--no-children", "--sort", "dso,sym", "--stdio",
         "-g", "none", "--percent-limit", "0"], capture_output=True, text=True).stdout
    totals = {name: 0.0 for name, _ in CATEGORIES}
    for line in report.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "%" not in line.split()[0]:
            continue
        parts = line.split(None, 3)  # pct, dso, [k]/[.], symbol
        if len(parts) < 4:
            continue
        pct, dso, sym = float(parts[0].rstrip("%")), parts[1], parts[3]
        for name, pred in CATEGORIES:
            if pred(dso, sym):
                totals[name] += pct
                break
    return sorted(totals.items(), key=lambda kv: -kv[1])


def top_symbols(data: Path, limit: int = 12) -> str:
    report = subprocess.run(
        ["perf", "report", "-i", str(data), "--no-children", "--sort", "dso,sym", "--stdio",
         "-g", "none", "--percent-limit", "0.7"],
        capture_output=True, text=True).stdout
    lines = [l for l in report.splitlines() if l.strip() and not l.startswith("#")]
    by_comm = subprocess.run(
        ["perf", "report", "-i", str(data), "--no-children", "--sort", "comm", "--stdio",
         "-g", "none"], capture_output=True, text=True).stdout
    comm = [" ".join(l.split()) for l in by_comm.splitlines()
            if l.strip() and not l.startswith("#")]
    cats = "\n".join(f"  {pct:5.1f}%  {name}" for name, pct in categories(data) if pct >= 0.5)
    return ("threads: " + "; ".join(comm[:4]) + "\nby kind:\n" + cats + "\ntop symbols:\n" +
            "\n".join(lines[:limit]))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bench-bin", required=True)
    parser.add_argument("--c-bin", required=True)
    parser.add_argument("--worker", default=str(ROOT / "target/release/wool-worker"))
    parser.add_argument("--n", type=int, default=int(os.environ.get("PROFILE_N", 20000)))
    parser.add_argument("--layout", default=os.environ.get("PROFILE_LAYOUT", "split"),
                        choices=["split", "shared", "free"],
                        help="CPU placement as in run.py's SEQ_LAYOUTS (default split)")
    args = parser.parse_args()
    cpus = {"split": ("0", "1"), "shared": ("0", "0"), "free": None}[args.layout]
    if cpus and int(max(cpus)) >= (os.cpu_count() or 1):
        cpus = None
    PROF.mkdir(parents=True, exist_ok=True)
    if subprocess.run(["perf", "stat", "-e", "task-clock", "true"], capture_output=True
                      ).returncode != 0:
        log("perf does not work here (perf stat -e task-clock true failed): skipping")
        return 0
    n, warm = args.n, 1000
    calls = n + warm
    worker_argv = [args.worker] if not cpus else ["taskset", "-c", cpus[1], args.worker]
    worker = subprocess.Popen(worker_argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True)
    addr = worker.stdout.readline().strip()
    bench, c_idle, ping = args.bench_bin, str(Path(args.c_bin) / "idle_bench"), \
        str(Path(args.c_bin) / "pingpong")
    pin = ["taskset", "-c", cpus[0]] if cpus else []
    cases = [
        ("g", "floor: 1-byte TCP ping-pong", [ping, str(n), str(warm)] + list(cpus or []), False),
        ("a", "raw tonic stub, current_thread", [bench, "seq-raw", addr, str(n), str(warm),
                                                 "current"], True),
        ("b", "WorkerConnection::idle, current_thread",
         [bench, "seq-conn", addr, str(n), str(warm), "current"], True),
        ("b_mt", "WorkerConnection::idle, multi_thread",
         [bench, "seq-conn", addr, str(n), str(warm), "multi"], True),
        ("c", "wool_idle from C", [c_idle, "seq", addr, str(n), str(warm)], True),
    ]
    rows = {}
    try:
        for key, label, argv, has_worker in cases:
            log(f"perf stat ({args.layout}): ({key}) {label}")
            argv = argv if key == "g" else pin + argv
            rows[key] = counted(argv, worker.pid if has_worker else -1, calls, key)
            rows[key]["label"] = label
        exact = {}
        for key, label, argv, has_worker in cases:
            if not has_worker or key == "b_mt":
                continue
            log(f"exact counts ({args.layout}): ({key}) {label}, client and worker")
            template = [{addr: "{addr}", str(n): "{n}", str(warm): "100"}.get(a, a) for a in argv]
            exact[key] = pollcount.poll_costs(template, [args.worker], cpus or (None, None))
            exact[key]["label"] = label
        profiles = {}
        for key, argv in (("a", cases[1][2]), ("c", cases[4][2])):
            log(f"perf record -g: ({key}) client and worker")
            wdata, cdata = PROF / f"worker-{key}.data", PROF / f"client-{key}.data"
            rec = subprocess.Popen(["perf", "record", "-F", "4999", "-g", "-o", str(wdata), "-p",
                                    str(worker.pid)], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
            time.sleep(0.3)
            subprocess.run(["perf", "record", "-F", "4999", "-g", "-o", str(cdata), "--", *pin,
                            *argv],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            rec.send_signal(signal.SIGINT)
            rec.wait(60)
            profiles[f"client ({key})"] = top_symbols(cdata)
            profiles[f"worker while ({key}) polls"] = top_symbols(wdata)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(15)

    md = ["| layer | median µs (under perf) | client CPU µs | client ctx switches | "
          "client syscalls | client wake-ups | worker CPU µs | worker ctx switches | "
          "worker syscalls |", "|---|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for key, r in rows.items():
        w = (f"{r['worker_cpu_us']:.1f} | {r['worker_cs']:.2f} | {r['worker_syscalls']:.2f}"
             if "worker_cpu_us" in r else "(both processes in the client columns) | – | –")
        md.append(f"| ({key}) {r['label']} | {r['median_us']:.1f} | {r['client_cpu_us']:.1f} | "
                  f"{r['client_cs']:.2f} | {r['client_syscalls']:.2f} | "
                  f"{r['client_wakeups']:.2f} | {w} |")
    text = (f"# Per-poll counts (perf stat), all per idle poll; layout {args.layout}\n\n" +
            "\n".join(md) + "\n")
    text += (f"\n# Exact per-poll counts, each side; layout {args.layout}\n\nDifferences of runs "
             "with N1 and N2 polls after the same warm-up, / (N2 - N1): instructions (user space) "
             "and allocations (calls to malloc/calloc/realloc/posix_memalign) from callgrind, "
             "syscalls, writes, reads and context switches from perf stat (tracepoints), user "
             "CPU from rusage.\n\n")
    fields = [("instructions", "{:,.0f}"), ("allocations", "{:.1f}"), ("syscalls", "{:.2f}"),
              ("writes", "{:.2f}"), ("reads", "{:.2f}"), ("cs", "{:.2f}"), ("user_us", "{:.1f}"),
              ("perf_instructions_u", "{:,.0f}"), ("perf_instructions", "{:,.0f}")]
    fields = [f for f in fields if any(f"client_{f[0]}" in r for r in exact.values())]
    text += ("| layer | side | " + " | ".join(f[0].replace("_", " ") for f in fields) + " |\n|---|---|"
             + "--:|" * len(fields) + "\n")
    for key, r in exact.items():
        for side in ("client", "worker"):
            cells = [fmt.format(r[f"{side}_{f}"]) if f"{side}_{f}" in r else "–"
                     for f, fmt in fields]
            text += f"| ({key}) {r['label']} | {side} | " + " | ".join(cells) + " |\n"
    for name, top in profiles.items():
        text += f"\n## perf record -g, {name}: top symbols (self time)\n\n```\n{top}\n```\n"
    (OUT / "profile.md").write_text(text)
    (OUT / "profile.json").write_text(json.dumps({"perf_stat": rows, "exact": exact},
                                                 indent=2) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
