"""One stack, one regional cluster: the desired state cut down to some sites.

A fleet may run one Kubernetes cluster per region; a stack then names its sites. What
stays: the nodes of those sites (labels, taints, local scratch volumes), the GPU flavors
whose gpu-worker nodes are all there, the CPU flavors of those sites, the quotas of those
flavors (a ClusterQueue left without GPU quota is left out) and the Ray clusters whose
worker flavors are all there.
Tenants, priorities, the admission policy, storage classes, claims and the mesh topology
are the same in every cluster, except claims of the scratch class in a cluster where no
node has scratch: that class is not made there (``cluster.core.storage``), so they are left
out rather than left ``Pending``.

A flavor whose nodes are split between the chosen sites and others cannot keep its quota
(a quota counts GPUs in one cluster): :class:`ScopeError`, before any object is made.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable

from ..errors import ScopeError as ScopeError
from ..resolve.cluster import gpu_quota
from ..resolve.labels import FLAVOR_LABEL
from ..resolve.types import DesiredState


def scope(state: DesiredState, sites: Iterable[str] | None) -> DesiredState:
    """``state`` for the cluster of ``sites`` (None: the whole fleet, ``state`` itself)."""
    if sites is None:
        return state
    wanted = set(sites)
    known = {n["site"] for n in state["nodes"].values()}
    unknown = sorted(wanted - known)
    if unknown:
        raise ScopeError(f"no node is in site(s) {', '.join(unknown)} (sites: {', '.join(sorted(known))})")
    inside: dict[str, set[bool]] = {}
    for n in state["nodes"].values():
        flavor = n["labels"].get(FLAVOR_LABEL)
        if flavor and "gpu-worker" in n["roles"]:
            inside.setdefault(flavor, set()).add(n["site"] in wanted)
    cluster = copy.deepcopy(state["cluster"])
    quota = {
        f: sum(
            q["nominal_quota"] for cq in cluster["cluster_queues"] for q in cq["quotas"] if q["flavor"] == f
        )
        for f in inside
    }
    split = sorted(f for f, where in inside.items() if where == {True, False} and quota.get(f))
    if split:
        raise ScopeError(
            f"flavor(s) {', '.join(split)} have gpu-worker nodes inside and outside sites "
            f"{', '.join(sorted(wanted))}; their quotas cannot be split between clusters"
        )
    kept = {f["name"] for f in cluster["flavors"] if True in inside.get(f["name"], {True})}
    cluster["flavors"] = [f for f in cluster["flavors"] if f["name"] in kept]
    cluster["capacity"] = {f: c for f, c in cluster["capacity"].items() if f in kept}
    cluster["cpu_flavors"] = [f for f in cluster["cpu_flavors"] if f["site"] in wanted]
    cpu_kept = {f["name"] for f in cluster["cpu_flavors"]}
    queues = []
    for q in cluster["cluster_queues"]:
        q["quotas"] = [x for x in q["quotas"] if x["flavor"] in kept]
        q["cpu_quotas"] = [x for x in q["cpu_quotas"] if x["flavor"] in cpu_kept]
        if q["quotas"]:
            queues.append(q)
    cluster["cluster_queues"] = queues
    # Each tenant's GPU ResourceQuota: what its queue could be admitted in this cluster, not
    # in the fleet (a queue left out of this cluster admits nothing here).
    by_queue = {q["name"]: q for q in queues}
    kept_flavors = {f["name"]: f for f in cluster["flavors"]}
    for t in cluster["tenants"]:
        t["gpu_quota"] = gpu_quota(t["caps"], by_queue.get(t["cluster_queue"]), kept_flavors)
    rays = []
    for r in cluster["ray_clusters"]:
        flavors = {w["flavor"] for w in r["workers"]}
        if flavors <= kept:
            rays.append(r)
        elif flavors & kept:
            raise ScopeError(
                f"Ray cluster {r['namespace']}/{r['name']} has workers inside and outside sites "
                f"{', '.join(sorted(wanted))}"
            )
    cluster["ray_clusters"] = rays
    nodes = {k: n for k, n in state["nodes"].items() if n["site"] in wanted}
    st = cluster["storage"]
    if st is not None and st["scratch"] is not None and all(n["storage"] is None for n in nodes.values()):
        st["volumes"] = [v for v in st["volumes"] if v["class"] != st["scratch"]["storage_class"]]
    return {
        "nodes": nodes,
        "cluster": cluster,
        "rollout": state["rollout"],
    }
