"""What the agent reports after each run: a JSON status file (for people and ``swarm``)
and a node_exporter textfile (Prometheus text exposition format, base units, no ``job``
label: Prometheus adds it when it scrapes), and how one agent reads another's report.

Where reports are read from: each node's node_exporter serves the textfile at
``http://<mesh address>:<status_port>/metrics`` (Rollout ``spec.pull.status_port``), so
an agent of a later rollout batch reads the earlier batches' reports over the mesh, with
nothing in the middle: no controller, no write access to the Git server. A report that
cannot be read counts as "not done": the later batch waits (it never guesses success).

Textfile metrics (all gauges)::

    swarm_agent_report_info{commit, result, applied_commit}   1
    swarm_agent_last_run_timestamp_seconds                     Unix time the run ended
    swarm_agent_last_run_duration_seconds                      seconds the run took
    swarm_agent_changed_tasks / swarm_agent_failed_tasks       counts of the last apply
    swarm_agent_reboot_required                                1: a reboot is pending
    swarm_agent_paused                                         1: the pause file exists

``commit`` is the commit the run worked on (empty when the fetch failed), ``result`` one
of :data:`swarm_infra.agent.decide.RESULTS`, ``applied_commit`` the last commit applied
successfully (the node's state, kept when a run fails or refuses).
"""

from __future__ import annotations

import json
import re
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

from .decide import RESULTS, PeerReport

_HEX = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
READ_TIMEOUT_S = 5.0
MAX_REPORT_BYTES = 1 << 20  # node_exporter's whole /metrics page, read for one line


@dataclass(frozen=True)
class Status:
    """One run's report. ``commit``: the commit worked on ("" when none was fetched);
    ``applied_commit``: the last good commit (None: none yet); ``changed``/``failed``:
    tasks of the apply (None when nothing was applied); ``duration_s``; ``finished_at``:
    Unix time; ``reboot_required``; ``paused``; ``reason``: one line."""

    node: str
    ref: str
    commit: str
    result: str
    reason: str
    applied_commit: str | None
    changed: int | None
    failed: int | None
    duration_s: float
    finished_at: float
    reboot_required: bool
    paused: bool

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"


def load_status(path: Path) -> Status | None:
    """The status file at ``path``, or None when there is none or it is not one (a broken
    file must not stop the agent: it only loses the last good commit, and the ancestry
    rule then accepts any verified commit, as on a first run)."""
    try:
        data = json.loads(path.read_text())
        status = Status(**data)
    except (OSError, ValueError, TypeError):
        return None
    if status.applied_commit is not None and not _HEX.fullmatch(status.applied_commit):
        return None
    return status


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def textfile(status: Status) -> str:
    """The textfile of ``status`` (module documentation), ending with a newline."""
    info = (
        f'swarm_agent_report_info{{commit="{_label(status.commit)}",result="{_label(status.result)}",'
        f'applied_commit="{_label(status.applied_commit or "")}"}} 1'
    )
    rows = [
        (
            "swarm_agent_report_info",
            "The pull agent's last run: the commit, its result, the last good commit.",
            info,
        ),
        (
            "swarm_agent_last_run_timestamp_seconds",
            "When the pull agent's last run ended, in Unix time.",
            f"swarm_agent_last_run_timestamp_seconds {status.finished_at:.3f}",
        ),
        (
            "swarm_agent_last_run_duration_seconds",
            "How long the pull agent's last run took.",
            f"swarm_agent_last_run_duration_seconds {status.duration_s:.3f}",
        ),
        (
            "swarm_agent_changed_tasks",
            "Tasks the last apply changed (-1: nothing applied).",
            f"swarm_agent_changed_tasks {-1 if status.changed is None else status.changed}",
        ),
        (
            "swarm_agent_failed_tasks",
            "Tasks the last apply failed (-1: nothing applied).",
            f"swarm_agent_failed_tasks {-1 if status.failed is None else status.failed}",
        ),
        (
            "swarm_agent_reboot_required",
            "1 when the node has a pending reboot (the layout's reboot_required marker).",
            f"swarm_agent_reboot_required {int(status.reboot_required)}",
        ),
        (
            "swarm_agent_paused",
            "1 when the pull agent is paused on this node.",
            f"swarm_agent_paused {int(status.paused)}",
        ),
    ]
    return "".join(f"# HELP {name} {text}\n# TYPE {name} gauge\n{sample}\n" for name, text, sample in rows)


_INFO = re.compile(
    r'swarm_agent_report_info\{commit="(?P<commit>[0-9a-f]*)",result="(?P<result>[a-z-]+)",'
    r'applied_commit="(?P<applied>[0-9a-f]*)"\} 1(?:\.0)?'
)


def parse_report(metrics: str) -> PeerReport | None:
    """The agent's report in a ``/metrics`` page (node_exporter adds its own metrics and
    may order labels as written), or None when the page holds none, or more than one, or
    one of another shape. What a peer serves is its own say only: a report of something
    other than a commit id and a known result is no report."""
    found = [m for line in metrics.splitlines() if (m := _INFO.fullmatch(line.strip()))]
    if len(found) != 1:
        return None
    m = found[0]
    if m["result"] not in RESULTS or (m["commit"] and not _HEX.fullmatch(m["commit"])):
        return None
    return PeerReport(commit=m["commit"], result=m["result"])


def read_report(url: str, timeout_s: float = READ_TIMEOUT_S) -> PeerReport | None:
    """The report a peer serves at ``url`` (``http://ADDRESS:PORT/metrics``), or None when
    it cannot be read (unreachable, an HTTP error, too large, not text)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            data = response.read(MAX_REPORT_BYTES + 1)
    except (OSError, ValueError):
        return None
    if len(data) > MAX_REPORT_BYTES:
        return None
    try:
        return parse_report(data.decode("utf-8"))
    except UnicodeDecodeError:
        return None
