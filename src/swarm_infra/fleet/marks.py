"""Line and column for a JSON path inside a YAML document, computed only on demand.

:func:`locate_all` composes (parses to a node graph with marks) each file that has
findings, once, and walks each finding's path down the graph. When a path goes past
what the document holds (a *missing* required key), the deepest existing node is used,
which is where the user has to add it. Files are read and composed with the loader's
limits (:mod:`swarm_infra.fleet.loader`), as when they were first parsed.

A report prints at most :data:`~swarm_infra.fleet.diagnostics.SHOWN_PER_FILE` diagnostics
of a file, so only the findings of a file's first documents that fill that many are
located, and the file is composed only that far; the others keep their document's first
line (they are counted, not printed). A hostile file with an error in each of thousands
of documents is composed once more only up to its first few.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor

import yaml

from .diagnostics import SHOWN_PER_FILE, Diagnostic, Finding, PathPart, json_path
from .loader import PARALLEL_MIN_BYTES, FleetLoader, read


class _MarksLoader(FleetLoader):
    """Composes for positions only: tags are not needed, so none is resolved."""

    def resolve(self, kind: type, value: object, implicit: tuple[bool, bool]) -> str:
        return ""


def _node_mark(node: yaml.Node, path: tuple[PathPart, ...]) -> tuple[int, int, yaml.Node | None]:
    """Line and column of ``path`` in the graph ``node``, and the node the whole path leads
    to (None when the path goes past what the document holds)."""
    mark = node.start_mark
    reached: yaml.Node | None = node
    for part in path:
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                if key_node.value == str(part):
                    # Point at the key: that is the line a user reads as "the field".
                    mark = key_node.start_mark
                    node = value_node
                    break
            else:
                reached = None
                break
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if not 0 <= part < len(node.value):
                reached = None
                break
            node = node.value[part]
            mark = node.start_mark
        else:
            reached = None
            break
    return mark.line + 1, mark.column + 1, node if reached is not None else None


def _compose(file: str, last: int) -> list[yaml.Node | None]:
    """The node graphs of documents 0..``last`` of ``file`` (fewer if it has fewer)."""
    data, _ = read(file)
    if data is None:
        return []
    loader = _MarksLoader(data)
    docs: list[yaml.Node | None] = []
    gc_was_enabled = gc.isenabled()
    gc.disable()  # the graph is hundreds of thousands of objects that all survive
    try:
        while len(docs) <= last and loader.check_node():
            docs.append(loader.get_node())
    except yaml.YAMLError:
        return docs
    finally:
        loader.dispose()
        if gc_was_enabled:
            gc.enable()
    return docs


# What one file's located findings need: (document index, path, the document's first line,
# whether the source text of the plain scalar at the path is wanted).
_Wanted = list[tuple[int, tuple[PathPart, ...], int, bool]]
_Mark = tuple[int, int, str | None]  # line, column, the plain scalar's text (when wanted)


def _plain(node: yaml.Node | None) -> str | None:
    """An untagged plain (unquoted) scalar's source text; None for any other node (an
    explicit ``!!bool yes`` says what it means). libyaml's composer gives a plain scalar
    the style ``""``, PyYAML's own ``None``; :class:`_MarksLoader` resolves no tag, so an
    untagged node's tag is ``""``."""
    if isinstance(node, yaml.ScalarNode) and not node.style and not node.tag:
        return str(node.value)
    return None


def _marks(file: str, wanted: _Wanted) -> list[_Mark]:
    """Line and column of each of ``wanted`` in ``file`` (composed once, only as far as the
    located findings need), and the text of the plain scalar there when asked."""
    if not wanted:
        return []
    indices = sorted(i for i, _, _, _ in wanted)
    last = indices[min(len(indices), SHOWN_PER_FILE) - 1]
    docs = _compose(file, last)
    out: list[_Mark] = []
    for index, path, first, text in wanted:
        node = docs[index] if index <= last and index < len(docs) else None
        if node is None:
            out.append((first, 1 if first else 0, None))
            continue
        line, col, there = _node_mark(node, path)
        out.append((line, col, _plain(there) if text else None))
    return out


def _marks_job(job: tuple[str, _Wanted]) -> list[_Mark]:
    gc.disable()  # a worker's graphs all survive until it answers (see _compose)
    return _marks(*job)


def _size(file: str) -> int:
    try:
        return os.stat(file).st_size
    except OSError:
        return 0


def locate_all(findings: Iterable[Finding]) -> list[Diagnostic]:
    """Turn findings into diagnostics with 1-based line/column (and a finding's message
    reworded by its ``reword`` from the source text there); each file is read once,
    and only as far as its located findings need (see the module doc). Files that add up
    to :data:`~swarm_infra.fleet.loader.PARALLEL_MIN_BYTES` or more are composed in worker
    processes, as the loader parses them (the same answer, sooner)."""
    by_file: dict[str, list[Finding]] = {}
    for f in findings:
        by_file.setdefault(f.source.file, []).append(f)
    jobs = [
        (file, [(f.source.index, f.path, f.source.line, f.reword is not None) for f in found])
        for file, found in by_file.items()
    ]
    cpus = os.cpu_count() or 1
    if len(jobs) > 1 and cpus > 1 and sum(_size(file) for file in by_file) >= PARALLEL_MIN_BYTES:
        with ProcessPoolExecutor(min(cpus, len(jobs))) as pool:
            marks = list(pool.map(_marks_job, jobs, chunksize=max(1, len(jobs) // 64)))
    else:
        marks = [_marks(*job) for job in jobs]
    out: list[Diagnostic] = []
    for found, located in zip(by_file.values(), marks, strict=True):
        for f, (line, col, text) in zip(found, located, strict=True):
            message = f.message if f.reword is None or text is None else f.reword(text, f.message)
            out.append(Diagnostic(f.source.file, line, col, json_path(f.path), f.rule, message, f.severity))
    return out
