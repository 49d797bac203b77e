"""What would make the cluster layer's objects invalid, or make Kubernetes, Kueue or KubeRay
refuse them halfway through ``pulumi up``: caught here, by ``swarm validate``, instead.

Rules (README, Validation):

- ``gpu.sharing-inconsistent``: a flavor with quota whose gpu-worker nodes do not all
  advertise the same ``nvidia.com/gpu`` per GPU (different time-slicing or MIG layouts, or a
  mixed MIG layout that advertises ``nvidia.com/mig-*`` instead): one quota cannot count them;
- ``gpu.mig-strategy-conflict``: a one-profile MIG layout and a mixed one in one fleet (the
  GPU Operator has one MIG strategy: the mixed one would change what the others advertise);
- ``allocation.cohort-cycle``: Cohort parents that loop (Kueue cohorts form a tree);
- ``allocation.limit-range-invalid``: ``default_request <= default_limit <= max`` broken
  (the API server rejects such a LimitRange);
- ``allocation.caps-too-small``: the tenant's own volumes or Ray cluster do not fit its caps
  (the ResourceQuota or LimitRange would refuse them);
- ``ray.priority-not-allowed``: the Ray cluster's priority is not one the tenant may use
  (the admission policy would refuse it);
- ``ray.flavor-not-in-queue``: a worker flavor without quota in the tenant's ClusterQueue
  (Kueue would never admit the workers);
- ``ray.replicas-invalid``: ``min_replicas`` above ``max_replicas``;
- ``ray.pod-too-large``: a Ray pod larger than every node that could run it;
- ``name.duplicate`` / ``reference.unresolved`` for names these objects share.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Literal

from ...fleet.diagnostics import Finding
from ...fleet.model import Tenant
from .. import ray
from ..addons import ADDON_NAMESPACES
from ..analysis import Analysis
from ..cluster import caps_state
from ..flavors import (
    flavor_nodes,
    flavor_shapes,
    head_placement,
    node_sharing,
    queue_gpu_units,
    ray_request_in_device_units,
    units_per_gpu,
    workers_site,
)
from ..types import ComputeState


def sharing(a: Analysis) -> Iterator[Finding]:
    """``gpu.sharing-inconsistent``, once per flavor, at the first quota that names it."""
    alloc = a.fleet.allocation
    if alloc is None:
        return
    # What each flavor's nodes advertise per GPU: {units: first node}, computed once.
    units: dict[str, dict[int | None, str]] = {}
    for f, members in flavor_nodes(a, node_sharing(a)).items():
        for node, u in members:
            units.setdefault(f, {}).setdefault(u, node.name)
    reported: set[str] = set()
    for qi, q in enumerate(alloc.queues):
        for xi, quota in enumerate(q.quotas):
            f = quota.flavor
            seen = units.get(f, {1: ""})
            if f in reported or (len(seen) == 1 and None not in seen):
                continue
            reported.add(f)
            listed = ", ".join(
                f"{node}: {'nvidia.com/mig-* (mixed MIG layout)' if u is None else f'{u} per GPU'}"
                for u, node in seen.items()
            )
            yield Finding(
                alloc.source,
                ("spec", "queues", qi, "quotas", xi, "flavor"),
                "gpu.sharing-inconsistent",
                f"nodes of flavor {f!r} advertise nvidia.com/gpu differently ({listed}); one quota "
                "cannot count them: give them GpuProfiles with the same sharing and MIG layout",
            )


def mig_strategies(a: Analysis) -> Iterator[Finding]:
    """``gpu.mig-strategy-conflict``: nodes use both a one-profile MIG layout (strategy
    ``single``: each instance one ``nvidia.com/gpu``) and a mixed one. The GPU Operator has
    one MIG strategy for the cluster, which overrides every device plugin config's
    (:func:`swarm_infra.resolve.cluster.operator_mig_strategy`): it is then ``mixed``, and the
    single-layout nodes would advertise ``nvidia.com/mig-<profile>`` instead of the
    ``nvidia.com/gpu`` their quotas count. Reported once per single-layout GpuProfile."""
    used = {s["device_plugin_config"]: s["mig_strategy"] for s in node_sharing(a).values()}
    mixed = sorted(p for p, strategy in used.items() if strategy == "mixed")
    if not mixed:
        return
    for name in sorted(p for p, strategy in used.items() if strategy == "single"):
        profile = a.fleet.gpu_profiles[name]
        yield Finding(
            profile.source,
            ("spec", "mig", "profiles"),
            "gpu.mig-strategy-conflict",
            f"GpuProfile {mixed[0]!r} uses a mixed MIG layout, so the GPU Operator's one MIG "
            f"strategy is mixed: nodes of {name!r} would advertise nvidia.com/mig-* instead of "
            "nvidia.com/gpu; give all MIG profiles one kind of layout (one repeated profile, or mixed)",
        )


def cohorts(a: Analysis) -> Iterator[Finding]:
    """Cohort names unique; ``allocation.cohort-cycle`` where following parents comes back
    (once per loop, at the declaration that closes it)."""
    alloc = a.fleet.allocation
    if alloc is None:
        return
    parent: dict[str, str | None] = {}
    for ci, c in enumerate(alloc.cohorts):
        if c.name in parent:
            yield Finding(
                alloc.source,
                ("spec", "cohorts", ci, "name"),
                "name.duplicate",
                f"cohort {c.name!r} is declared twice",
            )
            continue
        parent[c.name] = c.parent
    index = {c.name: ci for ci, c in reversed(list(enumerate(alloc.cohorts)))}
    reported: set[frozenset[str]] = set()
    for c in alloc.cohorts:
        seen, cur = [c.name], c.parent
        while cur is not None and cur in parent and cur not in seen:
            seen.append(cur)
            cur = parent[cur]
        if cur != c.name or frozenset(seen) in reported:
            continue
        reported.add(frozenset(seen))
        last = max(seen, key=index.__getitem__)  # the declaration that closes the loop
        loop = seen[seen.index(last) :] + seen[: seen.index(last)]
        yield Finding(
            alloc.source,
            ("spec", "cohorts", index[last], "parent"),
            "allocation.cohort-cycle",
            f"cohort parents loop: {' -> '.join([*loop, last])} (Kueue cohorts form a tree)",
        )


# Namespaces no tenant may have: Kubernetes' own (and its ``kube-`` prefix), and those of
# the add-ons the stack installs (Kueue, KubeRay, the local-path provisioner:
# resolve/addons.py). A tenant's ResourceQuota, LimitRange, Kueue management and admission
# policy would apply to their pods.
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease", *ADDON_NAMESPACES)
SYSTEM_NAMESPACE_PREFIX = "kube-"
# Label keys a Cluster may not put on every object: those the project, Kueue, KubeRay, NVIDIA's
# operators and Kubernetes give meaning to. On every namespace, ``swarm.io/tenant`` would bind
# the tenant admission policy to the system namespaces and ``priority.swarm.io/<p>`` would
# allow every tenant every priority; on every node, ``swarm.io/gpu-flavor`` would move GPUs
# between flavors.
RESERVED_LABEL_KEYS = (
    "swarm.io/tenant",
    "swarm.io/fleet",
    "swarm.io/site",
    "swarm.io/region",
    "swarm.io/gpu-flavor",
    "swarm.io/mesh-address",
    "swarm.io/node-class",
    "swarm.io/purpose",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/part-of",
)
RESERVED_LABEL_PREFIXES = ("priority.swarm.io/", "kueue.x-k8s.io/", "ray.io/", "nvidia.com/")
RESERVED_LABEL_DOMAINS = ("kubernetes.io", "k8s.io")  # and their subdomains (pod-security...)


def reserved_label(key: str) -> bool:
    """Whether a Cluster label ``key`` is one :data:`RESERVED_LABEL_KEYS` and the prefixes
    and domains above reserve."""
    prefix = key.rpartition("/")[0]
    return (
        key in RESERVED_LABEL_KEYS
        or key.startswith(RESERVED_LABEL_PREFIXES)
        or any(prefix == d or prefix.endswith("." + d) for d in RESERVED_LABEL_DOMAINS)
    )


def cluster_labels(a: Analysis) -> Iterator[Finding]:
    """``cluster.label-reserved``: a Cluster label with a reserved key (:func:`reserved_label`)."""
    c = a.fleet.cluster
    if c.source is None:
        return
    for key in c.labels:
        if reserved_label(key):
            yield Finding(
                c.source,
                ("spec", "labels", key),
                "cluster.label-reserved",
                f"label key {key!r} is reserved: the project, Kueue, KubeRay, NVIDIA or Kubernetes "
                "give it meaning, and Cluster labels go on every object (namespaces and nodes included)",
            )


def namespaces(a: Analysis) -> Iterator[Finding]:
    """A namespace belongs to one tenant (one LocalQueue, one set of allowed priorities, one
    set of caps) and to no project component; the scratch StorageClass is not a declared one.
    ``allocation.namespace-reserved``: a tenant namespace that is Kubernetes' or an add-on's
    (:data:`SYSTEM_NAMESPACES`, ``kube-*``). ``cluster.namespace-reserved``: the Cluster's
    ``system_namespace`` or ``gpu_namespace`` is an add-on's
    (:data:`~swarm_infra.resolve.addons.ADDON_NAMESPACES`): the stack would create that
    namespace twice (its Namespace object beside the add-on's Helm release or rendered one)."""
    cluster = a.fleet.cluster
    own = (("system_namespace", cluster.system_namespace), ("gpu_namespace", cluster.gpu_namespace))
    for field, ns in own:
        if ns in ADDON_NAMESPACES and cluster.source is not None:
            yield Finding(
                cluster.source,
                ("spec", field),
                "cluster.namespace-reserved",
                f"namespace {ns!r} belongs to an add-on the stack installs (Kueue, KubeRay or the "
                f"local-path provisioner: {', '.join(ADDON_NAMESPACES)}); choose another",
            )
    reserved = {
        cluster.system_namespace: "the cluster's system namespace",
        cluster.gpu_namespace: "the GPU namespace",
    }
    alloc = a.fleet.allocation
    owner: dict[str, str] = {}
    for ti, t in enumerate(alloc.tenants if alloc else ()):
        if t.namespace in SYSTEM_NAMESPACES or t.namespace.startswith(SYSTEM_NAMESPACE_PREFIX):
            assert alloc is not None  # the tenant is one of its own
            yield Finding(
                alloc.source,
                ("spec", "tenants", ti, "namespace" if t.namespace != t.name else "name"),
                "allocation.namespace-reserved",
                f"namespace {t.namespace!r} belongs to Kubernetes or an add-on the stack installs; "
                "the tenant's quota, Kueue management and admission policy would apply to their pods",
            )
            continue
        other = reserved.get(t.namespace) or (
            f"tenant {owner[t.namespace]!r}'s namespace" if t.namespace in owner else None
        )
        if other:
            assert alloc is not None  # the tenant is one of its own
            yield Finding(
                alloc.source,
                ("spec", "tenants", ti, "namespace" if t.namespace != t.name else "name"),
                "name.duplicate",
                f"namespace {t.namespace!r} is already {other}; each tenant needs its own",
            )
        owner.setdefault(t.namespace, t.name)
    st = a.fleet.storage
    scratch = st.scratch if st is not None else None
    if (
        st is not None
        and scratch is not None
        and any(c["name"] == scratch["storage_class"] for c in st.classes)
    ):
        yield Finding(
            st.source,
            ("spec", "scratch", "storage_class"),
            "name.duplicate",
            f"storage class {scratch['storage_class']!r} is also in spec.classes; the scratch "
            "class is made by the cluster layer (rancher.io/local-path on scratch)",
        )


# A bound of a LimitRange (ContainerCapsState's keys).
_ContainerKey = Literal["default_request", "default_limit", "max"]


def _over(a: ComputeState | None, b: ComputeState | None) -> list[str]:
    """Keys where ``a`` is above ``b`` (both present)."""
    if not a or not b:
        return []
    keys: tuple[Literal["cpu_millicores", "memory_mib"], ...] = ("cpu_millicores", "memory_mib")
    return [k for k in keys if k in a and k in b and a[k] > b[k]]


def limit_ranges(a: Analysis) -> Iterator[Finding]:
    """``allocation.limit-range-invalid``: default_request <= default_limit <= max, per resource."""
    alloc = a.fleet.allocation
    for ti, t in enumerate(alloc.tenants if alloc else ()):
        caps = caps_state(t.caps)
        if caps is None or caps["container"] is None:
            continue
        c = caps["container"]
        pairs: tuple[tuple[_ContainerKey, _ContainerKey], ...] = (
            ("default_request", "default_limit"),
            ("default_limit", "max"),
            ("default_request", "max"),
        )
        for low, high in pairs:
            bad = _over(c[low], c[high])
            if bad:
                assert alloc is not None  # the tenant is one of its own
                yield Finding(
                    alloc.source,
                    ("spec", "tenants", ti, "caps", "container", low),
                    "allocation.limit-range-invalid",
                    f"{low} is above {high} for {', '.join(k.split('_')[0] for k in bad)}; "
                    "Kubernetes rejects the LimitRange",
                )
                break


def _ray_pods(
    a: Analysis, t: Tenant, shapes: Mapping[str, Any], units: dict[str, int]
) -> dict[str, Any] | None:
    """The tenant's resolved Ray cluster, or None when its flavors cannot be sized."""
    assert t.ray is not None
    if any(not any(s.gpus for s in shapes.get(w.flavor, ())) for w in t.ray.workers):
        return None
    request = ray_request_in_device_units(t.ray, units)
    # Sizes only: the version (ray.version-missing when undeclared) plays no part in them.
    version = a.fleet.cluster.ray_version or ""
    decided = ray.ray_cluster(
        t.name, t.namespace, request, shapes, priority=None, local_queue=None, ray_version=version
    )
    return dict(decided)


def ray_clusters(a: Analysis) -> Iterator[Finding]:
    """The tenant's Ray cluster: references, priority, queue, replicas, sizes and caps."""
    alloc = a.fleet.allocation
    if alloc is None or not any(t.ray for t in alloc.tenants):
        return
    flavors = a.flavors()
    sharing_by_node = node_sharing(a)
    shapes = flavor_shapes(a, sharing_by_node)
    units = units_per_gpu(a, sharing_by_node)
    queues = {q.name: {x.flavor for x in q.quotas} for q in alloc.queues}
    default = next((p.name for p in a.fleet.priorities.values() if p.global_default), None)
    # Flavors and sizes depend on every node: with a Node document left out (its own error
    # reported), a missing flavor or a pod that fits nowhere would repeat that error.
    nodes_known = a.fleet.complete("Node")
    for ti, t in enumerate(alloc.tenants):
        r = t.ray
        if r is None:
            continue
        at = ("spec", "tenants", ti, "ray")
        allowed = set(t.priorities) if t.priorities is not None else set(a.fleet.priorities)
        prio = r.priority or default
        if r.priority is not None and not a.known("Priority", r.priority):
            yield Finding(
                alloc.source, (*at, "priority"), "reference.unresolved", f"no Priority named {prio!r}"
            )
        elif prio is None and a.fleet.complete("Priority"):  # a Priority left out: reported already
            yield Finding(
                alloc.source,
                at,
                "ray.priority-not-allowed",
                "the Ray cluster names no priority and no Priority is the global default: the "
                "admission policy refuses a tenant pod without a PriorityClass",
            )
        elif prio is not None and prio not in allowed:
            yield Finding(
                alloc.source,
                (*at, "priority") if r.priority else at,
                "ray.priority-not-allowed",
                f"priority {prio!r}{'' if r.priority else ' (the global default)'} is not one of tenant "
                f"{t.name!r}'s ({', '.join(sorted(allowed)) or 'none'}); the admission policy "
                "would refuse it",
            )
        place = (
            head_placement(a, r.workers[0].flavor, r.head_cpus, r.head_memory_gib) if nodes_known else None
        )
        if place is not None and place[0] == "gpu":
            shown = shapes.get(place[1], ())
            biggest = max(((n.cpus, n.memory_gib) for n in shown), default=(0, 0))
            if r.head_cpus > biggest[0] or r.head_memory_gib > biggest[1]:
                site = workers_site(a, place[1])
                yield Finding(
                    alloc.source,
                    (*at, "head"),
                    "ray.pod-too-large",
                    f"the head ({r.head_cpus} CPUs, {r.head_memory_gib} GiB) fits no node without GPUs in "
                    f"its workers' site {site!r} and no node of its first worker flavor {place[1]!r} "
                    f"(largest: {biggest[0]} CPUs, {biggest[1]} GiB)",
                )
        # Each worker's GPUs as its pods request them (device units), decided by the library.
        requested = ray_request_in_device_units(r, units).workers
        seen: set[str] = set()
        for wi, w in enumerate(r.workers):
            wat = (*at, "workers", wi)
            if w.flavor in seen:
                yield Finding(
                    alloc.source,
                    (*wat, "flavor"),
                    "name.duplicate",
                    f"flavor {w.flavor!r} has two worker groups",
                )
            seen.add(w.flavor)
            if w.flavor not in flavors:
                if not nodes_known:
                    continue
                yield Finding(
                    alloc.source,
                    (*wat, "flavor"),
                    "reference.unresolved",
                    f"no GPU flavor {w.flavor!r} in this fleet (flavors: {', '.join(flavors) or 'none'})",
                )
                continue
            if w.flavor not in queues.get(t.queue, {w.flavor}):
                yield Finding(
                    alloc.source,
                    (*wat, "flavor"),
                    "ray.flavor-not-in-queue",
                    f"queue {t.queue!r} has no quota for flavor {w.flavor!r}: Kueue would never "
                    "admit these workers",
                )
            if w.min_replicas > w.max_replicas:
                yield Finding(
                    alloc.source,
                    (*wat, "min_replicas"),
                    "ray.replicas-invalid",
                    f"min_replicas {w.min_replicas} is above max_replicas {w.max_replicas}",
                )
            nodes = [s for s in shapes.get(w.flavor, ()) if s.gpus]
            devices = requested[wi].gpus or 1  # None: all of a node's, so at least one
            fits = [
                s
                for s in nodes
                if devices <= s.gpus and (w.cpus or 1) <= s.cpus and (w.memory_gib or 1) <= s.memory_gib
            ]
            if not fits and nodes_known:
                yield Finding(
                    alloc.source,
                    wat,
                    "ray.pod-too-large",
                    f"no gpu-worker node of flavor {w.flavor!r} can hold a worker"
                    + (
                        f" of {w.gpus or 'all'} GPUs, {w.cpus or 'default'} CPUs, "
                        f"{w.memory_gib or 'default'} GiB"
                        if nodes
                        else ": none advertises nvidia.com/gpu"
                    ),
                )
        if nodes_known:
            yield from _ray_caps(a, ti, t, shapes, units)


def _ray_caps(
    a: Analysis, ti: int, t: Tenant, shapes: Mapping[str, Any], units: dict[str, int]
) -> Iterator[Finding]:
    """``allocation.caps-too-small`` for the Ray cluster: each pod within the LimitRange's max,
    the head and the minimum workers within the ResourceQuota (GPUs in device units)."""
    caps = caps_state(t.caps, queue_gpu_units(a, units, t.queue))
    if caps is None:
        return
    cluster = _ray_pods(a, t, shapes, units)
    if cluster is None:
        return
    alloc = a.fleet.allocation
    assert alloc is not None  # the tenant is one of its own
    groups = [cluster["head"], *cluster["workers"]]
    limit = caps["container"]["max"] if caps["container"] else None
    for g in groups:
        pod: ComputeState = {"cpu_millicores": g["cpus"] * 1000, "memory_mib": g["memory_gib"] * 1024}
        bad = _over(pod, limit)
        if bad:
            yield Finding(
                alloc.source,
                ("spec", "tenants", ti, "caps", "container", "max"),
                "allocation.caps-too-small",
                f"Ray group {g['name']!r} ({g['cpus']} CPUs, {g['memory_gib']} GiB per pod) is above the "
                "container max; the LimitRange would refuse its pods",
            )
            return
    need: dict[Literal["gpus", "cpu_millicores", "memory_mib", "pods"], int] = {
        "gpus": sum(g["gpus"] * g["replicas"] for g in groups),
        "cpu_millicores": sum(g["cpus"] * 1000 * g["replicas"] for g in groups),
        "memory_mib": sum(g["memory_gib"] * 1024 * g["replicas"] for g in groups),
        "pods": sum(g["replicas"] for g in groups),
    }
    for key, value in need.items():
        cap = caps[key]
        if cap is not None and value > cap:
            field = {"cpu_millicores": "cpu", "memory_mib": "memory_gib"}.get(key, key)
            yield Finding(
                alloc.source,
                ("spec", "tenants", ti, "caps", field),
                "allocation.caps-too-small",
                f"the Ray cluster at min_replicas needs {value} {key.replace('_', ' ')}, above the cap of "
                f"{cap}; the ResourceQuota would refuse its pods",
            )
            return


def volume_caps(a: Analysis) -> Iterator[Finding]:
    """``allocation.caps-too-small`` for the tenant's declared volumes (count and GiB)."""
    alloc, st = a.fleet.allocation, a.fleet.storage
    if alloc is None or st is None:
        return
    for ti, t in enumerate(alloc.tenants):
        if t.caps is None:
            continue
        mine = [v for v in st.volumes if v["tenant"] == t.name]
        total = sum(v["size_gib"] for v in mine)
        for key, value, what in (
            ("storage_gib", total, f"{total} GiB"),
            ("persistent_volume_claims", len(mine), f"{len(mine)} claims"),
        ):
            cap = t.caps.get(key)
            if cap is not None and value > cap:
                yield Finding(
                    alloc.source,
                    ("spec", "tenants", ti, "caps", key),
                    "allocation.caps-too-small",
                    f"tenant {t.name!r}'s volumes in the Storage policy need {what}, above the cap of {cap}; "
                    "the ResourceQuota would refuse them",
                )


CHECKS = (
    sharing,
    mig_strategies,
    cohorts,
    cluster_labels,
    namespaces,
    limit_ranges,
    ray_clusters,
    volume_caps,
)
