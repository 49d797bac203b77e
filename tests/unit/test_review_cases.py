"""Issue #39's cases, each built as a real pull request and run through review.yml's own
steps: a bare repository stands for GitHub (``refs/heads/main``, ``refs/pull/N/head``),
the clone is what actions/checkout fetches, the apply records are copied in by the
"Record them" step, and the "Review the change" step runs ``scripts/review-pr.sh`` with
the base's ``swarm``, in mode ``merge``. Each asserts what the comment must tell the
reviewer; the finer checks of each case are in the test module named beside it.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from swarm_infra.resolve import desired_state, load_fleet

from .conftest import FLEET_DIRS, committed
from .test_review import git, replace
from .test_review_merge import checkout, github
from .test_review_workflow import run_step, runner

ROLLOUT = "policies/example/rollout.yaml"
POLICY = "policies/example/review.yaml"


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("cases") / "repo"
    return committed(dest, (*FLEET_DIRS, "schemas"), {"README.md": "x\n", "src/swarm_infra/x.py": "X = 1\n"})


def _code(repo: Path) -> None:  # item 2 (test_review_claim.py)
    (repo / "src/swarm_infra/x.py").write_text("X = 2\n")


def _drain(repo: Path) -> None:  # item 3 (test_review_trust.py)
    replace(repo, ROLLOUT, "drain_grace_s: 900", "drain_grace_s: 0")


def _context(repo: Path) -> None:  # item 3
    replace(repo, ROLLOUT, "  kubernetes_context: swarm-example\n", "")


def _schema_ref(repo: Path) -> None:  # item 4 (test_review_refs.py)
    replace(
        repo,
        "schemas/node.schema.json",
        '"$ref": "common.schema.json#/$defs/apiVersion"',
        '"$ref": "http://127.0.0.1:9/x.json"',
    )


def _rename(repo: Path) -> None:  # item 5 (test_review_fleets.py)
    git(repo, "mv", "inventory/example", "inventory/prod")
    git(repo, "mv", "policies/example", "policies/prod")


def _policy_off(repo: Path) -> None:  # item 8 (test_schema_yaml_booleans.py)
    replace(repo, POLICY, "rollout-step-exceeded: warn", "rollout-step-exceeded: off")


CASES: dict[str, tuple[Callable[[Path], None], str, list[str]]] = {
    # name: (the change, the comment's first line starts with, phrases the comment holds)
    "code": (_code, "⚠️ example\\: by the base's code 0 nodes change", ["unknown until head-plan has run"]),
    "drain grace": (_drain, "❌ example\\: ", ["drain-grace-lowered", "drain\\_grace\\_s 900 -&gt; 0"]),
    "context": (_context, "❌ example\\: ", ["kubernetes-context-changed", "swarm-example is removed"]),
    "external $ref": (_schema_ref, "❌ example\\: the merge result is invalid", ["refused"]),
    "rename": (_rename, "❌ prod (renamed from example)\\: ", ["fleet-renamed"]),
    "off unquoted": (_policy_off, "❌ example\\: the merge result is invalid", ["write it quoted"]),
}


def _pull_request(origin: Path, tmp_path: Path, edit: Callable[[Path], None]) -> tuple[Path, str, str]:
    """The work repository with branch ``pr`` made by ``edit`` from main: (repo, main, head)."""
    work = tmp_path / "work"
    shutil.copytree(origin, work, symlinks=True)
    tip = git(work, "rev-parse", "main").strip()
    git(work, "checkout", "-qb", "pr")
    edit(work)
    git(work, "add", "-A")
    git(work, "commit", "-qm", "the pull request")
    return work, tip, git(work, "rev-parse", "HEAD").strip()


def _run(tmp_path: Path, work: Path, tip: str, head: str, records: str = "") -> tuple[str, str]:
    """Fetch pull request #1 as the runner does and run the record and review steps."""
    bare = github(work, tmp_path, {1: head})
    clone = checkout(bare, "refs/pull/1/head", tmp_path / "clone")
    workspace, temp = runner(tmp_path / "runner")
    (temp / "applied.txt").write_text(records)
    cwd = tmp_path / "checkout"
    cwd.mkdir()
    clone.rename(cwd / "pr")
    values = {"BASE": tip, "HEAD": head, "URL": "https://github.com/o/r", "CODE": ""}
    assert run_step("Record them", cwd, values, workspace, temp) == 0
    assert run_step("Review the change", cwd, values, workspace, temp) == 0
    return (temp / "review" / "review.md").read_text(), (temp / "github_output").read_text()


@pytest.mark.parametrize("case", list(CASES))
def test_each_case_tells_the_reviewer_the_truth(origin: Path, tmp_path: Path, case: str) -> None:
    edit, first, phrases = CASES[case]
    work, tip, head = _pull_request(origin, tmp_path, edit)
    comment, code = _run(tmp_path, work, tip, head)
    assert comment.splitlines()[0].startswith(first), comment.splitlines()[0]
    for phrase in phrases:
        assert phrase in comment, phrase
    expected = 2 if "invalid" in first else 1 if first.startswith("❌") else 0
    assert code == f"exit_code={expected}\n"
    assert "Traceback" not in comment


def test_a_canary_merged_but_not_applied_blocks_through_the_records_step(
    origin: Path, tmp_path: Path
) -> None:
    """Item 7 (test_review_canary.py): main holds a canary (one L40S node on the new
    driver); the pull request bumps every L40S node; the record, read from GitHub's API
    and copied in by the workflow's step, is main's previous commit: not converged."""
    work = tmp_path / "work"
    shutil.copytree(origin, work, symlinks=True)
    before = git(work, "rev-parse", "main").strip()
    profiles = "policies/shared/gpu-profiles.yaml"
    text = (work / profiles).read_text()
    start = text.index("name: l40s-inference")
    doc = text[text.rindex("---\n", 0, start) : text.index("\n---\n", start) + 1]
    new = 'driver: {branch: "570", version: "570.124.06"}'
    canary = doc.replace("name: l40s-inference", "name: l40s-canary").replace('driver: {branch: "570"}', new)
    (work / profiles).write_text(text + canary)
    state = desired_state(load_fleet([work / d for d in FLEET_DIRS]))
    nodes = sorted(
        n for n, x in state["nodes"].items() if any(g["model"] == "L40S" for g in x["hardware"]["gpus"])
    )
    with (work / "policies/example/assignments.yaml").open("a") as f:
        f.write(
            "---\napiVersion: swarm.io/v1alpha1\nkind: Assignment\nmetadata:\n  name: l40s-canary\n"
            f"spec:\n  selector: {{nodes: [{nodes[0]}]}}\n  gpu_profile: l40s-canary\n  precedence: 50\n"
        )
    git(work, "add", "-A")
    git(work, "commit", "-qm", "canary")
    tip = git(work, "rev-parse", "HEAD").strip()
    git(work, "checkout", "-qb", "pr")
    text = (work / profiles).read_text()
    at = text.index('driver: {branch: "570"}', text.index("name: l40s-inference"))
    (work / profiles).write_text(text[:at] + new + text[at + len('driver: {branch: "570"}') :])
    git(work, "commit", "-qam", "every L40S node")
    head = git(work, "rev-parse", "HEAD").strip()
    comment, code = _run(tmp_path, work, tip, head, f"{before} refs/swarm/applied/example\n")
    assert comment.startswith("❌ example\\: ") and "only merged, not converged" in comment
    assert code == "exit_code=1\n"
    # The same pull request with the canary's commit applied passes that rule.
    clean = tmp_path / "again"
    clean.mkdir()
    comment, _ = _run(clean, work, tip, head, f"{tip} refs/swarm/applied/example\n")
    assert comment.splitlines()[1] == "<!-- swarm-review -->" and "only merged, not converged" not in comment
