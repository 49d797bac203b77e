"""The pyinfra engine against Ansible on the real lab (root; CI runs these as root): the same
desired state gives the same node state, whichever engine converges it.

In file order, on a fresh lab (LAB_NEEDS): ``--check --diff`` reports changes and writes
nothing; pyinfra converges it, a second pyinfra run changes nothing, Ansible then reports
``changed=0`` and ``swarm verify`` passes; injected drift is reported by verify and
repaired by pyinfra. The other way round (pyinfra after Ansible finds nothing to change) is
in tests/lab/test_converge.py, after its fresh Ansible converge. The lab is left converged.

When an earlier converge on this machine warmed the sites' package cache (CI: test_converge's),
the fresh converge runs with the host's route to the Debian mirror cut: the lab's cache
serves what it holds (lab/pkgcache.py), and nothing waits on the mirror.
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from swarm_infra.lab.image import host_mirror
from swarm_infra.lab.state import LabState, state_dir
from tests.labkit import (
    FILES,
    INJECTED,
    LAB_STATE,
    PACKAGE_CACHE_WARM,
    changed_paths,
    converge_summary,
    inject_drift,
    mark_package_cache_warm,
    on_node,
    swarm,
    upper_snapshot,
    verify,
    verify_settled,
)

pytestmark = [pytest.mark.root, pytest.mark.lab]
LAB_ORDER = 22
LAB_NEEDS, LAB_LEAVES = "fresh", "converged"
NODES = set(LAB_STATE["nodes"])


def converge(*args: str) -> dict[str, dict[str, int | str]]:
    proc = swarm("converge", *args, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    summary = converge_summary(proc.stdout)
    assert set(summary) == NODES, proc.stdout[-3000:]
    return summary


CACHE_LOG = state_dir() / "apt-cacher-ng-log" / "apt-cacher.log"  # lab/manager.py


def _route(action: str, address: str) -> None:
    family = "-6" if ":" in address else "-4"
    subprocess.run(["ip", family, "route", action, "unreachable", address], check=True)


@pytest.fixture(scope="module")
def mirror_cut(lab) -> Iterator[dict[str, Any]]:
    """{"cut": the mirror's addresses, "log_from": the cache log's size then}: once the
    package cache is warm, each address gets an ``unreachable`` route on this host (so
    neither the host's cache nor a node, through the lab's NAT, reaches it) and ``swarm lab
    up`` re-checks the cache. Nothing is cut while the cache is cold ("cut" empty). The
    routes are removed and the cache re-checked afterwards."""
    if not PACKAGE_CACHE_WARM.exists():
        yield {"cut": [], "log_from": 0}
        return
    host = urlparse(host_mirror()).hostname
    assert host
    cut = sorted({str(info[4][0]) for info in socket.getaddrinfo(host, 80, proto=socket.IPPROTO_TCP)})
    try:
        for address in cut:
            _route("add", address)
        up = swarm("lab", "up", "--fleet", "lab").stdout
        assert "apt-cacher-ng (offline: the mirror does not answer" in up, up
        yield {"cut": cut, "log_from": CACHE_LOG.stat().st_size if CACHE_LOG.exists() else 0}
    finally:
        for address in cut:
            _route("del", address)
        swarm("lab", "up", "--fleet", "lab")


def changes(summary: dict[str, dict[str, int | str]]) -> dict[str, int]:
    return {host: int(row["changed"]) for host, row in summary.items()}


def test_check_diff_on_a_fresh_lab_reports_changes_and_writes_nothing(lab) -> None:
    before = {node: upper_snapshot(node) for node in NODES}
    proc = swarm("converge", "--engine", "pyinfra", "--check", "--diff", check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    summary = converge_summary(proc.stdout)
    assert all(row["changed"] > 0 and row["failed"] == 0 for row in summary.values()), summary
    assert "check mode: nothing was changed" in proc.stdout
    assert "+ [Interface]" in proc.stdout  # --diff shows the wg-quick file it would write
    assert {n: changed_paths(before[n], upper_snapshot(n)) for n in NODES} == {n: [] for n in NODES}
    # lab-gpu-2, behind the lab's real NAT, joined by pull at `lab up` (its agent made its key).
    joined = {n for n, d in LabState.load().nodes.items() if d.get("joined")}
    assert joined == {"lab-gpu-2"}
    for node in sorted(NODES - joined):
        assert on_node(node, f"test -e {FILES['wireguard_key']}", check=False).returncode == 1


def test_pyinfra_converges_a_fresh_lab_then_ansible_changes_nothing_and_verify_passes(
    lab, mirror_cut: dict[str, Any], tmp_path: Path
) -> None:
    for address in mirror_cut[
        "cut"
    ]:  # the cut holds for the nodes too (their traffic leaves through this host)
        reach = f"timeout 5 bash -c 'exec 3<>/dev/tcp/{address}/80'"
        assert on_node("lab-gpu-1", reach, check=False).returncode != 0, address
    first = converge("--engine", "pyinfra")
    assert all(n > 0 for n in changes(first).values()), first
    mark_package_cache_warm()
    assert changes(converge("--engine", "pyinfra")) == dict.fromkeys(NODES, 0)
    assert changes(converge()) == dict.fromkeys(NODES, 0)
    rc, out, drift = verify(tmp_path)
    assert rc == 0 and drift == [], out
    for node in NODES:  # the key pyinfra made on the node: root's only, never on the controller
        assert on_node(node, f"stat -c '%U:%G %a' {FILES['wireguard_key']}").stdout.strip() == "root:root 600"


def test_the_fresh_converge_ran_with_the_mirror_cut(mirror_cut: dict[str, Any]) -> None:
    if not mirror_cut["cut"]:
        pytest.skip("the package cache was cold (no lab converge warmed it on this machine yet)")
    # apt-cacher-ng's transfer log, one line per transfer: time|I (fetched from upstream) or
    # O (sent to a client)|bytes|client|path. The fresh converge's packages came from the
    # cache, and nothing from the mirror.
    lines = CACHE_LOG.read_bytes()[mirror_cut["log_from"] :].decode().splitlines()
    flags = [line.split("|")[1] for line in lines]
    served = [line for line in lines if line.split("|")[1] == "O" and line.endswith(".deb")]
    assert served and "I" not in flags, lines[-20:]


def test_pyinfra_repairs_injected_drift_and_verify_passes(lab, tmp_path: Path) -> None:
    inject_drift()
    rc, out, drift = verify(tmp_path)
    assert rc == 1 and {(d["node"], d["layer"], d["key"]) for d in drift} == INJECTED, out
    summary = converge("--engine", "pyinfra")
    drifted = {node for node, _, _ in INJECTED}
    assert {n for n, c in changes(summary).items() if c} == drifted, summary
    # lab-gpu-2 was cut off the head (the removed peer) long enough for the head to mark its
    # raylet dead, which then restarts by itself (labkit.verify_settled).
    rc, out, drift = verify_settled(tmp_path)
    assert rc == 0 and drift == [], out
