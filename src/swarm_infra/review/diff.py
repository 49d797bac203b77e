"""The plan diff: desired state and cluster objects of two snapshots, compared.

Node changes are leaf-level (``gpu.devices[3].settings.power_limit_w``), shown without the
GPU index, and folded: the same change of the same field on many nodes is one
:class:`~.model.NodeChange` listing them. Peer lists are the mesh section's
(:func:`mesh_impact`); everything else of a node is in its layer. Comparisons are ``==`` on
the resolver's plain data, so nodes that do not change cost one comparison per layer.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping
from typing import Any, Literal

import yaml

from ..cluster.meta import K8sObject
from ..resolve.layers import LAYERS as NODE_LAYERS
from ..resolve.mesh import mesh_apply
from ..resolve.types import ClusterState, NodeState
from .load import ObjectKey
from .model import (
    ABSENT,
    LAYERS,
    CapacityRow,
    FieldChange,
    MeshImpact,
    NodeChange,
    ObjectChange,
    PeerChange,
)

Path = tuple[str, ...]
# Each layer's NodeState path, longest first, so the driver (within NodeState.gpu) is its
# own layer (the rest of a node is its "node" layer: site, roles, labels, SSH, hardware,
# layout).
_STATES = sorted((x.state for x in NODE_LAYERS), key=len, reverse=True)
MAX_LIST_ITEMS = 6  # a changed list of scalars this long or longer is shown as what it gains and loses


# Keys that name a list's items, tried in this order: a changed item is shown by its key
# (``flavors[l40s].resources[nvidia.com/gpu].nominalQuota``), not as the whole list, and
# items are matched by it, not by position (a node renamed in local-path's ``nodePathMap``
# is one entry removed and one added, not every later entry changed). Peers, flavors,
# resources, containers, RayCluster groups (``groupName``) and local-path's
# ``nodePathMap`` entries (``node``) have one. dyff, the YAML differ, matches such
# "named-entry lists" the same way (by ``name``, ``key`` or ``id``; homeport/dyff
# v0.5-beta.7) and reports a move within them as an order change.
ITEM_KEYS = ("name", "groupName", "flavor", "resource", "peer", "node", "key", "index")
# A list whose items are the same and only their order changes is one change, before and
# after ``{"order": [...]}`` (the items' keys, or the scalars, in each side's order): the
# object applied is not the same (a ConfigMap's text, a container's args, whose order is
# meaningful), so the change is listed, once, and honestly called a reordering.
ORDER = "order"


def _item_key(items: list[Any]) -> str | None:
    """The first of :data:`ITEM_KEYS` that every item of ``items`` (mappings) has, with a
    distinct scalar value per item; None when none does."""
    if not items or not all(isinstance(x, dict) for x in items):
        return None
    for key in ITEM_KEYS:
        values = [x.get(key) for x in items]
        if all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in values) and len(
            set(values)
        ) == len(values):
            return key
    return None


def leaf_diff(
    before: Any, after: Any, path: Path = (), reorders: bool = False
) -> Iterator[tuple[Path, Any, Any]]:
    """``(path, before, after)`` for every leaf that differs, in key order.

    Mappings are compared key by key. Lists of mappings item by item: by the first of
    :data:`ITEM_KEYS` that names every item on both sides (``peers[fra1-gpu-01]``,
    ``flavors[l40s]``), else by position (``resourceGroups[0]``), an item only one side
    has being :data:`~.model.ABSENT` on the other. Lists of scalars (or of lists, such as
    topology edges) are one leaf, whole. A key or item only one side has is
    :data:`~.model.ABSENT` on the other. With ``reorders``, items by key that both sides
    have in another order are one more change at the list, ``{"order": [keys]}`` before
    and after (see :data:`ORDER`); without, their order is not compared (a node's peers).
    Linear in the size of both values."""
    if before == after:
        return
    if before is ABSENT or after is ABSENT:
        yield path, before, after
        return
    if isinstance(before, dict) and isinstance(after, dict):
        keys = before.keys() | after.keys()
        for k in sorted(keys) if all(isinstance(k, str) for k in keys) else sorted(keys, key=str):
            b, a = before.get(k, ABSENT), after.get(k, ABSENT)
            if b is not a and b != a:  # most keys of a changed mapping are equal: no call for them
                yield from leaf_diff(b, a, (*path, str(k)), reorders)
        return
    if isinstance(before, list) and isinstance(after, list) and (before or after):
        dicts = all(isinstance(x, dict) for x in (*before, *after))
        if dicts:
            kb, ka = _item_key(before), _item_key(after)
            key = kb or ka if (kb == ka or not before or not after) else None
            if key is not None:
                b = {str(x[key]): x for x in before}
                a = {str(x[key]): x for x in after}
                order = list(b) + [k for k in a if k not in b]
                for k in order:
                    bi, ai = b.get(k, ABSENT), a.get(k, ABSENT)
                    if bi is not ai and bi != ai:
                        yield from leaf_diff(bi, ai, (*path, f"[{k}]"), reorders)
                if reorders:
                    kept_b = [k for k in b if k in a]
                    kept_a = [k for k in a if k in b]
                    if kept_b != kept_a:
                        yield path, {ORDER: kept_b}, {ORDER: kept_a}
                return
            for i in range(max(len(before), len(after))):
                yield from leaf_diff(
                    before[i] if i < len(before) else ABSENT,
                    after[i] if i < len(after) else ABSENT,
                    (*path, f"[{i}]"),
                    reorders,
                )
            return
    yield path, before, after


def dotted(path: Path) -> str:
    """``("a", "[x]", "b")`` -> ``a[x].b``."""
    out = ""
    for part in path:
        out += part if part.startswith("[") or not out else "." + part
    return out


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _state(path: Path) -> tuple[str, ...] | None:
    """The NodeState path of the layer ``path`` is in (None: the node's own)."""
    return next((s for s in _STATES if path[: len(s)] == s), None)


def _layer(path: Path) -> str:
    state = _state(path)
    return state[-1] if state else "node"


def _shown(path: Path) -> Path:
    """The path as a change is folded and shown: GPU devices without their index
    (``settings.power_limit_w``), the layer's own key left out."""
    if path[0] == "gpu" and len(path) > 2 and path[1] == "devices":
        rest = path[3:] if len(path) > 3 else ("devices",)
        return rest[1:] if rest[0] == "settings" and len(rest) > 1 else rest
    state = _state(path)
    if state and len(path) > 1:
        return path[len(state) :] if len(path) > len(state) else path[len(state) - 1 :]
    return path


def _list_delta(before: Any, after: Any) -> tuple[Any, Any]:
    """Long lists of scalars, and lists of lists (topology edges), as ``({"removed": [...]},
    {"added": [...]})``: what is gone, what is new, in list order, counted as multisets (an
    item twice that is once is one removed); the same items in another order as
    ``({"order": before}, {"order": after})`` (:data:`ORDER`); others as they are."""
    if (
        isinstance(before, list)
        and isinstance(after, list)
        and (
            max(len(before), len(after)) >= MAX_LIST_ITEMS
            or any(isinstance(x, list) for x in (*before, *after))
        )
        and all(not isinstance(x, dict) for x in (*before, *after))
    ):
        left = Counter(_key(x) for x in after)  # what of the head's items is not yet matched
        gone = []
        for x in before:
            k = _key(x)
            if left[k]:
                left[k] -= 1
            else:
                gone.append(x)
        new = []
        for x in reversed(after):  # the head's surplus copies of an item: its last ones
            k = _key(x)
            if left[k]:
                left[k] -= 1
                new.append(x)
        new.reverse()
        if not gone and not new:
            return {ORDER: before}, {ORDER: after}
        return {"removed": gone}, {"added": new}
    return before, after


class _Folder:
    """Collects (group key) -> nodes, keeping one display form per key."""

    def __init__(self) -> None:
        self.nodes: dict[str, list[str]] = defaultdict(list)
        self.shown: dict[str, tuple[Any, ...]] = {}

    def add(self, key: tuple[Any, ...], node: str, shown: tuple[Any, ...]) -> None:
        self.add_key(_key(key), node, shown)

    def add_key(self, k: str, node: str, shown: tuple[Any, ...]) -> None:
        group = self.nodes[k]
        if not group or group[-1] != node:
            group.append(node)
        self.shown.setdefault(k, shown)


def _counts(nodes: list[str], states: list[Mapping[str, NodeState]]) -> tuple[dict[str, int], dict[str, int]]:
    sites: Counter[str] = Counter()
    models: Counter[str] = Counter()
    for n in nodes:
        s = next(st[n] for st in states if n in st)
        sites[s["site"]] += 1
        for m in sorted({g["model"] for g in s["hardware"]["gpus"]}):
            models[m] += 1
    return dict(sorted(sites.items())), dict(sorted(models.items()))


def renames(before: Mapping[str, NodeState], after: Mapping[str, NodeState]) -> dict[str, str]:
    """Old name -> new name of nodes the change renames: a node only the base has and a
    node only the head has with the same site and underlay address (the same machine),
    when that pairing is unique."""
    gone = [n for n in before if n not in after]
    if not gone:
        return {}
    new: dict[tuple[str, str], list[str]] = defaultdict(list)
    for n, s in after.items():
        if n not in before:
            new[(s["site"], s["address"])].append(n)
    old: dict[tuple[str, str], list[str]] = defaultdict(list)
    for n in gone:
        old[(before[n]["site"], before[n]["address"])].append(n)
    return {
        names[0]: new[key][0]
        for key, names in sorted(old.items())
        if len(names) == 1 and len(new.get(key, ())) == 1
    }


def node_changes(
    before: Mapping[str, NodeState], after: Mapping[str, NodeState]
) -> tuple[list[NodeChange], dict[str, set[str]]]:
    """Folded node changes, ordered by layer, field and values, and for each changed node
    the layers it changes in (peer lists aside: see :func:`mesh_impact`).

    A node renamed (:func:`renames`: removed and added with the same site and underlay
    address) is one change of ``name`` (old -> new) plus what changes with it, listed
    under its new name: its derived mesh address, for one, which a removed and an added
    node would hide. Linear in the nodes and the size of their states."""
    folder = _Folder()
    touched: dict[str, set[str]] = {}
    seen: dict[tuple[Any, ...], tuple[str, tuple[Any, ...], Any, Any]] = {}
    renamed = renames(before, after)
    old_name = {new: old for old, new in renamed.items()}
    for name in sorted(before.keys() | after.keys()):
        if name in renamed:
            continue  # shown under its new name
        b, a = before.get(name), after.get(name)
        if name in old_name:
            b = before[old_name[name]]  # its NodeState.name shows the rename
        if b is None or a is None:
            change = "added" if b is None else "removed"
            folder.add(("node", "", change), name, ("node", "", change, ABSENT, ABSENT))
            touched[name] = {"node"}
            continue
        if b is a:
            continue
        # Key by key (no whole-node comparison first: a changed node's keys would be
        # compared twice).
        layers: set[str] = set()
        tops = [(top, b.get(top, ABSENT), av) for top, av in a.items()]
        tops += [(top, bv, ABSENT) for top, bv in b.items() if top not in a]
        for top, bv, av in tops:
            if top == "mesh" and isinstance(bv, dict) and isinstance(av, dict):
                # Peer lists are the mesh section's (mesh_impact compares them): not twice.
                bv = {k: v for k, v in bv.items() if k != "peers"}
                av = {k: v for k, v in av.items() if k != "peers"}
            if bv is av or bv == av:
                continue
            for path, old, new in leaf_diff(bv, av, (top,)):
                # The resolver shares identical parts between nodes (a profile's settings):
                # the same (path, old, new) objects fold without being encoded again.
                memo = (path, id(old), id(new))
                if memo not in seen:
                    layer = _layer(path)
                    field = dotted(_shown(path))
                    change = "added" if old is ABSENT else "removed" if new is ABSENT else "changed"
                    shown = (layer, field, change, *_list_delta(old, new))
                    seen[memo] = (_key(shown), shown, old, new)  # old, new: kept alive, ids stay unique
                k, shown, _, _ = seen[memo]
                folder.add_key(k, name, shown)
                layers.add(shown[0])
        if layers:
            touched[name] = layers
    states = [after, before]
    out = []
    for k, nodes in folder.nodes.items():
        layer, field, change, old, new = folder.shown[k]
        sites, models = _counts(nodes, states)
        out.append(NodeChange(layer, field, change, old, new, nodes, sites, models))
    order = {layer: i for i, layer in enumerate(LAYERS)}
    out.sort(key=lambda c: (order[c.layer], c.field, c.change, _key(c.before), _key(c.after), c.nodes))
    return out, touched


def mesh_impact(
    before: Mapping[str, NodeState],
    after: Mapping[str, NodeState],
    cluster_before: ClusterState | None,
    cluster_after: ClusterState | None,
) -> MeshImpact:
    """Peers added, removed and changed (folded over nodes), which nodes apply the change
    with ``wg syncconf``, an interface restart or a live MTU change
    (:func:`swarm_infra.resolve.mesh.mesh_apply`), and the relays and hubs gained or lost."""
    impact = MeshImpact()
    folder = _Folder()
    pairs: set[tuple[str, str]] = set()
    for name in sorted(before.keys() | after.keys()):
        bm = (before[name]["mesh"] if name in before else None) or None
        am = (after[name]["mesh"] if name in after else None) or None
        if bm == am:
            continue
        if bm is None or am is None:
            (impact.joining if bm is None else impact.leaving).append(name)
            continue
        apply = mesh_apply(bm, am)
        if apply.restart:
            impact.restart.append(name)
        elif apply.syncconf:
            impact.syncconf.append(name)
        if apply.mtu:
            impact.mtu.append(name)
        if bm["peers"] == am["peers"]:
            continue
        for path, old, new in leaf_diff(bm["peers"], am["peers"]):
            peer = path[0][1:-1]
            pairs.add((min(name, peer), max(name, peer)))
            if old is ABSENT or new is ABSENT:
                # An added peer: its entry (endpoint, AllowedIPs, keepalive), what the node
                # gains; a removed one folds by peer alone (what is lost is the peer).
                what = "added" if old is ABSENT else "removed"
                if old is ABSENT:
                    entry = {k: v for k, v in new.items() if k != "name"}
                    shown: tuple[Any, ...] = (what, peer, ABSENT, entry)
                else:
                    shown = (what, peer, ABSENT, ABSENT)
                folder.add(shown, name, shown)
                continue
            what = {"allowed_ips": "allowed_ips", "endpoint": "endpoint", "public_key": "public_key"}.get(
                path[1], "keepalive"
            )
            if what == "allowed_ips":
                old, new = sorted(set(old) - set(new)), sorted(set(new) - set(old))
            folder.add((what, peer, old, new), name, (what, peer, old, new))
    for n in impact.joining + impact.leaving:
        mesh = (after.get(n) or before[n])["mesh"]
        assert mesh is not None  # joining or leaving: in the mesh on one side
        for p in mesh["peers"]:
            pairs.add((min(n, p["name"]), max(n, p["name"])))
    impact.peerings_changed = len(pairs)
    states = [after, before]
    for k, nodes in folder.nodes.items():
        what, peer, old, new = folder.shown[k]
        sites, _ = _counts(nodes, states)
        impact.peers.append(PeerChange(what, peer, old, new, nodes, sites))
    kinds = ("added", "removed", "public_key", "endpoint", "allowed_ips", "keepalive")
    impact.peers.sort(key=lambda c: (kinds.index(c.what), c.peer, _key(c.before), _key(c.after)))
    mb: Mapping[str, Any] = (cluster_before["mesh"] if cluster_before else None) or {"relays": [], "hubs": {}}
    ma: Mapping[str, Any] = (cluster_after["mesh"] if cluster_after else None) or {"relays": [], "hubs": {}}
    impact.relays_gained = sorted(set(ma["relays"]) - set(mb["relays"]))
    impact.relays_lost = sorted(set(mb["relays"]) - set(ma["relays"]))
    hb = {f"{s}: {h}" for s, h in mb["hubs"].items()}
    ha = {f"{s}: {h}" for s, h in ma["hubs"].items()}
    impact.hubs_gained, impact.hubs_lost = sorted(ha - hb), sorted(hb - ha)
    return impact


def _document(text: Any) -> Any:
    """A JSON or YAML mapping held in a ConfigMap's string (``topology.json``, mig-parted's
    ``config.yaml``, the device plugin's configs), or None."""
    if not isinstance(text, str):
        return None
    if text.startswith("{"):
        try:
            return json.loads(text)
        except ValueError:
            return None
    if "\n" in text and ":" in text:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError:
            return None
        return data if isinstance(data, dict) else None
    return None


def _fields(before: Any, after: Any) -> Iterator[tuple[Path, Any, Any]]:
    """Changed fields of an object, leaf by leaf (:func:`leaf_diff`); a JSON or YAML
    document held in a string (the mesh topology ConfigMap's ``topology.json``, the MIG
    ConfigMap's ``config.yaml``) is compared field by field inside it; lists of lists
    (topology edges) and long lists of scalars as what they lose and gain; lists of named
    items by name; a reordering as one change (:data:`ORDER`)."""
    for path, old, new in leaf_diff(before, after, reorders=True):
        inner_old, inner_new = _document(old), _document(new)
        if inner_old is not None and inner_new is not None:
            for p, o, n in leaf_diff(inner_old, inner_new, path, reorders=True):
                yield (p, *_list_delta(o, n))
        else:
            yield (path, *_list_delta(old, new))


def object_changes(
    before: Mapping[ObjectKey, K8sObject], after: Mapping[ObjectKey, K8sObject]
) -> list[ObjectChange]:
    """Objects added, removed and changed (with their fields), in (apiVersion, kind,
    namespace, name) order."""
    out = []
    for key in sorted(before.keys() | after.keys()):
        b, a = before.get(key), after.get(key)
        if b == a:
            continue
        change: Literal["added", "removed", "changed"] = (
            "added" if b is None else "removed" if a is None else "changed"
        )
        fields = [] if b is None or a is None else [FieldChange(dotted(p), o, n) for p, o, n in _fields(b, a)]
        out.append(ObjectChange(change, key[0], key[1], key[2], key[3], fields))
    return out


def _cohort_rows(cluster: ClusterState | None) -> dict[tuple[str, str], dict[str, Any]]:
    """(flavor, cohort) -> nominal, lendable and borrowable GPUs of the cohort's queues."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    if not cluster:
        return rows
    by_cohort: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for q in cluster["cluster_queues"]:
        if q["cohort"] is None:
            continue
        for x in q["quotas"]:
            by_cohort[(x["flavor"], q["cohort"])].append(x)
    for key, quotas in by_cohort.items():
        lend = [x["nominal_quota"] if x["lending_limit"] is None else x["lending_limit"] for x in quotas]
        total_lend = sum(lend)
        borrow: int | str = 0
        for x, own in zip(quotas, lend, strict=True):
            others = total_lend - own  # what the other queues may lend it
            limit = others if x["borrowing_limit"] is None else min(x["borrowing_limit"], others)
            borrow = borrow + limit if isinstance(borrow, int) else borrow
        rows[key] = {
            "nominal": sum(x["nominal_quota"] for x in quotas),
            "lendable": total_lend,
            "borrowable": borrow,
        }
    return rows


def capacity_rows(before: ClusterState | None, after: ClusterState | None) -> list[CapacityRow]:
    """Per GPU flavor, the fleet's GPUs, nominalQuota and what is unallocated, the
    ``nvidia.com/gpu`` units per GPU and in all (MIG and time-slicing multiply them: what
    Kueue counts), then per cohort what its queues hold, lend and may borrow; before and
    after."""
    cap_b = (before["capacity"] if before else None) or {}
    cap_a = (after["capacity"] if after else None) or {}
    co_b, co_a = _cohort_rows(before), _cohort_rows(after)
    units_b = {f["name"]: f["units_per_gpu"] for f in (before["flavors"] if before else [])}
    units_a = {f["name"]: f["units_per_gpu"] for f in (after["flavors"] if after else [])}
    rows = []
    for flavor in sorted(cap_b.keys() | cap_a.keys()):
        b, a = cap_b.get(flavor), cap_a.get(flavor)
        ub, ua = units_b.get(flavor), units_a.get(flavor)
        rows.append(
            CapacityRow(
                flavor,
                None,
                [b and b["gpus"], a and a["gpus"]],
                [b and b["nominal_quota"], a and a["nominal_quota"]],
                [b and b["unallocated"], a and a["unallocated"]],
                [None, None],
                [None, None],
                [ub, ua],
                [b["gpus"] * ub if b and ub else None, a["gpus"] * ua if a and ua else None],
            )
        )
        for _, cohort in sorted(k for k in co_b.keys() | co_a.keys() if k[0] == flavor):
            rb, ra = co_b.get((flavor, cohort)), co_a.get((flavor, cohort))
            rows.append(
                CapacityRow(
                    flavor,
                    cohort,
                    [None, None],
                    [rb["nominal"] if rb else None, ra["nominal"] if ra else None],
                    [None, None],
                    [rb["lendable"] if rb else None, ra["lendable"] if ra else None],
                    [rb["borrowable"] if rb else None, ra["borrowable"] if ra else None],
                )
            )
    return rows


def rollout_fields(before: Any, after: Any) -> list[FieldChange]:
    """The Rollout's changes (``RolloutState`` of each side, or None): ``canary_hosts``
    (the first step of ``serial``), ``batch_percent`` (the last, ``"N%"`` as N) and
    ``max_fail_percentage``, each before -> after."""

    def fields(r: Any) -> dict[str, Any]:
        if not r:
            return {}
        serial = r["serial"]
        out: dict[str, Any] = {"max_fail_percentage": r["max_fail_percentage"]}
        if serial:
            out["canary_hosts"] = serial[0]
            last = serial[-1]
            out["batch_percent"] = int(last[:-1]) if isinstance(last, str) else last
        return out

    b, a = fields(before), fields(after)
    return [
        FieldChange(k, b.get(k, ABSENT), a.get(k, ABSENT))
        for k in ("canary_hosts", "batch_percent", "max_fail_percentage")
        if b.get(k, ABSENT) != a.get(k, ABSENT)
    ]
