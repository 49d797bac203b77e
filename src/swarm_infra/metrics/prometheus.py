"""Measurements in the Prometheus text exposition format, for node_exporter's textfile collector.

Written by prometheus_client (``generate_latest``), the text format 0.0.4; the text goes to
each node over SSH (``probes.textfile_upload``), so ``write_to_textfile``, which writes a
local path, has no place here. Names follow
Prometheus's naming practices (https://prometheus.io/docs/practices/naming/): one
application prefix (``swarm_``), base units in the name's suffix, said once (``_seconds``,
``_bytes``, ``_bytes_per_second``, ``_operations_per_second`` for IOPS, ``_hertz``,
``_watts``, ``_celsius``, ``_ratio`` for a 0-1 ratio instead of a percentage), the value
converted to that unit, ``_total`` only on counters (every series here is the figure of the
last run: a gauge), no tool's JSON path (iperf3's ``end.sum_sent`` is ``sent``). A statistic
of a distribution is not in the name but in the ``quantile`` label, as a summary's quantiles
are (``swarm_ping_rtt_seconds{quantile="0.99"}``; the minimum and maximum over repeats are the
0 and 1 quantiles), of type ``summary``, which promlint requires of a ``quantile`` label.
Those summaries have no ``_sum`` or ``_count`` (the runs do not keep them); node_exporter's
textfile collector re-exposes a summary with both, as 0 (``collector/textfile.go``,
``MustNewConstSummary``): read the quantile series only. A figure that was not measured has
no sample (never ``-1``). ``promtool check metrics`` (the Prometheus release's linter,
``client_golang``'s promlint) finds nothing to report in what :func:`render_textfile`
writes; tests/unit/test_metrics_prometheus.py runs it on every kind of measurement.

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
from typing import TYPE_CHECKING

from swarm_infra.metrics.fleetrun import Outcome
from swarm_infra.metrics.measurement import Measurement, make_labels
from swarm_infra.resolve.layout import TEXTFILE_DIR  # node_exporter's textfile directory, decided once

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

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
    "IOPS": ("operations_per_second", Fraction(1)),
    "samples/s": ("samples_per_second", Fraction(1)),
    "requests/s": ("requests_per_second", Fraction(1)),
    "1/s": ("per_second", Fraction(1)),
    "nats": ("nats", Fraction(1)),
    "count": ("", Fraction(1)),
    "bool": ("", Fraction(1)),
    # PCIe link generation and width, DCGM's diagnostic run level: plain numbers.
    "generation": ("", Fraction(1)),
    "lanes": ("", Fraction(1)),
    "level": ("", Fraction(1)),
}
"""A Measurement's unit -> (the name's base-unit suffix, the factor to that unit). A count has
no suffix (a gauge's ``_total`` would claim a counter); IOPS are I/O operations per second."""

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
    ("iops",),
)
"""A field's own unit words, wherever they stand in it (``matmul.flops.first_window``): they
give way to the base-unit suffix, which the name carries once, at its end."""

_RATIO_WORDS = frozenset({"rate", "ratio", "fraction", "percent"})
"""A ratio field's last word that the ``_ratio`` suffix says again (``error_rate``)."""

_RESERVED_ENDINGS = frozenset({"total", "count", "sum", "bucket"})
"""Endings promlint keeps for counters, histograms and summaries."""

_JSON_PATHS = {"iperf3": "end.sum_"}
"""The part of a tool's JSON path that names no quantity: iperf3's ``end.sum_sent`` and
``end.sum_received`` (the whole test's totals, all streams) are ``sent`` and ``received``."""

_QUANTILE = re.compile(r"^(?P<field>.+)\.(?:p(?P<p>\d+)|percentile\.(?P<whole>\d+)\.(?P<fraction>\d+))$")
"""A percentile in a field (ping's ``rtt.p50``, fio's ``clat_ns.percentile.99.000000``)."""

_SPREAD = frozenset({("ray", "training.samples_per_s"), ("ray", "pipeline.samples_per_s")})
"""Fields measured over repeats: the field itself is the median, ``.min`` and ``.max`` the
extremes (:mod:`.jobs`), i.e. the 0.5, 0 and 1 quantiles."""

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


def _quantile(text: str) -> str:
    """A percentile's number (``99``, ``99.9``) as the quantile Prometheus writes (``0.99``)."""
    return repr(float(Fraction(text) / 100))


def _split(m: Measurement) -> tuple[str, str | None]:
    """The field without its statistic, and the statistic as a ``quantile`` label value
    (None: the field is no statistic of a distribution)."""
    if (m.tool, m.field) in _SPREAD:
        return m.field, "0.5"
    for end, q in ((".min", "0"), (".max", "1")):
        if m.field.endswith(end) and (m.tool, m.field.removesuffix(end)) in _SPREAD:
            return m.field.removesuffix(end), q
    match = _QUANTILE.match(m.field)
    if match is None:
        return m.field, None
    number = match["p"] or f"{match['whole']}.{match['fraction']}"
    return match["field"], _quantile(number)


def _without(words: list[str], phrase: tuple[str, ...]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(words):
        if tuple(words[i : i + len(phrase)]) == phrase and len(words) > len(phrase):
            i += len(phrase)
        else:
            out.append(words[i])
            i += 1
    return out


def metric_name(m: Measurement) -> str:
    """``swarm_<tool>_<field>_<base unit>`` (Prometheus' naming practices,
    https://prometheus.io/docs/practices/naming/): lower case, every run of characters outside
    [a-z0-9] made ``_``; a statistic of the field left to the ``quantile`` label
    (:func:`metric_labels`); a tool's JSON path reduced to the quantity it names
    (:data:`_JSON_PATHS`); the field's own unit words and abbreviated units left out wherever
    they stand, and the base unit's suffix appended once (``read.iops`` ->
    ``swarm_fio_read_operations_per_second``, ``end.sum_received.bits_per_second`` ->
    ``swarm_iperf3_received_bytes_per_second``, ``read.clat_ns.percentile.99.000000`` ->
    ``swarm_fio_read_clat_seconds``, ``matmul.flops.first_window`` ->
    ``swarm_torch_matmul_first_window_flops``); no ``_total``/``_count``/``_sum``/``_bucket``
    ending; the tool ``swarm`` (this package's own figures) is not repeated after the prefix."""
    suffix = _unit(m.unit)[0]
    field = _split(m)[0]
    prefix = _JSON_PATHS.get(m.tool)
    if prefix and field.startswith(prefix):
        field = field.removeprefix(prefix)
    words = [w for w in re.split(r"[^a-z0-9]+", f"{m.tool}.{field}".lower()) if w]
    if words and words[0] == "swarm":
        words = words[1:]
    for phrase in _UNIT_WORDS:
        words = _without(words, phrase)
    words = [w for w in words if w not in _ABBREVIATIONS]
    while words and (words[-1] in _RESERVED_ENDINGS or (suffix == "ratio" and words[-1] in _RATIO_WORDS)):
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


def metric_labels(m: Measurement) -> dict[str, str]:
    """The sample's labels: the measurement's, named by :func:`label_name` (a later label
    renamed onto an earlier one's name is left out), and ``quantile`` for a statistic of a
    distribution (``0.5`` for ping's ``rtt.p50``, ``0.99`` for fio's
    ``percentile.99.000000``, ``0``/``0.5``/``1`` for the minimum, median and maximum over
    repeats), the label a Prometheus summary gives its quantiles."""
    names: dict[str, str] = {}
    for k, v in m.labels:
        names.setdefault(label_name(k), v)
    quantile = _split(m)[1]
    if quantile is not None:
        names["quantile"] = quantile
    return names


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


def _help(m: Measurement) -> str:
    text = _HELP.get((m.tool, m.field))
    if text is None:
        suffix, scale = _unit(m.unit)
        field = _split(m)[0]
        text = f"{m.tool} {field} ({m.unit}" + (f", here in {suffix})" if scale != 1 else ")")
    return text


def _families(measurements: Iterable[Measurement]) -> list[Metric]:
    from prometheus_client.metrics_core import Metric

    groups: dict[str, list[Measurement]] = {}
    for m in measurements:
        groups.setdefault(metric_name(m), []).append(m)
    families: list[Metric] = []
    for name in sorted(groups):
        # A statistic of a distribution is a summary's quantile (promlint refuses a quantile
        # label on any other type); every other figure is a gauge, the last run's.
        kind = "summary" if _split(groups[name][0])[1] is not None else "gauge"
        family = Metric(name, _help(groups[name][0]), kind)
        seen: set[tuple[tuple[str, str], ...]] = set()
        for m in groups[name]:
            labels = metric_labels(m)
            key = tuple(labels.items())
            if key in seen:
                continue
            seen.add(key)
            family.add_sample(name, labels, metric_value(m))
        families.append(family)
    return families


def render_textfile(measurements: Iterable[Measurement]) -> str:
    """The text format (0.0.4), written by prometheus_client's ``generate_latest``: for each
    metric ``# HELP`` (tool, field and unit as measured) and ``# TYPE name gauge``, then its
    samples with labels (:func:`metric_labels`), values in the base unit (:func:`metric_value`).

    Metric names sorted, samples in input order; a sample whose name and labels repeat an
    earlier one is left out (a file with a duplicate series makes the collector fail the
    whole scrape). No measurement, no text ("")."""
    # Imported here: every `swarm` command loads this module (prometheus_client takes ~0.1 s).
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.registry import Collector

    families = _families(measurements)

    class Measured(Collector):
        def collect(self) -> Iterable[Metric]:
            return families

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Measured())
    return generate_latest(registry).decode("utf-8")


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
