"""A run against the previous one: which measurements got worse beyond a threshold."""

from __future__ import annotations

from dataclasses import dataclass

from swarm_infra.metrics.measurement import Measurement

DEFAULT_THRESHOLD = 0.10
"""A change worse than 10% of the previous value is a regression."""

_LOWER_IS_BETTER = ("clat_ns", "rtt", "packet_loss", "retransmits", "latency")


def higher_is_better(m: Measurement) -> bool:
    """Throughput, IOPS and bandwidth: higher is better; latency, loss, retransmits: lower is better."""
    return not any(word in m.field for word in _LOWER_IS_BETTER)


@dataclass(frozen=True)
class Change:
    """One measurement in both runs: ``change`` is (current - previous) / previous, signed."""

    current: Measurement
    previous: float
    change: float
    regression: bool


def _key(m: Measurement) -> tuple[str, str, str, tuple[tuple[str, str], ...]]:
    return (m.tool, m.field, m.unit, m.labels)


def compare(
    current: list[Measurement], previous: list[Measurement], threshold: float = DEFAULT_THRESHOLD
) -> list[Change]:
    """Changes for the measurements present in both runs (same tool, field, unit and labels).

    A regression is a change in the worse direction by more than ``threshold`` (a fraction:
    0.10 for 10%). A previous value of 0 gives a change of 0 when equal, else ±inf.
    Measurements new in ``current`` are left out. Raises ValueError on a negative threshold.
    """
    if threshold < 0:
        raise ValueError(f"threshold must not be negative, not {threshold}")
    before = {_key(m): m.value for m in previous}
    out: list[Change] = []
    for m in current:
        if _key(m) not in before:
            continue
        old = before[_key(m)]
        if old == 0:
            change = 0.0 if m.value == 0 else (float("inf") if m.value > 0 else float("-inf"))
        else:
            change = (m.value - old) / abs(old)
        worse = -change if higher_is_better(m) else change
        out.append(Change(m, old, change, worse > threshold))
    return out
