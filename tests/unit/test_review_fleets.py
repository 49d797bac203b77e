"""A fleet renamed or removed (issue #39, item 5): built as real commits (``git mv`` of the
fleet's directories; ``git rm``), reviewed as a pull request is. Nodes are matched across
fleets by address and SSH target (the machines stay the same whatever the fleet is
called); the expected counts come from the fleet's own desired state."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from swarm_infra.resolve import desired_state, load_fleet
from swarm_infra.review import review
from swarm_infra.review.markdown import render

from .conftest import FLEET_DIRS, committed
from .test_review import git, replace
from .test_review_workflow import PROFILE


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("fleets") / "repo"
    return committed(dest, (*FLEET_DIRS, "schemas"), {"README.md": "x\n"})


@pytest.fixture
def repo(origin: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "repo"
    shutil.copytree(origin, dest, symlinks=True)
    return dest


def nodes(repo: Path) -> int:
    return len(desired_state(load_fleet([repo / d for d in FLEET_DIRS]))["nodes"])


def test_a_renamed_fleet_is_one_review_and_blocks(repo: Path) -> None:
    count = nodes(repo)
    git(repo, "mv", "inventory/example", "inventory/prod")
    git(repo, "mv", "policies/example", "policies/prod")
    # ... and, in the same change, a driver bump on every GPU node with no canary.
    replace(repo, "policies/shared/gpu-profiles.yaml", PROFILE, PROFILE.replace('"570"', '"575"'))
    git(repo, "commit", "-qam", "rename example to prod")
    r = review(repo, "HEAD~1", "HEAD")
    assert [f.fleet for f in r.fleets] == ["prod"] and r.exit_code == 1
    (fr,) = r.fleets
    rules = [f.rule for f in fr.flags]
    assert rules[0] == "fleet-renamed" and fr.flags[0].action == "block"
    assert f"{count} nodes of example are in prod" in fr.flags[0].reason
    # The plan diff compares example's base with prod's head: the driver bump is judged.
    assert "driver-without-canary" in rules
    assert any(c.layer == "driver" and c.field == "branch" for c in fr.nodes)
    assert r.summary.startswith("❌ prod (renamed from example): ")
    assert "fleet\\-renamed" in render(r) or "fleet-renamed" in render(r)


def test_a_fleet_removed_blocks(repo: Path) -> None:
    count = nodes(repo)
    git(repo, "rm", "-rq", "inventory/example", "policies/example")
    git(repo, "commit", "-qm", "remove example")
    r = review(repo, "HEAD~1", "HEAD")
    (fr,) = r.fleets
    assert r.exit_code == 1 and [f.rule for f in fr.blocking] == ["fleet-removed"]
    assert f"({count} nodes at the base)" in fr.flags[0].reason
    assert r.summary == "❌ example: the fleet is removed; 1 blocking: fleet-removed"


def test_a_new_fleet_of_other_machines_is_not_a_rename(repo: Path) -> None:
    """A second fleet copied under a new name while the first stays: no fleet is removed,
    so no rename (the copy's nodes share addresses, which the validator's own rules judge)."""
    shutil.copytree(repo / "inventory/example", repo / "inventory/other")
    shutil.copytree(repo / "policies/example", repo / "policies/other")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "another fleet")
    r = review(repo, "HEAD~1", "HEAD")
    assert [f.fleet for f in r.fleets] == ["other"]
    assert not any(f.rule in ("fleet-renamed", "fleet-removed") for f in r.fleets[0].flags)
