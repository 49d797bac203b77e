"""A fleet at one Git ref: validated, resolved, and its cluster objects built.

Both refs of a review share most files. :class:`ParseCache` parses each file content (a
Git blob) once: the second ref only parses the files the change touched, and reuses the
documents of the others with their new file name.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from ..cluster import build
from ..cluster.meta import K8sObject
from ..fleet.diagnostics import Diagnostic, Report, Source
from ..fleet.loader import RawDocument, load_documents
from ..resolve import desired_state, validate
from ..resolve.analysis import Analysis
from ..resolve.types import DesiredState
from ..resolve.validate import DocumentLoader
from .git import REGULAR_MODES, TreeFile, extract, fleet_dirs

ObjectKey = tuple[str, str, str, str]  # apiVersion, kind, namespace ("" when cluster-scoped), name
DocKey = tuple[str, str]  # kind, metadata.name


class ParseCache:
    """Parsed documents by Git blob id, shared by the refs of one review.

    Only regular files are cached: a symbolic link's blob is its target's name, not the
    content read through it.
    """

    def __init__(self) -> None:
        self._parsed: dict[str, tuple[str, list[RawDocument], list[Diagnostic]]] = {}

    def loader(self, root: Path, files: dict[str, TreeFile]) -> DocumentLoader:
        """A document loader for the validator, for files extracted under ``root`` whose
        repository-relative paths and blobs are ``files``."""

        def load(paths: Sequence[Path]) -> tuple[list[RawDocument], list[Diagnostic]]:
            fresh: list[Path] = []
            blobs: dict[str, str] = {}
            for p in paths:
                entry = files.get(os.path.relpath(p, root))
                if entry is not None and entry.mode in REGULAR_MODES:
                    blobs[str(p)] = entry.blob
                if str(p) not in blobs or blobs[str(p)] not in self._parsed:
                    fresh.append(p)
            if fresh:
                docs, diags = load_documents(fresh)
                by_file: dict[str, tuple[list[RawDocument], list[Diagnostic]]] = {
                    str(p): ([], []) for p in fresh
                }
                for d in docs:
                    by_file[d.source.file][0].append(d)
                for g in diags:
                    by_file.setdefault(g.file, ([], []))[1].append(g)
                for name, (file_docs, file_diags) in by_file.items():
                    if name in blobs:
                        self._parsed[blobs[name]] = (name, file_docs, file_diags)
            else:
                by_file = {}
            out_docs: list[RawDocument] = []
            out_diags: list[Diagnostic] = []
            for p in paths:
                name = str(p)
                if name in by_file:
                    out_docs += by_file[name][0]
                    out_diags += by_file[name][1]
                    continue
                _, cached_docs, cached_diags = self._parsed[blobs[name]]
                out_docs += [
                    dataclasses.replace(d, source=Source(name, d.source.index, d.source.line))
                    for d in cached_docs
                ]
                out_diags += [dataclasses.replace(g, file=name) for g in cached_diags]
            return out_docs, out_diags

        return load


@dataclass
class Snapshot:
    """Fleet ``fleet`` at commit ``commit``: what the validator said, and when it is valid,
    the analysis, the desired state and the cluster objects by :data:`ObjectKey`.

    File names in ``report`` and in the documents' sources are under ``root`` (a temporary
    directory); :meth:`rel` gives the repository-relative name. ``documents`` are the
    schema-valid-looking documents by (kind, name), first of duplicates kept.
    """

    fleet: str
    commit: str
    root: Path
    exists: bool
    report: Report
    analysis: Analysis | None = None
    state: DesiredState | None = None
    objects: dict[ObjectKey, K8sObject] | None = None
    objects_error: str | None = None
    documents: dict[DocKey, RawDocument] = dataclasses.field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return self.state is not None

    def rel(self, file: str) -> str:
        """``file`` relative to the repository (as the pull request names it)."""
        prefix = str(self.root) + os.sep
        return file[len(prefix) :] if file.startswith(prefix) else file


def object_key(obj: K8sObject) -> ObjectKey:
    meta = obj["metadata"]
    return (obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"])


def _documents(docs: list[RawDocument]) -> dict[DocKey, RawDocument]:
    out: dict[DocKey, RawDocument] = {}
    for d in docs:
        data: Any = d.data
        if (
            isinstance(data, dict)
            and isinstance(data.get("kind"), str)
            and isinstance(data.get("metadata"), dict)
        ):
            name = data["metadata"].get("name")
            if isinstance(name, str):
                out.setdefault((data["kind"], name), d)
    return out


def load_snapshot(
    repo: Path, commit: str, fleet: str, files: dict[str, TreeFile], root: Path, cache: ParseCache
) -> Snapshot:
    """Extract the fleet directories of ``commit`` under ``root`` and validate fleet
    ``fleet`` there; when valid, resolve it and build its cluster objects.

    ``exists`` is False when the commit has no ``inventory/FLEET`` (a fleet the change
    adds or removes): the snapshot is then empty and valid. Raises
    :class:`~swarm_infra.review.git.GitError` when git fails.
    """
    dirs = fleet_dirs(fleet)
    if not any(p.startswith(dirs[0] + "/") for p in files):
        # No fleet on this side: no cluster and no rollout (review reads both as optional).
        empty = cast(DesiredState, {"nodes": {}, "cluster": None, "rollout": None})
        return Snapshot(fleet, commit, root, False, Report([]), state=empty, objects={})
    problems = extract(repo, commit, files, root)
    paths = [root / d for d in dirs if (root / d).is_dir()]
    captured: list[RawDocument] = []
    base_load = cache.loader(root, files)

    def load(found: Sequence[Path]) -> tuple[list[RawDocument], list[Diagnostic]]:
        docs, diags = base_load(found)
        captured.extend(docs)
        return docs, diags

    result = validate(paths, load=load)
    report = Report(
        [*(dataclasses.replace(p, file=str(root / p.file)) for p in problems), *result.report.diagnostics]
    )
    snap = Snapshot(fleet, commit, root, True, report, documents=_documents(captured))
    if not report.ok or result.analysis is None:
        return snap
    snap.analysis = result.analysis
    snap.state = desired_state(result.analysis)
    try:
        snap.objects = {object_key(o): o for o in build(snap.state).all()}
    except ValueError as exc:  # a mesh topology too large for one ConfigMap
        snap.objects, snap.objects_error = {}, str(exc)
    return snap
