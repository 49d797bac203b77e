"""Admission: a node's measurements against the NodeAcceptance thresholds that apply to it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from swarm_infra.metrics import gpu_health
from swarm_infra.metrics.measurement import Measurement

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
    itself" and no value (it has no hub to send to; its figures are the other nodes').

    Every node with real (nvml) GPUs that a rule matches also gets a ``gpu_identity`` verdict
    first, whatever the rules say: the GPUs nvidia-smi reported must be the declared ones
    (:func:`swarm_infra.metrics.gpu_health.identity_problems`); its value is the number of
    problems, its threshold 0, its note the problems (or "not measured").
    """
    out: list[Verdict] = []
    for node in nodes:
        matched = [thresholds for match, thresholds in rules if matches(match, node)]
        if matched and node.gpus and not node.simulated_gpu:
            problems = gpu_health.identity_problems(node.name, node.gpus, measurements)
            if problems is None:
                out.append(Verdict(node.name, "gpu_identity", 0.0, None, False, "not measured"))
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
                if name == "min_mesh_bandwidth_to_hub_mbit" and node.hub == node.name:
                    out.append(Verdict(node.name, name, limit, None, True, THE_HUB))
                    continue
                value = _value(name, node, measurements)
                if value is None:
                    out.append(Verdict(node.name, name, limit, None, False, "not measured"))
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
