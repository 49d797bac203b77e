"""The pyinfra engine against Ansible on the real lab (root; CI runs these as root): the same
desired state gives the same node state, whichever engine converges it.

In file order, on a fresh lab (LAB_NEEDS): ``--check --diff`` reports changes and writes
nothing; pyinfra converges it, a second pyinfra run changes nothing, Ansible then reports
``changed=0`` and ``swarm verify`` passes; injected drift is reported by verify and
repaired by pyinfra. The other way round (pyinfra after Ansible finds nothing to change) is
in tests/lab/test_converge.py, after its fresh Ansible converge. The lab is left converged.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.labkit import (
    FILES,
    INJECTED,
    LAB_STATE,
    changed_paths,
    converge_summary,
    inject_drift,
    on_node,
    swarm,
    upper_snapshot,
    verify,
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
    for node in NODES:
        assert on_node(node, f"test -e {FILES['wireguard_key']}", check=False).returncode == 1


def test_pyinfra_converges_a_fresh_lab_then_ansible_changes_nothing_and_verify_passes(
    lab, tmp_path: Path
) -> None:
    first = converge("--engine", "pyinfra")
    assert all(n > 0 for n in changes(first).values()), first
    assert changes(converge("--engine", "pyinfra")) == dict.fromkeys(NODES, 0)
    assert changes(converge()) == dict.fromkeys(NODES, 0)
    rc, out, drift = verify(tmp_path)
    assert rc == 0 and drift == [], out
    for node in NODES:  # the key pyinfra made on the node: root's only, never on the controller
        assert on_node(node, f"stat -c '%U:%G %a' {FILES['wireguard_key']}").stdout.strip() == "root:root 600"


def test_pyinfra_repairs_injected_drift_and_verify_passes(lab, tmp_path: Path) -> None:
    inject_drift()
    rc, out, drift = verify(tmp_path)
    assert rc == 1 and {(d["node"], d["layer"], d["key"]) for d in drift} == INJECTED, out
    summary = converge("--engine", "pyinfra")
    drifted = {node for node, _, _ in INJECTED}
    assert {n for n, c in changes(summary).items() if c} == drifted, summary
    rc, out, drift = verify(tmp_path)
    assert rc == 0 and drift == [], out
