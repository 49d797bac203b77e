"""Removing the lab's cgroups while a task is still in one (root; CI runs it as root).

`swarm lab down` once failed with EBUSY on a node's cgroup whose processes were still
exiting; ``remove_cgroup`` kills what is left and retries within its timeout.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from swarm_infra.lab.node import cgroup2_root, remove_cgroup

pytestmark = pytest.mark.root


@pytest.fixture
def populated_cgroup():
    if os.geteuid() != 0:
        pytest.skip("needs root (cgroups)")
    top = cgroup2_root() / f"swarm-test-{os.getpid()}"
    leaf = top / "child" / "leaf"
    leaf.mkdir(parents=True)
    proc = subprocess.Popen(["sleep", "600"])
    (leaf / "cgroup.procs").write_text(f"{proc.pid}\n")
    yield top, proc
    proc.kill()
    proc.wait()
    if top.exists():
        remove_cgroup(top)


def test_a_cgroup_with_a_live_task_is_emptied_and_removed(populated_cgroup) -> None:
    top, proc = populated_cgroup
    with pytest.raises(OSError):  # what a plain rmdir meets
        (top / "child" / "leaf").rmdir()
    remove_cgroup(top)
    assert not top.exists()
    assert proc.wait(timeout=10) == -9  # SIGKILL


def test_busy_past_the_timeout_raises(populated_cgroup) -> None:
    top, _ = populated_cgroup
    with pytest.raises(OSError):
        remove_cgroup(top, timeout_s=-1)
    assert (top / "child" / "leaf").exists()
