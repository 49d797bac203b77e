"""GPU flavors as the cluster sees them: the nodes behind each flavor, what the NVIDIA device
plugin advertises on them, and what a pod can get there.

Shared by the validator's checks and the resolver, so both read the same decision. A node
counts toward the flavor of each catalog GPU model it has; only gpu-worker nodes count.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from .analysis import Analysis
from .catalog import gpu_catalog
from .gpu import sharing_state
from .ray import NodeShape
from .types import GpuSharingState


def node_sharing(a: Analysis) -> dict[str, GpuSharingState]:
    """:class:`~swarm_infra.resolve.types.GpuSharingState` of every node with GPUs, by name
    (one shared dict per GpuProfile). A node whose profile is unknown or absent: no sharing."""
    by_profile: dict[str | None, GpuSharingState] = {}
    out: dict[str, GpuSharingState] = {}
    for node in a.fleet.nodes.values():
        if not node.gpus:
            continue
        choice = a.choices.get(node.name, {}).get("gpu_profile")
        profile = choice.profile if choice and choice.profile in a.fleet.gpu_profiles else None
        if profile not in by_profile:
            spec = a.fleet.gpu_profiles[profile].spec if profile else {}
            by_profile[profile] = sharing_state(profile, spec)
        out[node.name] = by_profile[profile]
    return out


def flavor_nodes(a: Analysis, sharing: dict[str, GpuSharingState]) -> dict[str, list[tuple[Any, int | None]]]:
    """Flavor → [(gpu-worker Node, nvidia.com/gpu per GPU or None)], nodes in name order."""
    catalog = gpu_catalog()
    out: dict[str, list[tuple[Any, int | None]]] = defaultdict(list)
    for node in a.fleet.nodes.values():
        if "gpu-worker" not in node.roles:
            continue
        for slot in node.gpus:
            if slot.model in catalog:
                out[catalog[slot.model]["flavor"]].append((node, sharing[node.name]["units_per_gpu"]))
    return dict(out)


def flavor_shapes(a: Analysis, sharing: dict[str, GpuSharingState]) -> dict[str, list[NodeShape]]:
    """Flavor → what each of its gpu-worker nodes offers a pod (GPUs in device units; a node
    whose GPUs are not advertised as nvidia.com/gpu offers 0)."""
    catalog = gpu_catalog()
    out: dict[str, list[NodeShape]] = defaultdict(list)
    for node in a.fleet.nodes.values():
        if "gpu-worker" not in node.roles:
            continue
        units = sharing[node.name]["units_per_gpu"] if node.gpus else None
        for slot in node.gpus:
            if slot.model in catalog:
                out[catalog[slot.model]["flavor"]].append(
                    NodeShape(node.name, slot.count * (units or 0), node.cpus, node.memory_gib)
                )
    return dict(out)
