"""Node convergence with Ansible on the real 3-node lab (root; CI runs these as root).

Runs in file order on a fresh lab (LAB_NEEDS; test_lab.py's, which converges nothing) whose
node UNSEEDED has no prebuilt Ray virtualenv: check mode on the fresh fleet (reports,
applies nothing), converge (UNSEEDED installs Ray with pip: the product's install path,
proven here), converge again (changed=0), pyinfra after Ansible (changes nothing), mesh
reachability, a fourth node added while a ping between two others runs, then an invalid
fleet that must stop before any host is touched. The fresh lab's pyinfra converge is
tests/lab/test_pyinfra.py's.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from swarm_infra.engines.controller import own_public_key
from swarm_infra.fleet.sources import fleet_paths
from swarm_infra.lab.state import LabState, state_dir
from swarm_infra.resolve import desired_state, load_fleet
from tests.labkit import (
    FILES,
    LAB_STATE,
    UNSEEDED,
    changed_paths,
    converge_summary,
    fleet_copy,
    mark_package_cache_warm,
    node_ssh,
    on_node,
    playbook,
    recap,
    swarm,
    upper_snapshot,
)

pytestmark = [pytest.mark.root, pytest.mark.lab]
LAB_ORDER = 20
LAB_NEEDS = "fresh"  # leaves the nodes with a fourth node's peer: dirty
LAB_UNSEEDED = (UNSEEDED,)  # its Ray comes from pip at the converge (tests/labkit.py)
PIP_TASK = "TASK [ray : Install Ray's lock in its virtualenv from the declared package index]"
RAY_VERSION = next(s["ray"]["version"] for s in LAB_STATE["nodes"].values() if s["ray"])
# Mesh addresses as the library resolves them (the test checks them, it does not decide them).
MESH = {name: node["mesh"]["address"].split("/")[0] for name, node in LAB_STATE["nodes"].items()}


# Files only a real (not check-mode) run writes, one per layer.
WRITTEN = " ".join(FILES[f] for f in ("sysctl_conf", "gpu_settings", "wireguard_conf"))


def test_check_diff_on_a_fresh_fleet_reports_changes_and_applies_none(lab) -> None:
    # lab-gpu-2 joined by pull (below): its own agent applies the fleet on its timer until a
    # push converge stops it, a writer besides check mode (test_lab's minutes on this lab put
    # its first run, AGENT_BOOT_DELAY_S after boot, inside this test: seen once, stop 36).
    # Stopped here (a run in progress ends first: stopping a oneshot service waits for it),
    # so what the snapshots compare is check mode's alone.
    units = LAB_STATE["nodes"]["lab-gpu-2"]["layout"]["units"]
    on_node("lab-gpu-2", f"systemctl stop {units['agent_timer']} {units['agent_service']}")
    before = {node: upper_snapshot(node) for node in MESH}
    proc = swarm("converge", "--check", "--diff", check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    summary = converge_summary(proc.stdout)
    assert set(summary) == set(MESH)
    assert all(v["changed"] > 0 and v["failed"] == 0 for v in summary.values()), summary
    assert f"+++ after: {FILES['gpu_settings']}" in proc.stdout  # --diff shows the content
    assert "check mode: nothing was changed" in proc.stdout
    # Nothing under any node's root changed, in any layer (the overlay's upper directory holds
    # every change a node made to its image).
    changed = {node: changed_paths(before[node], upper_snapshot(node)) for node in MESH}
    assert changed == {node: [] for node in MESH}, changed
    # lab-gpu-2, behind the lab's real NAT, joined by pull at `lab up` (its own agent applied
    # the fleet): the others were never converged.
    joined = {n for n, d in LabState.load().nodes.items() if d.get("joined")}
    assert joined == {"lab-gpu-2"}
    for node in sorted(set(MESH) - joined):
        left = on_node(node, f"ls {WRITTEN} {FILES['wireguard_key']}", check=False)
        assert left.stdout == "", (node, left.stdout)
        assert on_node(node, "dpkg-query -W wireguard-tools", check=False).returncode != 0


def test_converge_succeeds_on_every_host(lab) -> None:
    proc = playbook("-i", "inventory/lab", "playbooks/site.yml")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    r = recap(proc.stdout)
    assert set(r) == set(MESH) and all(v["failed"] == 0 and v["unreachable"] == 0 for v in r.values())
    assert "SIMULATED NVML backend" in proc.stdout
    mark_package_cache_warm()  # tests/lab/test_pyinfra.py converges a fresh lab with the mirror cut
    # pip ran on the unseeded node only; the others found Ray's requirements met.
    # (The task runs in the head's play and in the workers'.)
    pip_task = "".join(
        re.split(r"^(?:TASK|PLAY|RUNNING HANDLER) \[", chunk, maxsplit=1, flags=re.M)[0]
        for chunk in proc.stdout.split(PIP_TASK)[1:]
    )
    assert f"changed: [{UNSEEDED}]" in pip_task, pip_task
    seeded = sorted(n for n, s in LAB_STATE["nodes"].items() if s["ray"] and n != UNSEEDED)
    assert seeded and all(f"skipping: [{n}]" in pip_task for n in seeded), pip_task
    # pip's virtualenv is the node's own (its overlay's upper directory), and Ray runs from it.
    venv = FILES["ray_venv"].lstrip("/")
    assert (state_dir() / "nodes" / UNSEEDED / "upper" / venv / "bin" / "ray").is_file()
    assert on_node(UNSEEDED, f"{FILES['ray_venv']}/bin/ray --version").stdout.strip().endswith(RAY_VERSION)
    # Issue #22: every pin of the lock is installed, from the https index (certificate
    # checked, hashes required): pip's own check finds nothing missing or broken.
    assert on_node(UNSEEDED, f"test -s {FILES['ray_lock']}").returncode == 0
    assert on_node(UNSEEDED, f"{FILES['ray_venv']}/bin/pip check").returncode == 0


def ray_pid(node: str) -> str:
    """The MainPID of the node's Ray unit (its raylet's parent: a restart changes it)."""
    ray = LAB_STATE["nodes"][node]["ray"]
    unit = LAB_STATE["nodes"][node]["layout"]["units"]["ray_" + ray["role"]]
    return on_node(node, f"systemctl show -p MainPID --value {unit}").stdout.strip()


def test_second_converge_changes_nothing_and_restarts_no_raylet(lab) -> None:
    ray_nodes = sorted(n for n, s in LAB_STATE["nodes"].items() if s["ray"])
    pids = {n: ray_pid(n) for n in ray_nodes}
    assert all(p not in ("", "0") for p in pids.values()), pids  # Ray runs on each
    proc = swarm("converge")
    summary = converge_summary(proc.stdout)
    assert {h: (v["status"], v["changed"]) for h, v in summary.items()} == dict.fromkeys(MESH, ("ok", 0))
    assert "SIMULATED GPUs: Ray is told of" in proc.stdout  # the simulated nodes say so each run
    assert {n: ray_pid(n) for n in ray_nodes} == pids


def test_after_ansible_pyinfra_finds_nothing_to_change(lab) -> None:
    """The engines' equivalence, this way round (tests/lab/test_pyinfra.py: the other)."""
    nodes = set(MESH)
    for args in (("--check",), ()):
        proc = swarm("converge", "--engine", "pyinfra", *args, check=False)
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
        summary = converge_summary(proc.stdout)
        assert {h: int(v["changed"]) for h, v in summary.items()} == dict.fromkeys(nodes, 0), args


def test_check_diff_on_a_converged_fleet_reports_no_change(lab) -> None:
    proc = swarm("converge", "--check", "--diff")
    assert {h: v["changed"] for h, v in converge_summary(proc.stdout).items()} == dict.fromkeys(MESH, 0)
    assert "--- before" not in proc.stdout


def test_every_node_pings_every_other_mesh_address_through_wg0(lab) -> None:
    for src in MESH:
        assert "private key: (hidden)" in on_node(src, "wg show wg0").stdout
        for dst, address in MESH.items():
            if dst != src:
                out = on_node(src, f"ping -c 2 -W 3 -I wg0 {address}").stdout
                assert " 0% packet loss" in out or "1 received" in out, (src, dst, out)
        # Every peer has completed a handshake within WireGuard's 3-minute rekey window.
        now = int(on_node(src, "date +%s").stdout)
        # Every node's peer (the controller, a peer too, talks with those it reaches only).
        shown = [ln.split() for ln in on_node(src, "wg show wg0 latest-handshakes").stdout.splitlines()]
        handshakes = [t for key, t in shown if key != own_public_key()]  # made by `lab up`
        assert len(handshakes) == len(MESH) - 1 and len(shown) == len(MESH)
        assert all(int(t) > 0 and now - int(t) < 180 for t in handshakes), (src, now, handshakes)


def test_private_keys_stay_0600_on_the_node(lab) -> None:
    for n in MESH:
        assert on_node(n, f"stat -c %a {FILES['wireguard_key']}").stdout.strip() == "600"
        assert "PrivateKey" not in on_node(n, f"cat {FILES['wireguard_conf']}").stdout


def test_simulated_gpu_settings_are_applied(lab) -> None:
    read = f"python3 {FILES['gpu_code']} read {FILES['gpu_settings']}"
    out = on_node("lab-gpu-1", read).stdout
    assert '"power_limit_w": 650' in out and '"persistence_mode": true' in out


FOURTH = """---
apiVersion: swarm.io/v1alpha1
kind: Node
metadata:
  name: lab-cpu-4
spec:
  site: lab-a
  address: 10.77.1.14
  roles: [cpu-worker]
  hardware: {cpus: 2, memory_gib: 4}
"""


def test_adding_a_fourth_node_keeps_a_running_ping_at_zero_loss(lab, tmp_path: Path) -> None:
    inventory = fleet_copy(tmp_path / "repo")
    (inventory / "nodes-4.yaml").write_text(FOURTH)
    state = desired_state(load_fleet(fleet_paths(inventory)))
    assert set(state["nodes"]) == {*MESH, "lab-cpu-4"}
    swarm("lab", "up", *fleet_paths(inventory), f"--unseeded={UNSEEDED}")
    # lab-gpu-2 (site B, through the WAN link) pings lab-head-1's mesh address for the whole
    # re-converge, which adds lab-cpu-4 as a peer on every node with `wg syncconf`.
    pinger = subprocess.Popen(
        node_ssh("lab-gpu-2", f"exec ping -i 0.2 -W 2 -I wg0 {MESH['lab-head-1']}"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        proc = swarm("converge", "-i", str(inventory), check=False)
    finally:
        on_node("lab-gpu-2", "pkill -INT -x ping")
        out, err = pinger.communicate(timeout=60)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    summary = converge_summary(proc.stdout)
    assert summary["lab-cpu-4"]["changed"] > 0 and all(v["failed"] == 0 for v in summary.values())
    sent = int(re.search(r"(\d+) packets transmitted", out).group(1))
    replies = [int(s) for s in re.findall(r"icmp_seq=(\d+)", out)]
    # Every echo sent while converging was answered, in order; only the last one may still
    # have been in flight (one RTT) when ping was interrupted.
    assert sent > 25 and replies == list(range(1, len(replies) + 1)), out + err
    assert sent - len(replies) <= 1, out + err
    new = state["nodes"]["lab-cpu-4"]["mesh"]["address"].split("/")[0]
    for src in MESH:
        assert "1 received" in on_node(src, f"ping -c 1 -W 3 -I wg0 {new}").stdout
    assert "lab-cpu-4" in on_node("lab-head-1", f"cat {FILES['wireguard_peers']}").stdout


def test_invalid_policy_stops_before_any_host_is_touched(lab, tmp_path: Path) -> None:
    inventory = fleet_copy(tmp_path / "repo")
    mesh = tmp_path / "repo/policies/lab/mesh.yaml"
    mesh.write_text(mesh.read_text().replace("listen_port: 51820", "listen_port: 70000"))
    marker = on_node("lab-gpu-1", f"stat -c %Y {FILES['wireguard_peers']}").stdout
    proc = playbook("-i", str(inventory), "playbooks/site.yml")
    assert proc.returncode != 0
    assert "listen_port" in proc.stdout + proc.stderr and "invalid" in proc.stdout + proc.stderr
    assert "PLAY [" not in proc.stdout
    via_cli = swarm("converge", "-i", str(inventory), check=False)
    assert via_cli.returncode == 2 and "listen_port" in via_cli.stderr and "nothing was run" in via_cli.stderr
    assert "PLAY" not in via_cli.stdout
    assert on_node("lab-gpu-1", f"stat -c %Y {FILES['wireguard_peers']}").stdout == marker
