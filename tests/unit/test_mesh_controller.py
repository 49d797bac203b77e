"""The operator's controller as a mesh member (issue #27, "Management over the mesh").

What must hold: the controller is declared in the fleet (Mesh ``spec.controller``), not
converged by it (no NodeState); its address is assigned with the nodes' and checked against
them; every node that is not a spoke peers with it, AllowedIPs its /32 only, kept alive
from behind NAT; the nodes ``ssh_over_mesh`` names are reached at their mesh address by
every consumer (both engines' inventory, verify's, metrics', ``swarm lab ssh``); it is
never a Ray member; its interface is brought up from the fleet with its private key only
ever in its file and in a pipe. Expected values come from the declaration and the rules
(derived address = SHA-256 rule, AllowedIPs = /32), never from a previous run.

Real oracles: keys are made by the real ``wg genkey``/``wg pubkey`` where the host has
wireguard-tools; the lab proof (tests/lab/test_mesh_controller.py) runs the real
wireguard-go, NAT and sshd.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import stat
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from swarm_infra import cli, desired_state, load_fleet, validate
from swarm_infra.engines import controller as ctl_engine
from swarm_infra.engines.inventory import inventory_hosts
from swarm_infra.resolve.controller import (
    controller_peer_keys,
    controller_state,
    controller_wg_conf,
    with_private_key,
)
from swarm_infra.resolve.files import UnsafeValue
from swarm_infra.resolve.mesh import allocate, derived_address, record_yaml
from swarm_infra.verify.checks import check_waves, judge_peers

from .conftest import ROOT

# Fixed test keys (valid WireGuard public keys: 32 bytes in base64), not secrets.
CTL_KEY = "GK9rBwkn3vUFr6s2PZXxJbVvjGy5h8wAS6FaA3Bq8nA="
NODE_KEY = "8GBtdgBvIyZ+VHgbYnvEM7SAIxR4a/YTFoEHqeXctHw="
ENDPOINT = "192.0.2.1"  # the lab's service address: every lab site reaches it


def _fleet(tmp: Path, controller: dict[str, Any] | None, name: str = "lab-ctl") -> list[str]:
    """A copy of the lab fleet whose Mesh declares ``controller`` in place of the lab's (None:
    none; the lab fleet declares one, without its key)."""
    inv, pol = tmp / "inventory" / name, tmp / "policies" / name
    shutil.copytree(ROOT / "inventory" / "lab", inv)
    shutil.copytree(ROOT / "policies" / "lab", pol)
    shutil.copytree(ROOT / "policies" / "shared", tmp / "policies" / "shared", dirs_exist_ok=True)
    path = pol / "mesh.yaml"
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    docs[0]["spec"].pop("controller", None)
    if controller is not None:
        docs[0]["spec"]["controller"] = controller
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return [str(inv), str(pol), str(tmp / "policies" / "shared")]


def _ctl(**extra: Any) -> dict[str, Any]:
    return {"public_key": CTL_KEY, "endpoint": ENDPOINT, **extra}


@pytest.fixture
def lab(tmp_path: Path) -> list[str]:
    return _fleet(tmp_path, _ctl())


# ------------------------------------------------------------------ addresses and peers


def test_the_controller_has_a_derived_address_and_no_node_state(lab: list[str]) -> None:
    a = load_fleet(lab)
    cidr = ipaddress.IPv4Network("10.210.0.0/24")  # policies/lab/mesh.yaml
    assert a.controller_address == derived_address(cidr, "controller")
    assert a.controller_address not in a.addresses.values()
    state = desired_state(a)
    assert "controller" not in state["nodes"]
    assert "controller" not in state["cluster"]["mesh"]["addresses"]


def test_every_node_peers_with_the_controller_its_slash_32_only(lab: list[str]) -> None:
    a = load_fleet(lab)
    state = desired_state(a)
    fleet = a.fleet
    want = f"{a.controller_address}/32"
    for name, node in state["nodes"].items():
        peers = {p["name"]: p for p in node["mesh"]["peers"]}
        peer = peers["controller"]
        assert peer["allowed_ips"] == [want]
        assert peer["endpoint"] == f"{ENDPOINT}:51820"
        assert peer["public_key"] == CTL_KEY
        # Behind NAT the node opens the tunnel and keeps its mapping; elsewhere no need.
        assert peer["persistent_keepalive_s"] == (25 if fleet.nodes[name].nat else 0)
        # No other peer routes the controller's address: it is reached directly.
        assert all(want not in p["allowed_ips"] for p in node["mesh"]["peers"] if p["name"] != "controller")
        assert [p["name"] for p in node["mesh"]["peers"]] == sorted(peers)


def test_without_a_controller_no_node_peers_with_one(tmp_path: Path) -> None:
    state = desired_state(load_fleet(_fleet(tmp_path, None)))
    for node in state["nodes"].values():
        assert all(p["name"] != "controller" for p in node["mesh"]["peers"])
        assert node["ssh"]["via_mesh"] is False


def test_the_controllers_own_peers_mirror_the_nodes(lab: list[str]) -> None:
    a = load_fleet(lab)
    state = controller_state(a)
    assert state is not None
    assert state["address"] == f"{a.controller_address}/24"
    peers = {p["name"]: p for p in state["peers"]}
    assert set(peers) == set(a.fleet.nodes)
    for name, node in a.fleet.nodes.items():
        assert peers[name]["allowed_ips"] == [f"{a.addresses[name]}/32"]
        # A NAT'd node has no endpoint: it connects to the controller.
        assert peers[name]["endpoint"] == (None if node.nat else f"{node.address}:51820")
        assert peers[name]["persistent_keepalive_s"] == 0  # the controller has an endpoint


def test_spokes_reach_the_controller_through_their_hub(tmp_path: Path) -> None:
    paths = _fleet(tmp_path, _ctl())
    mesh = Path(paths[1]) / "mesh.yaml"
    doc = yaml.safe_load(mesh.read_text())
    doc["spec"]["sites"] = {"lab-a": {"topology": "hub-and-spoke", "hub": "lab-head-1"}}
    mesh.write_text(yaml.safe_dump(doc, sort_keys=False))
    a = load_fleet(paths)
    state = desired_state(a)
    spoke = state["nodes"]["lab-gpu-1"]["mesh"]["peers"]
    assert [p["name"] for p in spoke] == ["lab-head-1"]  # its hub, the whole CIDR
    ctl = controller_state(a)
    assert ctl is not None
    hub = next(p for p in ctl["peers"] if p["name"] == "lab-head-1")
    assert hub["allowed_ips"] == sorted(
        [f"{a.addresses['lab-head-1']}/32", f"{a.addresses['lab-gpu-1']}/32"],
        key=lambda c: ipaddress.IPv4Network(c),
    )
    assert "lab-gpu-1" not in {p["name"] for p in ctl["peers"]}


def test_the_controller_is_never_a_ray_member(lab: list[str]) -> None:
    a = load_fleet(lab)
    for node in desired_state(a)["nodes"].values():
        if node["ray"]:
            assert str(a.controller_address) not in node["ray"]["firewall"]["members"]


def test_allocate_records_the_controller_with_the_nodes(lab: list[str]) -> None:
    a = load_fleet(lab)
    mesh = a.fleet.mesh
    assert mesh is not None
    record, _ = allocate(mesh, a.fleet.nodes)
    assert set(record) == {*a.fleet.nodes, "controller"}
    assert len(set(record.values())) == len(record)


def test_a_record_without_the_controller_is_an_error_at_the_controller(tmp_path: Path) -> None:
    paths = _fleet(tmp_path, _ctl())
    a = load_fleet(_fleet(tmp_path / "plain", None))
    mesh = a.fleet.mesh
    assert mesh is not None
    record, _ = allocate(mesh, a.fleet.nodes)  # made before the controller was declared
    (Path(paths[0]) / "mesh-addresses.yaml").write_text(record_yaml("lab-mesh", record))
    errors = validate(paths).report.errors
    assert [(e.rule, e.path) for e in errors] == [("mesh.address-unrecorded", "$.spec.controller")]


# ------------------------------------------------------------------- the SSH target


@pytest.mark.parametrize(
    ("mode", "over_mesh"),
    [("nat", {"lab-gpu-2"}), ("all", {"lab-head-1", "lab-gpu-1", "lab-gpu-2"}), ("none", set())],
)
def test_ssh_over_mesh_picks_the_nodes_and_every_engine_connects_there(
    tmp_path: Path, mode: str, over_mesh: set[str]
) -> None:
    a = load_fleet(_fleet(tmp_path, _ctl(ssh_over_mesh=mode)))
    state = desired_state(a)
    # The lab's connection file (lab/state.py): the underlay address, the lab's key.
    overrides = {
        n: {"host": str(node.address), "port": 22, "user": "root", "private_key_file": "/k", "host_keys": []}
        for n, node in a.fleet.nodes.items()
    }
    for declared in (None, overrides):
        for host in inventory_hosts(state, declared):
            node = a.fleet.nodes[host.name]
            mesh_ip = str(a.addresses[host.name])
            want = (
                mesh_ip
                if host.name in over_mesh
                else node.ssh_host
                if declared is None
                else str(node.address)
            )
            assert host.connection.host == want, (mode, host.name)
            assert host.state["ssh"]["via_mesh"] == (host.name in over_mesh)
            if declared is not None:
                assert host.connection.private_key_file == "/k"


class Exec(Exception):
    """Raised in place of ``os.execvp``: carries the argv ``swarm lab ssh`` would run."""


def test_lab_ssh_goes_where_the_fleet_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from swarm_infra.cli import lab as lab_cli

    paths = _fleet(tmp_path, _ctl())
    a = load_fleet(paths)
    conns = {
        n: {"host": str(node.address), "port": 22, "user": "root", "private_key_file": "/k",
            "host_keys": [], "known_hosts_file": "/kh"}
        for n, node in a.fleet.nodes.items()
    }  # fmt: skip
    monkeypatch.setattr(lab_cli, "read_connections", lambda: conns)
    monkeypatch.setattr(lab_cli, "require_root", lambda: None)

    def execvp(file: str, argv: list[str]) -> None:
        raise Exec(argv)

    monkeypatch.setattr(lab_cli.os, "execvp", execvp)
    for node, target in (
        ("lab-gpu-2", a.addresses["lab-gpu-2"]),
        ("lab-gpu-1", a.fleet.nodes["lab-gpu-1"].address),
    ):
        with pytest.raises(Exec) as run:
            cli.main(["lab", "ssh", "-i", paths[0], node, "--", "echo", "$SSH_CONNECTION"])
        argv = run.value.args[0]
        assert argv[-3:] == [f"root@{target}", "echo", "$SSH_CONNECTION"], argv
        assert argv[argv.index("-i") + 1] == "/k"


# ------------------------------------------------------------------------ validation


@pytest.mark.parametrize(
    ("controller", "rule", "path"),
    [
        ({"public_key": CTL_KEY}, "mesh.controller-endpoint-missing", "$.spec.controller.ssh_over_mesh"),
        (_ctl(name="lab-gpu-1"), "mesh.controller-name-taken", "$.spec.controller.name"),
        (_ctl(address="10.210.1.1"), "mesh.address-outside-cidr", "$.spec.controller.address"),
    ],
)
def test_invalid_controllers_are_reported_at_their_line(
    tmp_path: Path, controller: dict[str, Any], rule: str, path: str
) -> None:
    errors = validate(_fleet(tmp_path, controller)).report.errors
    assert [(e.rule, e.path) for e in errors] == [(rule, path)]
    assert errors[0].file.endswith("mesh.yaml") and errors[0].line > 0


def test_a_controller_without_endpoint_is_fine_when_no_nat_node_is_named(tmp_path: Path) -> None:
    assert validate(_fleet(tmp_path, {"public_key": CTL_KEY, "ssh_over_mesh": "none"})).report.ok


def test_a_pinned_controller_takes_the_address_from_a_deriving_node(tmp_path: Path) -> None:
    cidr = ipaddress.IPv4Network("10.210.0.0/24")
    taken = derived_address(cidr, "lab-gpu-1")
    errors = validate(_fleet(tmp_path, _ctl(address=str(taken)))).report.errors
    assert [(e.rule, e.path) for e in errors] == [("mesh.address-collision", "$.metadata.name")]
    assert "the controller" in errors[0].message


# ------------------------------------------------------------------------------ verify


def test_verify_judges_the_controller_peer_on_presence_and_allowed_ips(lab: list[str]) -> None:
    a = load_fleet(lab)
    state = desired_state(a)
    checks = [
        c for wave in check_waves(state) for c in wave if c.kind == "wg_peers" and c.node == "lab-gpu-2"
    ]
    (check,) = checks
    declared = check.args["peers"]
    assert declared["controller"]["controller"] is True
    assert not any(v["controller"] for k, v in declared.items() if k != "controller")
    # A recorded key (the controller's, in the fleet) is the one judged; the others are read.
    keys = {name: d.get("public_key") or f"key-{name}" for name, d in declared.items()}
    now = 1_000_000
    dump = {
        keys[n]: {"allowed_ips": d["allowed_ips"], "latest_handshake": now - 5, "rx_bytes": 1, "tx_bytes": 1}
        for n, d in declared.items()
    }
    # The controller is down: keepalives sent, nothing heard. Not the node's drift.
    dump[keys["controller"]] = {
        **dump[keys["controller"]],
        "latest_handshake": 0,
        "rx_bytes": 0,
        "tx_bytes": 444,
    }
    assert judge_peers(declared, dump, now, keys.get) == {}
    # A node that lost the controller's peer, or routes it more, has drifted.
    wrong = {**dump, keys["controller"]: {**dump[keys["controller"]], "allowed_ips": ["10.210.0.0/24"]}}
    assert set(judge_peers(declared, wrong, now, keys.get)) == {"controller"}
    missing = {k: v for k, v in dump.items() if k != keys["controller"]}
    assert judge_peers(declared, missing, now, keys.get) == {"controller": "not a peer of the interface"}


# -------------------------------------------------------------- the controller's interface


def test_the_configuration_holds_no_private_key_and_refuses_a_forged_one(lab: list[str]) -> None:
    state = controller_state(load_fleet(lab))
    assert state is not None
    # The lab fleet records no node keys: those the nodes reported at converge are used, a
    # malformed or duplicated one never.
    reported = {"lab-gpu-1": NODE_KEY, "lab-gpu-2": NODE_KEY, "lab-head-1": "x\nPostUp = touch /tmp/x"}
    assert controller_peer_keys(state, reported) == {}
    keys = controller_peer_keys(state, {"lab-gpu-2": NODE_KEY, "lab-gpu-1": CTL_KEY})
    assert keys == {"lab-gpu-2": NODE_KEY}  # lab-gpu-1's is the controller's own
    conf = controller_wg_conf(state, keys)
    assert "PrivateKey" not in conf and "Address" not in conf  # wg(8) format, not wg-quick's
    assert conf.count("[Peer]") == 1 and f"PublicKey = {NODE_KEY}" in conf
    spliced = with_private_key(conf, NODE_KEY)
    assert spliced.splitlines()[3:5] == ["[Interface]", f"PrivateKey = {NODE_KEY}"]
    with pytest.raises(UnsafeValue):
        with_private_key(conf, NODE_KEY + "\nPostUp = touch /tmp/x")


class FakeHost:
    """Records each command (argv, stdin); answers ``wg pubkey`` with ``pub`` and ``ip link
    show`` per ``link``, and ``ip link add ... type wireguard`` per ``kernel``."""

    def __init__(self, pub: str, link: bool = False, kernel: bool = False) -> None:
        self.pub, self.link, self.kernel = pub, link, kernel
        self.calls: list[tuple[list[str], str | None]] = []

    def __call__(self, argv: Sequence[str], stdin: str | None) -> subprocess.CompletedProcess[str]:
        argv = list(argv)
        self.calls.append((argv, stdin))
        out, rc = "", 0
        if argv[:2] == ["wg", "pubkey"]:
            out = self.pub + "\n"
        elif argv[:3] == ["ip", "link", "show"]:
            rc = 0 if self.link else 1
        elif argv[:3] == ["ip", "link", "add"]:
            rc = 0 if self.kernel else 2
        return subprocess.CompletedProcess(argv, rc, out, "")


def _key_file(tmp: Path, key: str = NODE_KEY) -> Path:
    path = tmp / "state" / "controller" / "wireguard.key"
    path.parent.mkdir(parents=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, (key + "\n").encode())
    os.close(fd)
    return path


def test_up_sets_the_interface_with_the_key_only_in_a_pipe(
    lab: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SWARM_STATE_DIR", str(tmp_path / "state"))
    state = controller_state(load_fleet(lab))
    assert state is not None
    private = NODE_KEY  # stands for a private key here: any 32 bytes are one
    key = _key_file(tmp_path, private)
    host = FakeHost(CTL_KEY)
    keys = {"lab-gpu-2": CTL_KEY.replace("G", "H")}
    out = ctl_engine.up(state, key, keys, runner=host)
    argvs = [argv for argv, _ in host.calls]
    # No kernel module: wireguard-go makes the link, as wg-quick does on the lab's nodes.
    assert ["wireguard-go", "swarm0"] in argvs
    setconf = [(argv, stdin) for argv, stdin in host.calls if argv[:2] == ["wg", "setconf"]]
    assert setconf == [
        (
            ["wg", "setconf", "swarm0", "/dev/stdin"],
            with_private_key(controller_wg_conf(state, keys), private),
        )
    ]
    assert ["ip", "address", "replace", state["address"], "dev", "swarm0"] in argvs
    assert ["ip", "link", "set", "dev", "swarm0", "mtu", "1420", "up"] in argvs
    assert all(private not in " ".join(argv) for argv in argvs)
    conf = ctl_engine.conf_path(state)
    assert stat.S_IMODE(conf.stat().st_mode) == 0o600
    assert private not in conf.read_text()
    assert out.changed
    # Again: nothing differs, the link exists; check mode runs only reads.
    again = FakeHost(CTL_KEY, link=True)
    out = ctl_engine.up(state, key, keys, check=True, runner=again)
    assert not out.changed and out.diff == ""
    assert {tuple(argv[:2]) for argv, _ in again.calls} <= {("wg", "pubkey"), ("ip", "link")}


def test_up_refuses_a_key_the_fleet_does_not_record(
    lab: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SWARM_STATE_DIR", str(tmp_path / "state"))
    state = controller_state(load_fleet(lab))
    assert state is not None
    host = FakeHost(NODE_KEY)
    with pytest.raises(ctl_engine.ControllerError, match="fleet records"):
        ctl_engine.up(state, _key_file(tmp_path), runner=host)
    assert all(argv[:2] == ["wg", "pubkey"] for argv, _ in host.calls)


def test_up_refuses_a_key_file_others_can_read(tmp_path: Path) -> None:
    key = _key_file(tmp_path)
    key.chmod(0o644)
    with pytest.raises(ctl_engine.ControllerError, match="0600"):
        ctl_engine.read_private_key(key)


@pytest.mark.skipif(shutil.which("wg") is None, reason="needs wireguard-tools (wg)")
def test_controller_key_makes_a_0600_key_once_and_prints_its_public_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = tmp_path / "d" / "wireguard.key"
    assert cli.main(["mesh", "controller-key", "--key", str(key)]) == 0
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    private = key.read_text().strip()
    public = subprocess.run(
        ["wg", "pubkey"], input=private + "\n", capture_output=True, text=True
    ).stdout.strip()
    out = capsys.readouterr().out
    assert f"public_key: {public}" in out and private not in out
    assert cli.main(["mesh", "controller-key", "--key", str(key)]) == 0
    assert key.read_text().strip() == private  # kept
