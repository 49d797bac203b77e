"""``swarm status``: what every pull-mode node's agent last reported, read over the mesh
(:mod:`swarm_infra.agent.status`: node_exporter's ``/metrics`` on each node's mesh address,
why that and not SSH; :mod:`swarm_infra.agent.report`: how a node's page is read and
checked), against the tracked ref's commit."""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import Any

from ..agent import git
from ..agent.plan import status_url
from ..agent.report import NodeReport, ReportInvalid, read_node_report
from ..agent.status import CONVERGED, judge, stale_after_s
from ..resolve import desired_state
from ..resolve.files import AGENT_RUN_TIMEOUT_S
from ..resolve.types import NodeState
from ..tables import table_lines
from .common import EXIT_FAILURE, EXIT_OK, FLEET_HELP, at_least, emit, fleet_args, load

_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def _row(
    name: str, node: NodeState, got: NodeReport | str, current: str | None, now: float
) -> dict[str, Any]:
    """One node's row: its report's fields (None where unreadable), ``url``, ``state``
    (:data:`CONVERGED` or why not) and ``at_current`` (None: unknown)."""
    pull = node["pull"]
    assert pull is not None  # pull nodes only
    row: dict[str, Any] = {"node": name, "url": status_url(node, pull["status_port"])}
    if isinstance(got, str):
        return {**row, "report": None, "at_current": None, "state": f"unreadable: {got}"}
    stale = stale_after_s(pull["interval_s"], pull["randomized_delay_s"], AGENT_RUN_TIMEOUT_S)
    return {
        **row,
        "report": {**asdict(got), "age_s": round(now - got.finished_at, 3)},
        "at_current": None if current is None else got.applied_commit == current,
        "state": judge(got, current, now, stale),
    }


def _shown(text: str) -> str:
    """``text`` as one line of printable characters: a node's words (an HTTP reason, a
    label) and a remote's (git's stderr) reach a terminal; no escape sequence or line
    break of theirs does."""
    return "".join(c if c.isprintable() else "?" for c in text)


def _age(seconds: float) -> str:
    if seconds < 0:
        return f"in {-seconds:.0f}s"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def _table(rows: list[dict[str, Any]], ref: str, current: str | None, why: str) -> str:
    head = f"tracked ref {ref}: " + (current[:12] if current else f"unknown ({_shown(why)})")
    table: list[list[str]] = [
        ["NODE", "APPLIED", "RESULT", "CHANGED", "FAILED", "DURATION", "REBOOT", "AGE", "CURRENT", "STATE"]
    ]

    def n(value: int | None) -> str:
        return "-" if value is None else str(value)

    for r in rows:
        rep = r["report"]
        at = {True: "yes", False: "no", None: "?"}[r["at_current"]]
        if rep is None:
            table.append([r["node"], "?", "?", "?", "?", "?", "?", "?", at, _shown(r["state"])])
            continue
        table.append([
            r["node"], (rep["applied_commit"] or "-")[:12], rep["result"], n(rep["changed"]),
            n(rep["failed"]), f"{rep['duration_s']:.0f}s", "yes" if rep["reboot_required"] else "no",
            _age(rep["age_s"]), at, _shown(r["state"]),
        ])  # fmt: skip
    lines = [head, *table_lines(table, right=(3, 4, 5, 7))]
    done = sum(r["state"] == CONVERGED for r in rows)
    lines.append(f"{done} of {len(rows)} pull node(s) converged at the tracked ref's commit")
    return "\n".join(lines)


def cmd_status(
    args: argparse.Namespace,
    read: Callable[[str], NodeReport] = read_node_report,
    clock: Callable[[], float] = time.time,
) -> int:
    state = desired_state(load(args, "status", "nothing was read"))
    nodes = {name: n for name, n in sorted(state["nodes"].items()) if n["pull"]}
    if not nodes:
        emit("no pull-mode node in the fleet (Node spec.convergence: pull): nothing to read")
        return EXIT_OK
    pulls = {(n["pull"]["remote"], n["pull"]["ref"]) for n in nodes.values() if n["pull"]}
    remote, ref = sorted(pulls)[0]  # one Rollout per fleet: one remote and ref
    current, why = args.commit, ""
    if current is None:
        try:
            current = git.remote_head(remote, ref)
        except (git.GitError, ValueError) as exc:
            why = str(exc)

    def fetch(name: str) -> NodeReport | str:
        node = nodes[name]
        assert node["pull"] is not None
        try:
            return read(status_url(node, node["pull"]["status_port"]))
        except ReportInvalid as exc:
            return str(exc)

    with ThreadPoolExecutor(max_workers=min(args.forks, len(nodes))) as pool:
        got = dict(zip(nodes, pool.map(fetch, nodes), strict=True))
    now = clock()
    rows = [_row(name, nodes[name], got[name], current, now) for name in nodes]
    if args.format == "json":
        out = {"ref": ref, "remote": remote, "current": current, "current_error": why or None, "nodes": rows}
        emit(json.dumps(out, indent=2, sort_keys=True))
    else:
        emit(_table(rows, ref, current, why))
    return EXIT_OK if all(r["state"] == CONVERGED for r in rows) else EXIT_FAILURE


def _commit(text: str) -> str:
    """An argparse ``type``: a full commit id (SHA-1 or SHA-256, lower-case hex)."""
    if not _COMMIT.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a full commit id")
    return text


_commit.__name__ = "commit"


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "status",
        help="each pull node's last agent report, read over the mesh, against the tracked ref",
        description="Read every pull-mode node's agent report from its node_exporter "
        "(http://MESH-ADDRESS:STATUS_PORT/metrics, Rollout spec.pull.status_port), at most "
        "--forks at once, and show per node: the commit applied, the last run's result, "
        "changed and failed tasks, duration, pending reboot, the report's age and whether "
        "the commit applied is the tracked ref's current one (git ls-remote of the Rollout's "
        "remote, or --commit). A page that is not the agent's report is said so, per node. "
        "Run it from a mesh member (the operator's controller). " + FLEET_HELP,
        epilog="Exit codes: 0 every pull node applied the tracked ref's commit in its last run "
        "(or the fleet has no pull node), 1 a node did not, its report is unreadable or stale, "
        "or the tracked commit is unknown, 2 invalid fleet or arguments.",
    )
    fleet_args(p, "text", "json")
    p.add_argument(
        "--commit",
        type=_commit,
        help="the full commit id to judge against (default: the remote's ref, git ls-remote)",
    )
    p.add_argument(
        "--forks",
        type=at_least(1),
        default=32,
        metavar="N",
        help="most nodes read at once (default: %(default)s)",
    )
    p.set_defaults(func=cmd_status)
