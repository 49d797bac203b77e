"""A run against the previous one: which measurements got worse beyond a threshold."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from swarm_infra.metrics.gpu_health import REPORTED_REASONS
from swarm_infra.metrics.measurement import Measurement

DEFAULT_THRESHOLD = 0.10
"""A change worse than 10% of the previous value is a regression."""

Direction = Literal["higher", "lower", "none"]

HIGHER: Direction = "higher"
LOWER: Direction = "lower"
NONE: Direction = "none"

DIRECTIONS: dict[tuple[str, str], Direction] = {
    # iperf3 -J: throughput up is better; retransmitted segments down.
    ("iperf3", "end.sum_sent.bits_per_second"): HIGHER,
    ("iperf3", "end.sum_received.bits_per_second"): HIGHER,
    ("iperf3", "end.sum_sent.retransmits"): LOWER,
    # ping: round trips and loss down.
    ("ping", "rtt.p50"): LOWER,
    ("ping", "rtt.p99"): LOWER,
    ("ping", "packet_loss"): LOWER,
    # fio: operations and bytes per second up, completion latency down.
    ("fio", "read.iops"): HIGHER,
    ("fio", "write.iops"): HIGHER,
    ("fio", "read.bw_bytes"): HIGHER,
    ("fio", "write.bw_bytes"): HIGHER,
    ("fio", "read.clat_ns.percentile.99.000000"): LOWER,
    ("fio", "write.clat_ns.percentile.99.000000"): LOWER,
    # This package's own: the share of the underlay's bandwidth the mesh loses.
    ("swarm", "wireguard.overhead"): LOWER,
    # NVML telemetry is a snapshot of the GPU's state, not a score: clocks, power and
    # temperature move with the load, so a change is reported, never judged. Errors only grow worse.
    ("nvidia-smi", "clocks.sm"): NONE,
    ("nvidia-smi", "clocks.mem"): NONE,
    ("nvidia-smi", "power.draw"): NONE,
    ("nvidia-smi", "temperature.gpu"): NONE,
    ("nvidia-smi", "ecc.errors.uncorrected.volatile.total"): LOWER,
    # GPU acceptance (gpu_health): the matmul's FLOP/s up; errors, pending repairs, slowdowns
    # and PCIe link downgrades down; the identity and the link's own figures are facts.
    ("torch", "matmul.flops"): HIGHER,
    ("torch", "matmul.flops.first_window"): HIGHER,
    ("torch", "matmul.flops.last_window"): HIGHER,
    ("torch", "matmul.seconds"): NONE,
    ("nvidia-smi", "memory.total"): NONE,
    ("nvidia-smi", "retired_pages.pending"): LOWER,
    ("nvidia-smi", "remapped_rows.correctable"): LOWER,
    ("nvidia-smi", "remapped_rows.uncorrectable"): LOWER,
    ("nvidia-smi", "remapped_rows.pending"): LOWER,
    ("nvidia-smi", "remapped_rows.failure"): LOWER,
    ("kernel-log", "xid.errors"): LOWER,
    ("nvidia-smi", "pcie.link.gen.current"): NONE,
    ("nvidia-smi", "pcie.link.gen.max"): NONE,
    ("nvidia-smi", "pcie.link.width.current"): NONE,
    ("nvidia-smi", "pcie.link.width.max"): NONE,
    ("nvidia-smi", "pcie.link.gen.downgrade"): LOWER,
    ("nvidia-smi", "pcie.link.width.downgrade"): LOWER,
    **{("nvidia-smi", f"clocks_event_reasons.{r}"): LOWER for r in REPORTED_REASONS},
    ("nvidia-smi", "clocks_event_reasons.slowdown"): LOWER,
    ("dcgmi", "diag.failures"): LOWER,
    ("dcgmi", "diag.passed_level"): HIGHER,
    ("ray", "training.samples_per_s"): HIGHER,
    ("ray", "training.scaling_efficiency"): HIGHER,
    ("ray", "training.samples_per_s.min"): HIGHER,
    ("ray", "training.samples_per_s.max"): HIGHER,
    ("ray", "allreduce.algbw"): HIGHER,
    ("ray", "allreduce.busbw"): HIGHER,
    ("ray-data", "rows"): NONE,  # what the run was asked to stream: a setting
    ("ray-data", "bytes"): NONE,
    ("ray-data", "wait"): LOWER,
    ("ray", "pipeline.samples_per_s"): HIGHER,
    ("ray", "pipeline.samples_per_s.min"): HIGHER,
    ("ray", "pipeline.samples_per_s.max"): HIGHER,
    ("ray", "pipeline.reference_samples_per_s"): HIGHER,
    ("ray", "pipeline.max_loss_diff"): LOWER,
    ("ray", "pipeline.activation_bytes"): NONE,  # fixed by the model's cut and the batch
    ("ray-serve", "latency.p90"): LOWER,
    ("ray-serve", "error_rate"): LOWER,
    ("ray-serve", "requests"): NONE,  # the count behind the percentiles: a setting, not a score
    ("ray-serve", "requests_per_s"): HIGHER,
    ("ray-serve", "errors"): LOWER,
    ("ray-serve", "latency.p50"): LOWER,
    ("ray-serve", "latency.p99"): LOWER,
}
"""Which way each known (tool, field) improves: ``higher``, ``lower``, or ``none`` (reported,
never judged). A field not listed has no direction: :func:`direction` says None and
:func:`compare` reports it as "direction unknown" instead of guessing; a new probe adds its
fields here."""


def direction(m: Measurement) -> Direction | None:
    """The declared direction of the measurement's (tool, field) (:data:`DIRECTIONS`), None when unknown."""
    return DIRECTIONS.get((m.tool, m.field))


@dataclass(frozen=True)
class Change:
    """One measurement in both runs: ``change`` is (current - previous) / previous, signed;
    ``direction`` the field's (None: unknown, so never a regression)."""

    current: Measurement
    previous: float
    change: float
    regression: bool
    direction: Direction | None = None


def _key(m: Measurement) -> tuple[str, str, str, tuple[tuple[str, str], ...]]:
    return (m.tool, m.field, m.unit, m.labels)


def compare(
    current: list[Measurement], previous: list[Measurement], threshold: float = DEFAULT_THRESHOLD
) -> list[Change]:
    """Changes for the measurements present in both runs (same tool, field, unit and labels).

    A regression is a change in the worse direction (:data:`DIRECTIONS`) by more than
    ``threshold`` (a fraction: 0.10 for 10%); a field with direction ``none`` or none
    declared is never a regression (its Change has ``direction`` ``"none"`` or None). A
    previous value of 0 gives a change of 0 when equal, else ±inf. Measurements new in
    ``current`` are left out. Raises ValueError on a negative threshold.
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
        way = direction(m)
        worse = -change if way == HIGHER else change if way == LOWER else 0.0
        out.append(Change(m, old, change, worse > threshold, way))
    return out
