"""The Ray decision: which nodes a Ray cluster's groups run on and how big each pod is.

One function, :func:`ray_cluster`, decides a Ray cluster from a request (the policy's
:class:`~swarm_infra.fleet.model.RayRequest`) and the shapes of the nodes of each GPU
flavor. KubeRay's RayCluster (``swarm_infra.cluster.kuberay``) is built from its result;
bare-node Ray (a later issue) is meant to call the same function, so that both agree on
group sizes and object store memory.

Rules:

- a worker group runs on the gpu-worker nodes of one GPU flavor (node label
  ``swarm.io/gpu-flavor``); the head needs no GPU and has no node constraint;
- a worker's GPUs default to all ``nvidia.com/gpu`` of the smallest node of the flavor
  (device units: a time-sliced or MIG-partitioned GPU counts as several). Its CPUs and
  memory default to the same share of each node's CPUs and memory, less
  :data:`RESERVE_PERCENT` left to the kubelet, system daemons and the device plugin,
  rounded down, and the smallest over the flavor's nodes (so a worker fits every node);
- the object store of every pod is ``object_store_percent`` of its memory, in bytes;
- the cluster autoscales when some group has ``min_replicas < max_replicas``; Kueue admits
  ``min_replicas`` workers at first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..fleet.model import RayRequest
from .node import FLAVOR_LABEL
from .types import RayClusterState, RayGroupState

RESERVE_PERCENT = 10  # of a node's CPUs and memory, left to the kubelet and system daemons
GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class NodeShape:
    """What one gpu-worker node of a flavor offers a pod: ``gpus`` in device units."""

    name: str
    gpus: int
    cpus: int
    memory_gib: int


def default_image(version: str) -> str:
    """Ray's published GPU image for ``version`` (CUDA and the Python default of that release)."""
    return f"rayproject/ray:{version}-gpu"


def object_store_bytes(memory_gib: int, percent: int) -> int:
    """``percent`` of ``memory_gib`` GiB, in bytes (ray start --object-store-memory)."""
    return memory_gib * GIB * percent // 100


def worker_size(
    shapes: Sequence[NodeShape], gpus: int | None, cpus: int | None, memory_gib: int | None
) -> tuple[int, int, int]:
    """(gpus, cpus, memory_gib) of one worker on nodes ``shapes`` (see the module's rules).

    Values given are kept; ``shapes`` must not be empty (the validator checks that the
    flavor has gpu-worker nodes with GPUs).
    """
    if gpus is None:
        gpus = min(s.gpus for s in shapes)
    keep = 100 - RESERVE_PERCENT

    def share(total: int, node: NodeShape) -> int:
        return max(1, total * min(gpus, node.gpus) * keep // (node.gpus * 100)) if node.gpus else 1

    if cpus is None:
        cpus = min(share(s.cpus, s) for s in shapes)
    if memory_gib is None:
        memory_gib = min(share(s.memory_gib, s) for s in shapes)
    return gpus, cpus, memory_gib


def ray_cluster(
    name: str,
    namespace: str,
    request: RayRequest,
    flavor_nodes: Mapping[str, Sequence[NodeShape]],
    *,
    priority: str | None,
    local_queue: str | None,
    tenant: str | None = None,
) -> RayClusterState:
    """The Ray cluster ``name`` for ``request``.

    ``flavor_nodes`` maps each GPU flavor to the shapes of its gpu-worker nodes (every
    flavor the request names must be present and non-empty: the validator's rules
    ``reference.unresolved`` and ``ray.pod-too-large`` guarantee it). ``priority`` is the
    resolved Priority name (the request's, else the global default), ``local_queue`` the
    Kueue LocalQueue that admits the cluster. Groups: the head, then workers by flavor.
    """
    pct = request.object_store_percent
    head: RayGroupState = {
        "name": "head",
        "flavor": None,
        "node_labels": {},
        "gpus": 0,
        "cpus": request.head_cpus,
        "memory_gib": request.head_memory_gib,
        "object_store_bytes": object_store_bytes(request.head_memory_gib, pct),
        "replicas": 1,
        "min_replicas": 1,
        "max_replicas": 1,
    }
    workers: list[RayGroupState] = []
    for w in sorted(request.workers, key=lambda w: w.flavor):
        gpus, cpus, memory_gib = worker_size(flavor_nodes[w.flavor], w.gpus, w.cpus, w.memory_gib)
        workers.append(
            {
                "name": w.flavor,
                "flavor": w.flavor,
                "node_labels": {FLAVOR_LABEL: w.flavor},
                "gpus": gpus,
                "cpus": cpus,
                "memory_gib": memory_gib,
                "object_store_bytes": object_store_bytes(memory_gib, pct),
                "replicas": w.min_replicas,
                "min_replicas": w.min_replicas,
                "max_replicas": w.max_replicas,
            }
        )
    return {
        "name": name,
        "tenant": tenant,
        "namespace": namespace,
        "local_queue": local_queue,
        "priority": priority,
        "ray_version": request.version,
        "image": request.image or default_image(request.version),
        "autoscaling": any(g["min_replicas"] < g["max_replicas"] for g in workers),
        "head": head,
        "workers": workers,
    }
