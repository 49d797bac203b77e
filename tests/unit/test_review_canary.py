"""A canary merged is not a canary converged (issue #39, item 7).

The group-wide driver bump passes ``driver-without-canary`` when a node of the same GPU
model already runs the new driver in the base: the canary went first. Whether it went
first *on the node* is the apply record's to say: ``refs/swarm/applied/<fleet>``, which
apply.yml moves only after the fleet's converge and ``pulumi up`` succeed. The history:
C0 the example fleet; C1 a canary Assignment gives one L40S node (the first, by name, of
those the fleet declares) a profile with the new driver; C2 the bump of every L40S node.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from swarm_infra.review import review
from swarm_infra.review.markdown import render

from .conftest import committed
from .test_review import git, state

History = tuple[Path, str, str, str, str]  # the repository, C0, C1, C2, the canary node
PROFILES = "policies/shared/gpu-profiles.yaml"
ASSIGNMENTS = "policies/example/assignments.yaml"
OLD, NEW = 'driver: {branch: "570"}', 'driver: {branch: "570", version: "570.124.06"}'


def commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD").strip()


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> History:
    repo = committed(tmp_path_factory.mktemp("canary") / "repo")
    c0 = git(repo, "rev-parse", "HEAD").strip()
    l40s = sorted(
        n for n, s in state(repo)["nodes"].items() if any(g["model"] == "L40S" for g in s["hardware"]["gpus"])
    )
    canary = l40s[0]
    text = (repo / PROFILES).read_text()
    start = text.index("name: l40s-inference")
    doc_start = text.rindex("---\n", 0, start)
    doc_end = text.index("\n---\n", start) + 1
    profile = text[doc_start:doc_end].replace("name: l40s-inference", "name: l40s-canary").replace(OLD, NEW)
    (repo / PROFILES).write_text(text + ("" if text.endswith("\n") else "\n") + profile)
    with (repo / ASSIGNMENTS).open("a") as f:
        f.write(
            "---\napiVersion: swarm.io/v1alpha1\nkind: Assignment\nmetadata:\n  name: l40s-canary\n"
            f"spec:\n  selector: {{nodes: [{canary}]}}\n  gpu_profile: l40s-canary\n  precedence: 50\n"
        )
    c1 = commit(repo, "canary: one L40S node gets the new driver")
    assert state(repo)["nodes"][canary]["gpu"]["driver"]["version"] == "570.124.06"
    text = (repo / PROFILES).read_text()
    at = text.index(OLD, text.index("name: l40s-inference"))
    (repo / PROFILES).write_text(text[:at] + NEW + text[at + len(OLD) :])
    c2 = commit(repo, "every L40S node gets the new driver")
    return repo, c0, c1, c2, canary


def record(repo: Path, sha: str | None) -> None:
    """What apply.yml's last step leaves (review.yml copies the records into its clone)."""
    if sha is None:
        git(repo, "update-ref", "-d", "refs/swarm/applied/example")
    else:
        git(repo, "update-ref", "refs/swarm/applied/example", sha)


def driver_flags(repo: Path, c1: str, c2: str) -> tuple[list[str], list[str]]:
    r = review(repo, c1, c2)
    return [f.reason for f in r.fleets[0].flags if f.rule == "driver-without-canary"], r.notes


def test_the_bump_after_a_canary_that_never_converged_blocks(history: History) -> None:
    repo, c0, c1, c2, _ = history
    record(repo, c0)  # the last apply ran before the canary merged (its run cancelled or failed)
    reasons, _ = driver_flags(repo, c1, c2)
    assert len(reasons) == 1 and "only merged, not converged" in reasons[0]
    assert f"the last apply was at {c0[:12]}" in reasons[0] and f"the base {c1[:12]}" in reasons[0]
    r = review(repo, c1, c2)
    assert r.exit_code == 1 and "only merged, not converged" in render(r)


def test_the_bump_after_a_converged_canary_passes(history: History) -> None:
    repo, _, c1, c2, _ = history
    record(repo, c1)
    reasons, notes = driver_flags(repo, c1, c2)
    assert reasons == [] and not any("cannot be known" in n for n in notes)


def test_no_record_read_says_it_cannot_be_known(history: History) -> None:
    repo, _, c1, c2, _ = history
    record(repo, None)
    reasons, notes = driver_flags(repo, c1, c2)
    assert reasons == []
    (note,) = [n for n in notes if "cannot be known" in n]
    assert note.startswith("example: the new driver of ") and "refs/swarm/applied" in note
    assert "cannot be known" in render(review(repo, c1, c2))
