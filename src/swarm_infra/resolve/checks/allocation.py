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


def fair_sharing(a: Analysis) -> Iterator[Finding]:
    """Fair sharing or classical preemption, never half of each (``spec.fair_sharing``).

    ``allocation.fair-sharing-conflict``: ``borrow_within_cohort`` other than Never with fair
    sharing on: Kueue documents it as working with classical preemption only, not with fair
    sharing (kueue v0.17.5 apis/kueue/v1beta2/clusterqueue_types.go, BorrowWithinCohort), and
    its preemptor takes the fair-sharing path when fair sharing is on
    (pkg/scheduler/preemption/preemption.go), so the setting would be inert;
    ``allocation.weight-without-fair-sharing``: a queue's or cohort's ``fair_sharing_weight``
    other than 1 with fair sharing off (Kueue reads weights only under fair sharing).
    """
    alloc = a.fleet.allocation
    if alloc is None:
        return
    for qi, q in enumerate(alloc.queues):
        if alloc.fair_sharing and q.borrow_within_cohort != "Never":
            yield Finding(
                alloc.source,
                ("spec", "queues", qi, "preemption", "borrow_within_cohort"),
                "allocation.fair-sharing-conflict",
                "borrow_within_cohort works with classical preemption only; Kueue ignores it under "
                "fair sharing (spec.fair_sharing: true): remove it or turn fair sharing off",
            )
    if alloc.fair_sharing:
        return
    weights = [
        (("spec", "queues", i, "fair_sharing_weight"), q.fair_sharing_weight)
        for i, q in enumerate(alloc.queues)
    ]
    weights += [
        (("spec", "cohorts", i, "fair_sharing_weight"), c.fair_sharing_weight)
        for i, c in enumerate(alloc.cohorts)
    ]
    for path, weight in weights:
        if weight != 1:
            yield Finding(
                alloc.source,
                path,
                "allocation.weight-without-fair-sharing",
                f"fair_sharing_weight {weight:g} has no effect without fair sharing: "
                "set spec.fair_sharing: true or remove the weight",
            )


def unallocated(a: Analysis) -> Iterator[Finding]:
    """``allocation.capacity-unallocated`` (a warning): a flavor's GPUs that no queue's
    nominal_quota holds and that ``reserved_gpus`` does not declare. Kueue admits nothing on
    them (borrowing only lends other queues' nominal quota), so they idle; a warning, not an
    error, because nodes join before their quota is written and leave for maintenance, and
    idle GPUs break nothing; ``reserved_gpus`` states the intent and silences it.
    ``reference.unresolved``: ``reserved_gpus`` names no flavor of the fleet."""
    alloc = a.fleet.allocation
    if alloc is None or not a.fleet.complete("Node"):
        return
    flavors = a.flavors()
    capacity = gpu_capacity(a.fleet)
    nominal: dict[str, int] = defaultdict(int)
    for q in alloc.queues:
        for x in q.quotas:
            nominal[x.flavor] += x.nominal_quota
    for f in alloc.reserved_gpus:
        if f not in flavors:
            yield Finding(
                alloc.source,
                ("spec", "reserved_gpus", f),
                "reference.unresolved",
                f"no GPU flavor {f!r} in this fleet (flavors: {', '.join(flavors) or 'none'})",
            )
    for f in flavors:
        idle = capacity.get(f, 0) - nominal[f]
        reserved = alloc.reserved_gpus.get(f, 0)
        if idle > 0 and idle != reserved:
            yield Finding(
                alloc.source,
                ("spec", "reserved_gpus", f) if f in alloc.reserved_gpus else ("spec", "queues"),
                "allocation.capacity-unallocated",
                f"{idle} of the fleet's {capacity.get(f, 0)} {f} GPUs are in no queue's nominal_quota"
                + (f" (reserved_gpus says {reserved})" if reserved else "")
                + ": Kueue can never admit work on them; give them to a queue or declare them "
                "in spec.reserved_gpus",
                "warning",
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


CHECKS = (queues, fair_sharing, unallocated, priorities)
