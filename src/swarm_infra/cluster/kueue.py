"""Kueue objects (kueue.x-k8s.io/v1beta2): WorkloadPriorityClasses, ResourceFlavors, Cohorts,
ClusterQueues and LocalQueues."""

from __future__ import annotations

from typing import Any, Literal

from ..resolve.types import ClusterQueueState, ClusterState, ResourceAmountState
from .meta import TENANT_LABEL, K8sObject, cpu, k8s_object, memory, weight

# The resources every ClusterQueue covers, in this order (Kueue requires each flavor to list
# exactly the covered resources; this project also keeps their order).
COVERED_RESOURCES: tuple[Literal["nvidia.com/gpu", "cpu", "memory"], ...] = (
    "nvidia.com/gpu",
    "cpu",
    "memory",
)


def workload_priority_classes(cluster: ClusterState) -> list[K8sObject]:
    """A WorkloadPriorityClass per Priority (value and description are top-level fields)."""
    labels = cluster["settings"]["labels"]
    return [
        k8s_object(
            "WorkloadPriorityClass", p["name"], labels, value=p["value"], description=p["description"] or None
        )
        for p in cluster["priorities"]
    ]


def resource_flavors(cluster: ClusterState) -> list[K8sObject]:
    """A ResourceFlavor per GPU flavor: the node label that selects its nodes, and the GPU
    taint's toleration, which Kueue adds to the pods it admits to the flavor."""
    labels = cluster["settings"]["labels"]
    return [
        k8s_object(
            "ResourceFlavor",
            f["name"],
            labels,
            spec={
                "nodeLabels": dict(f["node_labels"]),
                **({"tolerations": [dict(t) for t in f["tolerations"]]} if f["tolerations"] else {}),
            },
        )
        for f in cluster["flavors"]
    ]


def cohorts(cluster: ClusterState) -> list[K8sObject]:
    """A Cohort per cohort the Allocation declares (parent and fair-sharing weight)."""
    labels = cluster["settings"]["labels"]
    out = []
    for c in cluster["cohort_objects"]:
        spec: dict[str, Any] = {"fairSharing": {"weight": weight(c["fair_sharing_weight"])}}
        if c["parent"]:
            spec["parentName"] = c["parent"]
        out.append(k8s_object("Cohort", c["name"], labels, spec=spec))
    return out


def _quantity(resource: str, amount: int) -> int | str:
    if resource == "cpu":
        return cpu(amount)
    if resource == "memory":
        return memory(amount)
    return amount


def _flavor_resources(resources: list[ResourceAmountState]) -> list[dict[str, Any]]:
    by_name = {r["name"]: r for r in resources}
    out = []
    for name in COVERED_RESOURCES:
        r = by_name[name]
        entry: dict[str, Any] = {"name": name, "nominalQuota": _quantity(name, r["nominal_quota"])}
        if r["borrowing_limit"] is not None:
            entry["borrowingLimit"] = _quantity(name, r["borrowing_limit"])
        if r["lending_limit"] is not None:
            entry["lendingLimit"] = _quantity(name, r["lending_limit"])
        out.append(entry)
    return out


def cluster_queue(q: ClusterQueueState, tenants: list[str], labels: dict[str, str]) -> K8sObject:
    """One ClusterQueue; ``tenants`` are the tenants whose namespaces may use it."""
    spec: dict[str, Any] = {}
    if q["cohort"]:
        spec["cohortName"] = q["cohort"]
    if tenants:
        spec["namespaceSelector"] = {
            "matchExpressions": [{"key": TENANT_LABEL, "operator": "In", "values": sorted(tenants)}]
        }
    spec["resourceGroups"] = [
        {
            "coveredResources": list(COVERED_RESOURCES),
            "flavors": [
                {"name": x["flavor"], "resources": _flavor_resources(x["resources"])} for x in q["quotas"]
            ],
        }
    ]
    p = q["preemption"]
    spec["preemption"] = {
        "withinClusterQueue": p["within_cluster_queue"],
        "reclaimWithinCohort": p["reclaim_within_cohort"],
        "borrowWithinCohort": {"policy": p["borrow_within_cohort"]},
    }
    spec["fairSharing"] = {"weight": weight(q["fair_sharing_weight"])}
    return k8s_object("ClusterQueue", q["name"], labels, spec=spec)


def cluster_queues(cluster: ClusterState) -> list[K8sObject]:
    """A ClusterQueue per queue, open to the namespaces of the tenants that use it."""
    labels = cluster["settings"]["labels"]
    users: dict[str, list[str]] = {}
    for t in cluster["tenants"]:
        users.setdefault(t["cluster_queue"], []).append(t["name"])
    return [cluster_queue(q, users.get(q["name"], []), labels) for q in cluster["cluster_queues"]]


def local_queues(cluster: ClusterState) -> list[K8sObject]:
    """A LocalQueue per tenant, in its namespace, feeding its ClusterQueue."""
    labels = cluster["settings"]["labels"]
    queues = {q["name"] for q in cluster["cluster_queues"]}
    return [
        k8s_object(
            "LocalQueue",
            t["local_queue"],
            {**labels, TENANT_LABEL: t["name"]},
            t["namespace"],
            spec={"clusterQueue": t["cluster_queue"]},
        )
        for t in cluster["tenants"]
        if t["cluster_queue"] in queues
    ]
