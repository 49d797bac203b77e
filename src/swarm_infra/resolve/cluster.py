"""ClusterState: what the fleet's Kubernetes cluster should hold, decided once.

Flavors with their nodes' capacity and device units, ClusterQueues with every covered
resource, cohorts, tenants with caps, priorities, storage, GPU sharing configs, Ray
clusters and the mesh topology. ``swarm_infra.cluster`` turns it into Kubernetes objects
without deciding anything further.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any, Literal, cast

from ..fleet.model import Allocation, Fleet, Queue, Storage, Tenant
from . import ray
from .analysis import Analysis
from .capacity import gpu_capacity
from .catalog import gpu_catalog
from .flavors import (
    cpu_flavor,
    flavor_nodes,
    flavor_shapes,
    head_placement,
    node_sharing,
    queue_gpu_units,
    ray_request_in_device_units,
    units_per_gpu,
)
from .labels import FLAVOR_LABEL, NODE_CLASS_LABEL, SITE_LABEL
from .types import (
    CapacityState,
    CapsState,
    ClusterQueueState,
    ClusterSettingsState,
    ClusterState,
    ClusterStorageState,
    ComputeState,
    CpuFlavorState,
    CpuQuotaState,
    FlavorState,
    GpuSharingClusterState,
    GpuSharingState,
    MeshTopologyState,
    PeerState,
    PriorityState,
    QuotaState,
    RayClusterState,
    RelayRouteState,
    ResourceAmountState,
    ScratchPolicy,
    TaintState,
    TenantState,
    TolerationState,
)

GPU_RESOURCE = "nvidia.com/gpu"
# Labels on every object the cluster layer makes (Kubernetes recommended labels).
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
PART_OF_LABEL = "app.kubernetes.io/part-of"
FLEET_LABEL = "swarm.io/fleet"
MANAGER = "swarm"
# The taint GPU nodes get: the key NVIDIA's GPU Operator and the major clouds use.
GPU_TAINT: TaintState = {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}


def settings_state(a: Analysis) -> ClusterSettingsState:
    """The Cluster document's settings; the project's labels win over the document's own."""
    c = a.fleet.cluster
    return {
        "fleet": c.name,
        "system_namespace": c.system_namespace,
        "gpu_namespace": c.gpu_namespace,
        "labels": dict(
            sorted(
                {**c.labels, MANAGED_BY_LABEL: MANAGER, PART_OF_LABEL: MANAGER, FLEET_LABEL: c.name}.items()
            )
        ),
        "gpu_taint": GPU_TAINT.copy() if c.gpu_taint else None,
    }


def toleration(taint: TaintState) -> TolerationState:
    """The toleration of ``taint`` (any value)."""
    return {"key": taint["key"], "operator": "Exists", "effect": taint["effect"]}


def _share(total: int, part: int, whole: int) -> int:
    """``total * part / whole`` rounded down; 0 when ``whole`` is 0."""
    return total * part // whole if whole else 0


def quota_resources(
    nominal: int, borrowing: int | None, lending: int | None, flavor: FlavorState
) -> list[ResourceAmountState]:
    """Every covered resource of a quota of ``nominal`` GPUs (and limits) on ``flavor``.

    nvidia.com/gpu: GPUs times the flavor's device units per GPU. cpu (millicores) and
    memory (MiB): the same share of the flavor's gpu-worker nodes as the GPUs are of theirs,
    rounded down, so the quotas of a flavor never add up to more than its nodes have.
    """
    units = flavor["units_per_gpu"] or 0
    gpus = flavor["gpus"]

    def amounts(name: Any, scale: Any) -> ResourceAmountState:
        return {
            "name": name,
            "nominal_quota": scale(nominal),
            "borrowing_limit": None if borrowing is None else scale(borrowing),
            "lending_limit": None if lending is None else scale(lending),
        }

    return [
        amounts(GPU_RESOURCE, lambda n: n * units),
        amounts("cpu", lambda n: _share(flavor["cpus"] * 1000, n, gpus)),
        amounts("memory", lambda n: _share(flavor["memory_gib"] * 1024, n, gpus)),
    ]


def admissible_gpus(queue: ClusterQueueState, flavors: Mapping[str, FlavorState]) -> int:
    """The most nvidia.com/gpu (device units) a queue could ever be admitted: per flavor,
    nominal quota plus, in a cohort, the borrowing limit (unlimited: every GPU of the
    flavor), at most the flavor's GPUs."""
    total = 0
    for x in queue["quotas"]:
        f = flavors[x["flavor"]]
        if queue["cohort"] is None:
            most = x["nominal_quota"]  # no cohort: nothing to borrow from
        elif x["borrowing_limit"] is None:
            most = f["gpus"]
        else:
            most = x["nominal_quota"] + x["borrowing_limit"]
        total += min(most, f["gpus"]) * (f["units_per_gpu"] or 0)
    return total


def gpu_quota(
    caps: CapsState | None, queue: ClusterQueueState | None, flavors: Mapping[str, FlavorState]
) -> int:
    """A tenant namespace's ``requests.nvidia.com/gpu`` ResourceQuota (device units): what
    its ``queue`` could ever be admitted on ``flavors`` (:func:`admissible_gpus`; 0 for no
    queue), at most ``caps.gpus``. A regional stack gives the flavors and queues of its own
    cluster (``swarm_infra.cluster.scope``)."""
    admissible = admissible_gpus(queue, flavors) if queue is not None else 0
    cap = caps["gpus"] if caps is not None else None
    return admissible if cap is None else min(cap, admissible)


def _compute(c: Mapping[str, Any] | None) -> ComputeState | None:
    if c is None:
        return None
    out: ComputeState = {}
    if "cpu" in c:
        out["cpu_millicores"] = round(c["cpu"] * 1000)
    if "memory_gib" in c:
        out["memory_mib"] = round(c["memory_gib"] * 1024)
    return out


def caps_state(caps: Mapping[str, Any] | None, gpu_units: int = 1) -> CapsState | None:
    """A tenant's ``caps`` in base units (millicores, MiB; ``gpus``, declared in GPUs, times
    ``gpu_units``: :func:`~swarm_infra.resolve.flavors.queue_gpu_units`), or None."""
    if caps is None:
        return None
    container = caps.get("container")
    return {
        "gpus": None if caps.get("gpus") is None else caps["gpus"] * gpu_units,
        "cpu_millicores": round(caps["cpu"] * 1000) if "cpu" in caps else None,
        "memory_mib": caps["memory_gib"] * 1024 if "memory_gib" in caps else None,
        "pods": caps.get("pods"),
        "storage_gib": caps.get("storage_gib"),
        "persistent_volume_claims": caps.get("persistent_volume_claims"),
        "container": None
        if container is None
        else {
            "default_request": _compute(container.get("default_request")),
            "default_limit": _compute(container.get("default_limit")),
            "max": _compute(container.get("max")),
        },
    }


def gpu_sharing_state(a: Analysis, sharing: Mapping[str, Mapping[str, Any]]) -> GpuSharingClusterState:
    """The device plugin configs the fleet's GPU nodes select, and the GPU Operator's one
    MIG strategy derived from them (:func:`operator_mig_strategy`). MIG layouts are the
    node layer's (issue #23): the Operator's MIG manager is off."""
    configs: dict[str, Any] = {
        "default": {
            "name": "default",
            "mig_strategy": "none",
            "time_slicing_replicas": None,
            "time_slicing_resources": [],
        }
    }
    for s in sharing.values():
        name = s["device_plugin_config"]
        if name in configs:
            continue
        profile = a.fleet.gpu_profiles.get(name)
        layout = list(profile.spec.get("mig", {}).get("profiles", ())) if profile else []
        replicas = s["time_slicing_replicas"]
        if s["mig_strategy"] == "mixed":
            resources = [f"nvidia.com/mig-{p}" for p in sorted(set(layout))]
        else:
            resources = [GPU_RESOURCE]
        configs[name] = {
            "name": name,
            "mig_strategy": s["mig_strategy"],
            "time_slicing_replicas": replicas,
            "time_slicing_resources": resources if replicas else [],
        }
    ordered = [configs["default"], *(configs[k] for k in sorted(configs) if k != "default")]
    return {
        "device_plugin_configs": ordered,
        "operator_mig_strategy": operator_mig_strategy(c["mig_strategy"] for c in ordered),
    }


def operator_mig_strategy(strategies: Iterable[str]) -> Literal["none", "single", "mixed"]:
    """The GPU Operator's ``mig.strategy`` for device plugin configs of ``strategies``:
    ``mixed`` if one is mixed, else ``single`` if one is single, else ``none``.

    The Operator has one strategy for the cluster: NVIDIA/gpu-operator v26.3.3
    ``controllers/object_controls.go`` ``applyMIGConfiguration`` sets the device plugin's
    and GFD's ``MIG_STRATEGY`` env from ``ClusterPolicy.spec.mig.strategy`` whenever it is
    set, and NVIDIA/k8s-device-plugin v0.17.2 ``api/config/v1/flags.go``
    ``UpdateFromCLIFlags`` lets a flag set by env override the config file's
    ``flags.migStrategy``. With ``single`` or ``mixed``, GPUs without MIG are still
    advertised whole as ``nvidia.com/gpu`` (``internal/rm/rm.go``
    ``AddDefaultResourcesToConfig``), so ``none`` configs are unaffected. The chart's own
    default is ``single`` (``deployments/gpu-operator/values.yaml`` ``mig.strategy``), so
    the value is always given."""
    seen = set(strategies)
    return "mixed" if "mixed" in seen else "single" if "single" in seen else "none"


def mesh_topology(a: Analysis, peers: Mapping[str, list[PeerState]]) -> MeshTopologyState | None:
    """Addresses, hubs, relays and WireGuard peerings (undirected) of the mesh, or None."""
    mesh = a.fleet.mesh
    if mesh is None or a.topology is None:
        return None
    edges = {tuple(sorted((node, p["name"]))) for node, plist in peers.items() for p in plist}
    sites, nodes = a.fleet.sites, a.fleet.nodes

    def provider(site: str) -> str:
        return sites[site].provider if site in sites else site

    routes: list[RelayRouteState] = [
        {
            "sites": [x, y],
            "providers": [provider(x), provider(y)],
            "relay": r.relay,
            "relay_site": nodes[r.relay].site,
            "relay_provider": provider(nodes[r.relay].site),
            "path_rtt_ms": None if r.path_rtt_ms is None else round(r.path_rtt_ms, 3),
            "basis": r.basis,
        }
        for (x, y), r in sorted(a.topology.routes.items())
    ]
    return {
        "cidr": str(mesh.cidr),
        "interface": mesh.interface,
        "addresses": {n: str(a.addresses[n]) for n in sorted(a.addresses)},
        "hubs": dict(sorted(a.topology.hub.items())),
        "relays": sorted(a.topology.relays),
        "relay_routes": routes,
        "edges": [list(e) for e in sorted(edges)],
    }


def _cpu_quota(flavor: str, millicores: int, mib: int, *, lend: bool) -> CpuQuotaState:
    """A queue's quota on a CPU flavor: no GPU, and exactly its heads' CPU and memory; in a
    cohort, none of it is lent (lendingLimit 0), so a head never waits for a borrower."""

    def amount(name: Any, n: int) -> ResourceAmountState:
        return {
            "name": name,
            "nominal_quota": n,
            "borrowing_limit": None,
            "lending_limit": None if lend else 0,
        }

    return {
        "flavor": flavor,
        "resources": [amount(GPU_RESOURCE, 0), amount("cpu", millicores), amount("memory", mib)],
    }


# Ray heads on CPU flavors, per queue: site -> (millicores, MiB) of the heads placed there.
HeadNeed = dict[str, dict[str, tuple[int, int]]]


def cluster_state(a: Analysis, peers: Mapping[str, list[PeerState]] | None = None) -> ClusterState:
    """The cluster's desired state for a checked fleet (shapes in :mod:`.types`).

    Quotas are declared in GPUs of resource ``nvidia.com/gpu``; each quota also carries
    every covered resource in Kueue's units (:func:`quota_resources`). ``capacity`` gives per
    flavor the fleet's GPUs (on gpu-worker nodes), the sum of nominal quotas and what is
    unallocated. ``peers`` (from :func:`swarm_infra.resolve.mesh.peers`) gives the mesh
    topology's edges. Lists are in name order, priorities highest value first, except a
    queue's quotas: in the policy's order, which Kueue takes as preference. Each Ray head
    goes to its workers' site (:func:`~swarm_infra.resolve.flavors.head_placement`); its
    queue gets a quota of exactly its heads on that site's CPU flavor.
    """
    fleet, alloc = a.fleet, a.fleet.allocation
    settings = settings_state(a)
    capacity = gpu_capacity(fleet)
    sharing = node_sharing(a)
    flavors = _flavor_states(a, settings, capacity, sharing)
    heads, head_need = _ray_heads(a)
    queues: list[ClusterQueueState] = []
    tenants: list[TenantState] = []
    ray_clusters: list[RayClusterState] = []
    if alloc is not None:
        queues = [_cluster_queue(q, flavors, head_need) for q in sorted(alloc.queues, key=lambda q: q.name)]
        gpu_units = units_per_gpu(a, sharing)
        by_queue = {q["name"]: q for q in queues}
        tenants = [
            _tenant(a, t, gpu_units, by_queue.get(t.queue), flavors)
            for t in sorted(alloc.tenants, key=lambda t: t.name)
        ]
        ray_clusters = _ray_clusters(a, alloc, sharing, gpu_units, heads)
    namespaces = {t["name"]: t["namespace"] for t in tenants}
    return {
        "settings": settings,
        "fair_sharing": alloc.fair_sharing if alloc else False,
        "flavors": list(flavors.values()),
        "cpu_flavors": _cpu_flavors(head_need),
        "cohorts": sorted({q["cohort"] for q in queues if q["cohort"]}),
        "cohort_objects": [
            {"name": c.name, "parent": c.parent, "fair_sharing_weight": c.fair_sharing_weight}
            for c in sorted(alloc.cohorts if alloc else (), key=lambda c: c.name)
        ],
        "cluster_queues": queues,
        "tenants": tenants,
        "priorities": _priorities(fleet),
        "storage": _storage(fleet.storage, namespaces) if fleet.storage is not None else None,
        "capacity": _capacity(capacity, queues, flavors),
        "gpu_sharing": gpu_sharing_state(a, sharing),
        "ray_clusters": ray_clusters,
        "mesh": mesh_topology(a, peers or {}),
    }


def _flavor_states(
    a: Analysis,
    settings: ClusterSettingsState,
    capacity: Mapping[str, int],
    sharing: dict[str, GpuSharingState],
) -> dict[str, FlavorState]:
    """``{flavor: FlavorState}`` of every GPU flavor, in the fleet's flavor order: its model
    and product name, node label, the GPU taint's toleration (when GPU nodes are tainted),
    its GPUs on gpu-worker nodes (``capacity``), device units per GPU (None when its nodes
    disagree; 1 with no node) and its nodes' CPUs and memory (GiB)."""
    catalog = gpu_catalog()
    by_flavor = flavor_nodes(a, sharing)
    out: dict[str, FlavorState] = {}
    for f, m in a.flavors().items():
        members = by_flavor.get(f, [])
        units = {u for _, u in members}
        out[f] = {
            "name": f,
            "gpu_model": m,
            "product_name": catalog[m]["product_name"],
            "node_labels": {FLAVOR_LABEL: f},
            "tolerations": [toleration(settings["gpu_taint"])] if settings["gpu_taint"] else [],
            "gpus": capacity.get(f, 0),
            "units_per_gpu": units.pop() if len(units) == 1 else (1 if not units else None),
            "cpus": sum(n.cpus for n, _ in members),
            "memory_gib": sum(n.memory_gib for n, _ in members),
        }
    return out


def _ray_heads(a: Analysis) -> tuple[dict[str, dict[str, str]], HeadNeed]:
    """Where each tenant's Ray head goes, and what that asks of the CPU flavors:
    ``({tenant: node labels}, {queue: {site: (millicores, MiB)}})``. A head placed on a
    site's CPU nodes is labelled with the site and counted in its queue's need; one placed
    on a GPU flavor is labelled with the flavor; one with no place gets no labels."""
    heads: dict[str, dict[str, str]] = {}
    need: HeadNeed = defaultdict(dict)
    alloc = a.fleet.allocation
    for t in alloc.tenants if alloc else ():
        if not t.ray:
            continue
        place = head_placement(a, t.ray.workers[0].flavor, t.ray.head_cpus, t.ray.head_memory_gib)
        if place is None:
            heads[t.name] = {}
        elif place[0] == "cpu":
            heads[t.name] = {SITE_LABEL: place[1]}
            millicores, mib = need[t.queue].get(place[1], (0, 0))
            need[t.queue][place[1]] = (
                millicores + t.ray.head_cpus * 1000,
                mib + t.ray.head_memory_gib * 1024,
            )
        else:
            heads[t.name] = {FLAVOR_LABEL: place[1]}
    return heads, need


def _cpu_flavors(head_need: HeadNeed) -> list[CpuFlavorState]:
    """One CPU flavor per site where a Ray head goes, in site order."""
    # The site's nodes without GPUs, by the node class NodeState.labels gives them: a head
    # admitted to cpu-<site> never lands on a GPU node of that site (Kueue injects the
    # flavor's nodeLabels into the pod's node selector), whether or not GPU nodes are tainted.
    return [
        {"name": cpu_flavor(site), "site": site, "node_labels": {NODE_CLASS_LABEL: "cpu", SITE_LABEL: site}}
        for site in sorted({site for need in head_need.values() for site in need})
    ]


def _cluster_queue(q: Queue, flavors: Mapping[str, FlavorState], head_need: HeadNeed) -> ClusterQueueState:
    """The ClusterQueue of ``q``: its GPU quotas in the policy's order, each with every
    covered resource (:func:`quota_resources`), and the CPU quotas of its Ray heads."""
    quotas: list[QuotaState] = [
        {
            "flavor": quota.flavor,
            "resource": GPU_RESOURCE,
            "nominal_quota": quota.nominal_quota,
            "borrowing_limit": quota.borrowing_limit,
            "lending_limit": quota.lending_limit,
            "resources": quota_resources(
                quota.nominal_quota, quota.borrowing_limit, quota.lending_limit, flavors[quota.flavor]
            ),
        }
        # The policy's order: Kueue tries a resource group's flavors in order (preference).
        for quota in q.quotas
    ]
    return {
        "name": q.name,
        "cohort": q.cohort,
        "fair_sharing_weight": q.fair_sharing_weight,
        "preemption": {
            "within_cluster_queue": q.within_cluster_queue,
            "reclaim_within_cohort": q.reclaim_within_cohort,
            "borrow_within_cohort": q.borrow_within_cohort,
        },
        "quotas": quotas,
        "cpu_quotas": [
            _cpu_quota(cpu_flavor(site), millicores, mib, lend=q.cohort is None)
            for site, (millicores, mib) in sorted(head_need.get(q.name, {}).items())
        ],
    }


def _tenant(
    a: Analysis,
    t: Tenant,
    gpu_units: dict[str, int],
    queue: ClusterQueueState | None,
    flavors: Mapping[str, FlavorState],
) -> TenantState:
    """The tenant ``t``: its namespace, LocalQueue (its name) and ClusterQueue, allowed
    priorities (every one when it names none), caps in base units with GPUs in its queue's
    device units (``gpu_units``: flavor -> units per GPU) and the GPU quota of its namespace
    (:func:`gpu_quota`)."""
    caps = caps_state(t.caps, queue_gpu_units(a, gpu_units, t.queue))
    return {
        "name": t.name,
        "namespace": t.namespace,
        "local_queue": t.name,
        "cluster_queue": t.queue,
        "priorities": sorted(t.priorities) if t.priorities is not None else sorted(a.fleet.priorities),
        "caps": caps,
        "gpu_quota": gpu_quota(caps, queue, flavors),
        "ray_cluster": t.name if t.ray else None,
    }


def _ray_clusters(
    a: Analysis,
    alloc: Allocation,
    sharing: dict[str, GpuSharingState],
    gpu_units: dict[str, int],
    heads: Mapping[str, Mapping[str, str]],
) -> list[RayClusterState]:
    """The KubeRay cluster of each tenant that requests Ray (:func:`.ray.ray_cluster`), its
    request in device units, at its priority (else the fleet's default), its head at
    ``heads``' labels; by (namespace, name)."""
    fleet = a.fleet
    shapes = flavor_shapes(a, sharing) if any(t.ray for t in alloc.tenants) else {}
    default_priority = next((p.name for p in fleet.priorities.values() if p.global_default), None)
    out = [
        ray.ray_cluster(
            t.name,
            t.namespace,
            ray_request_in_device_units(t.ray, gpu_units),
            shapes,
            priority=t.ray.priority or default_priority,
            local_queue=t.name,
            ray_version=ray.fleet_ray_version(fleet),
            tenant=t.name,
            head_node_labels=heads.get(t.name),
        )
        for t in sorted(alloc.tenants, key=lambda t: t.name)
        if t.ray
    ]
    return sorted(out, key=lambda r: (r["namespace"], r["name"]))


def _priorities(fleet: Fleet) -> list[PriorityState]:
    """The fleet's priorities, highest value first (then by name)."""
    return [
        {
            "name": p.name,
            "value": p.value,
            "preemption_policy": p.preemption_policy,
            "global_default": p.global_default,
            "description": p.description,
        }
        for p in sorted(fleet.priorities.values(), key=lambda p: (-p.value, p.name))
    ]


def _storage(st: Storage, namespaces: Mapping[str, str]) -> ClusterStorageState:
    """The Storage document's scratch policy, StorageClasses (by name, parameters sorted) and
    volumes (by namespace then name), each volume in its tenant's namespace
    (``namespaces``: tenant -> namespace)."""
    return {
        "scratch": cast(ScratchPolicy, dict(st.scratch)) if st.scratch else None,
        "classes": sorted(
            (
                {
                    "name": c["name"],
                    "provisioner": c["provisioner"],
                    "parameters": dict(sorted(c["parameters"].items())),
                    "reclaim_policy": c["reclaim_policy"],
                    "volume_binding_mode": c["volume_binding_mode"],
                    "default": c["default"],
                }
                for c in st.classes
            ),
            key=lambda c: c["name"],
        ),
        "volumes": sorted(
            (
                {
                    "name": v["name"],
                    "tenant": v["tenant"],
                    "namespace": namespaces[v["tenant"]],
                    "class": v["class"],
                    "size_gib": v["size_gib"],
                    "purpose": v["purpose"],
                    "access_modes": list(v["access_modes"]),
                }
                for v in st.volumes
            ),
            key=lambda v: (v["namespace"], v["name"]),
        ),
    }


def _capacity(
    gpus: Mapping[str, int], queues: Iterable[ClusterQueueState], flavors: Iterable[str]
) -> dict[str, CapacityState]:
    """Per flavor: its GPUs (``gpus``), the sum of the queues' nominal quotas on it, and the
    difference (negative when the quotas promise more than the flavor has)."""
    nominal: dict[str, int] = defaultdict(int)
    for q in queues:
        for quota in q["quotas"]:
            nominal[quota["flavor"]] += quota["nominal_quota"]
    return {
        f: {
            "gpus": gpus.get(f, 0),
            "nominal_quota": nominal.get(f, 0),
            "unallocated": gpus.get(f, 0) - nominal.get(f, 0),
        }
        for f in flavors
    }
