"""The roles' Ray drain tasks under the real ``ansible-playbook``: what the node-side code
reads on stdin is the library's JSON text, byte for byte.

The drain's code and arguments travel as JSON on stdin (``engines.reboot.ray_drain_call``:
fleet strings never templated, never in argv). Ansible's templating turns a template whose
whole result looks like a dict back into one; held in a task variable first, the call's
``stdin`` reached the node as the dict's Python repr (found on the lab with the same form of
the ray role's token read, tests/unit/test_ray_token.py). Each task here is the role's own
(``roles/ray/tasks/upgrade.yml``, ``roles/drivers/tasks/reboot.yml``), its ``when`` and
result handling aside; the node's "Ray virtualenv" is a stand-in whose ``bin/python``
records its stdin and answers what the node-side drain answers when the node is not in
the cluster.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from swarm_infra.engines.reboot import ray_drain_call
from tests.unit.real_ansible import ANSIBLE_PLAYBOOK, run_play

ROOT = Path(__file__).resolve().parents[2]
# (role task file, the task's name prefix, the play vars the task reads besides the node)
TASKS = {
    "ray upgrade": (
        "roles/ray/tasks/upgrade.yml",
        "[ray-drain]",
        {"ray_drain_grace_s": 30, "ray_upgrade": {"to": "2.60.0"}},
        "an upgrade to Ray 2.60.0",
    ),
    "driver reboot": (
        "roles/drivers/tasks/reboot.yml",
        "[ray-drain] Drain",
        {
            "drivers_rollout": {"drain_grace_s": 30},
            "drivers_state": {"driver": {"apt_version": "575.57.08-1"}},
        },
        "a reboot into NVIDIA driver 575.57.08-1",
    ),
}


def _node(venv: Path, token: Path) -> dict[str, Any]:
    """The parts of a NodeState that ``ray_drain_call`` reads."""
    return {
        "name": "lab-gpu-1",
        "ray": {"gcs_address": "10.210.0.10:6379", "node_ip": "10.210.0.11"},
        "layout": {"files": {"ray_venv": {"path": str(venv)}, "ray_auth_token": {"path": str(token)}}},
    }


@pytest.mark.skipif(not ANSIBLE_PLAYBOOK.exists(), reason="needs ansible-playbook beside this Python")
@pytest.mark.parametrize("which", sorted(TASKS))
def test_the_drain_reads_the_librarys_json_on_stdin(which: str, tmp_path: Path) -> None:
    path, prefix, extra_vars, why = TASKS[which]
    tasks = yaml.safe_load((ROOT / path).read_text())
    [task] = [t for t in tasks if t["name"].startswith(prefix) and "ansible.builtin.command" in t]
    task = {k: v for k, v in task.items() if k not in ("when", "changed_when", "register")}
    venv, got = tmp_path / "venv", tmp_path / "stdin.json"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(f'#!/bin/sh\ncat > {got}\necho \'{{"outcome": "not-in-cluster"}}\'\n')
    python.chmod(0o755)
    node = _node(venv, tmp_path / "ray-auth-token")
    play_vars = {"swarm": node, "drivers_node": node, **extra_vars}
    done = run_play(tmp_path, play_vars, [task])
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    expected = ray_drain_call(node, 30, why)  # type: ignore[arg-type]
    assert got.read_text() == expected["stdin"]
    json.loads(got.read_text())  # JSON text, not a dict's repr
