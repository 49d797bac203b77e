"""roles/drivers installing Debian 12's own NVIDIA driver stack for real on a lab node (root).

The GpuProfile source ``debian``: the role adds ``contrib non-free non-free-firmware`` to
the node's Debian source (the lab's mirror, through the site's package cache), pins the
archive's driver version and installs the real packages with their real dependency
closure (DKMS, the kernel module's source, NVML, nvidia-smi, firmware, persistenced,
python3-pynvml). The lab node runs the host's kernel, for which Debian has no headers:
DKMS cannot build the module, and says so; nothing can load without a GPU anyway.

The declared version is read from the node's own apt (the archive's metadata), and the
set is checked against what apt installed, not against a list in this test. Cost: the
first run downloads about 150 MB (gcc for DKMS, the driver); later runs come from the
site's package cache. Runs on lab-gpu-2 (lab-gpu-1 holds the stand-in driver of
test_drivers.py) and leaves what it installed there (``LAB_LEAVES = "spent"``: no converge
removes a driver the fleet does not declare; a later module that needs the lab fresh or
converged gets a new lab, and in LAB_ORDER only the teardown check follows, which removes
the node whole). Purging it took 36 to 44 s of every CI run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from swarm_infra.resolve.drivers import driver_state
from tests.labkit import on_node, playbook, recap

pytestmark = [pytest.mark.root, pytest.mark.lab]
LAB_ORDER = 51
LAB_NEEDS, LAB_LEAVES = "running", "spent"
NODE = "lab-gpu-2"


def _archive_version() -> str:
    """The driver version the lab's Debian mirror publishes: nvidia-kernel-dkms's candidate
    (read after the role added the non-free component)."""
    out = on_node(NODE, "apt-cache policy nvidia-kernel-dkms").stdout
    for line in out.splitlines():
        if line.strip().startswith("Candidate:"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(out)


def _converge(tmp: Path, driver: dict) -> object:
    data = {
        "drivers_state": {"backend": "nvml", "driver": driver},
        "drivers_apt_sources": [],
        "drivers_unpinned_packages": driver["extra_packages"],
        "drivers_require_device": False,
        # The host's kernel is not the node's: no headers for it (nor a module build of minutes).
        "drivers_kernel_headers": False,
    }
    path = tmp / "drivers-debian.json"
    path.write_text(json.dumps(data))
    return playbook("-i", "inventory/lab", "playbooks/drivers.yml", "--limit", NODE, "-e", f"@{path}")


def test_debians_driver_stack_installs_with_its_real_closure(lab, tmp_path) -> None:
    branch = driver_state({"source": "debian", "branch": "535"})
    proc = _converge(tmp_path, branch)
    assert proc.returncode == 0, proc.stdout[-4000:]
    version = _archive_version()  # e.g. 535.261.03-1: the archive's, not this test's
    installed = {}
    for package in branch["packages"]:
        out = on_node(NODE, f"dpkg-query -W -f '${{Version}}' {package}", check=False)
        installed[package] = out.stdout.strip()
    # Every pinned package at the archive's one driver version, held.
    assert installed == dict.fromkeys(branch["packages"], version), installed
    held = set(on_node(NODE, "apt-mark showhold").stdout.split())
    assert set(branch["packages"]) <= held
    # The closure is consistent (apt's own check) and pynvml is there for the GPU layer.
    assert on_node(NODE, "apt-get check -q", check=False).returncode == 0
    assert on_node(NODE, "dpkg-query -W -f '${Status}' python3-pynvml").stdout.endswith("installed")
    # The lab's kernel is the host's, without headers: DKMS registered the module, built
    # nothing, and says why when asked to build.
    status = on_node(NODE, "dkms status").stdout
    assert status.strip() and "installed" not in status, status
    module = status.split(",")[0].split(":")[0].strip()  # nvidia-current/535.261.03
    build = on_node(NODE, f"dkms build {module} -k $(uname -r) 2>&1", check=False)
    assert build.returncode != 0 and "headers" in build.stdout.lower(), build.stdout
    # A converge again changes nothing.
    again = _converge(tmp_path, branch)
    assert again.returncode == 0, again.stdout[-4000:]
    assert recap(again.stdout)[NODE]["changed"] == 0
