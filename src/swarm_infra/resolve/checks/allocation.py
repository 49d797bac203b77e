"""Allocation against Kueue's rules and the fleet's capacity; priorities against Kubernetes'."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from ...fleet.diagnostics import Finding
from ..analysis import Analysis
from ..capacity import gpu_capacity

# Kubernetes reserves PriorityClass names starting with "system-" and values above 1e9
# (scheduling/v1 validation: IsValidPriorityClassName / HighestUserDefinablePriority).
RESERVED_PREFIX = "system-"


def queues(a: Analysis) -> Iterator[Finding]:
    """Kueue ClusterQueue rules and capacity.

    ``allocation.borrowing-without-cohort``: borrowingLimit/lendingLimit without a cohort
    (Kueue CEL: "borrowingLimit must be nil when cohort is empty"; lendingLimit likewise);
    ``allocation.lending-exceeds-nominal``: lendingLimit above nominalQuota;
    ``allocation.preemption-conflict``: reclaimWithinCohort=Never with borrowWithinCohort
    other than Never (Kueue CEL rule on spec.preemption);
    ``allocation.quota-exceeds-capacity``: nominalQuota of a flavor, summed over queues,
    above the fleet's GPUs of that flavor (reported at the quota where the sum passes it).
    """
    alloc = a.fleet.allocation
    if alloc is None:
        return
    capacity = gpu_capacity(a.fleet)
    flavors = a.flavors()
    total: dict[str, int] = defaultdict(int)
    for qi, q in enumerate(alloc.queues):
        if q.reclaim_within_cohort == "Never" and q.borrow_within_cohort != "Never":
            yield Finding(
                alloc.source,
                ("spec", "queues", qi, "preemption", "borrow_within_cohort"),
                "allocation.preemption-conflict",
                "Kueue forbids borrow_within_cohort other than Never when reclaim_within_cohort is Never",
            )
        for xi, quota in enumerate(q.quotas):
            path = ("spec", "queues", qi, "quotas", xi)
            for limit in ("borrowing_limit", "lending_limit"):
                if getattr(quota, limit) is not None and q.cohort is None:
                    yield Finding(
                        alloc.source,
                        (*path, limit),
                        "allocation.borrowing-without-cohort",
                        f"{limit} needs a cohort: queue {q.name!r} has none (Kueue rule)",
                    )
            if quota.lending_limit is not None and quota.lending_limit > quota.nominal_quota:
                yield Finding(
                    alloc.source,
                    (*path, "lending_limit"),
                    "allocation.lending-exceeds-nominal",
                    f"lending_limit {quota.lending_limit} is above nominal_quota {quota.nominal_quota}",
                )
            if quota.flavor not in flavors:
                continue  # reported as unresolved
            before = total[quota.flavor]
            total[quota.flavor] += quota.nominal_quota
            cap = capacity.get(quota.flavor, 0)
            if before <= cap < total[quota.flavor] and a.fleet.complete("Node"):
                yield Finding(
                    alloc.source,
                    (*path, "nominal_quota"),
                    "allocation.quota-exceeds-capacity",
                    f"nominal quotas for flavor {quota.flavor!r} add up to "
                    f"{total[quota.flavor]} GPUs here, above the fleet's {cap} "
                    f"(gpu-worker nodes with {flavors[quota.flavor]})",
                )


def priorities(a: Analysis) -> Iterator[Finding]:
    """``priority.default-multiple`` (more than one global default) and
    ``priority.reserved-name`` (the ``system-`` prefix is Kubernetes')."""
    defaults = [p for p in a.fleet.priorities.values() if p.global_default]
    for p in defaults[1:]:
        yield Finding(
            p.source,
            ("spec", "global_default"),
            "priority.default-multiple",
            f"Priority {defaults[0].name!r} is already the global default",
        )
    for p in a.fleet.priorities.values():
        if p.name.startswith(RESERVED_PREFIX):
            yield Finding(
                p.source,
                ("metadata", "name"),
                "priority.reserved-name",
                f"names starting with {RESERVED_PREFIX!r} are reserved by Kubernetes",
            )


CHECKS = (queues, priorities)
