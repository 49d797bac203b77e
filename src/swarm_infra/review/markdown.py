"""A review as a GitHub pull-request comment (GitHub-flavoured Markdown).

The summary line comes first, then the hidden marker ``<!-- swarm-review -->`` that CI
finds the comment by, then (:func:`render`) per fleet its risk flags and Rollout
changes (never cut), then the details (the head's validation problems, node changes by
layer, the mesh, cluster objects, capacity). Long tables sit in collapsed ``<details>``.
With a ``limit`` (GitHub's 65,536 characters) lists are capped, and a whole detail block
that does not fit in what is left is left out (later, smaller ones are still shown), with a
last line naming what was left out and where the full report is (CI's artifact); values
are cut to :data:`VALUE_CHARS` in the comment and field paths to :data:`PATH_CHARS` from
their start (the leaf stays), both whole in the full report. What decides who is trusted is
never cut: a flag's reason is shown whole, and a value that holds a public key is shown
whole, each SSH key in it as its fingerprint (``ssh-ed25519 SHA256:...``, as ``ssh-keygen
-lf`` prints it; its comment stays beside it) in the comment, as it is in the full report.
With more than one fleet, each fleet's details come under a heading of their own and each
collapsed ``<details>`` names its fleet.

Everything that comes from the fleet (names, values, messages, file names) is escaped:
in prose every character that can start Markdown syntax inline is backslash-escaped and ``& < > "`` become
entities, so no value can open a link, an HTML tag, emphasis or a table cell; values sit
in ``<code>`` with the same escaping; control and bidirectional characters are shown
escaped. Link targets are percent-encoded.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections import defaultdict
from typing import Any
from urllib.parse import quote

from ..resolve.keys import ssh_host_key_fingerprint
from . import stacks
from .model import (
    ABSENT,
    LAYER_TITLES,
    LAYERS,
    CapacityRow,
    FleetReview,
    Location,
    NodeChange,
    ObjectChange,
    Review,
)

MARKER = "<!-- swarm-review -->"
GITHUB_LIMIT = 65_536  # characters in one issue or pull-request comment
VALUE_CHARS = 100  # the most of a value shown in a cell
NAMES_SHOWN = 60  # node or object names listed per change (with a limit)
ROWS_SHOWN = 80  # rows per table (with a limit)
# What can start or end Markdown or GFM syntax inline: code, emphasis, links and images,
# HTML and entities, headings, table cells, strikethrough, autolinks (``http:``,
# ``www.``, ``a@b``) and mentions. Others (``,;()-+=/``) are safe where text is placed.
_PUNCT = frozenset('\\`*_[]<>#!|~&@:{}."')
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}
# C0/C1 controls, DEL, line/paragraph separators, bidirectional overrides and isolates.
_HIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\u200e\u200f]")
_STATUS = {"block": "❌ block", "warn": "⚠️ warn"}


def text(value: object, limit: int = 400) -> str:
    """``value`` as literal Markdown text: one line, at most ``limit`` characters, every
    character that could start Markdown syntax escaped (see the module doc)."""
    s = _HIDDEN.sub(lambda m: m[0].encode("unicode_escape").decode("ascii"), str(value))
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    return "".join(_ENTITIES.get(c) or ("\\" + c if c in _PUNCT else c) for c in s)


def code(value: object, limit: int = VALUE_CHARS) -> str:
    """``value`` in ``<code>``, escaped as :func:`text` (safe inside table cells too)."""
    return f"<code>{text(value, limit)}</code>"


_FULL = [False]  # rendering the full report: values are not cut

# An OpenSSH public key as ``keytype base64`` (in a host key, an allowed signers line, a
# revoked signer), of the types OpenSSH uses: its blob starts with the type's name, so the
# base64 starts with "AAAA" (the length's high bytes).
_SSH_KEY = re.compile(
    r"(?P<type>ssh-ed25519|ssh-rsa|ssh-dss|ecdsa-sha2-nistp(?:256|384|521)|"
    r"sk-ssh-ed25519@openssh\.com|sk-ecdsa-sha2-nistp256@openssh\.com) (?P<data>AAAA[A-Za-z0-9+/]+={0,2})"
)
# A WireGuard public key (wg(8), KEY FORMAT: 32 bytes in padded base64), standing alone.
_WG_KEY = re.compile(r"(?<![A-Za-z0-9+/])[A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=(?![A-Za-z0-9+/=])")


def _ssh_fingerprint(m: re.Match[str]) -> str:
    """The key ``m`` matched as its fingerprint (``type SHA256:...``), when its blob is a key of
    that type; else as it is."""
    try:
        blob = base64.b64decode(m["data"], validate=True)
    except binascii.Error:
        return m[0]
    size = int.from_bytes(blob[:4], "big")
    if blob[4 : 4 + size] != m["type"].encode():
        return m[0]
    return ssh_host_key_fingerprint(m[0])


def keys_shown(s: str) -> tuple[str, bool]:
    """``s`` with every SSH public key in it as its fingerprint (``ssh-ed25519 SHA256:...``:
    the SHA-256 of its blob in unpadded base64, as ``ssh-keygen -lf`` prints it; what follows
    the key, its comment, stays), and whether ``s`` holds a public key (SSH or WireGuard)."""
    shown, ssh = _SSH_KEY.subn(_ssh_fingerprint, s)
    return shown, bool(ssh) or bool(_WG_KEY.search(s))


def cell(s: str) -> str:
    """A value's text in ``<code>``: cut to :data:`VALUE_CHARS` in the comment, whole in the
    full report; a value holding a public key is never cut (who is trusted is never
    silenced), its SSH keys shown as fingerprints in the comment."""
    if _FULL[0]:
        return code(s, 10**9)
    shown, keyed = keys_shown(s)
    return code(shown, 10**9 if keyed else VALUE_CHARS)


def value(v: Any) -> str:
    """A desired-state value: scalars as they are, containers as compact JSON; cut to
    :data:`VALUE_CHARS` in the comment, whole in the full report (``render(r, None)``) and
    whole where it holds a key (:func:`cell`)."""
    if v is ABSENT or v == ABSENT:
        return "(none)"
    if isinstance(v, dict) and set(v) in ({"removed"}, {"added"}):
        sign = "\N{MINUS SIGN}" if "removed" in v else "+"
        items = v["removed"] if "removed" in v else v["added"]
        shown = (x if isinstance(x, str) else json.dumps(x, separators=(",", ":")) for x in items)
        return cell(", ".join(f"{sign}{x}" for x in shown) or "(nothing)")
    if isinstance(v, str):
        return cell(v)
    return cell(json.dumps(v, sort_keys=True, separators=(",", ":")))


PATH_CHARS = 160  # the most of a field's path shown in the comment (its end: the leaf)


def field_path(path: str) -> str:
    """A changed field's path in ``<code>``: whole in the full report; in the comment at most
    :data:`PATH_CHARS`, cut at the start, so that the leaf it names stays
    (``…containers[ray-worker].resources.requests.nvidia.com/gpu``)."""
    if not _FULL[0] and len(path) > PATH_CHARS:
        path = "…" + path[-(PATH_CHARS - 1) :]
    return code(path, 10**9)


def link(loc: Location, repo_url: str | None) -> str:
    """``file:line`` as a link to that line at its commit (when ``repo_url`` is known)."""
    label = f"{loc.file}:{loc.line}" + {"base": " (base)", "merge": " (merge result)"}.get(loc.ref, "")
    if not repo_url or loc.ref == "merge":  # the merge result's commit exists only in the review
        return code(label, 200)
    anchor = f"#L{loc.line}" if loc.line else ""
    url = f"{repo_url.rstrip('/')}/blob/{loc.commit}/{quote(loc.file)}{anchor}"
    return f"[{code(label, 200)}]({quote(url, safe=':/#%')})"


def links(locs: list[Location], repo_url: str | None) -> str:
    return "<br>".join(link(x, repo_url) for x in locs) or "—"


def names(items: list[str], limit: int | None) -> str:
    shown = items if limit is None else items[:limit]
    out = ", ".join(code(n) for n in shown)
    return out + (f" … and {len(items) - len(shown)} more" if len(shown) < len(items) else "")


def _where_nodes(counts: dict[str, int], models: dict[str, int], total: int) -> str:
    if len(models) == 1:
        what = f"{total} {text(next(iter(models)))} node{'s' if total != 1 else ''}"
    elif models:
        what = f"{total} nodes ({', '.join(f'{n} {text(m)}' for m, n in models.items())})"
    else:
        what = f"{total} node{'s' if total != 1 else ''}"
    if len(counts) <= 3:
        return f"{what} in {', '.join(text(s) for s in counts)}"
    return f"{what} in {len(counts)} sites"


def _change_text(c: NodeChange) -> str:
    if not c.field:
        return f"node {c.change}"
    if c.change == "added":
        return f"{field_path(c.field)} = {value(c.after)} (added)"
    if c.change == "removed":
        return f"{field_path(c.field)} removed (was {value(c.before)})"
    return f"{field_path(c.field)} {value(c.before)} → {value(c.after)}"


def _table(
    header: list[str], rows: list[list[str]], limit: int | None, what: str, total: int | None = None
) -> str:
    """A table of ``rows``, the first :data:`ROWS_SHOWN` with a ``limit``; ``total``: how
    many rows there are when ``rows`` holds only those shown (the rest not rendered)."""
    shown = rows if limit is None else rows[:ROWS_SHOWN]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in shown]
    count = len(rows) if total is None else total
    if len(shown) < count:
        lines.append(f"\n_{count - len(shown)} more {what} in the full report._")
    return "\n".join(lines)


def _shown(items: list[Any], limit: int | None) -> list[Any]:
    """The items a table shows: all, or with a ``limit`` the first :data:`ROWS_SHOWN` (the
    others are counted, not rendered)."""
    return items if limit is None else items[:ROWS_SHOWN]


def _more(total: int, limit: int | None, what: str) -> str:
    """The line that counts what a list capped by :func:`_shown` leaves to the full report."""
    left = 0 if limit is None else total - min(total, ROWS_SHOWN)
    return f"\n\n_{left} more {what} in the full report._" if left > 0 else ""


def _details(summary: str, body: str) -> str:
    return f"<details><summary>{summary}</summary>\n\n{body}\n\n</details>"


def _node_blocks(fr: FleetReview, url: str | None, limit: int | None, who: str = "") -> list[str]:
    if not fr.nodes:
        return ["### Nodes\n\nNo node's desired state changes."]
    blocks = [f"### Nodes\n\n{fr.nodes_changed} node(s) change."]
    for layer in LAYERS:
        changes = [c for c in fr.nodes if c.layer == layer]
        if not changes:
            continue
        rows = [
            [_change_text(c), _where_nodes(c.sites, c.gpu_models, len(c.nodes)), links(c.where, url)]
            for c in _shown(changes, limit)
        ]
        blocks.append(
            f"#### {LAYER_TITLES[layer]}\n\n"
            + _table(["change", "on", "where"], rows, limit, "changes", len(changes))
        )
        listing = "\n".join(
            f"- {_change_text(c)}: {names(c.nodes, limit and NAMES_SHOWN)}" for c in _shown(changes, limit)
        ) + _more(len(changes), limit, "changes")
        blocks.append(_details(f"{who}Nodes of each {LAYER_TITLES[layer]} change", listing))
    return blocks


def _mesh_blocks(fr: FleetReview, url: str | None, limit: int | None, who: str = "") -> list[str]:
    m = fr.mesh
    topo = []
    for label, items in (
        ("relays gained", m.relays_gained),
        ("relays lost", m.relays_lost),
        ("hubs gained", m.hubs_gained),
        ("hubs lost", m.hubs_lost),
    ):
        if items:
            topo.append(f"- {label}: {names(items, None)}")
    # A relay or hub gained is shown even when no peer changes yet: it decrypts what it carries.
    if not (m.peers or m.restart or m.syncconf or m.mtu or m.joining or m.leaving or topo):
        return ["### Mesh\n\nNo WireGuard change."]
    rows = [
        ["`wg syncconf`: tunnels stay up", str(len(m.syncconf)), names(m.syncconf, limit and 12)],
        ["**interface restart: tunnels drop**", str(len(m.restart)), names(m.restart, limit and 12)],
        ["MTU set on the running interface (no drop)", str(len(m.mtu)), names(m.mtu, limit and 12)],
        ["joining the mesh (interface comes up)", str(len(m.joining)), names(m.joining, limit and 12)],
        ["leaving the mesh", str(len(m.leaving)), names(m.leaving, limit and 12)],
    ]
    blocks = [
        f"### Mesh\n\n{m.peerings_changed} peering(s) change.\n\n"
        + _table(["apply", "nodes", ""], rows, None, "")
    ]
    if topo:
        blocks.append("\n".join(topo))
    if m.peers:
        labels = {"added": "peer added", "removed": "peer removed", "endpoint": "endpoint"}
        prow = []
        for p in _shown(m.peers, limit):
            if p.what == "allowed_ips":
                what = f"AllowedIPs {value({'added': p.after})} {value({'removed': p.before})}"
            elif p.what == "public_key":
                what = f"recorded public key {value(p.before)} → {value(p.after)}"
            elif p.what in ("endpoint", "keepalive"):
                what = f"{labels.get(p.what, 'PersistentKeepalive')} {value(p.before)} → {value(p.after)}"
            elif p.what == "added":
                what = f"peer added: {value(p.after)}"
            else:
                what = labels[p.what]
            prow.append([what, code(p.peer), _where_nodes(p.sites, {}, len(p.nodes)), links(p.where, url)])
        blocks.append(_table(["change", "peer", "on", "where"], prow, limit, "peer changes", len(m.peers)))
        listing = "\n".join(
            f"- {code(p.peer)} ({p.what}): {names(p.nodes, limit and NAMES_SHOWN)}"
            for p in _shown(m.peers, limit)
        ) + _more(len(m.peers), limit, "peer changes")
        blocks.append(_details(f"{who}Nodes of each peer change", listing))
    return blocks


_CLAIM = (
    "### The head's claim\n\nWhat the pull request's own code (head-plan.yml, run without secrets) "
    "says the merge result resolves to, beyond what the reviewer's code (the base's) resolves it to. "
    "It is the head's word, not the review's: it changes no verdict above."
)


def _claim_blocks(fr: FleetReview, url: str | None, limit: int | None, who: str = "") -> list[str]:
    """The head's claim (:mod:`.claim`), when one was read: its node and object changes,
    under headings that say whose they are."""
    c = fr.claim
    if c is None:
        return []
    if c.stale:
        return [f"{_CLAIM}\n\nStale: it is of another merge result (the base moved since it ran)."]
    if c.error:
        return [f"{_CLAIM}\n\nNot compared: {text(c.error)}"]
    if not c.nodes and not c.objects:
        return [f"{_CLAIM}\n\nThe head's code resolves it as the base's code does: no difference."]
    shadow = FleetReview(fr.fleet, fr.base, fr.head, True, True, nodes=c.nodes, objects=c.objects)
    shadow.nodes_changed = c.nodes_changed
    blocks = [*_node_blocks(shadow, url, limit, f"{who}claimed: "), *_object_blocks(shadow, url, limit)]
    return [_CLAIM] + [b.replace("### ", "#### Claimed: ", 1) if b.startswith("### ") else b for b in blocks]


def _object_blocks(fr: FleetReview, url: str | None, limit: int | None) -> list[str]:
    if fr.objects_error:
        return [f"### Cluster objects\n\nNot compared: {text(fr.objects_error)}"]
    if not fr.objects:
        return ["### Cluster objects\n\nNo Kubernetes, Kueue or KubeRay object changes."]
    return [
        f"### Cluster objects\n\n{len(fr.objects)} object(s) change.",
        _object_table(fr.objects, url, limit),
    ]


def _object_table(objects: list[ObjectChange], url: str | None, limit: int | None) -> str:
    """The table of ``objects``' changes, identical changes of a kind folded into one row."""
    groups: dict[str, list[ObjectChange]] = defaultdict(list)
    for o in objects:
        key = json.dumps([o.change, o.kind, [[f.path, f.before, f.after] for f in o.fields]], sort_keys=True)
        groups[key].append(o)
    rows = []
    for members in _shown(list(groups.values()), limit):
        o = members[0]
        objs = [f"{x.namespace}/{x.name}" if x.namespace else x.name for x in members]
        shown = o.fields if limit is None else o.fields[:8]
        fields = "<br>".join(f"{field_path(f.path)}: {value(f.before)} → {value(f.after)}" for f in shown)
        if len(shown) < len(o.fields):
            fields += f"<br>… {len(o.fields) - len(shown)} more field(s)"
        where = sorted({loc for x in members for loc in x.where})[:4]
        count = f" \N{MULTIPLICATION SIGN}{len(members)}" if len(members) > 1 else ""
        rows.append(
            [o.change, f"{text(o.kind)}{count}", names(objs, limit and 20), fields or "—", links(where, url)]
        )
    return _table(["change", "kind", "name", "fields", "where"], rows, limit, "object changes", len(groups))


def _stack_blocks(fr: FleetReview, url: str | None, limit: int | None, who: str = "") -> list[str]:
    """The fleet's Pulumi stacks (each one cluster an apply updates): what each one's
    settings change, and the changes of the objects of each that holds objects of its own
    (a regional cluster, or a stack added, removed or moved between fleets); a stack of
    every site at both sides holds the fleet's objects above, which are not repeated."""
    if not fr.stacks:
        return [
            "### Pulumi stacks\n\nNo `Pulumi.<stack>.yaml` names this fleet (`swarm:fleet`): "
            "an apply updates no stack of it."
        ]
    rows = []
    for sc in fr.stacks:
        s = sc.after or sc.before
        assert s is not None or sc.error is not None
        settings = (
            "—"
            if s is None
            else f"fleet {code(s.fleet)}, "
            + ("every site" if s.sites is None else f"sites {names(s.sites, None)}")
            + f", context {code(s.context) if s.context is not None else text('(the current one)')}"
        )
        change = "<br>".join(text(c) for c in stacks.config_change(sc)) or "—"
        if sc.error:
            objects = f"not compared: {text(sc.error)}"
        elif sc.every_site:
            objects = "every site: the fleet's cluster objects above"
        else:
            objects = f"{len(sc.objects)} object(s) change" + (
                f" ({text(stacks.counts(sc.objects))})" if sc.objects else ""
            )
        rows.append([code(sc.stack), settings, change, objects, links(sc.where, url)])
    blocks = [
        "### Pulumi stacks\n\nEach stack is one cluster that an apply updates (`pulumi up`).\n\n"
        + _table(["stack", "settings (head)", "change", "objects", "where"], rows, None, "")
    ]
    for sc in fr.stacks:
        if sc.objects:
            table = _object_table(sc.objects, url, limit)
            title = f"#### Stack {code(sc.stack)}: {len(sc.objects)} object(s) change"
            blocks.append(
                f"{title}\n\n{table}"
                if table.count("\n| ") <= FOLD_ROWS + 1
                else f"{title}\n\n" + _details(f"{who}Objects of stack {text(sc.stack)}", table)
            )
    return blocks


def _pair(p: list[Any]) -> str:
    b, a = (("—" if x is None else str(x)) for x in p)
    return b if b == a else f"{b} → **{a}**"


def _capacity_blocks(fr: FleetReview) -> list[str]:
    if not fr.capacity:
        return ["### Capacity\n\nNo GPU flavors."]
    rows = []
    for r in fr.capacity:
        rows.append(_capacity_row(r))
    header = [
        "flavor",
        "cohort",
        "fleet GPUs",
        "nvidia.com/gpu per GPU",
        "nvidia.com/gpu (Kueue)",
        "nominalQuota (GPUs)",
        "unallocated",
        "lendable",
        "borrowable",
    ]
    return ["### Capacity per GPU flavor (before → after)\n\n" + _table(header, rows, None, "")]


def _capacity_row(r: CapacityRow) -> list[str]:
    if r.cohort is None:
        return [
            code(r.flavor),
            "(fleet)",
            _pair(r.gpus),
            _pair(r.units_per_gpu),
            _pair(r.device_units),
            _pair(r.nominal_quota),
            _pair(r.unallocated),
            "",
            "",
        ]
    return [
        code(r.flavor),
        code(r.cohort),
        "",
        "",
        "",
        _pair(r.nominal_quota),
        "",
        _pair(r.lendable),
        _pair(r.borrowable),
    ]


def _rollout_blocks(fr: FleetReview) -> list[str]:
    if not fr.rollout:
        return []
    rows = [[field_path(c.path), value(c.before), value(c.after)] for c in fr.rollout]
    return ["### Rollout\n\n" + _table(["field", "before", "after"], rows, None, "")]


def _flag_blocks(fr: FleetReview, url: str | None, limit: int | None, shown: int | None = None) -> list[str]:
    """The risk flags: all of them, or (``shown``) the first ``shown`` rows and a count
    per rule of the others, with where to find them."""
    if not fr.flags:
        return ["### Risk flags\n\nNone."]
    flags = fr.flags if shown is None else fr.flags[:shown]
    # A reason is shown whole: what a flag is about (a key, a remote) must never be cut off.
    rows = [[_STATUS[f.action], code(f.rule), text(f.reason, 10**9), links(f.where, url)] for f in flags]
    note = "\n\nThe base's ReviewPolicy decides what blocks." + (
        " This change edits the ReviewPolicy: the new policy applies once it is merged."
        if fr.policy_changed
        else ""
    )
    table = _table(["", "rule", "reason", "where"], rows, None, "flags")
    rest = fr.flags[len(flags) :]
    if rest:
        counts: dict[str, int] = defaultdict(int)
        for f in rest:
            counts[f"{_STATUS[f.action]} {f.rule}"] += 1
        table += (
            f"\n\n_{len(rest)} more flag(s) ("
            + ", ".join(f"{n} {text(k)}" for k, n in sorted(counts.items()))
            + f") are in the full report{_ARTIFACT}._"
        )
    return ["### Risk flags" + note, table]


_ARTIFACT = (
    " (CI's `swarm-review` artifact, or `swarm review --full FILE`; `--format json` for all of it as data)"
)
FOLD_ROWS = 12  # a table longer than this sits in a collapsed <details>


def _fold(block: str, title: str) -> str:
    """``block`` in a collapsed ``<details>`` when it is a table of more than
    :data:`FOLD_ROWS` rows."""
    if block.count("\n| ") > FOLD_ROWS + 1 and not block.startswith("<details>"):
        return _details(title, block)
    return block


def fleet_summary_blocks(
    fr: FleetReview, url: str | None, limit: int | None, head: str = "head"
) -> list[str]:
    """What comes before any detail and is never cut: the fleet's title, then its risk
    flags (or, for an invalid head, that it is invalid) and its Rollout changes. ``head``:
    what was judged (``merge result`` with ``swarm review --merge``)."""
    title = f"## Fleet {code(fr.fleet)}"
    if fr.invalid:
        errors = sum(p.severity == "error" for p in fr.problems)
        return [
            title
            + f"\n\n### ❌ The {head} is invalid: {errors} error(s)\n\nFix these; nothing else was reviewed."
        ]
    if fr.base_invalid:
        said = (
            "The plan diff below compares the head with what of the base resolves (the documents "
            "with errors left out): it may show more or less than this change, and the risk flags "
            "are judged on it."
            if fr.base_resolved
            else "It does not resolve, so there is no plan diff: no other risk flag could be checked."
        )
        title += (
            f"\n\n### ❌ The base is invalid: {fr.base_invalid} error(s)\n\n"
            f"The base commit does not validate (its errors are listed below); the head is valid. {said} "
            "Fix the base first."
        )
    return [title, *_flag_blocks(fr, url, limit), *_rollout_blocks(fr)]


def fleet_detail_blocks(
    fr: FleetReview, url: str | None, limit: int | None, named: bool = False
) -> list[str]:
    """The details, in the order they are shown (those that do not fit a comment left out): the
    head's diagnostics, or node changes by layer, the mesh, cluster objects, capacity.
    Long tables sit in collapsed ``<details>``; with ``named`` (a review of several fleets)
    each ``<details>`` summary starts with the fleet's name."""
    if fr.invalid:
        rows = [
            [links([p.location], url), code(f"{p.severity}[{p.rule}]"), code(p.path), text(p.message)]
            for p in fr.problems
        ]
        return [_table(["where", "rule", "path", "message"], rows, limit, "diagnostics")]
    base = []
    if fr.base_invalid:
        rows = [
            [links([p.location], url), code(f"{p.severity}[{p.rule}]"), code(p.path), text(p.message)]
            for p in fr.base_problems
        ]
        base = [
            "### The base's errors\n\n"
            + _table(["where", "rule", "path", "message"], rows, limit, "diagnostics")
        ]
        if not fr.base_resolved:
            return base
    name = text(fr.fleet)
    who = f"{name}: " if named else ""
    return [
        *base,
        *(
            _fold(b, f"{name}: details")
            for b in (
                *_node_blocks(fr, url, limit, who),
                *_mesh_blocks(fr, url, limit, who),
                *_object_blocks(fr, url, limit),
                *_claim_blocks(fr, url, limit, who),
                *_stack_blocks(fr, url, limit, who),
                *_capacity_blocks(fr),
            )
        ),
    ]


def review_blocks(r: Review, limit: int | None) -> list[str]:
    """How the base was chosen, notes, and the rule files the change touches."""
    how = (
        f"Base: the merge base of {code(r.base_ref)} (`{r.base_tip[:12]}`) and the head."
        if r.merge_base
        else f"Base: {code(r.base_ref)} itself (`{r.base_tip[:12]}`), not the merge base."
    )
    out = [how + "".join(f"\n\n> [!WARNING]\n> {text(n)}" for n in r.notes)]
    if r.rules_changed:
        rows = [[code(f)] for f in r.rules_changed]
        out.append(
            f"### Rules changed ({len(r.rules_changed)} file(s))\n\nThe change touches what every "
            "fleet is judged and applied by: a code owner of these files must approve it "
            "(`.github/CODEOWNERS`).\n\n" + _table(["file"], rows, limit, "files")
        )
    return out


def fleet_blocks(fr: FleetReview, url: str | None, limit: int | None) -> list[str]:
    """The Markdown blocks of one fleet's review, each complete on its own (a table, a
    ``<details>``), in the order they are shown: summary blocks, then details."""
    return [*fleet_summary_blocks(fr, url, limit), *fleet_detail_blocks(fr, url, limit)]


def render(r: Review, limit: int | None = GITHUB_LIMIT) -> str:
    """The comment: at most ``limit`` characters (None: no limit, the full report, with
    values whole). The summary line, then each fleet's risk flags and Rollout changes come
    first and are never cut (with a tiny ``limit``, flags past the first few are counted
    per rule instead of listed); then each fleet's details, in whole blocks, those that do
    not fit in what is left left out (later ones that fit still shown), with a last line
    naming the sections left out and where the full report is."""
    _FULL[0] = limit is None
    try:
        return _render(r, limit)
    finally:
        _FULL[0] = False


def _render(r: Review, limit: int | None) -> str:
    head = f"{text(r.summary, 4000)}\n{MARKER}\n\nBase `{r.base[:12]}` → head `{r.head[:12]}`."
    note_room = 400
    # How the base was chosen and the rule files changed: never cut, like the flags.
    fixed = [head, *review_blocks(r, limit)]
    for fr in r.fleets:
        blocks = fleet_summary_blocks(fr, r.repo_url, limit, "merge result" if r.pr_head else "head")
        if limit is not None and fr.flags:
            shown = len(fr.flags)
            budget = max(limit - note_room - sum(len(b) + 2 for b in fixed), 0) // max(len(r.fleets), 1)
            while shown > 1 and sum(len(b) + 2 for b in blocks) > budget:
                shown //= 2
                blocks = [
                    blocks[0],
                    *_flag_blocks(fr, r.repo_url, limit, shown),
                    *_rollout_blocks(fr),
                ]
        fixed += blocks
    out = list(fixed)
    size = sum(len(b) + 2 for b in out)
    details: list[tuple[str, str]] = []
    # With several fleets, each fleet's details sit under a heading of their own (before its
    # first block shown) and its collapsed blocks name it: else which fleet a table or a
    # listing belongs to is lost once the summaries are above.
    several = len(r.fleets) > 1
    for fr in r.fleets:
        details += [(fr.fleet, b) for b in fleet_detail_blocks(fr, r.repo_url, limit, several)]
    if details and not several:
        out.append("## Details")
        size += 12
    left: list[tuple[str, str]] = []  # blocks that did not fit: named at the end
    headed: set[str] = set()
    for fleet, block in details:
        heading = f"## Details of fleet {code(fleet)}" if several and fleet not in headed else ""
        extra = len(heading) + 2 if heading else 0
        # A block too long for what is left is left out, and the later ones that fit still
        # shown: a long node listing must not take the mesh, objects and capacity with it.
        if limit is not None and size + extra + len(block) + 2 > limit - note_room:
            left.append((fleet, block))
            continue
        if heading:
            out.append(heading)
            headed.add(fleet)
        out.append(block)
        size += extra + len(block) + 2
    if left:
        sections = []
        for f, b in left:
            m = re.search(r"^#{3,4} ([^\n]+)", b, re.M) or re.search(r"<summary>([^<]+)</summary>", b)
            label = f"{f}: {m[1]}" if m else None
            if label and label not in sections:
                sections.append(label)
        named = ", ".join(text(x, 80) for x in sections[:8]) + (" …" if len(sections) > 8 else "")
        out.append(
            f"_Left out to fit a comment: {len(left)} block(s)"
            + (f" ({named})" if named else "")
            + f", in the full report{_ARTIFACT}._"
        )
    return "\n\n".join(out) + "\n"
