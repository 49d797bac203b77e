"""Kueue objects (kueue.x-k8s.io/v1beta2): WorkloadPriorityClasses, ResourceFlavors, Cohorts,
ClusterQueues and LocalQueues."""

from __future__ import annotations

import copy
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
    taint's toleration, which Kueue adds to the pods it admits to the flavor; and one per
    site CPU flavor (Ray heads): the site label, no toleration (GPU nodes stay off-limits)."""
    labels = cluster["settings"]["labels"]
    gpu = [
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
    cpu = [
        k8s_object("ResourceFlavor", f["name"], labels, spec={"nodeLabels": dict(f["node_labels"])})
        for f in cluster["cpu_flavors"]
    ]
    return gpu + cpu


def cohorts(cluster: ClusterState) -> list[K8sObject]:
    """A Cohort per cohort the Allocation declares (parent and fair-sharing weight)."""
    labels = cluster["settings"]["labels"]
    out = []
    for c in cluster["cohort_objects"]:
        spec: dict[str, Any] = {}
        if cluster["fair_sharing"]:
            spec["fairSharing"] = {"weight": weight(c["fair_sharing_weight"])}
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


def cluster_queue(
    q: ClusterQueueState, tenants: list[str], labels: dict[str, str], fair_sharing: bool = False
) -> K8sObject:
    """One ClusterQueue; ``tenants`` are the tenants whose namespaces may use it.

    One resource group: the GPU flavors in the policy's order (Kueue tries them in order, so
    the order is the queue's preference), then the CPU flavors of its Ray heads' sites.
    ``fairSharing.weight`` only with fair sharing on (it means nothing otherwise)."""
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
                {"name": x["flavor"], "resources": _flavor_resources(x["resources"])}
                for x in [*q["quotas"], *q["cpu_quotas"]]
            ],
        }
    ]
    p = q["preemption"]
    spec["preemption"] = {
        "withinClusterQueue": p["within_cluster_queue"],
        "reclaimWithinCohort": p["reclaim_within_cohort"],
        "borrowWithinCohort": {"policy": p["borrow_within_cohort"]},
    }
    if fair_sharing:
        spec["fairSharing"] = {"weight": weight(q["fair_sharing_weight"])}
    return k8s_object("ClusterQueue", q["name"], labels, spec=spec)


def cluster_queues(cluster: ClusterState) -> list[K8sObject]:
    """A ClusterQueue per queue, open to the namespaces of the tenants that use it."""
    labels = cluster["settings"]["labels"]
    users: dict[str, list[str]] = {}
    for t in cluster["tenants"]:
        users.setdefault(t["cluster_queue"], []).append(t["name"])
    return [
        cluster_queue(q, users.get(q["name"], []), labels, cluster["fair_sharing"])
        for q in cluster["cluster_queues"]
    ]


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


# Kueue's manager Configuration (config.kueue.x-k8s.io/v1beta2), as the pinned chart passes
# it (kueue chart v0.17.5 values.yaml, managerConfig.controllerManagerConfigYaml): the
# chart's own defaults, restated because a value given replaces the whole document.
_CHART_DEFAULTS: dict[str, Any] = {
    "apiVersion": "config.kueue.x-k8s.io/v1beta2",
    "kind": "Configuration",
    "health": {"healthProbeBindAddress": ":8081"},
    "metrics": {"bindAddress": ":8443"},
    "webhook": {"port": 9443},
    "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
    "controller": {
        "groupKindConcurrency": {
            "Job.batch": 5,
            "Pod": 5,
            "Workload.kueue.x-k8s.io": 5,
            "LocalQueue.kueue.x-k8s.io": 1,
            "ClusterQueue.kueue.x-k8s.io": 1,
            "ResourceFlavor.kueue.x-k8s.io": 1,
        }
    },
    "clientConnection": {"qps": 50, "burst": 100},
    "integrations": {
        "frameworks": [
            "batch/job",
            "kubeflow.org/mpijob",
            "ray.io/rayjob",
            "ray.io/rayservice",
            "ray.io/raycluster",
            "jobset.x-k8s.io/jobset",
            "trainer.kubeflow.org/trainjob",
            "kubeflow.org/paddlejob",
            "kubeflow.org/pytorchjob",
            "kubeflow.org/tfjob",
            "kubeflow.org/xgboostjob",
            "kubeflow.org/jaxjob",
            "workload.codeflare.dev/appwrapper",
            "pod",
            "deployment",
            "statefulset",
            "leaderworkerset.x-k8s.io/leaderworkerset",
        ]
    },
}
# Fair sharing's preemption strategies: Kueue's default pair (one of the three sets
# pkg/config/validation.go validStrategySets accepts at v0.17.5).
FAIR_SHARING_STRATEGIES = ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]
# Requests Kueue ignores: no ClusterQueue covers them, and Kueue refuses to admit a workload
# that requests a resource its queue does not cover. Node-local resources, bounded by the
# kubelet (ephemeral-storage, hugepages) and by the nodes' device plugins (RDMA), not by quota.
EXCLUDED_RESOURCE_PREFIXES = ["ephemeral-storage", "hugepages-", "rdma/"]


def manager_config(cluster: ClusterState) -> dict[str, Any]:
    """Kueue's Configuration for this cluster: the chart's defaults, plus

    - ``manageJobsWithoutQueueName: true`` with ``managedJobsNamespaceSelector`` selecting
      the tenant namespaces (label ``swarm.io/tenant``): a Job, RayCluster or plain Pod there
      without a queue name is suspended, never run outside its quota (Kueue v0.17.5
      apis/config/v1beta2 ManageJobsWithoutQueueName); kube-system and kueue-system never
      match (Kueue's config validation requires it; tenant namespaces are never those);
    - ``fairSharing`` when the Allocation chooses it (its presence enables fair sharing:
      pkg/scheduler/preemption/fairsharing ``Enabled``);
    - ``resources.excludeResourcePrefixes``: :data:`EXCLUDED_RESOURCE_PREFIXES`.
    """
    config = copy.deepcopy(_CHART_DEFAULTS)
    config["manageJobsWithoutQueueName"] = True
    config["managedJobsNamespaceSelector"] = {
        "matchExpressions": [{"key": TENANT_LABEL, "operator": "Exists"}]
    }
    if cluster["fair_sharing"]:
        config["fairSharing"] = {"preemptionStrategies": list(FAIR_SHARING_STRATEGIES)}
    config["resources"] = {"excludeResourcePrefixes": list(EXCLUDED_RESOURCE_PREFIXES)}
    return config
