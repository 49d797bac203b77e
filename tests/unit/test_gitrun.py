"""The package's one git runner (swarm_infra.gitrun), as the review and the agent use it, with
the real git: the caller's GIT_* variables never reach git, a hung git times out, and there
is one GitError.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from swarm_infra import gitrun
from swarm_infra.agent import git as agent_git
from swarm_infra.review import git as review_git

ISOLATED = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "HOME": "/nonexistent"}


def repo(path: Path, text: str) -> str:
    """A repository at ``path`` with one commit of ``inventory/a.yaml`` = ``text``; its id."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")} | ISOLATED
    who = ["-c", "user.name=T", "-c", "user.email=t@example.org"]
    (path / "inventory").mkdir(parents=True)
    (path / "inventory/a.yaml").write_text(text)
    for argv in (["init", "-q"], ["add", "-A"], [*who, "commit", "-q", "-m", "one"], ["rev-parse", "HEAD"]):
        done = subprocess.run(["git", *argv], cwd=path, env=env, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def test_there_is_one_git_error() -> None:
    assert review_git.GitError is agent_git.GitError is gitrun.GitError


def test_a_git_dir_in_the_callers_environment_does_not_redirect_the_review(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A git hook (``pre-commit``, ``pre-push``) runs with GIT_DIR and GIT_INDEX_FILE set: a
    review started there read the hook's repository instead of the one it was given."""
    reviewed = repo(tmp_path / "reviewed", "reviewed\n")
    other = repo(tmp_path / "other", "other\n")
    assert reviewed != other
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "other/.git"))
    monkeypatch.setenv("GIT_INDEX_FILE", str(tmp_path / "other/.git/index"))
    assert review_git.resolve_ref(tmp_path / "reviewed", "HEAD") == reviewed
    files = review_git.tree_files(tmp_path / "reviewed", reviewed)
    blobs = review_git.read_blobs(tmp_path / "reviewed", [f.blob for f in files.values()])
    assert list(blobs.values()) == [b"reviewed\n"]
    assert review_git.uncommitted(tmp_path / "reviewed") == []


def test_configuration_in_the_callers_environment_runs_no_program(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``GIT_CONFIG_COUNT``/``KEY``/``VALUE`` (git-config(1), ENVIRONMENT) set configuration
    for every git the process starts; ``core.fsmonitor`` names a program that ``git status``
    runs. The review's ``git status`` (uncommitted files) must not start it."""
    repo(tmp_path / "reviewed", "reviewed\n")
    ran = tmp_path / "ran"
    hook = tmp_path / "fsmonitor"
    hook.write_text(f"#!/bin/sh\ntouch {ran}\n")
    hook.chmod(0o755)
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "core.fsmonitor")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", str(hook))
    (tmp_path / "reviewed/inventory/b.yaml").write_text("new\n")
    assert review_git.uncommitted(tmp_path / "reviewed") == ["inventory/b.yaml"]
    assert not ran.exists()
    # and the program does run when git is started with that environment: the test can fail
    subprocess.run(["git", "status"], cwd=tmp_path / "reviewed", capture_output=True, check=True)
    assert ran.exists()


def test_the_variables_a_caller_passes_are_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The review's working-tree commit passes its own index and identity; the caller's
    environment cannot replace them."""
    head = repo(tmp_path / "reviewed", "reviewed\n")
    monkeypatch.setenv("GIT_AUTHOR_NAME", "someone else")
    (tmp_path / "reviewed/inventory/b.yaml").write_text("new\n")
    commit = review_git.worktree_commit(tmp_path / "reviewed")
    shown = review_git.git(tmp_path / "reviewed", "log", "-1", "--format=%an %P", commit).decode().split()
    assert shown == ["swarm", "review", head]


@pytest.fixture
def hung_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``git`` first on PATH that hangs for 5 s, then succeeds; git's time limit 0.5 s."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "git").write_text("#!/bin/sh\nexec sleep 5\n")
    (bin_dir / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(gitrun, "TIMEOUT_S", 0.5)


def test_a_hung_git_times_out_in_the_review(tmp_path: Path, hung_git: None) -> None:
    started = time.monotonic()
    with pytest.raises(gitrun.GitError, match=r"^git rev-parse: no answer in 0.5 s$"):
        review_git.git(tmp_path, "rev-parse", "--show-toplevel")
    assert time.monotonic() - started < 4


def test_a_hung_git_times_out_in_the_agent(tmp_path: Path, hung_git: None) -> None:
    started = time.monotonic()
    with pytest.raises(gitrun.GitError, match=r"^git merge-base: no answer in 0.5 s$"):
        agent_git.descends(tmp_path, "a" * 40, "b" * 40)
    assert time.monotonic() - started < 4


def test_a_failure_names_the_verb_the_exit_status_and_gits_last_line(tmp_path: Path) -> None:
    with pytest.raises(gitrun.GitError) as caught:
        gitrun.git(["-c", "core.quotepath=off", "-C", str(tmp_path), "rev-parse", "HEAD"])
    message = str(caught.value)
    assert message.startswith("git rev-parse exited 128: 'fatal: not a git repository"), message
    with pytest.raises(gitrun.GitError, match="is not a git repository"):
        review_git.toplevel(tmp_path)


def test_git_missing_is_a_git_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(gitrun.GitError, match=r"^cannot run git: "):
        gitrun.git(["status"])
