"""KubeRay RayClusters (ray.io/v1), one per tenant that asks for one, from the Ray decision
(:mod:`swarm_infra.resolve.ray`).

Each cluster is queued through the tenant's LocalQueue (label ``kueue.x-k8s.io/queue-name``)
at the cluster's priority (label ``kueue.x-k8s.io/priority-class`` and the pods'
``priorityClassName``). Worker groups select their flavor's nodes and tolerate the GPU
taint themselves, so they land right with or without Kueue. Every pod's requests equal its
limits; ``/dev/shm`` is a memory-backed volume as large as the object store.

Ray node labels and custom resources go in each group's own ``labels`` and ``resources``
fields, never in ``rayStartParams`` (KubeRay 1.6.0 refuses ``rayStartParams.labels`` and
would paste a value with a space unquoted into ``bash -c``); every ``rayStartParams`` value
is a plain word (``cluster.rules``: KubeRay's validation restated, and the unit tests parse
the command KubeRay builds with the pinned Ray's own ``ray start``).

Kueue refuses ``enableInTreeAutoscaling`` on a queued RayCluster unless it is an elastic job
(feature gate ``ElasticJobsViaWorkloadSlices``, annotation ``kueue.x-k8s.io/elastic-job``
and the scheduling gate of the same name on every pod template; Kueue's webhook checks
the gates). A cluster whose groups may grow (``min_replicas < max_replicas``) is rendered
that way, and the stack enables the feature gate when it installs Kueue.
"""

from __future__ import annotations

from typing import Any

from ..resolve.types import ClusterState, RayClusterState, RayGroupState, TolerationState
from .meta import KUEUE_PRIORITY_LABEL, KUEUE_QUEUE_LABEL, TENANT_LABEL, K8sObject, k8s_object, memory

ELASTIC_JOB = "kueue.x-k8s.io/elastic-job"  # annotation (value "true") and scheduling gate
SHM_VOLUME = "dshm"


def _pod_template(
    group: RayGroupState,
    cluster: RayClusterState,
    container: str,
    tolerations: list[TolerationState],
    labels: dict[str, str],
    start_params: dict[str, str],
) -> dict[str, Any]:
    amounts = {"cpu": str(group["cpus"]), "memory": memory(group["memory_gib"] * 1024)}
    if group["gpus"]:
        amounts["nvidia.com/gpu"] = str(group["gpus"])
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": container,
                "image": cluster["image"],
                "resources": {"requests": dict(amounts), "limits": dict(amounts)},
                "volumeMounts": [{"name": SHM_VOLUME, "mountPath": "/dev/shm"}],
            }
        ],
        "volumes": [
            {
                "name": SHM_VOLUME,
                "emptyDir": {"medium": "Memory", "sizeLimit": str(group["object_store_bytes"])},
            }
        ],
    }
    if cluster["priority"]:
        spec["priorityClassName"] = cluster["priority"]
    if group["node_labels"]:
        spec["nodeSelector"] = dict(group["node_labels"])
    if group["gpus"] and tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    if cluster["autoscaling"]:
        spec["schedulingGates"] = [{"name": ELASTIC_JOB}]
    params = dict(start_params, **{"object-store-memory": str(group["object_store_bytes"])})
    out: dict[str, Any] = {"rayStartParams": params}
    # The same accelerator resources and node labels bare-node Ray declares (resolve/ray.py),
    # in the group's own fields: KubeRay 1.6.0 refuses rayStartParams["labels"]
    # (validateRayGroupLabels) and pastes rayStartParams values unquoted into the
    # container's bash command line, while from these fields it builds --labels=k=v,... and
    # a single-quoted, space-free --resources='{...}' itself (ray-operator/controllers/ray/
    # common/pod.go, updateRayStartParamsLabels / updateRayStartParamsResources, v1.6.0).
    if group["resources"]:
        out["resources"] = {name: str(amount) for name, amount in sorted(group["resources"].items())}
    if group["labels"]:
        out["labels"] = dict(sorted(group["labels"].items()))
    out["template"] = {"metadata": {"labels": dict(labels)}, "spec": spec}
    return out


def ray_cluster(cluster: RayClusterState, state: ClusterState) -> K8sObject:
    """The RayCluster for ``cluster`` (head group, one worker group per flavor)."""
    settings = state["settings"]
    tolerations: list[TolerationState] = []
    if settings["gpu_taint"] is not None:
        taint = settings["gpu_taint"]
        tolerations = [{"key": taint["key"], "operator": "Exists", "effect": taint["effect"]}]
    labels = dict(settings["labels"])
    if cluster["tenant"]:
        labels[TENANT_LABEL] = cluster["tenant"]
    pod_labels = dict(labels)
    if cluster["local_queue"]:
        labels[KUEUE_QUEUE_LABEL] = cluster["local_queue"]
    if cluster["priority"]:
        labels[KUEUE_PRIORITY_LABEL] = cluster["priority"]
    head = _pod_template(
        cluster["head"], cluster, "ray-head", tolerations, pod_labels, {"dashboard-host": "0.0.0.0"}
    )
    workers = []
    for g in cluster["workers"]:
        w = _pod_template(g, cluster, "ray-worker", tolerations, pod_labels, {})
        workers.append(
            {
                "groupName": g["name"],
                "replicas": g["replicas"],
                "minReplicas": g["min_replicas"],
                "maxReplicas": g["max_replicas"],
                **w,
            }
        )
    # Ray's token authentication, as the bare-node cluster has it: KubeRay (v1.5.1 and later)
    # makes a Secret with a random token and sets RAY_AUTH_MODE and RAY_AUTH_TOKEN on every
    # Ray container (Ray docs, "Configure Ray clusters to use token authentication"), so the
    # dashboard and job API on the head's 0.0.0.0 answer only with the token.
    spec: dict[str, Any] = {"rayVersion": cluster["ray_version"], "authOptions": {"mode": "token"}}
    if cluster["autoscaling"]:
        spec["enableInTreeAutoscaling"] = True
    spec["headGroupSpec"] = head
    spec["workerGroupSpecs"] = workers
    return k8s_object(
        "RayCluster",
        cluster["name"],
        labels,
        cluster["namespace"],
        annotations={ELASTIC_JOB: "true"} if cluster["autoscaling"] else None,
        spec=spec,
    )


def ray_clusters(state: ClusterState) -> list[K8sObject]:
    """A RayCluster per ClusterState.ray_clusters entry."""
    return [ray_cluster(c, state) for c in state["ray_clusters"]]
