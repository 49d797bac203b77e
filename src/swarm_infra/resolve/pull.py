"""Pull convergence, decided: where a pull-mode node fetches the fleet from, which ref,
whose signatures it accepts, how often it runs (the fleet's Rollout ``spec.pull``, the
Node's ``spec.convergence``).

The agent that acts on it is :mod:`swarm_infra.agent`; its files (configuration, allowed
signers, systemd service and timer) are rendered by :mod:`.files` from the ``pull`` slice
of NodeState (None for a node converged by push, the default).
"""

from __future__ import annotations

import base64
import binascii
import re
from urllib.parse import urlsplit

from ..fleet.model import Node, Rollout
from .types import PullState

# Transports a pull remote may use: https and ssh (git-fetch(1), GIT URLS), and file for a
# mirror on the node's own disk. Not git:// (no authentication), not ext:: (runs a command).
REMOTE_SCHEMES = ("https", "ssh", "file")
# A branch name: git-check-ref-format(1)'s rules, narrowed: no "..", no "@{", no control or
# special characters, no leading "-" or "/", no ".lock" or "/" at the end.
_BRANCH = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-/]{0,199}")


def remote_scheme(remote: str) -> str:
    """The transport of ``remote`` (``https``, ``ssh`` or ``file``).

    Raises ValueError for anything else: another scheme, scp-like ``host:path`` (write it
    ``ssh://host/path``), an option-like or space-holding value, a URL with a password."""
    if (
        not isinstance(remote, str)
        or not remote
        or remote.startswith("-")
        or any(c.isspace() or ord(c) < 32 for c in remote)
    ):
        raise ValueError(f"not a Git remote URL: {remote!r}")
    parts = urlsplit(remote)
    if parts.scheme not in REMOTE_SCHEMES or "://" not in remote:
        raise ValueError(
            f"{remote!r}: a Git remote must be an {', '.join(s + '://' for s in REMOTE_SCHEMES)} URL"
        )
    if parts.password is not None:
        raise ValueError(
            f"{parts.scheme}://...: no password in the URL (an ssh remote uses the node's deploy key)"
        )
    if parts.scheme != "file" and not parts.hostname:
        raise ValueError(f"{remote!r}: no host")
    return parts.scheme


def ref_name(branch: str) -> str:
    """``refs/heads/<branch>`` for a branch name; raises ValueError for one git would refuse
    or that could read as an option or a revision expression."""
    if (
        not isinstance(branch, str)
        or not _BRANCH.fullmatch(branch)
        or ".." in branch
        or "//" in branch
        or branch.endswith((".lock", "/", "."))
        or "/." in branch
    ):
        raise ValueError(f"not a branch name: {branch!r}")
    return f"refs/heads/{branch}"


# ssh-keygen(1) (OpenSSH 9.2), ALLOWED SIGNERS: "principals options keytype base64-key
# comment", space-separated; principals a comma-separated list of patterns; options (may be
# absent) cert-authority, namespaces="...", valid-after="...", valid-before="...". Accepted
# here: plain keys of the SSH signature types OpenSSH signs with (no certificates, no
# cert-authority: a CA would let any key it certified sign the fleet), without valid-after
# or valid-before (parsed, to say why they are refused: git checks them against the
# signature's creation time, which the signer writes, issue #38).
SIGNER_KEY_TYPES = (
    "ssh-ed25519",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "ssh-rsa",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
)
_SIGNER_LINE = re.compile(
    r"(?P<principals>[A-Za-z0-9@._+*?,-]+)"
    r'(?: (?P<options>(?:namespaces|valid-after|valid-before)="[A-Za-z0-9,.*?:+-]*"'
    r'(?:,(?:namespaces|valid-after|valid-before)="[A-Za-z0-9,.*?:+-]*")*))?'
    r" (?P<type>[a-z0-9@.-]+) (?P<key>[A-Za-z0-9+/]+={0,2})(?: [ -~]*)?"
)
MAX_SIGNERS_BYTES = 64 * 1024


def signer_key_problem(kind: str, data: str) -> str | None:
    """Why ``kind data`` is not a public key of a signature type OpenSSH signs with
    (:data:`SIGNER_KEY_TYPES`), or None: its base64 must decode and hold that type."""
    if kind not in SIGNER_KEY_TYPES:
        return f"key type {kind!r} is not one of {', '.join(SIGNER_KEY_TYPES)}"
    try:
        blob = base64.b64decode(data, validate=True)
    except binascii.Error:
        return "the key is not base64"
    size = int.from_bytes(blob[:4], "big") if len(blob) >= 4 else -1
    if blob[4 : 4 + size] != kind.encode():
        return f"the key's data does not hold a {kind} key"
    return None


def revoked_signer_problem(value: str) -> str | None:
    """Why a Rollout ``spec.pull.revoked_signers`` entry is not ``keytype base64`` of a
    signer's key (:func:`signer_key_problem`), or None."""
    kind, _, data = value.partition(" ")
    return signer_key_problem(kind, data)


def allowed_signers_problems(text: str) -> list[tuple[int, str]]:
    """(line, why) for every line of an allowed signers file that is not one plain signer
    (:data:`_SIGNER_LINE`'s form; blank lines and ``#`` comments allowed), and one at line 0
    when the file lists no signer at all (it would refuse every commit)."""
    problems: list[tuple[int, str]] = []
    signers = 0
    for number, raw in enumerate(text.split("\n"), 1):
        line = raw.rstrip("\r")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _SIGNER_LINE.fullmatch(line)
        if not m:
            problems.append(
                (number, "expected 'principals [namespaces=\"git\"] keytype base64 [comment]' "
                 "(ssh-keygen(1), ALLOWED SIGNERS; no cert-authority)")
            )  # fmt: skip
            continue
        dated = sorted(set(re.findall(r"(valid-after|valid-before)=", m["options"] or "")))
        if dated:
            problems.append(
                (
                    number,
                    f"{' and '.join(dated)}: git judges a signer's validity at the signature's creation "
                    "time, which the signer writes (a retired key could sign by backdating); retire "
                    "a key by removing its line, and list it in spec.pull.revoked_signers",
                )
            )
            continue
        problem = signer_key_problem(m["type"], m["key"])
        if problem:
            problems.append((number, problem))
            continue
        signers += 1
    if not problems and not signers:
        problems.append((0, "no signer: every commit would be refused"))
    return problems


def pull_state(node: Node, rollout: Rollout | None) -> PullState | None:
    """The ``pull`` slice of ``node``'s NodeState: None when the node converges by push;
    else the Rollout's pull settings (validated: a pull node needs them,
    :func:`swarm_infra.resolve.checks.pull.pull_declared`)."""
    if node.convergence != "pull" or rollout is None or rollout.pull is None:
        return None
    p = rollout.pull
    return {
        "fleet": p.fleet,
        "remote": p.remote,
        "ref": p.ref,
        "engine": "ansible",
        "allowed_signers": p.allowed_signers,
        "revoked_signers": list(p.revoked_signers),
        "interval_s": p.interval_s,
        "randomized_delay_s": p.randomized_delay_s,
        "status_port": p.status_port,
    }
