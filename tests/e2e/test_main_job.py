"""The main job end to end on the real 3-node lab (root; CI runs it as root).

lab up -> converge (LAB_NEEDS) -> verify passes -> inject drift (a sysctl,
a stopped wg-quick@wg0, a removed peer, a changed simulated GPU power limit, a file mode,
and a runtime MTU change)
-> verify fails naming exactly those items -> converge -> verify passes -> stop one node
-> converge finishes the others, reports the unreachable one and exits non-zero -> the node
started again, declarations removed from a copy of the fleet are removed from the nodes (the
session's teardown module then checks that lab down leaves nothing behind). The steps run in
file order on the session's lab: the stopped node's converge comes before the removals, so
it finds the other two converged (a converge of the removals' changes took about 30 s more).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from swarm_infra.fleet.sources import fleet_paths
from swarm_infra.resolve import desired_state, load_fleet
from tests.labkit import (
    FILES,
    INJECTED,
    UNITS,
    converge_summary,
    edit,
    fleet_copy,
    inject_drift,
    on_node,
    swarm,
    verify,
    verify_settled,
)

pytestmark = [pytest.mark.root, pytest.mark.lab]
LAB_ORDER = 41  # last of those needing the lab converged: its removals leave Ray gone from the workers
LAB_NEEDS = "converged"
NODES = {"lab-head-1", "lab-gpu-1", "lab-gpu-2"}
WG_UNIT = UNITS["wireguard"]


def test_verify_passes_on_the_converged_lab(lab, tmp_path: Path) -> None:
    # The fixture converged the lab (pyinfra, or an earlier module left it converged). That
    # Ansible then finds nothing to change is test_pyinfra.py's (the same state, the same
    # run): the main job's check here is verify's.
    rc, out, drift = verify(tmp_path)
    assert rc == 0 and drift == [], out
    assert "drift: none" in out and "0 errors" in out
    for node in NODES:
        assert node in out


def test_injected_drift_is_reported_exactly(lab, tmp_path: Path) -> None:
    inject_drift()
    rc, out, drift = verify(tmp_path)
    assert rc == 1, out
    assert {(d["node"], d["layer"], d["key"]) for d in drift} == INJECTED, out
    assert len(drift) == len(INJECTED)
    by_key = {d["key"]: d for d in drift}
    assert by_key["gpu0 power_limit_w"]["actual"] == 500
    assert by_key[f"file {FILES['wireguard_key']}"]["actual"] == "root:root 0644"
    assert by_key["peers on wg0"]["actual"] == {"lab-head-1": "not a peer of the interface"}
    assert "live 1" in by_key["sysctl net.ipv4.tcp_slow_start_after_idle"]["actual"]
    assert "not running" in by_key[f"service {WG_UNIT}"]["actual"]
    assert by_key["wg0 mtu"]["actual"] == 1300
    assert f"drift: {len(INJECTED)} item(s)" in out


def test_converge_repairs_the_drift_and_verify_passes(lab, tmp_path: Path) -> None:
    proc = swarm("converge", check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    summary = converge_summary(proc.stdout)
    assert all(summary[n]["changed"] > 0 for n in NODES), summary
    # lab-gpu-1 lost its tunnels with its stopped wg-quick (and lab-gpu-2 its tunnel to the
    # head with the removed peer): its raylet may be restarting (labkit.verify_settled).
    rc, out, drift = verify_settled(tmp_path)
    assert rc == 0 and drift == [], out


def test_a_stopped_node_is_reported_and_the_others_converge(lab) -> None:
    # lab-gpu-2 is not the canary, and shares its batches with another host: a batch whose
    # every host fails ends an Ansible run, which is what a dead canary should do. (Not the
    # Ray head: without it no worker's Ray can start, and that is a failure too.)
    down, up = "lab-gpu-2", ("lab-gpu-1", "lab-head-1")
    assert "killed (crashed)" in swarm("lab", "stop", "--kill", down).stdout
    status = swarm("lab", "status", check=False)
    assert status.returncode == 1
    assert any(down in ln and "stopped" in ln for ln in status.stdout.splitlines()), status.stdout
    proc = swarm("converge", check=False)
    assert proc.returncode == 1, proc.stdout[-3000:]
    summary = converge_summary(proc.stdout)
    assert summary[down]["status"] == "UNREACHABLE"
    for node in up:
        assert summary[node]["failed"] == 0 and summary[node]["unreachable"] == 0, proc.stdout[-3000:]
        assert summary[node]["ok"] > 20  # every layer ran, mesh and Ray included
    assert f"failed or unreachable: {down}" in proc.stderr


def _record(node: str, path: str) -> dict:
    return json.loads(on_node(node, f"cat {path}").stdout)


def test_removed_declarations_are_removed_from_the_nodes(lab, tmp_path: Path) -> None:
    """A sysctl removed from a profile, a whole profile removed from a node, a peer removed
    (its node, the Ray head, left the fleet) and the Ray cluster removed with it: converge
    removes each, and verify, which checks absence too, passes."""
    # lab-gpu-2, stopped by the test before, starts again (its units are enabled: the mesh
    # and its Ray worker come back by themselves).
    swarm("lab", "up", "--fleet", "lab")
    inventory = fleet_copy(tmp_path / "repo")
    policies = inventory.parent.parent / "policies"
    edit(policies / "shared/host-profiles.yaml", "    net.ipv4.tcp_mtu_probing: 1\n", "")
    edit(policies / "lab/assignments.yaml", "  selector: {}\n", "  selector: {nodes: [lab-gpu-1]}\n")
    edit(
        policies / "lab/assignments.yaml", "selector: {roles: [gpu-worker]}", "selector: {nodes: [lab-gpu-1]}"
    )
    nodes = inventory / "nodes.yaml"
    docs = nodes.read_text().split("\n---\n")
    nodes.write_text("\n---\n".join(d for d in docs if "name: lab-head-1" not in d))
    (policies / "lab/ray.yaml").unlink()  # its head was lab-head-1
    head_key = on_node("lab-head-1", f"wg pubkey < {FILES['wireguard_key']}").stdout.strip()
    host_record = FILES["host_tunables_record"]
    gpu1_before, gpu2_before = _record("lab-gpu-1", host_record), _record("lab-gpu-2", host_record)

    proc = swarm("converge", "-i", str(inventory), check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    # The sysctl: gone from the file, and back to the value it had before the project set it.
    assert "tcp_mtu_probing" not in on_node("lab-gpu-1", f"cat {FILES['sysctl_conf']}").stdout
    live = on_node("lab-gpu-1", "sysctl -n net.ipv4.tcp_mtu_probing").stdout.strip()
    assert live == gpu1_before["sysctl:net.ipv4.tcp_mtu_probing"]
    # The profile: lab-gpu-2 keeps none of host tuning's files, and its values are restored.
    for f in ("sysctl_conf", "tmpfiles_conf", "host_tunables_record"):
        assert on_node("lab-gpu-2", f"test -e {FILES[f]}", check=False).returncode == 1, f
    live = on_node("lab-gpu-2", "sysctl -n net.ipv4.tcp_slow_start_after_idle").stdout.strip()
    assert live == gpu2_before["sysctl:net.ipv4.tcp_slow_start_after_idle"]
    # The peer: lab-head-1 is no peer of lab-gpu-1 any more, in the tunnel or in peers.json;
    # its peers are what the copy declares (lab-gpu-2 and the controller, a mesh member).
    declared = desired_state(load_fleet(fleet_paths(inventory)))["nodes"]["lab-gpu-1"]["mesh"]
    want = sorted(p["name"] for p in declared["peers"])
    assert "lab-head-1" not in want and "lab-gpu-2" in want
    assert len(on_node("lab-gpu-1", "wg show wg0 peers").stdout.split()) == len(want)
    assert head_key not in on_node("lab-gpu-1", "wg show wg0 peers").stdout
    assert sorted(json.loads(on_node("lab-gpu-1", f"cat {FILES['wireguard_peers']}").stdout)) == want
    # Ray: the workers' units are stopped and gone.
    worker_unit = FILES["ray_worker_unit"]
    for node in ("lab-gpu-1", "lab-gpu-2"):
        assert on_node(node, f"test -e {worker_unit}", check=False).returncode == 1, node
        assert on_node(node, "pgrep -f raylet", check=False).returncode == 1, node
    junit = tmp_path / "verify.xml"
    verified = swarm("verify", "-i", str(inventory), "--junit-xml", str(junit), check=False)
    assert verified.returncode == 0, verified.stdout + verified.stderr
