"""A fleet at one Git ref: validated, resolved, and its cluster objects built.

Both refs of a review share most files. :class:`ParseCache` parses each file content (a
Git blob) once: the second ref only parses the files the change touched, and reuses the
documents of the others with their new file name. For a large fleet it parses both refs'
files up front in worker processes (:meth:`ParseCache.prefetch`, after :func:`prepare`
wrote both trees), so that the base's files are parsed while the head is validated and
resolved.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast
from urllib.parse import urldefrag, urljoin

from ..cluster import build
from ..cluster.meta import K8sObject
from ..fleet.diagnostics import Diagnostic, Finding, PathPart, Report, Source, excerpt, json_path
from ..fleet.loader import PARALLEL_MIN_BYTES, RawDocument, find_files, load_documents, parse_file
from ..fleet.marks import locate_all
from ..fleet.schemas import BASE_URI, KINDS, SHARED, refuse_retrieval
from ..resolve import desired_state, validate
from ..resolve.analysis import Analysis
from ..resolve.types import DesiredState
from ..resolve.validate import DocumentLoader
from .git import REGULAR_MODES, GitError, TreeFile, extract, fleet_dirs, git, read_blobs

ObjectKey = tuple[str, str, str, str]  # apiVersion, kind, namespace ("" when cluster-scoped), name
DocKey = tuple[str, str]  # kind, metadata.name
T = TypeVar("T")


_Parsed = tuple[list[RawDocument], list[Diagnostic]]  # a file's documents and the loader's diagnostics


def _parse_files(names: list[str]) -> list[_Parsed]:
    """:func:`~swarm_infra.fleet.loader.parse_file` of each of ``names``, in a worker."""
    return [parse_file(name) for name in names]


def chunks(items: Sequence[T], n: int) -> list[Sequence[T]]:
    """``items`` in at most ``n`` consecutive, non-empty slices of about equal length."""
    n = max(1, min(n, len(items)))
    size, extra = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        end = start + size + (i < extra)
        out.append(items[start:end])
        start = end
    return [c for c in out if c]


class ParseCache:
    """Parsed documents by Git blob id, shared by the refs of one review.

    Only regular files are cached: a symbolic link's blob is its target's name, not the
    content read through it.
    """

    def __init__(self) -> None:
        self._parsed: dict[str, tuple[str, list[RawDocument], list[Diagnostic]]] = {}
        # Blobs being parsed by the pool: blob -> (the file name it is parsed as, the job, its
        # place in the job's results).
        self._pending: dict[str, tuple[str, Future[list[_Parsed]], int]] = {}
        self._pool: ProcessPoolExecutor | None = None

    def prefetch(self, sides: Sequence[tuple[Path, dict[str, TreeFile], Sequence[Path]]]) -> None:
        """Start parsing, in worker processes, the regular files of ``sides`` (each: the
        directory a ref's files were written under, their :class:`TreeFile` entries by
        repository-relative path, and the paths the validator will be given), each blob
        once, in order (the head's first): only when they add up to the loader's
        :data:`~swarm_infra.fleet.loader.PARALLEL_MIN_BYTES` (smaller fleets parse in
        this process when asked, as :func:`~swarm_infra.fleet.loader.load_documents`
        does). The loader then takes their documents as they come.

        The first side's files are parsed one job each, on every worker; the other sides'
        files in :meth:`workers` jobs (one on a 2-core machine), so that while this process
        validates and resolves the first side, one core stays its own."""
        cpus = os.cpu_count() or 1
        wanted: dict[str, str] = {}  # blob -> file name, in order
        first: set[str] = set()  # the blobs of the first side
        size = 0
        for i, (root, files, paths) in enumerate(sides):
            found, _ = find_files(paths)
            for p in found:
                entry = files.get(os.path.relpath(p, root))
                if entry is None or entry.mode not in REGULAR_MODES:
                    continue
                if entry.blob in self._parsed or entry.blob in self._pending or entry.blob in wanted:
                    continue
                wanted[entry.blob] = str(p)
                if i == 0:
                    first.add(entry.blob)
                with contextlib.suppress(OSError):
                    size += p.stat().st_size
        if cpus < 2 or len(wanted) < 2 or size < PARALLEL_MIN_BYTES:
            return
        if self._pool is None:
            self._pool = ProcessPoolExecutor(cpus)
        later: list[tuple[str, str]] = []
        for blob, name in wanted.items():
            if blob in first:
                self._pending[blob] = (name, self._pool.submit(_parse_files, [name]), 0)
            else:
                later.append((blob, name))
        for chunk in chunks(later, self.workers()):
            future = self._pool.submit(_parse_files, [name for _, name in chunk])
            for i, (blob, name) in enumerate(chunk):
                self._pending[blob] = (name, future, i)

    @staticmethod
    def workers() -> int:
        """How many jobs to split background work into while this process works too: all
        cores but one (at least one), so that this process keeps a core of its own."""
        return max(1, (os.cpu_count() or 1) - 1)

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T] | None:
        """Run ``fn(*args)`` in the worker processes :meth:`prefetch` started (a picklable
        module-level function), or None when there are none (a small fleet: the caller
        runs it here)."""
        return None if self._pool is None else self._pool.submit(fn, *args)

    def close(self) -> None:
        """Stop the worker processes (parses not started are dropped)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        self._pending.clear()

    def _collect(self, blob: str) -> None:
        """Move a prefetched blob's parse into the cache (waiting for it)."""
        name, future, i = self._pending.pop(blob)
        docs, diags = future.result()[i]
        self._parsed[blob] = (name, docs, diags)

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
                    if entry.blob in self._pending:
                        self._collect(entry.blob)
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
    parsed: list[RawDocument] = dataclasses.field(default_factory=list)  # every document read
    # What read_snapshot read and check_snapshot validates: the written tree, the files
    # found, their documents and the loader's diagnostics (None once checked).
    _read: tuple[Prepared, list[Path], list[RawDocument], list[Diagnostic]] | None = dataclasses.field(
        default=None, repr=False
    )

    resolve_error: str | None = None  # why an invalid snapshot could not be resolved (best effort)

    @property
    def valid(self) -> bool:
        """Valid and resolved (an invalid base resolved best effort is not valid)."""
        return self.report.ok and self.state is not None

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


@dataclass(frozen=True)
class Prepared:
    """A ref's fleet directories written under ``root`` (:func:`prepare`): the paths to
    validate, and the links that were not written (``file.outside-fleet``)."""

    root: Path
    paths: list[Path]
    problems: list[Diagnostic]


def prepare(repo: Path, fleet: str, commit: str, files: dict[str, TreeFile], root: Path) -> Prepared | None:
    """Write the fleet directories of ``commit`` under ``root``; None when the commit has
    no ``inventory/FLEET``. Raises :class:`~swarm_infra.review.git.GitError` when git fails."""
    dirs = fleet_dirs(fleet)
    if not any(p.startswith(dirs[0] + "/") for p in files):
        return None
    problems = extract(repo, commit, files, root)
    return Prepared(root, [root / d for d in dirs if (root / d).is_dir()], problems)


def read_snapshot(
    repo: Path,
    commit: str,
    fleet: str,
    files: dict[str, TreeFile],
    root: Path,
    cache: ParseCache,
    prepared: Prepared | None = None,
) -> Snapshot:
    """Extract the fleet directories of ``commit`` under ``root`` (unless ``prepared``
    already did) and parse their files: the snapshot's ``documents`` and ``parsed``, not
    yet validated (:func:`check_snapshot` does that, in place). The review compares the
    documents of both refs for the lines of the change while the base is validated.

    ``exists`` is False when the commit has no ``inventory/FLEET`` (a fleet the change
    adds or removes): the snapshot is then empty and valid (no check is needed). Raises
    :class:`~swarm_infra.review.git.GitError` when git fails.
    """
    if prepared is None:
        prepared = prepare(repo, fleet, commit, files, root)
    if prepared is None:
        # No fleet on this side: no cluster and no rollout (review reads both as optional).
        empty = cast(DesiredState, {"nodes": {}, "cluster": None, "rollout": None})
        return Snapshot(fleet, commit, root, False, Report([]), state=empty, objects={})
    snap = Snapshot(fleet, commit, prepared.root, True, Report([]))
    found, _ = find_files(prepared.paths)
    docs, diags = cache.loader(prepared.root, files)(found)
    snap.parsed = list(docs)
    snap.documents = _documents(docs)
    snap._read = (prepared, found, docs, diags)
    return snap


def check_snapshot(
    snap: Snapshot, cache: ParseCache, files: dict[str, TreeFile], best_effort: bool = False
) -> None:
    """Validate the snapshot :func:`read_snapshot` read (with the documents it parsed), and
    when valid, resolve it and build its cluster objects: ``report``, ``analysis``,
    ``state``, ``objects`` set in place. A snapshot with no fleet is left as it is.

    ``best_effort`` (the base of a review): an invalid snapshot is resolved too, from the
    documents that passed their schema, so that a review can still compare and flag what
    it can; when the resolver fails on it, ``resolve_error`` says why and ``state`` stays
    None. :attr:`Snapshot.valid` stays False either way."""
    if snap._read is None:
        return
    prepared, found, docs, diags = snap._read
    snap._read = None
    loader = cache.loader(prepared.root, files)

    def load(paths: Sequence[Path]) -> tuple[list[RawDocument], list[Diagnostic]]:
        if list(paths) == found:
            return docs, diags  # the validator looks for the same files: read once
        more, more_diags = loader(paths)
        snap.parsed.extend(more)
        snap.documents = _documents(snap.parsed)
        return more, more_diags

    result = validate(prepared.paths, load=load)
    root = prepared.root
    snap.report = Report(
        [
            *(dataclasses.replace(p, file=str(root / p.file)) for p in prepared.problems),
            *result.report.diagnostics,
        ]
    )
    if result.analysis is None:
        snap.resolve_error = "no document could be read"
        return
    if not snap.report.ok and not best_effort:
        return
    if snap.report.ok:
        _resolve(snap, result.analysis)
        return
    # The resolver and the builder expect a validated fleet: on an invalid one any of their
    # steps may fail, and the review then says that there is no plan diff, and why.
    try:
        _resolve(snap, result.analysis)
    except Exception as exc:  # any failure means: this base cannot be compared
        snap.analysis, snap.state, snap.objects = None, None, None
        snap.resolve_error = f"{type(exc).__name__}: {exc}"


def _resolve(snap: Snapshot, analysis: Analysis) -> None:
    snap.analysis = analysis
    snap.state = desired_state(analysis)
    try:
        snap.objects = {object_key(o): o for o in build(snap.state).all()}
    except ValueError as exc:  # a mesh topology too large for one ConfigMap
        snap.objects, snap.objects_error = {}, str(exc)


HEAD_SCHEMA_RULE = "review.head-schemas"  # a document the head's own schemas/ reject
_REF_KEYWORDS = ("$ref", "$dynamicRef", "$schema")  # the keywords whose value names another schema


def _schema_files(repo: Path, commit: str) -> dict[str, bytes]:
    """The ``*.json`` files directly or deeper in ``schemas/`` at ``commit`` (name below
    ``schemas/`` -> content), read from Git. Raises :class:`~swarm_infra.review.git.GitError`."""
    out = git(repo, "ls-tree", "-z", "--full-tree", commit, "--", "schemas/")
    blobs: dict[str, str] = {}
    for entry in out.split(b"\0"):
        meta, _, path = entry.partition(b"\t")
        if meta and meta.split()[1] == b"blob" and path.endswith(b".json"):
            blobs[path.decode("utf-8", "surrogateescape").removeprefix("schemas/")] = meta.split()[2].decode()
    contents = read_blobs(repo, list(blobs.values()))
    return {name: contents[blob] for name, blob in sorted(blobs.items())}


def _parse_schemas(files: dict[str, bytes]) -> dict[str, Any]:
    schemas: dict[str, Any] = {}
    for name, content in files.items():
        try:
            schemas[name] = json.loads(content)
        except ValueError as exc:
            raise ValueError(f"schemas/{name} is not JSON: {excerpt(str(exc), 200)}") from None
    return schemas


def schemas_at(repo: Path, commit: str) -> dict[str, Any]:
    """The JSON Schemas in ``schemas/`` at ``commit`` as data (file name -> parsed JSON),
    read from Git. Raises :class:`ValueError` naming a file that is not JSON, and
    :class:`~swarm_infra.review.git.GitError` when git fails."""
    return _parse_schemas(_schema_files(repo, commit))


def _references(schema: Any) -> Iterator[tuple[tuple[PathPart, ...], str]]:
    """(JSON path, value) of every string value of :data:`_REF_KEYWORDS` anywhere in
    ``schema`` (parsed JSON)."""
    stack: list[tuple[tuple[PathPart, ...], Any]] = [((), schema)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if key in _REF_KEYWORDS and isinstance(value, str):
                    yield (*path, key), value
                else:
                    stack.append(((*path, key), value))
        elif isinstance(node, list):
            stack.extend(((*path, i), v) for i, v in enumerate(node))


def _refused_at(
    uri: str, names: Sequence[str], schemas: dict[str, Any], texts: dict[str, bytes]
) -> tuple[str, int, str]:
    """(file, line, JSON path in the schema) of the reference that named ``uri`` (a URI
    jsonschema_rs asked the retriever for: absolute, without its fragment): the first of
    ``names`` with a reference that, resolved against the file's own URI, is ``uri``, at
    the first line holding it; else the first of ``names`` at line 0, path ``$`` (a
    reference below a nested ``$id``)."""
    for name in names:
        base = BASE_URI + name
        schema = schemas.get(name)
        own_id = schema.get("$id") if isinstance(schema, dict) else None
        if isinstance(own_id, str):
            base = urljoin(base, own_id)
        for path, ref in _references(schema):
            if urldefrag(urljoin(base, ref)).url != uri:
                continue
            needle = json.dumps(ref).encode()
            text = texts.get(name, b"")
            at = text.find(needle)
            return name, (text.count(b"\n", 0, at) + 1 if at >= 0 else 0), json_path(path)
    return names[0], 0, "$"


def head_schema_diagnostics(repo: Path, commit: str, docs: Sequence[RawDocument]) -> list[Diagnostic]:
    """Check ``docs`` (a fleet's documents at ``commit``) against the schemas in that
    commit's own ``schemas/``, read as data (the head's code is never run): one
    :data:`HEAD_SCHEMA_RULE` error diagnostic per failing value, with file and line. The
    reviewer's built-in schemas judge a pull request; this says what the head's schemas,
    once merged, will say. A kind with no schema file at ``commit``, or a schema set that
    cannot be loaded, is a diagnostic too (file ``schemas/``, line 0).

    Nothing is retrieved (:func:`~swarm_infra.fleet.schemas.refuse_retrieval`): a ``$ref``
    resolves only to the head's shared schemas (:data:`~swarm_infra.fleet.schemas.SHARED`
    under :data:`~swarm_infra.fleet.schemas.BASE_URI`), as the reviewer's own schemas do.
    An external one (``http://``, ``https://``, ``file://``, or a name that is not a shared
    schema) is a diagnostic at the schema file and line that names it, and the documents of
    that schema's kinds are not checked against it: the job holds the base's secrets, and
    nothing of the head may reach the network or the runner's files."""
    import jsonschema_rs  # the validator's own engine

    def whole(message: str) -> list[Diagnostic]:
        return [Diagnostic("schemas/", 0, 0, "$", HEAD_SCHEMA_RULE, excerpt(message, 400))]

    refused: list[str] = []  # the URIs jsonschema_rs asked for since the last failure

    def retrieve(uri: str) -> Any:
        refused.append(uri)
        return refuse_retrieval(uri)

    shared = ", ".join(BASE_URI + f for f in SHARED)

    def unloadable(names: Sequence[str], exc: Exception) -> list[Diagnostic]:
        """Why one of ``names`` (the schema files just built) could not be loaded."""
        if not refused:
            where = names[0] if names else ""
            return [
                Diagnostic(
                    f"schemas/{where}",
                    0,
                    0,
                    "$",
                    HEAD_SCHEMA_RULE,
                    f"the head's schemas/{where} cannot be loaded: {excerpt(str(exc), 300)}",
                )
            ]
        out: list[Diagnostic] = []
        for uri in dict.fromkeys(refused):
            name, line, where = _refused_at(uri, names, schemas, texts)
            out.append(
                Diagnostic(
                    f"schemas/{name}",
                    line,
                    0,
                    where,
                    HEAD_SCHEMA_RULE,
                    f"a reference to {excerpt(uri, 200)} was refused: the review reads the head's "
                    "schemas as data and retrieves nothing (no network, no file); a $ref may "
                    f"name only the shared schemas of schemas/ ({shared})",
                )
            )
        refused.clear()
        return out

    try:
        texts = _schema_files(repo, commit)
        schemas = _parse_schemas(texts)
    except (ValueError, GitError) as exc:
        return whole(f"the head's schemas cannot be loaded: {exc}")
    present = [f for f in SHARED if f in schemas]
    try:
        registry = jsonschema_rs.Registry([(BASE_URI + f, schemas[f]) for f in present], retriever=retrieve)
    except ValueError as exc:  # a shared schema that names what is not there
        return unloadable(present, exc)
    problems: list[Diagnostic] = []
    validators: dict[str, Any] = {}
    unloaded: set[str] = set()  # kinds whose schema could not be loaded (said once, above)
    for kind, f in KINDS.items():
        if f not in schemas:
            continue
        try:
            validators[kind] = jsonschema_rs.Draft202012Validator(
                schemas[f], registry=registry, retriever=retrieve, validate_formats=True
            )
        except ValueError as exc:
            problems += unloadable([f, *present], exc)
            unloaded.add(kind)
    findings: list[Finding] = []
    for doc in docs:
        data: Any = doc.data
        kind = str(data.get("kind")) if isinstance(data, dict) else ""
        if not isinstance(kind, str) or kind not in KINDS or kind in unloaded:
            continue  # the reviewer's own check reports an unknown kind
        validator = validators.get(kind)
        if validator is None:
            findings.append(
                Finding(
                    doc.source,
                    (),
                    HEAD_SCHEMA_RULE,
                    f"the head has no schema for kind {kind} (schemas/{KINDS[kind]})",
                )
            )
            continue
        try:
            seen: set[tuple[Any, ...]] = set()
            for error in validator.iter_errors(data):
                path = tuple(error.instance_path)
                if path in seen:
                    continue
                seen.add(path)
                findings.append(
                    Finding(
                        doc.source,
                        path,
                        HEAD_SCHEMA_RULE,
                        f"the head's schemas/{KINDS[kind]} rejects it: {excerpt(error.message, 300)}",
                    )
                )
        except ValueError as exc:
            if refused:  # a reference resolved only when a value reaches it
                problems += unloadable([KINDS[kind], *present], exc)
                unloaded.add(kind)
                continue
            # a value jsonschema_rs cannot take (the reviewer reports it)
            findings.append(Finding(doc.source, (), HEAD_SCHEMA_RULE, excerpt(str(exc), 300)))
    return problems + locate_all(findings)
