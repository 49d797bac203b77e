"""The pull agent's decisions, pure: what a run does with what it found.

Every input is plain data the run gathered (:mod:`.git`, :mod:`.report`, the fleet resolved
from the verified commit); every output is an :class:`Action`. Nothing here reads a file,
runs a program or looks at the clock, so each rule is a unit test from fixtures.

The rules, in the order a run meets them:

1. **Pause** (:func:`paused_action`): a node whose pause file exists does nothing at all
   (no fetch, no apply) and says so. The file is node-local on purpose: the provider, root
   on the machine, stops the agent without a commit; the operator's way is the fleet
   (``spec.convergence: push`` takes the node out of pull).
2. **Signature** (:func:`signature_action`): only a commit whose signature git reports as
   good (``%G?`` = ``G``) by a key of the node's allowed signers file is applied. Unsigned
   (``N``), bad (``B``), unknown signer (``U``: git finds no principal for the key),
   unverifiable (``E``), expired or revoked: refused; the node keeps its last good commit, never checks the
   refused one out.
3. **Ancestry** (:func:`ancestry_action`): the fetched commit must descend from the last
   good one (or be it). A signed but older commit (a replay, a force-push back to a state
   the fleet left) is refused: signatures say who, not when.
4. **Rollout gating** (:func:`gate`): a commit the node has not yet applied waits until
   every node of the earlier rollout batches reports it applied (the batches are those of
   push mode, :func:`swarm_infra.resolve.rollout.rollout_batches`, over the fleet's
   pull-mode nodes in name order); a batch whose failures exceed the Rollout's tolerance
   (:func:`swarm_infra.resolve.rollout.batch_failed`) halts the rollout for every later
   batch. Re-applying the commit the node already applied (drift correction every
   interval) is never gated.
5. **Last good** (:func:`after_apply`): a successful apply makes the commit the last good
   one; a failed apply keeps the previous last good one and reports the failure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from ..resolve.rollout import batch_failed, rollout_batches
from ..resolve.types import RolloutState

# What a run ended with; the status file's and the textfile's ``result``.
Result = Literal["applied", "failed", "refused", "waiting", "halted", "paused", "fetch-failed", "invalid"]
RESULTS: tuple[Result, ...] = (
    "applied",
    "failed",
    "refused",
    "waiting",
    "halted",
    "paused",
    "fetch-failed",
    "invalid",
)


@dataclass(frozen=True)
class Action:
    """What the run does: ``apply`` the fetched commit, or stop with ``result`` and
    ``reason`` (one line, for the status file and the journal)."""

    apply: bool
    result: Result | None = None
    reason: str = ""


PROCEED = Action(apply=True)


def paused_action(paused: bool, pause_file: str) -> Action | None:
    """Stop when the node is paused (its pause file exists), else None (go on)."""
    if paused:
        return Action(False, "paused", f"paused by {pause_file}; remove it to resume")
    return None


# git-log(1) PRETTY FORMATS, %G?: "G" good (valid) signature, "B" bad, "U" good with unknown
# validity, "X" good but expired, "Y" good by an expired key, "R" good by a revoked key, "E"
# cannot be checked, "N" no signature. For an SSH signature by a key that no principal of
# gpg.ssh.allowedSignersFile has, git 2.39 reports "U" (the signature checks out, the signer
# is nobody the file knows: "No principal matched."; tests/unit/test_agent_git.py shows it
# with the real git).
_SIGNATURE_STATUS = {
    "B": "a bad signature (the commit or its signature was altered)",
    "U": "a signature by a key that is not in the allowed signers file",
    "X": "an expired signature",
    "Y": "a signature by an expired key",
    "R": "a signature by a revoked key",
    "E": "a signature that cannot be checked (not an SSH signature, or a broken one)",
    "N": "no signature",
}


def signature_action(commit: str, status: str, signer: str = "") -> Action | None:
    """Refuse ``commit`` unless git's signature ``status`` (``%G?``) is ``G``: a good
    signature by a key the allowed signers file lists. ``signer``: the key's fingerprint
    (``%GF``), named in the refusal when git knows it. Returns None to go on."""
    if status == "G":
        return None
    what = _SIGNATURE_STATUS.get(status, f"signature status {status!r}")
    by = f" ({signer})" if signer else ""
    return Action(False, "refused", f"commit {commit[:12]} has {what}{by}; the last good state is kept")


def ancestry_action(commit: str, last_good: str | None, descends: bool) -> Action | None:
    """Refuse a ``commit`` that does not descend from ``last_good`` (``descends``: ``git
    merge-base --is-ancestor last_good commit`` succeeded); None to go on. A node with no
    last good commit (its first run) takes any verified commit."""
    if last_good is None or commit == last_good or descends:
        return None
    return Action(
        False,
        "refused",
        f"commit {commit[:12]} does not descend from the last good commit {last_good[:12]} "
        "(an older signed commit, or a rewritten branch); the last good state is kept",
    )


@dataclass(frozen=True)
class PeerReport:
    """What another node's agent last reported: the ``commit`` it last tried and the
    ``result`` (``applied``, ``failed``, ...)."""

    commit: str
    result: str


def batches(pull_nodes: Sequence[str], rollout: RolloutState) -> list[list[str]]:
    """The rollout batches of the fleet's pull-mode nodes: push mode's batches
    (:func:`swarm_infra.resolve.rollout.rollout_batches`) over their names in order."""
    return rollout_batches(sorted(pull_nodes), rollout)


def gate(
    node: str,
    commit: str,
    applied: str | None,
    pull_nodes: Sequence[str],
    rollout: RolloutState,
    reports: Mapping[str, PeerReport | None],
) -> Action:
    """Whether ``node`` may apply ``commit`` now.

    ``applied``: the commit this node last applied successfully (re-applying it is never
    gated). ``pull_nodes``: the fleet's pull-mode nodes (``node`` among them); ``reports``:
    the latest report of each node of the earlier batches (None: no report could be read,
    counted as not done). Returns :data:`PROCEED`, or a stop: ``waiting`` for nodes that
    have not reported ``commit`` applied, ``halted`` when an earlier batch failed ``commit``
    beyond the Rollout's tolerance.

    Raises ValueError when ``node`` is not one of ``pull_nodes``."""
    if commit == applied:
        return PROCEED
    cut = batches(pull_nodes, rollout)
    mine = next((i for i, b in enumerate(cut) if node in b), None)
    if mine is None:
        raise ValueError(f"{node} is not a pull-mode node of the fleet")
    waiting: list[str] = []
    for index, batch in enumerate(cut[:mine]):
        failed = [
            n
            for n in batch
            if (r := reports.get(n)) is not None and r.commit == commit and r.result == "failed"
        ]
        if batch_failed(len(failed), len(batch), rollout):
            return Action(
                False,
                "halted",
                f"batch {index + 1} failed commit {commit[:12]} ({', '.join(failed)}) beyond the "
                "Rollout's tolerance: the rollout stops before this node",
            )
        for n in batch:
            r = reports.get(n)
            if n in failed:
                continue  # a failure the Rollout tolerates
            if r is None or r.commit != commit or r.result != "applied":
                waiting.append(n)
    if waiting:
        shown = ", ".join(waiting[:5]) + (f" and {len(waiting) - 5} more" if len(waiting) > 5 else "")
        return Action(
            False,
            "waiting",
            f"batch {mine + 1} waits for the earlier batches to apply {commit[:12]}: {shown}",
        )
    return PROCEED


def after_apply(commit: str, last_good: str | None, ok: bool) -> tuple[str | None, Result]:
    """(the new last good commit, the run's result) after applying ``commit``: it on
    success; the previous ``last_good`` when the apply failed."""
    return (commit, "applied") if ok else (last_good, "failed")
