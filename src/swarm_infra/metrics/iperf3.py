"""iperf3 ``-J`` output: throughput of a single-stream or ``-P N`` TCP test."""

from __future__ import annotations

import json
from typing import Any

from swarm_infra.metrics.measurement import Measurement, MeasurementParseError, make_labels


def _dig(doc: Any, path: str) -> Any:
    node = doc
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            raise MeasurementParseError(f"iperf3: JSON output lacks {path!r}")
        node = node[part]
    return node


def parse_iperf3(text: str, **labels: str | int | None) -> list[Measurement]:
    """Measurements from the JSON that ``iperf3 -c HOST -J [-P N]`` prints.

    Returns, in this order: ``end.sum_sent.bits_per_second`` (bits/s),
    ``end.sum_received.bits_per_second`` (bits/s), ``end.sum_sent.retransmits`` (count,
    TCP only) — the sums over all ``-P`` streams, as iperf3 itself adds them up. Each record
    carries the given labels plus ``streams`` (``start.test_start.num_streams``).

    Raises MeasurementParseError when the text is not JSON, when iperf3 reported an error
    (its ``error`` field, e.g. "unable to connect to server"), or when a field is missing.
    """
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MeasurementParseError(f"iperf3: output is not JSON ({exc.msg}, line {exc.lineno})") from exc
    if not isinstance(doc, dict):
        raise MeasurementParseError("iperf3: output is not a JSON object")
    if doc.get("error"):
        raise MeasurementParseError(f"iperf3: {doc['error']}")
    streams = _dig(doc, "start.test_start.num_streams")
    common = make_labels(streams=streams, **labels)
    out = [
        Measurement(
            "iperf3",
            "end.sum_sent.bits_per_second",
            float(_dig(doc, "end.sum_sent.bits_per_second")),
            "bits/s",
            common,
        ),
        Measurement(
            "iperf3",
            "end.sum_received.bits_per_second",
            float(_dig(doc, "end.sum_received.bits_per_second")),
            "bits/s",
            common,
        ),
    ]
    retransmits = doc["end"]["sum_sent"].get("retransmits")
    if retransmits is not None:
        out.append(Measurement("iperf3", "end.sum_sent.retransmits", float(retransmits), "count", common))
    return out
