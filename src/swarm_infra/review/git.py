"""The fleet's files at a Git ref, read without touching the working tree.

``git ls-tree`` lists the files under ``inventory/`` and ``policies/`` at a commit (with
their blob ids, so files identical at two refs are known without reading them) and ``git
cat-file --batch`` reads their blobs into a temporary directory. Never ``git archive``: it
honours the commit's own ``.gitattributes`` (``export-ignore`` would hide a file from the
review that ``swarm validate`` and the engines still read). Symbolic links that would lead
out of the directory are not written: they are reported as ``file.outside-fleet``, as the
validator reports such links in a working tree.

The repository is its top level (:func:`toplevel`), whatever directory the command runs in;
a review compares the head with its merge base (:func:`merge_base`), and lists the files
that change the rules the fleet is judged by (:func:`rule_files`).
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import MergeConflict as MergeConflict
from ..fleet.diagnostics import Diagnostic, excerpt
from ..fleet.sources import FLEET_NAME
from ..gitrun import GitError as GitError  # re-exported: the review's callers catch it here
from ..gitrun import git as gitrun

ROOTS = ("inventory", "policies")
REGULAR_MODES = ("100644", "100755")


# What the fleet is judged and applied by: a change here changes the verdict or what an
# apply does for every fleet (shell-style patterns on repository-relative paths; a
# pattern ending in "/" is a directory and everything under it).
RULE_PATTERNS = (
    "schemas/",
    "src/",
    "roles/",
    "playbooks/",
    "plugins/",
    "deploys/",
    "stacks/",
    "jobs/",
    "scripts/",
    ".github/",
    "ansible.cfg",
    "Pulumi*.yaml",
    "pyproject.toml",
    "inventory/*.py",  # pyinfra's inventories: Python the engines run
)
# Of those, the code: what resolves or applies the fleet, whose effect the reviewer (the
# base's code) cannot see; only the head's own claim (head-plan.yml) can show it.
NOT_CODE = ("schemas/", ".github/", "Pulumi*.yaml")


def git(repo: Path, *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None) -> bytes:
    """The stdout of ``git -C repo ARGS``, run by :func:`swarm_infra.gitrun.git`: a clean
    environment (no ``GIT_*`` variable or user configuration of the caller's; ``env``: the
    variables added), a time limit. Raises :class:`GitError` with git's message."""
    return gitrun(["-C", str(repo), *args], stdin=stdin, env=env).stdout


def resolve_ref(repo: Path, ref: str) -> str:
    """The commit id ``ref`` names in ``repo``; :class:`GitError` when it names none."""
    if ref.startswith("-"):
        raise GitError(f"{excerpt(ref)} is not a ref")
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}").decode().strip()
    except GitError:
        raise GitError(f"no commit named {excerpt(ref)} in {repo}") from None


def tree_of(repo: Path, commit: str) -> str:
    """The id of ``commit``'s tree (``git rev-parse COMMIT^{tree}``): the same files, the
    same id, whichever commit holds them."""
    return git(repo, "rev-parse", "--verify", f"{commit}^{{tree}}").decode().strip()


def toplevel(cwd: Path) -> Path:
    """The top directory of the Git working tree that holds ``cwd`` (a review runs from any
    subdirectory). Raises :class:`GitError` ("... is not a git repository") outside one,
    or when git cannot run."""
    try:
        out = git(cwd, "rev-parse", "--show-toplevel")
    except GitError as exc:
        if "not a git repository" in str(exc).lower():
            raise GitError(f"{cwd} is not a git repository (nor inside one)") from None
        raise
    top = out.decode("utf-8", "surrogateescape").strip()
    if not top:  # a bare repository has no working tree, but still has commits
        return cwd
    return Path(top)


def merge_base(repo: Path, base: str, head: str) -> str:
    """The best common ancestor of commits ``base`` and ``head`` (``git merge-base``): the
    commit a pull request branched from, or last merged. A branch made before its base
    moved then shows only its own change, not the reverse of the base's newer commits.
    Raises :class:`GitError` when the two have no common history."""
    try:
        return git(repo, "merge-base", base, head).decode().strip()
    except GitError:
        raise GitError(
            f"commits {base[:12]} and {head[:12]} have no common ancestor (unrelated histories): "
            "no merge base to review against; pass --exact-base to compare the two trees"
        ) from None


def merge_commit(repo: Path, base: str, head: str) -> str:
    """The commit that merging ``head`` into ``base`` makes (what main holds once a pull
    request is merged): ``git merge-tree --write-tree`` (git >= 2.38, the merge machinery of
    ``git merge`` with the ``ort`` strategy, computed without a working tree or index), then
    ``git commit-tree`` with parents ``base`` and ``head`` and a fixed identity and date, so
    the same two commits always give the same merge commit. Only unreferenced objects are
    added to the object store. When ``head`` already contains ``base`` the merge's tree is
    ``head``'s. Raises :class:`MergeConflict` when the merge has conflicts (``git
    merge-tree`` exits 1) and :class:`GitError` for unrelated histories or other failures.
    Source: git-merge-tree(1), "OUTPUT" (``-z --name-only``: the tree id, then each
    conflicted path, NUL-terminated) and "EXIT STATUS"."""
    done = gitrun(
        ["-C", str(repo), "merge-tree", "--write-tree", "--name-only", "-z", "--no-messages", base, head],
        check=False,
    )
    fields = [f.decode("utf-8", "surrogateescape") for f in done.stdout.split(b"\0") if f]
    if done.returncode == 1 and fields:
        files = sorted(set(fields[1:]))
        shown = ", ".join(excerpt(f) for f in files[:10]) + (
            f" and {len(files) - 10} more" if len(files) > 10 else ""
        )
        raise MergeConflict(
            f"the head {head[:12]} conflicts with the base {base[:12]} ({shown}): there is no merge "
            "result to review; merge or rebase the base branch into the pull request and push",
            files,
        )
    if done.returncode != 0 or not fields:
        message = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        raise GitError(f"git merge-tree {base[:12]} {head[:12]} failed: {excerpt(message[0])}")
    out = git(
        repo,
        "commit-tree",
        fields[0],
        "-p",
        base,
        "-p",
        head,
        "-m",
        f"the merge result of {head} into {base} (swarm review --merge)",
        env=_WORKTREE_IDENTITY,
    )
    return out.decode().strip()


def list_refs(repo: Path, prefix: str) -> dict[str, str]:
    """The refs of ``repo`` under ``prefix`` (e.g. ``refs/swarm/applied/``): full ref name
    -> the commit id it names (``git for-each-ref``)."""
    out = git(repo, "for-each-ref", "--format=%(refname) %(objectname)", prefix).decode()
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)


def is_ancestor(repo: Path, commit: str, descendant: str) -> bool:
    """Whether ``commit`` is ``descendant`` or one of its ancestors (``git merge-base
    --is-ancestor``: exit 0 yes, 1 no); False when either is unknown here."""
    done = gitrun(["-C", str(repo), "merge-base", "--is-ancestor", commit, descendant], check=False)
    return done.returncode == 0


def changed_files(repo: Path, base: str, head: str) -> list[str]:
    """Repository-relative paths that differ between commits ``base`` and ``head`` (added,
    removed, changed, mode changes; renames are a removal and an addition), sorted."""
    out = git(repo, "diff-tree", "-r", "-z", "--no-renames", "--name-only", base, head)
    return sorted({p.decode("utf-8", "surrogateescape") for p in out.split(b"\0") if p})


def _matches(path: str, pattern: str) -> bool:
    """``path`` against one of :data:`RULE_PATTERNS`: a directory (``x/``: everything
    under it) or a shell pattern matched segment by segment (``*`` never crosses a ``/``)."""
    if pattern.endswith("/"):
        return path.startswith(pattern)
    parts, want = path.split("/"), pattern.split("/")
    same = len(parts) == len(want)
    return same and all(fnmatch.fnmatchcase(p, w) for p, w in zip(parts, want, strict=same))


def is_rule_file(path: str) -> bool:
    """Whether ``path`` is part of the rules the fleet is judged and applied by
    (:data:`RULE_PATTERNS`): schemas, the library, roles, playbooks, stacks, CI..."""
    return any(_matches(path, p) for p in RULE_PATTERNS)


def is_code(path: str) -> bool:
    """Whether ``path`` is a rule file that is code (:data:`NOT_CODE` aside): the library,
    roles, playbooks, plugins, deploys, stacks, jobs, scripts, inventory scripts..."""
    return is_rule_file(path) and not any(_matches(path, p) for p in NOT_CODE)


def rule_files(paths: list[str]) -> list[str]:
    """The entries of ``paths`` that change the rules (:func:`is_rule_file`), in order."""
    return [p for p in paths if is_rule_file(p)]


def uncommitted(repo: Path) -> list[str]:
    """Fleet and rule files (:data:`ROOTS`, :func:`is_rule_file`) whose working-tree or staged content
    differs from ``HEAD``, untracked ones included: what a review of commits never sees.
    Repository-relative paths, sorted; empty in a bare repository."""
    try:
        out = git(repo, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames")
    except GitError:
        return []
    paths = set()
    for entry in out.split(b"\0"):
        if len(entry) > 3:
            path = entry[3:].decode("utf-8", "surrogateescape")
            if path.startswith(tuple(r + "/" for r in ROOTS)) or is_rule_file(path):
                paths.add(path)
    return sorted(paths)


# The commit that stands for the working tree (worktree_commit): fixed names and date, so the
# same working tree is the same commit, and the same review, each time.
_WORKTREE_IDENTITY = {
    "GIT_AUTHOR_NAME": "swarm review",
    "GIT_AUTHOR_EMAIL": "swarm-review@localhost",
    "GIT_AUTHOR_DATE": "@0 +0000",
    "GIT_COMMITTER_NAME": "swarm review",
    "GIT_COMMITTER_EMAIL": "swarm-review@localhost",
    "GIT_COMMITTER_DATE": "@0 +0000",
}


def worktree_commit(repo: Path) -> str:
    """A commit of the working tree as ``git add -A`` would commit it (tracked files as they
    are on disk, untracked ones that ``.gitignore`` does not ignore, deletions), with
    ``HEAD`` as its parent, so that uncommitted edits can be reviewed like a commit
    (``swarm review --worktree``). Made with a temporary index (``GIT_INDEX_FILE``) and
    ``git commit-tree``: the repository's index, ``HEAD`` and branches are not touched;
    only unreferenced objects are added to the object store (``git gc`` prunes them).
    Raises :class:`GitError` when the repository has no commit yet or no working tree."""
    head = resolve_ref(repo, "HEAD")
    with tempfile.TemporaryDirectory(prefix="swarm-review-index-") as tmp:
        env = {"GIT_INDEX_FILE": os.path.join(tmp, "index")}
        git(repo, "read-tree", head, env=env)
        git(repo, "add", "-A", "--", ":/", env=env)
        tree = git(repo, "write-tree", env=env).decode().strip()
    out = git(
        repo,
        "commit-tree",
        tree,
        "-p",
        head,
        "-m",
        "the working tree (swarm review --worktree)",
        env=_WORKTREE_IDENTITY,
    )
    return out.decode().strip()


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


def read_blobs(repo: Path, blobs: list[str]) -> dict[str, bytes]:
    """The contents of ``blobs`` (object ids), read with one ``git cat-file --batch``."""
    wanted = sorted(set(blobs))
    if not wanted:
        return {}
    out = git(repo, "cat-file", "--batch", stdin="".join(b + "\n" for b in wanted).encode())
    found: dict[str, bytes] = {}
    pos = 0
    for blob in wanted:
        end = out.index(b"\n", pos)
        header = out[pos:end].decode().split()
        if len(header) != 3 or header[1] != "blob":
            raise GitError(f"git cat-file: no blob {blob}")
        size = int(header[2])
        found[header[0]] = out[end + 1 : end + 1 + size]
        pos = end + 1 + size + 1
    return found


def _outside(path: str, target: str) -> str | None:
    """Why the symbolic link ``path`` -> ``target`` leads out of the extracted tree, or None."""
    if target.startswith("/") or posixpath.isabs(target):
        return f"{target!r} is an absolute link"
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    if joined == ".." or joined.startswith("../"):
        return f"{target!r} leads outside the repository"
    return None


def extract(repo: Path, commit: str, files: dict[str, TreeFile], dest: Path) -> list[Diagnostic]:
    """Write ``files`` (the fleet directories of ``commit``, from :func:`tree_files`) under
    ``dest``, read with ``git cat-file`` (never ``git archive``, which honours the commit's
    ``.gitattributes``); return a ``file.outside-fleet`` diagnostic for each symbolic link
    that would lead outside ``dest`` (absolute, or with ``..`` that leaves it), which is not
    written. Submodules (gitlinks) are not files and are skipped."""
    contents = read_blobs(repo, [f.blob for f in files.values()])
    problems: list[Diagnostic] = []
    for path, entry in files.items():
        target = dest / path
        if not target.resolve().is_relative_to(dest.resolve()):  # ".." in a name git stores
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        data = contents[entry.blob]
        if entry.mode == "120000":
            link = data.decode("utf-8", "surrogateescape")
            why = _outside(path, link)
            if why is not None:
                problems.append(
                    Diagnostic(
                        path,
                        0,
                        0,
                        "$",
                        "file.outside-fleet",
                        f"not read: {excerpt(why, 200)}; a fleet reads only its own files",
                    )
                )
                continue
            os.symlink(link, target)
        elif entry.mode in REGULAR_MODES:
            target.write_bytes(data)
            if entry.mode == "100755":
                target.chmod(0o755)
    return problems
