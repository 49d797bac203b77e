"""Names and references: every name a document mentions must be declared."""

from __future__ import annotations

from collections.abc import Iterator

from ...fleet.diagnostics import Finding
from ..analysis import Analysis
from ..catalog import gpu_catalog


def _missing(kind: str, name: str) -> str:
    return f"no {kind} named {name!r}"


def node_refs(a: Analysis) -> Iterator[Finding]:
    """``reference.unresolved`` for Node.site; ``gpu.model-unknown`` for GPU models not in the catalog."""
    catalog = gpu_catalog()
    for node in a.fleet.nodes.values():
        if not a.known("Site", node.site):
            yield Finding(node.source, ("spec", "site"), "reference.unresolved", _missing("Site", node.site))
        for i, slot in enumerate(node.gpus):
            if slot.model not in catalog:
                yield Finding(
                    node.source,
                    ("spec", "hardware", "gpus", i, "model"),
                    "gpu.model-unknown",
                    f"{slot.model!r} is not in the GPU catalog (known: {', '.join(catalog)})",
                )


def assignment_refs(a: Analysis) -> Iterator[Finding]:
    """Profiles, node and site names, and GPU models an Assignment names must exist."""
    catalog = gpu_catalog()
    for asg in a.fleet.assignments.values():
        if asg.gpu_profile and not a.known("GpuProfile", asg.gpu_profile):
            yield Finding(
                asg.source,
                ("spec", "gpu_profile"),
                "reference.unresolved",
                _missing("GpuProfile", asg.gpu_profile),
            )
        if asg.host_profile and not a.known("HostProfile", asg.host_profile):
            yield Finding(
                asg.source,
                ("spec", "host_profile"),
                "reference.unresolved",
                _missing("HostProfile", asg.host_profile),
            )
        sel = asg.selector
        for key, kind in (("nodes", "Node"), ("sites", "Site")):
            for name in sorted(getattr(sel, key) or ()):
                if not a.known(kind, name):
                    yield Finding(
                        asg.source, ("spec", "selector", key), "reference.unresolved", _missing(kind, name)
                    )
        for model in sorted(sel.gpu_models or ()):
            if model not in catalog:
                yield Finding(
                    asg.source,
                    ("spec", "selector", "gpu_models"),
                    "gpu.model-unknown",
                    f"{model!r} is not in the GPU catalog",
                )


def include_refs(a: Analysis) -> Iterator[Finding]:
    """HostProfile includes must exist."""
    for hp in a.fleet.host_profiles.values():
        for i, inc in enumerate(hp.include):
            if not a.known("HostProfile", inc):
                yield Finding(
                    hp.source, ("spec", "include", i), "reference.unresolved", _missing("HostProfile", inc)
                )


def allocation_refs(a: Analysis) -> Iterator[Finding]:
    """Quota flavors, tenant queues and priorities resolve; queue and tenant names are unique."""
    alloc = a.fleet.allocation
    if alloc is None:
        return
    flavors = a.flavors()
    queues: set[str] = set()
    for qi, q in enumerate(alloc.queues):
        if q.name in queues:
            yield Finding(
                alloc.source,
                ("spec", "queues", qi, "name"),
                "name.duplicate",
                f"queue {q.name!r} is declared twice",
            )
        queues.add(q.name)
        seen: set[str] = set()
        for xi, quota in enumerate(q.quotas):
            path = ("spec", "queues", qi, "quotas", xi, "flavor")
            if quota.flavor not in flavors:
                if not a.fleet.complete("Node"):
                    continue  # the flavor may be a model of a node that failed its schema
                yield Finding(
                    alloc.source,
                    path,
                    "reference.unresolved",
                    f"no GPU flavor {quota.flavor!r} in this fleet (flavors: "
                    f"{', '.join(flavors) or 'none: no node has a catalog GPU'})",
                )
            elif quota.flavor in seen:
                yield Finding(
                    alloc.source,
                    path,
                    "name.duplicate",
                    f"flavor {quota.flavor!r} has two quotas in queue {q.name!r}",
                )
            seen.add(quota.flavor)
    tenants: set[str] = set()
    for ti, t in enumerate(alloc.tenants):
        if t.name in tenants:
            yield Finding(
                alloc.source,
                ("spec", "tenants", ti, "name"),
                "name.duplicate",
                f"tenant {t.name!r} is declared twice",
            )
        tenants.add(t.name)
        if t.queue not in queues:
            yield Finding(
                alloc.source,
                ("spec", "tenants", ti, "queue"),
                "reference.unresolved",
                f"no queue named {t.queue!r} in spec.queues",
            )
        for pi, prio in enumerate(t.priorities or ()):
            if not a.known("Priority", prio):
                yield Finding(
                    alloc.source,
                    ("spec", "tenants", ti, "priorities", pi),
                    "reference.unresolved",
                    _missing("Priority", prio),
                )


def storage_refs(a: Analysis) -> Iterator[Finding]:
    """Volume classes and tenants resolve; class and volume names unique; one default class."""
    st = a.fleet.storage
    if st is None:
        return
    classes: set[str] = set()
    defaults = 0
    for ci, c in enumerate(st.classes):
        if c["name"] in classes:
            yield Finding(
                st.source,
                ("spec", "classes", ci, "name"),
                "name.duplicate",
                f"storage class {c['name']!r} is declared twice",
            )
        classes.add(c["name"])
        if c.get("default"):
            defaults += 1
            if defaults > 1:
                yield Finding(
                    st.source,
                    ("spec", "classes", ci, "default"),
                    "storage.default-multiple",
                    "more than one storage class is marked default",
                )
    if st.scratch is not None:  # node-local scratch is claimed through its own class
        classes.add(st.scratch["storage_class"])
    tenants = {t.name for t in a.fleet.allocation.tenants} if a.fleet.allocation else set()
    volumes: set[tuple[str, str]] = set()  # PVC names are unique per namespace (tenant)
    for vi, v in enumerate(st.volumes):
        if (v["tenant"], v["name"]) in volumes:
            yield Finding(
                st.source,
                ("spec", "volumes", vi, "name"),
                "name.duplicate",
                f"tenant {v['tenant']!r} already has a volume {v['name']!r}",
            )
        volumes.add((v["tenant"], v["name"]))
        if v["class"] not in classes:
            yield Finding(
                st.source,
                ("spec", "volumes", vi, "class"),
                "reference.unresolved",
                f"no storage class named {v['class']!r} in spec.classes (or scratch.storage_class)",
            )
        if v["tenant"] not in tenants and a.fleet.complete("Allocation"):
            yield Finding(
                st.source,
                ("spec", "volumes", vi, "tenant"),
                "reference.unresolved",
                f"no tenant named {v['tenant']!r} in the Allocation",
            )


def metrics_refs(a: Analysis) -> Iterator[Finding]:
    """``reference.unresolved`` for a LatencyMatrix pair's or recorded relay's site or a
    NodeAcceptance rule's ``match.site``; ``gpu.model-unknown`` for a rule's
    ``match.gpu_model`` not in the catalog (a rule that can match no node would pass every
    node unjudged). A recorded relay that is no longer a relay is not an error: hysteresis
    ignores it (nodes come and go; the next measurement records the routes again)."""
    matrix = a.fleet.latency
    if matrix is not None:
        assert matrix.source is not None  # a declared matrix has its document
        for key, pairs in (("pairs", matrix.rtt_ms), ("relays", matrix.relays)):
            for site in sorted({s for pair in pairs for s in pair}):
                if not a.known("Site", site):
                    yield Finding(
                        matrix.source, ("spec", key), "reference.unresolved", _missing("Site", site)
                    )
    acceptance = a.fleet.acceptance
    if acceptance is None:
        return
    assert acceptance.source is not None  # declared thresholds have their document
    catalog = gpu_catalog()
    for i, (match, _) in enumerate(acceptance.rules):
        where = ("spec", "rules", i, "match")
        if "site" in match and not a.known("Site", match["site"]):
            yield Finding(
                acceptance.source, (*where, "site"), "reference.unresolved", _missing("Site", match["site"])
            )
        if "gpu_model" in match and match["gpu_model"] not in catalog:
            yield Finding(
                acceptance.source,
                (*where, "gpu_model"),
                "gpu.model-unknown",
                f"{match['gpu_model']!r} is not in the GPU catalog (known: {', '.join(catalog)})",
            )


CHECKS = (node_refs, assignment_refs, include_refs, allocation_refs, storage_refs, metrics_refs)
