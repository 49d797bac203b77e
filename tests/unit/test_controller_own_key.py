"""A mesh controller the fleet declares without its key (Mesh ``spec.controller`` with no
``public_key``: the lab's, whose key is made per machine at ``swarm lab up``).

What must hold: the resolver leaves the controller's peer without a key
(``resolve.controller.controller_key_missing``); push mode fills exactly that peer, in every
node, with the running controller's own key (``resolve.controller.with_controller_key``,
``engines.controller.with_own_key``), kept beside its private key as ``wireguard.key.pub``
(``engines.controller.ensure_key``/``own_public_key``), in the state that both engines' inventory
(``engines.inventory.fleet_state``) and ``swarm converge`` use; ``swarm converge`` refuses to
run without one (written so, every node would lose the controller's peer, and a node behind
NAT reached over the mesh would be cut off by the run that reached it); ``swarm mesh
controller-up`` takes the key file's own key where the fleet records none.

Expected values come from the fleet (policies/lab/mesh.yaml declares the controller with no
key) and from the keys the tests write; ``wg`` is a fake runner (test_mesh_controller.py's
FakeHost) that answers ``wg pubkey`` with a fixed key.
"""

from __future__ import annotations

import copy
import json
import stat
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from swarm_infra import cli
from swarm_infra.engines import controller as ctl_engine
from swarm_infra.engines.inventory import fleet_state
from swarm_infra.resolve import desired_state, load_fleet, validate
from swarm_infra.resolve.controller import controller_key_missing, controller_state, with_controller_key
from swarm_infra.resolve.files import UnsafeValue

from .conftest import ROOT, fleet_dirs
from .pullfleet import CONTROLLER_KEY, copy_lab, declare_pull
from .test_mesh_controller import NODE_KEY, FakeHost, _fleet, _key_file
from .test_mesh_recorded_keys import ALL, keyed_fleet, state_of

OTHER_KEY = "8GBtdgBvIyZ+VHgbYnvEM7SAIxR4a/YTFoEHqeXctHw=".replace("8", "9", 1)  # another valid key


def _controller_keys(state: Any) -> dict[str, str | None]:
    """Per node, the key of its controller peer (the one peer that is not a node)."""
    out = {}
    for name, node in state["nodes"].items():
        (peer,) = [p for p in node["mesh"]["peers"] if p["name"] not in state["nodes"]]
        out[name] = peer["public_key"]
    return out


def _lab_state() -> Any:
    return desired_state(load_fleet(fleet_dirs("lab")))


# ---------------------------------------------------------------- the resolver's part


def test_the_lab_fleet_declares_the_controller_without_its_key() -> None:
    state = _lab_state()
    keys = _controller_keys(state)
    assert set(keys) == set(state["nodes"]) and set(keys.values()) == {None}
    assert controller_key_missing(state)


@pytest.mark.parametrize("fleet", ["lab", "keyed"])
def test_the_key_fills_exactly_the_controllers_peer_of_every_node(fleet: str, tmp_path: Path) -> None:
    """The lab fleet (its nodes record no keys: their peers stay without one) and a copy
    recording every node's key (those stay as recorded): only the controller's peer changes."""
    state = _lab_state() if fleet == "lab" else state_of(keyed_fleet(tmp_path, ALL))
    before = copy.deepcopy(state)
    filled = with_controller_key(state, CONTROLLER_KEY)
    assert state == before  # the input is not changed
    assert filled is not state and not controller_key_missing(filled)
    assert _controller_keys(filled) == dict.fromkeys(state["nodes"], CONTROLLER_KEY)
    for name, node in filled["nodes"].items():
        for peer, was in zip(node["mesh"]["peers"], before["nodes"][name]["mesh"]["peers"], strict=True):
            if peer["name"] in state["nodes"]:
                assert peer == was  # a node's peer: its recorded key, or none
                assert peer["public_key"] == (ALL[peer["name"]] if fleet == "keyed" else None)
            else:
                assert peer == {**was, "public_key": CONTROLLER_KEY}
        assert {k: v for k, v in node.items() if k != "mesh"} == {
            k: v for k, v in before["nodes"][name].items() if k != "mesh"
        }
    assert {k: v for k, v in filled.items() if k != "nodes"} == {
        k: v for k, v in before.items() if k != "nodes"
    }


def test_a_recorded_controller_key_is_kept(tmp_path: Path) -> None:
    state = desired_state(
        load_fleet(_fleet(tmp_path, {"public_key": CONTROLLER_KEY, "endpoint": "192.0.2.1"}))
    )
    assert not controller_key_missing(state)
    assert _controller_keys(with_controller_key(state, OTHER_KEY)) == dict.fromkeys(
        state["nodes"], CONTROLLER_KEY
    )


@pytest.mark.parametrize(
    "bad", ["", "x\nPostUp = touch /tmp/x", CONTROLLER_KEY + "\n# more", CONTROLLER_KEY[:-2]]
)
def test_a_malformed_key_is_refused(bad: str) -> None:
    with pytest.raises(UnsafeValue):
        with_controller_key(_lab_state(), bad)


# ---------------------------------------------------------------- the controller's key file


class FakeWg(FakeHost):
    """FakeHost that also answers ``wg genkey`` with ``private``, and ``wg pubkey`` only for it."""

    def __init__(self, private: str, pub: str) -> None:
        super().__init__(pub)
        self.private = private

    def __call__(self, argv: Sequence[str], stdin: str | None) -> subprocess.CompletedProcess[str]:
        if list(argv) == ["wg", "genkey"]:
            self.calls.append((list(argv), stdin))
            return subprocess.CompletedProcess(list(argv), 0, self.private + "\n", "")
        assert list(argv) != ["wg", "pubkey"] or stdin == self.private + "\n", "pubkey of another key"
        return super().__call__(argv, stdin)


def test_ensure_key_keeps_the_public_key_beside_the_private_one(tmp_path: Path) -> None:
    path = tmp_path / "state" / "controller" / "wireguard.key"
    wg = FakeWg(NODE_KEY, CONTROLLER_KEY)  # NODE_KEY stands for a private key: any 32 bytes are one
    assert ctl_engine.own_public_key(path, runner=wg) is None  # no key file: none
    assert ctl_engine.ensure_key(path, runner=wg) == (CONTROLLER_KEY, True)
    pub = path.with_name("wireguard.key.pub")
    assert pub.read_text() == CONTROLLER_KEY + "\n"
    assert stat.S_IMODE(pub.stat().st_mode) == 0o644 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert NODE_KEY not in pub.read_text()

    def no_wg(argv: Sequence[str], stdin: str | None) -> subprocess.CompletedProcess[str]:
        raise AssertionError(f"ran {argv}: the kept public key is read, no wg needed")

    assert ctl_engine.own_public_key(path, runner=no_wg) == CONTROLLER_KEY
    # Without the kept one (a key made before it was kept): derived from the key, and kept again.
    pub.unlink()
    assert ctl_engine.own_public_key(path, runner=wg) == CONTROLLER_KEY
    assert ctl_engine.ensure_key(path, runner=wg) == (CONTROLLER_KEY, False)
    assert pub.read_text() == CONTROLLER_KEY + "\n"


def test_own_public_key_reads_the_default_key_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWARM_STATE_DIR", str(tmp_path / "state"))
    assert ctl_engine.own_public_key() is None
    ctl_engine.ensure_key(ctl_engine.default_key_path(), runner=FakeWg(NODE_KEY, CONTROLLER_KEY))
    assert ctl_engine.own_public_key() == CONTROLLER_KEY


# ---------------------------------------------------------------- push mode's consumers


def _keep_key(tmp_path: Path, key: str | None) -> Path:
    """A controller state directory under ``tmp_path`` keeping public key ``key`` (None: no
    key file at all), as :func:`swarm_infra.engines.controller.ensure_key` leaves it."""
    state = tmp_path / "state"
    if key is not None:
        pub = state / "controller" / "wireguard.key.pub"
        pub.parent.mkdir(parents=True)
        pub.write_text(key + "\n")
    return state


@pytest.mark.parametrize("kept", [CONTROLLER_KEY, None])
def test_the_engines_inventory_fills_this_controllers_key(
    kept: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``fleet_state``: what the Ansible inventory plugin and pyinfra's inventory resolve."""
    monkeypatch.setenv("SWARM_STATE_DIR", str(_keep_key(tmp_path, kept)))
    _, state = fleet_state(ROOT / "inventory" / "lab")
    assert _controller_keys(state) == dict.fromkeys(state["nodes"], kept)


def test_the_ansible_inventory_plugin_hands_the_nodes_this_controllers_key(tmp_path: Path) -> None:
    from ansible.parsing.ajson import AnsibleJSONDecoder

    from .test_inventory_plugin import ansible

    state_dir = _keep_key(tmp_path, CONTROLLER_KEY)
    proc = ansible(
        "ansible-inventory", "-i", "inventory/lab", "--list", env={"SWARM_STATE_DIR": str(state_dir)}
    )
    assert proc.returncode == 0, proc.stderr
    hostvars = json.loads(proc.stdout, cls=AnsibleJSONDecoder)["_meta"]["hostvars"]
    assert hostvars and _controller_keys(
        {"nodes": {h: v["swarm"] for h, v in hostvars.items()}}
    ) == dict.fromkeys(hostvars, CONTROLLER_KEY)


def _no_engine(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    from swarm_infra.cli import converge

    ran: list[Any] = []

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("an engine ran")

    def pyinfra(args: Any, state: Any, *rest: Any) -> int:
        ran.append(state)
        return 0

    monkeypatch.setattr(converge, "run_playbook", refuse)
    monkeypatch.setattr(converge, "_converge_pyinfra", pyinfra)
    return ran


@pytest.mark.parametrize("engine", ["ansible", "pyinfra"])
def test_converge_refuses_without_the_controllers_key(
    engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SWARM_STATE_DIR", str(_keep_key(tmp_path, None)))
    ran = _no_engine(monkeypatch)
    monkeypatch.chdir(ROOT)  # ansible.cfg, playbooks/, inventory/lab
    assert cli.main(["converge", "--fleet", "lab", "--engine", engine]) == 2
    err = capsys.readouterr().err
    assert "spec.controller.public_key" in err and "`swarm mesh controller-key`" in err
    assert "nothing was run" in err and not ran


def test_converge_writes_this_controllers_key_on_the_nodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SWARM_STATE_DIR", str(_keep_key(tmp_path, CONTROLLER_KEY)))
    ran = _no_engine(monkeypatch)
    monkeypatch.chdir(ROOT)
    assert cli.main(["converge", "--fleet", "lab", "--engine", "pyinfra", "--check"]) == 0
    (state,) = ran
    assert _controller_keys(state) == dict.fromkeys(state["nodes"], CONTROLLER_KEY)


# ---------------------------------------------------------------- the controller's interface


def test_up_takes_the_key_files_own_key_where_the_fleet_records_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SWARM_STATE_DIR", str(tmp_path / "state"))
    state = controller_state(load_fleet(fleet_dirs("lab")))
    assert state is not None and state["public_key"] is None
    host = FakeHost(CONTROLLER_KEY)
    out = ctl_engine.up(state, _key_file(tmp_path), runner=host)
    assert out.changed
    assert any(argv[:2] == ["wg", "setconf"] for argv, _ in host.calls)


def test_up_refuses_another_key_than_the_one_push_wrote_where_the_fleet_records_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Push mode wrote the default key's public half into the nodes' peer lists: an interface
    with another key (``--key``, or a .pub left stale beside a replaced key) would not be
    answered, and the nodes behind NAT would be cut off."""
    monkeypatch.setenv("SWARM_STATE_DIR", str(tmp_path / "state"))
    state = controller_state(load_fleet(fleet_dirs("lab")))
    assert state is not None and state["public_key"] is None
    default = _key_file(tmp_path)
    default.with_name(default.name + ".pub").write_text(CONTROLLER_KEY + "\n")
    other = FakeHost(NODE_KEY)  # the key file's own public key is another one
    with pytest.raises(ctl_engine.ControllerError, match="records no key"):
        ctl_engine.up(state, default, runner=other)
    assert not any(argv[:2] in (["wg", "setconf"], ["wg", "syncconf"]) for argv, _ in other.calls)


def test_a_running_interface_is_synced_not_replaced_and_left_alone_when_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``wg setconf`` replaces every peer (wg(8): "the current configuration is replaced";
    wireguard-tools src/setconf.c sets WGDEVICE_REPLACE_PEERS), dropping each peer's session
    and the endpoint learnt from a node behind NAT, which then cannot be reached until its
    own session expires. A running interface gets ``wg syncconf`` (only what differs), and
    none of the two when nothing changed."""
    monkeypatch.setenv("SWARM_STATE_DIR", str(tmp_path / "state"))
    state = controller_state(load_fleet(fleet_dirs("lab")))
    assert state is not None
    key = _key_file(tmp_path)
    keys = {"lab-gpu-2": NODE_KEY}
    ctl_engine.up(state, key, keys, runner=FakeHost(CONTROLLER_KEY))  # made: setconf
    running = FakeHost(CONTROLLER_KEY, link=True)
    assert not ctl_engine.up(state, key, keys, runner=running).changed
    wg = [argv[:2] for argv, _ in running.calls if argv[0] == "wg" and argv[1] != "pubkey"]
    assert wg == []
    changed = FakeHost(CONTROLLER_KEY, link=True)
    out = ctl_engine.up(
        state, key, {**keys, "lab-gpu-1": "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA="}, runner=changed
    )
    wg = [argv[:2] for argv, _ in changed.calls if argv[0] == "wg" and argv[1] != "pubkey"]
    assert out.changed and wg == [["wg", "syncconf"]]


@pytest.mark.parametrize("spoke", [True, False])
def test_the_unrecorded_key_is_refused_for_pull_nodes_that_peer_with_the_controller(
    spoke: bool, tmp_path: Path
) -> None:
    """A pull spoke's one peer is its hub (resolve.mesh.controller_peer: not a spoke), so
    the controller's key is none of its business; a pull node that peers with the
    controller needs it recorded (its agent has only the repository)."""
    base = declare_pull(copy_lab(tmp_path / "fleet"), ["lab-gpu-1"])
    mesh = base / "policies/lab/mesh.yaml"
    doc = yaml.safe_load(mesh.read_text())
    del doc["spec"]["controller"]["public_key"]  # the lab's: made per machine, not recorded
    if spoke:  # lab-a's nodes around lab-head-1: lab-gpu-1 becomes a spoke
        doc["spec"]["sites"] = {"lab-a": {"topology": "hub-and-spoke", "hub": "lab-head-1"}}
    mesh.write_text(yaml.safe_dump(doc, sort_keys=False))
    report = validate([base / "inventory/lab", base / "policies/lab", base / "policies/shared"]).report
    errors = [d.rule for d in report.diagnostics if d.severity == "error"]
    assert errors == ([] if spoke else ["mesh.controller-key-unrecorded"]), errors
