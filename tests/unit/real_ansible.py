"""One play of the project's role tasks run by the real ``ansible-playbook`` on this machine
(``-c local`` against ``localhost``, the project's ansible.cfg, filters and modules): for the
tests whose subject is what Ansible itself does with a task (templating, coercion), which
the Templar-based role reader (``role_reader.py``) cannot show."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"


def run_play(
    tmp_path: Path, play_vars: dict[str, Any], tasks: list[dict[str, Any]]
) -> subprocess.CompletedProcess[str]:
    """Run ``tasks`` with ``play_vars`` as one play on localhost (no fact gathering); the
    finished process (stdout, stderr, returncode; 300 s at most)."""
    play = [
        {
            "hosts": "localhost",
            "connection": "local",
            "gather_facts": False,
            "vars": play_vars,
            "tasks": tasks,
        }
    ]
    path = tmp_path / "play.yml"
    path.write_text(yaml.safe_dump(play))
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_INVENTORY_ENABLED": "host_list",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    argv = [
        str(ANSIBLE_PLAYBOOK),
        "-i",
        "localhost,",
        "-e",
        f"ansible_python_interpreter={sys.executable}",
        str(path),
    ]
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=300)
