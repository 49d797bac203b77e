"""Measurements from the Ray jobs' logs (``jobs/fleet_training.py``, ``jobs/fleet_inference.py``).

Each job's driver prints one ``TAG {json}`` line per result among Ray's own log lines; the
parsers read those lines and nothing else. Only the driver's own lines count
(:func:`tagged`): Ray forwards every worker's stdout to the driver, each line prefixed with
the worker's name (``(RayTrainWorker pid=..., ip=...)``), and a worker is another
provider's machine, which must not be able to print the figures the operator records
(issue #38). A line repeated counts once: the last line for a key wins.

Definitions, so that each figure says what it is:

- Training samples/s: global batch x steps / wall seconds of one timed window (after the
  job's untimed warm-up steps); the job times ``repeats`` windows, the median is the figure
  and min/max its spread.
- Weak scaling: a fixed batch per worker (the global batch grows with N); strong scaling: a
  fixed global batch split over N workers. Both give the scaling efficiency
  throughput(N) / (N x throughput(1)) of their own kind (for strong scaling it is the
  speed-up t(1)/t(N) over N, the same work in both).
- Streamed data (``--data stream``): the rows, bytes (the tensors' sizes) and seconds each
  worker spent waiting for its shard of the Ray Dataset during the timed windows of one
  worker count and kind (``DATA`` lines).
- Pipeline parallelism (``--pipeline``): samples/s of the model cut over two workers, each
  step's batch in micro-batches, beside the whole model's on one worker, and the largest
  loss difference between the two runs at any step (same seed, weights and batches).
- All-reduce bandwidths as nccl-tests defines them (NVIDIA/nccl-tests, doc/PERFORMANCE.md):
  algbw = message bytes / seconds per all-reduce; busbw = algbw x 2(n-1)/n for n ranks, the
  traffic each link carries in a ring, comparable with the link's bandwidth (iperf3).
- Inference latency: from a request's intended send time in a fixed-rate (open-loop)
  schedule to the end of its response, nearest-rank percentiles over the successful requests,
  reported only with at least 10 / (1 - q) of them; ``requests`` states the count behind it.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TypeVar

from swarm_infra.metrics.measurement import Measurement, MeasurementParseError, make_labels

T = TypeVar("T")

DEFAULT_MAX_ERROR_RATE = 0.01
"""Most failed inference requests, as a fraction of those sent at one rate, before the run
fails (``swarm metrics run --max-error-rate``)."""


# What may come before a driver's line on its own line of the log: blanks, carriage
# returns and terminal control sequences (ECMA-48 CSI) of progress bars the driver drew.
# A forwarded worker line starts with its prefix, ``(NAME pid=...)``, colour codes around it.
_DRIVER_LINE = r"^(?:[ \t\r]|\x1b\[[0-9;?]*[ -/]*[@-~])*{tag} (.*)$"


def tagged(text: str, tag: str) -> list[dict]:
    """The JSON objects of the driver's ``TAG {json}`` lines in ``text``, in order: a line
    (split at ``\\n`` only, as the log arrives) that is the tag and its object, after at most
    blanks, carriage returns and terminal control sequences (a progress bar the driver
    drew). A tag anywhere else, such as after the prefix Ray gives a worker's forwarded line
    (``(RayTrainWorker pid=...)``), is a worker's output and never a result. Raises
    MeasurementParseError naming the line when its JSON is not an object."""
    out = []
    pattern = re.compile(_DRIVER_LINE.format(tag=re.escape(tag)))
    for line in text.split("\n"):
        match = pattern.match(line)
        if match is None:
            continue
        payload = match.group(1)
        try:
            value = json.loads(payload)
        except ValueError as exc:
            raise MeasurementParseError(
                f"{tag.lower()}: unreadable {tag} line ({exc}): {line[:200]!r}"
            ) from None
        if not isinstance(value, dict):
            raise MeasurementParseError(f"{tag.lower()}: {tag} line is not an object: {line[:200]!r}")
        out.append(value)
    return out


def _read(tag: str, runs: list[dict], key: Callable[[dict], Hashable], read: Callable[[dict], T]) -> dict:
    """``{key(run): read(run)}``, the last run of each key winning; MeasurementParseError on a
    missing or mistyped field."""
    out: dict = {}
    for run in runs:
        try:
            out[key(run)] = read(run)
        except (KeyError, TypeError, ValueError) as exc:
            raise MeasurementParseError(
                f"{tag.lower()}: {tag} line lacks {exc}: {json.dumps(run)[:200]}"
            ) from None
    return out


def parse_training(text: str, **labels: str | int | None) -> list[Measurement]:
    """Measurements from fleet_training.py's ``TRAINING`` and ``ALLREDUCE`` lines.

    Per worker count N (label ``workers``) and kind (label ``scaling``: ``weak`` or
    ``strong``): ``training.samples_per_s`` (samples/s, the median of the timed windows),
    ``training.samples_per_s.min`` and ``.max`` (the spread), and
    ``training.scaling_efficiency`` (ratio, against N = 1 of the same kind); label
    ``repeats`` (windows), and ``data=stream`` when the batches were streamed from a Ray
    Dataset. Per message size (label ``bytes``) of the all-reduce sweep:
    ``allreduce.algbw`` and ``allreduce.busbw`` (bytes/s). From a streamed run's ``DATA``
    lines, per worker count, kind and worker (labels ``rank`` and ``address``, the node's):
    tool ``ray-data``, ``rows`` (count), ``bytes`` (the batches' tensors) and ``wait`` (s
    spent waiting for the next batch), over the timed windows. Raises
    MeasurementParseError when a kind has no N = 1 run or no TRAINING line is found.
    """
    runs = _read(
        "TRAINING",
        tagged(text, "TRAINING"),
        lambda r: (str(r["scaling"]), int(r["workers"])),
        lambda r: [float(v) for v in r["samples_per_s"]],
    )
    if not runs:
        raise MeasurementParseError("training: the job printed no TRAINING line")
    # ``data`` (a label only when the batches were streamed: the in-memory figures keep the
    # series they always had).
    data = _read(
        "TRAINING",
        tagged(text, "TRAINING"),
        lambda r: (str(r["scaling"]), int(r["workers"])),
        lambda r: None if r.get("data", "memory") == "memory" else str(r["data"]),
    )
    out = []
    for (scaling, workers), rates in sorted(runs.items()):
        if not rates:
            raise MeasurementParseError(f"training: no timed window for {workers} worker(s), {scaling}")
        base = runs.get((scaling, 1))
        if not base:
            raise MeasurementParseError(f"training: no TRAINING line for 1 worker ({scaling} scaling)")
        lab = make_labels(
            workers=workers, scaling=scaling, repeats=len(rates), data=data.get((scaling, workers)), **labels
        )
        median = statistics.median(rates)
        out += [
            Measurement("ray", "training.samples_per_s", median, "samples/s", lab),
            Measurement("ray", "training.samples_per_s.min", min(rates), "samples/s", lab),
            Measurement("ray", "training.samples_per_s.max", max(rates), "samples/s", lab),
            Measurement(
                "ray",
                "training.scaling_efficiency",
                median / (workers * statistics.median(base)),
                "ratio",
                lab,
            ),
        ]
    sweep = _read(
        "ALLREDUCE",
        tagged(text, "ALLREDUCE"),
        lambda r: (int(r["workers"]), int(r["bytes"])),
        lambda r: (float(r["algbw_bytes_per_s"]), float(r["seconds"])),
    )
    for (workers, size), (algbw, _) in sorted(sweep.items()):
        lab = make_labels(workers=workers, bytes=size, **labels)
        out += [
            Measurement("ray", "allreduce.algbw", algbw, "bytes/s", lab),
            Measurement("ray", "allreduce.busbw", algbw * 2 * (workers - 1) / workers, "bytes/s", lab),
        ]
    return out + _streamed(text, labels)


def _streamed(text: str, labels: dict) -> list[Measurement]:
    """The ``DATA`` lines of a ``--data stream`` run: per worker count, kind and rank."""
    shards = _read(
        "DATA",
        tagged(text, "DATA"),
        lambda r: (str(r["scaling"]), int(r["workers"])),
        lambda r: [
            (str(address), int(rows), int(size), float(wait))
            for address, rows, size, wait in zip(
                r["addresses"], r["rows"], r["bytes"], r["wait_s"], strict=True
            )
        ],
    )
    out = []
    for (scaling, workers), ranks in sorted(shards.items()):
        for rank, (address, rows, size, wait) in enumerate(ranks):
            lab = make_labels(
                workers=workers, scaling=scaling, rank=rank, address=address, data="stream", **labels
            )
            out += [
                Measurement("ray-data", "rows", float(rows), "count", lab),
                Measurement("ray-data", "bytes", float(size), "bytes", lab),
                Measurement("ray-data", "wait", wait, "s", lab),
            ]
    return out


def parse_pipeline(text: str, **labels: str | int | None) -> list[Measurement]:
    """Measurements from fleet_training.py's ``--pipeline`` run (its ``PIPELINE`` line), label
    ``stages`` and ``micro_batches``: ``pipeline.samples_per_s`` (samples/s, the median of the
    timed windows) with ``.min`` and ``.max``; ``pipeline.reference_samples_per_s`` (the
    unpartitioned model on one worker, same batches); ``pipeline.max_loss_diff`` (the largest
    difference, at any step, between the partitioned and the whole model's loss: the
    oracle; nats, the cross-entropy's unit); ``pipeline.activation_bytes`` (bytes sent from
    stage 0 to stage 1 per step; the gradients back are as many). Raises
    MeasurementParseError when no line is found or a field is missing."""
    runs = _read(
        "PIPELINE",
        tagged(text, "PIPELINE"),
        lambda r: (int(r["stages"]), int(r["micro_batches"])),
        lambda r: (
            [float(v) for v in r["samples_per_s"]],
            [float(v) for v in r["reference_samples_per_s"]],
            float(r["max_loss_diff"]),
            float(r["activation_bytes_per_step"]),
        ),
    )
    if not runs:
        raise MeasurementParseError("pipeline: the job printed no PIPELINE line")
    out = []
    for (stages, micro), (rates, reference, diff, sent) in sorted(runs.items()):
        if not rates or not reference:
            raise MeasurementParseError(f"pipeline: no timed window ({stages} stages, {micro} micro-batches)")
        lab = make_labels(stages=stages, micro_batches=micro, repeats=len(rates), **labels)
        out += [
            Measurement("ray", "pipeline.samples_per_s", statistics.median(rates), "samples/s", lab),
            Measurement("ray", "pipeline.samples_per_s.min", min(rates), "samples/s", lab),
            Measurement("ray", "pipeline.samples_per_s.max", max(rates), "samples/s", lab),
            Measurement(
                "ray", "pipeline.reference_samples_per_s", statistics.median(reference), "samples/s", lab
            ),
            Measurement("ray", "pipeline.max_loss_diff", diff, "nats", lab),
            Measurement("ray", "pipeline.activation_bytes", sent, "bytes", lab),
        ]
    return out


def parse_inference(text: str, **labels: str | int | None) -> list[Measurement]:
    """Measurements from fleet_inference.py's ``INFERENCE`` lines, per offered rate (label
    ``rate``, requests/s): ``latency.p50``, ``latency.p90``, ``latency.p99`` (ms; only those
    the job had enough successes for), ``requests_per_s`` (requests/s answered),
    ``requests`` and ``errors`` (count), ``error_rate`` (ratio of the requests sent). Raises
    MeasurementParseError when no line is found."""

    def read(run: dict) -> list[Measurement]:
        lab = make_labels(rate=f"{float(run['rate']):g}", **labels)
        ms = [
            Measurement("ray-serve", "requests_per_s", float(run["achieved_per_s"]), "requests/s", lab),
            Measurement("ray-serve", "requests", float(run["requests"]), "count", lab),
            Measurement("ray-serve", "errors", float(run["errors"]), "count", lab),
            Measurement(
                "ray-serve", "error_rate", float(run["errors"]) / float(run["requests"]), "ratio", lab
            ),
        ]
        for pct in ("p50", "p90", "p99"):
            if run.get(f"{pct}_ms") is not None:
                ms.append(Measurement("ray-serve", f"latency.{pct}", float(run[f"{pct}_ms"]), "ms", lab))
        return ms

    runs = _read("INFERENCE", tagged(text, "INFERENCE"), lambda r: f"{float(r['rate']):g}", read)
    if not runs:
        raise MeasurementParseError("inference: the job printed no INFERENCE line")
    return [m for _, ms in sorted(runs.items(), key=lambda kv: float(kv[0])) for m in ms]


def error_rate_failures(measurements: list[Measurement], max_error_rate: float) -> list[str]:
    """One sentence per offered rate whose ``error_rate`` is above ``max_error_rate`` (a
    fraction, 0..1), naming the rate, the errors, the requests and the threshold."""
    by_rate: dict[str, dict[str, float]] = {}
    for m in measurements:
        if m.tool == "ray-serve" and m.field in ("error_rate", "errors", "requests"):
            by_rate.setdefault(str(m.label("rate")), {})[m.field] = m.value
    return [
        f"at {rate} requests/s {v['errors']:.0f} of {v['requests']:.0f} requests failed "
        f"(error rate {v['error_rate']:.3f} above {max_error_rate:g})"
        for rate, v in sorted(by_rate.items(), key=lambda kv: float(kv[0]))
        if v["error_rate"] > max_error_rate
    ]


@dataclass(frozen=True)
class Resume:
    """What fleet_training.py's fault-tolerance mode printed: ``checkpoints``, the steps of
    the checkpoints Ray Train's controller registered (``CHECKPOINT`` lines: every worker
    reported that step; a step only rank 0 reported, ``REPORTED``, is not one) before the
    first restart; ``starts``, each worker group's
    (first step, checkpoint step it resumed from or None) in order; ``final_step``, the last
    step the run reported (None when it did not finish)."""

    checkpoints: list[int]
    starts: list[tuple[int, int | None]]
    final_step: int | None


def parse_resume(text: str) -> Resume:
    """The :class:`Resume` of a fault-tolerance run's log (``START``, ``CHECKPOINT`` and
    ``RESULT`` lines, in the log's order). Raises MeasurementParseError when no START line
    is found."""
    checkpoints: list[int] = []
    starts: list[tuple[int, int | None]] = []
    final = None
    for line in text.splitlines():
        for tag in ("START", "CHECKPOINT", "RESULT"):
            _, sep, payload = line.partition(f"{tag} ")
            if not sep or not payload.startswith("{"):
                continue
            data = json.loads(payload)
            if tag == "START":
                resumed = data["resumed_from"]
                starts.append((int(data["step"]), None if resumed is None else int(resumed)))
            elif tag == "CHECKPOINT" and len(starts) == 1:
                checkpoints.append(int(data["step"]))
            elif tag == "RESULT" and data.get("final_step") is not None:
                final = int(data["final_step"])
    if not starts:
        raise MeasurementParseError("training: the job printed no START line")
    return Resume(checkpoints, starts, final)
