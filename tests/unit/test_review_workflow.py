"""`swarm review` as CI runs it (issue #25): which commits it compares, what it reads, what it
says when the head or base is invalid, rule changes, and the workflow's own shell steps
(``scripts/review-pr.sh``, ``scripts/changed-fleets.sh``) run for real against Git histories
built here with the real ``git``: a branch made before main moved, an invalid head, a
``.gitattributes export-ignore``, a schema change, a README-only change.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from swarm_infra import cli
from swarm_infra.review import review
from swarm_infra.review.markdown import MARKER, render

from .conftest import ROOT, committed
from .test_review import FLEET_DIRS, git, replace

PROFILE = 'driver: {branch: "570"}\n  persistence_mode: true\n  power_limit_w: 300'
SCRIPTS = ROOT / "scripts"
WORKFLOWS = ROOT / ".github" / "workflows"


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """main: the example fleet and the schemas, one commit."""
    return committed(
        tmp_path_factory.mktemp("workflow") / "repo", (*FLEET_DIRS, "schemas"), {"README.md": "# fleet\n"}
    )


@pytest.fixture
def repo(origin: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "repo"
    shutil.copytree(origin, dest, symlinks=True)
    return dest


def commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD").strip()


def stale_branch(repo: Path) -> tuple[str, str]:
    """A branch `pr` made from main, which changes only the README; then main lowers a
    power limit. Returns (main's tip, the branch's tip)."""
    git(repo, "checkout", "-qb", "pr")
    (repo / "README.md").write_text("# fleet\n\nMore words.\n")
    head = commit(repo, "README only")
    git(repo, "checkout", "-q", "main")
    replace(repo, "policies/shared/gpu-profiles.yaml", PROFILE, PROFILE.replace("300", "250"))
    tip = commit(repo, "main lowers a power limit")
    git(repo, "checkout", "-q", "pr")
    return tip, head


def test_a_branch_made_before_main_moved_shows_only_its_own_change(repo: Path) -> None:
    tip, head = stale_branch(repo)
    r = review(repo, "main", head)
    merge_base = git(repo, "merge-base", tip, head).strip()
    assert (r.base, r.base_tip, r.base_ref, r.merge_base) == (merge_base, tip, "main", True)
    assert r.fleets == [] and r.exit_code == 0 and r.summary == "✅ no fleet changes"
    assert any("merge base" in n for n in r.notes)
    md = render(r)
    assert f"Base: the merge base of <code>main</code> (`{tip[:12]}`) and the head." in md
    # Comparing with main's tip itself shows the reverse of main's change as the branch's.
    exact = review(repo, "main", head, exact_base=True)
    assert exact.base == tip and [f.fleet for f in exact.fleets] == ["example"]
    assert any(
        c.field == "power_limit_w" and (c.before, c.after) == (250, 300) for c in exact.fleets[0].nodes
    )


def test_export_ignore_hides_nothing_from_the_review(repo: Path) -> None:
    (repo / ".gitattributes").write_text("inventory/example/zz-hidden.yaml export-ignore\n")
    (repo / "inventory/example/zz-hidden.yaml").write_text("not: [valid\n")
    commit(repo, "a file git archive would leave out")
    r = review(repo, "HEAD~1")
    assert r.exit_code == 2, r.summary
    assert any(p.location.file == "inventory/example/zz-hidden.yaml" for p in r.fleets[0].problems)


def test_a_schema_change_that_invalidates_the_fleet_is_reviewed(repo: Path) -> None:
    replace(
        repo,
        "schemas/node.schema.json",
        '"required": [\n        "site",',
        '"required": [\n        "owner",\n        "site",',
    )
    commit(repo, "nodes need an owner")
    r = review(repo, "HEAD~1")
    assert r.rules_changed == ["schemas/node.schema.json"]
    assert [f.fleet for f in r.fleets] == ["example"]  # no fleet file changed, still reviewed
    assert r.exit_code == 2 and r.summary.startswith("❌ example: the head is invalid")
    own = [p for p in r.fleets[0].problems if p.rule == "review.head-schemas"]
    assert own and all(p.location.file.startswith("inventory/example/") and p.location.line > 0 for p in own)
    assert "owner" in own[0].message
    assert any("verdicts differ" in n and "reviewer's schemas the head is valid" in n for n in r.notes)
    md = render(r)
    assert "### Rules changed (1 file(s))" in md and "| <code>schemas/node\\.schema\\.json</code> |" in md
    data = r.as_json()
    assert data["rules_changed"] == ["schemas/node.schema.json"] and data["fleets"][0]["invalid"]


def test_a_library_change_is_listed_as_rules_changed(repo: Path) -> None:
    (repo / "src/swarm_infra").mkdir(parents=True)
    (repo / "src/swarm_infra/extra.py").write_text("X = 1\n")
    (repo / "Pulumi.prod.yaml").write_text("config: {}\n")
    commit(repo, "library and stack config")
    r = review(repo, "HEAD~1")
    assert r.rules_changed == ["Pulumi.prod.yaml", "src/swarm_infra/extra.py"]
    # The library is code (its effect is the head's claim's to show), the stack file is not.
    assert r.code_changed == ["src/swarm_infra/extra.py"]
    assert r.summary.startswith("⚠️ example: by the base's code 0 nodes change")
    assert "the effect of the head's code is unknown" in r.summary and "rules changed: 2 files" in r.summary
    assert r.exit_code == 0


def test_an_invalid_base_blocks_and_base_existence_is_independent_of_the_head(repo: Path) -> None:
    (repo / "inventory/example/broken.yaml").write_text("not: [valid\n")
    commit(repo, "broken base")
    (repo / "inventory/example/broken.yaml").unlink()
    commit(repo, "fixed")
    r = review(repo, "HEAD~1")
    fr = r.fleets[0]
    assert fr.base_invalid and [f.rule for f in fr.flags] == ["base-invalid"] and r.exit_code == 1
    assert "1 blocking: base-invalid" in r.summary
    # An invalid head: the base still exists.
    (repo / "inventory/example/broken.yaml").write_text("not: [valid\n")
    commit(repo, "broken head")
    data = review(repo, "HEAD~1").as_json()
    assert data["exit_code"] == 2 and data["fleets"][0]["base_exists"] is True


def test_cli_from_a_subdirectory_outside_git_and_json_errors(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    replace(repo, "policies/shared/gpu-profiles.yaml", PROFILE, PROFILE.replace("300", "250"))
    commit(repo, "lower a power limit")
    monkeypatch.chdir(repo / "inventory/example")
    assert cli.main(["review", "--base", "HEAD~1", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["fleets"][0]["fleet"] == "example"
    # Uncommitted fleet edits are not reviewed, and the review says so.
    (repo / "inventory/example/sites.yaml").write_text("not: [valid")
    assert cli.main(["review", "--base", "HEAD~1"]) == 0
    out, err = capsys.readouterr()
    assert "uncommitted" in err and "inventory/example/sites.yaml" in err and "uncommitted" in out
    assert cli.main(["review", "--base", "nope", "--format", "json"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["exit_code"] == 2 and "no commit named 'nope'" in doc["error"]
    outside = tmp_path / "not-a-repo"
    outside.mkdir()
    monkeypatch.chdir(outside)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    assert cli.main(["review", "--base", "HEAD~1", "--format", "json"]) == 2
    out, err = capsys.readouterr()
    assert "is not a git repository" in err and "is not a git repository" in json.loads(out)["error"]


# --- the workflow's shell steps, run for real -----------------------------------------------


def swarm_command(tmp_path: Path) -> Path:
    """An executable that runs this checkout's `swarm` (the workflow's reviewer venv)."""
    exe = tmp_path / "bin" / "swarm"
    exe.parent.mkdir(exist_ok=True)
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m swarm_infra.cli "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def review_pr(repo: Path, tmp_path: Path, base: str, head: str) -> tuple[int, str, Path]:
    out = tmp_path / "review-out"
    gh_output = tmp_path / "github_output"
    gh_output.write_text("")
    env = {
        **os.environ,
        "SWARM": str(swarm_command(tmp_path)),
        "REPO_URL": "https://github.com/o/r",
        "GITHUB_OUTPUT": str(gh_output),
        "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    }
    done = subprocess.run(
        ["bash", str(SCRIPTS / "review-pr.sh"), base, head, str(out)],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    code = int((out / "exit_code").read_text())
    assert gh_output.read_text() == f"exit_code={code}\n"
    return code, (out / "review.md").read_text(), out


def test_review_script_on_a_stale_branch(repo: Path, tmp_path: Path) -> None:
    tip, head = stale_branch(repo)
    code, comment, _ = review_pr(repo, tmp_path, tip, head)
    assert code == 0 and comment.startswith("✅ no fleet changes\n" + MARKER)


def test_review_script_posts_an_invalid_head(repo: Path, tmp_path: Path) -> None:
    base = git(repo, "rev-parse", "HEAD").strip()
    (repo / "inventory/example/sites.yaml").write_text("not: [valid\n")
    head = commit(repo, "invalid head")
    code, comment, out = review_pr(repo, tmp_path, base, head)
    assert code == 2 and comment.splitlines()[1] == MARKER
    assert comment.startswith("❌ example\\: the merge result is invalid") and "sites\\.yaml" in comment
    assert (out / "review-full.md").exists()


def test_review_script_posts_when_the_review_cannot_run(repo: Path, tmp_path: Path) -> None:
    base = git(repo, "rev-parse", "HEAD").strip()
    code, comment, _ = review_pr(repo, tmp_path, base, "0" * 40)
    assert code == 2 and comment.splitlines()[1] == MARKER
    assert comment.startswith("❌ swarm review could not run (exit 2)") and "no commit named" in comment


def test_review_script_with_export_ignore_and_a_schema_change(repo: Path, tmp_path: Path) -> None:
    base = git(repo, "rev-parse", "HEAD").strip()
    (repo / ".gitattributes").write_text("schemas/** export-ignore\ninventory/** export-ignore\n")
    replace(
        repo,
        "schemas/node.schema.json",
        '"required": [\n        "site",',
        '"required": [\n        "owner",\n        "site",',
    )
    head = commit(repo, "hide and tighten")
    code, comment, _ = review_pr(repo, tmp_path, base, head)
    assert code == 2 and "review\\.head-schemas" in comment
    assert "<code>schemas/node\\.schema\\.json</code>" in comment
    assert "<code>\\.gitattributes</code>" not in comment  # not a rule file


def changed_fleets(repo: Path, before: str, after: str) -> list[str]:
    done = subprocess.run(
        ["bash", str(SCRIPTS / "changed-fleets.sh"), before, after], cwd=repo, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_apply_picks_the_fleets_that_changed_or_all_when_rules_changed(repo: Path) -> None:
    shutil.copytree(repo / "inventory/example", repo / "inventory/other")
    shutil.copytree(repo / "policies/example", repo / "policies/other")
    c0 = commit(repo, "a second fleet")
    (repo / "README.md").write_text("docs\n")
    c1 = commit(repo, "docs")
    replace(repo, "policies/example/scheduling.yaml", "\n", "\n# note\n")
    c2 = commit(repo, "one fleet's policy")
    (repo / "roles").mkdir()
    (repo / "roles/x.yml").write_text("---\n")
    c3 = commit(repo, "a role")
    replace(repo, "policies/shared/gpu-profiles.yaml", PROFILE, PROFILE.replace("300", "250"))
    c4 = commit(repo, "shared policy")
    assert changed_fleets(repo, c0, c1) == []
    assert changed_fleets(repo, c1, c2) == ["example"]
    assert changed_fleets(repo, c2, c3) == ["example", "other"]
    assert changed_fleets(repo, c3, c4) == ["example", "other"]
    assert changed_fleets(repo, "0" * 40, c4) == ["example", "other"]  # a new branch


def test_workflows_review_with_the_base_and_apply_safely() -> None:
    rv = yaml.safe_load((WORKFLOWS / "review.yml").read_text())
    on = rv[True]  # YAML 1.1 reads the key `on` as True
    assert {"pull_request_target", "push", "merge_group"} <= set(on) and "pull_request" not in on
    # No path filter: a required check of a workflow skipped by one stays pending (GitHub,
    # "Handling skipped but required checks"); merge_group takes none.
    assert all("paths" not in (on[e] or {}) for e in on)
    assert on["push"]["branches"] == ["main"]
    assert rv["permissions"] == {}
    steps = rv["jobs"]["review"]["steps"]
    checkouts = [s["with"] for s in steps if s.get("uses", "").startswith("actions/checkout")]
    # The reviewer is the target's base commit: the base branch's tip (GITHUB_SHA of
    # pull_request_target and push) or the merge group's base_sha, never the head.
    assert checkouts[0]["ref"] == "${{ matrix.pull.base }}" and checkouts[0]["path"] == "reviewer"
    pick = rv["jobs"]["targets"]["steps"][0]["with"]["script"]
    assert "base: context.sha" in pick and "base: mg.base_sha" in pick and "mode: 'exact'" in pick
    assert all(c["persist-credentials"] is False for c in checkouts)
    runs = "\n".join(s.get("run", "") for s in steps)
    assert "install -q ./reviewer" in runs and "pr/" not in runs and "-e" not in runs.split()
    post = next(s for s in steps if s.get("name", "").startswith("Post or update"))
    assert post["if"] == "always()" and "createCommitStatus" in post["with"]["script"]
    ap = yaml.safe_load((WORKFLOWS / "apply.yml").read_text())
    apply_paths = ap[True]["push"]["paths"]
    assert {"roles/**", "src/**", "schemas/**", "playbooks/**"} <= set(apply_paths)
    text = (WORKFLOWS / "apply.yml").read_text()
    assert "get.pulumi.com | sh" not in text and "| sh\n" not in text
    assert "sha256sum --check" in text and "file://$HOME" not in text
    job = ap["jobs"]["apply"]
    assert job["strategy"]["matrix"]["fleet"] == "${{ fromJSON(needs.fleets.outputs.fleets) }}"
    assert "SSH_PRIVATE_KEY" not in json.dumps(job.get("env", {}))
    converge = next(s for s in job["steps"] if s.get("name", "").startswith("Converge"))
    assert "unset SSH_PRIVATE_KEY" in converge["run"] and "trap 'rm -rf" in converge["run"]
    owners = (ROOT / ".github/CODEOWNERS").read_text()
    for d in ("/schemas/", "/src/", "/roles/", "/.github/", "/policies/"):
        assert any(line.split()[:1] == [d] for line in owners.splitlines())


def test_the_rule_files_are_one_list_in_the_library_the_workflows_and_the_apply_script() -> None:
    # RULE_PATTERNS decides what the review lists as "rules changed"; review.yml and
    # apply.yml must run on the same files, and changed-fleets.sh must treat them alike.
    from swarm_infra.review.git import RULE_PATTERNS, is_rule_file

    wanted = {p + "**" if p.endswith("/") else p for p in RULE_PATTERNS}
    # review.yml has no path filter (it reviews every pull request); apply.yml must run on
    # them, and of .github/ only its own file converges anything.
    doc = yaml.safe_load((ROOT / ".github/workflows/apply.yml").read_text())
    trigger = doc.get("on", doc.get(True))["push"]  # YAML 1.1 reads the bare key `on` as true
    need = wanted - {".github/**"} | {".github/workflows/apply.yml"}
    assert need <= set(trigger["paths"]), sorted(need - set(trigger["paths"]))
    script = (ROOT / "scripts/changed-fleets.sh").read_text()
    regex = next(line for line in script.splitlines() if "grep -qE" in line).split("'")[1]
    samples = [p + "x.py" if p.endswith("/") else p.replace("*", "-lab") for p in RULE_PATTERNS]
    assert all(is_rule_file(s) for s in samples)
    proc = subprocess.run(
        ["grep", "-cE", regex], input="\n".join(samples) + "\n", capture_output=True, text=True
    )
    assert int(proc.stdout) == len(samples), (regex, samples)
    proc = subprocess.run(
        ["grep", "-cE", regex], input="inventory/lab/nodes.yaml\nREADME.md\n", capture_output=True, text=True
    )
    assert int(proc.stdout or 0) == 0


# --- an invalid base, uncommitted edits (issue #25, items 8 and 11) ---------------------------


def _break_then_fix(repo: Path, path: str, old: str, new: str) -> int:
    """Commit ``path`` with ``old`` replaced by ``new`` (a base that does not validate), then
    a head that restores it and lowers a power limit. Returns the broken line's number."""
    text = (repo / path).read_text()
    replace(repo, path, old, new)
    line = next(i for i, x in enumerate((repo / path).read_text().splitlines(), 1) if new in x)
    commit(repo, "a broken base")
    (repo / path).write_text(text)
    replace(repo, "policies/shared/gpu-profiles.yaml", PROFILE, PROFILE.replace("300", "250"))
    commit(repo, "fix the base, lower a power limit")
    return line


def test_an_invalid_base_that_resolves_still_shows_the_plan_and_its_flags(repo: Path) -> None:
    """The base's Mesh file does not parse: the base-invalid flag blocks (exit 1), the
    comment says so before anything else, lists the base's error at its line, and still
    shows the change and the flags judged against what of the base resolves (here the
    Mesh appears, which the change did not add: the comment says the diff may show more)."""
    mesh = "policies/example/mesh.yaml"
    line = _break_then_fix(repo, mesh, "kind: Mesh", "kind: Mesh: [")
    r = review(repo, "HEAD~1")
    fr = r.fleets[0]
    assert r.exit_code == 1 and fr.base_invalid == 1 and fr.base_resolved
    assert [(p.rule, p.location.file, p.location.line, p.location.ref) for p in fr.base_problems] == [
        ("yaml.syntax", mesh, line, "base")
    ]
    rules = [f.rule for f in fr.flags]
    assert rules[0] == "base-invalid" and fr.flags[0].action == "block"
    assert "rollout-step-exceeded" in rules  # judged against what of the base resolves
    (power,) = [c for c in fr.nodes if c.field == "power_limit_w"]
    assert (power.before, power.after) == (300, 250)
    assert r.summary.startswith(
        "❌ example: the base is invalid (1 error): compared with what of it resolves, "
    )
    md = render(r)
    assert "### ❌ The base is invalid: 1 error(s)" in md and "may show more or less than this change" in md
    assert md.index("The base is invalid") < md.index("### Risk flags") < md.index("### The base's errors")
    assert f"<code>policies/example/mesh\\.yaml\\:{line} (base)</code> | <code>error\\[yaml\\.syntax\\]" in md
    assert "<code>power\\_limit\\_w</code> <code>300</code> → <code>250</code>" in md
    assert r.as_json()["fleets"][0]["base_problems"][0]["rule"] == "yaml.syntax"


def test_an_invalid_base_that_does_not_resolve_says_there_is_no_plan(repo: Path) -> None:
    """The base's Sites file does not parse: its nodes name sites the base no longer has,
    so it cannot be resolved: only base-invalid (exit 1), and the comment says why."""
    sites = "inventory/example/sites.yaml"
    line = _break_then_fix(repo, sites, "kind: Site", "kind: Site: [")
    r = review(repo, "HEAD~1")
    fr = r.fleets[0]
    assert r.exit_code == 1 and fr.base_invalid == 1 and not fr.base_resolved
    assert [f.rule for f in fr.flags] == ["base-invalid"] and fr.nodes == [] and fr.objects == []
    assert [(p.location.file, p.location.line) for p in fr.base_problems] == [(sites, line)]
    assert r.summary == (
        "❌ example: the base is invalid (1 error) and does not resolve, so there is no plan diff; "
        "1 blocking: base-invalid"
    )
    md = render(r)
    assert "It does not resolve, so there is no plan diff: no other risk flag could be checked." in md
    assert "| ❌ block | <code>base-invalid</code> |" in md and "### The base's errors" in md


def test_worktree_reviews_uncommitted_edits_and_the_default_says_they_were_not(
    repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Uncommitted edits: by default the review reads commits only, and its first line says
    the edits were NOT reviewed (⚠️, never ✅); ``--worktree`` reviews them (tracked and
    untracked files, as ``git add -A`` would commit them), leaving the index, HEAD and the
    branches as they were."""
    replace(repo, "policies/shared/gpu-profiles.yaml", PROFILE, PROFILE.replace("300", "250"))
    profile = repo / "inventory/example/extra.yaml"
    profile.write_text("---\napiVersion: swarm.io/v1alpha1\nkind: Site\n")  # untracked, invalid
    before = (git(repo, "status", "--porcelain"), git(repo, "rev-parse", "HEAD"), git(repo, "branch"))
    monkeypatch.chdir(repo / "policies")
    assert cli.main(["review", "--base", "HEAD", "--format", "json"]) == 0
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert data["summary"].startswith("⚠️ no fleet changes; NOT reviewed: uncommitted edits to 2 fleet")
    assert data["uncommitted"] == ["inventory/example/extra.yaml", "policies/shared/gpu-profiles.yaml"]
    assert "--worktree" in err
    # --worktree: both edits reviewed; the untracked file makes the head invalid (exit 2).
    assert cli.main(["review", "--base", "HEAD", "--worktree", "--format", "json"]) == 2
    data = json.loads(capsys.readouterr().out)
    problems = data["fleets"][0]["problems"]
    assert any(p["location"]["file"] == "inventory/example/extra.yaml" for p in problems)
    assert any("the head is the working tree" in n for n in data["notes"]) and data["uncommitted"] == []
    profile.unlink()
    assert cli.main(["review", "--base", "HEAD", "--worktree", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    (c,) = [c for c in data["fleets"][0]["nodes"] if c["field"] == "power_limit_w"]
    assert (c["before"], c["after"]) == (300, 250)
    assert git(repo, "rev-parse", "HEAD") == before[1] and git(repo, "branch") == before[2]
    assert git(repo, "status", "--porcelain") == before[0].replace("?? inventory/example/extra.yaml\n", "")
    # The same working tree is the same commit, and so the same review.
    assert cli.main(["review", "--base", "HEAD", "--worktree", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["head"] == data["head"]


# --- review.yml's own steps, run as the runner runs them -------------------------------------

# What each step's `env:` takes from the event, and the value a run here gives it.
_EVENT = {
    "${{ matrix.pull.base }}": "BASE",
    "${{ matrix.pull.head }}": "HEAD",
    "${{ matrix.pull.mode }}": "MODE",
    "${{ matrix.pull.number }}": "NUMBER",
    "${{ runner.temp }}/applied.txt": "RECORDS",
    "${{ runner.temp }}/claim/claim.json": "CLAIM",
    "${{ github.server_url }}/${{ github.repository }}": "URL",
    "${{ steps.review.outputs.exit_code }}": "CODE",
}


def _step(name: str) -> dict[str, object]:
    doc = yaml.safe_load((WORKFLOWS / "review.yml").read_text())
    (step,) = [s for s in doc["jobs"]["review"]["steps"] if s.get("name", "").startswith(name)]
    assert "${{" not in step["run"]  # event data reaches the shell through env only, quoted
    return step


def run_step(name: str, cwd: Path, values: dict[str, str], workspace: Path, runner_temp: Path) -> int:
    """Run the ``run:`` of review.yml's step ``name`` as GitHub's runner does (``bash -e``,
    its ``env:`` with the event's values, in its working directory under ``cwd``)."""
    step = _step(name)
    env = {**os.environ, "GITHUB_WORKSPACE": str(workspace), "RUNNER_TEMP": str(runner_temp)}
    env["GITHUB_OUTPUT"] = str(runner_temp / "github_output")
    env["PYTHONPATH"] = str(ROOT / "src")  # the reviewer venv's package: this checkout's
    values = {
        "MODE": "merge",
        "NUMBER": "7",
        "RECORDS": str(runner_temp / "applied.txt"),
        "CLAIM": str(runner_temp / "claim" / "claim.json"),
        **values,
    }
    for key, expr in dict(step.get("env") or {}).items():  # type: ignore[call-overload]
        env[key] = values[_EVENT[expr]]
    where = cwd / str(step.get("working-directory", "."))
    done = subprocess.run(["bash", "-e", "-c", str(step["run"])], cwd=where, env=env, capture_output=True)
    return done.returncode


def runner(tmp_path: Path) -> tuple[Path, Path]:
    """A runner's $GITHUB_WORKSPACE with `reviewer/` (the base's code: this checkout's
    scripts) and $RUNNER_TEMP with the reviewer's venv command, a console script as pip
    writes it (it imports the installed package, never the working directory's)."""
    workspace, temp = tmp_path / "ws", tmp_path / "rt"
    shutil.copytree(SCRIPTS, workspace / "reviewer" / "scripts")
    exe = temp / "reviewer-venv" / "bin" / "swarm"
    exe.parent.mkdir(parents=True)
    exe.write_text(f"#!{sys.executable}\nimport sys\nfrom swarm_infra.cli import main\nsys.exit(main())\n")
    exe.chmod(0o755)
    (temp / "github_output").write_text("")
    return workspace, temp


def test_the_workflow_steps_review_a_hostile_head_with_the_base_code(repo: Path, tmp_path: Path) -> None:
    """A pull request that rewrites the review script, the library and a `swarm_infra`
    package in the working directory to approve itself, and bumps a driver with no canary:
    review.yml's step runs the base's script and package, so the comment is the real
    review (blocking, with the rules changed listed), and the last step fails the job."""
    base = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "checkout", "-qb", "pr")
    (repo / "scripts").mkdir()
    approve = '#!/bin/sh\nmkdir -p "$3"; printf \'✅ fine\\n<!-- swarm-review -->\\n\' > "$3/review.md"\n'
    (repo / "scripts/review-pr.sh").write_text(approve + 'echo 0 > "$3/exit_code"\n')
    for pkg in (repo / "swarm_infra", repo / "src/swarm_infra"):
        (pkg / "cli").mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "cli/__init__.py").write_text("def main():\n    print('✅ approved')\n    return 0\n")
    replace(
        repo, "policies/shared/gpu-profiles.yaml", PROFILE, PROFILE.replace('branch: "570"', 'branch: "575"')
    )
    head = commit(repo, "approve myself")  # the head, checked out as the runner's `pr`
    workspace, temp = runner(tmp_path)
    values = {"BASE": base, "HEAD": head, "URL": "https://github.com/o/r", "CODE": ""}
    pr = tmp_path / "checkout"
    pr.mkdir()
    repo.rename(pr / "pr")
    assert run_step("Review the change", pr, values, workspace, temp) == 0
    comment = (temp / "review" / "review.md").read_text()
    assert comment.startswith("❌ example\\: ") and "driver-without-canary" in comment.splitlines()[0]
    for path in ("scripts/review-pr\\.sh", "src/swarm\\_infra/cli/\\_\\_init\\_\\_\\.py"):
        assert f"| <code>{path}</code> |" in comment  # listed as rules changed
    assert "approved" not in comment and "fine" not in comment
    code = (temp / "github_output").read_text()
    assert code == "exit_code=1\n"
    assert run_step("Fail on blocking", pr, {**values, "CODE": "1"}, workspace, temp) == 1
    assert run_step("Fail on blocking", pr, {**values, "CODE": "0"}, workspace, temp) == 0
    assert run_step("Fail on blocking", pr, {**values, "CODE": ""}, workspace, temp) == 1  # no review


@pytest.mark.parametrize("kind", ["stale branch", "invalid head"])
def test_the_workflow_step_reviews_the_merge_result_and_posts_an_invalid_head(
    repo: Path, tmp_path: Path, kind: str
) -> None:
    """review.yml's step, given the base branch's tip (which moved on) and the head: a
    branch made before main moved, merged into main's tip, changes only the README (no
    fleet change, exit 0: main's own change is not shown as the branch's); an invalid
    merge result is the comment (exit 2), not a skipped step."""
    if kind == "stale branch":
        base, head = stale_branch(repo)
    else:
        base = git(repo, "rev-parse", "HEAD").strip()
        (repo / "inventory/example/sites.yaml").write_text("not: [valid\n")
        head = commit(repo, "invalid head")
    workspace, temp = runner(tmp_path)
    (tmp_path / "checkout").mkdir()
    repo.rename(tmp_path / "checkout" / "pr")
    values = {"BASE": base, "HEAD": head, "URL": "https://github.com/o/r", "CODE": ""}
    assert run_step("Review the change", tmp_path / "checkout", values, workspace, temp) == 0
    comment = (temp / "review" / "review.md").read_text()
    code = (temp / "github_output").read_text()
    if kind == "stale branch":
        assert comment.startswith("✅ no fleet changes\n" + MARKER) and code == "exit_code=0\n"
    else:
        assert comment.startswith("❌ example\\: the merge result is invalid") and code == "exit_code=2\n"
        # The syntax error, linked to its line at the head commit (REPO_URL from the event).
        assert f"(https://github.com/o/r/blob/{head}/inventory/example/sites.yaml#L" in comment
        assert "<code>error\\[yaml\\.syntax\\]</code>" in comment
