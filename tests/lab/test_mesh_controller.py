"""Management over the mesh on the real lab (root; issue #27): the controller (this host) is a
mesh member, and push mode reaches the NAT'd node lab-gpu-2 through its mesh address even
with the underlay path to its SSH port closed.

A copy of the lab fleet declares the controller (Mesh ``spec.controller``) with a key made
here by ``swarm mesh controller-key`` (a private key cannot be in Git, so the lab fleet
itself declares none; the test's copy records the public key, as an operator's reviewed
change would) and the lab's service address as its endpoint, which every site reaches as a
provider's node reaches the internet. Steps:

1. converge the mesh layer over the underlay (``ssh_over_mesh: none``): every node's peers
   now hold the controller; lab-gpu-2, behind NAT, keeps its tunnel to the endpoint alive;
2. ``swarm mesh controller-up``: this host's userspace WireGuard (wireguard-go: the kernel
   has no module), its peers' keys from the fleet or from what the nodes reported;
3. ``ssh_over_mesh: nat`` and lab-gpu-2's SSH port closed on the underlay (a TCP reset in
   its site router: the lab's NAT otherwise lets this host in); the underlay SSH fails,
   ``swarm lab ssh`` reaches the node with ``$SSH_CONNECTION`` naming both mesh addresses,
   and ``swarm converge --limit lab-gpu-2`` (pyinfra, mesh layer) succeeds over the mesh.

The real oracles: wireguard-go, the lab's NAT (iptables SNAT in the site router), sshd's own
``SSH_CONNECTION``. Runs in about a minute on a running lab; leaves it dirty (the nodes peer
with a controller the lab fleet does not declare).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from swarm_infra.fleet.sources import fleet_paths
from swarm_infra.lab.mirror import SERVICE_ADDRESS
from swarm_infra.lab.state import LabState
from swarm_infra.resolve import load_fleet
from tests.labkit import converge_summary, fleet_copy, on_node, swarm

pytestmark = [pytest.mark.root, pytest.mark.lab]
LAB_ORDER = 43  # after the end-to-end job: it needs the lab running only
LAB_NEEDS = "running"  # the mesh layer is converged here, from whatever state the nodes are in

NODE = "lab-gpu-2"  # behind NAT in lab-b (inventory/lab/nodes.yaml)


def _declare(inventory: Path, public_key: str, ssh_over_mesh: str) -> None:
    mesh = inventory.parents[1] / "policies" / "lab" / "mesh.yaml"
    doc = yaml.safe_load(mesh.read_text())
    doc["spec"]["controller"] = {
        "public_key": public_key,
        "endpoint": str(SERVICE_ADDRESS),
        "ssh_over_mesh": ssh_over_mesh,
    }
    mesh.write_text(yaml.safe_dump(doc, sort_keys=False))


def _site_router(rule: list[str]) -> list[str]:
    """iptables in lab-b's router namespace: ``rule`` inserted (-I) or deleted (-D) there."""
    netns = LabState.load().sites["lab-b"]["netns"]
    return ["ip", "netns", "exec", netns, "iptables", *rule]


def test_push_reaches_the_natted_node_over_the_mesh_only(
    lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The controller's key, conf and key record in this test's own state directory.
    monkeypatch.setenv("SWARM_STATE_DIR", str(tmp_path / "state"))
    key = tmp_path / "controller.key"
    made = swarm("mesh", "controller-key", "--key", str(key)).stdout
    public_key = made.split("public_key: ")[1].split()[0]
    inventory = fleet_copy(tmp_path / "fleet")
    _declare(inventory, public_key, "none")
    a = load_fleet(fleet_paths(inventory))
    ctl_ip = str(a.controller_address)
    node_ip = str(a.addresses[NODE])
    underlay = str(a.fleet.nodes[NODE].address)
    block = ["-d", underlay, "-p", "tcp", "--dport", "22", "-j", "REJECT", "--reject-with", "tcp-reset"]
    block = ["FORWARD", "-i", "uplink", *block]
    try:
        converged = swarm(
            "converge", "--engine", "pyinfra", "--layer", "mesh", "-i", str(inventory), check=False
        )
        assert converged.returncode == 0, converged.stdout[-3000:] + converged.stderr[-2000:]
        up = swarm("mesh", "controller-up", "-i", str(inventory), "--key", str(key))
        assert "3 of 3 peer(s)" in up.stdout, up.stdout
        # The NAT'd node opens the tunnel (its traffic to the controller: a handshake first).
        # Until the first answer, at most 20 s: a handshake tried before controller-up is
        # retried after WireGuard's REKEY_TIMEOUT (5 s).
        on_node(NODE, f"ping -n -c 1 -w 20 {ctl_ip}")
        _declare(inventory, public_key, "nat")
        subprocess.run(_site_router(["-I", *block]), check=True)
        # The control: the underlay path to the node's SSH is closed.
        closed = swarm("lab", "ssh", "-i", "inventory/lab", NODE, "--", "true", check=False)
        assert closed.returncode != 0
        shown = swarm("lab", "ssh", "-i", str(inventory), NODE, "--", "echo $SSH_CONNECTION").stdout.split()
        # sshd's own record: client address, client port, server address, server port.
        assert (shown[0], shown[2], shown[3]) == (ctl_ip, node_ip, "22"), shown
        over_mesh = swarm(
            "converge", "--engine", "pyinfra", "--layer", "mesh", "--limit", NODE, "-i", str(inventory),
            check=False,
        )  # fmt: skip
        assert over_mesh.returncode == 0, over_mesh.stdout[-3000:] + over_mesh.stderr[-2000:]
        summary = converge_summary(over_mesh.stdout)
        assert set(summary) == {NODE}
        assert summary[NODE]["failed"] == 0 and summary[NODE]["unreachable"] == 0
    finally:
        subprocess.run(_site_router(["-D", *block]), check=False, capture_output=True)
        swarm("mesh", "controller-down", "-i", str(inventory), check=False)
