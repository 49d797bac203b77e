"""No secret in a process's arguments or environment: a command line is visible to every
user in /proc/*/cmdline (DESIGN.md pitfalls). Keys travel through files and pipes only."""

from __future__ import annotations

import re

import pytest
import yaml

from .conftest import ROOT

# Command substitution of a file, the way a key ends up in an argument: $(cat F), $(<F), `cat F`.
READS_INTO_ARGV = re.compile(r"\$\(\s*(cat\b|<)|`\s*cat\b")
TASK_FILES = sorted((ROOT / "roles").rglob("*.yml"))
COMMAND_MODULES = ("shell", "command", "raw", "script")


def _commands(node: object):
    """Every shell/command module invocation in a task list, with its text."""
    if isinstance(node, list):
        for item in node:
            yield from _commands(item)
    elif isinstance(node, dict):
        for key, value in node.items():
            if key.split(".")[-1] in COMMAND_MODULES:
                yield node.get("name", "?"), yaml.safe_dump(value)
            elif key in ("block", "rescue", "always"):
                yield from _commands(value)


@pytest.mark.parametrize("path", TASK_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_task_reads_a_file_into_a_command_line(path) -> None:
    tasks = yaml.safe_load(path.read_text())
    bad = [name for name, text in _commands(tasks) if READS_INTO_ARGV.search(text)]
    assert bad == [], f"{path}: {bad} put a file's content into a command line"


def test_the_pattern_is_caught() -> None:
    leak = [
        {
            "name": "old syncconf",
            "ansible.builtin.shell": {"cmd": 'sed "/x/a Key = $(cat /srv/peer.key)"'},
        }
    ]
    assert [n for n, t in _commands(leak) if READS_INTO_ARGV.search(t)] == ["old syncconf"]


def test_no_python_code_builds_a_key_into_argv() -> None:
    """The library (both engines' operations, the files it decides), the plugins, the pyinfra
    deploys and the benchmarks: no command line reads a file into its arguments."""
    paths = [
        *(ROOT / "src").rglob("*.py"),
        *(ROOT / "plugins").rglob("*.py"),
        *(ROOT / "deploys").rglob("*.py"),
        *(ROOT / "benchmarks").rglob("*.py"),
    ]
    assert len(paths) > 50  # the globs see the code
    for path in paths:
        assert not READS_INTO_ARGV.search(path.read_text()), path


def test_wireguard_private_key_never_leaves_the_node_in_pyinfra() -> None:
    """The pyinfra engine makes the key on the node with umask 077 and reads back only the
    public half (the same one task as the wireguard role)."""
    mesh = (ROOT / "src/swarm_infra/engines/pyinfra/operations/mesh.py").read_text()
    assert '"umask", "077", "&&", "wg", "genkey"' in mesh and '"wg", "pubkey", "<"' in mesh
    assert "wg showconf" not in mesh and "cat " not in mesh and '"cat"' not in mesh


def test_the_ray_token_is_never_logged_nor_in_argv() -> None:
    """The Ray token passes the controller (made on the head, copied to the workers): the
    Ansible tasks that read or write it have ``no_log``; pyinfra writes it through stdin
    under umask 077 (resolve.ray.token_command makes it the same way on the head)."""
    tasks = yaml.safe_load((ROOT / "roles/ray/tasks/main.yml").read_text())
    touching = [t for t in tasks if any(m in t for m in ("ansible.builtin.slurp", "ansible.builtin.copy"))]
    assert touching and all(t.get("no_log") is True for t in touching), [t["name"] for t in touching]
    text = (ROOT / "src/swarm_infra/engines/pyinfra/operations/ray.py").read_text()
    assert '"umask 077 && cat > {shlex.quote(path)}"), _stdin=text)' in text
