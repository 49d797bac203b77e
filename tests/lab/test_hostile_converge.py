"""A converge of the lab fleet whose free-form strings are Jinja expressions (issue #11,
class 1): nothing evaluates them, on the controller or on a node (root; needs the lab).

Each expression is ``{{ lookup('pipe', 'touch MARKER') }}``. Where the schema constrains
the string (region, provider, descriptions, label values, GPU model names) the fleet is
refused before Ansible starts; where it stays free text (annotations, StorageClass
parameters) the fleet converges and the marker never appears. Unit tests do the same with
``ansible-playbook -c local`` and a NodeState poisoned after validation
(``tests/unit/test_inventory_plugin.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.jinja_fleet import jinja_fleet
from tests.labkit import LAB_STATE, converge_summary, on_node, playbook, swarm

pytestmark = [pytest.mark.root, pytest.mark.lab]
LAB_ORDER = 40  # after test_pull: its copy converges lab-gpu-1 and lab-gpu-2 back to push nodes
LAB_NEEDS = "running"  # the copy converges the nodes from whatever state they are in
NODES = set(LAB_STATE["nodes"])


def assert_no_marker(marker: Path) -> None:
    assert not marker.exists(), f"{marker} exists: a fleet value was templated on the controller"
    for node in NODES:
        assert on_node(node, f"test ! -e {marker}", check=False).returncode == 0, node


def test_jinja_in_constrained_strings_stops_the_converge_before_any_host(lab, tmp_path: Path) -> None:
    marker = tmp_path / "pwned-refused"
    inventory, poisoned = jinja_fleet(tmp_path, marker, everywhere=True)
    proc = swarm("converge", "-i", str(inventory), check=False)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "nothing was run" in proc.stderr and "Traceback" not in proc.stderr
    refused = [p for p in poisoned if not p.accepted]
    assert refused and all(f"{p.file}:" in proc.stderr for p in refused)
    assert converge_summary(proc.stdout) == {}
    assert_no_marker(marker)


def test_jinja_in_free_text_converges_and_is_never_evaluated(lab, tmp_path: Path) -> None:
    marker = tmp_path / "pwned-converged"
    inventory, poisoned = jinja_fleet(tmp_path, marker, everywhere=False)
    assert poisoned and all(p.accepted for p in poisoned)
    proc = swarm("converge", "-i", str(inventory), check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = converge_summary(proc.stdout)
    assert set(summary) == NODES and all(v["failed"] == 0 for v in summary.values()), summary
    assert_no_marker(marker)
    # Plain Ansible over the same copy, check mode with diffs: every role reads swarm.*.
    again = playbook("-i", str(inventory), "playbooks/site.yml", "--check", "--diff")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert_no_marker(marker)
