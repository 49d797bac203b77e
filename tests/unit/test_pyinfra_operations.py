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

import base64
import copy
import hashlib
import json
import logging
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pyinfra.api import Config, FileUploadCommand, FunctionCommand, Inventory, State, StringCommand
from pyinfra.context import ctx_host, ctx_state

from swarm_infra.engines.pyinfra import operations as ops
from swarm_infra.engines.pyinfra.facts import BOOTSTRAP
from swarm_infra.resolve.layout import node_layout
from swarm_infra.resolve.packages import FILESYSTEM_PACKAGES, PACKAGES

from .conftest import ROOT, fleet_dirs

DATA = ROOT / "tests" / "data" / "pyinfra_ops"
NODESIDE = ROOT / "src" / "swarm_infra" / "nodeside"
HOST = "node-1"
SECTIONS = (
    "paths", "texts", "units", "packages", "interfaces", "devices", "venvs", "public_keys",
    "wireguard", "mounts", "modules", "users",
)  # fmt: skip


# The on-node paths, from the layout (never spelled here: tests/unit/test_layout.py).
L = {name: f["path"] for name, f in node_layout("wg0")["files"].items()}


def wgkey(label: str) -> str:
    """A well-formed WireGuard public key (32 bytes, base64) standing for ``label``: keys a
    node reports are checked (resolve/keys.py), so stand-ins must be keys."""
    return base64.b64encode(hashlib.sha256(label.encode()).digest()).decode()


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
        return HOST in ops.run_of(self.state).snapshots


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
    ops.run_of(node.state).snapshots = {HOST: parse_value(full_snapshot(case.get("snapshot")))}
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
    # A batch's reboot (tests/unit/test_rollout_reboot.py).
    tested_below |= {
        "ray_drain",
        "controller_command",
        "boot_id",
        "boot_id_changed",
        "gpu_reapply",
        "verify_node",
    }
    assert operations == tabled | tested_below


# ------------------------------------------------------------------ the node's snapshot


def test_snapshot_spec_asks_for_what_the_node_declares() -> None:
    node = node_fixture()
    spec = ops.snapshot_spec(node)
    assert set(spec) == set(SECTIONS)  # every section the node-side snapshot answers
    assert spec["paths"] == sorted(
        {f["path"] for f in node["layout"]["files"].values()} | {"/dev/md/scratch"}
    )
    # The texts compared: the layers' read-back files (the registry's order: the drivers
    # layer's pending-reboot marker, the storage record, mdadm.conf, the peers file), and fstab.
    assert spec["texts"] == [
        f"{L['reboot_required']}", f"{L['storage_record']}", f"{L['mdadm_conf']}",
        f"{L['wireguard_peers']}", "/etc/fstab",
    ]  # fmt: skip
    assert spec["units"] == ["ray-head.service", "wg-quick@wg0.service"]  # a bare name is a .service
    layers = {p for names in PACKAGES.values() for p in names} | set(FILESYSTEM_PACKAGES.values())
    # The driver layer's packages, and those it removes (their installed state is read too).
    assert spec["packages"] == sorted(
        layers | {"nvidia-driver", "python3-pynvml", "nvidia-container-toolkit"}
    )
    assert {"wireguard-tools", "mdadm", "xfsprogs", "python3-venv"} <= set(spec["packages"])
    assert spec["devices"] == ["/dev/md/scratch", "/dev/nvme0n1", "/dev/nvme1n1"]  # members and target
    assert (spec["interfaces"], spec["wireguard"], spec["mounts"]) == (["wg0"], ["wg0"], ["/scratch"])
    assert spec["venvs"] == [f"{L['ray_venv']}"]
    assert spec["public_keys"] == [f"{L['wireguard_key']}"]
    assert spec["modules"] == ["wireguard"]


def test_snapshot_spec_of_a_node_without_mesh_storage_ray_or_driver() -> None:
    node = node_fixture() | {"mesh": None, "storage": None, "ray": None, "gpu": None}
    spec = ops.snapshot_spec(node)
    assert spec["paths"] == sorted(f["path"] for f in node["layout"]["files"].values())
    assert not any(spec[k] for k in ("interfaces", "devices", "venvs", "public_keys", "wireguard", "mounts"))
    assert "nvidia-driver" not in spec["packages"]


def test_the_snapshot_is_read_once_and_again_after_a_change() -> None:
    node_data = node_fixture()
    snap = full_snapshot(
        {"paths": {"/old": {"type": "file", "mode": "0644", "owner": "root", "group": "root"}}}
    )
    node = Node({"facts.NodesideCall": {"label=snapshot": snap}}, node=node_data)
    node(ops.absent_path, path="/nothing")
    node(ops.absent_path, path="/nothing/else")
    reads = [kw for name, kw in node.run.fact_calls if name == "facts.NodesideCall"]
    assert len(reads) == 1  # one round trip for both
    payload = json.loads(reads[0]["_stdin"])
    assert (payload["file"], payload["call"]) == ("snapshot.py", "snapshot")
    assert payload["args"] == [ops.snapshot_spec(node_data)]
    assert payload["code"] == (NODESIDE / "snapshot.py").read_text()
    node(ops.absent_path, path="/old")  # a change: the next operation reads the node again
    node(ops.absent_path, path="/nothing")
    assert len([1 for name, _ in node.run.fact_calls if name == "facts.NodesideCall"]) == 2


@pytest.mark.parametrize(
    ("enabled", "active", "want"),
    [
        ("enabled", "active", {"exists": True, "enabled": True, "running": True}),
        ("enabled-runtime", "reloading", {"exists": True, "enabled": True, "running": True}),
        ("static", "inactive", {"exists": True, "enabled": True, "running": False}),
        ("disabled", "failed", {"exists": True, "enabled": False, "running": False}),
        ("masked", "inactive", {"exists": True, "enabled": False, "running": False}),
        ("not-found", "inactive", {"exists": False, "enabled": False, "running": False}),
        ("", "", {"exists": False, "enabled": False, "running": False}),
    ],
)
def test_unit_state_reads_systemctl_show(enabled: str, active: str, want: dict[str, bool]) -> None:
    node = Node({})
    ops.run_of(node.state).snapshots = {
        HOST: full_snapshot({"units": {"x.service": {"enabled": enabled, "active": active}}})
    }
    with ctx_state.use(node.state), ctx_host.use(node.host):
        assert ops.unit_state("x") == want
        assert ops.unit_state("absent.service") == {"exists": False, "enabled": False, "running": False}


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ('{"mount_path": "/scratch", "label": "s"}', {"mount_path": "/scratch", "label": "s"}),
        (None, {}),
        ("not json", {}),
        ('["a list"]', {}),
    ],
)
def test_storage_record(text: str | None, want: dict[str, Any]) -> None:
    node = Node({})
    ops.run_of(node.state).snapshots = {HOST: full_snapshot({"texts": {f"{L['storage_record']}": text}})}
    with ctx_state.use(node.state), ctx_host.use(node.host):
        assert ops.storage_record() == want


# -------------------------------------------------------------------- notes and changes


def test_record_note_is_a_noop_and_a_note_of_the_host() -> None:
    node = Node({})
    with ctx_state.use(node.state), ctx_host.use(node.host):
        ops.record_note("SIMULATED GPUs")
        ops.record_note("reboot required")
    assert node.run.noops == ["SIMULATED GPUs", "reboot required"]
    assert ops.notes(node.state) == {HOST: ["SIMULATED GPUs", "reboot required"]}
    assert ops.notes(Node({}).state) == {}  # per run


def test_note_if_reports_when_it_runs_not_when_it_is_prepared() -> None:
    node = Node({})
    run = node(ops.note_if, text="reboot required: driver changed")
    assert [render(c) for c in run.commands] == [["function", "report"]]
    assert run.noops == ["reboot required: driver changed"]
    assert ops.notes(run.state) == {}
    assert run.commands[0].function(run.state, run.host) is True
    assert ops.notes(run.state) == {HOST: ["reboot required: driver changed"]}


class Meta:
    """An operation's result as ``_if`` conditions see it (pyinfra's OperationMeta)."""

    def __init__(self, complete: bool, change: bool) -> None:
        self.complete, self.change, self._maybe_is_change = complete, change, change

    def is_complete(self) -> bool:
        return self.complete

    def did_change(self) -> bool:
        return self.change


@pytest.mark.parametrize(("complete", "change"), [(True, True), (True, False), (False, True), (False, False)])
def test_changed_once_run_or_while_preparing_a_check(complete: bool, change: bool) -> None:
    assert ops.changed(Meta(complete, change)) is change


def test_a_new_file_in_a_new_directory_shows_its_diff_before_the_first_command(caplog: Any) -> None:
    node = Node(
        {
            "files.File": {f"path={L['etc_dir']}/a.conf": None},
            "files.Directory": {f"path={L['etc_dir']}/a.conf": None, f"path={L['etc_dir']}": None},
        },
        diff=True,
    )
    ops.run_of(node.state).snapshots = {HOST: full_snapshot({})}
    with caplog.at_level(logging.INFO), ctx_state.use(node.state), ctx_host.use(node.host):
        first = next(ops.managed_file._inner(path=f"{L['etc_dir']}/a.conf", text="a = 1\n", **ROOT_0644))
    # A check run stops at the first command (mkdir): the diff must be logged by then.
    assert render(first) == f"mkdir -p {L['etc_dir']}"
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert f"Will create {L['etc_dir']}/a.conf" in logged and "a = 1" in logged


ROOT_0644 = {"owner": "root", "group": "root", "mode": "0644"}


# --------------------------------------------------------------------------- the mesh


def test_wireguard_key_callback_keeps_the_public_key_made_on_the_node() -> None:
    node = Node({})
    ops.run_of(node.state).snapshots = {HOST: full_snapshot({"public_keys": {f"{L['wireguard_key']}": None}})}
    run = node(ops.wireguard_key, path=f"{L['wireguard_key']}")
    read = run.commands[1].function
    asked = []

    def shell(ok: bool, lines: list[str]) -> Any:
        def run_shell_command(command: StringCommand) -> Any:
            asked.append(command.get_raw_value())
            return ok, SimpleNamespace(stdout_lines=lines)

        return SimpleNamespace(name=HOST, run_shell_command=run_shell_command)

    assert read(run.state, shell(False, [])) is False
    assert ops.public_keys(run.state) == {}
    assert read(run.state, shell(True, [wgkey("pubkey") + "\n"])) is True
    assert ops.public_keys(run.state) == {HOST: wgkey("pubkey")}
    assert asked == [f"wg pubkey < {L['wireguard_key']}"] * 2  # the private key only on stdin


def test_wireguard_key_found_is_kept_for_the_peers() -> None:
    node = Node({})
    ops.run_of(node.state).snapshots = {HOST: full_snapshot({"public_keys": {"/k": wgkey("pub")}})}
    assert node(ops.wireguard_key, path="/k").commands == []
    assert ops.public_keys(node.state) == {HOST: wgkey("pub")}


def lab_node(name: str) -> dict[str, Any]:
    from swarm_infra.resolve import desired_state, load_fleet

    return desired_state(load_fleet([str(p) for p in fleet_dirs("lab")]))["nodes"][name]


@pytest.fixture(scope="module")
def gpu1() -> dict[str, Any]:
    return lab_node("lab-gpu-1")


@pytest.mark.parametrize(
    ("recorded", "want"),
    [
        # this run's keys over the recorded ones; undeclared and own keys left out
        (
            json.dumps({"lab-gpu-2": wgkey("old2"), "lab-head-1": wgkey("head"), "gone": wgkey("x")}),
            {"lab-gpu-2": wgkey("new2"), "lab-head-1": wgkey("head")},
        ),
        (None, {"lab-gpu-2": wgkey("new2")}),
        ("{not json", {"lab-gpu-2": wgkey("new2")}),
    ],
)
def test_wireguard_peers_file(gpu1: dict[str, Any], recorded: str | None, want: dict[str, str]) -> None:
    peers = gpu1["layout"]["files"]["wireguard_peers"]["path"]
    facts = {
        "files.File": {f"path={peers}": None},
        "files.Directory": {
            f"path={peers}": None,
            f"path={L['wireguard_dir']}": {"user": "root", "mode": 700},
        },
    }
    node = Node(facts, node=gpu1)
    ops.run_of(node.state).snapshots = {HOST: full_snapshot({"texts": {peers: recorded}})}
    ops.public_keys(node.state).update({"lab-gpu-2": wgkey("new2"), "lab-gpu-1": wgkey("self")})
    run = node(ops.wireguard_file, node=gpu1, which="peers")
    upload, *rest = [render(c) for c in run.commands]
    assert upload[0::2] == ["upload", peers] and json.loads(upload[1]) == want
    assert rest == [f"chown root:root {peers}", f"chmod 644 {peers}"]

    # What it wrote, found on the node: nothing more.
    again = Node({}, node=gpu1)
    found = {"type": "file", "sha1": hashlib.sha1(upload[1].encode()).hexdigest()} | {
        "owner": "root", "group": "root", "mode": "0644",
    }  # fmt: skip
    ops.run_of(again.state).snapshots = {
        HOST: full_snapshot({"texts": {peers: recorded}, "paths": {peers: found}})
    }
    ops.public_keys(again.state).update({"lab-gpu-2": wgkey("new2"), "lab-gpu-1": wgkey("self")})
    assert again(ops.wireguard_file, node=gpu1, which="peers").commands == []


def test_wireguard_conf_holds_the_known_peers_and_never_a_private_key(gpu1: dict[str, Any]) -> None:
    conf = gpu1["layout"]["files"]["wireguard_conf"]["path"]
    peers = gpu1["layout"]["files"]["wireguard_peers"]["path"]
    node = Node(
        {
            "files.File": {f"path={conf}": None},
            "files.Directory": {f"path={conf}": None, f"path={L['wireguard_dir']}": {}},
        },
        node=gpu1,
    )
    ops.run_of(node.state).snapshots = {
        HOST: full_snapshot({"texts": {peers: json.dumps({"lab-head-1": wgkey("head")})}})
    }
    ops.public_keys(node.state).update({"lab-gpu-2": wgkey("new2"), "lab-gpu-1": wgkey("self")})
    commands = [render(c) for c in node(ops.wireguard_file, node=gpu1, which="conf").commands]
    assert commands[1:] == [f"chown root:root {conf}", f"chmod 600 {conf}"]  # mode 0600
    text = commands[0][1]
    assert f"Address = {gpu1['mesh']['address']}" in text
    assert f"PublicKey = {wgkey('new2')}" in text and f"PublicKey = {wgkey('head')}" in text
    assert wgkey("self") not in text and "PrivateKey" not in text


P2, P3 = wgkey("p2"), wgkey("p3")
SYNC_NODE_PEERS = json.dumps({"node-2": P2, "node-3": P3})


def sync_case(running: str | None, meta: Meta) -> Run:
    node = Node({})
    ops.run_of(node.state).snapshots = {
        HOST: full_snapshot(
            {"wireguard": {"wg0": running}, "texts": {f"{L['wireguard_peers']}": SYNC_NODE_PEERS}}
        )
    }
    return node(ops.wireguard_sync, node=node_fixture(), when_config_changed=meta)


def test_wireguard_sync_leaves_an_interface_that_is_down() -> None:
    run = sync_case(None, Meta(True, True))
    assert run.commands == [] and run.snapshot_cached()


def test_wireguard_sync_nothing_when_unchanged_and_running_as_declared() -> None:
    run = sync_case(f"{P2}\t10.210.0.2/32\n{P3}\t10.99.0.0/16 10.210.0.3/32\n", Meta(True, False))
    assert (run.commands, run.noops) == ([], [])


@pytest.mark.parametrize(
    ("running", "meta", "noops"),
    [
        (f"{P2}\t10.210.0.2/32\n{P3}\t10.99.0.0/16 10.210.0.3/32\n", Meta(True, True), []),  # file changed
        (f"{P2}\t10.210.0.2/32\n{P3}\t10.99.0.0/16 10.210.0.3/32\n", Meta(False, True), []),  # check run
        (
            f"{P2}\t10.210.0.2/32\n{P3}\t(none)\n",
            Meta(True, False),
            ["running peers differ from wg0.conf: syncing"],
        ),
        (f"{P2}\t10.210.0.2/32\n", Meta(True, False), ["running peers differ from wg0.conf: syncing"]),
    ],
)
def test_wireguard_sync_syncs_when_the_file_changed_or_the_running_peers_drifted(
    running: str, meta: Meta, noops: list[str]
) -> None:
    run = sync_case(running, meta)
    (command,) = [render(c) for c in run.commands]
    assert set(command) == {"bash -c"}
    assert "wg syncconf wg0 <(wg-quick strip wg0 | awk" in command["bash -c"]
    assert run.noops == noops and not run.snapshot_cached()


@pytest.mark.skipif(shutil.which("awk") is None, reason="needs awk")
def test_wireguard_sync_script_splices_the_key_from_its_file_under_the_interface(tmp_path: Path) -> None:
    """The script run for real, with systemctl, wg-quick and wg stand-ins: ``wg syncconf``
    reads the stripped configuration with the key file's key under ``[Interface]``, and the
    key is in no command line."""
    key = tmp_path / "wg0.key"
    key.write_text("PRIVATEKEY=\n")
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    stripped = f"[Interface]\nListenPort = 51820\n\n[Peer]\nPublicKey = {P2}\nAllowedIPs = 10.210.0.2/32\n"
    tools = {
        "systemctl": f'echo "systemctl $*" >> {tmp_path}/argv; exit 0',
        "wg-quick": f'echo "wg-quick $*" >> {tmp_path}/argv; printf %s {shlex.quote(stripped)}',
        "wg": f'echo "wg $*" >> {tmp_path}/argv; cat "$3" > {tmp_path}/synced',
    }
    for name, body in tools.items():
        (bin_ / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_ / name).chmod(0o755)
    node_data = node_fixture()
    node_data["layout"]["files"]["wireguard_key"]["path"] = str(key)
    node = Node({}, node=node_data)
    ops.run_of(node.state).snapshots = {HOST: full_snapshot({"wireguard": {"wg0": ""}})}
    (command,) = node(ops.wireguard_sync, node=node_data, when_config_changed=Meta(True, True)).commands
    env = {"PATH": f"{bin_}:/usr/bin:/bin"}
    proc = subprocess.run(["sh", "-c", command.get_raw_value()], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "synced").read_text() == stripped.replace(
        "[Interface]\n", "[Interface]\nPrivateKey = PRIVATEKEY=\n"
    )
    argv = (tmp_path / "argv").read_text()
    assert "systemctl is-active --quiet wg-quick@wg0" in argv and "wg syncconf wg0 /dev/fd/" in argv
    assert "PRIVATEKEY" not in argv


# -------------------------------------------------------------------------- storage


@pytest.mark.skipif(shutil.which("awk") is None, reason="needs awk")
def test_mount_fstab_script_replaces_the_mount_points_line_and_keeps_the_rest(tmp_path: Path) -> None:
    fstab = tmp_path / "fstab"
    before = (
        "# /scratch was on sdb once\nUUID=r / ext4 errors=remount-ro 0 1\n\n"
        "/dev/sdb /scratch ext4 defaults 0 2\n/dev/sdc /scratch2 xfs defaults 0 0\n"
    )
    fstab.write_text(before)
    node = Node({})
    ops.run_of(node.state).snapshots = {
        HOST: full_snapshot({"texts": {"/etc/fstab": before}, "mounts": {"/scratch": None}})
    }
    kw = {"source": "LABEL=swarmscratch", "path": "/scratch", "fstype": "xfs", "options": ["noatime"]}
    commands = node(ops.mount, **kw).commands
    script = render(commands[1])["sh -c"].replace("/etc/fstab", str(fstab))  # the file, moved here
    subprocess.run(["sh", "-c", script], check=True)
    assert fstab.read_text() == (
        "# /scratch was on sdb once\nUUID=r / ext4 errors=remount-ro 0 1\n\n"
        "/dev/sdc /scratch2 xfs defaults 0 0\nLABEL=swarmscratch /scratch xfs noatime 0 0\n"
    )
    assert oct(fstab.stat().st_mode & 0o777) == "0o644"
    # unmount's line removal is the same, without a line added
    (unmount_script,) = [
        render(c)["sh -c"] for c in Node({})(ops.unmount, path="/scratch").commands if "awk" in str(render(c))
    ]
    subprocess.run(["sh", "-c", unmount_script.replace("/etc/fstab", str(fstab))], check=True)
    assert fstab.read_text() == (
        "# /scratch was on sdb once\nUUID=r / ext4 errors=remount-ro 0 1\n\n"
        "/dev/sdc /scratch2 xfs defaults 0 0\n"
    )


def test_mdadm_conf_script_keeps_other_arrays_and_replaces_its_own(tmp_path: Path) -> None:
    conf = tmp_path / "mdadm" / "mdadm.conf"
    line = "ARRAY /dev/md/scratch metadata=1.2 name=node-1:scratch UUID=a:b:c:d"
    for before, after in [
        (None, line + "\n"),  # no file, no directory: both made
        (
            "HOMEHOST <system>\nARRAY /dev/md/scratch metadata=1.2 UUID=9:9:9:9\n"
            "ARRAY /dev/md/scratch2 UUID=1:1:1:1\n",
            f"HOMEHOST <system>\nARRAY /dev/md/scratch2 UUID=1:1:1:1\n{line}\n",
        ),
    ]:
        if before is not None:
            conf.write_text(before)
        node = Node({"facts.MdadmBrief": {"array=/dev/md/scratch": line}})
        ops.run_of(node.state).snapshots = {HOST: full_snapshot({"texts": {str(conf): before}})}
        (command,) = node(ops.mdadm_conf, array="/dev/md/scratch", path=str(conf)).commands
        subprocess.run(["sh", "-c", render(command)["sh -c"]], check=True)
        assert conf.read_text() == after
        assert oct(conf.stat().st_mode & 0o777) == "0o644"


def test_mdadm_conf_script_does_not_write_through_a_link_at_the_old_temporary_name(tmp_path: Path) -> None:
    """The script wrote ``path.swarm-tmp`` with the shell's ``>`` (O_TRUNC, no O_EXCL): a link
    planted there sent the file's text to the link's target. It now writes a ``mktemp`` file
    (operations/storage.py replace_script) and leaves nothing else behind."""
    victim = tmp_path / "victim"
    victim.write_text("untouched\n")
    conf = tmp_path / "mdadm" / "mdadm.conf"
    conf.parent.mkdir()
    Path(f"{conf}.swarm-tmp").symlink_to(victim)
    line = "ARRAY /dev/md/scratch metadata=1.2 name=node-1:scratch UUID=a:b:c:d"
    node = Node({"facts.MdadmBrief": {"array=/dev/md/scratch": line}})
    ops.run_of(node.state).snapshots = {HOST: full_snapshot({"texts": {str(conf): None}})}
    (command,) = node(ops.mdadm_conf, array="/dev/md/scratch", path=str(conf)).commands
    subprocess.run(["sh", "-c", render(command)["sh -c"]], check=True)
    assert victim.read_text() == "untouched\n" and conf.read_text() == line + "\n"
    assert sorted(p.name for p in conf.parent.iterdir()) == ["mdadm.conf", "mdadm.conf.swarm-tmp"]
    # A step that fails removes its temporary file and fails the command.
    failing = render(command)["sh -c"].replace("chmod 0644", "false && chmod 0644")
    assert subprocess.run(["sh", "-c", failing]).returncode == 1
    assert sorted(p.name for p in conf.parent.iterdir()) == ["mdadm.conf", "mdadm.conf.swarm-tmp"]
