"""The pyinfra operations of :mod:`swarm_infra.engines.pyinfra.operations`, tested the way
pyinfra tests its own operations: facts of a node in, the commands (or the no-op) out.

pyinfra's repository keeps one JSON file per case under ``tests/operations/<module>.<op>/``
(the operation's arguments, the facts the host answers with, the commands expected, a
no-op description or an exception) and runs each through a host whose ``get_fact`` reads
those facts, calling the operation's generator directly. Here the cases of each operation
are one JSON file, ``tests/data/pyinfra_ops/<operation>.json``: ``{"cases": {name: case}}``
with

* ``kwargs``: the operation's arguments;
* ``snapshot``: the node's snapshot (:mod:`swarm_infra.nodeside.snapshot`; sections left out
  are empty), which the operations read through the ``NodesideCall`` fact;
* ``facts``: other facts, ``{"module.Class": {"arg=value, ...": value}}`` (pyinfra's
  built-in operations that ours hand over to read their own: ``files.File``,
  ``systemd.SystemdStatus``...), arguments that are None or False left out of the key;
  ``NodesideCall`` answers by ``label=...``;
* ``commands``: what the operation yields, each a shell string (what the node's shell
  reads), ``{"sh -c": script}`` / ``{"bash -c": script}`` for a script run by that shell,
  ``["upload", text, dest]`` for a file ``files.put`` sends, ``["function", name]`` for a
  Python callback and ``{"nodeside": file, "call", "args", "kwargs"}`` for node-side code
  sent on stdin;
* optional ``noops`` (descriptions given to ``host.noop``), ``notes`` (recorded for
  ``swarm converge``), ``exception`` (``{"name", "message"}``) and ``changing`` (whether
  the snapshot is dropped for the next operation; by default, when there are commands).

A fact the case does not give fails the test (an operation reading more than expected),
and the cases' expected commands are written from the tools' documented command lines,
not from the code. What needs Python objects (a node, an earlier operation's result,
running a callback or a script) is tested below the table.

The host is a real pyinfra ``Host`` of an in-memory ``Inventory`` in a real ``State``; only
its ``get_fact`` and ``noop`` are replaced.
"""

from __future__ import annotations

import copy
import hashlib
import json
import shlex
from dataclasses import dataclass, field
from typing import Any

import pytest
from pyinfra.api import Config, FileUploadCommand, FunctionCommand, Inventory, State, StringCommand
from pyinfra.context import ctx_host, ctx_state

from swarm_infra.engines.pyinfra import operations as ops
from swarm_infra.engines.pyinfra.facts import BOOTSTRAP

from .conftest import ROOT

DATA = ROOT / "tests" / "data" / "pyinfra_ops"
NODESIDE = ROOT / "src" / "swarm_infra" / "nodeside"
HOST = "node-1"
SECTIONS = (
    "paths", "texts", "units", "packages", "interfaces", "devices", "venvs", "public_keys",
    "wireguard", "mounts", "modules",
)  # fmt: skip


def node_fixture() -> dict[str, Any]:
    """A small NodeState: what the operations read of ``host.data.swarm``."""
    return json.loads((DATA / "node.json").read_text())


# ------------------------------------------------------------------------------ harness


def fact_key(kwargs: dict[str, Any]) -> str:
    """A fact's arguments as the cases key them: ``name=value`` sorted, values that are None
    or False left out, lists as JSON, connector arguments (``_stdin``) left out."""
    parts = []
    for name, value in sorted(kwargs.items()):
        if name.startswith("_") or value is None or value is False:
            continue
        parts.append(f"{name}={json.dumps(value) if isinstance(value, list | dict) else value}")
    return ", ".join(parts)


def parse_value(value: Any) -> Any:
    """A case's value with ``{"$sha1": text}`` replaced by the SHA-1 of ``text`` (what
    ``sha1sum`` prints for a file holding it)."""
    if isinstance(value, dict):
        if set(value) == {"$sha1"}:
            return hashlib.sha1(value["$sha1"].encode()).hexdigest()
        return {k: parse_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [parse_value(v) for v in value]
    return value


@dataclass
class Run:
    """One operation's run: what it yielded and what it asked and told the host."""

    state: State
    host: Any
    commands: list[Any] = field(default_factory=list)
    noops: list[str] = field(default_factory=list)
    fact_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def snapshot_cached(self) -> bool:
        return HOST in ops._SNAPSHOTS.get(self.state, {})


class Node:
    """A pyinfra host named ``node-1`` with ``data.swarm`` = ``node``, answering facts from
    ``facts`` (``{"module.Class": {key: value}}``) and recording its no-ops."""

    def __init__(self, facts: dict[str, Any], node: dict[str, Any] | None = None, diff: bool = False):
        # Every host's: where files.put stages an upload.
        self.facts = {"server.TmpDir": {"": "/tmp"}} | facts
        inventory = Inventory(([HOST], {"swarm": node if node is not None else node_fixture()}))
        self.state = State(inventory, Config(DIFF=diff))
        self.host = inventory.get_host(HOST)
        self.run = Run(self.state, self.host)
        self.host.get_fact = self.get_fact
        self.host.noop = self.run.noops.append

    def get_fact(self, cls: type, *args: Any, **kwargs: Any) -> Any:
        name = f"{cls.__module__.rsplit('.', 1)[-1]}.{cls.__name__}"
        self.run.fact_calls.append((name, kwargs))
        key = fact_key(kwargs)
        if name not in self.facts or key not in self.facts[name]:
            raise KeyError(f"the case gives no fact {name} [{key}]")
        return copy.deepcopy(self.facts[name][key])

    def __call__(self, op: Any, **kwargs: Any) -> Run:
        """Run ``op``'s generator (its ``_inner``, as pyinfra's tests call ``_pyinfra_op``)."""
        with ctx_state.use(self.state), ctx_host.use(self.host):
            self.run.commands += list(op._inner(**kwargs))
        return self.run


def full_snapshot(snapshot: dict[str, Any] | None) -> dict[str, Any]:
    """A snapshot with the sections a case leaves out empty."""
    return {s: {} for s in SECTIONS} | (snapshot or {})


def render(command: Any) -> Any:
    """A yielded command in the cases' notation."""
    if isinstance(command, FileUploadCommand):
        command.src.seek(0)
        return ["upload", command.src.read(), command.dest]
    if isinstance(command, FunctionCommand):
        return ["function", command.function.__name__]
    assert isinstance(command, StringCommand), command
    raw = command.get_raw_value()
    stdin = command.connector_arguments.get("_stdin")
    if stdin is not None:
        assert raw == f"python3 -c {shlex.quote(BOOTSTRAP)}", raw
        payload = json.loads(stdin)
        assert payload["code"] == (NODESIDE / payload["file"]).read_text()  # the whole file
        return {k: payload[k] for k in ("call", "args", "kwargs")} | {"nodeside": payload["file"]}
    for shell in ("sh", "bash"):
        if raw.startswith(f"{shell} -c "):
            (script,) = shlex.split(raw[len(shell) + 4 :])
            assert raw == f"{shell} -c {shlex.quote(script)}"
            return {f"{shell} -c": script}
    return raw


def load_cases() -> list[Any]:
    out = []
    for path in sorted(DATA.glob("*.json")):
        if path.name == "node.json":
            continue
        for name, case in json.loads(path.read_text())["cases"].items():
            out.append(pytest.param(path.stem, case, id=f"{path.stem}/{name}", marks=case_marks(case)))
    return out


def case_marks(case: dict[str, Any]) -> list[Any]:
    return [pytest.mark.xfail(strict=True, reason=case["xfail"])] if "xfail" in case else []


# --------------------------------------------------------------------- the table of cases


@pytest.mark.parametrize(("op_name", "case"), load_cases())
def test_operation_case(op_name: str, case: dict[str, Any]) -> None:
    node = Node(parse_value(case.get("facts", {})))
    # As read by an earlier operation of the run: the case's operation must use it (the
    # fact is not given again) and drop it exactly when it changes something.
    ops._SNAPSHOTS[node.state] = {HOST: parse_value(full_snapshot(case.get("snapshot")))}
    op = getattr(ops, op_name)
    kwargs = parse_value(case.get("kwargs", {}))
    if "exception" in case:
        want = case["exception"]
        with pytest.raises(Exception) as raised:
            node(op, **kwargs)
        assert (type(raised.value).__name__, str(raised.value)) == (want["name"], want["message"])
        assert node.run.commands == []
        return
    run = node(op, **kwargs)
    assert [render(c) for c in run.commands] == case["commands"]
    assert run.noops == case.get("noops", [])
    assert ops.notes(run.state).get(HOST, []) == case.get("notes", [])
    changing = case.get("changing", bool(case["commands"]))
    assert run.snapshot_cached() is not changing, "a change must drop the snapshot, no change keep it"


def test_every_operation_has_cases() -> None:
    """Each ``@operation`` of the module has its table of cases or a test below."""
    operations = {n for n, v in vars(ops).items() if callable(v) and hasattr(v, "_inner")}
    tabled = {p.stem for p in DATA.glob("*.json")} - {"node"}
    tested_below = {"wireguard_file", "wireguard_sync", "note_if"}
    assert operations == tabled | tested_below
