"""The guards CONTRIBUTING.md's recipes name for the steps no other test catches skipped.

Recipe 1 ("add a policy field") step 5 decides what a field means for a node. Skipped, a
field declared in the schema and the model reached no NodeState, and a key added to
NodeState's types but not filled by resolve (or filled but not typed: the flattened
HostProfile is cast, so mypy does not see it) failed nothing. Three guards here:

- every resolved NodeState is exactly its types (:mod:`swarm_infra.resolve.types`): each
  TypedDict's required keys and no other, each value of its declared type;
- every key of every TypedDict reachable from NodeState is decided (not None, not empty)
  on some node of the fleets below: a key no fleet fills is never exercised;
- the declared state is the whole truth: each field the shipped fleets declare, changed to
  another value the validator accepts, changes the desired state (a node's, the cluster's
  or the rollout's), except the fields in :data:`BY_DESIGN`, each with its reason. The
  other values are derived from the field's schema (its enum, its type) and from the
  values the fleet declares for fields of the same name, never listed by hand.

Recipe 1 steps 6 and 7 apply the key and check it on the node. Skipped, a key decided in
``HostState`` that nothing applied, and that no verification check read, failed nothing.
Two guards more, both a textual read of the consumers' code (see the section's comment for
what that cannot see):

- every NodeState key is named by an applier (the roles, the plugins, the engines, the
  node-side code and the pull agent, the layers' texts, the cluster's objects) or is in
  :data:`APPLIED_THROUGH` with what applies it;
- every NodeState key is read by verification or is in :data:`NOT_VERIFIED` with why not.
"""

from __future__ import annotations

import ast
import base64
import copy
import dataclasses
import hashlib
import json
import re
import shutil
import types
import typing
from collections.abc import Iterator
from fnmatch import fnmatch
from functools import cache
from importlib.util import resolve_name
from pathlib import Path
from typing import Any, Literal, get_args, get_origin, get_type_hints, is_typeddict

import pytest
import yaml

from swarm_infra.fleet.loader import RawDocument, find_files, load_documents
from swarm_infra.fleet.schemas import KINDS, load_schema
from swarm_infra.fleet.sources import fleet_paths
from swarm_infra.lab import tlsindex
from swarm_infra.resolve import desired_state, load_fleet
from swarm_infra.resolve import types as T
from swarm_infra.resolve.validate import validate
from tests.unit.pullfleet import copy_lab, declare_pull

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ("inventory/example", "inventory/lab")

# ------------------------------------------------------------------ NodeState's types


def _type_problems(value: Any, tp: Any, where: str, filled: dict[tuple[str, str], bool]) -> Iterator[str]:
    """Where ``value`` is not of type ``tp`` (TypedDicts: required keys, no others; lists,
    dicts, unions, Literals, str/int/float/bool); records in ``filled`` each TypedDict key
    seen, True once it holds a value that is neither None nor empty."""
    origin = get_origin(tp)
    if is_typeddict(tp):
        if not isinstance(value, dict):
            yield f"{where}: {type(value).__name__}, not a {tp.__name__}"
            return
        hints = get_type_hints(tp)
        missing, extra = tp.__required_keys__ - value.keys(), value.keys() - hints.keys()
        if missing or extra:
            yield f"{where} ({tp.__name__}): keys missing {sorted(missing)}, not in the type {sorted(extra)}"
        for key, sub in hints.items():
            got = value.get(key)
            decided = got is not None and not (isinstance(got, list | dict | str) and not got)
            filled[(tp.__name__, key)] = filled.get((tp.__name__, key), False) or decided
            if key in value:
                yield from _type_problems(got, sub, f"{where}.{key}", filled)
        return
    if origin in (typing.Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return
        others = [a for a in args if a is not type(None)]
        if len(others) == 1:  # X | None: what is wrong inside the X
            yield from _type_problems(value, others[0], where, filled)
            return
        for arg in others:
            if not list(_type_problems(value, arg, where, {})):
                yield from _type_problems(value, arg, where, filled)
                return
        yield f"{where}: {value!r} is not {tp}"
        return
    if origin is list:
        if not isinstance(value, list):
            yield f"{where}: {type(value).__name__}, not a list"
            return
        for i, v in enumerate(value):
            yield from _type_problems(v, get_args(tp)[0], f"{where}[{i}]", filled)
        return
    if origin is dict:
        if not isinstance(value, dict):
            yield f"{where}: {type(value).__name__}, not a dict"
            return
        key_type, value_type = get_args(tp)
        for k, v in value.items():
            yield from _type_problems(k, key_type, f"{where} key {k!r}", filled)
            yield from _type_problems(v, value_type, f"{where}[{k!r}]", filled)
        return
    if origin is Literal:
        if value not in get_args(tp):
            yield f"{where}: {value!r} is not one of {get_args(tp)}"
        return
    number = isinstance(value, int | float) and not isinstance(value, bool)
    ok = {float: number, int: number and isinstance(value, int)}.get(tp)
    if ok is None:
        ok = isinstance(value, tp)
    if not ok:
        yield f"{where}: {value!r} is not {getattr(tp, '__name__', tp)}"


def _reachable(tp: Any, seen: set[str] | None = None) -> Iterator[tuple[str, str]]:
    """(TypedDict name, key) of every TypedDict reachable from ``tp``."""
    seen = set() if seen is None else seen
    if is_typeddict(tp):
        if tp.__name__ in seen:
            return
        seen.add(tp.__name__)
        for key, sub in get_type_hints(tp).items():
            yield tp.__name__, key
            yield from _reachable(sub, seen)
        return
    for arg in get_args(tp):
        yield from _reachable(arg, seen)


def _edit(path: Path, change: Any) -> None:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    for doc in docs:
        change(doc)
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))


def _all_optional(doc: dict[str, Any]) -> None:
    """The lab's optional declarations that no shipped fleet makes: lab-gpu-1's WireGuard
    key recorded (Node spec.mesh.public_key), Ray's dashboard open to a client network and
    its package index with a CA file (made by the lab's own TLS code), a signer's key revoked."""
    if doc["kind"] == "Node" and doc["metadata"]["name"] == "lab-gpu-1":
        key = base64.b64encode(hashlib.sha256(b"lab-gpu-1").digest()).decode()
        doc["spec"].setdefault("mesh", {})["public_key"] = key
    if doc["kind"] == "RayCluster":
        doc["spec"].setdefault("dashboard", {})["clients"] = ["10.99.0.0/24"]
        doc["spec"]["package_index"]["ca_file"] = "index-ca.pem"
    if doc["kind"] == "Rollout" and "pull" in doc["spec"]:
        # An ed25519 public key blob (RFC 8709: the name, then 32 bytes), revoked.
        blob = b"\0\0\0\x0bssh-ed25519\0\0\0\x20" + hashlib.sha256(b"revoked").digest()
        doc["spec"]["pull"]["revoked_signers"] = [f"ssh-ed25519 {base64.b64encode(blob).decode()}"]


@pytest.fixture(scope="module")
def fleet_nodes(tmp_path_factory: pytest.TempPathFactory) -> list[T.NodeState]:
    """Every node of the shipped fleets and of the lab with lab-gpu-2 converging by pull
    (the pull slice, the head serving it Ray's token, the controller's key recorded) and
    every optional declaration made (:func:`_all_optional`)."""
    pulling = declare_pull(copy_lab(tmp_path_factory.mktemp("pull")), ("lab-gpu-2",))
    tls = tlsindex.ensure_tls(tmp_path_factory.mktemp("tls"), "127.0.0.1")
    shutil.copy(tls.ca, pulling / "policies/lab/index-ca.pem")
    for path in (*(pulling / "inventory/lab").glob("*.yaml"), *(pulling / "policies/lab").glob("*.yaml")):
        _edit(path, _all_optional)
    sources = [*(fleet_paths(ROOT / f) for f in SHIPPED), fleet_paths(pulling / "inventory/lab")]
    return [n for s in sources for n in desired_state(load_fleet(s))["nodes"].values()]


def test_every_nodestate_is_exactly_its_types(fleet_nodes: list[T.NodeState]) -> None:
    """A key added to a NodeState type and not filled by resolve, or filled and not in the
    type, or a value of another type, fails here (recipe 1 step 5, recipe 3 step 1)."""
    problems = [p for node in fleet_nodes for p in _type_problems(node, T.NodeState, node["name"], {})]
    assert problems == []


def test_every_nodestate_key_is_decided_on_some_node(fleet_nodes: list[T.NodeState]) -> None:
    """Each key of each TypedDict reachable from NodeState holds a value (not None, not
    empty) on at least one node: a key resolve always leaves empty decides nothing, and its
    consumers are never exercised by the tests that run these fleets."""
    filled: dict[tuple[str, str], bool] = {}
    for node in fleet_nodes:
        list(_type_problems(node, T.NodeState, node["name"], filled))
    never = sorted(k for k in _reachable(T.NodeState) if not filled.get(k))
    assert never == [], "keys no node of the fleets decides"


# ------------------------------------------------- the declared state is the whole truth


def _schema_at(kind: str, path: tuple[str | int, ...]) -> list[dict[str, Any]]:
    """The subschemas of ``kind``'s schema that may judge the value at ``path`` (through
    properties, patternProperties, additionalProperties, items, $ref and the combinators)."""

    def expand(schema: Any, file: str) -> Iterator[tuple[dict[str, Any], str]]:
        if not isinstance(schema, dict):
            return
        if "$ref" in schema:
            target, _, pointer = schema["$ref"].partition("#")
            file = target or file
            ref: Any = load_schema(file)
            for part in filter(None, pointer.split("/")):
                ref = ref[part]
            yield from expand(ref, file)
        yield schema, file
        for combinator in ("allOf", "anyOf", "oneOf"):
            for sub in schema.get(combinator, []):
                yield from expand(sub, file)
        for branch in ("then", "else"):
            yield from expand(schema.get(branch), file)

    level = list(expand(load_schema(KINDS[kind]), KINDS[kind]))
    for part in path:
        below = []
        for schema, file in level:
            if isinstance(part, int):
                below += expand(schema.get("items"), file)
                continue
            below += expand(schema.get("properties", {}).get(part), file)
            below += [
                s for pattern, sub in schema.get("patternProperties", {}).items()
                if re.search(pattern, part) for s in expand(sub, file)
            ]  # fmt: skip
            below += expand(schema.get("additionalProperties"), file)
        level = below
    return [s for s, _ in level]


def _leaves(value: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[tuple[str | int, ...], Any]]:
    if isinstance(value, dict):
        for key, sub in value.items():
            yield from _leaves(sub, (*path, key))
    elif isinstance(value, list):
        for i, sub in enumerate(value):
            yield from _leaves(sub, (*path, i))
    else:
        yield path, value


def _field(kind: str, path: tuple[str | int, ...]) -> str:
    """A field's name as BY_DESIGN spells it: ``Kind:spec.a[].b`` (a mapping's own keys,
    such as sysctl names or labels, as ``*``)."""
    name = kind + ":"
    for i, part in enumerate(path):
        if isinstance(part, int):
            name += "[]"
            continue
        named = any(part in s.get("properties", {}) for s in _schema_at(kind, path[:i]))
        name += ("." if i else "") + (part if named else "*")
    return name


def _alternatives(kind: str, path: tuple[str | int, ...], value: Any, same_name: list[Any]) -> Iterator[Any]:
    """Other values for the field at ``path``: the other members of its enum, the other
    values the fleet gives fields of the same name, then one made from the value's type."""
    schemas = _schema_at(kind, path)
    for schema in schemas:
        yield from (v for v in schema.get("enum", []) if v != value)
    yield from (v for v in same_name if v != value and type(v) is type(value))
    if isinstance(value, bool):
        yield not value
    elif isinstance(value, int):
        yield from (value + 1, value - 1, value * 2)
    elif isinstance(value, float):
        yield from (value * 2, value / 2)
    elif isinstance(value, str):
        yield from (value + "x", value + "/x", value[:-1] + ("1" if value[-1:] != "1" else "2"))


# Fields whose valid changes leave the desired state as it is in both shipped fleets, by
# design (fnmatch patterns of :func:`_field`'s names): what the validator, the review, the
# metrics or the lab read, never a node or the cluster; or a field whose effect needs a
# context neither shipped fleet has (each names the test that gives it one).
BY_DESIGN: dict[str, str] = {
    "*:metadata.annotations.*": "notes for people (common.schema.json metadata.annotations)",
    "NodeAcceptance:*": "swarm metrics accept judges measurements by it (metrics/acceptance.py)",
    "ReviewPolicy:*": "swarm review's flags (review/flags.py), read from the base branch",
    "Allocation:spec.reserved_gpus.*": "silences the validator's capacity-unallocated warning only",
    "Site:spec.provider": "the relay choice and the review's relay-crosses-provider flag read it; "
    "no shipped fleet has a NAT-to-NAT site pair (tests/unit/test_relay_choice.py)",
    "Site:spec.underlay.*": "the validator (network.*) and the lab's networks read it",
    "Site:spec.wan.loss_percent": "the lab's emulated WAN links (lab/wanlink.py)",
    "Site:spec.wan.bandwidth_mbit": "the lab's emulated WAN links (lab/wanlink.py)",
    "RayCluster:spec.head.selector.roles[]": "the lab's head is its only node with either of its "
    "roles (head, relay): the one other valid role picks it again; the example's head changes",
    "Assignment:spec.precedence": "decides only between Assignments that compete for a node, "
    "which neither shipped fleet has (tests/unit/test_resolve.py)",
}


def _fleet_documents(fleet: str) -> tuple[list[str], list[RawDocument]]:
    paths = fleet_paths(ROOT / fleet)
    files, problems = find_files(paths)
    docs, problems = load_documents(files)
    assert problems == []
    return paths, docs


@cache
def _same_name(fleet: str) -> dict[str | int, list[Any]]:
    out: dict[str | int, list[Any]] = {}
    for doc in _fleet_documents(fleet)[1]:
        for path, value in _leaves(doc.data):
            if path and value not in out.setdefault(path[-1], []):
                out[path[-1]].append(value)
    return out


def _set(data: Any, path: tuple[str | int, ...], value: Any) -> Any:
    out = copy.deepcopy(data)
    target = out
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return out


def _whole_truth(fleet: str) -> tuple[dict[str, str], set[str]]:
    """For each field ``fleet`` declares, the other values the validator accepts and what
    changed with them, tried value by value and occurrence by occurrence until one changes
    the state (a field's
    effect may need a context: an assignment's precedence matters where two compete):
    {field: "" (nothing changed) or the first desired state's part that changed}; and the
    fields for which no other valid value was found."""
    paths, docs = _fleet_documents(fleet)
    base = desired_state(load_fleet(paths))
    changed: dict[str, str] = {}
    stuck: set[str] = set()
    for i, doc in enumerate(docs):
        kind = doc.data.get("kind")
        for path, value in _leaves(doc.data):
            if path[0] in ("apiVersion", "kind") or path == ("metadata", "name"):
                continue
            name = _field(kind, path)
            if changed.get(name):  # seen changing the state at an earlier occurrence
                continue
            for other in _alternatives(kind, path, value, _same_name(fleet).get(path[-1], [])):
                mutated = [
                    *docs[:i],
                    dataclasses.replace(doc, data=_set(doc.data, path, other)),
                    *docs[i + 1 :],
                ]
                result = validate(paths, load=lambda files, docs=mutated: (docs, []))
                if not result.report.ok or result.analysis is None:
                    continue
                state = desired_state(result.analysis)
                parts = [
                    f"{part}:{key}"
                    for part in ("nodes", "cluster", "rollout")
                    for key in sorted(set(state[part]) | set(base[part]))  # type: ignore[literal-required]
                    if json.dumps(state[part].get(key), sort_keys=True)  # type: ignore[literal-required]
                    != json.dumps(base[part].get(key), sort_keys=True)  # type: ignore[literal-required]
                ]
                changed[name] = parts[0] if parts else ""
                if parts:
                    break
                # Another valid value may still change it (a selector's other role that
                # picks the same nodes changes nothing; the next one may not).
            else:
                stuck.add(name)
    return changed, stuck - set(changed)


def test_every_declared_field_changes_the_desired_state() -> None:
    """A field a shipped fleet declares that no consumer reads (its schema and model have
    it, resolve was never taught it: recipe 1 step 5 skipped) changes nothing when changed.
    A field is judged over both fleets: one fleet may lack the context that gives it an
    effect (a keepalive needs a node behind NAT)."""
    runs = [_whole_truth(fleet) for fleet in SHIPPED]
    judged = {f for changed, _ in runs for f in changed}
    effect = {f for changed, _ in runs for f, what in changed.items() if what}
    unread = sorted(f for f in judged - effect if not any(fnmatch(f, p) for p in BY_DESIGN))
    assert unread == [], "fields whose change changes no NodeState, ClusterState nor Rollout"
    # Each exception is still needed: a field that comes to change the state leaves the list.
    stale = sorted(p for p in BY_DESIGN if any(fnmatch(f, p) for f in effect))
    assert stale == []


# ------------------------------------- each NodeState key applied (R1.6), checked (R1.7)
#
# Both guards are a textual read: a key counts as read where a consumer names it, whatever
# the object it names it on. A common name (``name``, ``port``, ``path``) is satisfied by
# any consumer that reads a key so named, and a key read only to compute another key counts
# as read; what they catch is a key that no consumer names at all (recipe 1 steps 6 and 7
# skipped: a NodeState key filled by resolve that nothing applies, or that verify never
# compares).

SRC = ROOT / "src"


def _leaf_keys() -> list[str]:
    """``TypedDict.key`` of every key reachable from NodeState whose type holds no
    TypedDict (the keys a slice's values live in: ``HostState.sysctls``, ``HugePages.count``)."""

    def typeddicts(tp: Any) -> Iterator[Any]:
        if is_typeddict(tp):
            yield tp
        for arg in get_args(tp):
            yield from typeddicts(arg)

    leaves: set[str] = set()
    for name, key in _reachable(T.NodeState):
        hints = get_type_hints(getattr(T, name))
        if not any(typeddicts(hints[key])):
            leaves.add(f"{name}.{key}")
    return sorted(leaves)


def _keys_read(tree: ast.AST) -> set[str]:
    """The string keys Python code reads: ``x["key"]`` (not an assignment to it),
    ``x.get("key")``, ``x.pop("key")``, ``"key" in x``. A key that only appears in a dict
    display (``{"key": ...}``) is written, not read."""
    out: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Load):
            key: Any = n.slice
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("get", "pop"):
            key = n.args[0] if n.args else None
        elif isinstance(n, ast.Compare) and any(isinstance(op, ast.In | ast.NotIn) for op in n.ops):
            key = n.left
        else:
            continue
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            out.add(key.value)
    return out


def _module_file(module: str) -> Path:
    path = SRC.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


@cache
def _module(module: str) -> tuple[ast.Module, dict[str, ast.stmt], dict[str, tuple[str, str | None]]]:
    """A module of the package parsed: its tree, its top-level definitions by name and its
    imports of the package's own names: local name -> (module, name), or (module, None)
    where the name is a module."""
    path = _module_file(module)
    tree = ast.parse(path.read_text())
    defs: dict[str, ast.stmt] = {}
    for st in tree.body:
        if isinstance(st, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defs[st.name] = st
        elif isinstance(st, ast.Assign | ast.AnnAssign):
            for target in st.targets if isinstance(st, ast.Assign) else [st.target]:
                if isinstance(target, ast.Name):
                    defs[target.id] = st
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    imports: dict[str, tuple[str, str | None]] = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom):
            source = resolve_name("." * n.level + (n.module or ""), package)
            for alias in n.names:
                if source.startswith("swarm_infra"):
                    sub = f"{source}.{alias.name}"
                    is_module = _module_file(sub).exists()
                    imports[alias.asname or alias.name] = (sub, None) if is_module else (source, alias.name)
    return tree, defs, imports


def _read_by(
    whole: list[str],
    follow: tuple[str, ...],
    stop: frozenset[tuple[str, str]] = frozenset(),
    start: tuple[tuple[str, str], ...] = (),
) -> set[str]:
    """The keys read by the modules ``whole`` and the definitions ``start`` ((module, name))
    and, in the modules under ``follow``, by each definition they use and every definition
    of its module that it uses in turn, except those in ``stop``."""
    reads: set[str] = set()
    seen: set[tuple[str, str | None]] = {(m, None) for m in whole}
    todo: list[tuple[str, str]] = list(start)

    def uses(module: str, node: ast.AST) -> None:
        _, defs, imports = _module(module)
        for n in ast.walk(node):
            if isinstance(n, ast.Name):
                if n.id in defs:
                    todo.append((module, n.id))
                source, name = imports.get(n.id, ("", None))
                if name is not None:
                    todo.append((source, name))
            elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name):
                source, name = imports.get(n.value.id, ("", ""))
                if name is None:  # module.attribute
                    todo.append((source, n.attr))

    for module in whole:
        tree = _module(module)[0]
        reads |= _keys_read(tree)
        uses(module, tree)
    while todo:
        module, name = todo.pop()
        if (module, None) in seen or (module, name) in seen or (module, name) in stop:
            continue
        seen.add((module, name))
        if not module.startswith(follow):
            continue
        _, defs, imports = _module(module)
        if name in defs:
            reads |= _keys_read(defs[name])
            uses(module, defs[name])
        elif name in imports:  # a name the module re-exports
            source, imported = imports[name]
            if imported is not None:
                todo.append((source, imported))
    return reads


def _modules_under(*folders: str) -> list[str]:
    out = []
    for folder in folders:
        for path in sorted((SRC / folder).rglob("*.py")):
            parts = path.relative_to(SRC).with_suffix("").parts
            out.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


# What applies NodeState: the roles' tasks, handlers, defaults and templates (not
# meta/argument_specs.yml, which declares the slices it is given: recipe 1 step 5 adds a
# key there); the project's Ansible plugins (filters, modules, module_utils); the engines
# (pyinfra's deploys, the inventory, Pulumi's objects); the node-side code and the pull
# agent; the layers' text writers; the cluster's objects (node labels, the device plugin's
# configs); and, in the resolve modules, each function these call (a role's filter calls
# resolve.files, resolve.rollout, ...), but not the resolver's entry points that make the
# state (the inventory builds it with them).
APPLIER_FOLDERS = ("swarm_infra/engines", "swarm_infra/nodeside", "swarm_infra/agent",
                   "swarm_infra/cluster", "swarm_infra/resolve/layers")  # fmt: skip
APPLIER_MODULES = ("swarm_infra.resolve.files",)
PRODUCERS = frozenset({
    ("swarm_infra.resolve", "desired_state"),
    ("swarm_infra.resolve", "load_fleet"),
    ("swarm_infra.resolve.rollout", "rollout_state"),
})  # fmt: skip


def _applied_keys() -> set[str]:
    modules = [*_modules_under(*APPLIER_FOLDERS), *APPLIER_MODULES]
    reads = _read_by(modules, ("swarm_infra.resolve", *(f.replace("/", ".") for f in APPLIER_FOLDERS)),
                     PRODUCERS)  # fmt: skip
    for path in sorted((ROOT / "plugins").rglob("*.py")):
        reads |= _keys_read(ast.parse(path.read_text()))
    # Jinja reads a key as an attribute (``swarm.host.sysctls``), a subscript or a filter's
    # argument (``['sysctls']``, ``map(attribute='name')``).
    roles = "\n".join(
        p.read_text() for p in sorted(ROOT.glob("roles/*/*/*")) if p.parent.name != "meta" and p.is_file()
    )
    keys = {leaf.partition(".")[2] for leaf in _leaf_keys()}
    reads |= {k for k in keys if re.search(rf"[\w\])]\.{k}\b|['\"]{k}['\"]", roles)}
    return reads


# NodeState keys no applier names, each applied through another key that resolve derives
# from it, or describing the node rather than setting it.
APPLIED_THROUGH: dict[str, str] = {
    "DriverState.branch": "through apt_version ('570.*' without a version), the pin every package "
    "is installed at (resolve.drivers.driver_state)",
    "HostState.transparent_hugepages": "through HostState.sysfs (resolve.host.sysfs_items)",
    "HostState.cpu_governor": "through HostState.sysfs (resolve.host.sysfs_items)",
    "HugePages.*": "through HostState.sysfs (resolve.host.sysfs_items: nr_hugepages of its size)",
    "MeshState.forwarding": "through MeshState.sysctls (what forwarding needs, as sysctl.d writes it)",
    "RayNodeState.num_cpus": "through start_args (--num-cpus, resolve.ray.start_args)",
    "HostState.assignment": "which Assignment chose the profile: for the review and `swarm fleet show`",
    "GpuState.assignment": "which Assignment chose the profile: for the review and `swarm fleet show`",
    "HardwareState.nic_speed_gbps": "the node's declared hardware (Node spec.hardware), not a setting",
    "GpuSlotState.count": "the node's declared hardware; the GPUs are its GpuState.devices",
    "NvmeState.device": "the node's declared hardware; scratch's devices are ScratchState.devices",
}


def test_every_nodestate_key_is_applied() -> None:
    """Each NodeState key is named by a consumer that applies it (:data:`APPLIER_FOLDERS`,
    the roles, the plugins) or is in :data:`APPLIED_THROUGH` with the key it is applied
    through: a key resolve decides and nothing applies (recipe 1 step 6 skipped) fails."""
    applied = _applied_keys()
    unread = [k for k in _leaf_keys() if k.partition(".")[2] not in applied]
    assert [k for k in unread if not any(fnmatch(k, p) for p in APPLIED_THROUGH)] == [], (
        "NodeState keys no role, engine, node-side code or layer text reads"
    )
    # Each exception is still needed: a key that comes to be read by name leaves the list.
    assert [p for p in APPLIED_THROUGH if not any(fnmatch(k, p) for k in unread)] == []


# What verification reads: its checks and readers, and the testinfra plugin that runs them
# (tests/verify). A slice it hands whole to code that compares it counts with that code's
# reads, for the keys below the slice: the plugin gives the node's GpuState to the
# node-side GPU code's ``diff`` (nodeside/gpu.py ``main``: the converge in check mode),
# whose findings are the gpu checks' values.
VERIFIERS = ("src/swarm_infra/verify/*.py", "tests/verify/*.py")
VERIFIED_WHOLE: dict[str, tuple[str, str]] = {"GpuState": ("swarm_infra.nodeside.gpu", "main")}

# NodeState keys verification does not read, by why. "Gap" marks what it could check and
# does not yet (#37: recipe 1 step 7 asks for a check; these predate it).
NOT_VERIFIED: dict[str, tuple[str, ...]] = {
    "checked through another key resolve derives from it: HostState.sysfs (one check per "
    "item), the sysctls (their fields compared, as sysctl.d writes them), the pin "
    "apt_version every package is checked at, the md array (None unless raid0)": (
        "HostState.cpu_governor", "HostState.transparent_hugepages", "HugePages.*",
        "HostState.sysctl_text", "MeshState.forwarding", "DriverState.branch",
        "DriverState.version", "ScratchState.raid0",
    ),
    "which profile and Assignment decided the settings (the review, `swarm fleet show`); the "
    "settings themselves are checked": (
        "HostState.profile", "HostState.assignment", "GpuState.profile", "GpuState.assignment",
    ),
    "the node as declared (its hardware, its site's region, its roles): what it is, not a "
    "state converged on it; the metrics measure it, the node-side GPU code identifies the "
    "GPUs from GpuState.limits": (
        "HardwareState.*", "GpuSlotState.*", "NvmeState.device", "NodeState.region", "NodeState.roles",
    ),
    "applied by the cluster, not on the node (the node's nvidia.com/device-plugin.config "
    "label, the device plugin's configs: tests/unit/test_cluster_*.py)": ("GpuSharingState.*",),
    "how the controller reaches the node: verification connects through them, and a wrong "
    "one fails every check of the node as unreachable": (
        "SshState.user", "SshState.via_mesh", "SshState.host_keys",
    ),
    "a converge's policy or input, nothing on the node to read: whether the drivers layer "
    "may reboot (its effect: the pending-reboot marker checked absent), how pip fetches, "
    "what Ray's timeouts are computed from, what num_gpus means (the GPU resource is "
    "compared)": (
        "DriverState.allow_reboot", "RayNodeState.package_index", "RayNodeState.index_ca",
        "RayNodeState.wan_rtt_ms", "RayNodeState.simulated_gpus",
    ),
    "checked as membership: ray_member runs on the head and finds the node alive in that "
    "head's state API": (
        "RayNodeState.cluster", "RayNodeState.head", "RayNodeState.head_ip", "RayNodeState.gcs_address",
    ),
    "cannot: WireGuard roams, so the dump's endpoint is where the peer's latest packet came "
    "from (a NAT's mapping), not the declared one; a wrong one fails the handshake and "
    "ping checks": ("PeerState.endpoint",),
    "Gap: NVIDIA's extra packages present, the container toolkit absent, the apt sources "
    "and Debian components are not read back (the converge's driver plan reads them)": (
        "DriverState.extra_packages", "DriverState.absent_packages", "DriverState.debian_components",
        "AptSource.*",
    ),
    "Gap: file checks read owner, group and mode, not whether the path is a file or a "
    "directory": ("ManagedPath.type",),
    "Gap: the interface's listen port is not read back (wg show dump has it); a wrong one "
    "shows only as failed handshakes and pings": ("MeshState.listen_port",),
    "Gap: none of the pull agent's files or its timer is read (the agent's own report, on "
    "status_port, says its last apply)": ("PullState.*",),
    "Gap: who Ray's firewall admits (members, dashboard and token clients) is not read back "
    "from nftables; ray_exposed reads the guarded ports, and one port is probed closed over "
    "the underlay and open over the mesh": (
        "RayFirewallState.members", "RayFirewallState.mesh_interface", "RayFirewallState.dashboard_port",
        "RayFirewallState.dashboard_clients", "RayFirewallState.token_clients",
    ),
    "Gap: Ray's installed version and pins, its command line and environment are not read "
    "back (the engines' snapshot reads the venv, nodeside/snapshot.py); ray_member compares "
    "the GPU and custom resources and the labels, not the CPUs or the object store": (
        "RayNodeState.version", "RayNodeState.requirements", "RayPinState.*", "RayNodeState.user",
        "RayNodeState.start_args", "RayNodeState.config", "RayNodeState.num_cpus",
        "RayNodeState.object_store_bytes",
    ),
}  # fmt: skip


def _verified_keys() -> tuple[set[str], dict[str, set[str]]]:
    """The keys verification reads, and for each slice of :data:`VERIFIED_WHOLE` the keys
    read by the code it hands the slice to."""
    reads: set[str] = set()
    for pattern in VERIFIERS:
        for path in sorted(ROOT.glob(pattern)):
            reads |= _keys_read(ast.parse(path.read_text()))
    whole = {
        slice_: _read_by([], (module.rpartition(".")[0],), start=((module, name),))
        for slice_, (module, name) in VERIFIED_WHOLE.items()
    }
    return reads, whole


def test_every_nodestate_key_is_checked_by_verify() -> None:
    """Each NodeState key is read by verification (:data:`VERIFIERS`, or through a slice it
    hands whole to code that compares it, :data:`VERIFIED_WHOLE`) or is in
    :data:`NOT_VERIFIED` with why it is not: a key applied and never checked on the node
    (recipe 1 step 7, recipe 3 step 7 skipped) fails."""
    reads, whole = _verified_keys()
    below = {name: {n for n, _ in _reachable(getattr(T, name))} for name in whole}
    unread = [
        leaf for leaf in _leaf_keys()
        if leaf.partition(".")[2] not in reads
        and not any(leaf.partition(".")[0] in below[s] and leaf.partition(".")[2] in whole[s] for s in whole)
    ]  # fmt: skip
    patterns = [p for group in NOT_VERIFIED.values() for p in group]
    assert [k for k in unread if not any(fnmatch(k, p) for p in patterns)] == [], (
        "NodeState keys no verification check reads"
    )
    # Each exception is still needed, and listed once.
    assert [p for p in patterns if not any(fnmatch(k, p) for k in unread)] == []
    assert len(set(patterns)) == len(patterns)
