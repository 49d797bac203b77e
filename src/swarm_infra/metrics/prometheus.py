"""Measurements in the Prometheus text exposition format, for node_exporter's textfile collector."""

from __future__ import annotations

import re

from swarm_infra.metrics.measurement import Measurement

TEXTFILE_PATH = "/var/lib/node_exporter/textfile_collector/swarm_metrics.prom"
"""Where each node's file goes (node_exporter ``--collector.textfile.directory``)."""

_UNIT_SUFFIX = {
    "bits/s": "bits_per_second",
    "IOPS": "iops",
    "ns": "nanoseconds",
    "ms": "milliseconds",
    "KiB/s": "kibibytes_per_second",
    "MiB/s": "mebibytes_per_second",
    "%": "percent",
    "count": "total",
}


def metric_name(m: Measurement) -> str:
    """``swarm_<tool>_<field>_<unit>``, with every character outside [a-zA-Z0-9_] made ``_``
    and the unit left out where the field already ends with it (``swarm_fio_read_iops``)."""
    suffix = _UNIT_SUFFIX.get(m.unit, m.unit)
    name = re.sub(r"[^a-zA-Z0-9_]", "_", f"swarm_{m.tool}_{m.field}").replace("__", "_")
    if not name.endswith(f"_{suffix}"):
        name = re.sub(r"[^a-zA-Z0-9_]", "_", f"{name}_{suffix}").replace("__", "_")
    return name


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render_textfile(measurements: list[Measurement]) -> str:
    """The text format: one ``# TYPE name gauge`` per metric, then its samples with labels.

    Metric names sorted, samples in input order; label values escaped as the format requires.
    """
    groups: dict[str, list[Measurement]] = {}
    for m in measurements:
        groups.setdefault(metric_name(m), []).append(m)
    lines: list[str] = []
    for name in sorted(groups):
        lines.append(f"# TYPE {name} gauge")
        for m in groups[name]:
            labels = ",".join(f'{k}="{_escape(v)}"' for k, v in m.labels)
            lines.append(f"{name}{{{labels}}} {m.value!r}" if labels else f"{name} {m.value!r}")
    return "\n".join(lines) + "\n" if lines else ""
