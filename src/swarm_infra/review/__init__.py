"""``swarm review``: what a pull request does to the fleet, for the people who review it.

``review(repo, base, head)`` compares ``head`` with its merge base with ``base`` (what a pull
request itself changes), loads every fleet the change touches at both commits from Git
(``git ls-tree``/``git cat-file`` into a temporary directory: the working tree is not
touched, and the commit's ``.gitattributes`` cannot hide a file), validates the head (an
invalid head is the whole review: the validator's diagnostics, exit 2; when the change
touches ``schemas/``, the head's own schemas judge it too), lists the rule files it
changes (schemas, the library, roles, CI...: every fleet is then reviewed),
resolves both desired states and builds both sets of cluster objects, and compares them:
nodes by layer (folded), the mesh (peers, syncconf vs restart, relays and hubs), cluster
objects (field by field), capacity per GPU flavor and cohort, and risk flags judged by
the base's ReviewPolicy. Every finding names the lines of the change behind it.
:mod:`.markdown` renders it as a pull-request comment, :meth:`Review.as_json` for bots.
Pure decision code over the library's own decisions: nothing is applied.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..cluster.core import SCRATCH_QUOTA
from ..cluster.meta import no_gc
from ..fleet.model import ReviewPolicy
from ..resolve.addons import LOCAL_PATH_NAMESPACE
from ..resolve.flavors import CPU_FLAVOR_PREFIX
from ..resolve.layers import LAYERS as NODE_LAYERS
from .claim import compare as compare_claim
from .diff import capacity_rows, mesh_impact, node_changes, object_changes, rollout_fields
from .flags import AppliedState, FlagRaiser
from .git import (
    GitError,
    MergeConflict,
    TreeFile,
    changed_files,
    fleet_dirs,
    fleet_names,
    is_ancestor,
    is_code,
    list_refs,
    merge_base,
    merge_commit,
    resolve_ref,
    rule_files,
    tree_files,
    tree_of,
)
from .load import (
    HEAD_SCHEMA_RULE,
    ParseCache,
    Snapshot,
    check_snapshot,
    head_schema_diagnostics,
    prepare,
    read_snapshot,
)
from .locate import ChangeIndex, pick
from .model import LAYER_TITLES, LAYERS, Flag, FleetReview, Location, Problem, Review
from .stacks import objects_summary, stack_changes, stack_flags

__all__ = ["GitError", "MergeConflict", "Review", "review", "summarize"]

EXIT_OK, EXIT_BLOCK, EXIT_INVALID = 0, 1, 2
# Where a node's change of each layer may come from, besides the node's own document.
_LAYER_KINDS = {"node": ("Site",), **{x.state[-1]: x.sources for x in NODE_LAYERS}}
# Objects of one queue or tenant of the Allocation: their lines are that entry's.
_TENANT_OBJECTS = ("ClusterQueue", "LocalQueue", "Namespace", "ResourceQuota", "LimitRange", "RayCluster")
# Where a cluster object's change may come from, by kind.
_OBJECT_KINDS = {
    "PriorityClass": ("Priority",),
    "WorkloadPriorityClass": ("Priority",),
    "ResourceFlavor": ("Node", "Cluster"),
    # GPU quotas in device units (GpuProfile sharing and MIG); CPU and memory quotas are a
    # share of the flavor's nodes (Node).
    "ClusterQueue": ("Allocation", "Node", "GpuProfile"),
    "Node": ("Node", "Site", "GpuProfile", "Cluster"),
    "StorageClass": ("Storage", "Node"),  # the scratch class's topology: the nodes with scratch
    "PersistentVolumeClaim": ("Storage",),
    "ConfigMap": ("Mesh", "Node", "GpuProfile", "Cluster", "Storage"),
    "Deployment": ("Storage",),  # the local-path provisioner, with its account and RBAC
    "ServiceAccount": ("Storage",),
    "Role": ("Storage",),
    "RoleBinding": ("Storage",),
    "ClusterRole": ("Storage",),
    "ClusterRoleBinding": ("Storage",),
    "ValidatingAdmissionPolicy": ("Allocation", "Priority"),
    "ValidatingAdmissionPolicyBinding": ("Allocation", "Priority"),
}


# Objects whose kind alone does not say where they come from, by (kind, name): the scratch
# quota in each tenant namespace (Storage's scratch.tenant_quota_gib), the local-path
# provisioner's namespace (Storage), and by name prefix the site CPU flavors (the
# Allocation's Ray heads on the site's nodes without GPUs).
_NAMED_OBJECT_KINDS = {
    ("ResourceQuota", SCRATCH_QUOTA): ("Storage",),
    ("Namespace", LOCAL_PATH_NAMESPACE): ("Storage",),
}
_PREFIXED_OBJECT_KINDS = {("ResourceFlavor", CPU_FLAVOR_PREFIX): ("Allocation", "Node")}


def object_kinds(kind: str, name: str) -> tuple[tuple[str, ...], bool]:
    """The document kinds a cluster object's change of ``kind`` named ``name`` may come
    from, and whether its lines are those of one Allocation entry (queue or tenant) first."""
    named = _NAMED_OBJECT_KINDS.get((kind, name))
    if named is not None:
        return named, False
    for (k, prefix), kinds in _PREFIXED_OBJECT_KINDS.items():
        if kind == k and name.startswith(prefix):
            return kinds, False
    return _OBJECT_KINDS.get(kind, ("Allocation", "Cluster")), kind in _TENANT_OBJECTS


def changed_fleets(before: dict[str, TreeFile], after: dict[str, TreeFile]) -> list[str]:
    """Fleets (at either side) with a file that differs between the two trees."""
    changed = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
    out = []
    for name in sorted(set(fleet_names(before)) | set(fleet_names(after))):
        dirs = tuple(d + "/" for d in fleet_dirs(name))
        if any(p.startswith(dirs) for p in changed):
            out.append(name)
    return out


BASE_INVALID = "base-invalid"  # the flag of a base that does not validate: nothing could be judged


def _problems(snap: Snapshot, extra: Sequence[Any] = ()) -> list[Problem]:
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
        for d in [*shown, *extra]
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
        kinds, tenant_scoped = object_kinds(o.kind, o.name)
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
        if alloc and tenant_scoped:
            i = index.index_of("Allocation", alloc, ("spec", lst), item)
            if i is not None:
                scoped = index.where("Allocation", alloc, ("spec", lst, i))
        o.where = pick(named, scoped, (loc for k in kinds for loc in where(k)), fallback=every)


def review_fleet(
    repo: Path,
    fleet: str,
    base: str,
    head: str,
    files: tuple[dict[str, TreeFile], dict[str, TreeFile]],
    tmp: Path,
    cache: ParseCache,
    head_schemas: bool = False,
    base_fleet: str | None = None,
    identities: dict[str, set[tuple[str, str]]] | None = None,
    applied: AppliedState | None = None,
    notes: list[str] | None = None,
    claim: Mapping[str, Any] | None = None,
    tree: str = "",
) -> FleetReview:
    """The review of ``fleet`` between commits ``base`` and ``head`` (see the module doc).
    ``head_schemas``: also check the head's documents against the head's own ``schemas/``
    (when the change touches them); their errors are head problems (exit 2).
    ``base_fleet``: the fleet's name at the base when the change renames it (default
    ``fleet``). ``identities``, when given, gets each side's node identities
    (:func:`node_identities`) under ``"base"`` and ``"head"``. ``applied``: what the fleet's
    apply record says of the base (a canary merged is not a canary converged); ``notes``
    gets what the reader must know that is no flag."""
    old = base_fleet or fleet
    # Both trees are written first, so that a large fleet's files of both refs are parsed in
    # worker processes while this one validates and resolves the head.
    prepared = [
        prepare(repo, name, c, f, tmp / side)
        for name, c, f, side in ((fleet, head, files[1], "head"), (old, base, files[0], "base"))
    ]
    cache.prefetch(
        [(p.root, f, p.paths) for p, f in zip(prepared, (files[1], files[0]), strict=True) if p is not None]
    )
    head_snap = read_snapshot(repo, head, fleet, files[1], tmp / "head", cache, prepared[0])
    check_snapshot(head_snap, cache, files[1])
    base_exists = any(p.startswith(fleet_dirs(old)[0] + "/") for p in files[0])
    fr = FleetReview(fleet, base, head, base_exists, head_snap.exists)
    extra = head_schema_diagnostics(repo, head, head_snap.parsed) if head_schemas and head_snap.exists else []
    fr.problems = _problems(head_snap, extra)
    if not head_snap.valid or extra:
        return fr
    base_snap = read_snapshot(repo, base, old, files[0], tmp / "base", cache, prepared[1])
    # The lines of the change are located in worker processes while the base is checked
    # and the two states compared here.
    index = ChangeIndex(base_snap, head_snap, cache.submit)
    check_snapshot(base_snap, cache, files[0], best_effort=True)
    flags: list[Flag] = []
    if not base_snap.valid:
        flags.append(_base_invalid(fr, base_snap))
        if base_snap.state is None:
            fr.flags = flags
            return fr
    bs, hs = base_snap.state, head_snap.state
    assert bs is not None and hs is not None
    if identities is not None:
        identities["base"], identities["head"] = node_identities(bs), node_identities(hs)
    fr.nodes, touched = node_changes(bs["nodes"], hs["nodes"])
    fr.nodes_changed = len(touched)
    fr.layers = [layer for layer in LAYERS if any(layer in t for t in touched.values())]
    fr.mesh = mesh_impact(bs["nodes"], hs["nodes"], bs["cluster"], hs["cluster"])
    fr.objects = object_changes(base_snap.objects or {}, head_snap.objects or {})
    fr.claim = compare_claim(claim, fleet, tree, hs["nodes"], head_snap.objects or {})
    fr.objects_error = head_snap.objects_error or base_snap.objects_error
    fr.capacity = capacity_rows(bs["cluster"], hs["cluster"])
    fr.rollout = rollout_fields(bs.get("rollout"), hs.get("rollout"))
    _attribute(fr, base_snap, head_snap, index)
    fr.stacks = stack_changes(repo, fr, base_snap, head_snap)  # every Pulumi stack of the fleet
    analysis = base_snap.analysis or head_snap.analysis
    assert analysis is not None  # one side at least loaded a fleet to get here
    policy: ReviewPolicy = analysis.fleet.review
    fr.policy_changed = bool(index.where("ReviewPolicy"))
    raiser = FlagRaiser(bs, hs, policy, index, fr.nodes, applied)
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
    raiser.mesh_keys()
    raiser.ray_supply()
    raiser.upgrades()
    raiser.pull_signers()
    raiser.pull_source()
    raiser.mesh_controller()
    raiser.drain()
    raiser.ray_quota()
    stack_flags(raiser, fr, old)
    fr.flags = flags + raiser.flags
    if notes is not None:
        notes.extend(f"{fleet}: {n}" for n in raiser.notes)
    return fr


APPLIED_REFS = "refs/swarm/applied/"  # + fleet: the commit it was last applied at (apply.yml)


def applied_records(repo: Path) -> dict[str, str]:
    """The apply records in ``repo``: fleet -> the commit of ``refs/swarm/applied/<fleet>``
    (apply.yml moves it after the fleet's converge and ``pulumi up`` succeed; review.yml
    copies them into the clone it reviews in). Empty when none was fetched."""
    return {ref[len(APPLIED_REFS) :]: sha for ref, sha in list_refs(repo, APPLIED_REFS).items()}


def _applied(repo: Path, records: Mapping[str, str], fleet: str, base: str) -> AppliedState:
    """What ``records`` say of ``fleet`` at ``base`` (:class:`~.flags.AppliedState`): no
    record read at all is unknown; a fleet without one was never applied."""
    if not records:
        return AppliedState(None, None)
    record = records.get(fleet)
    if record is None:
        return AppliedState(None, False)
    return AppliedState(record, is_ancestor(repo, base, record))


def node_identities(state: Mapping[str, Any]) -> set[tuple[str, str]]:
    """What makes a node the same machine whatever its fleet calls it: its address and its
    SSH target (``host:port``), one pair per node of ``state`` (a desired state)."""
    out = set()
    for n in state["nodes"].values():
        ssh = n.get("ssh") or {}
        out.add((str(n.get("address")), f"{ssh.get('host')}:{ssh.get('port')}"))
    return out


FLEET_REMOVED, FLEET_RENAMED = "fleet-removed", "fleet-renamed"


def _fleet_removed(fr: FleetReview, nodes: int) -> Flag:
    """The flag of a fleet the change removes: always blocking. An apply converges only
    the fleets left at the head (``scripts/changed-fleets.sh``), so nothing of the fleet is
    undone: its nodes keep what they run, its Pulumi stacks keep its cluster objects."""
    return Flag(
        FLEET_REMOVED,
        "block",
        f"the change removes the whole fleet {fr.fleet} ({_plural(nodes, 'node')} at the base): no apply "
        "undoes what it runs (its nodes keep their configuration, its Pulumi stacks their cluster "
        "objects until `pulumi destroy`); drain and destroy it on purpose, then remove it",
        [],
    )


def _fleet_renamed(fr: FleetReview, old: str, shared: int) -> Flag:
    """The flag of a fleet renamed (the head's new fleet holds nodes of a fleet the change
    removes, matched by address and SSH target): always blocking. The apply would make a
    second Pulumi stack (named after the new fleet) for the same cluster objects and never
    destroy the first, and the nodes change hands between two desired states."""
    return Flag(
        FLEET_RENAMED,
        "block",
        f"the fleet {old} is renamed {fr.fleet} ({_plural(shared, 'node')} of {old} are in {fr.fleet}, "
        "matched by address and SSH target): the plan diff below compares the two. No apply undoes "
        f"{old}: its Pulumi stacks (swarm:fleet: {old}) keep its cluster objects, and a stack for "
        f"{fr.fleet} beside them would create the same objects again; rename each stack (`pulumi stack "
        "rename`, and its Pulumi.<stack>.yaml's swarm:fleet) in the same change",
        [],
    )


def _match_renames(
    reviews: list[FleetReview], identities: Mapping[str, Mapping[str, set[tuple[str, str]]]]
) -> list[tuple[str, str, int]]:
    """(old, new, nodes shared) for each fleet the change adds whose nodes are nodes of a
    fleet it removes (the most shared first; each fleet in one pair at most)."""
    removed = [f.fleet for f in reviews if f.base_exists and not f.head_exists and not f.invalid]
    added = [f.fleet for f in reviews if f.head_exists and not f.base_exists and not f.invalid]
    pairs = sorted(
        (
            (len(identities[o]["base"] & identities[n]["head"]), o, n)
            for o in removed
            for n in added
            if o in identities and n in identities
        ),
        reverse=True,
    )
    out, used = [], set()
    for shared, o, n in pairs:
        if shared and o not in used and n not in used:
            out.append((o, n, shared))
            used |= {o, n}
    return out


def _base_invalid(fr: FleetReview, snap: Snapshot) -> Flag:
    """Record the base's errors in ``fr`` and return the ``base-invalid`` flag. It always
    blocks: what the change does cannot be known for certain, and the base's ReviewPolicy,
    which could say otherwise, may be among what does not validate."""
    errors = snap.report.errors
    fr.base_invalid = len(errors)
    fr.base_problems = [
        Problem(
            Location(snap.rel(d.file), d.line, "base", snap.commit),
            d.col,
            d.severity,
            d.rule,
            d.path,
            d.message,
        )
        for d in snap.report.shown()[0]
        if d.severity == "error"
    ]
    fr.base_resolved = snap.state is not None
    if fr.base_resolved:
        what = (
            "the plan diff below compares the head with what of the base resolves (the documents "
            "with errors left out), so it may show more or less than this change, and the other "
            "risk flags are judged on it"
        )
    else:
        why = (snap.resolve_error or "no fleet")[:200]
        what = (
            f"it does not resolve ({why}), so there is no plan diff and no other risk flag could be checked"
        )
    return Flag(
        BASE_INVALID,
        "block",
        f"the base does not validate ({_plural(fr.base_invalid, 'error')}, listed below): {what}; "
        "fix the base first",
        pick(fallback=[p.location for p in fr.base_problems]),
    )


def _verdicts(r: Review, fr: FleetReview) -> None:
    """Add a note when the reviewer's verdict on the head and the head's own schemas differ."""
    own = [p for p in fr.problems if p.rule == HEAD_SCHEMA_RULE]
    if not own:
        return
    reviewer = [p for p in fr.problems if p.rule != HEAD_SCHEMA_RULE and p.severity == "error"]
    verdict = f"invalid ({_plural(len(reviewer), 'error')})" if reviewer else "valid"
    r.notes.append(
        f"{fr.fleet}: the verdicts differ: under the reviewer's schemas the head is {verdict}; "
        f"under the head's own schemas/ it is invalid ({_plural(len(own), 'error')}, rule {HEAD_SCHEMA_RULE})"
    )


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def claim_summary(fr: FleetReview) -> str:
    """What the summary says of the head's code when the change touches code: its effect
    as the head's claim has it, or that it is unknown (plain text)."""
    c = fr.claim
    if c is None:
        return "the effect of the head's code is unknown until head-plan has run (its claim is shown then)"
    if c.stale:
        return "the head's claim is of another merge result (stale): the effect of its code is unknown"
    if c.error:
        return f"the head's claim: {c.error}"
    nodes = _plural(c.nodes_changed, "more node")
    objects = _plural(len(c.objects), "more cluster object")
    return f"the head's code claims {nodes} and {objects} change (its claim, not judged)"


def fleet_summary(fr: FleetReview, head: str = "head", code: bool = False) -> str:
    """One fleet's part of the summary line (plain text: the renderer escapes it); ``head``
    names what was judged (``merge result`` with ``swarm review --merge``); ``code``: the
    change touches code, whose effect the counts (the base's code's) do not show."""
    if fr.invalid:
        errors = sum(p.severity == "error" for p in fr.problems)
        return f"{fr.fleet}: the {head} is invalid ({_plural(errors, 'error')}); nothing else was reviewed"
    if not fr.head_exists:
        return f"{fr.fleet}: the fleet is removed; 1 blocking: {FLEET_REMOVED}"
    if fr.base_invalid and not fr.base_resolved:
        return (
            f"{fr.fleet}: the base is invalid ({_plural(fr.base_invalid, 'error')}) and does not resolve, "
            f"so there is no plan diff; 1 blocking: {BASE_INVALID}"
        )
    layers = ", ".join(LAYER_TITLES[x] for x in fr.layers)
    parts = [
        f"{_plural(fr.nodes_changed, 'node')} change" + (f" ({layers})" if layers else ""),
        f"{_plural(fr.mesh.peerings_changed, 'mesh peer')} change",
        objects_summary(fr),  # the fleet's and its regional stacks' objects
    ]
    if fr.base_invalid:
        parts.insert(
            0, f"the base is invalid ({_plural(fr.base_invalid, 'error')}): compared with what of it resolves"
        )
    if code:
        parts[0] = f"by the base's code {parts[0]}"
        parts.append(claim_summary(fr))
    named = f" (renamed from {fr.base_fleet})" if fr.base_fleet else "" if fr.base_exists else " (new fleet)"
    text = f"{fr.fleet}{named}: {', '.join(parts)}"
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
    """Set ``r.summary`` (status mark, then each fleet, then the rule files changed, then
    the uncommitted files not reviewed) and ``r.exit_code``. A change of the rules is never
    ✅: it needs its code owners; nor is a review that left uncommitted edits out."""
    if any(f.invalid for f in r.fleets):
        mark, r.exit_code = "❌", EXIT_INVALID
    elif any(f.blocking for f in r.fleets):
        mark, r.exit_code = "❌", EXIT_BLOCK
    elif any(f.warnings or f.base_invalid for f in r.fleets) or r.rules_changed or r.uncommitted:
        mark, r.exit_code = "⚠️", EXIT_OK
    else:
        mark, r.exit_code = "✅", EXIT_OK
    head = "merge result" if r.pr_head else "head"
    code = bool(r.code_changed)
    body = "; ".join(fleet_summary(f, head, code) for f in r.fleets) if r.fleets else "no fleet changes"
    if r.rules_changed:
        body += f"; rules changed: {_plural(len(r.rules_changed), 'file')} (a code owner must approve)"
    if r.uncommitted:
        body += (
            f"; NOT reviewed: uncommitted edits to {_plural(len(r.uncommitted), 'fleet or rule file')} "
            "(commit them, or review with --worktree)"
        )
    r.summary = f"{mark} {body}"


def review(
    repo: Path,
    base: str,
    head: str = "HEAD",
    fleets: Sequence[str] | None = None,
    repo_url: str | None = None,
    exact_base: bool = False,
    merge: bool = False,
    claim: Mapping[str, Any] | None = None,
) -> Review:
    """Review the change from ``base`` to ``head`` (refs of the Git repository ``repo``, its
    top level) for ``fleets`` (names in ``inventory/``; default: every fleet whose files
    differ, counting ``policies/shared`` for all, or every fleet at either side when a
    rule file changes).

    The review's base is the merge base of ``base`` and ``head`` (``git merge-base``: what
    a pull request changes, however far its base branch moved since), or the commit
    ``base`` names itself with ``exact_base``; ``Review.base_ref``/``base_tip`` keep what
    was asked. ``Review.rules_changed`` lists the rule files the change touches
    (:data:`~swarm_infra.review.git.RULE_PATTERNS`); when ``schemas/`` is among them the
    head's documents are also checked against the head's own schemas. ``repo_url``
    (``https://github.com/OWNER/REPO``) makes locations links.

    With ``merge`` the review judges what merging will make, as Atlantis plans with
    ``--checkout-strategy=merge``: the base is ``base``'s tip itself and the head is the
    merge result of ``head`` into it (:func:`~swarm_infra.review.git.merge_commit`), so two
    pull requests that are each valid alone but clash once both are merged are judged on
    the clash; ``Review.pr_head`` keeps the pull request's own head, and locations in files
    the merge left as the head has them point at that commit (the merge commit exists only
    here). ``claim``: the head's claim (:mod:`~swarm_infra.review.claim`: what the head's
    own code resolves the merge result to), shown per fleet beside the verdict, never
    judged. Raises :class:`MergeConflict` when the head does not merge cleanly (there is no
    merge result: never fall back to the head alone), :class:`GitError` for a ref that
    names no commit, refs with no common history, or a directory that is not a repository;
    fleet content never raises (it is reported)."""
    tip, h = resolve_ref(repo, base), resolve_ref(repo, head)
    pr_head = ""
    if merge:
        pr_head, h = h, merge_commit(repo, tip, h)
    b = tip if exact_base or merge else merge_base(repo, tip, h)
    files = (tree_files(repo, b), tree_files(repo, h))
    rules = rule_files(changed_files(repo, b, h))
    names: Iterable[str]
    if fleets:
        names = fleets
    elif rules:
        names = sorted(set(fleet_names(files[0])) | set(fleet_names(files[1])))
    else:
        names = changed_fleets(files[0], files[1])
    head_schemas = any(p.startswith("schemas/") for p in rules)
    cache = ParseCache()
    out = Review(
        b,
        h,
        [],
        repo_url=repo_url,
        base_ref=base,
        base_tip=tip,
        merge_base=not (exact_base or merge),
        rules_changed=rules,
        pr_head=pr_head,
        code_changed=[p for p in rules if is_code(p)],
        claim_read=claim is not None,
    )
    if pr_head:
        out.notes.append(
            f"the head is the merge result of the pull request's head {pr_head[:12]} into the base's tip "
            f"{tip[:12]}: what the base will hold once it merges, every change merged to it since the "
            "pull request branched included (reviewed again when the base moves)"
        )
    elif not exact_base and b != tip:
        out.notes.append(
            f"{base} has moved on since the head branched: the review compares the head with their "
            f"merge base {b[:12]}, not with {tip[:12]}, so only the head's own change is shown"
        )
    # Two fleets' documents, models and desired states are built and all stay alive until
    # the end: the cyclic GC would rescan them again and again (at 10,000 nodes it doubled
    # the time) and find nothing to free.
    with tempfile.TemporaryDirectory(prefix="swarm-review-") as tmp, no_gc():
        records = applied_records(repo)
        tree = tree_of(repo, h) if claim is not None else ""
        try:
            identities: dict[str, dict[str, set[tuple[str, str]]]] = {}
            for name in names:
                ids: dict[str, set[tuple[str, str]]] = {}
                state = _applied(repo, records, name, b)
                fr = review_fleet(
                    repo,
                    name,
                    b,
                    h,
                    files,
                    Path(tmp) / name,
                    cache,
                    head_schemas,
                    identities=ids,
                    applied=state,
                    notes=out.notes,
                    claim=claim,
                    tree=tree,
                )
                identities[name] = ids
                out.fleets.append(fr)
            # A fleet renamed is one review of the old fleet's base against the new one's head
            # (its nodes matched by address and SSH target), not a removal and a new fleet.
            for old, new, shared in _match_renames(out.fleets, identities):
                fr = review_fleet(
                    repo,
                    new,
                    b,
                    h,
                    files,
                    Path(tmp) / f"{old}-{new}",
                    cache,
                    head_schemas,
                    base_fleet=old,
                    applied=_applied(repo, records, old, b),
                    claim=claim,
                    tree=tree,
                )
                fr.flags.insert(0, _fleet_renamed(fr, old, shared))
                fr.base_exists, fr.base_fleet = True, old
                out.fleets = [f for f in out.fleets if f.fleet not in (old, new)] + [fr]
            for fr in out.fleets:
                if fr.base_exists and not fr.head_exists:
                    # The one flag: every other rule would judge the fleet's settings going
                    # to nothing (a drain grace of none, no context), which the removal says.
                    fr.flags = [_fleet_removed(fr, len(identities.get(fr.fleet, {}).get("base", ())))]
                _verdicts(out, fr)
        finally:
            cache.close()
    if pr_head:
        _relink(out, files[1], tree_files(repo, pr_head))
    summarize(out)
    return out


def _relink(r: Review, merged: Mapping[str, TreeFile], own: Mapping[str, TreeFile]) -> None:
    """Point the head's locations at the pull request's own head where the merge result's
    file is the head's, byte for byte (the merge commit is made here and exists nowhere
    else, so a link to it would lead nowhere); in a file the merge took from both sides
    a line is the merge result's (``ref`` ``merge``: shown as text, never linked)."""
    same = {p for p, f in merged.items() if own.get(p) == f}

    def fix(loc: Location) -> Location:
        if loc.ref != "head" or loc.commit != r.head:
            return loc
        if loc.file in same:
            return dataclasses.replace(loc, commit=r.pr_head)
        return dataclasses.replace(loc, ref="merge")

    def walk(obj: object) -> object:
        if isinstance(obj, Location):
            return fix(obj)
        if isinstance(obj, list):
            obj[:] = [walk(x) for x in obj]
        elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            for f in dataclasses.fields(obj):
                value = getattr(obj, f.name)
                new = walk(value)
                if new is not value:
                    object.__setattr__(obj, f.name, new)
        return obj

    for fr in r.fleets:
        walk(fr)
