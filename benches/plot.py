#!/usr/bin/env python3
"""Renders target/bench/results.json as one PNG (BENCHMARKS.png): run by scripts/bench.sh with
the matplotlib venv (target/venvs/bench).

    python plot.py RESULTS.json OUT.png

Four panels: latency per layer (median bar, p99 tick, the floor as a line; the grpc-go anchor
(h) when measured); polls/s under concurrent bursts on one connection (grpc-go too, if run); echo dispatch throughput against Wool's Python worker; and
the issue's targets, met or missed.
"""

from __future__ import annotations

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

OURS = "#1f6fb2"
OURS_LIGHT = "#7fb3e0"
WOOL = "#e07b39"
FLOOR = "#6b6b6b"
GRPC = "#7d5ba6"  # the grpc-go anchor: a stock gRPC client, neither ours nor Wool's
GOOD = "#2e8b57"
BAD = "#c0392b"


def latency_panel(ax, seq: dict, pinned: str | None = None, shared: dict | None = None) -> None:
    order = ["g", "h", "a", "a_mt", "b", "b_mt", "c", "c_uds", "d", "e", "f"]
    names = {
        "g": "(g) floor: 1-byte TCP ping-pong",
        "a": "(a) raw tonic stub",
        "a_mt": "(a′) raw tonic, multi_thread rt",
        "b": "(b) WorkerConnection::idle",
        "b_mt": "(b′) WorkerConnection, multi_thread",
        "c": "(c) wool_idle from C",
        "c_uds": "(c) over a Unix socket (extra)",
        "d": "(d) Go binding",
        "e": "(e) Python ctypes binding",
        "f": "(f) Wool's own Python client",
        "h": "(h) grpc-go, raw codec (anchor)",
    }
    keys = [k for k in order if k in seq][::-1]
    y = list(range(len(keys)))
    med = [seq[k]["median_us"] for k in keys]
    p99 = [seq[k]["p99_us"] for k in keys]
    colors = [FLOOR if k == "g" else WOOL if k == "f" else GRPC if k == "h" else
              (OURS if k in ("c", "a") else OURS_LIGHT) for k in keys]
    floor = seq["g"]["median_us"]
    a = seq["a"]["median_us"]
    left = min([floor] + ([shared["g"]["median_us"]] if shared and "g" in shared else [])) / 2.5
    right = max(p99) * 14
    # Log scale: equal ratios are equal distances, and ratios are what to compare.
    ax.set_xscale("log")
    ax.barh(y, [p - left for p in p99], left=left, color=colors, alpha=0.28, height=0.7,
            zorder=2)
    ax.barh(y, [m - left for m in med], left=left, color=colors, height=0.7, zorder=3)
    handles = [Patch(color=GOOD, alpha=0.12, label="≤ 2× floor: the target for (c)")]
    if shared and pinned != "shared":
        ys = [yi for yi, k in zip(y, keys) if k in shared]
        xs = [shared[k]["median_us"] for k in keys if k in shared]
        handles.append(ax.scatter(
            xs, ys, marker="D", s=28, color="white", edgecolors="black", linewidths=1, zorder=5,
            label="median with client and worker on one CPU (software cost)"))
    ax.legend(handles=handles, loc="upper right", fontsize=7.5, frameon=True, framealpha=0.9)
    ax.axvline(floor, color=FLOOR, ls="--", lw=1, zorder=1)
    ax.axvspan(left, 2 * floor, color=GOOD, alpha=0.07, zorder=0)
    ax.set_ylim(-0.6, len(keys) + 0.75)  # room for the legend above the floor row
    for yi, k, m, p in zip(y, keys, med, p99):
        label = (f"{m:.0f} µs (p99 {p:.0f})" if k == "g" else
                 f"{m:.0f} µs (p99 {p:.0f})   {m / a:.2f}× a   {m / floor:.1f}× floor")
        ax.text(p * 1.08, yi, label, va="center", fontsize=8.5, zorder=4)
    ax.set_yticks(y, [names[k] for k in keys], fontsize=9)
    ax.set_xlim(left, right)
    ax.set_xlabel("µs per idle poll, log scale (solid = median, pale = p99)")
    where = {"split": " (client CPU 0, worker CPU 1)",
             "shared": " (client + worker on CPU 0)"}.get(pinned or "", "")
    ax.set_title(f"1. Sequential idle polls, one connection{where}", loc="left",
                 fontweight="bold")
    ax.grid(axis="x", which="major", alpha=0.3, zorder=0)


def concurrency_panel(ax, conc: dict) -> None:
    levels = conc["levels"]
    series = [("Rust tasks, one WorkerConnection", conc["rust_tasks"], OURS),
              (f"C threads, one handle (≤{conc['c_max_threads']} threads)", conc["c_threads"],
               OURS_LIGHT),
              ("Wool's Python client, one WorkerConnection", conc["wool_python"], WOOL)]
    if conc.get("grpc_go"):
        series.append(("grpc-go goroutines, one ClientConn (anchor)", conc["grpc_go"], GRPC))
    width = 0.78 / len(series)
    for i, (label, rows, color) in enumerate(series):
        by = {r["concurrency"]: r for r in rows}
        xs, ys, fails = [], [], []
        for j, n in enumerate(levels):
            x = j + (i - (len(series) - 1) / 2) * width
            if n in by:
                xs.append(x)
                ys.append(by[n]["polls_per_s"])
                fails.append(by[n]["failed"])
            else:
                ax.text(x, 0, f"n/a: ≤{conc['c_max_threads']} threads", ha="center",
                        va="bottom", fontsize=7.5, color="gray", rotation=90)
        bars = ax.bar(xs, ys, width, color=color, label=label, zorder=2)
        for bar, v, f in zip(bars, ys, fails):
            txt = f"{v / 1000:.1f}k" + (f"\n{f} failed" if f else "")
            ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(), txt, ha="center",
                    va="bottom", fontsize=7.5 if len(series) <= 3 else 6.5,
                    color=BAD if f else "black")
    ax.set_xticks(range(len(levels)), [f"{n:,}" for n in levels])
    ax.set_xlabel("concurrent polls in each burst")
    ax.set_ylabel("polls / s")
    # headroom for the legend (one line per series) above the bars
    ax.set_ylim(0, ax.get_ylim()[1] * (1.15 + 0.1 * max(0, len(series) - 3)))
    ax.set_title("2. Concurrent polls on one connection (0 failures unless marked)", loc="left",
                 fontweight="bold")
    ax.grid(axis="y", alpha=0.3, zorder=0)
    ax.legend(fontsize=8, loc="upper left", frameon=False)


def dispatch_panel(ax, disp: dict, fleet: dict | None) -> None:
    rows = [("wool-worker\nWorkerConnection", disp["ours_connection"]["tasks_per_s"], OURS),
            ("wool-worker\nraw stub replay", disp["ours_raw"]["tasks_per_s"], OURS_LIGHT),
            ("Wool Python worker\nraw stub replay", disp["wool_raw"]["tasks_per_s"], WOOL),
            ("Wool Python worker\nWool's own client", disp["wool_e2e"]["tasks_per_s"], "#f2b58c")]
    xs = range(len(rows))
    bars = ax.bar(xs, [r[1] for r in rows], color=[r[2] for r in rows], zorder=2)
    ax.set_yscale("log")
    for bar, (_, v, _) in zip(bars, rows):
        ax.text(bar.get_x() + bar.get_width() / 2, v * 1.12, f"{v:,.0f}", ha="center",
                va="bottom", fontsize=8.5)
    ax.set_xticks(list(xs), [r[0] for r in rows], fontsize=8)
    ax.set_ylabel("echo tasks / s (log scale)")
    ax.set_ylim(bottom=min(r[1] for r in rows) / 3, top=max(r[1] for r in rows) * 4)
    ic = disp["idle_cost"]
    ax.set_title(f"5. Echo dispatch, {disp['concurrency']} in flight: "
                 f"{disp['ratio_ours_to_wool_raw']:.0f}× Wool's worker", loc="left",
                 fontweight="bold")
    note = (f"with a 1 kHz idle poller: {-ic['cost_pct']:+.1f} % "
            f"({ic['median_without']:,.0f} → {ic['median_with']:,.0f} tasks/s)")
    if fleet:
        note += (f"\n{fleet['endpoints']:,}-endpoint sweep, {fleet['concurrency']} in flight: "
                 f"{fleet['warm_median_ms']:.0f} ms warm, {fleet['cold_median_ms']:.0f} ms cold")
    ax.text(0.98, 0.97, note, transform=ax.transAxes, ha="right", va="top", fontsize=8,
            bbox=dict(facecolor="white", edgecolor="#cccccc"))
    ax.grid(axis="y", alpha=0.3, zorder=0)


def targets_panel(ax, targets: list[dict]) -> None:
    ax.axis("off")
    ax.set_title("Targets", loc="left", fontweight="bold")
    rows = [t for t in targets if not t["target"].startswith("  ")]
    n = len(rows)
    step = 1 / (n + 0.2)
    for i, t in enumerate(rows):
        y = 1 - (i + 0.5) * step
        # met: None = inconclusive, "n/a" = reported with no verdict, else a bool.
        color = "#d68910" if t["met"] is None else "#777777" if t["met"] == "n/a" else \
            GOOD if t["met"] else BAD
        mark = "?" if t["met"] is None else "–" if t["met"] == "n/a" else \
            "✔" if t["met"] else "✘"
        ax.text(0.0, y, mark, color=color, fontsize=15, va="center", fontweight="bold",
                transform=ax.transAxes)
        ax.text(0.07, y + 0.3 * step, t["target"], fontsize=9, va="center",
                transform=ax.transAxes)
        ax.text(0.07, y, f"goal {t['goal']}   measured {t['measured']}", fontsize=8.5,
                va="center", color=color, transform=ax.transAxes)
        if t.get("note"):
            ax.text(0.07, y - 0.28 * step, t["note"], fontsize=7.5, va="center",
                    color="#555555", transform=ax.transAxes)


def main() -> int:
    res = json.loads(open(sys.argv[1]).read())
    out = sys.argv[2]
    # The bottom row grows with the targets listed (nine fit the original 11 inches).
    listed = sum(1 for t in res["targets"] if not t["target"].startswith("  "))
    bottom = 0.9 * max(1.0, listed / 9)
    fig = plt.figure(figsize=(16, 11 * (1 + bottom) / 1.9), dpi=110)
    grid = fig.add_gridspec(2, 2, width_ratios=[1.15, 1], height_ratios=[1, bottom], hspace=0.32,
                            wspace=0.42)
    latency_panel(fig.add_subplot(grid[0, 0]), res["sequential"],
                  res.get("sequential_layout"), res.get("sequential_layouts", {}).get("shared"))
    concurrency_panel(fig.add_subplot(grid[0, 1]), res["concurrency"])
    dispatch_panel(fig.add_subplot(grid[1, 0]), res["dispatch"], res.get("fleet"))
    targets_panel(fig.add_subplot(grid[1, 1]), res["targets"])
    m = res["machine"]
    fig.suptitle(f"libwool benchmarks — {m['nproc']} cores, {m['cpu_model']}, Linux "
                 f"{m['kernel']} — {res['started'][:10]}{'  (QUICK run)' if res['quick'] else ''}"
                 "\nratios are what to compare: absolute numbers vary from run to run",
                 fontsize=11)
    fig.legend(handles=[Patch(color=OURS, label="libwool"), Patch(color=WOOL, label="Wool (Python)"),
                        Patch(color=FLOOR, label="floor")]
               + ([Patch(color=GRPC, label="grpc-go (anchor)")]
                  if "h" in res["sequential"] or res["concurrency"].get("grpc_go") else []),
               loc="upper right", ncol=4,
               frameon=False, fontsize=9)
    fig.savefig(out, bbox_inches="tight")
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
