"""ClusterState: flavors, ClusterQueues, cohorts, tenants, priorities, storage, capacity."""

from __future__ import annotations

from collections import defaultdict

from .analysis import Analysis
from .capacity import gpu_capacity
from .catalog import gpu_catalog
from .node import FLAVOR_LABEL
from .types import ClusterQueueState, ClusterState, ClusterStorageState, QuotaState, TenantState

GPU_RESOURCE = "nvidia.com/gpu"


def cluster_state(a: Analysis) -> ClusterState:
    """The cluster's desired state for a checked fleet.

    Quotas are in GPUs of resource ``nvidia.com/gpu``; ``capacity`` gives per flavor the
    fleet's GPUs (on gpu-worker nodes), the sum of nominal quotas and what is unallocated.
    Lists are in name order, priorities highest value first.
    """
    fleet, catalog = a.fleet, gpu_catalog()
    capacity = gpu_capacity(fleet)
    flavors = a.flavors()
    nominal: dict[str, int] = defaultdict(int)
    queues: list[ClusterQueueState] = []
    tenants: list[TenantState] = []
    cohorts: set[str] = set()
    if fleet.allocation is not None:
        for q in sorted(fleet.allocation.queues, key=lambda q: q.name):
            if q.cohort:
                cohorts.add(q.cohort)
            quotas: list[QuotaState] = []
            for quota in sorted(q.quotas, key=lambda x: x.flavor):
                nominal[quota.flavor] += quota.nominal_quota
                quotas.append(
                    {
                        "flavor": quota.flavor,
                        "resource": GPU_RESOURCE,
                        "nominal_quota": quota.nominal_quota,
                        "borrowing_limit": quota.borrowing_limit,
                        "lending_limit": quota.lending_limit,
                    }
                )
            queues.append(
                {
                    "name": q.name,
                    "cohort": q.cohort,
                    "fair_sharing_weight": q.fair_sharing_weight,
                    "preemption": {
                        "within_cluster_queue": q.within_cluster_queue,
                        "reclaim_within_cohort": q.reclaim_within_cohort,
                        "borrow_within_cohort": q.borrow_within_cohort,
                    },
                    "quotas": quotas,
                }
            )
        for t in sorted(fleet.allocation.tenants, key=lambda t: t.name):
            tenants.append(
                {
                    "name": t.name,
                    "namespace": t.namespace,
                    "local_queue": t.name,
                    "cluster_queue": t.queue,
                    "priorities": sorted(t.priorities)
                    if t.priorities is not None
                    else sorted(fleet.priorities),
                }
            )
    namespaces = {t["name"]: t["namespace"] for t in tenants}
    storage: ClusterStorageState | None = None
    if fleet.storage is not None:
        st = fleet.storage
        storage = {
            "scratch": dict(st.scratch) if st.scratch else None,  # type: ignore[typeddict-item]
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
    return {
        "flavors": [
            {
                "name": f,
                "gpu_model": m,
                "product_name": catalog[m]["product_name"],
                "node_labels": {FLAVOR_LABEL: f},
                "gpus": capacity.get(f, 0),
            }
            for f, m in flavors.items()
        ],
        "cohorts": sorted(cohorts),
        "cluster_queues": queues,
        "tenants": tenants,
        "priorities": [
            {
                "name": p.name,
                "value": p.value,
                "preemption_policy": p.preemption_policy,
                "global_default": p.global_default,
                "description": p.description,
            }
            for p in sorted(fleet.priorities.values(), key=lambda p: (-p.value, p.name))
        ],
        "storage": storage,
        "capacity": {
            f: {
                "gpus": capacity.get(f, 0),
                "nominal_quota": nominal.get(f, 0),
                "unallocated": capacity.get(f, 0) - nominal.get(f, 0),
            }
            for f in flavors
        },
    }
