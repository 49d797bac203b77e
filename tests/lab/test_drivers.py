"""roles/drivers against a local stand-in NVIDIA apt repository on a real lab node (root).

The lab's GPUs are simulated, so the role is given an nvml-backed GPU slice through extra
vars and told not to require an NVIDIA PCI device nor to install kernel headers (a lab
node runs the host's kernel); the driver packages come from ``standin_repo`` (real debs
with the names of NVIDIA's compute-only set, no driver inside), python3-pynvml from
Debian's real contrib (added to the node's Debian source by the role). Unproven here: a
real driver build (DKMS: see test_drivers_debian.py), the NVIDIA signing keys, nouveau
unloading and the reboot itself.

The last test pre-seeds the source file NVIDIA's own instructions leave
(``cuda-debian12-x86_64.list``, another ``signed-by`` for the same repository): the role
adopts it instead of adding a second entry, which would make apt refuse every source
("Conflicting values set for option Signed-By", checked with Debian's apt in
tests/unit/test_drivers.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from swarm_infra.resolve import driver_state
from tests.labkit import FILES, ansible, on_node, playbook, recap

from . import standin_repo

pytestmark = [pytest.mark.root, pytest.mark.lab]
LAB_ORDER = 50
LAB_NEEDS = "running"
NODE = "lab-gpu-1"
REPO = "/srv/swarm-standin"


def overrides(tmp: Path, version: str) -> str:
    data = {
        "drivers_state": {
            "backend": "nvml",
            "driver": driver_state({"branch": version.split(".")[0], "version": version}),
        },
        "drivers_apt_sources": [
            {
                "name": "swarm-standin",
                "repo": f"deb [trusted=yes] file:{REPO} /",
                "key_url": f"file://{REPO}/{standin_repo.KEY_FILE}",
            }
        ],
        "drivers_require_device": False,
        "drivers_kernel_headers": False,
    }
    path = tmp / f"drivers-{version}.json"
    path.write_text(json.dumps(data))
    return f"@{path}"


def drivers(tmp: Path, version: str, *extra: str):
    return playbook(
        "-i", "inventory/lab", "playbooks/drivers.yml", "--limit", NODE,
        "-e", overrides(tmp, version), *extra,
    )  # fmt: skip


def installed(package: str) -> str:
    out = on_node(NODE, f"dpkg-query -W -f '${{Version}}' {package}", check=False)
    return out.stdout.strip() if out.returncode == 0 else ""


@pytest.fixture(scope="module")
def repo_on_node(lab, tmp_path_factory) -> None:
    local = standin_repo.build(tmp_path_factory.mktemp("standin"))
    copy = ansible(
        "ansible", "-i", "inventory/lab", NODE, "-m", "ansible.builtin.copy",
        "-a", f"src={local}/ dest={REPO}/ mode=0644",
    )  # fmt: skip
    assert copy.returncode == 0, copy.stdout + copy.stderr


def test_simulated_nodes_are_reported_and_skipped(lab) -> None:
    proc = playbook("-i", "inventory/lab", "playbooks/drivers.yml")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "SIMULATED NVML backend: no NVIDIA driver is installed" in proc.stdout
    assert all(v["changed"] == 0 for v in recap(proc.stdout).values())
    assert not installed("nvidia-driver-cuda")


def test_check_diff_on_a_fresh_node_reports_and_installs_nothing(repo_on_node, tmp_path) -> None:
    proc = drivers(tmp_path, "570.86.15", "--check", "--diff")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert recap(proc.stdout)[NODE]["changed"] > 0
    words = " ".join(proc.stdout.split())  # the YAML callback folds a long message over lines
    packages = "nvidia-driver-cuda, nvidia-kernel-open-dkms, nvidia-persistenced"
    assert f"would install {packages} at 570.86.15-*" in words
    assert "blacklist nouveau" in proc.stdout  # the diff of the file it would write
    assert not installed("nvidia-driver-cuda")
    assert not on_node(
        NODE, f"ls {FILES['nouveau_blacklist']} {FILES['driver_preferences']}", check=False
    ).stdout
    assert "swarm" not in on_node(NODE, "ls /etc/apt/sources.list.d").stdout


def test_installs_the_pinned_version_and_holds_it(repo_on_node, tmp_path) -> None:
    proc = drivers(tmp_path, "570.86.15")
    assert proc.returncode == 0, proc.stdout[-3000:]
    # 570.124.06 and 575.51.03 are newer in the repository: the pin keeps them out.
    pinned = driver_state({"branch": "570", "version": "570.86.15"})["packages"]
    assert {p: installed(p) for p in pinned} == dict.fromkeys(pinned, "570.86.15-1")
    # No container toolkit: the GPU Operator's owns the runtime (issue #23).
    assert not installed("nvidia-container-toolkit")
    # pynvml for the node-side GPU code: Debian's, from contrib, on the stand-in's libnvidia-ml1.
    assert installed("python3-pynvml").startswith("11.")
    assert "contrib" in on_node(NODE, "cat /etc/apt/sources.list.d/swarm-debian-nvidia.list").stdout
    held = on_node(NODE, "apt-mark showhold").stdout.split()
    assert set(pinned) <= set(held)
    # The lab has no NVIDIA module loaded: the daemon is enabled, to start with the module.
    assert on_node(NODE, "systemctl is-enabled nvidia-persistenced").stdout.strip() == "enabled"
    assert "blacklist nouveau" in on_node(NODE, f"cat {FILES['nouveau_blacklist']}").stdout
    # allow_reboot is false: the reboot is marked and reported, not done.
    assert "NVIDIA driver 570.86.15-*" in on_node(NODE, f"cat {FILES['reboot_required']}").stdout
    assert "reboot required" in proc.stdout
    # `apt upgrade` does not move the driver either.
    on_node(NODE, "DEBIAN_FRONTEND=noninteractive apt-get -y -q upgrade")
    assert installed("nvidia-driver-cuda") == "570.86.15-1"


def test_a_toolkit_an_earlier_converge_installed_is_removed(repo_on_node, tmp_path) -> None:
    """Issue #23: earlier converges installed nvidia-container-toolkit beside the GPU
    Operator's toolkit; the drivers layer now removes it (driver.absent_packages)."""
    on_node(NODE, "DEBIAN_FRONTEND=noninteractive apt-get install -y -q nvidia-container-toolkit")
    assert installed("nvidia-container-toolkit") == "1.17.4-1"
    proc = drivers(tmp_path, "570.86.15")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert not installed("nvidia-container-toolkit")


def test_second_run_changes_nothing(repo_on_node, tmp_path) -> None:
    proc = drivers(tmp_path, "570.86.15")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert recap(proc.stdout)[NODE]["changed"] == 0


def test_a_new_declared_version_moves_through_the_hold(repo_on_node, tmp_path) -> None:
    check = drivers(tmp_path, "570.124.06", "--check", "--diff")
    assert check.returncode == 0 and recap(check.stdout)[NODE]["changed"] > 0
    assert installed("nvidia-driver-cuda") == "570.86.15-1"
    proc = drivers(tmp_path, "570.124.06")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert installed("nvidia-driver-cuda") == "570.124.06-1"
    assert "nvidia-driver-cuda" in on_node(NODE, "apt-mark showhold").stdout.split()
    pin = on_node(NODE, f"cat {FILES['driver_preferences']}").stdout
    assert "Pin: version 570.124.06-*" in pin


# What NVIDIA's instructions leave: the same repository, another Signed-By (trusted=yes keeps
# the unsigned stand-in readable; apt compares Signed-By all the same).
NVIDIA_OWN = "/etc/apt/sources.list.d/cuda-debian12-x86_64.list"
NVIDIA_OWN_LINE = f"deb [trusted=yes signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] file:{REPO} /"


def test_a_node_set_up_by_nvidias_instructions_converges_without_an_apt_conflict(
    repo_on_node, tmp_path
) -> None:
    on_node(
        NODE, f"rm -f /etc/apt/sources.list.d/swarm-standin.list && echo '{NVIDIA_OWN_LINE}' > {NVIDIA_OWN}"
    )
    try:
        proc = drivers(tmp_path, "570.124.06")
        assert proc.returncode == 0, proc.stdout[-3000:]
        assert f"adopted {NVIDIA_OWN}" in proc.stdout
        assert not on_node(NODE, "ls /etc/apt/sources.list.d/swarm-standin.list", check=False).stdout.strip()
        # apt reads the node's sources: no "Conflicting values set for option Signed-By".
        update = on_node(NODE, "apt-get update -q 2>&1", check=False)
        assert update.returncode == 0 and "Conflicting" not in update.stdout, update.stdout
        assert installed("nvidia-driver-cuda") == "570.124.06-1"
    finally:
        on_node(NODE, f"rm -f {NVIDIA_OWN}", check=False)
