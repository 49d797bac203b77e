"""Read fleet files: find them, parse YAML fast, report syntax errors with their position.

Parsing uses libyaml (``yaml.CSafeLoader``) without keeping marks, because marks cost
~3x the parse time and are needed only when something is wrong; :mod:`swarm_infra.marks`
re-reads just the files that have findings. Files are parsed in a process pool when the
fleet is large (the parse is CPU-bound and the GIL would serialise threads).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .diagnostics import Diagnostic, Source

try:
    _Loader: type = yaml.CSafeLoader
except AttributeError:  # PyYAML built without libyaml: correct, only slower
    _Loader = yaml.SafeLoader

YAML_SUFFIXES = (".yaml", ".yml")
# Below this many bytes a process pool costs more (fork + pickling) than it saves.
PARALLEL_MIN_BYTES = 2 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class RawDocument:
    """One parsed YAML document and where it came from. ``data`` is untrusted."""

    source: Source
    data: Any


def find_files(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Expand files and directories (recursively) into a sorted list of YAML files.

    Raises ``FileNotFoundError`` for a path that does not exist.
    """
    found: set[Path] = set()
    for p in map(Path, paths):
        if p.is_dir():
            found.update(f for f in p.rglob("*") if f.suffix in YAML_SUFFIXES and f.is_file())
        elif p.is_file():
            found.add(p)
        else:
            raise FileNotFoundError(f"no such file or directory: {p}")
    return sorted(found)


def _parse(path: str, text: str) -> tuple[list[Any], Diagnostic | None]:
    try:
        return list(yaml.load_all(text, Loader=_Loader)), None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line, col = (mark.line + 1, mark.column + 1) if mark else (0, 0)
        problem = getattr(exc, "problem", None) or str(exc)
        return [], Diagnostic(path, line, col, "$", "yaml.syntax", f"invalid YAML: {problem}")


def _parse_file(path: str) -> tuple[list[Any], Diagnostic | None]:
    # The parse allocates hundreds of thousands of small objects that all survive;
    # the cyclic GC would rescan them repeatedly for nothing.
    gc.disable()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return [], Diagnostic(path, 0, 0, "$", "file.unreadable", str(exc))
    return _parse(path, text)


def load_documents(files: Sequence[Path]) -> tuple[list[RawDocument], list[Diagnostic]]:
    """Parse every file; return documents in file order and any syntax diagnostics.

    A file with a syntax error contributes no documents (the parse stops at the error)
    and one ``yaml.syntax`` diagnostic with the line and column libyaml reports.
    Empty documents (a trailing ``---``) are skipped.
    """
    names = [str(f) for f in files]
    total = sum(f.stat().st_size for f in files)
    gc_was_enabled = gc.isenabled()
    try:
        if total >= PARALLEL_MIN_BYTES and len(files) > 1 and (os.cpu_count() or 1) > 1:
            workers = min(os.cpu_count() or 1, len(files))
            with ProcessPoolExecutor(workers) as pool:
                results = list(pool.map(_parse_file, names, chunksize=max(1, len(names) // 64)))
        else:
            results = [_parse_file(n) for n in names]
    finally:
        if gc_was_enabled:
            gc.enable()
    docs: list[RawDocument] = []
    diags: list[Diagnostic] = []
    for name, (parsed, diag) in zip(names, results, strict=True):
        if diag is not None:
            diags.append(diag)
        docs.extend(RawDocument(Source(name, i), data) for i, data in enumerate(parsed) if data is not None)
    return docs, diags
