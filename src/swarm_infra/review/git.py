"""The fleet's files at a Git ref, read without touching the working tree.

``git ls-tree`` lists the files under ``inventory/`` and ``policies/`` at a commit (with
their blob ids, so files identical at two refs are known without reading them) and ``git
archive`` writes them into a temporary directory. Symbolic links that would lead out of it
are not written: they are reported as ``file.outside-fleet``, as the validator reports such
links in a working tree.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

from ..fleet.diagnostics import Diagnostic, excerpt
from ..fleet.sources import FLEET_NAME

ROOTS = ("inventory", "policies")
REGULAR_MODES = ("100644", "100755")


class GitError(Exception):
    """A git command failed (not a repository, an unknown ref); the message says which."""


def git(repo: Path, *args: str) -> bytes:
    """The stdout of ``git -C repo ARGS``; raises :class:`GitError` with git's message."""
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=False)
    except OSError as exc:
        raise GitError(f"cannot run git: {exc}") from None
    if done.returncode != 0:
        message = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise GitError(f"git {args[0]}: {excerpt(message[-1] if message else 'failed', 300)}")
    return done.stdout


def resolve_ref(repo: Path, ref: str) -> str:
    """The commit id ``ref`` names in ``repo``; :class:`GitError` when it names none."""
    if ref.startswith("-"):
        raise GitError(f"{excerpt(ref)} is not a ref")
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}").decode().strip()
    except GitError:
        raise GitError(f"no commit named {excerpt(ref)} in {repo}") from None


@dataclass(frozen=True)
class TreeFile:
    """One file of the fleet directories at a commit: git mode (``100644``, ``120000`` for
    a symbolic link) and blob id."""

    mode: str
    blob: str


def tree_files(repo: Path, commit: str) -> dict[str, TreeFile]:
    """Every file under ``inventory/`` and ``policies/`` at ``commit``: repository-relative
    path -> :class:`TreeFile`, in path order."""
    out = git(repo, "ls-tree", "-r", "-z", "--full-tree", commit, "--", *ROOTS)
    files: dict[str, TreeFile] = {}
    for entry in out.split(b"\0"):
        if not entry:
            continue
        meta, _, path = entry.partition(b"\t")
        mode, kind, blob = meta.decode().split()
        if kind == "blob":
            files[path.decode("utf-8", "surrogateescape")] = TreeFile(mode, blob)
    return dict(sorted(files.items()))


def fleet_names(files: dict[str, TreeFile]) -> list[str]:
    """The fleets a tree declares: directories ``inventory/NAME`` with a plain name."""
    names = {p.split("/")[1] for p in files if p.startswith("inventory/") and p.count("/") >= 2}
    return sorted(n for n in names if FLEET_NAME.fullmatch(n))


def fleet_dirs(name: str) -> tuple[str, str, str]:
    """The repository-relative directories of fleet ``name`` (the ``--fleet`` convention)."""
    return (f"inventory/{name}", f"policies/{name}", "policies/shared")


def extract(repo: Path, commit: str, files: dict[str, TreeFile], dest: Path) -> list[Diagnostic]:
    """Write the fleet directories of ``commit`` under ``dest`` (``git archive``); return a
    ``file.outside-fleet`` diagnostic for each member that would land outside ``dest`` (an
    absolute symbolic link, or one with ``..`` that leaves it), which is not written."""
    roots = [r for r in ROOTS if any(p.startswith(r + "/") for p in files)]
    if not roots:
        return []
    data = git(repo, "archive", "--format=tar", commit, "--", *roots)
    problems: list[Diagnostic] = []
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = []
        for member in tar.getmembers():
            try:
                members.append(tarfile.data_filter(member, str(dest)))
            except tarfile.FilterError as exc:
                problems.append(
                    Diagnostic(
                        member.name,
                        0,
                        0,
                        "$",
                        "file.outside-fleet",
                        f"not read: {excerpt(str(exc), 200)}; a fleet reads only its own files",
                    )
                )
        tar.extractall(dest, members=members, filter="data")
    return problems
