"""The node-side tunables code on a fake root: managed files, live writes only where they
differ, values restored when a declaration goes away, check mode writing nothing. (Keys a
container makes read-only are shown on real nodes, in tests/lab.)"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from swarm_infra.nodeside import tunables

CONF, TMPFILES, RECORD = (
    "/etc/sysctl.d/99-test.conf",
    "/etc/tmpfiles.d/test.conf",
    "/var/lib/test/record.json",
)
THP = "/sys/kernel/mm/transparent_hugepage/enabled"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    for key, value in {
        "vm/swappiness": "60",
        "net/core/somaxconn": "4096",
        "net/ipv4/tcp_rmem": "4096\t131072\t6291456",
    }.items():
        (tmp_path / "proc/sys" / key).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "proc/sys" / key).write_text(value + "\n")
    (tmp_path / THP.lstrip("/")).parent.mkdir(parents=True)
    (tmp_path / THP.lstrip("/")).write_text("always [madvise] never\n")
    for cpu in (0, 1):
        gov = tmp_path / f"sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor"
        gov.parent.mkdir(parents=True)
        gov.write_text("schedutil\n")
    return tmp_path


def spec(sysctls: dict[str, str], sysfs: list[dict[str, str]] | None = None) -> dict:
    return {"sysctls": sysctls, "sysfs": sysfs or [], "sysctl_conf": CONF, "tmpfiles_conf": TMPFILES,
            "record": RECORD, "label": "HostProfile test"}  # fmt: skip


def live(root: Path, key: str) -> str:
    return (root / "proc/sys" / key.replace(".", "/")).read_text().split("\n")[0]


GOVERNOR = {
    "name": "cpu_governor",
    "path": "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor",
    "glob": "/sys/devices/system/cpu/cpu*/cpufreq/scaling_governor",
    "value": "performance",
}


def test_files_and_live_values_follow_the_declaration_and_a_second_run_changes_nothing(root: Path) -> None:
    want = {"vm.swappiness": "10", "net.core.somaxconn": "4096", "net.ipv4.tcp_rmem": "4096 87380 16777216"}
    result = tunables.converge(spec(want, [GOVERNOR]), root=str(root))
    assert result["changed"]
    assert {w["key"] for w in result["writes"]} == {
        "vm.swappiness",
        "net.ipv4.tcp_rmem",
        "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor",
        "/sys/devices/system/cpu/cpu1/cpufreq/scaling_governor",
    }  # somaxconn already had its value: not written
    assert live(root, "vm.swappiness") == "10"
    assert live(root, "net.ipv4.tcp_rmem").split() == ["4096", "87380", "16777216"]
    conf = (root / CONF.lstrip("/")).read_text()
    assert [ln for ln in conf.splitlines() if "=" in ln] == [f"{k} = {want[k]}" for k in sorted(want)]
    tmp = (root / TMPFILES.lstrip("/")).read_text()
    assert f"w {GOVERNOR['glob']} - - - - performance" in tmp
    record = json.loads((root / RECORD.lstrip("/")).read_text())
    assert record["sysctl:vm.swappiness"] == "60"  # the value before the project set it
    again = tunables.converge(spec(want, [GOVERNOR]), root=str(root))
    assert not again["changed"] and again["files"] == [] and again["writes"] == []


def test_a_key_no_longer_declared_leaves_the_file_and_gets_its_value_back(root: Path) -> None:
    tunables.converge(spec({"vm.swappiness": "10", "net.core.somaxconn": "1024"}), root=str(root))
    result = tunables.converge(spec({"net.core.somaxconn": "1024"}), root=str(root))
    assert [(r["key"], r["after"]) for r in result["restores"]] == [("vm.swappiness", "60")]
    assert live(root, "vm.swappiness") == "60"
    assert "vm.swappiness" not in (root / CONF.lstrip("/")).read_text()
    assert "sysctl:vm.swappiness" not in json.loads((root / RECORD.lstrip("/")).read_text())


def test_a_profile_removed_whole_removes_the_files_and_restores_every_value(root: Path) -> None:
    tunables.converge(spec({"vm.swappiness": "10"}, [GOVERNOR]), root=str(root))
    result = tunables.converge(spec({}), root=str(root))
    assert result["changed"] and {r["key"] for r in result["restores"]} >= {"vm.swappiness"}
    assert live(root, "vm.swappiness") == "60"
    governors = sorted(root.glob("sys/devices/system/cpu/cpu*/cpufreq/scaling_governor"))
    assert [g.read_text().strip() for g in governors] == ["schedutil", "schedutil"]
    for path in (CONF, TMPFILES, RECORD):
        assert not (root / path.lstrip("/")).exists()


def test_check_mode_reports_the_changes_and_writes_nothing(root: Path) -> None:
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    result = tunables.converge(spec({"vm.swappiness": "10"}, [GOVERNOR]), check_mode=True, root=str(root))
    assert result["changed"] and [f["path"] for f in result["files"]] == [CONF, TMPFILES]
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before


def test_a_key_absent_from_this_node_is_persisted_and_reported(root: Path) -> None:
    result = tunables.converge(spec({"net.core.rmem_max": "67108864"}), root=str(root))
    assert result["not_applied"] == [
        {"key": "net.core.rmem_max", "reason": "not in this node (a host-global key)"}
    ]
    assert "net.core.rmem_max = 67108864" in (root / CONF.lstrip("/")).read_text()


def test_thp_style_files_compare_the_bracketed_choice(root: Path) -> None:
    thp = {"name": "transparent_hugepages", "path": THP, "glob": THP, "value": "madvise"}
    result = tunables.converge(spec({}, [thp]), root=str(root))
    assert result["writes"] == []  # "always [madvise] never" already is madvise


def _refusing_open(monkeypatch: pytest.MonkeyPatch, root: Path, key: str, err: int) -> None:
    """Writes of one live key fail with ``err``, as the kernel's sysctl handler would."""
    import builtins

    real_open = builtins.open
    target = str(root / "proc/sys" / key.replace(".", "/"))

    def fake_open(file, mode="r", *args, **kwargs):  # type: ignore[no-untyped-def]
        if str(file) == target and "w" in mode:
            raise OSError(err, os.strerror(err), str(file))
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", fake_open)


def test_a_value_the_kernel_refuses_is_persisted_and_reported(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _refusing_open(monkeypatch, root, "vm.swappiness", errno.EINVAL)
    result = tunables.converge(spec({"vm.swappiness": "10", "net.core.somaxconn": "8192"}), root=str(root))
    assert result["not_applied"] == [{"key": "vm.swappiness", "reason": "the kernel refused it (EINVAL)"}]
    assert [w["key"] for w in result["writes"]] == ["net.core.somaxconn"]
    assert live(root, "vm.swappiness") == "60" and live(root, "net.core.somaxconn") == "8192"
    assert "vm.swappiness = 10" in (root / CONF.lstrip("/")).read_text()


def test_any_other_write_error_fails(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _refusing_open(monkeypatch, root, "vm.swappiness", errno.EIO)
    with pytest.raises(OSError) as caught:
        tunables.converge(spec({"vm.swappiness": "10"}), root=str(root))
    assert caught.value.errno == errno.EIO
