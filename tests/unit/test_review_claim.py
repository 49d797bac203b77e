"""The effect of a code change, as the head's own code claims it (issue #39, item 2).

The reviewer is the base's code, so a pull request that changes the resolver (here: the
NVIDIA apt repository every GPU node gets, in ``resolve/drivers.py``) changes no fleet
file and, judged by the base's code, no node. The comment must never say so without
saying that the code's effect is unknown; once head-plan.yml has run the HEAD'S code
(``swarm claim`` on the merge commit, unprivileged), its claim is shown beside the
verdict and never changes it.

"The head's code" here is really other code: a copy of this checkout's ``src`` with the
change applied, run as a separate process on a checkout of the merge commit, as
head-plan.yml runs it. Expected counts come from the base's desired state: the nodes
whose driver layer names the repository.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from swarm_infra.resolve import desired_state, load_fleet
from swarm_infra.resolve.drivers import NVIDIA_CUDA_REPO
from swarm_infra.review import review
from swarm_infra.review.claim import ClaimInvalid, read_claim
from swarm_infra.review.git import merge_commit
from swarm_infra.review.markdown import render

from .conftest import FLEET_DIRS, ROOT, committed
from .test_review import git

DRIVERS = "src/swarm_infra/resolve/drivers.py"
EVIL = "https://mirror.example.net/nvidia/"


@pytest.fixture(scope="module")
def pr(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str, Path]:
    """main (the example fleet and the resolver's file), a pull request changing the
    resolver's repository, and the head's claim: (repo, main's tip, the head, claim file)."""
    tmp = tmp_path_factory.mktemp("claim")
    repo = committed(tmp / "repo", (*FLEET_DIRS, "schemas"), {DRIVERS: (ROOT / DRIVERS).read_text()})
    tip = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "checkout", "-qb", "pr")
    text = (repo / DRIVERS).read_text()
    assert text.count(NVIDIA_CUDA_REPO.split("/repos/")[0]) >= 1
    changed = text.replace(NVIDIA_CUDA_REPO, EVIL + "debian12/x86_64/")
    (repo / DRIVERS).write_text(changed)
    git(repo, "commit", "-qam", "a faster mirror")
    head = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "checkout", "-q", "main")
    # head-plan.yml: the head's code (its src/) on a checkout of the merge commit.
    code = tmp / "head-code" / "src"  # a source checkout's layout: the schemas beside src/
    shutil.copytree(ROOT / "src", code, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "schemas", code.parent / "schemas")
    (code / "swarm_infra/resolve/drivers.py").write_text(changed)
    checkout = tmp / "merge"
    git(repo, "worktree", "add", "-q", "--detach", str(checkout), merge_commit(repo, tip, head))
    claim = tmp / "claim.json"
    env = {**os.environ, "PYTHONPATH": str(code)}
    done = subprocess.run(
        [sys.executable, "-m", "swarm_infra.cli", "claim", "--out", str(claim)],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return repo, tip, head, claim


def gpu_nodes_with_the_repo(repo: Path) -> list[str]:
    nodes = desired_state(load_fleet([repo / d for d in FLEET_DIRS]))["nodes"]
    return sorted(n for n, s in nodes.items() if NVIDIA_CUDA_REPO in json.dumps(s.get("gpu")))


def test_without_a_claim_the_effect_of_the_code_is_said_to_be_unknown(
    pr: tuple[Path, str, str, Path],
) -> None:
    repo, _, head, _ = pr
    r = review(repo, "main", head, merge=True)
    assert r.code_changed == [DRIVERS] and r.exit_code == 0
    (line,) = r.summary.splitlines()
    assert "example: by the base's code 0 nodes change" in line
    assert "the effect of the head's code is unknown until head-plan has run" in line
    assert not line.startswith("✅")


def test_the_claim_shows_what_the_heads_code_changes_and_never_judges(
    pr: tuple[Path, str, str, Path],
) -> None:
    repo, _, head, claim = pr
    expected = gpu_nodes_with_the_repo(repo)
    assert expected
    without = review(repo, "main", head, merge=True)
    r = review(repo, "main", head, merge=True, claim=read_claim(claim))
    (fr,) = r.fleets
    assert fr.claim is not None and not fr.claim.stale and fr.claim.error is None
    claimed = sorted({n for c in fr.claim.nodes for n in c.nodes})
    assert claimed == expected
    assert f"the head's code claims {len(expected)} more nodes" in r.summary
    assert (r.exit_code, [f.rule for f in fr.flags]) == (
        without.exit_code,
        [f.rule for f in without.fleets[0].flags],
    )
    md = render(r)
    assert "### The head's claim" in md and "mirror\\.example\\.net" in md


def test_a_claim_of_another_merge_result_is_stale(pr: tuple[Path, str, str, Path], tmp_path: Path) -> None:
    repo, _, head, claim = pr
    doc = json.loads(claim.read_text())
    doc["tree"] = "0" * 40
    other = tmp_path / "other.json"
    other.write_text(json.dumps(doc))
    r = review(repo, "main", head, merge=True, claim=read_claim(other))
    assert r.fleets[0].claim is not None and r.fleets[0].claim.stale
    assert "the head's claim is of another merge result (stale)" in r.summary


@pytest.mark.parametrize(
    "content, said",
    [
        (b"not json", "not JSON"),
        (b'{"format": "swarm-claim/1", "tree": "$(id)", "fleets": {}}', "tree"),
        (
            b'{"format": "swarm-claim/1", "tree": "'
            + b"a" * 40
            + b'", "fleets": {"x": {"nodes": [], "objects": []}}}',
            "nodes",
        ),
    ],
)
def test_a_hostile_claim_is_refused_as_data(tmp_path: Path, content: bytes, said: str) -> None:
    path = tmp_path / "claim.json"
    path.write_bytes(content)
    with pytest.raises(ClaimInvalid, match=said):
        read_claim(path)


def test_a_claim_of_odd_states_is_an_error_not_a_traceback(
    pr: tuple[Path, str, str, Path], tmp_path: Path
) -> None:
    repo, _, head, claim = pr
    doc = json.loads(claim.read_text())
    doc["fleets"]["example"]["nodes"] = {"fra1-gpu-01": {"gpu": 5, "mesh": [1]}}
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps(doc))
    r = review(repo, "main", head, merge=True, claim=read_claim(odd))
    c = r.fleets[0].claim
    assert c is not None and (c.error or c.nodes)  # compared or refused, the review went on
    assert r.exit_code == review(repo, "main", head, merge=True).exit_code
