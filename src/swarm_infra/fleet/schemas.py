"""The document kinds' JSON Schemas (Draft 2020-12, in ``schemas/``) and checking against them.

Validation uses ``jsonschema_rs`` (a Draft 2020-12 implementation in Rust, ~80x faster
than python-jsonschema on this fleet's documents, see ``benchmarks/``); python-jsonschema
checks the schemas themselves against the meta-schema in the tests.

Nothing is retrieved: a ``$ref`` resolves only to a schema registered here (the files of
``schemas/`` under :data:`BASE_URI`). jsonschema_rs's default retriever would follow an
external ``$ref`` (``http://``, ``https://``, ``file://``) at validator construction;
:func:`refuse_retrieval` is passed instead, so validating never reaches the network or a
file outside ``schemas/`` (the review validates a pull request's own schemas with it).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from functools import cache, partial
from importlib import resources
from itertools import islice
from pathlib import Path
from typing import Any, cast

import jsonschema_rs

from .diagnostics import Finding, PathPart, Source, close_names, excerpt, json_path
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
# Files that are not fleet documents, checked against a schema of their own with the same
# validator and messages (:func:`check_file`): name -> schema file. The pull agent's settings
# (swarm_infra.agent.config), which the library renders (resolve.layers.host.agent_config).
AGENT_SETTINGS = "AgentSettings"
FILES: dict[str, str] = {AGENT_SETTINGS: "agentsettings.schema.json"}
MAX_ERRORS_PER_DOCUMENT = 100  # schema findings listed for one document; the rest are counted
# Every problem at a path is reported. A mapping's are findings of their own (keys missing,
# one of several alternatives missing, key names). A value's are one finding, one line per
# value: the keyword that says most about what the field is names it, and its message adds
# the others (too long *and* of the wrong characters). A value of the wrong type is that
# alone: the keywords that judge a value of another type would only repeat it.
_RANK = {k: i for i, k in enumerate(("type", "const", "enum", "format", "pattern", "propertyNames", "anyOf"))}
_OF_THE_MAPPING = frozenset(
    (
        "required",
        "dependentRequired",
        "propertyNames",
        "minProperties",
        "maxProperties",
        "additionalProperties",
    )
)
NAMED_UNKNOWN_KEYS = 5  # unknown keys of one mapping named each at its key; more: one finding at the mapping
_FIELDS_SHOWN = 12  # the most of a mapping's fields a message about an unknown key lists


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


REFUSED = "an external $ref is refused"  # what refuse_retrieval's error says, after the URI


def refuse_retrieval(uri: str) -> Any:
    """A jsonschema_rs ``retriever`` that retrieves nothing: raises :class:`ValueError`
    (``"<uri>: an external $ref is refused"``) for every ``uri`` it is asked for, which
    jsonschema_rs reports as a ``ValidationError`` (a ``ValueError``) from the Registry or
    validator being built. jsonschema_rs asks only for what its registry lacks, so only the
    schemas registered here resolve."""
    raise ValueError(f"{uri}: {REFUSED}")


@cache
def _validators() -> dict[str, Any]:
    registry = jsonschema_rs.Registry(
        [(BASE_URI + f, load_schema(f)) for f in SHARED], retriever=refuse_retrieval
    )
    return {
        kind: jsonschema_rs.Draft202012Validator(
            load_schema(f), registry=registry, retriever=refuse_retrieval, validate_formats=True
        )
        for kind, f in {**KINDS, **FILES}.items()
    }


def _subschema(kind: str, schema_path: list[PathPart]) -> Any:
    # Paths of errors found through a $ref start in the referenced (shared) schema.
    for root in (load_schema(KINDS.get(kind) or FILES[kind]), *(load_schema(f) for f in SHARED)):
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


def _fitting_branch(error: Any) -> tuple[int, list[Any]] | None:
    """(index, errors) of the one ``anyOf``/``oneOf`` branch whose type the value has (the
    others fail on ``type`` at the value itself): what it says is the useful part, the
    others' "not an integer", "not a list" are noise. None when no branch, or several, fit."""
    try:
        branches = error.kind.as_dict().get("context") or []
    except Exception:  # a kind without parameters
        return None
    here = list(error.instance_path)
    fitting = [
        (i, list(branch))
        for i, branch in enumerate(branches)
        if branch
        and not any(
            list(e.instance_path) == here and e.schema_path and e.schema_path[-1] == "type" for e in branch
        )
    ]
    return fitting[0] if len(fitting) == 1 else None


def _branch_message(kind: str, outer: Any, error: Any) -> str:
    """One error of a fitting branch, prefixed with where it is below the value when deeper."""
    below = list(error.instance_path)[len(outer.instance_path) :]
    return (f"at {json_path(below)[1:]}: " if below else "") + _message(kind, error)


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
    if keyword in ("anyOf", "oneOf"):
        alternatives = _subschema(kind, list(error.schema_path))
        if isinstance(alternatives, list):
            options = [_describe_alternative(a) for a in alternatives]
            if all("required" in a for a in alternatives):
                return "expected at least one of: " + "; ".join(options)
            text = f"{excerpt(instance)} is not valid: expected " + " or ".join(options)
            fitting = _fitting_branch(error)
            if fitting is not None and fitting[0] < len(options):
                index, branch = fitting
                text += f"; as {options[index]}: " + "; ".join(
                    _branch_message(kind, error, e) for e in branch
                )
            return text
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


def _unknown_keys(doc: RawDocument, kind: str, error: Any) -> tuple[list[Finding], set[str]]:
    """``additionalProperties: false``: a finding at each unknown key (the line a user has to
    fix), saying which field it is close to (``did you mean 'memory_gib'?``) or which fields
    there are; and the names suggested, whose own ``required`` finding would repeat it.
    More than :data:`NAMED_UNKNOWN_KEYS` unknown keys are one finding at the mapping that
    names a few: the mapping is not what it was meant to be (a wrong indentation, say)."""
    path = tuple(error.instance_path)
    try:
        unexpected = [str(k) for k in error.kind.as_dict().get("unexpected", [])]
    except Exception:  # a kind without parameters
        unexpected = []
    if not unexpected or len(unexpected) > NAMED_UNKNOWN_KEYS:
        return [Finding(doc.source, path, "schema.additionalProperties", _message(kind, error))], set()
    where = _subschema(kind, list(error.schema_path)[:-1])
    where = where if isinstance(where, dict) else {}
    fields = [str(k) for k in where.get("properties", {})]
    given = set(error.instance) if isinstance(error.instance, dict) else set()
    required = {str(k) for k in where.get("required", [])} - given
    candidates = [f for f in fields if f not in given]
    findings: list[Finding] = []
    suggested: set[str] = set()
    for key in unexpected:
        message = f"unexpected key {excerpt(key, 40)}: not a field of this object"
        guess = close_names(key, candidates)
        if guess:
            message += f"; did you mean {excerpt(guess[0])}?"
            if guess[0] in required:
                message += " (a required field, not given)"
                suggested.add(guess[0])
        elif fields:
            more = f" and {len(fields) - _FIELDS_SHOWN} more" if len(fields) > _FIELDS_SHOWN else ""
            message += f" (its fields: {', '.join(fields[:_FIELDS_SHOWN])}{more})"
        findings.append(Finding(doc.source, (*path, key), "schema.additionalProperties", message))
    return findings, suggested


def _findings(
    doc: RawDocument, kind: str, errors: list[Any], covered: set[tuple[PathPart, ...]]
) -> list[Finding]:
    """The findings of a document's schema errors, every problem at each path (see
    :data:`_RANK`): the keys a mapping lacks in one finding, unknown keys at the keys
    (:func:`_unknown_keys`), what is wrong with a value in one finding."""
    # path -> (rank, keyword, finding, whether it is about the mapping rather than the value)
    at: dict[tuple[PathPart, ...], list[tuple[int, str, Finding, bool]]] = {}
    missing: dict[tuple[PathPart, ...], list[str]] = {}  # required properties not given
    suggested: dict[tuple[PathPart, ...], set[str]] = {}  # ... that a "did you mean" names
    for error in errors:
        path = tuple(error.instance_path)
        if path in covered:
            continue  # the float finding says what is wrong there
        keyword = next((p for p in reversed(error.schema_path) if isinstance(p, str)), "schema")
        rank = _RANK.get(keyword, len(_RANK))
        name = type(error.kind).__name__
        if name == "AdditionalProperties":
            unknown, guessed = _unknown_keys(doc, kind, error)
            suggested.setdefault(path, set()).update(guessed)
            for f in unknown:
                at.setdefault(f.path, []).append((rank, keyword, f, True))
            continue
        required = _required(error) if name == "Required" else None
        if required is not None:
            if not missing.get(path):
                placeholder = Finding(doc.source, path, "schema.required", "")
                at.setdefault(path, []).append((rank, keyword, placeholder, True))
            missing.setdefault(path, []).append(required)
            continue
        finding = Finding(doc.source, path, f"schema.{keyword}", _message(kind, error))
        expected = _text_expected(kind, error)
        if expected is not None:
            finding.message = _boolean_message(expected, error.instance)
            finding.reword = partial(_boolean_word, expected, error.instance)
        of_mapping = keyword in _OF_THE_MAPPING or _alternative_keys(kind, error)
        at.setdefault(path, []).append((rank, keyword, finding, of_mapping))
    out: list[Finding] = []
    for path, entries in at.items():
        if any(keyword == "type" for _, keyword, _, _ in entries):
            entries = [x for x in entries if x[1] == "type"]
        value: Finding | None = None  # the one finding about the value itself
        seen: set[tuple[str, str]] = set()
        for _, keyword, f, of_mapping in sorted(entries, key=lambda x: x[0]):
            if keyword == "required":
                left = [n for n in missing[path] if n not in suggested.get(path, ())]
                if not left:
                    continue  # each is named by an unknown key's "did you mean"
                f.message = _missing_message(left)
            if not of_mapping:
                if value is None:
                    value = f
                    out.append(f)
                elif f.message not in value.message:
                    value.message += f"; also {f.message}"
            elif (f.rule, f.message) not in seen:
                seen.add((f.rule, f.message))
                out.append(f)
    return out


def _text_expected(kind: str, error: Any) -> str | None:
    """What a field expected (``one of: block, warn, off``, ``a string``, ``"x"``) when it
    wants text and the value is a boolean; None for any other error. YAML 1.1, which PyYAML
    reads, takes a plain ``yes``, ``no``, ``on``, ``off``, ``true`` or ``false`` (lower,
    Capitalised or UPPER case) as a boolean (YAML 1.2 only ``true`` and ``false``), so a
    word meant as text must be quoted."""
    if not isinstance(error.instance, bool) or not error.schema_path:
        return None
    keyword = error.schema_path[-1]
    try:
        params = error.kind.as_dict()
    except Exception:  # a kind without parameters
        params = {}
    enum_at = list(error.schema_path)
    if keyword == "type":
        types = params.get("types", [])
        names = {str(getattr(x, "value", x)) for x in (types if isinstance(types, list | tuple) else [types])}
        if "string" not in names or "boolean" in names:
            return None
        # A string field with an enum: the type error is the one reported; name the values.
        sibling = _subschema(kind, enum_at[:-1])
        if not (isinstance(sibling, dict) and "enum" in sibling):
            return "a string"
        keyword, enum_at = "enum", [*enum_at[:-1], "enum"]
    if keyword == "enum":
        allowed = _subschema(kind, enum_at)
        if isinstance(allowed, list) and any(isinstance(a, str) for a in allowed):
            return "one of: " + ", ".join(map(str, allowed))
        return None
    if keyword == "const" and isinstance(params.get("expected_value"), str):
        return excerpt(params["expected_value"])
    return None


def _boolean_message(expected: str, value: bool) -> str:
    """A boolean where text is expected, when how it was written is not known."""
    word = "true" if value else "false"
    return (
        f"expected {expected}, got the boolean {word}: YAML reads an unquoted yes, no, on, off, "
        "true or false as a boolean; write a word meant as text in quotes"
    )


def _boolean_word(expected: str, value: bool, text: str, message: str) -> str:
    """The message once the value's source ``text`` is known (``off``): that word, unquoted,
    is what YAML read as the boolean, and how to write it (a :attr:`Finding.reword`)."""
    generic = _boolean_message(expected, value)
    if len(text) > 5 or not message.startswith(generic):
        return message  # not a boolean word (an explicit !!bool tag), or reworded already
    word = "true" if value else "false"
    return (
        f"`{text}` unquoted is read by YAML as the boolean {word}; write it quoted: "
        f'"{text}" (expected {expected})' + message[len(generic) :]
    )


def _alternative_keys(kind: str, error: Any) -> bool:
    """An ``anyOf``/``oneOf`` of keys (``gpu_profile`` or ``host_profile``): about the mapping."""
    if not error.schema_path or error.schema_path[-1] not in ("anyOf", "oneOf"):
        return False
    alternatives = _subschema(kind, list(error.schema_path))
    return isinstance(alternatives, list) and all(
        isinstance(a, dict) and "required" in a for a in alternatives
    )


def _required(error: Any) -> str | None:
    """The property a ``required`` error names (None if it cannot be read)."""
    try:
        return str(error.kind.as_dict()["property"])
    except Exception:  # a kind without parameters
        return None


def _missing_message(names: list[str]) -> str:
    """``"a" is a required property``, ``"a" and "b" are required properties`` (the names
    are the schema's own)."""
    quoted = [f'"{n}"' for n in dict.fromkeys(names)]
    if len(quoted) == 1:
        return f"{quoted[0]} is a required property"
    shown = quoted[:8] + ([f"{len(quoted) - 8} more"] if len(quoted) > 8 else [])
    return f"{', '.join(shown[:-1])} and {shown[-1]} are required properties"


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
        guess = close_names(kind, KINDS) if isinstance(kind, str) else []
        yield Finding(
            doc.source,
            where,
            "schema.kind",
            f"unknown kind {excerpt(kind)}"
            + (f"; did you mean {excerpt(guess[0])}?" if guess else "")
            + "; expected one of: "
            + ", ".join(KINDS),
        )
        return
    yield from _checked(doc, kind)


def check_file(name: str, data: Any, source: Source) -> list[Finding]:
    """Every schema finding for ``data`` (parsed JSON, untrusted), from ``source``, against
    the schema :data:`FILES` names ``name`` (empty when it is valid): the findings, paths
    and messages of :func:`check_document` (an unknown key named at the key, a float where
    the schema wants an integer refused: JSON Schema counts ``8.0`` as one), at most
    :data:`MAX_ERRORS_PER_DOCUMENT`. Render each as ``json_path(f.path): f.message``."""
    return list(_checked(RawDocument(source, data, odd_numbers=True), name))


def _checked(doc: RawDocument, kind: str) -> Iterator[Finding]:
    """The findings of ``doc`` against the schema of ``kind`` (a kind or a :data:`FILES` name)."""
    data = doc.data
    validator = _validators()[kind]
    try:
        errors = list(islice(validator.iter_errors(data), MAX_ERRORS_PER_DOCUMENT + 1))
        floats, covered = _float_findings(doc, validator) if doc.odd_numbers else ([], set())
    except ValueError:
        found = _non_json(data)
        path, message = found if found else ((), "document holds a value that is not JSON")
        yield Finding(doc.source, path, "schema.type", message)
        return
    findings = [*floats, *_findings(doc, kind, errors, covered)]
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
