"""Node convergence with Ansible on the real 3-node lab (root; CI runs these as root).

Runs in file order on one lab: converge, converge again (changed=0), mesh reachability,
then an invalid fleet that must stop before any host is touched.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from swarm_infra.inventory_sources import fleet_paths
from swarm_infra.resolve import desired_state
from swarm_infra.validate import load_fleet

from .conftest import ROOT, on_node, playbook, recap

pytestmark = [pytest.mark.root, pytest.mark.lab]
# Mesh addresses as the library resolves them (the test checks them, it does not decide them).
MESH = {
    name: node["mesh"]["address"].split("/")[0]
    for name, node in desired_state(load_fleet(fleet_paths(ROOT / "inventory/lab")))["nodes"].items()
}


def test_converge_succeeds_on_every_host(lab) -> None:
    proc = playbook("-i", "inventory/lab", "playbooks/site.yml")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    r = recap(proc.stdout)
    assert set(r) == set(MESH) and all(v["failed"] == 0 and v["unreachable"] == 0 for v in r.values())
    assert "SIMULATED NVML backend" in proc.stdout


def test_second_converge_changes_nothing(lab) -> None:
    proc = playbook("-i", "inventory/lab", "playbooks/site.yml")
    assert proc.returncode == 0, proc.stdout[-3000:]
    r = recap(proc.stdout)
    assert {h: v["changed"] for h, v in r.items()} == dict.fromkeys(MESH, 0)


def test_check_diff_on_a_converged_fleet_reports_no_change(lab) -> None:
    proc = playbook("-i", "inventory/lab", "playbooks/site.yml", "--check", "--diff")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert {h: v["changed"] for h, v in recap(proc.stdout).items()} == dict.fromkeys(MESH, 0)


def test_every_node_pings_every_other_mesh_address_through_wg0(lab) -> None:
    for src in MESH:
        assert "private key: (hidden)" in on_node(src, "wg show wg0").stdout
        for dst, address in MESH.items():
            if dst != src:
                out = on_node(src, f"ping -c 2 -W 3 -I wg0 {address}").stdout
                assert " 0% packet loss" in out or "1 received" in out, (src, dst, out)


def test_private_keys_stay_0600_on_the_node(lab) -> None:
    for n in MESH:
        assert on_node(n, "stat -c %a /etc/wireguard/wg0.key").stdout.strip() == "600"
        assert "PrivateKey" not in on_node(n, "cat /etc/wireguard/wg0.conf").stdout


def test_simulated_gpu_settings_are_applied(lab) -> None:
    read = "python3 /usr/local/lib/swarm/swarm_gpu_node.py read /etc/swarm/gpu-settings.json"
    out = on_node("lab-gpu-1", read).stdout
    assert '"power_limit_w": 650' in out and '"persistence_mode": true' in out


def test_invalid_policy_stops_before_any_host_is_touched(lab, tmp_path: Path) -> None:
    fleet = tmp_path / "repo"
    (fleet / "inventory").mkdir(parents=True)
    shutil.copytree(ROOT / "inventory/lab", fleet / "inventory/lab")
    shutil.copytree(ROOT / "policies", fleet / "policies")
    mesh = fleet / "policies/lab/mesh.yaml"
    mesh.write_text(mesh.read_text().replace("listen_port: 51820", "listen_port: 70000"))
    marker = on_node("lab-gpu-1", "stat -c %Y /etc/wireguard/peers.json").stdout
    proc = playbook("-i", str(fleet / "inventory/lab"), "playbooks/site.yml")
    assert proc.returncode != 0
    assert "listen_port" in proc.stdout + proc.stderr and "invalid" in proc.stdout + proc.stderr
    assert "PLAY [" not in proc.stdout
    assert on_node("lab-gpu-1", "stat -c %Y /etc/wireguard/peers.json").stdout == marker
