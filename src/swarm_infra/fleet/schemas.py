"""The document kinds' JSON Schemas (Draft 2020-12, in ``schemas/``) and checking against them.

Validation uses ``jsonschema_rs`` (a Draft 2020-12 implementation in Rust, ~80x faster
than python-jsonschema on this fleet's documents, see ``benchmarks/``); python-jsonschema
checks the schemas themselves against the meta-schema in the tests.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema_rs

from .diagnostics import Finding, PathPart
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
    "Priority": "priority.schema.json",
    "Allocation": "allocation.schema.json",
    "Storage": "storage.schema.json",
    "Rollout": "rollout.schema.json",
    "RayCluster": "raycluster.schema.json",
    "Cluster": "cluster.schema.json",
}
SHARED = ("common.schema.json",)


def schema_dir() -> Path:
    """Directory holding the schema files: inside the installed wheel, else the repo's ``schemas/``."""
    packaged = resources.files("swarm_infra") / "schemas"
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parents[3] / "schemas"


@cache
def load_schema(filename: str) -> dict[str, Any]:
    """One schema file as a dict. Raises ``FileNotFoundError`` if the install lacks it."""
    return json.loads((schema_dir() / filename).read_text(encoding="utf-8"))


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
    kind = alt.get("type", "value")
    if kind == "array":
        return "a list of " + alt.get("items", {}).get("type", "value") + "s"
    return {"integer": "an integer", "string": "a string"}.get(kind, kind)


def _message(kind: str, error: Any) -> str:
    keyword = error.schema_path[-1] if error.schema_path else ""
    if keyword == "anyOf":
        alternatives = _subschema(kind, list(error.schema_path))
        if isinstance(alternatives, list):
            options = [_describe_alternative(a) for a in alternatives]
            if all("required" in a for a in alternatives):
                return "expected at least one of: " + "; ".join(options)
            return f"{error.instance!r} is not valid: expected " + " or ".join(options)
    if keyword == "enum":
        allowed = _subschema(kind, list(error.schema_path))
        if isinstance(allowed, list):
            return f"{error.instance!r} is not one of: " + ", ".join(map(str, allowed))
    return error.message


def _non_json(data: Any, path: tuple[PathPart, ...] = ()) -> tuple[tuple[PathPart, ...], str] | None:
    """First value YAML produced that JSON cannot hold (a date, bytes, a non-string key)."""
    if isinstance(data, dict):
        for key, value in data.items():
            if not isinstance(key, str):
                return path, f"key {key!r} must be a string; quote it"
            found = _non_json(value, (*path, key))
            if found:
                return found
    elif isinstance(data, list):
        for i, value in enumerate(data):
            found = _non_json(value, (*path, i))
            if found:
                return found
    elif not (data is None or isinstance(data, (str, int, float, bool))):
        return path, f"{type(data).__name__} value {data!r} is not a JSON value; quote it"
    return None


def check_document(doc: RawDocument) -> Iterator[Finding]:
    """Every schema finding for one document (empty when it is valid).

    The envelope is checked first: a document that is not a mapping, or whose ``kind``
    is unknown, yields one finding and is not checked further.
    """
    data = doc.data
    if not isinstance(data, dict):
        yield Finding(
            doc.source,
            (),
            "schema.type",
            "a document must be a mapping with apiVersion, kind, metadata and spec",
        )
        return
    kind = data.get("kind")
    if kind not in KINDS:
        where: tuple[PathPart, ...] = ("kind",) if "kind" in data else ()
        yield Finding(
            doc.source,
            where,
            "schema.kind",
            f"unknown kind {kind!r}; expected one of: " + ", ".join(KINDS),
        )
        return
    try:
        errors = list(_validators()[kind].iter_errors(data))
    except ValueError:
        found = _non_json(data)
        path, message = found if found else ((), "document holds a value that is not JSON")
        yield Finding(doc.source, path, "schema.type", message)
        return
    for error in errors:
        keyword = next((p for p in reversed(error.schema_path) if isinstance(p, str)), "schema")
        yield Finding(doc.source, tuple(error.instance_path), f"schema.{keyword}", _message(kind, error))
