"""ping (iputils) output: round-trip time p50 and p99 and packet loss."""

from __future__ import annotations

import math
import re

from swarm_infra.metrics.measurement import Measurement, MeasurementParseError, make_labels

_REPLY = re.compile(r"icmp_seq=\d+ .*time[=<]([0-9.]+) ms")
_SUMMARY = re.compile(r"(\d+) packets transmitted, (\d+) (?:packets )?received.*?([0-9.]+)% packet loss")


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile (``pct`` in 0..100) of a non-empty list: a value that was observed."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def parse_ping(text: str, **labels: str | int | None) -> list[Measurement]:
    """Measurements from ``ping -c N HOST`` output.

    Returns ``rtt.p50`` and ``rtt.p99`` (ms, nearest-rank over the per-reply ``time=``
    values; omitted when no reply came back) and ``packet_loss`` (%, from ping's summary
    line). Raises MeasurementParseError when the summary line is missing.
    """
    summary = _SUMMARY.search(text)
    if summary is None:
        raise MeasurementParseError("ping: output lacks the 'packets transmitted' summary line")
    lab = make_labels(**labels)
    times = [float(m.group(1)) for m in _REPLY.finditer(text)]
    out: list[Measurement] = []
    if times:
        out.append(Measurement("ping", "rtt.p50", percentile(times, 50), "ms", lab))
        out.append(Measurement("ping", "rtt.p99", percentile(times, 99), "ms", lab))
    out.append(Measurement("ping", "packet_loss", float(summary.group(3)), "%", lab))
    return out
