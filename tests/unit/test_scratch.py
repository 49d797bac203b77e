"""Local NVMe scratch: what the resolver decides (one device, or an md RAID 0 over several)
and how a device's probe is judged before anything formats it (real ``mkfs``/``blkid``
on image files)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from swarm_infra import desired_state, load_fleet
from swarm_infra.nodeside.facts import blkid_export, scratch_device_problem, scratch_filesystem_made
from swarm_infra.resolve.node import SCRATCH_ARRAY, SCRATCH_LABEL

from .conftest import ROOT, fleet_dirs


def _lab_copy(tmp_path: Path, raid0: bool, second_device: str | None) -> list[Path]:
    """The lab fleet with scratch's ``raid0`` set and, optionally, a second NVMe device on
    every node that declares one."""
    dirs = []
    for src in fleet_dirs("lab"):
        dst = tmp_path / src.relative_to(ROOT)
        shutil.copytree(src, dst)
        dirs.append(dst)
    policy = tmp_path / "policies/lab/scheduling.yaml"
    text = policy.read_text()
    assert "scratch: {mount_path: /scratch, filesystem: xfs}" in text
    policy.write_text(text.replace("filesystem: xfs}", f"filesystem: xfs, raid0: {str(raid0).lower()}}}"))
    if second_device:
        nodes = tmp_path / "inventory/lab/nodes.yaml"
        one = "nvme: [{device: /dev/nvme0n1, size_gib: 1}]"
        assert one in nodes.read_text()
        two = f"nvme: [{{device: /dev/nvme0n1, size_gib: 1}}, {{device: {second_device}, size_gib: 2}}]"
        nodes.write_text(nodes.read_text().replace(one, two))
    return dirs


def _scratch_nodes(dirs: list[Path]) -> dict[str, dict]:
    fleet = load_fleet(dirs)
    declared = {
        doc["metadata"]["name"]: doc["spec"]["hardware"].get("nvme", [])
        for doc in yaml.safe_load_all((dirs[0] / "nodes.yaml").read_text())
        if doc and doc.get("kind") == "Node"
    }
    state = desired_state(fleet)
    nodes = state["nodes"]
    assert {n for n, s in nodes.items() if s.get("storage")} == {n for n, d in declared.items() if d}
    return {n: (s["storage"]["scratch"], declared[n]) for n, s in nodes.items() if s.get("storage")}


def test_several_devices_with_raid0_become_one_md_array(tmp_path: Path) -> None:
    scratch = _scratch_nodes(_lab_copy(tmp_path, raid0=True, second_device="/dev/nvme1n1"))
    assert scratch
    for got, declared in scratch.values():
        assert got["raid0"] is True
        assert got["devices"] == [d["device"] for d in declared]
        assert got["array"] == got["target"] == SCRATCH_ARRAY
        assert got["size_gib"] == sum(d["size_gib"] for d in declared)


def test_one_device_is_never_an_array_even_with_raid0(tmp_path: Path) -> None:
    scratch = _scratch_nodes(_lab_copy(tmp_path, raid0=True, second_device=None))
    assert scratch
    for got, declared in scratch.values():
        assert got["raid0"] is False and got["array"] is None
        assert got["target"] == declared[0]["device"]


def test_several_devices_without_raid0_use_the_first(tmp_path: Path) -> None:
    scratch = _scratch_nodes(_lab_copy(tmp_path, raid0=False, second_device="/dev/nvme1n1"))
    for got, declared in scratch.values():
        assert got["raid0"] is False and got["target"] == declared[0]["device"]


# --------------------------------------------------------------- probes of real images


def _image(tmp_path: Path, name: str, label: str | None) -> Path:
    """A 16 MiB image file, blank or with an ext4 filesystem labelled ``label``."""
    path = tmp_path / name
    with path.open("wb") as f:
        f.truncate(16 * 2**20)
    if label is not None:
        subprocess.run(["mkfs.ext4", "-q", "-F", "-L", label, str(path)], check=True)
    return path


def _probe(path: Path) -> dict[str, str]:
    # blkid exits 2 when it finds nothing: a blank device
    proc = subprocess.run(["blkid", "-p", "-o", "export", str(path)], capture_output=True, text=True)
    assert proc.returncode in (0, 2), proc.stderr
    return blkid_export(proc.stdout)


SCRATCH = {"filesystem": "ext4", "label": SCRATCH_LABEL, "array": None}


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if shutil.which("mkfs.ext4") is None or shutil.which("blkid") is None:
        pytest.fail("mkfs.ext4 and blkid (e2fsprogs, util-linux) are part of every Debian system")
    tmp = tmp_path_factory.mktemp("scratch-images")
    return {
        "blank": _image(tmp, "blank.img", None),
        "ours": _image(tmp, "ours.img", SCRATCH_LABEL),
        "theirs": _image(tmp, "theirs.img", "home"),
    }


def test_a_blank_device_may_become_scratch(images: dict[str, Path]) -> None:
    probe = _probe(images["blank"])
    assert probe == {}
    assert scratch_device_problem("/dev/nvme0n1", probe, SCRATCH) is None
    assert not scratch_filesystem_made(probe, SCRATCH)


def test_the_filesystem_swarm_made_is_recognised_and_not_made_again(images: dict[str, Path]) -> None:
    probe = _probe(images["ours"])
    assert probe["TYPE"] == "ext4" and probe["LABEL"] == SCRATCH_LABEL
    assert scratch_device_problem("/dev/nvme0n1", probe, SCRATCH) is None
    assert scratch_filesystem_made(probe, SCRATCH)


def test_someone_elses_filesystem_is_refused_and_named(images: dict[str, Path]) -> None:
    probe = _probe(images["theirs"])
    problem = scratch_device_problem("/dev/nvme0n1", probe, SCRATCH)
    assert problem is not None
    assert "/dev/nvme0n1 holds ext4 labelled 'home'" in problem and "wipefs -a /dev/nvme0n1" in problem
    assert not scratch_filesystem_made(probe, SCRATCH)
    # the same filesystem type under another declared type is not "made" either
    assert scratch_device_problem("/dev/nvme0n1", _probe(images["ours"]), {**SCRATCH, "filesystem": "xfs"})


def test_raid0_members_of_the_scratch_array_are_ours_other_arrays_are_not() -> None:
    # blkid names an md member's array HOST:NAME (mdadm(8), --name); the array is /dev/md/NAME
    raid = {**SCRATCH, "array": SCRATCH_ARRAY}
    name = SCRATCH_ARRAY.rsplit("/", 1)[-1]
    ours = {"TYPE": "linux_raid_member", "LABEL": f"gpu-01:{name}"}
    other = {"TYPE": "linux_raid_member", "LABEL": "gpu-01:data"}
    assert scratch_device_problem("/dev/nvme1n1", ours, raid) is None
    assert "linux_raid_member labelled 'gpu-01:data'" in (
        scratch_device_problem("/dev/nvme1n1", other, raid) or ""
    )
    # without RAID 0 a member of any array is refused
    assert scratch_device_problem("/dev/nvme1n1", ours, SCRATCH) is not None
    assert "a gpt partition table" in (scratch_device_problem("/dev/x", {"PTTYPE": "gpt"}, SCRATCH) or "")
