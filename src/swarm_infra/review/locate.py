"""Which lines of the fleet a change consists of, so that every finding can name them.

:class:`ChangeIndex` compares the documents of both snapshots by (kind, name): a document
only one side has is added or removed (its first line, at head or base); a changed one is
compared field by field and each changed field located in the head file with the loader's
line marks (:func:`swarm_infra.fleet.marks.locate_all`, which composes only the files that
changed). Findings then ask for the changed lines of the documents behind them.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from typing import Any, Literal, cast

from ..fleet.diagnostics import Diagnostic, Finding, PathPart
from ..fleet.marks import locate_all
from .load import DocKey, ParseCache, Snapshot, chunks
from .model import Location

MAX_PATHS_PER_DOCUMENT = 20  # changed fields located per document (the first, in document order)
MAX_LOCATIONS = 4  # lines a finding names


def _raw_paths(before: Any, after: Any, path: tuple[PathPart, ...] = ()) -> Iterator[tuple[PathPart, ...]]:
    """Paths in ``after`` (a parsed YAML document) where it differs from ``before``: keys of
    mappings, list items by index when both lists have the same length or by ``name``
    when their items have one, else the list itself; a key only ``before`` has is its parent."""
    if before == after:
        return
    if isinstance(before, dict) and isinstance(after, dict):
        for k in after:
            if k not in before:
                yield (*path, k)
            elif before[k] != after[k]:
                yield from _raw_paths(before[k], after[k], (*path, k))
        if any(k not in after for k in before):
            yield path
        return
    if isinstance(before, list) and isinstance(after, list):
        if len(before) == len(after):
            for i, (b, a) in enumerate(zip(before, after, strict=True)):
                yield from _raw_paths(b, a, (*path, i))
            return
        names = [x.get("name") if isinstance(x, dict) else None for x in after]
        if all(isinstance(n, str) for n in names):
            old = {x.get("name"): x for x in before if isinstance(x, dict)}
            for i, item in enumerate(after):
                yield from _raw_paths(old.get(item["name"]), item, (*path, i))
            return
    yield path


def _starts(path: tuple[PathPart, ...], prefix: tuple[PathPart, ...]) -> bool:
    return path[: len(prefix)] == prefix or prefix[: len(path)] == path


def _locate(files: Sequence[list[Finding]]) -> list[Diagnostic]:
    """:func:`~swarm_infra.fleet.marks.locate_all` of each file's findings, one file after
    the other, in a worker of the review's pool (the cyclic GC off: a composed graph all
    survives until it is answered)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return [d for findings in files for d in locate_all(findings)]
    finally:
        if was_enabled:
            gc.enable()


class ChangeIndex:
    """The changed documents of two snapshots and the lines of their changes.

    Made as soon as both snapshots' documents are read (:func:`~.load.read_snapshot`):
    with ``submit`` (the review's worker pool, :meth:`~.load.ParseCache.submit`) each
    changed file is composed for its line marks in a worker while this process validates
    and resolves the base and compares the two states; :attr:`changed` waits for them the
    first time it is read. Without a pool (a small fleet) the lines are located here."""

    def __init__(
        self,
        base: Snapshot,
        head: Snapshot,
        submit: Callable[..., Future[list[Diagnostic]] | None] | None = None,
    ) -> None:
        self.base, self.head = base, head
        self._changed: dict[DocKey, list[tuple[tuple[PathPart, ...], Location]]] = {}
        findings: list[tuple[DocKey, Finding, Snapshot, bool]] = []  # (key, finding, side, whole document)
        for key in sorted(base.documents.keys() | head.documents.keys()):
            b, h = base.documents.get(key), head.documents.get(key)
            if b is not None and h is not None and (b.data is h.data or b.data == h.data):
                continue
            self._changed[key] = []
            if b is None or h is None:  # added or removed: the line of its name, at head or base
                doc, side = (h, head) if h is not None else (b, base)
                assert doc is not None
                findings.append(
                    (key, Finding(doc.source, ("metadata", "name"), "review.change", ""), side, True)
                )
                continue
            for i, path in enumerate(_raw_paths(b.data, h.data)):
                if i == MAX_PATHS_PER_DOCUMENT:
                    break
                findings.append((key, Finding(h.source, path, "review.change", ""), head, False))
        # locate_all answers file by file, in the order files first appear: keep them together.
        findings.sort(key=lambda kf: kf[1].source.file)
        self._findings = findings
        by_file: dict[str, list[Finding]] = {}
        for _, f, _, _ in findings:
            by_file.setdefault(f.source.file, []).append(f)
        self._pending: list[Future[list[Diagnostic]]] | None = None
        if submit is not None and len(by_file) > 1:
            # In as many jobs as leave this process a core of its own: it validates and
            # resolves the base meanwhile, the longer task.
            futures = [submit(_locate, part) for part in chunks(list(by_file.values()), ParseCache.workers())]
            if all(f is not None for f in futures):
                self._pending = cast(list[Future[list[Diagnostic]]], futures)
        if self._pending is None:
            self._fill(locate_all(f for _, f, _, _ in findings))

    def _fill(self, located: Iterable[Diagnostic]) -> None:
        for (key, finding, side, whole), diag in zip(self._findings, located, strict=True):
            ref: Literal["base", "head"] = "head" if side is self.head else "base"
            loc = Location(side.rel(diag.file), diag.line, ref, side.commit)
            self._changed[key].append(((() if whole else finding.path), loc))
        self._findings = []

    @property
    def changed(self) -> dict[DocKey, list[tuple[tuple[PathPart, ...], Location]]]:
        """The changed documents, each with its changed paths and their lines (a path ``()``:
        the whole document, added or removed)."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            self._fill(d for f in pending for d in f.result())
        return self._changed

    def where(self, kind: str, name: str | None = None, under: tuple[PathPart, ...] = ()) -> list[Location]:
        """Lines of the changed documents of ``kind`` (named ``name``, or all), only those
        at or under ``under`` inside a changed document when given (or the whole document
        when it was added or removed)."""
        out: list[Location] = []
        for (k, n), entries in self.changed.items():
            if k == kind and (name is None or n == name):
                out += [loc for path, loc in entries if not path or _starts(path, under)]
        return out

    def all(self) -> list[Location]:
        """Every changed line."""
        return [loc for entries in self.changed.values() for _, loc in entries]

    def index_of(self, kind: str, name: str, list_path: tuple[str, ...], item: str) -> int | None:
        """The index of the item named ``item`` in the list at ``list_path`` of document
        (kind, name) at head (``spec.queues`` of the Allocation), or None."""
        doc = self.head.documents.get((kind, name))
        node: Any = doc.data if doc else None
        for part in list_path:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, list):
            for i, x in enumerate(node):
                if isinstance(x, dict) and x.get("name") == item:
                    return i
        return None


def pick(*candidates: Iterable[Location], fallback: Iterable[Location] = ()) -> list[Location]:
    """The first :data:`MAX_LOCATIONS` distinct locations of the first non-empty candidate
    list (each in file and line order), else of ``fallback``."""
    for group in (*candidates, fallback):
        found = sorted(set(group))
        if found:
            return found[:MAX_LOCATIONS]
    return []
