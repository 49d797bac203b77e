"""Apply never loses a merge (issue #39, item 6): each fleet's last applied commit is the
ref ``refs/swarm/applied/<fleet>``, and the next apply run picks every fleet whose files
differ from it, so a run that GitHub cancelled while pending is caught up.

GitHub's concurrency rule, restated (docs.github.com, "Control the concurrency of
workflows and jobs"): "there can be at most one running and one pending job in a
concurrency group at any time ... Any existing pending job or workflow in the same
concurrency group ... will be canceled". Three quick merges A, B, C: A runs, B waits, C
arrives and cancels B. The histories here are built with the real git and the workflows'
own scripts and steps are run as the runner runs them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from swarm_infra import cli
from swarm_infra.cluster.stacks import StackFileError, parse_stacks, read_stacks, stacks_of

from .conftest import ROOT, committed
from .test_review import FLEET_DIRS, git, replace

SCRIPTS = ROOT / "scripts"
APPLY = ROOT / ".github/workflows/apply.yml"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = committed(tmp_path / "repo", FLEET_DIRS, {"README.md": "# fleet\n"})
    shutil.copytree(repo / "inventory/example", repo / "inventory/other")
    shutil.copytree(repo / "policies/example", repo / "policies/other")
    commit(repo, "a second fleet")
    return repo


def commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD").strip()


def to_apply(repo: Path, after: str) -> list[str]:
    done = subprocess.run(
        ["bash", str(SCRIPTS / "changed-fleets.sh"), "--since-applied", after],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout))


def applied(repo: Path, fleet: str, sha: str) -> None:
    """What the apply job's last step does for ``fleet`` once its apply succeeded."""
    git(repo, "update-ref", f"refs/swarm/applied/{fleet}", sha)


def test_a_cancelled_pending_run_is_caught_up_by_the_next(repo: Path) -> None:
    c0 = git(repo, "rev-parse", "HEAD").strip()
    for fleet in ("example", "other"):
        applied(repo, fleet, c0)
    replace(repo, "policies/example/scheduling.yaml", "\n", "\n# a\n")
    a = commit(repo, "A: example")
    replace(repo, "policies/other/scheduling.yaml", "\n", "\n# b\n")
    b = commit(repo, "B: other")
    (repo / "README.md").write_text("docs\n")
    c = commit(repo, "C: docs")
    # Run A applies example; run B (other) is cancelled while pending; run C comes.
    assert to_apply(repo, a) == ["example"]
    applied(repo, "example", a)
    # Today's choice, the push's own BEFORE..AFTER, never applies B's change of `other`.
    done = subprocess.run(
        ["bash", str(SCRIPTS / "changed-fleets.sh"), b, c], cwd=repo, capture_output=True, text=True
    )
    assert json.loads(done.stdout) == []
    assert to_apply(repo, c) == ["other"]
    applied(repo, "other", c)
    assert to_apply(repo, c) == []


def test_no_record_or_a_record_off_main_means_apply(repo: Path) -> None:
    head = git(repo, "rev-parse", "HEAD").strip()
    assert to_apply(repo, head) == ["example", "other"]  # never applied
    applied(repo, "example", head)
    applied(repo, "other", head)
    # A record that main does not contain (main was rewritten): apply again.
    git(repo, "checkout", "-qb", "elsewhere")
    (repo / "README.md").write_text("x\n")
    off = commit(repo, "off main")
    git(repo, "checkout", "-q", "main")
    applied(repo, "other", off)
    assert to_apply(repo, head) == ["other"]
    # A rule file changed since the record: every fleet.
    (repo / "roles").mkdir()
    (repo / "roles/x.yml").write_text("---\n")
    rules = commit(repo, "a role")
    applied(repo, "other", head)
    assert to_apply(repo, rules) == ["example", "other"]


def _records(repo: Path, lines: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPTS / "apply-records.sh")], cwd=repo, input=lines, capture_output=True, text=True
    )


def test_apply_records_from_the_api_are_written_only_as_commit_ids_and_refs(repo: Path) -> None:
    head = git(repo, "rev-parse", "HEAD").strip()
    marker = repo / "pwned"
    hostile = (
        f"{head} refs/swarm/applied/example\n"
        f"$(touch {marker}) refs/swarm/applied/other\n"
        f"{head} refs/heads/main\n"
        f"{head} refs/swarm/applied/../../heads/x\n"
        f"{'0' * 40} refs/swarm/applied/other\n"
        "\n"
    )
    done = _records(repo, hostile)
    assert done.returncode == 0, done.stderr
    assert git(repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/swarm/").split("\n")[:-1] == [
        f"refs/swarm/applied/example {head}"
    ]
    assert done.stderr.count("skipped") == 4 and not marker.exists()


def _apply_step(name: str, env: dict[str, str], cwd: Path) -> int:
    """Run apply.yml's step ``name`` of the apply job (``bash -e``, its env given)."""
    doc = yaml.safe_load(APPLY.read_text())
    (step,) = [s for s in doc["jobs"]["apply"]["steps"] if s.get("name", "").startswith(name)]
    assert "${{" not in step["run"]
    done = subprocess.run(
        ["bash", "-e", "-c", step["run"]], cwd=cwd, env={**os.environ, **env}, capture_output=True, text=True
    )
    return done.returncode


def test_a_run_never_applies_a_commit_older_than_the_record(repo: Path) -> None:
    old = git(repo, "rev-parse", "HEAD").strip()
    (repo / "README.md").write_text("newer\n")
    new = commit(repo, "newer")
    step = "Refuse a commit older"
    assert _apply_step(step, {"APPLIED": new, "GITHUB_SHA": old, "FLEET": "example"}, repo) == 1
    assert _apply_step(step, {"APPLIED": old, "GITHUB_SHA": new, "FLEET": "example"}, repo) == 0
    assert _apply_step(step, {"APPLIED": "", "GITHUB_SHA": new, "FLEET": "example"}, repo) == 0


def test_the_apply_workflow_keeps_and_moves_the_record() -> None:
    doc = yaml.safe_load(APPLY.read_text())
    fleets = doc["jobs"]["fleets"]["steps"]
    pick = next(s for s in fleets if s.get("id") == "pick")["run"]
    assert "changed-fleets.sh --since-applied" in pick and "refs/heads/main" in pick
    job = doc["jobs"]["apply"]
    assert job["permissions"] == {"contents": "write"}
    names = [s.get("name", "") for s in job["steps"]]
    record = names.index("Record the apply (refs/swarm/applied/FLEET, read by the next run and the review)")
    assert record == len(names) - 1  # last: only after the converge and every stack's pulumi up
    script = job["steps"][record]["with"]["script"]
    assert "force: false" in script  # a fast-forward only: a record never moves back
    up = next(s for s in job["steps"] if s.get("name", "").startswith("Apply the cluster objects"))["run"]
    assert 'swarm stacks --fleet "$FLEET"' in up and 'pulumi stack select "$stack"' in up


def test_every_stack_of_a_fleet_is_listed_the_regional_ones_too(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # From the repository's own stack files: the fleet named by each (Pulumi.yaml's default
    # when absent) and its sites.
    files = {p.name: p.read_text() for p in ROOT.glob("Pulumi*.yaml")}
    expected = sorted(
        name[len("Pulumi.") : -len(".yaml")]
        for name, text in files.items()
        if name != "Pulumi.yaml" and (yaml.safe_load(text)["config"].get("swarm:fleet")) == "example"
    )
    assert len(expected) >= 2
    assert [s.name for s in stacks_of(read_stacks(ROOT), "example")] == expected
    assert cli.main(["stacks", "--fleet", "example", "--root", str(ROOT)]) == 0
    assert capsys.readouterr().out.split() == expected
    regional = parse_stacks({"Pulumi.eu.yaml": "config:\n  swarm:fleet: x\n  swarm:sites: [fra1]\n"})
    assert regional["eu"].sites == ("fra1",) and regional["eu"].context is None
    default = parse_stacks(
        {"Pulumi.yaml": "config:\n  fleet: {default: lab}\n", "Pulumi.s.yaml": "config: {}\n"}
    )
    assert default["s"].fleet == "lab"
    for bad in ("config: [", "config:\n  swarm:sites: fra1\n", "- a\n"):
        with pytest.raises(StackFileError, match=r"^Pulumi\.bad\.yaml"):
            parse_stacks({"Pulumi.bad.yaml": bad})
    (tmp_path / "Pulumi.bad.yaml").write_text("config: [\n")
    assert cli.main(["stacks", "--root", str(tmp_path)]) == 2
    assert "Pulumi.bad.yaml:" in capsys.readouterr().err
