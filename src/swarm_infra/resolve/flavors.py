"""GPU flavors as the cluster sees them: the nodes behind each flavor, what the NVIDIA device
plugin advertises on them, and what a pod can get there.

Shared by the validator's checks and the resolver, so both read the same decision. A node
counts toward the flavor of each catalog GPU model it has; only gpu-worker nodes count.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import Any

from ..fleet.model import RayRequest
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


# A site's CPU flavor: the Kueue ResourceFlavor of its nodes without GPUs (node label
# swarm.io/site), where Ray heads and other CPU-only pods of the site's workloads run.
CPU_FLAVOR_PREFIX = "cpu-"


def cpu_flavor(site: str) -> str:
    """The name of ``site``'s CPU flavor (GPU flavors are catalog names, never ``cpu-*``)."""
    return CPU_FLAVOR_PREFIX + site


def cpu_nodes(a: Analysis) -> dict[str, list[Any]]:
    """Site → its nodes without GPUs (any role; every fleet node is a Kubernetes node), in
    name order; sites without such nodes are left out."""
    out: dict[str, list[Any]] = defaultdict(list)
    for node in sorted(a.fleet.nodes.values(), key=lambda n: n.name):
        if not node.gpus:
            out[node.site].append(node)
    return dict(out)


def workers_site(a: Analysis, flavor: str) -> str | None:
    """The site with the most gpu-worker nodes of ``flavor`` (ties: the first by name), or
    None when the flavor has no gpu-worker node."""
    catalog = gpu_catalog()
    count: dict[str, int] = defaultdict(int)
    for node in a.fleet.nodes.values():
        if "gpu-worker" in node.roles and any(
            s.model in catalog and catalog[s.model]["flavor"] == flavor for s in node.gpus
        ):
            count[node.site] += 1
    return min(count, key=lambda s: (-count[s], s)) if count else None


def head_placement(
    a: Analysis, first_worker_flavor: str, cpus: int, memory_gib: int
) -> tuple[str, str] | None:
    """Where a Ray head of ``cpus`` CPUs and ``memory_gib`` GiB goes, decided once for the
    resolver and the validator: the CPU flavor of the site that holds most of its first
    worker group's nodes (``("cpu", site)``) when a node without GPUs there can hold it, else
    the first worker group's GPU flavor (``("gpu", flavor)``: the head runs beside its
    workers, on their nodes). None: the flavor has no gpu-worker node.

    Kueue tries a ClusterQueue's flavors in order and a CPU-only pod fits the CPU share of
    any GPU flavor, so without a node selector a head would take the first flavor, in any
    site; the head's selector (site label, or the flavor label) leaves Kueue one choice
    (kueue v0.17.5 pkg/scheduler/flavorassigner/flavorassigner.go, ``checkFlavorForPodSets``:
    a flavor whose nodeLabels do not match the pod's selector is skipped).
    """
    site = workers_site(a, first_worker_flavor)
    if site is None:
        return None
    if any(n.cpus >= cpus and n.memory_gib >= memory_gib for n in cpu_nodes(a).get(site, ())):
        return ("cpu", site)
    return ("gpu", first_worker_flavor)


def units_per_gpu(a: Analysis, sharing: dict[str, GpuSharingState]) -> dict[str, int]:
    """Flavor → ``nvidia.com/gpu`` its gpu-worker nodes advertise per GPU, for flavors where
    every node agrees (the others are ``gpu.sharing-inconsistent`` once they have quota)."""
    out: dict[str, int] = {}
    for f, members in flavor_nodes(a, sharing).items():
        units = {u for _, u in members}
        if len(units) == 1 and None not in units:
            (out[f],) = units  # type: ignore[assignment]
    return out


def ray_request_in_device_units(request: RayRequest, units: dict[str, int]) -> RayRequest:
    """``request`` with each worker group's ``gpus`` (declared in GPUs, like quotas) in the
    device plugin's units (times the flavor's ``nvidia.com/gpu`` per GPU), as pods request."""
    return replace(
        request,
        workers=tuple(
            w if w.gpus is None else replace(w, gpus=w.gpus * units.get(w.flavor, 1)) for w in request.workers
        ),
    )


def queue_gpu_units(a: Analysis, units: dict[str, int], queue: str) -> int:
    """The fewest ``nvidia.com/gpu`` per GPU among the flavors of ``queue``'s quotas (1 when
    none is known): ``caps.gpus`` (in GPUs) times this is a namespace ResourceQuota that
    never admits more than ``caps.gpus`` GPUs, whichever flavor the pods land on."""
    alloc = a.fleet.allocation
    q = next((q for q in alloc.queues if q.name == queue), None) if alloc else None
    found = [units[x.flavor] for x in (q.quotas if q else ()) if x.flavor in units]
    return min(found, default=1)
