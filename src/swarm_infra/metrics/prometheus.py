"""Measurements in the Prometheus text exposition format, for node_exporter's textfile collector.

Names follow Prometheus's naming practices (https://prometheus.io/docs/practices/naming/):
one application prefix (``swarm_``), base units in the name's suffix (``_seconds``,
``_bytes``, ``_bytes_per_second``, ``_hertz``, ``_watts``, ``_celsius``, ``_ratio`` for a
0-1 ratio instead of a percentage), the value converted to that unit, ``_total`` only on
counters (every series here is a gauge: the figure of the last run). ``promtool check
metrics`` (the Prometheus release's linter, ``client_golang``'s promlint) passes on what
:func:`render_textfile` writes; tests/unit/test_metrics_prometheus.py runs it.

Label names never collide with the target labels a scrape attaches: ``job`` and
``instance`` are renamed ``exported_job`` / ``exported_instance``, the names Prometheus
itself gives a scraped label that conflicts with a target label (scrape_config
``honor_labels: false``, the default; Prometheus configuration documentation).

Each node gets one file per part of the run (``swarm_metrics_<part>.prom`` in the collector's
directory; the collector reads every ``*.prom`` there), so a run with ``--only`` replaces its
own parts' files and leaves the others' series in place. Several files may hold one metric
(``swarm_metrics_last_run_*``, with a different ``part``): node_exporter's
``collector/textfile.go`` makes each file's samples into metrics described by that file's
HELP, and client_golang's registry refuses one name with two HELP texts, or a series given
twice, so the HELP of a metric is the same in every file and no series is in two.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from fractions import Fraction

from swarm_infra.metrics.fleetrun import Outcome
from swarm_infra.metrics.measurement import Measurement, make_labels
from swarm_infra.resolve.layout import TEXTFILE_DIR  # node_exporter's textfile directory, decided once

LEGACY_TEXTFILE = f"{TEXTFILE_DIR}/swarm_metrics.prom"
"""The single file earlier versions wrote; removed when a part's file is written (its series
would otherwise be exposed twice, which the collector refuses)."""


def textfile_path(part: str) -> str:
    """The file of one part of a run (``network``, ``storage``...) on a node."""
    return f"{TEXTFILE_DIR}/swarm_metrics_{part}.prom"


_UNITS: dict[str, tuple[str, Fraction]] = {
    "bits/s": ("bytes_per_second", Fraction(1, 8)),
    "bytes/s": ("bytes_per_second", Fraction(1)),
    "KiB/s": ("bytes_per_second", Fraction(1024)),
    "MiB/s": ("bytes_per_second", Fraction(1024**2)),
    "bytes": ("bytes", Fraction(1)),
    "MiB": ("bytes", Fraction(1024**2)),
    "GiB": ("bytes", Fraction(1024**3)),
    "ns": ("seconds", Fraction(1, 10**9)),
    "us": ("seconds", Fraction(1, 10**6)),
    "ms": ("seconds", Fraction(1, 1000)),
    "s": ("seconds", Fraction(1)),
    "%": ("ratio", Fraction(1, 100)),
    "ratio": ("ratio", Fraction(1)),
    "MHz": ("hertz", Fraction(10**6)),
    "W": ("watts", Fraction(1)),
    "mW": ("watts", Fraction(1, 1000)),
    "C": ("celsius", Fraction(1)),
    "TFLOP/s": ("flops", Fraction(10**12)),
    "FLOP/s": ("flops", Fraction(1)),
    "IOPS": ("iops", Fraction(1)),
    "samples/s": ("samples_per_second", Fraction(1)),
    "requests/s": ("requests_per_second", Fraction(1)),
    "1/s": ("per_second", Fraction(1)),
    "count": ("", Fraction(1)),
    "bool": ("", Fraction(1)),
    # PCIe link generation and width, DCGM's diagnostic run level: plain numbers.
    "generation": ("", Fraction(1)),
    "lanes": ("", Fraction(1)),
    "level": ("", Fraction(1)),
}
"""A Measurement's unit -> (the name's base-unit suffix, the factor to that unit). A count has
no suffix (a gauge's ``_total`` would claim a counter)."""

_ABBREVIATIONS = frozenset({"s", "ms", "us", "ns", "sec", "b", "kb", "mb", "gb", "tb", "pb", "m", "h", "d"})
"""Abbreviated units promlint refuses as parts of a name (client_golang
``prometheus/testutil/promlint``, "metric names should not contain abbreviated units")."""

_UNIT_WORDS = (
    ("bits", "per", "second"),
    ("bytes", "per", "second"),
    ("per", "second"),
    ("per", "s"),
    ("bits",),
    ("bytes",),
    ("tflops",),
    ("flops",),
)
"""A field's own trailing unit words, which give way to the base-unit suffix."""

_RESERVED_ENDINGS = frozenset({"total", "count", "sum", "bucket"})
"""Endings promlint keeps for counters, histograms and summaries."""

RENAMED_LABELS = {"job": "exported_job", "instance": "exported_instance"}
"""Labels a scrape sets on every series: a textfile's own are renamed as Prometheus would."""

_HELP = {
    (
        "swarm",
        "metrics.last_run_timestamp",
    ): "When the last swarm metrics run that measured this part started",
    ("swarm", "metrics.last_run_success"): "1 when the last swarm metrics run of this part measured "
    "everything it should on this node, 0 when something failed (unreachable node, tool error)",
}


def _unit(unit: str) -> tuple[str, Fraction]:
    if unit in _UNITS:
        return _UNITS[unit]
    words = [w for w in re.split(r"[^a-z0-9]+", unit.lower().replace("/s", "_per_second")) if w]
    return "_".join(w for w in words if w not in _ABBREVIATIONS), Fraction(1)


def _percentile(match: re.Match[str]) -> str:
    fraction = match.group(2).rstrip("0")
    return f"p{match.group(1)}" + (f"_{fraction}" if fraction else "")


def metric_name(m: Measurement) -> str:
    """``swarm_<tool>_<field>_<base unit>``: lower case, every run of characters outside
    [a-z0-9] made ``_``; fio's ``percentile.99.000000`` written ``p99``; abbreviated units
    (``clat_ns``'s ``ns``) and the field's own trailing unit words left out, and the base unit's
    suffix appended once (``read.iops`` -> ``swarm_fio_read_iops``,
    ``end.sum_received.bits_per_second`` -> ``swarm_iperf3_end_sum_received_bytes_per_second``,
    ``read.clat_ns.percentile.99.000000`` -> ``swarm_fio_read_clat_p99_seconds``); no
    ``_total``/``_count``/``_sum``/``_bucket`` ending; the tool ``swarm`` (this package's own
    figures) is not repeated after the prefix."""
    suffix = _unit(m.unit)[0]
    field = re.sub(r"percentile\.(\d+)\.(\d+)", _percentile, m.field)
    words = [w for w in re.split(r"[^a-z0-9]+", f"{m.tool}.{field}".lower()) if w]
    if words and words[0] == "swarm":
        words = words[1:]
    changed = True
    while changed:
        changed = False
        for phrase in _UNIT_WORDS:
            if len(words) > len(phrase) and tuple(words[-len(phrase) :]) == phrase:
                words = words[: -len(phrase)]
                changed = True
    words = [w for w in words if w not in _ABBREVIATIONS]
    while words and words[-1] in _RESERVED_ENDINGS:
        words = words[:-1]
    tail = suffix.split("_") if suffix else []
    overlap = next((k for k in range(len(tail), 0, -1) if words[-k:] == tail[:k]), 0)
    return "_".join(["swarm", *words[: len(words) - overlap], *tail])


def metric_value(m: Measurement) -> float:
    """The value in the name's base unit (ms -> s, % -> ratio, bits/s -> bytes/s...), the
    float nearest the exact product (0.42 ms is 0.00042 s, not 0.00042000000000000004)."""
    scale = _unit(m.unit)[1]
    if not math.isfinite(m.value):
        return m.value * float(scale)
    return float(Fraction(m.value) * scale)


def label_name(key: str) -> str:
    """A label name Prometheus accepts ([a-zA-Z_][a-zA-Z0-9_]*, no leading ``__``, which is
    reserved) and no scrape sets (:data:`RENAMED_LABELS`)."""
    name = re.sub(r"[^a-zA-Z0-9_]", "_", key)
    name = "_" + name if not name or name[0].isdigit() else name
    name = name.lstrip("_") or "label"
    return RENAMED_LABELS.get(name, name)


def run_status(part: str, started_at_s: float, success: bool) -> list[Measurement]:
    """The two series every run writes for each part it measured on a node:
    ``swarm_metrics_last_run_timestamp_seconds{part}`` (Unix time the run started) and
    ``swarm_metrics_last_run_success{part}`` (1 or 0), so an alert can tell a stale or failed
    measurement from a good one."""
    labels = make_labels(part=part)
    return [
        Measurement("swarm", "metrics.last_run_timestamp", float(started_at_s), "s", labels),
        Measurement("swarm", "metrics.last_run_success", 1.0 if success else 0.0, "bool", labels),
    ]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _help(m: Measurement) -> str:
    text = _HELP.get((m.tool, m.field))
    if text is None:
        suffix, scale = _unit(m.unit)
        text = f"{m.tool} {m.field} ({m.unit}" + (f", here in {suffix})" if scale != 1 else ")")
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def render_textfile(measurements: Iterable[Measurement]) -> str:
    """The text format: for each metric ``# HELP`` (tool, field and unit as measured) and
    ``# TYPE name gauge``, then its samples with labels, values in the base unit.

    Metric names sorted, samples in input order; label values escaped as the format requires;
    a sample whose name and labels repeat an earlier one is left out (a file with a duplicate
    series makes the collector fail the whole scrape).
    """
    groups: dict[str, list[Measurement]] = {}
    for m in measurements:
        groups.setdefault(metric_name(m), []).append(m)
    lines: list[str] = []
    for name in sorted(groups):
        lines.append(f"# HELP {name} {_help(groups[name][0])}")
        lines.append(f"# TYPE {name} gauge")
        seen: set[str] = set()
        for m in groups[name]:
            names: dict[str, str] = {}  # a later label renamed onto an earlier one's name is left out
            for k, v in m.labels:
                names.setdefault(label_name(k), v)
            labels = ",".join(f'{k}="{_escape(v)}"' for k, v in names.items())
            if labels in seen:
                continue
            seen.add(labels)
            value = _number(metric_value(m))
            lines.append(f"{name}{{{labels}}} {value}" if labels else f"{name} {value}")
    return "\n".join(lines) + "\n" if lines else ""


CLUSTER_PARTS = ("training", "inference")
"""Parts measured on the Ray cluster as a whole: their figures go to the head's files."""


def own_measurements(measurements: Iterable[Measurement], node: str) -> list[Measurement]:
    """A node's own measurements: those it made (``src``) or that were made on it (``node``)."""
    return [m for m in measurements if node in (m.label("src"), m.label("node"))]


def node_textfiles(
    by_part: dict[str, Outcome], nodes: list[str], head: str | None, started_at_s: float
) -> dict[tuple[str, str], str]:
    """{(node, part): the text of :func:`textfile_path` (part) on that node} for each part of a
    run (``by_part``: the part's Outcome): for a node part (network, storage, gpu) every
    measured node in ``nodes`` gets its own figures (:func:`own_measurements`); for a cluster
    part (:data:`CLUSTER_PARTS`) the Ray ``head`` gets the part's figures (none without a
    head). Each file has the part's :func:`run_status` series: success when nothing of that
    part failed on that node (anywhere, for a cluster part)."""
    files: dict[tuple[str, str], str] = {}
    for part, outcome in by_part.items():
        if part in CLUSTER_PARTS:
            if head is not None:
                status = run_status(part, started_at_s, not outcome.failed)
                files[(head, part)] = render_textfile([*outcome.measurements, *status])
            continue
        for node in nodes:
            status = run_status(part, started_at_s, not any(n.node == node for n in outcome.failed))
            files[(node, part)] = render_textfile([*own_measurements(outcome.measurements, node), *status])
    return files
