"""fio ``--output-format=json`` output: IOPS, p99 completion latency and bandwidth per job."""

from __future__ import annotations

import json
import re
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


_FIO_DEFAULTS = {"rw": "read", "bs": "4096", "iodepth": "1"}
"""fio's defaults for the options that say what a job did, from fio(1) of fio 3.33 (Debian 12):
``readwrite, rw``: "Fio defaults to read if the option is not specified"; ``blocksize, bs``:
"Default: 4096"; ``iodepth``: "Default: 1". Sizes with a suffix use ``kb_base=1024`` ("the
default")."""

_SIZE = re.compile(r"^(\d+)([kmgt]?)i?b?$", re.IGNORECASE)


def block_size_bytes(bs: str) -> str:
    """fio's ``bs`` as a byte count in decimal (``4k`` -> ``4096``, ``1M`` -> ``1048576``), with
    fio's default ``kb_base=1024`` (a suffix is a power of 1024); the read size when the
    option gives ``read,write`` sizes. Any other form (a range) is returned as given."""
    first = bs.split(",")[0].strip()
    match = _SIZE.match(first)
    if match is None:
        return bs
    power = " kmgt".index(match.group(2).lower() or " ")
    return str(int(match.group(1)) * 1024**power)


def parse_fio(text: str, **labels: str | int | None) -> list[Measurement]:
    """Measurements from ``fio --output-format=json``, for each job and each direction that did I/O.

    For each job and each of ``read`` / ``write`` with ``io_bytes > 0``:
    - ``<dir>.iops`` (IOPS);
    - ``<dir>.clat_ns.percentile.99.000000`` (ns), when fio computed percentiles;
    - ``<dir>.bw_bytes`` (bytes/s, fio's own field).

    Labels: ``jobname`` (fio's name for the job; never ``job``, which is Prometheus's scrape
    label), and what the job did, from its ``job options`` over the file's ``global options``
    over fio's defaults: ``rw`` (``randread``, ``read``, ``write``...), ``bs`` (block size in
    bytes, :func:`block_size_bytes`) and ``iodepth``. NodeAcceptance's storage thresholds read
    the job with ``rw=randread``, ``bs=4096``, ``iodepth=32`` only.

    Raises MeasurementParseError when no JSON is found, a job reported an error
    (non-zero ``error``), or an expected field is missing.
    """
    doc = _json_from(text)
    found = doc.get("global options")
    global_options: dict[str, Any] = found if isinstance(found, dict) else {}
    out: list[Measurement] = []
    for job in doc["jobs"]:
        name = job.get("jobname", "?")
        if job.get("error"):
            raise MeasurementParseError(f"fio: job {name!r} failed with error {job['error']}")
        found = job.get("job options")
        options: dict[str, Any] = found if isinstance(found, dict) else {}
        shape = {
            k: str(options.get(k, global_options.get(k, default))) for k, default in _FIO_DEFAULTS.items()
        }
        shape["bs"] = block_size_bytes(shape["bs"])
        for direction in ("read", "write"):
            stats = job.get(direction)
            if not isinstance(stats, dict) or not stats.get("io_bytes"):
                continue
            lab = make_labels(jobname=name, **shape, **labels)
            try:
                out.append(Measurement("fio", f"{direction}.iops", float(stats["iops"]), "IOPS", lab))
                percentiles = stats.get("clat_ns", {}).get("percentile")
                if percentiles and P99 in percentiles:
                    out.append(
                        Measurement(
                            "fio", f"{direction}.clat_ns.percentile.{P99}", float(percentiles[P99]), "ns", lab
                        )
                    )
                out.append(
                    Measurement("fio", f"{direction}.bw_bytes", float(stats["bw_bytes"]), "bytes/s", lab)
                )
            except (KeyError, TypeError, ValueError) as exc:
                raise MeasurementParseError(f"fio: job {name!r} {direction} lacks {exc}") from exc
    if not out:
        raise MeasurementParseError("fio: no job did any I/O")
    return out
