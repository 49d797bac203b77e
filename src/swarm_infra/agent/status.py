"""The pull agents' reports as ``swarm status`` reads them: each pull node's node_exporter
``/metrics`` page, over the mesh, parsed and checked, then judged against the tracked ref.

Why node_exporter's ``/metrics`` and not ``status.json`` over SSH: it is where the agents
themselves read each other's reports for rollout gating (:mod:`.report`), so what
``swarm status`` shows is what gates the rollout; it needs no credentials on the node (a
read-only HTTP GET on the mesh address, :func:`swarm_infra.agent.plan.status_url`), and
no SSH path to a node behind NAT. What it lacks is the status file's ``reason`` line: the
node's journal (``journalctl -u swarm-agent``) has it.

A node is trusted with itself only (DESIGN.md, trust model): its page is read up to
:data:`swarm_infra.agent.report.MAX_REPORT_BYTES`, never by following a redirect or a
proxy, parsed by Prometheus' own text parser (``prometheus_client.parser``, text format
0.0.4) and every metric the agent writes (:func:`swarm_infra.agent.report.textfile`) is
checked for exactly one sample, its type, its labels and its value's range (the type is
the textfile's: node_exporter's textfile collector re-exposes a gauge as a gauge, with the
file's HELP, and its labels as written; prometheus/node_exporter ``collector/textfile.go``
``convertMetricFamily``, read at commit 020ffc1; the project pins no node_exporter). A page that
fails any check is a :class:`ReportInvalid` whose message says which and why, never a
partial report.
"""

from __future__ import annotations

import math
import re
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .decide import RESULTS
from .report import MAX_REPORT_BYTES, READ_TIMEOUT_S

_HEX = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
# The agent's report metrics (report.textfile) and the labels each sample carries.
INFO = "swarm_agent_report_info"
_LABELS = {
    INFO: {"commit", "result", "applied_commit"},
    "swarm_agent_last_run_timestamp_seconds": set(),
    "swarm_agent_last_run_duration_seconds": set(),
    "swarm_agent_changed_tasks": set(),
    "swarm_agent_failed_tasks": set(),
    "swarm_agent_reboot_required": set(),
    "swarm_agent_paused": set(),
}
MAX_TASKS = 10**6  # more tasks than any playbook of the project runs: not a count
# A report dated this far after the reader's clock is a clock that is wrong (or a lie).
MAX_CLOCK_AHEAD_S = 300


class ReportInvalid(ValueError):
    """A node's page is no agent report; the message says what is wrong, in one line."""


@dataclass(frozen=True)
class NodeReport:
    """One node's last agent run, checked. ``commit``: the commit the run worked on ("":
    none fetched); ``result``: one of :data:`swarm_infra.agent.decide.RESULTS`;
    ``applied_commit``: the last commit applied successfully (None: none yet);
    ``finished_at``: Unix time (s) the run ended, by the node's clock; ``duration_s``;
    ``changed``/``failed``: tasks of the apply (None: nothing applied);
    ``reboot_required``, ``paused``."""

    commit: str
    result: str
    applied_commit: str | None
    finished_at: float
    duration_s: float
    changed: int | None
    failed: int | None
    reboot_required: bool
    paused: bool


def _samples(page: str) -> dict[str, list[Any]]:
    """Every sample of the agent's metrics in ``page``, by metric name."""
    # Imported here: every `swarm` command loads this module (the pull agent's `swarm agent
    # run` on a node too), and only `swarm status` parses pages.
    from prometheus_client.parser import text_string_to_metric_families

    found: dict[str, list[Any]] = {name: [] for name in _LABELS}
    try:
        for family in text_string_to_metric_families(page):
            # A counter's samples are named NAME_total: match the family's name too.
            if family.name in found and family.type != "gauge":
                raise ReportInvalid(f"{family.name}: of type {family.type}, not gauge")
            for sample in family.samples:
                if sample.name in found:
                    if family.type != "gauge":
                        raise ReportInvalid(f"{sample.name}: of type {family.type}, not gauge")
                    found[sample.name].append(sample)
    except ReportInvalid:
        raise
    except Exception as exc:  # a third-party parser fed untrusted text: any error is the page's
        raise ReportInvalid(f"not Prometheus text format: {str(exc)[:200]}") from None
    return found


def _value(samples: Mapping[str, list[Any]], name: str) -> float:
    got = samples[name]
    if len(got) != 1:
        raise ReportInvalid(f"{name}: {len(got)} samples, expected exactly one")
    sample = got[0]
    if set(sample.labels) != _LABELS[name]:
        raise ReportInvalid(f"{name}: labels {sorted(sample.labels)}, expected {sorted(_LABELS[name])}")
    value = float(sample.value)
    if not math.isfinite(value):
        raise ReportInvalid(f"{name}: {value} is not a finite number")
    return value


def _count(samples: Mapping[str, list[Any]], name: str) -> int | None:
    value = _value(samples, name)
    if not value.is_integer() or not -1 <= value <= MAX_TASKS:
        raise ReportInvalid(f"{name}: {value} is not a task count (-1 to {MAX_TASKS})")
    return None if value == -1 else int(value)


def _flag(samples: Mapping[str, list[Any]], name: str) -> bool:
    value = _value(samples, name)
    if value not in (0, 1):
        raise ReportInvalid(f"{name}: {value}, expected 0 or 1")
    return value == 1


def _commit(labels: Mapping[str, str], name: str) -> str:
    value = labels[name]
    if value and not _HEX.fullmatch(value):
        raise ReportInvalid(f"{INFO}: {name} {value[:80]!r} is not a commit id (40 or 64 hex digits)")
    return value


def parse_node_report(page: str) -> NodeReport:
    """The agent's report in a node_exporter ``/metrics`` page (node_exporter's own
    metrics around it are ignored). Raises :class:`ReportInvalid` when the page is not
    Prometheus text, or any metric of :func:`swarm_infra.agent.report.textfile` is missing,
    repeated, of another type, labelled otherwise or out of its range."""
    samples = _samples(page)
    info = _value(samples, INFO)
    if info != 1:
        raise ReportInvalid(f"{INFO}: value {info}, expected 1")
    labels = samples[INFO][0].labels
    if labels["result"] not in RESULTS:
        raise ReportInvalid(f"{INFO}: result {labels['result'][:40]!r} is not one of {', '.join(RESULTS)}")
    finished = _value(samples, "swarm_agent_last_run_timestamp_seconds")
    duration = _value(samples, "swarm_agent_last_run_duration_seconds")
    if finished <= 0 or duration < 0:
        raise ReportInvalid("the run's end time must be positive and its duration not negative")
    return NodeReport(
        commit=_commit(labels, "commit"),
        result=labels["result"],
        applied_commit=_commit(labels, "applied_commit") or None,
        finished_at=finished,
        duration_s=duration,
        changed=_count(samples, "swarm_agent_changed_tasks"),
        failed=_count(samples, "swarm_agent_failed_tasks"),
        reboot_required=_flag(samples, "swarm_agent_reboot_required"),
        paused=_flag(samples, "swarm_agent_paused"),
    )


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # A node's answer must not send the reader anywhere else (another node, a service on
    # the controller's network): a redirect is an error.
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        raise urllib.error.HTTPError(req.full_url, code, f"redirect to {newurl[:100]} refused", headers, fp)


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect)


def read_node_report(url: str, timeout_s: float = READ_TIMEOUT_S) -> NodeReport:
    """The report served at ``url`` (``http://ADDRESS:PORT/metrics``). Raises
    :class:`ReportInvalid` saying why when it cannot be read (unreachable, an HTTP error or
    redirect, over :data:`swarm_infra.agent.report.MAX_REPORT_BYTES`, not UTF-8) or is
    no report (:func:`parse_node_report`)."""
    # Text format 0.0.4 (node_exporter's default; no OpenMetrics, no protobuf, no gzip).
    request = urllib.request.Request(url, headers={"Accept": "text/plain; version=0.0.4"})
    try:
        with _OPENER.open(request, timeout=timeout_s) as response:
            data = response.read(MAX_REPORT_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise ReportInvalid(f"{url}: HTTP {exc.code} {exc.reason}") from None
    except (OSError, ValueError) as exc:
        raise ReportInvalid(f"{url}: cannot be read ({getattr(exc, 'reason', exc)})") from None
    if len(data) > MAX_REPORT_BYTES:
        raise ReportInvalid(f"{url}: more than {MAX_REPORT_BYTES} bytes")
    try:
        page = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ReportInvalid(f"{url}: not UTF-8 text") from None
    return parse_node_report(page)


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
