"""The pull agents' reports as ``swarm status`` judges them: each pull node's node_exporter
``/metrics`` page, read over the mesh and checked by the one reader of report pages
(:func:`swarm_infra.agent.report.read_node_report`: no redirect, no proxy, bounded, parsed
and checked whole), then judged against the tracked ref (:func:`judge`).

Why node_exporter's ``/metrics`` and not ``status.json`` over SSH: it is where the agents
themselves read each other's reports for rollout gating, with the same reader, so what
``swarm status`` shows is what gates the rollout; it needs no credentials on the node (a
read-only HTTP GET on the mesh address, :func:`swarm_infra.agent.plan.status_url`), and
no SSH path to a node behind NAT. What it lacks is the status file's ``reason`` line: the
node's journal (``journalctl -u swarm-agent``) has it.
"""

from __future__ import annotations

from .report import NodeReport

# A report dated this far after the reader's clock is a clock that is wrong (or a lie).
MAX_CLOCK_AHEAD_S = 300

# What a node's row says about it (:func:`judge`): converged, or why not.
CONVERGED = "converged"


def stale_after_s(interval_s: int, randomized_delay_s: int, run_timeout_s: int) -> int:
    """Seconds after which a report is stale: the agent's timer should have started a run
    (``interval_s`` plus its ``randomized_delay_s``) and that run ended (``run_timeout_s``,
    the service's TimeoutStartSec) since."""
    return interval_s + randomized_delay_s + run_timeout_s


def judge(report: NodeReport, current: str | None, now: float, stale_s: int) -> str:
    """:data:`CONVERGED` when ``report`` says the node applied ``current`` (the tracked
    ref's commit; None: unknown) in its last run, recently enough (``stale_s``, from the
    reader's clock ``now``); else one line saying why not, the first reason found."""
    age = now - report.finished_at
    if age < -MAX_CLOCK_AHEAD_S:
        return f"the report is dated {-age:.0f} s ahead of this machine's clock"
    if age > stale_s:
        return f"no report for {age:.0f} s (a run is due every {stale_s} s at most): is the agent running?"
    if report.paused:
        return "paused on the node (its pause file)"
    if report.result != "applied":
        return f"the last run {report.result}"
    if current is None:
        return "the tracked ref's commit is unknown"
    if report.applied_commit != current:
        return f"holds {(report.applied_commit or 'nothing')[:12]}, the tracked ref is at {current[:12]}"
    return CONVERGED
