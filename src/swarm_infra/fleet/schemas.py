"""The document kinds' JSON Schemas (Draft 2020-12, in ``schemas/``) and checking against them.

Validation uses ``jsonschema_rs`` (a Draft 2020-12 implementation in Rust, ~80x faster
than python-jsonschema on this fleet's documents, see ``benchmarks/``); python-jsonschema
checks the schemas themselves against the meta-schema in the tests.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from functools import cache
from importlib import resources
from itertools import islice
from pathlib import Path
from typing import Any, cast

import jsonschema_rs

from .diagnostics import Finding, PathPart, excerpt
from .loader import RawDocument

API_VERSION = "swarm.io/v1alpha1"
BASE_URI = "https://swarm.io/schemas/v1alpha1/"
# kind -> schema file; the order is the order kinds are listed to users.
KINDS: dict[str, str] = {
    "Site": "site.schema.json",
    "Node": "node.schema.json",
    "GpuProfile": "gpuprofile.schema.json",
    "HostProfile": "hostprofile.schema.json",
    "Assignment": "assignment.schema.json",
    "Mesh": "mesh.schema.json",
    "MeshAddresses": "meshaddresses.schema.json",
    "Priority": "priority.schema.json",
    "Allocation": "allocation.schema.json",
    "Storage": "storage.schema.json",
    "Rollout": "rollout.schema.json",
    "RayCluster": "raycluster.schema.json",
    "Cluster": "cluster.schema.json",
    "ReviewPolicy": "reviewpolicy.schema.json",
    "LatencyMatrix": "latencymatrix.schema.json",
    "NodeAcceptance": "nodeacceptance.schema.json",
}
SHARED = ("common.schema.json",)
MAX_ERRORS_PER_DOCUMENT = 100  # schema findings listed for one document; the rest are counted
# One value, one finding: when a value breaks several keywords (too long *and* the wrong
# characters), the one that says most about what the field is comes first.
_RANK = {k: i for i, k in enumerate(("type", "const", "enum", "format", "pattern", "propertyNames", "anyOf"))}


def schema_dir() -> Path:
    """Directory holding the schema files: inside the installed wheel, else the repo's ``schemas/``."""
    packaged = resources.files("swarm_infra") / "schemas"
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parents[3] / "schemas"


@cache
def load_schema(filename: str) -> dict[str, Any]:
    """One schema file as a dict. Raises ``FileNotFoundError`` if the install lacks it."""
    return cast("dict[str, Any]", json.loads((schema_dir() / filename).read_text(encoding="utf-8")))


@cache
def _validators() -> dict[str, Any]:
    registry = jsonschema_rs.Registry([(BASE_URI + f, load_schema(f)) for f in SHARED])
    return {
        kind: jsonschema_rs.Draft202012Validator(load_schema(f), registry=registry, validate_formats=True)
        for kind, f in KINDS.items()
    }


def _subschema(kind: str, schema_path: list[PathPart]) -> Any:
    # Paths of errors found through a $ref start in the referenced (shared) schema.
    for root in (load_schema(KINDS[kind]), *(load_schema(f) for f in SHARED)):
        node: Any = root
        try:
            for part in schema_path:
                node = node[part]
        except (KeyError, IndexError, TypeError):
            continue
        return node
    return None


def _describe_alternative(alt: dict[str, Any]) -> str:
    if "required" in alt:
        return ", ".join(alt["required"])
    kind: str = alt.get("type", "value")
    if kind == "array":
        item: str = alt.get("items", {}).get("type", "value")
        return "a list of " + item + "s"
    return {"integer": "an integer", "string": "a string"}.get(kind, kind)


_ARTICLE = {"integer": "an integer", "object": "a mapping", "array": "a list", "string": "a string"}


def _expected_types(types: Any) -> str:
    names = [getattr(t, "value", t) for t in (types if isinstance(types, list | tuple) else [types])]
    return " or ".join(_ARTICLE.get(n, f"a {n}") for n in map(str, names))


def _what(value: Any) -> str:
    """A value for a message: what it is, then an excerpt of it."""
    kind = {bool: "boolean", int: "integer", float: "number", str: "string", list: "list", dict: "mapping"}
    if value is None:
        return "null"
    name = kind.get(type(value), type(value).__name__)
    if isinstance(value, list | dict) and len(value) > 8:
        return f"a {name} of {len(value)} items"
    return f"{name} {excerpt(value)}"


def _message(kind: str, error: Any) -> str:
    """The message for one schema error: what was expected and what the value is, with the
    value cut short (the validator's own message repeats the whole value)."""
    keyword = error.schema_path[-1] if error.schema_path else ""
    instance = error.instance
    if keyword == "anyOf":
        alternatives = _subschema(kind, list(error.schema_path))
        if isinstance(alternatives, list):
            options = [_describe_alternative(a) for a in alternatives]
            if all("required" in a for a in alternatives):
                return "expected at least one of: " + "; ".join(options)
            return f"{excerpt(instance)} is not valid: expected " + " or ".join(options)
    if keyword == "enum":
        allowed = _subschema(kind, list(error.schema_path))
        if isinstance(allowed, list):
            return f"{excerpt(instance)} is not one of: " + ", ".join(map(str, allowed))
    name = type(error.kind).__name__
    try:
        params = error.kind.as_dict()
    except Exception:  # a kind without parameters
        params = {}
    limit = params.get("limit")
    if name == "PropertyNames" and params.get("error") is not None:
        inner = params["error"]
        return f"key {excerpt(inner.instance)}: {_message(kind, inner)}"
    if name == "Type":
        return f"expected {_expected_types(params.get('types', []))}, got {_what(instance)}"
    if name == "Pattern":
        where = _subschema(kind, list(error.schema_path)[:-1])
        about = where.get("description", "") if isinstance(where, dict) else ""
        about = f" ({about.split('. ')[0].rstrip('.')})" if about else ""
        return f"{excerpt(instance)} does not match the pattern {params.get('pattern')}{about}"
    if name in ("Minimum", "Maximum", "ExclusiveMinimum", "ExclusiveMaximum"):
        relation = {
            "Minimum": "at least",
            "Maximum": "at most",
            "ExclusiveMinimum": "above",
            "ExclusiveMaximum": "below",
        }[name]
        return f"expected a value {relation} {limit}, got {excerpt(instance)}"
    if name in ("MinLength", "MaxLength"):
        relation = "at least" if name == "MinLength" else "at most"
        return f"expected {relation} {limit} characters, got {len(instance)}: {excerpt(instance)}"
    if name in ("MinItems", "MaxItems", "MinProperties", "MaxProperties"):
        relation = "at least" if name.startswith("Min") else "at most"
        what = "items" if name.endswith("Items") else "keys"
        return f"expected {relation} {limit} {what}, got {len(instance)}"
    if name == "AdditionalProperties":
        unexpected = list(params.get("unexpected", []))
        shown = ", ".join(excerpt(u, 40) for u in unexpected[:5])
        more = f" and {len(unexpected) - 5} more" if len(unexpected) > 5 else ""
        return f"unexpected key(s) {shown}{more}: not a field of this object"
    if name == "FalseSchema" and error.instance_path:
        return f"{excerpt(error.instance_path[-1])} is not allowed here"
    if name == "UniqueItems":
        return f"the list has repeated items: {excerpt(instance)}"
    if name == "Format":
        return f"{excerpt(instance)} is not a valid {params.get('format')}"
    if name == "Constant":
        return f"expected {excerpt(params.get('expected_value'))}, got {_what(instance)}"
    return excerpt(error.message, 300)[1:-1]


_INT64 = (-(2**63), 2**64 - 1)


def _non_json(data: Any, path: tuple[PathPart, ...] = ()) -> tuple[tuple[PathPart, ...], str] | None:
    """First value YAML produced that JSON cannot hold (a date, bytes, a set, a non-string
    key, a float that is not finite, an integer beyond 64 bits)."""
    if isinstance(data, dict):
        for key, value in data.items():
            if not isinstance(key, str):
                return path, f"key {excerpt(key)} ({type(key).__name__}) must be a string; quote it"
            found = _non_json(value, (*path, key))
            if found:
                return found
    elif isinstance(data, list):
        for i, value in enumerate(data):
            found = _non_json(value, (*path, i))
            if found:
                return found
    elif isinstance(data, float) and not math.isfinite(data):
        return path, f"{excerpt(data)} is not a number JSON can hold"
    elif isinstance(data, int) and not isinstance(data, bool) and not _INT64[0] <= data <= _INT64[1]:
        return path, f"integer {excerpt(data)} does not fit in 64 bits"
    elif not (data is None or isinstance(data, (str, int, float, bool))):
        return path, f"{type(data).__name__} value {excerpt(data)} is not a JSON value; quote it"
    return None


def _odd_numbers(
    data: Any, path: tuple[PathPart, ...], found: list[tuple[tuple[PathPart, ...], float]]
) -> Any:
    """``data`` with every integral float made fractional (``2.0`` -> ``2.5``) and every
    non-finite float made ``0.5``; ``found`` gets (path, original float) of each."""
    if isinstance(data, dict):
        return {k: _odd_numbers(v, (*path, k), found) for k, v in data.items()}
    if isinstance(data, list):
        return [_odd_numbers(v, (*path, i), found) for i, v in enumerate(data)]
    if isinstance(data, float) and (not math.isfinite(data) or data.is_integer()):
        found.append((path, data))
        return data + 0.5 if math.isfinite(data) else 0.5
    return data


def _float_findings(doc: RawDocument, validator: Any) -> tuple[list[Finding], set[tuple[PathPart, ...]]]:
    """Floats where the schema wants an integer (``count: 2.0``), and floats JSON cannot
    hold (``.nan``, ``.inf``): findings, and the paths they cover.

    JSON Schema counts 2.0 as an integer; here an integer must be written as one. The
    document is validated again with each integral float made fractional: a ``type`` error
    there is a field that wants an integer.
    """
    floats: list[tuple[tuple[PathPart, ...], float]] = []
    probe = _odd_numbers(doc.data, (), floats)
    findings: list[Finding] = []
    covered: set[tuple[PathPart, ...]] = set()
    for path, value in floats:
        if not math.isfinite(value):
            findings.append(
                Finding(doc.source, path, "schema.type", f"{excerpt(value)} is not a number JSON can hold")
            )
            covered.add(path)
    integral = {path: value for path, value in floats if math.isfinite(value)}
    if integral:
        for error in validator.iter_errors(probe):
            path = tuple(error.instance_path)
            keyword = error.schema_path[-1] if error.schema_path else ""
            if path in integral and path not in covered and keyword in ("type", "anyOf"):
                value = integral[path]
                findings.append(
                    Finding(
                        doc.source,
                        path,
                        "schema.type",
                        f"expected an integer, got the float {value!r}; write {int(value)}",
                    )
                )
                covered.add(path)
    return findings, covered


def check_document(doc: RawDocument) -> Iterator[Finding]:
    """Every schema finding for one document (empty when it is valid).

    The envelope is checked first: a document that is not a mapping, or whose ``kind``
    is unknown, yields one finding and is not checked further. At most
    :data:`MAX_ERRORS_PER_DOCUMENT` findings are listed per document.
    """
    data = doc.data
    if not isinstance(data, dict):
        yield Finding(
            doc.source,
            (),
            "schema.type",
            f"a document must be a mapping with apiVersion, kind, metadata and spec, got {_what(data)}",
        )
        return
    kind = data.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:
        where: tuple[PathPart, ...] = ("kind",) if "kind" in data else ()
        yield Finding(
            doc.source,
            where,
            "schema.kind",
            f"unknown kind {excerpt(kind)}; expected one of: " + ", ".join(KINDS),
        )
        return
    validator = _validators()[kind]
    try:
        errors = list(islice(validator.iter_errors(data), MAX_ERRORS_PER_DOCUMENT + 1))
        floats, covered = _float_findings(doc, validator) if doc.odd_numbers else ([], set())
    except ValueError:
        found = _non_json(data)
        path, message = found if found else ((), "document holds a value that is not JSON")
        yield Finding(doc.source, path, "schema.type", message)
        return
    findings = list(floats)
    best: dict[tuple[PathPart, ...], tuple[int, Any, str]] = {}
    for error in errors:
        path = tuple(error.instance_path)
        if path in covered:
            continue  # the float finding says what is wrong there
        keyword = next((p for p in reversed(error.schema_path) if isinstance(p, str)), "schema")
        rank = _RANK.get(keyword, len(_RANK))
        if path not in best or rank < best[path][0]:
            best[path] = (rank, error, keyword)
    for path, (_, error, keyword) in best.items():
        findings.append(Finding(doc.source, path, f"schema.{keyword}", _message(kind, error)))
    if len(findings) > MAX_ERRORS_PER_DOCUMENT:
        last = findings[MAX_ERRORS_PER_DOCUMENT - 1]
        findings[MAX_ERRORS_PER_DOCUMENT - 1] = Finding(
            last.source,
            last.path,
            last.rule,
            f"{last.message} (the document has more schema errors; "
            f"the first {MAX_ERRORS_PER_DOCUMENT} are listed)",
        )
        findings = findings[:MAX_ERRORS_PER_DOCUMENT]
    yield from findings
