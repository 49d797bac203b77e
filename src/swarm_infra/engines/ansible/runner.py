"""Running a layer playbook (``playbooks/<layer>.yml``) through ansible-runner.

The playbooks and roles do the work; the caller validates the fleet first (an invalid
fleet never reaches Ansible) and passes a :class:`~.progress.Progress` as event handler.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...resolve.layers import NAMES

LAYERS = ("site", *NAMES)  # playbooks/site.yml imports playbooks/<layer>.yml in this order


def path_with_ansible() -> str:
    """PATH with this Python's bin directory first, so the project's ansible-playbook runs.

    Raises FileNotFoundError when there is no ansible-playbook at all.
    """
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    if not shutil.which("ansible-playbook", path=path):
        raise FileNotFoundError("ansible-playbook not found (pip install -e . installs ansible)")
    return path


def run_playbook(
    root: Path,
    layer: str,
    inventory: Path,
    *,
    check: bool = False,
    diff: bool = False,
    limit: str | None = None,
    extravars: dict[str, Any] | None = None,
    progress: Callable[[dict[str, Any]], bool],
) -> tuple[int, str]:
    """Run ``root/playbooks/<layer>.yml`` with ansible-runner.

    Returns (ansible-playbook's exit status, the last 2,000 characters of its output);
    the output tail explains errors that happen before any host event (a ``--limit``
    matching no host, a playbook syntax error).
    ``progress`` receives every ansible-runner event. Artifacts go to a temporary
    directory that is removed afterwards, so no task output (which ``no_log`` already
    censors) stays on the controller. ``extravars`` (JSON-able, never secret: they are
    written into that directory) are passed as ``--extra-vars``.
    """
    import ansible_runner  # imported here: `swarm validate` should not pay for it

    flags = [f for f, on in (("--check", check), ("--diff", diff)) if on]
    with tempfile.TemporaryDirectory(prefix="swarm-converge-") as private:
        runner = ansible_runner.run(
            private_data_dir=private,
            project_dir=str(root),
            playbook=str(root / "playbooks" / f"{layer}.yml"),
            inventory=str(inventory.resolve()),
            limit=limit,
            cmdline=" ".join(flags) or None,
            extravars=extravars or {},
            envvars={
                "ANSIBLE_CONFIG": str(root / "ansible.cfg"),
                "ANSIBLE_NOCOLOR": "1",
                "PATH": path_with_ansible(),
            },
            event_handler=progress,
            quiet=True,
        )
        return int(runner.rc), runner.stdout.read()[-2000:]
