"""One agent run (``swarm agent run``, the timer's service): fetch, verify, resolve,
gate, apply, report. The decisions are :mod:`.decide`'s; this module gathers their inputs
(git, the fleet resolved from the verified commit, the peers' reports) and acts.

Whatever happens, the run ends with a report (:mod:`.report`): the status file and the
textfile say what was done, to which commit, and which commit the node holds
(``applied_commit``: the last good one, kept when a run fails or refuses).
"""

from __future__ import annotations

import fcntl
import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..nodeside.atomic import write_atomic
from . import decide, git
from .config import AgentConfig, Paths
from .engine import ApplyResult, apply_local, library_env
from .report import ReportInvalid, Status, load_status, read_node_report, textfile

APPLY_TIMEOUT_S = 3300  # under the service's TimeoutStartSec (resolve.files.AGENT_RUN_TIMEOUT_S)
PLAN_TIMEOUT_S = 120  # resolving one fleet (10,000 nodes resolve in seconds)

Apply = Callable[[Path, str, str, int], ApplyResult]
ReadReport = Callable[[str], "decide.PeerReport | None"]


@dataclass
class Outcome:
    """What the run found, filled step by step and turned into a :class:`Status`."""

    commit: str = ""
    result: str = "invalid"
    reason: str = ""
    applied: str | None = None
    changed: int | None = None
    failed: int | None = None


def node_plan(tree: Path, fleet: str, node: str, port: int) -> dict[str, Any]:
    """:mod:`.plan` of the verified commit, run by the commit's own library (its ``src``
    first on PYTHONPATH, as the engine runs): ``{"error", "declared", "pull_nodes",
    "rollout", "status_urls"}``. A plan that cannot be made is an ``error``."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "swarm_infra.agent.plan", str(tree), fleet, node, str(port)],
            cwd=tree,
            env=library_env(tree),
            capture_output=True,
            text=True,
            timeout=PLAN_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": f"resolving the fleet failed: {exc}"}
    try:
        plan = json.loads(done.stdout)
    except json.JSONDecodeError:
        plan = None
    shape: dict[str, tuple[type, ...]] = {
        "error": (str, type(None)),
        "declared": (bool,),
        "pull_nodes": (list,),
        "rollout": (dict, type(None)),
    }
    if not isinstance(plan, dict) or any(not isinstance(plan.get(k), t) for k, t in shape.items()):
        tail = (done.stderr.strip().splitlines() or ["no plan"])[-1]
        return {"error": f"resolving the fleet failed (exit {done.returncode}): {tail[:300]}"}
    return plan


def read_peer(url: str) -> decide.PeerReport | None:
    """What the peer serving ``url`` last reported, as the gate needs it (the commit and
    the result), read by the one reader of report pages (:func:`.report.read_node_report`:
    from that address only, no redirect followed, no proxy used, bounded, parsed and checked
    whole); None when it cannot be read or is no report, which :func:`.decide.gate` counts
    as not done. Why it was not used goes to stderr (the service's journal)."""
    try:
        report = read_node_report(url)
    except ReportInvalid as exc:
        print(f"swarm agent: a peer's report is counted as not done: {exc}", file=sys.stderr)
        return None
    return decide.PeerReport(commit=report.commit, result=report.result)


def run_once(
    config: AgentConfig,
    paths: Paths,
    *,
    apply: Apply = apply_local,
    read: ReadReport = read_peer,
    clock: Callable[[], float] = time.time,
) -> Status:
    """One run for ``config`` on the node whose files are ``paths``; returns its report
    (also written to the status file and the textfile). Never raises for what the fleet,
    the remote or a peer does: each ends as a result (:data:`.decide.RESULTS`)."""
    started = time.monotonic()
    paths.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(paths.state_dir / "lock", "w") as lock:
        # One run at a time: the timer's and one started by hand.
        fcntl.flock(lock, fcntl.LOCK_EX)
        previous = load_status(paths.status)
        out = Outcome(applied=previous.applied_commit if previous else None)
        _steps(config, paths, out, apply, read)
        status = Status(
            node=config.node,
            ref=config.ref,
            commit=out.commit,
            result=out.result,
            reason=out.reason,
            applied_commit=out.applied,
            changed=out.changed,
            failed=out.failed,
            duration_s=round(time.monotonic() - started, 3),
            finished_at=round(clock(), 3),
            reboot_required=paths.reboot_required.exists(),
            paused=paths.pause.exists(),
        )
        write_atomic(paths.status, status.to_json(), 0o644)
        write_atomic(paths.textfile, textfile(status), 0o644)
        return status


def _stop(out: Outcome, action: decide.Action) -> None:
    assert action.result is not None
    out.result, out.reason = action.result, action.reason


def _steps(config: AgentConfig, paths: Paths, out: Outcome, apply: Apply, read: ReadReport) -> None:
    stop = decide.paused_action(paths.pause.exists(), str(paths.pause))
    if stop:
        return _stop(out, stop)
    try:
        out.commit = git.fetch(
            paths.clone,
            config.remote,
            config.ref,
            paths.deploy_key if paths.deploy_key.is_file() else None,
            paths.known_hosts if paths.known_hosts.is_file() else None,
        )
    except (git.GitError, ValueError, OSError) as exc:
        out.result, out.reason = "fetch-failed", f"{config.ref} of {config.remote}: {exc}"
        return None
    if not paths.allowed_signers.is_file():
        out.result = "refused"
        out.reason = f"no allowed signers file at {paths.allowed_signers}: no commit can be verified"
        return None
    try:
        revoked = paths.revoked_signers if paths.revoked_signers.is_file() else None
        sig = git.signature(paths.clone, out.commit, paths.allowed_signers, revoked)
    except (git.GitError, OSError) as exc:
        out.result, out.reason = (
            "refused",
            f"commit {out.commit[:12]}: its signature could not be read ({exc})",
        )
        return None
    stop = decide.signature_action(out.commit, sig.effective_status, sig.fingerprint)
    if stop:
        return _stop(out, stop)
    last = out.applied
    descends = last is None or last == out.commit or git.descends(paths.clone, last, out.commit)
    stop = decide.ancestry_action(out.commit, last, descends)
    if stop:
        return _stop(out, stop)
    try:
        tree = git.checkout(paths.clone, paths.trees, out.commit)
    except (git.GitError, OSError) as exc:
        out.result, out.reason = "invalid", f"commit {out.commit[:12]}: no work tree ({exc}); nothing applied"
        return None
    plan = node_plan(tree, config.fleet, config.node, config.status_port)
    if plan["error"]:
        out.result, out.reason = "invalid", f"commit {out.commit[:12]}: {plan['error']}; nothing applied"
        return None
    if not plan["declared"]:
        out.result = "waiting"
        out.reason = (
            f"commit {out.commit[:12]} does not declare {config.node} as a pull node of fleet "
            f"{config.fleet}: propose the change swarm node bootstrap printed"
        )
        return None
    reports: dict[str, decide.PeerReport | None] = {}
    if out.commit != out.applied:
        reports = {peer: read(url) for peer, url in plan["status_urls"].items()}
    action = decide.gate(config.node, out.commit, out.applied, plan["pull_nodes"], plan["rollout"], reports)
    if not action.apply:
        return _stop(out, action)
    result = apply(tree, config.fleet, config.node, APPLY_TIMEOUT_S)
    out.applied, result_name = decide.after_apply(out.commit, out.applied, result.ok)
    out.result, out.changed, out.failed = result_name, result.changed, result.failed
    out.reason = (
        f"applied {out.commit[:12]}"
        if result.ok
        else f"applying {out.commit[:12]} failed ({result.message}); the last good commit stays "
        f"{(out.applied or 'none')[:12]}"
    )
    git.prune(paths.clone, paths.trees, {c for c in (out.commit, out.applied) if c})
    return None
