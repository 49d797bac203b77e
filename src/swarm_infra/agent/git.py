"""The agent's Git work, with the real ``git``: fetch the declared ref, check the fetched
commit's signature, its ancestry, and check a verified commit out.

Every program runs from an argv list (never a shell string), with the remote, the ref and
the commit as separate arguments after ``--`` where git takes one. Only SSH signatures
count: git is told to verify with the node's allowed signers file
(``gpg.ssh.allowedSignersFile``; ssh-keygen(1), ALLOWED SIGNERS, OpenSSH 9.2) and its
OpenPGP and X.509 programs are ``false``, so a GPG signature by some key in root's keyring
can never pass. Git 2.39 (Debian 12) verifies SSH signatures (git-config(1), ``gpg.format``
and ``gpg.ssh.*``; since Git 2.34).

The node-local clone is a bare repository; the fetched commit lives under
``refs/swarm/fetched`` and only a verified commit gets a work tree (``git worktree add``),
so a refused commit's files never reach the disk as files.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from ..gitrun import GitError as GitError  # re-exported: the agent's callers catch it here
from ..gitrun import git
from ..resolve.pull import ref_name, remote_scheme

FETCHED = "refs/swarm/fetched"


@dataclass(frozen=True)
class Signature:
    """git's verdict on a commit's signature: ``status`` (``%G?``: G, B, U, X, Y, R, E, N),
    ``fingerprint`` (``%GF``, empty when unknown) and whether ``git verify-commit`` passed."""

    status: str
    fingerprint: str
    verified: bool

    @property
    def effective_status(self) -> str:
        """``status``, but never ``G`` unless ``git verify-commit`` passed too."""
        return self.status if self.verified or self.status != "G" else "B"


def ensure_clone(clone: Path) -> None:
    """Make ``clone`` a bare repository (mode 0700) unless it is one already."""
    if (clone / "HEAD").is_file():
        return
    clone.mkdir(parents=True, exist_ok=True)
    clone.chmod(0o700)
    git(["init", "--quiet", "--bare", str(clone)])


def ssh_command(deploy_key: Path | None, known_hosts: Path | None) -> str:
    """``core.sshCommand`` for an ssh remote: no prompts, the node's deploy key only (a file,
    0600; never in an argument's value itself), the Git server's host key checked against
    ``known_hosts`` only. git runs this string with a shell: every path is quoted."""
    argv = ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes"]
    if deploy_key is not None:
        argv += ["-i", str(deploy_key), "-o", "IdentitiesOnly=yes"]
    if known_hosts is not None:
        argv += ["-o", f"UserKnownHostsFile={known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null"]
    return shlex.join(argv)


def fetch_argv(
    clone: Path, remote: str, ref: str, deploy_key: Path | None = None, known_hosts: Path | None = None
) -> list[str]:
    """git's arguments fetching ``ref`` (a branch name) of ``remote`` into ``clone`` as
    :data:`FETCHED`: only ``remote``'s own scheme allowed as a transport (no ``ext::``, no
    redirection to another), no tags, no submodules, forced (the remote may move back; the
    ancestry rule judges that)."""
    scheme = remote_scheme(remote)
    config = ["-c", "protocol.allow=never", "-c", f"protocol.{scheme}.allow=always"]
    if scheme == "ssh":
        config += ["-c", f"core.sshCommand={ssh_command(deploy_key, known_hosts)}"]
    return [
        *config,
        "-C",
        str(clone),
        "fetch",
        "--quiet",
        "--no-tags",
        "--no-recurse-submodules",
        "--no-write-fetch-head",
        "--",
        remote,
        f"+{ref_name(ref)}:{FETCHED}",
    ]


def fetch(
    clone: Path, remote: str, ref: str, deploy_key: Path | None = None, known_hosts: Path | None = None
) -> str:
    """Fetch ``ref`` of ``remote`` into ``clone``; returns the fetched commit's full id.
    Raises :class:`GitError` (unreachable remote, no such ref) or ValueError (a remote or
    ref that is not one, :mod:`swarm_infra.resolve.pull`)."""
    ensure_clone(clone)
    git(fetch_argv(clone, remote, ref, deploy_key, known_hosts))
    return git(["-C", str(clone), "rev-parse", "--verify", f"{FETCHED}^{{commit}}"]).stdout.decode().strip()


def remote_head(remote: str, ref: str, timeout_s: float = 30) -> str:
    """The commit ``ref`` (a branch name) of ``remote`` is at now (``git ls-remote``, with
    :func:`fetch_argv`'s transport rule; an ssh remote with the caller's own SSH keys and
    known hosts, no prompts). Raises :class:`GitError` (unreachable, no such branch, an
    answer that is not one commit id) or ValueError (a remote or ref that is not one)."""
    scheme = remote_scheme(remote)
    config = ["-c", "protocol.allow=never", "-c", f"protocol.{scheme}.allow=always"]
    if scheme == "ssh":
        config += ["-c", f"core.sshCommand={ssh_command(None, None)}"]
    full = ref_name(ref)
    listed = git([*config, "ls-remote", "--", remote, full], timeout_s=timeout_s).stdout
    heads = [line.split("\t") for line in listed.decode("utf-8", "replace").splitlines()]
    found = [c for c, *name in heads if name == [full]]
    if len(found) != 1 or not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", found[0]):
        raise GitError(f"{remote} has no branch {ref}")
    return found[0]


def _verify_config(allowed_signers: Path, revoked_signers: Path | None = None) -> list[str]:
    # gpg.minTrustLevel=fully: git verify-commit then also fails a good signature whose key
    # no principal of the file has (git-config(1), gpg.minTrustLevel; for SSH, a matched
    # principal is "fully", an unmatched key "undefined"). gpg.ssh.revocationFile: git gives
    # it to ssh-keygen -Y verify -r, which refuses a signature by any key listed there.
    revoked = ["-c", f"gpg.ssh.revocationFile={revoked_signers}"] if revoked_signers is not None else []
    return [
        "-c",
        "gpg.minTrustLevel=fully",
        "-c",
        f"gpg.ssh.allowedSignersFile={allowed_signers}",
        *revoked,
        "-c",
        "gpg.openpgp.program=false",
        "-c",
        "gpg.x509.program=false",
    ]


def signature(
    clone: Path, commit: str, allowed_signers: Path, revoked_signers: Path | None = None
) -> Signature:
    """git's verdict on ``commit``'s signature against ``allowed_signers``, a key listed in
    ``revoked_signers`` (when given: the node's revoked signers file) refused."""
    config = _verify_config(allowed_signers, revoked_signers)
    shown = git([*config, "-C", str(clone), "log", "-1", "--format=%G?%x00%GF", commit, "--"]).stdout
    status, _, fingerprint = shown.decode("utf-8", "replace").strip().partition("\0")
    verified = git([*config, "-C", str(clone), "verify-commit", "--", commit], check=False)
    return Signature(status or "N", fingerprint, verified.returncode == 0)


def descends(clone: Path, ancestor: str, commit: str) -> bool:
    """Whether ``commit`` descends from ``ancestor`` (or is it); False when ``ancestor`` is
    not in the clone (nothing proves the new commit comes after it)."""
    done = git(["-C", str(clone), "merge-base", "--is-ancestor", ancestor, commit], check=False)
    return done.returncode == 0


def checkout(clone: Path, trees: Path, commit: str) -> Path:
    """A work tree of ``commit`` at ``trees/<commit>`` (made once; a verified commit only).
    Returns its path."""
    tree = trees / commit
    if (tree / ".git").exists():
        return tree
    trees.mkdir(parents=True, exist_ok=True)
    git(["-C", str(clone), "worktree", "prune"])
    git(["-C", str(clone), "worktree", "add", "--quiet", "--detach", "--force", "--", str(tree), commit])
    return tree


def prune(clone: Path, trees: Path, keep: set[str]) -> None:
    """Remove the work trees of commits other than ``keep``."""
    if not trees.is_dir():
        return
    for tree in trees.iterdir():
        if tree.name not in keep:
            git(["-C", str(clone), "worktree", "remove", "--force", "--", str(tree)], check=False)
    git(["-C", str(clone), "worktree", "prune"], check=False)
