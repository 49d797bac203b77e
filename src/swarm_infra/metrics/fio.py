"""fio ``--output-format=json`` output: IOPS, p99 completion latency and bandwidth per job."""

from __future__ import annotations

import json
from typing import Any

from swarm_infra.metrics.measurement import Measurement, MeasurementParseError, make_labels

P99 = "99.000000"
"""fio's key for the 99th percentile in ``clat_ns.percentile``."""


def _json_from(text: str) -> dict[str, Any]:
    # fio may print warnings ("fio: ...") before the JSON document: start at the first "{".
    start = text.find("{")
    if start < 0:
        raise MeasurementParseError("fio: output holds no JSON object")
    try:
        doc = json.loads(text[start:])
    except json.JSONDecodeError as exc:
        raise MeasurementParseError(f"fio: output is not JSON ({exc.msg}, line {exc.lineno})") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list) or not doc["jobs"]:
        raise MeasurementParseError("fio: JSON output lacks 'jobs'")
    return doc


def parse_fio(text: str, **labels: str | int | None) -> list[Measurement]:
    """Measurements from ``fio --output-format=json``, for each job and each direction that did I/O.

    For each job (label ``job`` = ``jobname``) and each of ``read`` / ``write`` with
    ``io_bytes > 0``:
    - ``<dir>.iops`` (IOPS);
    - ``<dir>.clat_ns.percentile.99.000000`` (ns), when fio computed percentiles;
    - ``<dir>.bw`` (KiB/s, as fio reports it) and the same value converted, unit ``MiB/s``
      (``bw / 1024``).

    Raises MeasurementParseError when no JSON is found, a job reported an error
    (non-zero ``error``), or an expected field is missing.
    """
    doc = _json_from(text)
    out: list[Measurement] = []
    for job in doc["jobs"]:
        name = job.get("jobname", "?")
        if job.get("error"):
            raise MeasurementParseError(f"fio: job {name!r} failed with error {job['error']}")
        for direction in ("read", "write"):
            stats = job.get(direction)
            if not isinstance(stats, dict) or not stats.get("io_bytes"):
                continue
            lab = make_labels(job=name, **labels)
            try:
                out.append(Measurement("fio", f"{direction}.iops", float(stats["iops"]), "IOPS", lab))
                percentiles = stats.get("clat_ns", {}).get("percentile")
                if percentiles and P99 in percentiles:
                    out.append(
                        Measurement(
                            "fio", f"{direction}.clat_ns.percentile.{P99}", float(percentiles[P99]), "ns", lab
                        )
                    )
                bw_kib = float(stats["bw"])
            except (KeyError, TypeError, ValueError) as exc:
                raise MeasurementParseError(f"fio: job {name!r} {direction} lacks {exc}") from exc
            out.append(Measurement("fio", f"{direction}.bw", bw_kib, "KiB/s", lab))
            out.append(Measurement("fio", f"{direction}.bw", bw_kib / 1024, "MiB/s", lab))
    if not out:
        raise MeasurementParseError("fio: no job did any I/O")
    return out
