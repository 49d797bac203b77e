"""The fleet's Pulumi stacks, each reviewed as the cluster it is.

An apply runs ``pulumi up`` on every stack of the fleet (``.github/workflows/apply.yml``:
each ``Pulumi.<stack>.yaml`` whose ``swarm:fleet`` is the fleet), and each stack is one
Kubernetes cluster: every site, or a regional cluster of its ``swarm:sites``
(:mod:`swarm_infra.cluster.scope`). A change to a stack file changes what that cluster
holds (a site dropped from ``swarm:sites``: its nodes' objects removed, quotas cut to the
GPUs left) without any fleet file changing, and a change of the fleet changes each
regional cluster in its own way. So the review reads ``Pulumi*.yaml`` at the top of both
commits from Git, as data (:func:`stack_files`: ``git ls-tree`` and ``git cat-file``,
never the working tree; parsed by :mod:`swarm_infra.cluster.stacks`) and, for each stack
of the fleet at either side, builds that stack's objects at both sides with each side's
desired state and settings (``build(state, sites=...)``) and compares them
(:func:`stack_changes`). A stack of every site at both sides holds exactly the fleet's
objects, already compared: it is listed, not built again (at 10,000 nodes a build costs).

A stack file of the head that cannot be read or parsed is a head problem (rule
:data:`STACK_FILE_RULE`, exit 2: the apply would fail on it); one of the base only leaves
that stack uncompared (its ``error``). A stack whose ``kubernetes:context`` changes, or
that moves to another fleet, raises :data:`STACK_TARGET_CHANGED` (:func:`stack_flags`):
its next ``pulumi up`` updates another cluster, or puts another fleet's objects in it.
"""

from __future__ import annotations

import fnmatch
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..cluster import build
from ..cluster.meta import K8sObject
from ..cluster.stacks import PROJECT_FILE, STACK_FILE, Stack, StackFileError, default_fleet, parse_stack
from ..fleet.diagnostics import one_line
from .diff import object_changes
from .flags import FlagRaiser
from .git import REGULAR_MODES, git, read_blobs
from .load import ObjectKey, Snapshot, object_key
from .locate import pick
from .model import FleetReview, Location, ObjectChange, Problem, StackChange, StackSettings

STACK_FILES = "Pulumi*.yaml"  # at the top of the tree: the project file and the stack files
STACK_FILE_RULE = "review.stack-file"  # a head's stack file that cannot be read or parsed
STACK_TARGET_CHANGED = "stack-target-changed"
_KEYS = {"fleet": "swarm:fleet", "sites": "swarm:sites", "context": "kubernetes:context"}
_BASE_UNREAD = "base: "  # the error of a stack whose base file does not parse
_ERROR_LINE = re.compile(r"^[^:\s]+:(?P<line>\d+):")  # "Pulumi.x.yaml:3: not YAML (...)"


def stack_files(repo: Path, commit: str) -> tuple[dict[str, str], dict[str, str]]:
    """The files ``Pulumi*.yaml`` at the top of ``commit``'s tree, read from Git as data
    (``git ls-tree`` of the top level, one ``git cat-file --batch``): ``(texts,
    unreadable)``, both file name -> text, or -> why it was not read (a symbolic link,
    which the review does not follow; not UTF-8). Directories and submodules are not files
    and are left out. Raises :class:`~swarm_infra.review.git.GitError` when git fails."""
    out = git(repo, "ls-tree", "-z", "--full-tree", commit)
    blobs: dict[str, str] = {}
    unreadable: dict[str, str] = {}
    for entry in out.split(b"\0"):
        meta, _, raw = entry.partition(b"\t")
        if not raw:
            continue
        mode, kind, blob = meta.decode().split()
        name = raw.decode("utf-8", "surrogateescape")
        if kind != "blob" or not fnmatch.fnmatchcase(name, STACK_FILES):
            continue
        if mode in REGULAR_MODES:
            blobs[name] = blob
        else:
            unreadable[name] = "a symbolic link: the review reads stack files as the commit holds them"
    data = read_blobs(repo, list(blobs.values()))
    texts: dict[str, str] = {}
    for name, blob in sorted(blobs.items()):
        try:
            texts[name] = data[blob].decode("utf-8")
        except UnicodeDecodeError:
            unreadable[name] = "not UTF-8 text"
    return texts, dict(sorted(unreadable.items()))


@dataclass
class StackFiles:
    """The stacks of one commit: ``stacks`` by name (of the files that parse), ``texts``
    by file name, and ``errors`` as ``(file, line, message)`` (line 0: the whole file;
    the message starts with the file's name)."""

    commit: str
    stacks: dict[str, Stack] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)
    errors: list[tuple[str, int, str]] = field(default_factory=list)


def stacks_at(repo: Path, commit: str) -> StackFiles:
    """Every stack of ``commit`` (:func:`stack_files`, each file parsed on its own by
    :func:`swarm_infra.cluster.stacks.parse_stack`, so one that does not parse leaves the
    others read; a ``Pulumi.yaml`` that does not parse is an error, and the stacks without
    ``swarm:fleet`` then take the library's default fleet)."""
    texts, unreadable = stack_files(repo, commit)
    out = StackFiles(commit, texts=texts)
    out.errors += [(name, 0, f"{name}: {why}") for name, why in unreadable.items()]

    def error(name: str, exc: StackFileError) -> None:
        m = _ERROR_LINE.match(str(exc))
        out.errors.append((name, int(m["line"]) if m else 0, str(exc)))

    fleet_default = default_fleet(None)
    if PROJECT_FILE in texts:
        try:
            fleet_default = default_fleet(texts[PROJECT_FILE])
        except StackFileError as exc:
            error(PROJECT_FILE, exc)
    for name, text in texts.items():
        m = STACK_FILE.fullmatch(name)
        if m:
            try:
                out.stacks[m["stack"]] = parse_stack(m["stack"], text, fleet_default)
            except StackFileError as exc:
                error(name, exc)
    out.errors.sort()
    return out


def _cut(message: str, limit: int = 300) -> str:
    """A parser's message on one line, at most ``limit`` characters (it may quote the file)."""
    line = one_line(message)
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _settings(stack: Stack | None) -> StackSettings | None:
    if stack is None:
        return None
    return StackSettings(stack.fleet, list(stack.sites) if stack.sites is not None else None, stack.context)


def _key_line(text: str, key: str) -> int:
    """The 1-based line of ``config.<key>`` in a stack file's ``text`` (0: not found)."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return 0
    for name in ("config", key):
        if not isinstance(node, yaml.MappingNode):
            return 0
        keys = [k for k, _ in node.value if isinstance(k, yaml.ScalarNode) and k.value == name]
        if not keys:
            return 0
        line = keys[0].start_mark.line + 1
        node = next(v for k, v in node.value if k is keys[0])
    return line


def _where(name: str, base: StackFiles, head: StackFiles, b: Stack | None, h: Stack | None) -> list[Location]:
    """The lines of ``Pulumi.<name>.yaml`` that change the stack: each changed key at the
    head (at the base where the head has none), or the whole file added or removed; none
    when its settings do not change."""
    file = f"Pulumi.{name}.yaml"
    if b is None or h is None:
        if h is not None:
            return [Location(file, 0, "head", head.commit)]
        return [Location(file, 0, "base", base.commit)]
    out = []
    for attr, key in _KEYS.items():
        if getattr(b, attr) == getattr(h, attr):
            continue
        line = _key_line(head.texts[file], key)
        if line:
            out.append(Location(file, line, "head", head.commit))
        elif line := _key_line(base.texts[file], key):
            out.append(Location(file, line, "base", base.commit))
    # A key whose line is in neither file (swarm:fleet from Pulumi.yaml's default): the file.
    return out or ([Location(file, 0, "head", head.commit)] if b != h else [])


def _objects(stack: Stack | None, snap: Snapshot, side: str) -> tuple[dict[ObjectKey, K8sObject], str | None]:
    """The objects ``stack`` holds for ``snap``'s fleet (none without the stack), and why
    they could not be built (plain text, naming the side)."""
    if stack is None:
        return {}, None
    if stack.sites is None:  # every site: the fleet's own objects, built once already
        return snap.objects or {}, f"{side}: {snap.objects_error}" if snap.objects_error else None
    assert snap.state is not None  # a side with the fleet resolved to get here
    try:
        built = build(snap.state, stack.sites).all()
    except ValueError as exc:  # ScopeError: the sites cannot form a cluster; a mesh too large
        return {}, f"{side}: {exc}"
    except Exception as exc:
        # The builder expects a validated fleet; an invalid base resolved best effort
        # (load.check_snapshot) may fail it anywhere: that stack is then not compared.
        if snap.valid:
            raise
        return {}, f"{side}: {type(exc).__name__}: {exc} (the {side} does not validate)"
    return {object_key(o): o for o in built}, None


def _fleet_wide(stack: Stack | None, snap: Snapshot) -> bool:
    """Whether ``stack`` holds at ``snap``'s side exactly what the fleet-wide comparison
    took for it (all of the fleet's objects, or none where there is no fleet)."""
    return stack.sites is None if stack is not None else not snap.exists


def stack_changes(repo: Path, fr: FleetReview, base: Snapshot, head: Snapshot) -> list[StackChange]:
    """Every stack of ``fr``'s fleet at either side (``base.fleet`` at the base: the fleet's
    name there when the change renames it), by name: its settings at both sides and the
    changes of its objects (see the module doc; an object's ``where`` is the stack file's
    changed lines, else the fleet-wide change of the same object's). Call it once both
    snapshots are resolved and ``fr.objects`` attributed. A head stack file that cannot be
    read or parsed is appended to ``fr.problems`` (rule :data:`STACK_FILE_RULE`, an error:
    the head is invalid) and nothing is returned. Raises
    :class:`~swarm_infra.review.git.GitError` when git fails."""
    at_base, at_head = stacks_at(repo, base.commit), stacks_at(repo, head.commit)
    if at_head.errors:
        fr.problems += [
            Problem(Location(file, line, "head", head.commit), 0, "error", STACK_FILE_RULE, "$", _cut(msg))
            for file, line, msg in at_head.errors
        ]
        return []
    ours_b = {n for n, s in at_base.stacks.items() if s.fleet == base.fleet}
    ours_h = {n for n, s in at_head.stacks.items() if s.fleet == head.fleet}
    # A base file that does not parse: its stack cannot be compared, if the head's is ours.
    broken = {f"Pulumi.{n}.yaml" for n in ours_h} & {file for file, _, _ in at_base.errors}
    fleet_where = {(o.api_version, o.kind, o.namespace, o.name): o.where for o in fr.objects}
    out = []
    for name in sorted(ours_b | ours_h):
        b, h = at_base.stacks.get(name), at_head.stacks.get(name)
        file = f"Pulumi.{name}.yaml"
        sc = StackChange(name, file, _settings(b), _settings(h), where=_where(name, at_base, at_head, b, h))
        out.append(sc)
        if file in broken:
            msg = next(m for f, _, m in at_base.errors if f == file)
            sc.error = f"{_BASE_UNREAD}{_cut(msg)}; not compared"
            continue
        # What the stack holds of this fleet at each side: nothing where it is absent, of
        # another fleet, or the fleet itself is absent.
        sb = b if b is not None and name in ours_b and base.exists else None
        sh = h if h is not None and name in ours_h and head.exists else None
        # Its objects are the fleet's at a side where it holds every site, or where neither
        # it nor the fleet is: then its change is the fleet's own, already shown.
        if _fleet_wide(sb, base) and _fleet_wide(sh, head):
            sc.every_site = True
            continue
        before, eb = _objects(sb, base, "base")
        after, eh = _objects(sh, head, "head")
        if eb or eh:
            sc.error = "; ".join(e for e in (eb, eh) if e)
            continue
        sc.objects = object_changes(before, after)
        own = sc.where if sc.before != sc.after else []
        for o in sc.objects:
            o.where = pick(own, fleet_where.get((o.api_version, o.kind, o.namespace, o.name), ()))
    return out


def _sites(s: StackSettings) -> str:
    return "every site" if s.sites is None else ", ".join(s.sites)


def config_change(sc: StackChange) -> list[str]:
    """What changes in the stack's settings, each as plain text (the renderer escapes it):
    ``stack added``, ``sites: -ams2``, ``kubernetes:context a -> b``...; empty: none."""
    b, a = sc.before, sc.after
    if b is None and a is None:
        return []
    if b is None:
        return ["not read at the base" if (sc.error or "").startswith(_BASE_UNREAD) else "stack added"]
    if a is None:
        return ["stack removed"]
    out = []
    if b.fleet != a.fleet:
        out.append(f"swarm:fleet {b.fleet} → {a.fleet}")
    if b.sites != a.sites:
        if b.sites is None or a.sites is None:
            out.append(f"swarm:sites {_sites(b)} → {_sites(a)}")
        else:
            gone = [s for s in b.sites if s not in a.sites]
            new = [s for s in a.sites if s not in b.sites]
            moved = [] if gone or new else ["reordered"]
            shown = [*(f"+{s}" for s in new), *(f"\N{MINUS SIGN}{s}" for s in gone), *moved]
            out.append("swarm:sites " + ", ".join(shown))
    if b.context != a.context:
        out.append(f"kubernetes:context {_context(b.context)} → {_context(a.context)}")
    return out


def _context(c: str | None) -> str:
    return c if c is not None else "(none: the kubeconfig's current context)"


def counts(changes: list[ObjectChange]) -> str:
    """``5 removed, 8 changed`` (added, removed, changed; those with none left out)."""
    n: Counter[str] = Counter(o.change for o in changes)
    return ", ".join(f"{n[c]} {c}" for c in ("added", "removed", "changed") if n[c])


def objects_summary(fr: FleetReview) -> str:
    """The summary line's part on cluster objects (plain text): the fleet's object changes
    and each stack's that holds objects of its own, counted together, with each stack's
    (and the fleet-wide ones beside them) in parentheses: ``13 cluster objects change
    (stack example-eu: 5 removed, 8 changed)``; a stack that could not be compared says so."""
    own = [s for s in fr.stacks if s.objects or s.error]
    total = len(fr.objects) + sum(len(s.objects) for s in own)
    text = f"{total} cluster object{'' if total == 1 else 's'} change"
    if not own:
        return text
    parts = [f"fleet-wide: {counts(fr.objects)}"] if fr.objects else []
    parts += [f"stack {s.stack}: {counts(s.objects) if not s.error else 'not compared'}" for s in own]
    return f"{text} ({'; '.join(parts)})"


def stack_flags(raiser: FlagRaiser, fr: FleetReview, base_fleet: str) -> None:
    """``stack-target-changed``: a stack of ``fr``'s fleet (named ``base_fleet`` at the
    base) at both sides whose ``kubernetes:context`` changes (added or removed too: none is
    the kubeconfig's current context) or that moves to or from another fleet (its
    ``swarm:fleet`` following a renamed fleet is no move: ``fleet-renamed`` says that). Its
    next ``pulumi up`` updates the cluster of another context, or puts another fleet's
    objects in its cluster; either way the cluster the stack's state describes is no
    longer the one it updates. Judged by the base's ReviewPolicy."""
    for sc in fr.stacks:
        b, a = sc.before, sc.after
        if b is None or a is None:
            continue
        what = []
        if b.context != a.context:
            what.append(
                f"its kubernetes:context {_context(b.context)} → {_context(a.context)}: `pulumi up` would "
                f"update the cluster of context {_context(a.context)}, while the stack's state records its "
                f"objects in that of {_context(b.context)}"
            )
        if (b.fleet, a.fleet) != (base_fleet, fr.fleet) and b.fleet != a.fleet:
            what.append(
                f"its swarm:fleet {b.fleet} → {a.fleet}: `pulumi up` would replace {b.fleet}'s objects in "
                f"its cluster (context {_context(a.context)}) with {a.fleet}'s"
            )
        if what:
            raiser.raise_flag(
                STACK_TARGET_CHANGED,
                f"stack {sc.stack} ({sc.file}, sites: {_sites(a)}) changes the cluster it applies to: "
                + "; ".join(what)
                + "; check that it is this stack's cluster, and what is left in the other",
                sc.where,
            )
