"""``swarm review``: what a pull request does to the fleet, for the people who review it.

``review(repo, base, head)`` loads every fleet the change touches at both commits from Git
(``git archive`` into a temporary directory: the working tree is not touched), validates
the head (an invalid head is the whole review: the validator's diagnostics, exit 2),
resolves both desired states and builds both sets of cluster objects, and compares them:
nodes by layer (folded), the mesh (peers, syncconf vs restart, relays and hubs), cluster
objects (field by field), capacity per GPU flavor and cohort, and risk flags judged by
the base's ReviewPolicy. Every finding names the lines of the change behind it.
:mod:`.markdown` renders it as a pull-request comment, :meth:`Review.as_json` for bots.
Pure decision code over the library's own decisions: nothing is applied.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..cluster.meta import no_gc
from ..fleet.model import ReviewPolicy
from .diff import capacity_rows, mesh_impact, node_changes, object_changes, rollout_fields
from .flags import FlagRaiser
from .git import GitError, TreeFile, fleet_dirs, fleet_names, resolve_ref, tree_files
from .load import ParseCache, Snapshot, load_snapshot
from .locate import ChangeIndex, pick
from .model import LAYER_TITLES, LAYERS, FleetReview, Location, Problem, Review

__all__ = ["GitError", "Review", "review"]

EXIT_OK, EXIT_BLOCK, EXIT_INVALID = 0, 1, 2
# Where a node's change of each layer may come from, besides the node's own document.
_LAYER_KINDS = {
    "node": ("Site",),
    "driver": ("GpuProfile", "Assignment"),
    "gpu": ("GpuProfile", "Assignment"),
    "host": ("HostProfile", "Assignment"),
    "storage": ("Storage",),
    "mesh": ("Mesh", "Site"),
    "ray": ("RayCluster",),
}
# Objects of one queue or tenant of the Allocation: their lines are that entry's.
_TENANT_OBJECTS = ("ClusterQueue", "LocalQueue", "Namespace", "ResourceQuota", "LimitRange", "RayCluster")
# Where a cluster object's change may come from, by kind.
_OBJECT_KINDS = {
    "PriorityClass": ("Priority",),
    "WorkloadPriorityClass": ("Priority",),
    "ResourceFlavor": ("Node", "Cluster"),
    "Node": ("Node", "Site", "GpuProfile", "Cluster"),
    "StorageClass": ("Storage",),
    "PersistentVolume": ("Storage", "Node"),
    "PersistentVolumeClaim": ("Storage",),
    "ConfigMap": ("Mesh", "Node", "GpuProfile", "Cluster"),
    "ValidatingAdmissionPolicy": ("Allocation", "Priority"),
    "ValidatingAdmissionPolicyBinding": ("Allocation", "Priority"),
}


def changed_fleets(before: dict[str, TreeFile], after: dict[str, TreeFile]) -> list[str]:
    """Fleets (at either side) with a file that differs between the two trees."""
    changed = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
    out = []
    for name in sorted(set(fleet_names(before)) | set(fleet_names(after))):
        dirs = tuple(d + "/" for d in fleet_dirs(name))
        if any(p.startswith(dirs) for p in changed):
            out.append(name)
    return out


def _problems(snap: Snapshot) -> list[Problem]:
    shown, _ = snap.report.shown()
    return [
        Problem(
            Location(snap.rel(d.file), d.line, "head", snap.commit),
            d.col,
            d.severity,
            d.rule,
            d.path,
            d.message,
        )
        for d in shown
    ]


def _attribute(fr: FleetReview, base: Snapshot, head: Snapshot, index: ChangeIndex) -> None:
    """Fill in ``where`` of node, peer and object changes."""
    bn = base.state["nodes"] if base.state else {}
    hn = head.state["nodes"] if head.state else {}
    cache: dict[tuple[str, ...], list[Location]] = {}
    every = index.all()  # once: it is every change's fallback

    def where(kind: str, name: str | None = None) -> list[Location]:
        # index.where scans every changed document: with a name, look the document up
        # (the same lines; scanning per node made a review quadratic in changed nodes).
        key = (kind, name or "")
        if key not in cache:
            if name is None:
                cache[key] = index.where(kind)
            else:
                cache[key] = [loc for _, loc in index.changed.get((kind, name), ())]
        return cache[key]

    for c in fr.nodes:
        own: list[Location] = []
        related: list[Location] = []
        for n in c.nodes:
            own += where("Node", n)
            for s in (hn.get(n), bn.get(n)):
                if not s:
                    continue
                gpu: Mapping[str, Any]
                host: Mapping[str, Any]
                gpu, host = s.get("gpu") or {}, s.get("host") or {}
                names = {
                    "GpuProfile": gpu.get("profile"),
                    "HostProfile": host.get("profile"),
                    "Assignment": gpu.get("assignment")
                    if c.layer in ("gpu", "driver")
                    else host.get("assignment"),
                    "Site": s["site"],
                }
                for kind in _LAYER_KINDS[c.layer]:
                    related += where(kind, names.get(kind))
            if len(own) + len(related) > 64:
                break
        c.where = pick(related + own, fallback=every)
    for p in fr.mesh.peers:
        p.where = pick(where("Node", p.peer), where("Mesh"), where("Node"), fallback=every)
    alloc = next((n for k, n in head.documents if k == "Allocation"), None)
    for o in fr.objects:
        kinds = _OBJECT_KINDS.get(o.kind, ("Allocation", "Cluster"))
        named = (
            where("Node", o.name)
            if o.kind == "Node"
            else where("Priority", o.name)
            if "Priority" in o.kind
            else []
        )
        scoped: list[Location] = []
        item = o.name if o.kind == "ClusterQueue" else o.namespace or o.name
        lst = "queues" if o.kind == "ClusterQueue" else "tenants"
        if alloc and o.kind in _TENANT_OBJECTS:
            i = index.index_of("Allocation", alloc, ("spec", lst), item)
            if i is not None:
                scoped = index.where("Allocation", alloc, ("spec", lst, i))
        o.where = pick(named, scoped, (loc for k in kinds for loc in where(k)), fallback=every)


def review_fleet(
    repo: Path, fleet: str, base: str, head: str, files: tuple[dict, dict], tmp: Path, cache: ParseCache
) -> FleetReview:
    """The review of ``fleet`` between commits ``base`` and ``head`` (see the module doc)."""
    head_snap = load_snapshot(repo, head, fleet, files[1], tmp / "head", cache)
    fr = FleetReview(fleet, base, head, False, head_snap.exists)
    fr.problems = _problems(head_snap)
    if not head_snap.valid:
        return fr
    base_snap = load_snapshot(repo, base, fleet, files[0], tmp / "base", cache)
    fr.base_exists = base_snap.exists
    if not base_snap.valid:
        fr.base_invalid = len(base_snap.report.errors)
        return fr
    bs, hs = base_snap.state, head_snap.state
    assert bs is not None and hs is not None
    index = ChangeIndex(base_snap, head_snap)
    fr.nodes, touched = node_changes(bs["nodes"], hs["nodes"])
    fr.nodes_changed = len(touched)
    fr.layers = [layer for layer in LAYERS if any(layer in t for t in touched.values())]
    fr.mesh = mesh_impact(bs["nodes"], hs["nodes"], bs["cluster"], hs["cluster"])
    fr.objects = object_changes(base_snap.objects or {}, head_snap.objects or {})
    fr.objects_error = head_snap.objects_error or base_snap.objects_error
    fr.capacity = capacity_rows(bs["cluster"], hs["cluster"])
    fr.rollout = rollout_fields(bs.get("rollout"), hs.get("rollout"))
    _attribute(fr, base_snap, head_snap, index)
    analysis = base_snap.analysis or head_snap.analysis
    assert analysis is not None  # one side at least loaded a fleet to get here
    policy: ReviewPolicy = analysis.fleet.review
    fr.policy_changed = bool(index.where("ReviewPolicy"))
    raiser = FlagRaiser(bs, hs, policy, index, fr.nodes)
    raiser.rollout(touched)
    raiser.rollout_loosened(fr.rollout)
    raiser.driver()
    raiser.preemption()
    raiser.quota(base_snap.exists)
    raiser.removed_nodes()
    raiser.mesh(fr.mesh)
    raiser.ssh_targets()
    raiser.relays()
    raiser.ssh_host_keys()
    raiser.ray_supply()
    fr.flags = raiser.flags
    return fr


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def fleet_summary(fr: FleetReview) -> str:
    """One fleet's part of the summary line (plain text: the renderer escapes it)."""
    if fr.invalid:
        errors = sum(p.severity == "error" for p in fr.problems)
        return f"{fr.fleet}: the head is invalid ({_plural(errors, 'error')}); nothing else was reviewed"
    if not fr.head_exists:
        return f"{fr.fleet}: the fleet is removed"
    if fr.base_invalid:
        return (
            f"{fr.fleet}: the base is invalid ({_plural(fr.base_invalid, 'error')}), so there is no plan diff"
        )
    layers = ", ".join(LAYER_TITLES[x] for x in fr.layers)
    parts = [
        f"{_plural(fr.nodes_changed, 'node')} change" + (f" ({layers})" if layers else ""),
        f"{_plural(fr.mesh.peerings_changed, 'mesh peer')} change",
        f"{_plural(len(fr.objects), 'cluster object')} change",
    ]
    text = f"{fr.fleet}{' (new fleet)' if not fr.base_exists else ''}: {', '.join(parts)}"
    if not fr.flags:
        return text + "; no risk flags"
    flagged = []
    for action, label in (("block", "blocking"), ("warn", "warning")):
        rules = sorted({f.rule for f in fr.flags if f.action == action})
        if rules:
            n = sum(f.action == action for f in fr.flags)
            flagged.append(f"{n} {label}: {', '.join(rules)}")
    return f"{text}; {'; '.join(flagged)}"


def summarize(r: Review) -> None:
    """Set ``r.summary`` (status mark, then each fleet) and ``r.exit_code``."""
    if any(f.invalid for f in r.fleets):
        mark, r.exit_code = "❌", EXIT_INVALID
    elif any(f.blocking for f in r.fleets):
        mark, r.exit_code = "❌", EXIT_BLOCK
    elif any(f.warnings or f.base_invalid for f in r.fleets):
        mark, r.exit_code = "⚠️", EXIT_OK
    else:
        mark, r.exit_code = "✅", EXIT_OK
    body = "; ".join(fleet_summary(f) for f in r.fleets) if r.fleets else "no fleet changes"
    r.summary = f"{mark} {body}"


def review(
    repo: Path,
    base: str,
    head: str = "HEAD",
    fleets: Sequence[str] | None = None,
    repo_url: str | None = None,
) -> Review:
    """Review the change from ``base`` to ``head`` (refs of the Git repository ``repo``) for
    ``fleets`` (names in ``inventory/``; default: every fleet whose files differ, counting
    ``policies/shared`` for all). ``repo_url`` (``https://github.com/OWNER/REPO``) makes
    locations links. Raises :class:`GitError` for a ref that names no commit or a
    directory that is not a repository; fleet content never raises (it is reported)."""
    b, h = resolve_ref(repo, base), resolve_ref(repo, head)
    files = (tree_files(repo, b), tree_files(repo, h))
    names: Iterable[str] = fleets if fleets else changed_fleets(files[0], files[1])
    cache = ParseCache()
    out = Review(b, h, [], repo_url=repo_url)
    # Two fleets' documents, models and desired states are built and all stay alive until
    # the end: the cyclic GC would rescan them again and again (at 10,000 nodes it doubled
    # the time) and find nothing to free.
    with tempfile.TemporaryDirectory(prefix="swarm-review-") as tmp, no_gc():
        for name in names:
            out.fleets.append(review_fleet(repo, name, b, h, files, Path(tmp) / name, cache))
    summarize(out)
    return out
