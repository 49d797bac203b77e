"""PNG plots of a run (matplotlib, Agg backend): latency heatmap and mesh-vs-underlay bandwidth."""

from __future__ import annotations

import statistics
from pathlib import Path

from swarm_infra.metrics.measurement import Measurement


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def latency_heatmap(measurements: list[Measurement], out: Path, site_of: dict[str, str]) -> Path | None:
    """Mean ping ``rtt.p50`` (ms) per (source site, destination site), as a heatmap PNG at ``out``.

    Uses ping measurements with ``src`` and ``dst`` labels whose nodes ``site_of`` knows
    (``path=mesh`` only when any has a path label of mesh). Returns ``out``, or None when
    there is nothing to draw.
    """
    cells: dict[tuple[str, str], list[float]] = {}
    for m in measurements:
        src, dst = m.label("src"), m.label("dst")
        if m.tool != "ping" or m.field != "rtt.p50" or src not in site_of or dst not in site_of:
            continue
        if m.label("path") not in (None, "mesh"):
            continue
        cells.setdefault((site_of[src], site_of[dst]), []).append(m.value)
    if not cells:
        return None
    sites = sorted({s for pair in cells for s in pair})
    grid = [[float("nan")] * len(sites) for _ in sites]
    for (a, b), values in cells.items():
        grid[sites.index(a)][sites.index(b)] = sum(values) / len(values)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(1.2 * len(sites) + 3, 1.0 * len(sites) + 2))
    image = ax.imshow(grid, cmap="viridis")
    for i, row in enumerate(grid):  # the figure in each cell: colours alone do not give numbers
        for j, value in enumerate(row):
            if value == value:  # not NaN
                ax.text(j, i, f"{value:.1f}", ha="center", va="center", color="white", fontsize=9)
    ax.set_xticks(range(len(sites)), sites, rotation=45, ha="right")
    ax.set_yticks(range(len(sites)), sites)
    ax.set_xlabel("destination site")
    ax.set_ylabel("source site")
    ax.set_title("RTT p50 (ms), mesh")
    fig.colorbar(image, ax=ax, label="ms")
    fig.tight_layout()
    fig.savefig(out, format="png")
    plt.close(fig)
    return out


def bandwidth_bars(measurements: list[Measurement], out: Path) -> Path | None:
    """``end.sum_received.bits_per_second`` in Mbit/s per (src→dst, streams), mesh vs underlay
    bars: the median of the test's repeats.

    Returns ``out``, or None when no iperf3 measurement has a ``path`` label.
    """
    runs: dict[str, dict[str, list[float]]] = {}
    for m in measurements:
        if m.tool != "iperf3" or m.field != "end.sum_received.bits_per_second" or m.label("path") is None:
            continue
        pair = f"{m.label('src')}→{m.label('dst')} P{m.label('streams')}"
        runs.setdefault(pair, {}).setdefault(str(m.label("path")), []).append(m.value / 1e6)
    bars = {
        pair: {path: statistics.median(v) for path, v in by_path.items()} for pair, by_path in runs.items()
    }
    if not bars:
        return None
    pairs = sorted(bars)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(4.0, 1.5 * len(pairs)), 4))
    width = 0.4
    for i, path in enumerate(("underlay", "mesh")):
        ax.bar(
            [x + (i - 0.5) * width for x in range(len(pairs))],
            [bars[p].get(path, 0.0) for p in pairs],
            width,
            label=path,
        )
    ax.set_xticks(range(len(pairs)), pairs, rotation=30, ha="right")
    ax.set_yscale("log")  # a veth underlay and a WAN mesh differ by orders of magnitude
    ax.set_ylabel("Mbit/s received (log)")
    ax.set_title("iperf3 bandwidth: mesh (wg0) vs underlay")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, format="png")
    plt.close(fig)
    return out


def training_scaling(measurements: list[Measurement], out: Path) -> Path | None:
    """The weak-scaling curve: ``training.samples_per_s`` (median, ``scaling=weak``) against
    the worker count, min-max bars, the ideal (linear from one worker) dashed and the scaling
    efficiency on the right axis.

    Returns ``out``, or None when no weak-scaling measurement exists.
    """
    weak = [m for m in measurements if m.tool == "ray" and m.label("scaling") == "weak"]
    by: dict[str, dict[int, float]] = {}
    for m in weak:
        by.setdefault(m.field, {})[int(str(m.label("workers")))] = m.value
    rate = by.get("training.samples_per_s", {})
    if not rate or 1 not in rate:
        return None
    nodes = sorted(rate)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5, 4))
    low, high = by.get("training.samples_per_s.min", rate), by.get("training.samples_per_s.max", rate)
    spread = [[rate[n] - low.get(n, rate[n]) for n in nodes], [high.get(n, rate[n]) - rate[n] for n in nodes]]
    ax.errorbar(nodes, [rate[n] for n in nodes], yerr=spread, fmt="o-", capsize=3, label="median (min-max)")
    ax.plot(nodes, [n * rate[1] for n in nodes], "--", color="grey", label="linear (ideal)")
    ax.set_xticks(nodes)
    ax.set_xlabel("Ray Train workers")
    ax.set_ylabel("samples/s")
    ax.set_title("Ray training throughput (weak scaling)")
    eff = ax.twinx()
    ratios = [rate[n] / (n * rate[1]) for n in nodes]
    eff.plot(nodes, ratios, "s:", color="tab:red", label="efficiency")
    # Shared or oversubscribed CPUs can make efficiency exceed 1; keep every point in view.
    eff.set_ylim(0, max(1.1, max(ratios) * 1.1))
    eff.set_ylabel("scaling efficiency", color="tab:red")
    # The artists with labels (the error bar's container, not its cap lines, "_nolegend_").
    handles, labels = ax.get_legend_handles_labels()
    more, more_labels = eff.get_legend_handles_labels()
    ax.legend(handles + more, labels + more_labels, loc="upper left")
    fig.tight_layout()
    fig.savefig(out, format="png")
    plt.close(fig)
    return out


def inference_latency(measurements: list[Measurement], out: Path) -> Path | None:
    """Ray Serve latency p50, p90 and p99 (those reported: a run with too few answers has no
    p99) (ms, from the intended send times) against the offered
    request rate (open loop), with the answered requests/s on the right axis. Returns ``out``,
    or None when no inference was measured."""
    by: dict[str, dict[float, float]] = {}
    for m in measurements:
        if m.tool == "ray-serve" and m.label("rate") is not None:
            by.setdefault(m.field, {})[float(str(m.label("rate")))] = m.value
    if not by.get("latency.p50"):
        return None
    clients = sorted(by["latency.p50"])
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5, 4))
    for field, style in (("latency.p50", "o-"), ("latency.p90", "^-."), ("latency.p99", "s--")):
        points = by.get(field, {})
        ax.plot(
            [c for c in clients if c in points],
            [points[c] for c in clients if c in points],
            style,
            label=field,
        )
    ax.set_xscale("log", base=2)
    ax.set_xticks(clients, [f"{c:g}" for c in clients])
    ax.set_xlabel("offered requests/s (open loop)")
    ax.set_ylabel("latency (ms)")
    ax.set_title("Ray Serve over the mesh")
    rate = by.get("requests_per_s", {})
    if rate:
        right = ax.twinx()
        right.plot(
            [c for c in clients if c in rate],
            [rate[c] for c in clients if c in rate],
            "^:",
            color="tab:red",
            label="requests/s",
        )
        right.set_ylabel("requests/s", color="tab:red")
    lines = ax.get_lines() + (right.get_lines() if rate else [])
    ax.legend(lines, [line.get_label() for line in lines], loc="upper left")
    fig.tight_layout()
    fig.savefig(out, format="png")
    plt.close(fig)
    return out
