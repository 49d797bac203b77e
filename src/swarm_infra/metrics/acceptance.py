"""Admission: a node's measurements against the NodeAcceptance thresholds that apply to it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from swarm_infra.metrics import gpu_health
from swarm_infra.metrics.measurement import Measurement
from swarm_infra.tables import table_lines

NOT_MEASURED = "not measured"
NOT_SIMULATED = "not measured (simulated)"
THE_HUB = "the site's hub itself"

RANDREAD_4K_QD32 = {"rw": "randread", "bs": "4096", "iodepth": "32"}
"""The fio job the storage thresholds judge, by what it did (:func:`swarm_infra.metrics.fio.parse_fio`'s
labels): 4 KiB random read at queue depth 32, never the sequential jobs of the same run."""

PART_OF = {
    "min_mesh_bandwidth_to_hub_mbit": "network",
    "max_rtt_to_head_ms": "network",
    "min_scratch_iops": "storage",
    "max_storage_p99_ms": "storage",
    "min_tflops": "gpu",
    **dict.fromkeys(gpu_health.THRESHOLDS, "gpu"),
}
"""The ``swarm metrics run`` part (``--only``) that measures each threshold."""


@dataclass(frozen=True)
class NodeFacts:
    """What rules match on: the node's name, site, roles, GPU models, and whether its GPUs are
    simulated; ``head``: the name of the fleet's head node (``max_rtt_to_head_ms`` is the
    node's mesh RTT to it; None when the fleet has none); ``hub``: the node that stands for
    the node's site in bandwidth tests (:func:`swarm_infra.resolve.mesh.site_representatives`;
    ``min_mesh_bandwidth_to_hub_mbit`` is the node's test to it; None: not known); ``gpus``:
    the declared GPUs, (model, count), which the reported GPUs' identity is checked against."""

    name: str
    site: str
    roles: tuple[str, ...]
    gpu_models: tuple[str, ...]
    simulated_gpu: bool
    head: str | None = None
    hub: str | None = None
    gpus: tuple[tuple[str, int], ...] = ()  # (GPU catalog model, count) as declared


@dataclass(frozen=True)
class Verdict:
    """One threshold on one node: ``value`` in the threshold's unit (None: not measured, see ``note``)."""

    node: str
    threshold_name: str
    threshold: float
    value: float | None
    passed: bool
    note: str = ""


def matches(match: Mapping[str, str], node: NodeFacts) -> bool:
    """Whether every given key of a rule's match fits the node (site, role, gpu_model)."""
    return (
        match.get("site", node.site) == node.site
        and ("role" not in match or match["role"] in node.roles)
        and ("gpu_model" not in match or match["gpu_model"] in node.gpu_models)
    )


def _value(name: str, node: NodeFacts, ms: list[Measurement]) -> float | None:
    """The node's measured value for a threshold, in the threshold's unit; None if absent.

    Worst of several: the lowest for a min_ threshold, the highest for a max_ one.
    """

    def pick(tool: str, field: str, scale: float, **labels: str | None) -> list[float]:
        return [
            m.value * scale
            for m in ms
            if m.tool == tool and m.field == field and all(m.label(k) == v for k, v in labels.items())
        ]

    if name == "min_mesh_bandwidth_to_hub_mbit":
        # What the schedule measures for every node but the hub: the node sends to its site's
        # hub over wg0. Only that direction, and only multi-stream (-P N, N > 1) tests: not the
        # hub's tests across sites, nor a single stream (one TCP flow's window, not the link).
        values = [
            m.value * 1e-6
            for m in ms
            if m.tool == "iperf3"
            and m.field == "end.sum_received.bits_per_second"
            and (m.label("src"), m.label("dst"), m.label("path")) == (node.name, node.hub, "mesh")
            and int(m.label("streams") or 1) > 1
        ]
    elif name == "max_rtt_to_head_ms":
        if node.name == node.head:
            return 0.0  # the head itself
        values = pick("ping", "rtt.p50", 1.0, src=node.name, dst=node.head, path="mesh") if node.head else []
    elif name == "min_scratch_iops":
        values = pick("fio", "read.iops", 1.0, node=node.name, **RANDREAD_4K_QD32)
    elif name == "max_storage_p99_ms":
        values = pick("fio", "read.clat_ns.percentile.99.000000", 1e-6, node=node.name, **RANDREAD_4K_QD32)
    elif name == "min_tflops":
        values = [m.value * 1e-12 for m in ms if m.field == "matmul.flops" and m.label("node") == node.name]
    elif name in gpu_health.THRESHOLDS:
        return gpu_health.threshold_value(name, node.name, ms)
    else:
        raise ValueError(f"unknown threshold {name!r}")
    if not values:
        return None
    return min(values) if name.startswith("min_") else max(values)


def evaluate(
    rules: tuple[tuple[Mapping[str, str], Mapping[str, float]], ...],
    nodes: list[NodeFacts],
    measurements: list[Measurement],
) -> list[Verdict]:
    """A verdict per (node, threshold) of every rule that matches the node, in node then rule order.

    A threshold with no measurement fails with note "not measured"; a GPU threshold
    (``min_tflops`` and :data:`swarm_infra.metrics.gpu_health.THRESHOLDS`) on a node with
    simulated GPUs fails with note "not measured (simulated)" and no value, never a number;
    ``min_mesh_bandwidth_to_hub_mbit`` on the hub itself passes with note "the site's hub
    itself" and no value (it has no hub to send to; its figures are the other nodes'), and
    ``max_rtt_to_head_ms`` on the head itself passes with value 0 -- both only when the
    node is in the measurements at all (a ``node``, ``src`` or ``dst`` label): a node the run
    has no figure of fails them "not measured" too, so that it is never accepted unmeasured.

    Every node with real (nvml) GPUs that a rule matches also gets a ``gpu_identity`` verdict
    first, whatever the rules say: the GPUs nvidia-smi reported must be the declared ones
    (:func:`swarm_infra.metrics.gpu_health.identity_problems`); its value is the number of
    problems, its threshold 0, its note the problems (or "not measured").
    """
    out: list[Verdict] = []
    in_run = {
        name for m in measurements for key in ("node", "src", "dst") if (name := m.label(key)) is not None
    }
    for node in nodes:
        matched = [thresholds for match, thresholds in rules if matches(match, node)]
        if matched and node.gpus and not node.simulated_gpu:
            problems = gpu_health.identity_problems(node.name, node.gpus, measurements)
            if problems is None:
                out.append(Verdict(node.name, "gpu_identity", 0.0, None, False, NOT_MEASURED))
            else:
                out.append(
                    Verdict(
                        node.name,
                        "gpu_identity",
                        0.0,
                        float(len(problems)),
                        not problems,
                        "; ".join(problems),
                    )
                )
        for thresholds in matched:
            for name, limit in thresholds.items():
                if node.simulated_gpu and (name == "min_tflops" or name in gpu_health.THRESHOLDS):
                    out.append(Verdict(node.name, name, limit, None, False, NOT_SIMULATED))
                    continue
                if node.name not in in_run and (
                    (name == "min_mesh_bandwidth_to_hub_mbit" and node.hub == node.name)
                    or (name == "max_rtt_to_head_ms" and node.head == node.name)
                ):
                    # True of the node by its place, not by a figure: not without any figure of it.
                    out.append(Verdict(node.name, name, limit, None, False, NOT_MEASURED))
                    continue
                if name == "min_mesh_bandwidth_to_hub_mbit" and node.hub == node.name:
                    out.append(Verdict(node.name, name, limit, None, True, THE_HUB))
                    continue
                value = _value(name, node, measurements)
                if value is None:
                    out.append(Verdict(node.name, name, limit, None, False, NOT_MEASURED))
                else:
                    ok = value >= limit if name.startswith("min_") else value <= limit
                    note = ""
                    if name == "min_dcgm_diag_level" and not ok:
                        note = "; ".join(gpu_health.failed_tests(node.name, measurements))
                    out.append(Verdict(node.name, name, limit, value, ok, note))
    return out


def uncovered(
    rules: tuple[tuple[Mapping[str, str], Mapping[str, float]], ...],
    nodes: list[NodeFacts],
    parts: Iterable[str],
    measured_nodes: Iterable[str] | None,
) -> list[str]:
    """Why a run cannot be judged against ``rules`` for ``nodes``: each part a matching
    threshold needs (:data:`PART_OF`) that the run did not measure (``parts``), and each node
    it did not measure (``measured_nodes``; None: not said, as for an imported run) among those
    a threshold needs: the node itself, the head for ``max_rtt_to_head_ms`` and the site's hub
    for ``min_mesh_bandwidth_to_hub_mbit``. Sorted, without repeats; empty: the run covers them.
    """
    parts = set(parts)
    measured = None if measured_nodes is None else set(measured_nodes)
    gaps: set[str] = set()
    for node in nodes:
        for match, thresholds in rules:
            if not matches(match, node):
                continue
            for name in thresholds:
                if PART_OF[name] not in parts:
                    gaps.add(f"the run did not measure {PART_OF[name]}, which {name} needs")
                    continue
                if measured is None:
                    continue
                need = {node.name}
                if name == "max_rtt_to_head_ms" and node.head:
                    need.add(node.head)
                if name == "min_mesh_bandwidth_to_hub_mbit" and node.hub:
                    need.add(node.hub)
                for missing in sorted(need - measured):
                    gaps.add(f"the run did not measure {missing}, which {name} of {node.name} needs")
    return sorted(gaps)


NO_MEASUREMENT = "\u2014"
"""A table cell whose threshold has no measurement (the node is not accepted)."""


def _cell(v: Verdict) -> str:
    if v.value is not None:
        return f"{'pass' if v.passed else 'FAIL'} {v.value:.4g}"
    if v.note == THE_HUB:
        return "pass (hub)"
    return f"{NO_MEASUREMENT} simulated" if v.note == NOT_SIMULATED else NO_MEASUREMENT


def _wrapped(name: str, width: int) -> list[str]:
    """A threshold's name in lines of at most ``width`` characters, cut after an ``_``
    (each line but the last ends with it: the lines concatenated are the name)."""
    lines: list[str] = []
    for word in name.split("_"):
        if lines and len(lines[-1]) + len(word) + 1 <= width:
            lines[-1] += word + "_"
        else:
            lines.append(word + "_")
    lines[-1] = lines[-1][:-1]
    return lines


def verdict_table(verdicts: list[Verdict], header_width: int = 14) -> list[str]:
    """The verdicts as one table, one row per node and one column per threshold (in the
    order they first come), then a line per failure whose reason does not fit a cell.

    Shape: the header (``NODE`` and each threshold's name, cut after an ``_`` into lines of
    at most ``header_width`` characters), a ``limit`` row (``>= N`` for a ``min_`` threshold,
    ``<= N`` otherwise; ``>= N M`` where rules give nodes different limits, each cell then
    saying its own), and a row per node whose cells are ``pass VALUE``, ``FAIL VALUE``,
    ``pass (hub)`` (:data:`THE_HUB`), :data:`NO_MEASUREMENT` (not measured: fails) or
    ``NO_MEASUREMENT simulated`` (:data:`NOT_SIMULATED`), or blank where no rule gives the
    node the threshold; values have 4 significant digits, in the threshold's unit. Where
    two rules give one node the same threshold its failing verdict is shown. The failure
    lines: ``NODE: THRESHOLD = VALUE, threshold LIMIT (NOTE)``, for failed verdicts with a
    value and a note (the GPUs' identity problems, DCGM's failed tests). Lines without
    trailing blanks; [] for no verdicts.
    """
    if not verdicts:
        return []
    columns = list(dict.fromkeys(v.threshold_name for v in verdicts))
    rows: dict[str, dict[str, Verdict]] = {}
    for v in verdicts:
        shown = rows.setdefault(v.node, {}).get(v.threshold_name)
        if shown is None or (shown.passed and not v.passed):
            rows[v.node][v.threshold_name] = v

    def op(name: str) -> str:
        return ">=" if name.startswith("min_") else "<="

    limits = {c: sorted({v.threshold for v in verdicts if v.threshold_name == c}) for c in columns}
    heads = [_wrapped(c, header_width) for c in columns]
    height = max(len(h) for h in heads)
    table = [["NODE" if i == 0 else "", *(h[i] if i < len(h) else "" for h in heads)] for i in range(height)]
    table.append(["limit", *(f"{op(c)} {' '.join(f'{x:g}' for x in limits[c])}" for c in columns)])
    for node, cells in rows.items():
        row = [node]
        for c in columns:
            cell = cells.get(c)
            text = "" if cell is None else _cell(cell)
            if cell is not None and len(limits[c]) > 1:
                text += f" ({op(c)} {cell.threshold:g})"
            row.append(text)
        table.append(row)
    lines = table_lines(table)
    for v in verdicts:
        if not v.passed and v.value is not None and v.note:
            lines.append(
                f"{v.node}: {v.threshold_name} = {v.value:.4g}, threshold {v.threshold:g} ({v.note})"
            )
    return lines
