"""The node layer as the whole truth on the real lab (root; CI runs it): MIG mode waits for a
reset and the geometry follows it; locked clocks, MIG and scratch storage converge twice
without change; storage refuses a device holding what swarm did not make, and unmounts
scratch no longer declared. Needs the lab converged (LAB_NEEDS); converges a copy of the lab fleet.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from swarm_infra.fleet.sources import fleet_paths
from swarm_infra.resolve import desired_state, load_fleet
from tests.labkit import FILES, converge_summary, edit, fleet_copy, on_node, swarm

pytestmark = [pytest.mark.root, pytest.mark.lab]
LAB_ORDER = 24  # right after test_hostile_node, which leaves the lab converged; it leaves it dirty
LAB_NEEDS = "converged"
MIG = ["3g.40gb", "3g.40gb"]


def verify(inventory: Path, tmp_path: Path) -> tuple[int, str, list[dict]]:
    junit = tmp_path / "verify.xml"
    proc = swarm("verify", "-i", str(inventory), "--junit-xml", str(junit), check=False)
    drift = [
        json.loads(p.get("value"))
        for p in ET.parse(junit).getroot().iter("property")
        if p.get("name") == "drift"
    ]
    return proc.returncode, proc.stdout + proc.stderr, drift


@pytest.fixture(scope="module")
def mig_fleet(tmp_path_factory) -> Path:
    """The lab fleet with MIG on lab-gpu-2's A100s: two 3g.40gb instances each."""
    inventory = fleet_copy(tmp_path_factory.mktemp("mig") / "repo")
    edit(inventory.parent.parent / "policies/lab/gpu-profiles.yaml", "mig: {enabled: false}",
         f"mig: {{enabled: true, profiles: [{', '.join(MIG)}]}}")  # fmt: skip
    return inventory


def read_gpus(node: str) -> dict:
    out = on_node(node, f"python3 {FILES['gpu_code']} read {FILES['gpu_settings']}").stdout
    return json.loads(out)["gpus"]


def test_mig_mode_waits_for_a_reset_and_verify_says_so(lab, mig_fleet: Path, tmp_path: Path) -> None:
    # Only lab-gpu-2's declaration changed (the other nodes' are the converged lab's: verify
    # checks them all below), so only it is converged: an operator's --limit, and CI time.
    proc = swarm("converge", "-i", str(mig_fleet), "--limit", "lab-gpu-2", check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    assert "reboot or GPU reset required for: mig" in proc.stdout
    gpus = read_gpus("lab-gpu-2")
    assert all(g["mig_pending"] is True and g["mig"]["enabled"] is False for g in gpus.values())
    rc, out, drift = verify(mig_fleet, tmp_path)
    assert rc == 1, out
    assert {(d["node"], d["key"]) for d in drift} == {
        ("lab-gpu-2", "gpu0 mig geometry"),
        ("lab-gpu-2", "gpu1 mig geometry"),
    }
    assert all("waits for a GPU reset" in d["actual"] for d in drift)


def test_after_the_reset_the_geometry_is_made_and_a_second_converge_changes_nothing(
    lab, mig_fleet: Path, tmp_path: Path
) -> None:
    # A reboot is the simulated GPU's reset: its pending MIG mode takes effect.
    assert "powered off" in swarm("lab", "stop", "lab-gpu-2").stdout
    swarm("lab", "up", *fleet_paths(mig_fleet))
    proc = swarm("converge", "-i", str(mig_fleet), "--limit", "lab-gpu-2", check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    assert converge_summary(proc.stdout)["lab-gpu-2"]["changed"] > 0
    gpus = read_gpus("lab-gpu-2")
    assert [g["mig"] for g in gpus.values()] == [{"enabled": True, "profiles": sorted(MIG)}] * 2
    # Locked clocks (declared for the A100s), MIG and scratch storage: nothing left to change.
    again = converge_summary(swarm("converge", "-i", str(mig_fleet), "--limit", "lab-gpu-2").stdout)
    assert {h: v["changed"] for h, v in again.items()} == {"lab-gpu-2": 0}
    rc, out, drift = verify(mig_fleet, tmp_path)
    assert rc == 0 and drift == [], out
    state = desired_state(load_fleet(fleet_paths(mig_fleet)))["nodes"]["lab-gpu-2"]["gpu"]
    locked = state["devices"][0]["settings"]["locked_clocks"]
    assert [g["locked_clocks"] for g in gpus.values()] == [locked, locked]


def test_storage_refuses_a_device_holding_a_filesystem_it_did_not_make(lab) -> None:
    node, device = "lab-gpu-2", "/dev/nvme0n1"
    on_node(node, f"umount /scratch && wipefs -qa {device} && mkfs.ext4 -q -L data {device}")
    proc = swarm("converge", "--layer", "storage", "--limit", node, check=False)
    assert proc.returncode == 1
    assert f"{device} holds ext4 labelled 'data', which swarm did not make" in proc.stdout + proc.stderr
    assert on_node(node, f"blkid -p -s LABEL -o value {device}").stdout.strip() == "data"  # untouched
    on_node(node, f"wipefs -qa {device}")
    assert swarm("converge", "--layer", "storage", "--limit", node, check=False).returncode == 0
    mounted = json.loads(on_node(node, "findmnt --json /scratch").stdout)["filesystems"][0]
    assert mounted["fstype"] == "xfs" and "noatime" in mounted["options"].split(",")
    # The loop driver supports discard, so the mount asks for it.
    assert "discard" in mounted["options"].split(",")
    assert "LABEL=swarmscratch /scratch xfs" in on_node(node, "cat /etc/fstab").stdout


def test_scratch_no_longer_declared_is_unmounted_and_leaves_fstab(lab, tmp_path: Path) -> None:
    inventory = fleet_copy(tmp_path / "repo")
    edit(
        inventory.parent.parent / "policies/lab/scheduling.yaml",
        "  scratch: {mount_path: /scratch, filesystem: xfs}\n",
        "",
    )
    # The nodes that declared scratch (the lab's GPU nodes); verify checks every node below.
    proc = swarm("converge", "-i", str(inventory), "--limit", "lab-gpu-1,lab-gpu-2", check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    for node in ("lab-gpu-1", "lab-gpu-2"):
        assert on_node(node, "findmnt /scratch", check=False).returncode != 0
        assert "/scratch" not in on_node(node, "cat /etc/fstab").stdout
        assert on_node(node, f"test -e {FILES['storage_record']}", check=False).returncode != 0
        # The data is not destroyed by omission: the filesystem is still on the device.
        assert on_node(node, "blkid -p -s TYPE -o value /dev/nvme0n1").stdout.strip() == "xfs"
    rc, out, drift = verify(inventory, tmp_path)
    assert rc == 0 and drift == [], out
