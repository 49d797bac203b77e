"""Applying the node's own state with the chosen engine, locally: the same playbooks and
roles as push mode (``playbooks/site.yml``), run from the verified commit's work tree by
``ansible-playbook -c local --limit <node>``, so the parity and verify tests keep covering
what pull mode applies.

The inventory is the fleet's own (the swarm inventory plugin resolves ``inventory/<fleet>``
of the work tree with the library, as push mode does); ``-c local`` replaces the SSH
connection (the plugin sets no ``ansible_connection`` host variable, so the command line's
connection applies), and ``--limit`` keeps the run to this node. Ansible's ``ansible.posix.
json`` callback prints one JSON document whose ``stats`` give the changed and failed counts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..engines.ansible.runner import path_with_ansible


@dataclass(frozen=True)
class ApplyResult:
    """An apply's outcome: ``ok`` (the engine exited 0 and no task failed), task counts
    (None when the engine gave none), and ``message``: the engine's last error line."""

    ok: bool
    changed: int | None
    failed: int | None
    message: str = ""


def ansible_argv(tree: Path, fleet: str, node: str) -> list[str]:
    """``ansible-playbook`` converging ``node`` of fleet ``fleet`` from ``tree`` on this
    machine (``-c local``, ``--limit node``), every layer (``playbooks/site.yml``)."""
    return [
        "ansible-playbook",
        "-i",
        str(tree / "inventory" / fleet),
        "-c",
        "local",
        "--limit",
        node,
        str(tree / "playbooks" / "site.yml"),
    ]


def ansible_env(tree: Path) -> dict[str, str]:
    """The environment of the run: the work tree's ``ansible.cfg``, the JSON callback,
    this Python's ansible first on PATH, no colour, and the work tree's ``src`` first on
    PYTHONPATH: the inventory plugin and filters then resolve the fleet with the verified
    commit's own library, as push mode runs the controller's checkout (the agent's installed
    package only fetches, verifies and gates)."""
    env = library_env(tree)
    env.update(
        ANSIBLE_CONFIG=str(tree / "ansible.cfg"),
        ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_RETRY_FILES_ENABLED="0",
        PATH=path_with_ansible(),
    )
    return env


def library_env(tree: Path) -> dict[str, str]:
    """This process's environment with ``tree/src`` first on PYTHONPATH: a program started
    with it imports the verified commit's ``swarm_infra`` (the installed one when the tree
    has none)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tree / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def parse_stats(output: str, node: str) -> tuple[int | None, int | None]:
    """(changed, failed) of ``node`` in the ``ansible.posix.json`` callback's output (its
    ``stats``: ``changed``, ``failures``, ``unreachable``); (None, None) when the output
    holds no such document (Ansible stopped before any play)."""
    start = output.find("{")
    if start < 0:
        return None, None
    try:
        doc = json.loads(output[start:])
    except json.JSONDecodeError:
        return None, None
    stats = doc.get("stats", {}).get(node) if isinstance(doc, dict) else None
    if not isinstance(stats, dict):
        return None, None
    failed = int(stats.get("failures", 0)) + int(stats.get("unreachable", 0))
    return int(stats.get("changed", 0)), failed


def spawn(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """The engine's process (``subprocess.run``): the one thing tests replace."""
    return subprocess.run(argv, **kwargs)


def apply_local(tree: Path, fleet: str, node: str, timeout_s: int) -> ApplyResult:
    """Run :func:`ansible_argv` in ``tree``; its output stays in this process (the journal
    gets the tail of a failure only: tasks with ``no_log`` are censored by Ansible)."""
    try:
        done = spawn(
            ansible_argv(tree, fleet, node),
            cwd=tree,
            env=ansible_env(tree),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return ApplyResult(False, None, None, f"ansible-playbook ran over {timeout_s} s and was stopped")
    except FileNotFoundError as exc:
        return ApplyResult(False, None, None, str(exc))
    changed, failed = parse_stats(done.stdout, node)
    ok = done.returncode == 0 and not failed
    message = ""
    if not ok:
        tail = (done.stderr.strip() or done.stdout.strip()).splitlines()
        message = f"ansible-playbook exited {done.returncode}" + (f": {tail[-1][:300]}" if tail else "")
        print(done.stdout[-4000:], file=sys.stderr)
    return ApplyResult(ok, changed, failed, message)
