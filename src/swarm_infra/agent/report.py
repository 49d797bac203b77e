"""What the agent reports after each run: a JSON status file (for people and ``swarm``)
and a node_exporter textfile (Prometheus text exposition format, base units, no ``job``
label: Prometheus adds it when it scrapes), and the one reader of a node's report page.

Where reports are read from: each node's node_exporter serves the textfile at
``http://<mesh address>:<status_port>/metrics`` (Rollout ``spec.pull.status_port``), so
an agent of a later rollout batch reads the earlier batches' reports over the mesh, with
nothing in the middle: no controller, no write access to the Git server (a report that
cannot be read counts as "not done": the later batch waits, it never guesses success), and
``swarm status`` reads the same pages (:mod:`.status`) with the same reader.

How a page is read (:func:`read_node_report`): a node is trusted with itself only
(DESIGN.md, trust model), so its page is read up to :data:`MAX_REPORT_BYTES`, never by
following a redirect (a node that answers "302, see that healthy peer's page" would lend a
later batch someone else's success) nor through a proxy the environment names
(``http_proxy``: the page must come from the node's own mesh address, not from whatever
answers for a proxy), parsed by Prometheus' own text parser (``prometheus_client.parser``,
text format 0.0.4) and every metric the agent writes (:func:`textfile`) is checked for
exactly one sample (the task counts: at most one), its type, its labels and its value's
range (the type is the textfile's: node_exporter's textfile collector re-exposes a gauge as
a gauge, with the file's HELP, and its labels as written; prometheus/node_exporter ``collector/textfile.go``
``convertMetricFamily``, read at commit 020ffc1; the project pins no node_exporter). A page
that fails any check is a :class:`ReportInvalid` whose message says which and why, never a
partial report.

Textfile metrics (all gauges)::

    swarm_agent_report_info{commit, result, applied_commit}   1
    swarm_agent_last_run_timestamp_seconds                     Unix time the run ended
    swarm_agent_last_run_duration_seconds                      seconds the run took
    swarm_agent_changed_tasks / swarm_agent_failed_tasks       counts of the last apply (no
                                                               sample when nothing was applied)
    swarm_agent_reboot_required                                1: a reboot is pending
    swarm_agent_paused                                         1: the pause file exists

``commit`` is the commit the run worked on (empty when the fetch failed), ``result`` one
of :data:`swarm_infra.agent.decide.RESULTS`, ``applied_commit`` the last commit applied
successfully (the node's state, kept when a run fails or refuses).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import re
import socket
import threading
import urllib.parse
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..errors import ReportInvalid as ReportInvalid
from .decide import RESULTS

_HEX = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
READ_TIMEOUT_S = 5.0
MAX_REPORT_BYTES = 1 << 20  # node_exporter's whole /metrics page, read for seven metrics


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


def textfile(status: Status) -> str:
    """The textfile of ``status`` (module documentation), ending with a newline: the text
    format 0.0.4 as prometheus_client writes it (``generate_latest``). A task count that is
    unknown (nothing applied) has no sample, never ``-1``."""
    # Imported here: every `swarm` command loads this module (prometheus_client takes ~0.1 s).
    from prometheus_client import CollectorRegistry, Gauge, Info, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    Info(
        "swarm_agent_report",
        "The pull agent's last run: the commit, its result, the last good commit.",
        registry=registry,
    ).info({"commit": status.commit, "result": status.result, "applied_commit": status.applied_commit or ""})
    gauges: list[tuple[str, str, float | None]] = [
        (
            "swarm_agent_last_run_timestamp_seconds",
            "When the pull agent's last run ended, in Unix time.",
            round(status.finished_at, 3),
        ),
        (
            "swarm_agent_last_run_duration_seconds",
            "How long the pull agent's last run took.",
            round(status.duration_s, 3),
        ),
        (
            "swarm_agent_changed_tasks",
            "Tasks the last apply changed (no sample: nothing applied).",
            status.changed,
        ),
        (
            "swarm_agent_failed_tasks",
            "Tasks the last apply failed (no sample: nothing applied).",
            status.failed,
        ),
        (
            "swarm_agent_reboot_required",
            "1 when the node has a pending reboot (the layout's reboot_required marker).",
            int(status.reboot_required),
        ),
        ("swarm_agent_paused", "1 when the pull agent is paused on this node.", int(status.paused)),
    ]
    for name, text, value in gauges:
        if value is not None:
            Gauge(name, text, registry=registry).set(value)
    return generate_latest(registry).decode("utf-8")


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
    # Imported here: every `swarm` command loads this module, and only `swarm status` and
    # a pull agent of a later rollout batch parse pages.
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
    # No sample: nothing applied. -1 said the same in the pages of agents before #37.
    if not samples[name]:
        return None
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
    Prometheus text, or any metric of :func:`textfile` is missing,
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


class _Refused(Exception):
    """The node answered with something other than its page (an HTTP error, a redirect)."""


def _fetch(url: str, timeout_s: float) -> bytes:
    """At most ``MAX_REPORT_BYTES + 1`` bytes of the page at ``url`` (``http://`` only),
    the whole exchange (connect, request, headers, body) within ``timeout_s`` seconds, as
    Prometheus' ``scrape_timeout`` bounds a scrape: a socket timeout alone bounds each read,
    and a node sending a byte at a time within it held a reader for as long as it liked. A
    timer shuts the socket down at the deadline (``socket.shutdown`` wakes a blocked
    ``recv``, which then reads end of file). Raises :class:`_Refused` for a status other
    than 200 (a redirect is never followed: a node's answer must not send the reader to a
    healthy peer's page or a service on the reader's network), ``OSError`` or
    ``http.client.HTTPException`` when the exchange fails or runs out of time, and
    ``ValueError`` for a URL that is not ``http://HOST[:PORT]/PATH``. No proxy is used,
    whatever ``http_proxy`` says: the page is the node's own only if it comes from the
    node's address."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError("not an http:// URL")
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout_s)
    expired = threading.Event()

    sock: socket.socket | None = None

    def expire() -> None:
        expired.set()
        held = sock or conn.sock
        if held is not None:
            with contextlib.suppress(OSError):  # already closed: nothing left to wake
                held.shutdown(socket.SHUT_RDWR)

    timer = threading.Timer(timeout_s, expire)
    timer.daemon = True
    timer.start()
    try:
        conn.connect()
        sock = conn.sock  # kept: the connection drops it once a response says it will close
        conn.request("GET", target, headers={"Accept": "text/plain; version=0.0.4"})
        response = conn.getresponse()
        if response.status != 200:
            where = response.getheader("Location")
            if 300 <= response.status < 400 and where:
                raise _Refused(f"HTTP {response.status} redirect to {where[:100]} refused")
            raise _Refused(f"HTTP {response.status} {response.reason}")
        data = response.read(MAX_REPORT_BYTES + 1)
        if expired.is_set():
            raise TimeoutError(f"no whole page within {timeout_s:g} s")
        return data
    except (OSError, http.client.HTTPException):
        if expired.is_set():  # the shutdown at the deadline is what broke the read
            raise TimeoutError(f"no whole page within {timeout_s:g} s") from None
        raise
    finally:
        timer.cancel()
        conn.close()


def read_node_report(url: str, timeout_s: float = READ_TIMEOUT_S) -> NodeReport:
    """The report served at ``url`` (``http://ADDRESS:PORT/metrics``), read from that
    address only (no redirect followed, no proxy used), the whole page within ``timeout_s``
    seconds (:func:`_fetch`). Raises :class:`ReportInvalid`, its message starting with
    ``url``, saying why when the page cannot be read (unreachable, too slow, an HTTP error
    or redirect, over :data:`MAX_REPORT_BYTES`, not UTF-8) or is no report
    (:func:`parse_node_report`)."""
    # Text format 0.0.4 (node_exporter's default; no OpenMetrics, no protobuf, no gzip).
    try:
        data = _fetch(url, timeout_s)
    except _Refused as exc:
        raise ReportInvalid(f"{url}: {exc}") from None
    except (OSError, ValueError, http.client.HTTPException) as exc:
        raise ReportInvalid(f"{url}: cannot be read ({getattr(exc, 'reason', exc)})") from None
    if len(data) > MAX_REPORT_BYTES:
        raise ReportInvalid(f"{url}: more than {MAX_REPORT_BYTES} bytes")
    try:
        page = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ReportInvalid(f"{url}: not UTF-8 text") from None
    try:
        return parse_node_report(page)
    except ReportInvalid as exc:
        raise ReportInvalid(f"{url}: {exc}") from None
