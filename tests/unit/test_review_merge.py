"""The review judges the merge result (issue #39, item 1): what the base branch will hold
once a pull request merges, not the head alone.

Pull requests are built as GitHub builds them, in a bare repository standing for GitHub
(``refs/heads/main``, ``refs/pull/N/head``), fetched as review.yml's checkout fetches them
(``fetch-depth: 0``: every branch, and the pull request's ref), and reviewed by
review.yml's own step (``scripts/review-pr.sh`` with the reviewer's ``swarm``) with the
values its ``targets`` job gives it: the base branch's tip (``GITHUB_SHA`` of
``pull_request_target`` and ``push``, GitHub's "Events that trigger workflows"), the
pull request's head, mode ``merge``; or for a merge queue the group's ``base_sha`` and
``head_sha`` (its merge commit), mode ``exact``. The targets script itself is run with
node against payloads shaped as GitHub's webhook documentation gives them.

Expected values come from the fleet: the H100 capacity (the H100-SXM5-80GB GPUs of
``inventory/example``'s nodes, counted from the desired state) and the queues' nominal quotas (48 + 24) in
``policies/example/scheduling.yaml``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from swarm_infra.resolve import desired_state, load_fleet
from swarm_infra.review import MergeConflict, review
from swarm_infra.review.markdown import MARKER, render

from .conftest import FLEET_DIRS, committed
from .test_review import git, replace
from .test_review_workflow import WORKFLOWS, run_step, runner

ALLOC = "policies/example/scheduling.yaml"
ACME = "{flavor: h100-sxm5-80gb, nominal_quota: 48,"
HELIX = "{flavor: h100-sxm5-80gb, nominal_quota: 24,"
CLAIMED = "9" * 40  # a head that head-plan.yml ran on (run 99), in the targets script's tests


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return committed(
        tmp_path_factory.mktemp("merge") / "repo", (*FLEET_DIRS, "schemas"), {"README.md": "# fleet\n"}
    )


@pytest.fixture
def work(origin: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "work"
    shutil.copytree(origin, dest, symlinks=True)
    return dest


def commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD").strip()


def h100_capacity(repo: Path) -> int:
    """H100 GPUs the fleet's nodes declare (what the quotas may add up to)."""
    nodes = desired_state(load_fleet([repo / d for d in FLEET_DIRS]))["nodes"].values()
    return sum(g["count"] for n in nodes for g in n["hardware"]["gpus"] if g["model"] == "H100-SXM5-80GB")


def branch(work: Path, name: str, old: str, new: str) -> str:
    """A branch ``name`` from main replacing ``old`` by ``new`` in the Allocation; returns its tip."""
    git(work, "checkout", "-q", "main")
    git(work, "checkout", "-qb", name)
    replace(work, ALLOC, old, new)
    return commit(work, name)


def github(work: Path, tmp_path: Path, pulls: dict[int, str]) -> Path:
    """A bare repository standing for GitHub: main, and refs/pull/N/head per pull request."""
    bare = tmp_path / "github.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(work, "push", "-q", str(bare), "main:refs/heads/main")
    for number, sha in pulls.items():
        git(work, "push", "-q", str(bare), f"{sha}:refs/pull/{number}/head")
    return bare


def checkout(bare: Path, ref: str, dest: Path) -> Path:
    """What actions/checkout does with ``ref`` and ``fetch-depth: 0``: every branch, the ref."""
    git(dest.parent, "init", "-q", str(dest))
    git(dest, "fetch", "-q", str(bare), "+refs/heads/*:refs/remotes/origin/*", f"+{ref}:{ref}")
    git(dest, "checkout", "-q", "--detach", ref)
    return dest


def review_step(tmp_path: Path, clone: Path, base: str, head: str, mode: str = "merge") -> tuple[str, str]:
    """Run review.yml's "Review the change" step in ``clone`` (the runner's ``pr``); the
    comment and the exit code it records."""
    workspace, temp = runner(tmp_path / "runner")
    cwd = tmp_path / "checkout"
    cwd.mkdir()
    clone.rename(cwd / "pr")
    values = {"BASE": base, "HEAD": head, "MODE": mode, "URL": "https://github.com/o/r", "CODE": ""}
    assert run_step("Review the change", cwd, values, workspace, temp) == 0
    comment = (temp / "review" / "review.md").read_text()
    return comment, (temp / "github_output").read_text()


def test_two_pull_requests_valid_alone_clash_once_both_are_merged(work: Path, tmp_path: Path) -> None:
    capacity = h100_capacity(work)
    (alloc,) = [d for d in yaml.safe_load_all((work / ALLOC).read_text()) if d["kind"] == "Allocation"]
    acme, helix = (
        next(x["nominal_quota"] for x in q["quotas"] if x["flavor"] == "h100-sxm5-80gb")
        for q in alloc["spec"]["queues"][:2]
    )
    assert f"nominal_quota: {acme}," in ACME and f"nominal_quota: {helix}," in HELIX
    # Each raises its own queue so that each alone fits and both together do not.
    step = (capacity - acme - helix) // 2 + 2
    assert acme + helix + step <= capacity < acme + helix + 2 * step
    p1 = branch(work, "pr1", ACME, ACME.replace(f"{acme},", f"{acme + step},"))
    p2 = branch(work, "pr2", HELIX, HELIX.replace(f"{helix},", f"{helix + step},"))
    for head in (p1, p2):
        assert review(work, "main", head, merge=True).exit_code == 0  # each alone is valid
    git(work, "checkout", "-q", "main")
    git(work, "merge", "-q", "--no-ff", "-m", "Merge pull request #1", "pr1")  # as GitHub merges it
    tip = git(work, "rev-parse", "main").strip()
    # What today's review did: the head against its merge base, the clash unseen.
    assert review(work, "main", p2).exit_code == 0
    # The base moved (a push to main): review.yml re-reviews #2's merge result.
    bare = github(work, tmp_path, {2: p2})
    clone = checkout(bare, "refs/pull/2/head", tmp_path / "clone")
    comment, code = review_step(tmp_path, clone, tip, p2)
    assert code == "exit_code=2\n"
    assert comment.startswith("❌ example\\: the merge result is invalid (1 error)")
    assert "### ❌ The merge result is invalid: 1 error(s)" in comment
    total = acme + helix + 2 * step
    assert f"add up to {total} GPUs here, above the fleet's {capacity}" in comment
    assert "<code>error\\[allocation\\.quota-exceeds-capacity\\]</code>" in comment
    # The quota line is the merge result's (the file took both sides): text, not a link.
    merged = git(work, "show", f"{p2}:{ALLOC}").splitlines()  # one line changed: same numbers
    line = next(i for i, x in enumerate(merged, 1) if f"nominal_quota: {helix + step}," in x)
    assert f"<code>policies/example/scheduling\\.yaml\\:{line} (merge result)</code>" in comment
    assert f"/blob/{p2}/{ALLOC}" not in comment
    assert f"the merge result of the pull request's head {p2[:12]} into the base's tip {tip[:12]}" in comment


def test_locations_in_files_the_merge_took_from_the_head_link_to_the_head(work: Path) -> None:
    """A file only the pull request changed is byte for byte the head's in the merge result:
    its lines link to the head commit, which GitHub has; the merge commit exists only here."""
    git(work, "checkout", "-qb", "pr")
    replace(work, ALLOC, ACME, ACME.replace("48,", "8,"))
    head = commit(work, "acme down")
    git(work, "checkout", "-q", "main")
    (work / "README.md").write_text("# fleet\n\nmain moved\n")
    commit(work, "main moves, elsewhere")
    r = review(work, "main", head, merge=True, repo_url="https://github.com/o/r")
    assert r.pr_head == head and r.head != head and r.base == git(work, "rev-parse", "main").strip()
    assert git(work, "rev-parse", f"{r.head}^1", f"{r.head}^2").split() == [r.base, head]
    where = [loc for fr in r.fleets for o in fr.objects for loc in o.where]
    assert where and all(loc.commit == head and loc.ref == "head" for loc in where if loc.file == ALLOC)
    assert f"https://github.com/o/r/blob/{head}/{ALLOC}#L" in render(r)


def test_a_pull_request_that_conflicts_has_no_merge_result(work: Path, tmp_path: Path) -> None:
    p1 = branch(work, "pr1", ACME, ACME.replace("48,", "40,"))
    git(work, "checkout", "-q", "main")
    replace(work, ALLOC, ACME, ACME.replace("48,", "44,"))
    tip = commit(work, "main lowers acme too")
    with pytest.raises(MergeConflict) as err:
        review(work, "main", p1, merge=True)
    assert err.value.files == [ALLOC]
    bare = github(work, tmp_path, {1: p1})
    clone = checkout(bare, "refs/pull/1/head", tmp_path / "clone")
    comment, code = review_step(tmp_path, clone, tip, p1)
    assert code == "exit_code=2\n"
    first = comment.splitlines()[0]
    assert (
        first.startswith("❌ this pull request conflicts with its base") and comment.splitlines()[1] == MARKER
    )
    assert ALLOC in comment  # the conflicted file, in the log excerpt
    # Never the head alone instead: that one would pass.
    assert review(work, "main", p1).exit_code == 0


def test_a_merge_queue_group_is_reviewed_as_the_queue_built_it(work: Path, tmp_path: Path) -> None:
    """merge_group: the queue's commit (the base merged with the queued pull requests, on
    gh-readonly-queue/main/pr-N-SHA) against the base it was made on (mode exact)."""
    capacity = h100_capacity(work)
    p1 = branch(work, "pr1", ACME, ACME.replace("48,", f"{capacity - 24 + 1},"))
    git(work, "checkout", "-q", "main")
    base = git(work, "rev-parse", "HEAD").strip()
    git(work, "checkout", "-qb", "gh-readonly-queue/main/pr-1-" + p1)
    git(work, "merge", "-q", "--no-ff", "-m", "Merge pull request #1", "pr1")
    group = git(work, "rev-parse", "HEAD").strip()
    git(work, "checkout", "-q", "main")
    bare = github(work, tmp_path, {})
    ref = f"refs/heads/gh-readonly-queue/main/pr-1-{p1}"
    git(work, "push", "-q", str(bare), f"{group}:{ref}")
    clone = checkout(bare, ref, tmp_path / "clone")
    comment, code = review_step(tmp_path, clone, base, group, mode="exact")
    assert code == "exit_code=2\n" and "the head is invalid" in comment.splitlines()[0]


def _targets(
    event: str, payload: dict[str, object], pulls: list[dict[str, object]]
) -> list[dict[str, object]]:
    """Run review.yml's targets script with node, as actions/github-script runs it (an async
    function of ``github``, ``context``, ``core``), with the event's payload."""
    doc = yaml.safe_load((WORKFLOWS / "review.yml").read_text())
    script = doc["jobs"]["targets"]["steps"][0]["with"]["script"]
    context = {
        "eventName": event,
        "payload": payload,
        "repo": {"owner": "o", "repo": "r"},
        "sha": "a" * 40,
        "ref": "refs/heads/main",
    }
    program = (
        "const out = {};\n"
        f"const context = {json.dumps(context)};\n"
        f"const pulls = {json.dumps(pulls)};\n"
        "const github = {rest: {pulls: {list: 'list'}, actions: {listWorkflowRuns: async (a) => "
        "({data: {workflow_runs: a.workflow_id === 'head-plan.yml' && a.status === 'success' && "
        f"a.head_sha === '{CLAIMED}' ? [{{id: 99}}] : []}}}})}}, repos: {{getBranch: async (a) => "
        "({data: {commit: {sha: 'c'.repeat(40)}}})}}, paginate: async (fn, args) => "
        "(args.state === 'open' && (args.base === 'main' || args.base === undefined) ? pulls : [])};\n"
        "const core = {setOutput: (k, v) => { out[k] = v; }, warning: () => {}};\n"
        f"(async () => {{\n{script}\n}})().then(() => console.log(out.targets));\n"
    )
    done = subprocess.run(["node", "-e", program], capture_output=True, text=True, check=True)
    targets: list[dict[str, object]] = json.loads(done.stdout)
    return targets


def test_the_targets_job_picks_the_merge_result_of_every_open_pull_request() -> None:
    head = "b" * 40
    # pull_request_target: the base is GITHUB_SHA (the base branch's last commit), not base.sha.
    pr = {"pull_request": {"number": 5, "head": {"sha": head}, "base": {"sha": "c" * 40}}}
    assert _targets("pull_request_target", pr, []) == [
        {
            "number": 5,
            "base": "a" * 40,
            "head": head,
            "ref": "refs/pull/5/head",
            "mode": "merge",
            "claim_run": 0,
        }
    ]
    # head-plan's successful run on that head is the claim's (its id, for download-artifact).
    pr = {"pull_request": {"number": 5, "head": {"sha": CLAIMED}}}
    assert _targets("pull_request_target", pr, [])[0]["claim_run"] == 99
    # workflow_run (head-plan completed): the open pull request of that head, on its base's tip.
    pulls = [{"number": 8, "draft": False, "head": {"sha": CLAIMED}, "base": {"ref": "main"}}]
    run = {"workflow_run": {"head_sha": CLAIMED}}
    assert _targets("workflow_run", run, pulls) == [
        {
            "number": 8,
            "base": "c" * 40,
            "head": CLAIMED,
            "ref": "refs/pull/8/head",
            "mode": "merge",
            "claim_run": 99,
        }
    ]
    # push to main: every open, non-draft pull request against it; a malformed sha is dropped.
    pulls = [
        {"number": 3, "draft": False, "head": {"sha": head}},
        {"number": 4, "draft": True, "head": {"sha": "d" * 40}},
        {"number": 6, "draft": False, "head": {"sha": "$(reboot)"}},
    ]
    assert [t["number"] for t in _targets("push", {}, pulls)] == [3]
    mg = {
        "merge_group": {
            "base_sha": "e" * 40,
            "head_sha": "f" * 40,
            "head_ref": "refs/heads/gh-readonly-queue/main/pr-3-x",
        }
    }
    assert _targets("merge_group", mg, []) == [
        {
            "number": 0,
            "base": "e" * 40,
            "head": "f" * 40,
            "ref": "refs/heads/gh-readonly-queue/main/pr-3-x",
            "mode": "exact",
            "claim_run": 0,
        }
    ]
