#!/usr/bin/env python3
"""Exact per-poll counts of a sequential idle poll, on the client and on the worker.

Wall-clock time on a busy shared machine moves by tens of per cent between runs; these counts do
not. Every figure is a *difference*: the same command run with N1 and then N2 polls after the
same warm-up (and, on the worker side, a worker process of its own per run), divided by
N2 - N1, so start-up, the connection's dial and the warm-up cancel out and what is left is the
cost of one poll.

- instructions (user space) and allocations: valgrind's callgrind (its ``Ir`` total, and the
  calls it counted to ``malloc``/``calloc``/``realloc``/``posix_memalign``/``aligned_alloc``).
  Exact, and available where the machine exposes no hardware counters (``perf stat -e
  instructions`` works on few VMs); when it does, ``perf`` instructions are recorded too.
- syscalls (all, and the writes and reads among them), context switches, CPU time: ``perf
  stat`` with software events and syscall tracepoints, on the client command and on the worker
  process meanwhile (``-p``).

Used by benches/profile.py (``PROFILE=1 scripts/bench.sh``: every layer, both sides) and by
benches/run.py (the Rust client's instructions per poll with keepalive on and off). By hand:

    python3 benches/pollcount.py --worker target/release/wool-worker -- \\
        target/bench/bin/idle_bench seq {addr} {n} 100

(``{addr}`` and ``{n}`` are filled in). Needs valgrind for instructions and allocations, perf
for syscalls; a missing tool leaves its figures out. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: The allocation functions whose calls count as allocations (Rust's System allocator and libc).
ALLOCATORS = {"malloc", "calloc", "realloc", "posix_memalign", "aligned_alloc", "memalign"}

#: Writes and reads, by the syscalls that carry them (tokio and hyper use write/writev and
#: read/recvfrom on sockets; others are counted for completeness).
WRITES = ("write", "writev", "sendto", "sendmsg")
READS = ("read", "readv", "recvfrom", "recvmsg")
WAITS = ("epoll_wait", "epoll_pwait", "epoll_pwait2", "poll", "ppoll", "futex")
TRACEPOINTS = [f"syscalls:sys_enter_{s}" for s in WRITES + READS + WAITS]
SOFT_EVENTS = ["task-clock", "context-switches", "raw_syscalls:sys_enter"]


def have(tool: str) -> bool:
    return shutil.which(tool) is not None


def perf_events() -> list[str]:
    """The events ``perf stat`` can count here: software events and syscall tracepoints, plus
    hardware instructions (user and total) when the machine exposes them."""
    if not have("perf"):
        return []
    usable = []
    for event in SOFT_EVENTS + TRACEPOINTS + ["instructions:u", "instructions"]:
        probe = subprocess.run(["perf", "stat", "-x,", "-e", event, "true"],
                               capture_output=True, text=True)
        if probe.returncode == 0 and "not supported" not in probe.stderr and \
                "<not counted>" not in probe.stderr:
            usable.append(event)
    return usable


def parse_perf(path: Path) -> dict[str, float]:
    out = {}
    for line in path.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        cols = line.split(",")
        try:
            out[cols[2]] = float(cols[0])
        except (ValueError, IndexError):
            pass
    return out


def parse_callgrind(path: Path) -> dict[str, float]:
    """Ir total and calls to the allocators in one callgrind output file (every thread's)."""
    names: dict[str, str] = {}
    total, allocs, current = 0, 0, None
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith(("summary:", "totals:")):
            total = max(total, int(line.split()[1]))
        elif line.startswith("cfn="):
            m = re.match(r"cfn=\((\d+)\)(?: (.*))?", line)
            if m:
                if m.group(2):
                    names[m.group(1)] = m.group(2)
                current = names.get(m.group(1), "")
            else:
                current = line[4:]
        elif line.startswith("fn="):
            m = re.match(r"fn=\((\d+)\)(?: (.*))?", line)
            if m and m.group(2):
                names[m.group(1)] = m.group(2)
        elif line.startswith("calls=") and current is not None:
            if current.split("'")[0] in ALLOCATORS:
                allocs += int(line[6:].split()[0])
            current = None
    return {"instructions": float(total), "allocations": float(allocs)}


def callgrind(argv: list[str], out: Path, cpu: str | None, **popen) -> subprocess.Popen:
    """``argv`` under callgrind (pinned to `cpu`), every thread's counts in one file at exit."""
    return subprocess.Popen(
        pin(cpu) + ["valgrind", "--tool=callgrind", "--dump-instr=no", "--dump-line=no",
                    "--compress-pos=no", f"--callgrind-out-file={out}", *argv], **popen)


def pin(cpu: str | None) -> list[str]:
    return ["taskset", "-c", cpu] if cpu else []


class Worker:
    """A worker process (under callgrind when `out` is given), pinned to `cpu`."""

    def __init__(self, argv: list[str], cpu: str | None, out: Path | None = None):
        popen = dict(stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.proc = callgrind(argv, out, cpu, **popen) if out else \
            subprocess.Popen(pin(cpu) + argv, **popen)
        self.address = self.proc.stdout.readline().strip()
        if not self.address:
            raise RuntimeError(f"worker {argv} printed no address")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def client_argv(template: list[str], addr: str, n: int) -> list[str]:
    return [a.replace("{addr}", addr).replace("{n}", str(n)) for a in template]


def instructions(template: list[str], worker: list[str], cpus: tuple, n1: int, n2: int,
                 tmp: Path, sides=("client", "worker")) -> dict:
    """Per-poll instructions and allocations from callgrind: the client under callgrind against
    a native worker, then a native client against a worker under callgrind; each side twice
    (N1 and N2 polls), a fresh worker each time."""
    if not have("valgrind"):
        return {}
    result = {}
    for side in sides:
        counts = []
        for n in (n1, n2):
            out = tmp / f"cg-{side}-{n}.out"
            w = Worker(worker, cpus[1], out if side == "worker" else None)
            try:
                argv = client_argv(template, w.address, n)
                if side == "client":
                    p = callgrind(argv, out, cpus[0], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True)
                    _, err = p.communicate()
                    if p.returncode != 0:
                        raise RuntimeError(f"{argv} failed: {err[-2000:]}")
                else:
                    subprocess.run(pin(cpus[0]) + argv, stdout=subprocess.DEVNULL, check=True)
            finally:
                w.stop()
            counts.append(parse_callgrind(out))
        for key in ("instructions", "allocations"):
            result[f"{side}_{key}"] = (counts[1][key] - counts[0][key]) / (n2 - n1)
    return result


def events(template: list[str], worker: list[str], cpus: tuple, n1: int, n2: int,
           tmp: Path) -> dict:
    """Per-poll syscalls (all, writes, reads, waits), context switches, CPU and user time, from
    ``perf stat`` of the client command and of the worker meanwhile: N1 and N2 polls against
    one native worker."""
    usable = perf_events()
    if not usable:
        return {}
    runs = []
    w = Worker(worker, cpus[1])
    try:
        for n in (n1, n2):
            cfile, wfile = tmp / f"perf-client-{n}.csv", tmp / f"perf-worker-{n}.csv"
            wstat = subprocess.Popen(["perf", "stat", "-x,", "-e", ",".join(usable), "-o",
                                      str(wfile), "-p", str(w.proc.pid)],
                                     stderr=subprocess.DEVNULL)
            time.sleep(0.3)
            before = worker_times(w.proc.pid)
            client = subprocess.Popen(["perf", "stat", "-x,", "-e", ",".join(usable), "-o",
                                       str(cfile), "--",
                                       *pin(cpus[0]), *client_argv(template, w.address, n)],
                                      stdout=subprocess.DEVNULL)
            _, status, usage = os.wait4(client.pid, 0)
            client.returncode = os.waitstatus_to_exitcode(status)
            if client.returncode != 0:
                raise RuntimeError(f"client failed ({client.returncode})")
            after = worker_times(w.proc.pid)
            wstat.send_signal(signal.SIGINT)
            wstat.wait(30)
            runs.append({"client": parse_perf(cfile), "worker": parse_perf(wfile),
                         "client_user_s": usage.ru_utime,
                         "worker_user_s": after[0] - before[0]})
    finally:
        w.stop()
    result = {}
    per = lambda side, key: (runs[1][side].get(key, 0) - runs[0][side].get(key, 0)) / (n2 - n1)  # noqa: E731
    for side in ("client", "worker"):
        sc = lambda names: sum(per(side, f"syscalls:sys_enter_{s}") for s in names)  # noqa: E731
        result[f"{side}_syscalls"] = per(side, "raw_syscalls:sys_enter")
        result[f"{side}_writes"] = sc(WRITES)
        result[f"{side}_reads"] = sc(READS)
        result[f"{side}_waits"] = sc(WAITS)
        result[f"{side}_cs"] = per(side, "context-switches")
        result[f"{side}_cpu_us"] = per(side, "task-clock") * 1e3  # task-clock is in ms
        result[f"{side}_user_us"] = (runs[1][f"{side}_user_s"] - runs[0][f"{side}_user_s"]) \
            * 1e6 / (n2 - n1)
        for hw, name in (("instructions:u", "perf_instructions_u"),
                         ("instructions", "perf_instructions")):
            if hw in usable:
                result[f"{side}_{name}"] = per(side, hw)
    return result


def worker_times(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of a process so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def poll_costs(template: list[str], worker: list[str], cpus: tuple | None = None,
               n1: int = 200, n2: int = 1200, perf_n: tuple = (2000, 12000),
               sides=("client", "worker")) -> dict:
    """Every per-poll count of the client command `template` ({addr} and {n} filled in) against
    `worker`: callgrind with N1/N2 polls, perf with perf_n polls."""
    cpus = cpus or (None, None)
    with tempfile.TemporaryDirectory(prefix="pollcount-") as tmp:
        tmp = Path(tmp)
        row = instructions(template, worker, cpus, n1, n2, tmp, sides)
        row.update(events(template, worker, cpus, *perf_n, tmp))
    return row


def keepalive_cost(bench: str, worker: str, cpus: tuple | None = ("0", "1"),
                   n1: int = 200, n2: int = 1200) -> dict:
    """Instructions and allocations per poll of the Rust client, ``WorkerConnection::idle``
    (benches/wool_bench.rs ``seq-conn``, current_thread, 100 warm-up polls), with keepalive on
    (the default) and off: what keepalive costs a poll, exactly. Empty without valgrind."""
    if not have("valgrind"):
        return {}
    if cpus and max(int(c) for c in cpus if c) >= (os.cpu_count() or 1):
        cpus = None
    cpus = cpus or (None, None)
    row = {}
    with tempfile.TemporaryDirectory(prefix="pollcount-") as tmp:
        for name, extra in (("on", []), ("off", ["no-keepalive"])):
            template = [bench, "seq-conn", "{addr}", "{n}", "100", "current", *extra]
            counts = instructions(template, [worker], cpus, n1, n2, Path(tmp), ("client",))
            row[name] = counts["client_instructions"]
            row[f"{name}_allocations"] = counts["client_allocations"]
    row["ratio"] = row["on"] / row["off"]
    row["polls"] = n2 - n1
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--worker", default=str(ROOT / "target/release/wool-worker"))
    parser.add_argument("--layout", default="split", choices=["split", "shared", "free"])
    parser.add_argument("--n1", type=int, default=200)
    parser.add_argument("--n2", type=int, default=1200)
    parser.add_argument("client", nargs="+", help="client command, with {addr} and {n}")
    args = parser.parse_args()
    cpus = {"split": ("0", "1"), "shared": ("0", "0"), "free": (None, None)}[args.layout]
    print(json.dumps(poll_costs(args.client, [args.worker], cpus, args.n1, args.n2), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
