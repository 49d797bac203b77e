"""The Measurement record: one number a tool printed, under the tool's own name and unit."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..errors import MeasurementParseError as MeasurementParseError


@dataclass(frozen=True)
class Measurement:
    """One measured value.

    Fields:
    - tool: the program that measured it ("iperf3", "fio", "ping").
    - field: the tool's own name for it, as a dotted path into its output
      (``end.sum_received.bits_per_second``, ``read.clat_ns.percentile.99.000000``), or, for
      a value derived by this package, the tool's field plus the conversion
      (``read.bw_bytes -> MiB/s`` is written ``read.bw`` with unit ``MiB/s``).
    - value: the number (float).
    - unit: the unit the tool reports it in ("bits/s", "IOPS", "ns", "KiB/s", "MiB/s", "ms",
      "%"), or the unit it was converted to when the field says so.
    - labels: what was measured (source, destination, path "mesh" or "underlay", job name,
      streams), as sorted (key, value) string pairs, so records compare and hash.
    """

    tool: str
    field: str
    value: float
    unit: str
    labels: tuple[tuple[str, str], ...] = dataclasses.field(default_factory=tuple)  # `field` is a member

    def label(self, key: str) -> str | None:
        """The value of one label, or None."""
        return dict(self.labels).get(key)


def make_labels(**labels: str | int | None) -> tuple[tuple[str, str], ...]:
    """Sorted (key, str(value)) pairs, dropping keys whose value is None."""
    return tuple(sorted((k, str(v)) for k, v in labels.items() if v is not None))
