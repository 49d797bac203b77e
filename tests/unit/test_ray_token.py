"""The Ray token for pull workers: the head serves it on its mesh address to the pull workers
that are its direct WireGuard peers, and to nobody else; such a worker reads it itself.

Expected values come from the fleet (the lab fleet with lab-gpu-2 converging by pull, and a
variant whose head reaches lab-gpu-2 only through the lab's relay), from the resolved peers
of the head (what WireGuard's cryptokey routing accepts from each peer: wireguard.com,
"Cryptokey Routing": a packet from a peer is accepted only when its source address is in
that peer's AllowedIPs), from systemd itself (``systemd-analyze verify`` on the units), and
from a real TCP server on loopback for the node-side read.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import stat
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from ipaddress import ip_network
from pathlib import Path
from typing import Any

import pytest
import yaml

from swarm_infra.fleet.sources import fleet_paths
from swarm_infra.nodeside import raytoken
from swarm_infra.resolve import desired_state, load_fleet, validate
from swarm_infra.resolve.files import layer_files, ray_firewall_rules
from swarm_infra.resolve.ray import token_admission
from swarm_infra.verify.checks import checks_for
from tests.unit.real_ansible import run_play

from .conftest import ROOT
from .pullfleet import copy_lab, declare_pull

TOKEN = (hashlib.sha256(b"a token for the tests").hexdigest() + "\n").encode()


def pull_fleet(tmp: Path, pull: tuple[str, ...] = ("lab-gpu-2",), relayed: bool = False) -> Path:
    """A copy of the lab fleet whose ``pull`` nodes converge by pull (tests/unit/pullfleet.py).
    ``relayed``: lab-gpu-2 moves to lab-a, whose mesh is hub-and-spoke around the lab's relay
    lab-head-1, and the Ray head is lab-gpu-1: the head reaches lab-gpu-2, a spoke as it is,
    only through the hub."""
    declare_pull(copy_lab(tmp), pull)
    if relayed:
        nodes = tmp / "inventory/lab/nodes.yaml"
        docs = [d for d in yaml.safe_load_all(nodes.read_text()) if d]
        for doc in docs:
            if doc["metadata"]["name"] == "lab-gpu-2":
                doc["spec"].update(site="lab-a", address="10.77.1.12")
                doc["spec"].pop("mesh", None)
        nodes.write_text(yaml.safe_dump_all(docs, sort_keys=False))
        ray = tmp / "policies/lab/ray.yaml"
        doc = yaml.safe_load(ray.read_text())
        doc["spec"]["head"] = {"selector": {"nodes": ["lab-gpu-1"]}}
        ray.write_text(yaml.safe_dump(doc, sort_keys=False))
        mesh = tmp / "policies/lab/mesh.yaml"
        doc = yaml.safe_load(mesh.read_text())
        doc["spec"]["sites"] = {"lab-a": {"topology": "hub-and-spoke", "hub": "lab-head-1"}}
        mesh.write_text(yaml.safe_dump(doc, sort_keys=False))
    return tmp


def dirs(base: Path) -> list[Path]:
    return [base / "inventory/lab", base / "policies/lab", base / "policies/shared"]


def resolved(base: Path) -> tuple[Any, dict[str, Any]]:
    a = load_fleet(fleet_paths(base / "inventory/lab"))
    return a, desired_state(a)["nodes"]


def token_warnings(base: Path) -> list[tuple[str, str, str]]:
    report = validate(dirs(base)).report
    assert report.ok, [d for d in report.diagnostics if d.severity == "error"]
    return [
        (d.rule, Path(d.file).name, d.message)
        for d in report.diagnostics
        if d.rule == "pull.ray-token-unreachable"
    ]


# ----------------------------------------------------------------- who is admitted


def peer(name: str, *allowed: str) -> dict[str, Any]:
    return {"name": name, "allowed_ips": list(allowed), "endpoint": None, "persistent_keepalive_s": 0,
            "public_key": None}  # fmt: skip


def test_only_workers_the_head_routes_through_their_own_peer_entry_are_admitted() -> None:
    head_peers = [
        peer("direct", "10.0.0.2/32"),
        peer("relay", "10.0.0.3/32", "10.0.0.4/32", "10.0.1.0/24"),  # routes others' addresses
        peer("shadowed", "10.0.1.5/32"),  # its own entry, but the relay's /24 holds it too
    ]
    workers = {"direct": "10.0.0.2", "behind": "10.0.0.4", "shadowed": "10.0.1.5", "unknown": "10.0.9.9"}
    admitted, relayed = token_admission(head_peers, workers)
    assert admitted == {"direct": "10.0.0.2"}
    assert relayed == ["behind", "shadowed", "unknown"]


def test_the_head_serves_its_direct_pull_worker_and_the_firewall_admits_it_alone(tmp_path: Path) -> None:
    a, nodes = resolved(pull_fleet(tmp_path))
    head, worker, push = nodes["lab-head-1"], nodes["lab-gpu-2"], nodes["lab-gpu-1"]
    port = a.fleet.ray.ports["token"]
    address = str(a.addresses["lab-gpu-2"])
    # lab-gpu-2 is the head's direct peer: the head's entry for it routes its address.
    assert [p["name"] for p in head["mesh"]["peers"] if f"{address}/32" in p["allowed_ips"]] == ["lab-gpu-2"]
    fw = head["ray"]["firewall"]
    assert (fw["token_port"], fw["token_clients"]) == (port, [address])
    assert worker["ray"]["token_source"] == {"host": str(a.addresses["lab-head-1"]), "port": port}
    # A push worker keeps the controller's copy; no worker serves anything.
    assert push["ray"]["token_source"] is None and head["ray"]["token_source"] is None
    for other in (worker, push):
        assert (other["ray"]["firewall"]["token_port"], other["ray"]["firewall"]["token_clients"]) == (
            None,
            [],
        )
    # The token port is not one of Ray's: no member is admitted to it through Ray's rules.
    assert port not in fw["tcp_ports"] and not any(lo <= port <= hi for lo, hi in fw["tcp_ranges"])
    assert token_warnings(tmp_path) == []


def test_a_pull_worker_behind_a_relay_is_not_served_and_is_warned_about(tmp_path: Path) -> None:
    a, nodes = resolved(pull_fleet(tmp_path, relayed=True))
    head = nodes["lab-gpu-1"]
    assert head["ray"]["role"] == "head"
    address = a.addresses["lab-gpu-2"]
    # The hub, lab-head-1, holds lab-gpu-2's address at the head (the whole mesh range routes
    # through it): it could send as lab-gpu-2.
    holders = [
        p["name"] for p in head["mesh"]["peers"] if any(address in ip_network(c) for c in p["allowed_ips"])
    ]
    assert holders == ["lab-head-1"]
    assert (head["ray"]["firewall"]["token_port"], head["ray"]["firewall"]["token_clients"]) == (None, [])
    assert nodes["lab-gpu-2"]["ray"]["token_source"] is None
    paths = {i["path"]: i["state"] for i in layer_files(head, "ray")}
    files = head["layout"]["files"]
    assert paths[files["ray_token_socket"]["path"]] == paths[files["ray_token_service"]["path"]] == "absent"
    [(rule, file, message)] = token_warnings(tmp_path)
    assert (rule, file) == ("pull.ray-token-unreachable", "nodes.yaml")
    assert "not a direct WireGuard peer of the head lab-gpu-1" in message


def test_without_pull_workers_the_head_has_no_token_port(tmp_path: Path) -> None:
    _, nodes = resolved(pull_fleet(tmp_path, pull=()))
    head = nodes["lab-head-1"]
    files = head["layout"]["files"]
    items = {i["path"]: i["state"] for i in layer_files(head, "ray")}
    assert items[files["ray_token_socket"]["path"]] == items[files["ray_token_service"]["path"]] == "absent"
    assert "6386" not in ray_firewall_rules(head)
    assert all(n["ray"]["token_source"] is None for n in nodes.values() if n["ray"])


def test_verify_checks_the_token_socket_on_a_head_serving_pull_workers_only(tmp_path: Path) -> None:
    for pull, served in ((("lab-gpu-2",), True), ((), False)):
        base = tmp_path / ("pull" if pull else "push")
        state = desired_state(load_fleet(fleet_paths(pull_fleet(base, pull=pull) / "inventory/lab")))
        unit = state["nodes"]["lab-head-1"]["layout"]["units"]["ray_token_socket"]
        found = [c for c in checks_for(state) if c.args.get("unit") == unit]
        if not served:
            assert found == []
            continue
        [check] = found
        # On the head; listening (what `systemctl is-active` reports for a socket, testinfra's
        # is_running) and enabled; behind the firewall its unit requires.
        assert (check.node, check.layer, check.kind, check.desired) == (
            "lab-head-1",
            "ray",
            "service",
            "enabled, running",
        )
        firewall = state["nodes"]["lab-head-1"]["layout"]["units"]["ray_firewall"]
        assert check.requires == (f"lab-head-1/ray/service {firewall}",)


# --------------------------------------------------------------- the head's files


def test_the_firewall_admits_the_token_port_from_the_workers_over_the_mesh_only(tmp_path: Path) -> None:
    a, nodes = resolved(pull_fleet(tmp_path))
    head = nodes["lab-head-1"]
    port, iface = a.fleet.ray.ports["token"], a.fleet.mesh.interface
    rules = ray_firewall_rules(head).splitlines()
    accept = f'    iifname "{iface}" ip saddr {{ {a.addresses["lab-gpu-2"]} }} tcp dport {port} accept'
    drop = f"    tcp dport {port} drop"
    assert accept in rules and drop in rules
    # nftables evaluates a chain's rules in order: the accept, then the drop of everyone else,
    # both before loopback's accept (a local process on the head gets no token either).
    assert rules.index(accept) < rules.index(drop) < rules.index('    iifname "lo" accept')
    assert sum(f"dport {port}" in r for r in rules) == 2


def analyze(tmp_path: Path, units: dict[str, str]) -> tuple[int, list[str]]:
    """systemd-analyze verify on ``units`` installed under a root made here (the programs
    they run exist there; the system's own units are linked in)."""
    root = tmp_path / "root"
    unit_dir = root / "etc/systemd/system"
    unit_dir.mkdir(parents=True)
    for program in ("bin/cat", "usr/sbin/nft"):
        path = root / program
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    (root / "usr/lib").mkdir(parents=True, exist_ok=True)
    (root / "usr/lib/systemd").symlink_to("/usr/lib/systemd")
    for name, text in units.items():
        (unit_dir / name).write_text(text)
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", f"--root={root}",
         *(str(unit_dir / n) for n in units if "@." not in n)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    lines = [ln for ln in (done.stdout + done.stderr).splitlines() if "swarm-ray" in ln]
    return done.returncode, lines


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None or not Path("/usr/lib/systemd/system").is_dir(),
    reason="needs systemd",
)
def test_systemd_takes_the_token_socket_and_its_service(tmp_path: Path) -> None:
    _, nodes = resolved(pull_fleet(tmp_path / "fleet"))
    head = nodes["lab-head-1"]
    layout = head["layout"]
    texts = {i["path"]: i["content"] for i in layer_files(head, "ray") if i["state"] == "file"}
    names = ("ray_token_socket", "ray_token_service", "ray_firewall_unit")
    units = {Path(layout["files"][n]["path"]).name: texts[layout["files"][n]["path"]] for n in names}
    # systemd.socket(5): Accept=yes spawns an instance of the service template per connection.
    assert sorted(units) == [
        "swarm-ray-firewall.service",
        "swarm-ray-token.socket",
        "swarm-ray-token@.service",
    ]
    # An instance of the template (systemd names one per connection) is what verify loads.
    units["swarm-ray-token@1.service"] = units["swarm-ray-token@.service"]
    rc, complaints = analyze(tmp_path / "good", units)
    assert (rc, complaints) == (0, [])
    # The same check sees a directive systemd does not take.
    broken = dict(units)
    broken["swarm-ray-token.socket"] = broken["swarm-ray-token.socket"].replace(
        "FreeBind=yes", "FreeBind=maybe"
    )
    rc, complaints = analyze(tmp_path / "bad", broken)
    assert any("swarm-ray-token.socket" in ln and "Failed to parse boolean value" in ln for ln in complaints)
    socket_unit, service = units["swarm-ray-token.socket"], units["swarm-ray-token@.service"]
    address = head["ray"]["node_ip"]
    port = head["ray"]["firewall"]["token_port"]
    assert f"\nListenStream={address}:{port}\n" in socket_unit
    assert "\nAccept=yes\n" in socket_unit and "\nFreeBind=yes\n" in socket_unit
    token = layout["files"]["ray_auth_token"]["path"]
    assert f"\nExecStart=/bin/cat {token}\n" in service
    for line in ("StandardOutput=socket", "StandardInput=null", "NoNewPrivileges=yes", "ProtectSystem=strict",
                 "CapabilityBoundingSet="):  # fmt: skip
        assert f"\n{line}\n" in service


# ------------------------------------------------------------ the worker's read


@contextmanager
def serving(answer: bytes, hold: threading.Event | None = None) -> Iterator[int]:
    """A real TCP server on 127.0.0.1 that writes ``answer`` to each connection and closes
    it (after ``hold`` is set, when given); yields its port."""
    server = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()

    def run() -> None:
        server.settimeout(0.2)
        while not done.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(answer)
                if hold is not None:
                    hold.wait(30)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        done.set()
        if hold is not None:
            hold.set()
        thread.join(5)
        server.close()


def test_a_worker_writes_the_heads_token_0600_once(tmp_path: Path) -> None:
    path = tmp_path / "ray-auth-token"
    with serving(TOKEN) as port:
        assert raytoken.fetch("127.0.0.1", port, str(path), check_mode=True) == {"changed": True}
        assert not path.exists()  # check mode writes nothing
        assert raytoken.fetch("127.0.0.1", port, str(path)) == {"changed": True}
        assert path.read_bytes() == TOKEN
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert raytoken.fetch("127.0.0.1", port, str(path)) == {"changed": False}
        path.chmod(0o644)  # a mode that is not the token's: written again
        assert raytoken.fetch("127.0.0.1", port, str(path)) == {"changed": True}
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(os.listdir(tmp_path)) == ["ray-auth-token"]  # no temporary file left


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (b"", "the head sent nothing"),
        (b"not-a-token-but-secret-looking\n", "expected 64 hexadecimal characters"),
        (TOKEN.upper(), "expected 64 hexadecimal characters"),
        (b"\xff" * 65, "expected 64 hexadecimal characters"),
        (TOKEN * 40, f"more than {raytoken.MAX_BYTES} bytes"),
    ],
)
def test_what_is_not_a_token_is_refused_and_never_quoted(tmp_path: Path, answer: bytes, why: str) -> None:
    path = tmp_path / "ray-auth-token"
    path.write_bytes(TOKEN)
    path.chmod(0o600)
    with serving(answer) as port:
        result = raytoken.fetch("127.0.0.1", port, str(path))
    assert why in str(result["error"]) and "changed" not in result
    assert path.read_bytes() == TOKEN  # the node's file is kept
    text = answer.decode("latin-1").strip()
    assert not text or text not in str(result)


def test_an_unreachable_or_silent_head_fails_within_the_bound(tmp_path: Path, monkeypatch) -> None:
    free = socket.create_server(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()  # nothing listens there now: refused
    result = raytoken.fetch("127.0.0.1", port, str(tmp_path / "t"))
    assert "could not be read from the head at 127.0.0.1:" in str(result["error"])
    # A head that sends a part and holds the connection open: the read gives up at the bound.
    monkeypatch.setattr(raytoken, "TIMEOUT_S", 0.5)
    hold = threading.Event()
    with serving(TOKEN[:10], hold) as port:
        result = raytoken.fetch("127.0.0.1", port, str(tmp_path / "t"))
    assert "nothing complete within 0.5 s" in str(result["error"]), result
    assert not (tmp_path / "t").exists()


def test_the_engines_call_runs_the_read_on_the_node_and_prints_no_token(tmp_path: Path) -> None:
    """The argv and stdin both engines run (engines.raytoken): the node's python3 with the
    node-side bootstrap, the code and its arguments on stdin; run here for real."""
    import json
    import sys

    from swarm_infra.engines.raytoken import ray_token_fetch_call

    path = tmp_path / "ray-auth-token"
    with serving(TOKEN) as port:
        node: Any = {
            "name": "w",
            "ray": {"token_source": {"host": "127.0.0.1", "port": port}},
            "layout": {"files": {"ray_auth_token": {"path": str(path)}}},
        }
        call = ray_token_fetch_call(node)
        assert call["argv"][:2] == ["python3", "-c"] and TOKEN.decode().strip() not in json.dumps(call)
        argv = [sys.executable, *call["argv"][1:]]
        first = subprocess.run(argv, input=call["stdin"], capture_output=True, text=True, check=False)
        again = subprocess.run(argv, input=call["stdin"], capture_output=True, text=True, check=False)
    assert (first.returncode, first.stdout, first.stderr) == (0, '{"changed": true}\n', "")
    assert (again.returncode, again.stdout) == (0, '{"changed": false}\n')
    assert path.read_bytes() == TOKEN
    with serving(b"x" * 65) as port:
        node["ray"]["token_source"]["port"] = port
        call = ray_token_fetch_call(node)
        bad = subprocess.run(argv, input=call["stdin"], capture_output=True, text=True, check=False)
    assert bad.returncode == 1 and "refused" in json.loads(bad.stdout)["error"] and "xxxx" not in bad.stdout
    with pytest.raises(ValueError, match="reads no Ray token over the mesh"):
        ray_token_fetch_call({**node, "ray": {"token_source": None}})


def test_a_token_port_that_is_one_of_rays_is_refused(tmp_path: Path) -> None:
    base = pull_fleet(tmp_path)
    ray = base / "policies/lab/ray.yaml"
    doc = yaml.safe_load(ray.read_text())
    gcs = doc["spec"].get("ports", {}).get("gcs", 6379)  # the schema's default, RayCluster spec.ports
    doc["spec"]["ports"] = {"token": gcs}
    ray.write_text(yaml.safe_dump(doc, sort_keys=False))
    report = validate(dirs(base)).report
    found = [(d.rule, d.path, d.message) for d in report.diagnostics if d.severity == "error"]
    assert found == [("ray.ports-conflict", "$.spec.ports", f"token and gcs are both port {gcs}")], found


def test_the_ray_roles_read_task_runs_under_the_real_ansible(tmp_path: Path) -> None:
    """The ray role's own task (roles/ray/tasks/main.yml, its ``when`` aside), run by the real
    ``ansible-playbook`` on this machine against a loopback head: the node-side code gets its
    JSON on stdin as text (through a task variable Ansible turned it back into a dict, and the
    node read a repr: found on the lab), writes the token 0600, and the result says changed."""
    import json

    tasks = yaml.safe_load((ROOT / "roles/ray/tasks/main.yml").read_text())
    [task] = [t for t in tasks if t["name"] == "Read the Ray cluster's token from the head over the mesh"]
    task = {k: v for k, v in task.items() if k != "when"}
    path = tmp_path / "ray-auth-token"
    out = tmp_path / "result.json"
    with serving(TOKEN) as port:
        swarm = {
            "name": "w",
            "ray": {"token_source": {"host": "127.0.0.1", "port": port}},
            "layout": {"files": {"ray_auth_token": {"path": str(path)}}},
        }
        show = {"ansible.builtin.copy": {"content": "{{ ray_token_fetched | to_json }}", "dest": str(out)}}
        done = run_play(tmp_path, {"swarm": swarm}, [task, show])
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert (result["rc"], result["stdout"], result["changed"]) == (0, '{"changed": true}', True), result
    assert path.read_bytes() == TOKEN and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert TOKEN.decode().strip() not in done.stdout + done.stderr
