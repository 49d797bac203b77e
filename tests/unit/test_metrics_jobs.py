"""The Ray jobs' log lines through metrics.jobs, and fleetrun's use of them.

The log lines are the format jobs/fleet_training.py and jobs/fleet_inference.py print, as
Ray 2.60 forwards them (tried on this host against a local Ray cluster of three nodes with
torch 2.13.0+cpu: a worker's line arrives prefixed with its actor, sometimes twice). The
figures are recomputed here from the numbers on the lines with the definitions the module
names (nccl-tests doc/PERFORMANCE.md for busbw), never copied from the parser's output.
"""

from __future__ import annotations

import json
import shlex
import statistics
from pathlib import Path

import pytest

from swarm_infra.metrics import fleetrun, jobs
from swarm_infra.metrics.measurement import MeasurementParseError
from swarm_infra.metrics.targets import NodeTarget, RayTarget

W = "\x1b[36m(RayTrainWorker pid=30587)\x1b[0m "
C = "\x1b[36m(TrainController pid=27495)\x1b[0m "


def training_line(workers: int, scaling: str, rates: list[float], batch: int) -> str:
    run = {
        "backend": "gloo", "global_batch": batch, "ifname": "wg0", "max": max(rates),
        "median": statistics.median(rates), "min": min(rates), "samples_per_s": rates,
        "scaling": scaling, "steps": 30, "workers": workers,
    }  # fmt: skip
    return "TRAINING " + json.dumps(run, sort_keys=True)  # the driver's (jobs/fleet_training.py publish)


def allreduce_line(workers: int, size: int, seconds: float) -> str:
    run = {
        "algbw_bytes_per_s": size / seconds, "backend": "gloo", "busbw_bytes_per_s": 0.0,
        "bytes": size, "ifname": "wg0", "iterations": 5, "seconds": seconds, "workers": workers,
    }  # fmt: skip
    return "ALLREDUCE " + json.dumps(run, sort_keys=True)


RATES = {
    ("weak", 1): [30100.0, 29000.0, 31000.0],
    ("strong", 1): [30500.0, 30000.0, 29900.0],
    ("weak", 2): [50467.19, 49498.34, 51000.0],
    ("strong", 2): [26100.84, 38042.62, 30000.0],
}
LOG = "\n".join(
    [
        "Job submission server address: http://10.210.0.140:8265",
        *(training_line(n, k, r, 128 * (n if k == "weak" else 1)) for (k, n), r in RATES.items()),
        # Printed twice: it counts once.
        training_line(2, "strong", RATES[("strong", 2)], 128),
        allreduce_line(2, 1024, 0.0040114244002324995),
        allreduce_line(2, 4 << 20, 0.006074924799759174),
        allreduce_line(4, 1 << 20, 0.01),
        'RESULT {"backend": "gloo", "ifname": "wg0", "mtu": 1420, "workers": 2}',
    ]
)


def test_a_workers_line_is_never_a_result_whatever_it_prints():
    """Issue #38 item 7: Ray forwards every worker's stdout to the driver, so a worker (another
    provider's machine) printed the figures the operator records. Only the driver's own lines
    count (jobs.tagged); a worker's arrives after Ray's prefix, which no control character,
    carriage return or line separator it prints can move it before."""
    forged = json.loads(training_line(1, "weak", [9e9], 128).split(" ", 1)[1])
    body = json.dumps(forged, sort_keys=True)
    for trick in ("", "\r", "\x1b[0m", "\x1b[2K\r", "\u2028", "\x0b", "\x1c", "\x85", "\f"):
        log = LOG + "\n" + W + trick + "TRAINING " + body
        assert jobs.tagged(log, "TRAINING")[-1] != forged, repr(trick)
        assert 9e9 not in {m.value for m in jobs.parse_training(log)}, repr(trick)
    # A line the driver printed after a progress bar of its own (Ray Data's) is its own.
    drawn = "  \r\x1b[A\x1b[A\x1b[2K" + "TRAINING " + body
    assert jobs.tagged(LOG + "\n" + drawn, "TRAINING")[-1] == forged


def test_training_gives_weak_and_strong_scaling_with_their_spread_and_the_busbw_of_the_sweep():
    got = {
        (m.field, m.label("scaling"), m.label("workers"), m.label("bytes")): (m.value, m.unit)
        for m in jobs.parse_training(LOG, cluster="c")
    }
    for (kind, n), rates in RATES.items():
        key = (kind, str(n), None)
        assert got[("training.samples_per_s", *key)] == (statistics.median(rates), "samples/s")
        assert got[("training.samples_per_s.min", *key)][0] == min(rates)
        assert got[("training.samples_per_s.max", *key)][0] == max(rates)
        efficiency = statistics.median(rates) / (n * statistics.median(RATES[(kind, 1)]))
        assert got[("training.scaling_efficiency", *key)] == (pytest.approx(efficiency), "ratio")
    # Weak and strong are two figures for two workers, not one overwriting the other.
    assert (
        got[("training.scaling_efficiency", "weak", "2", None)]
        != got[("training.scaling_efficiency", "strong", "2", None)]
    )
    # nccl-tests: busbw = algbw * 2(n-1)/n; equal for two ranks, 1.5 x for four.
    algbw, unit = got[("allreduce.algbw", None, "2", "1024")]
    assert unit == "bytes/s" and algbw == pytest.approx(1024 / 0.0040114244002324995)
    assert got[("allreduce.busbw", None, "2", "1024")][0] == pytest.approx(algbw)
    assert got[("allreduce.busbw", None, "4", str(1 << 20))][0] == pytest.approx(1.5 * (1 << 20) / 0.01)
    assert {m.label("repeats") for m in jobs.parse_training(LOG) if m.label("scaling")} == {"3"}


def test_training_without_a_one_worker_run_or_any_line_is_an_error():
    with pytest.raises(MeasurementParseError, match="no TRAINING line for 1 worker"):
        jobs.parse_training(training_line(2, "weak", [1.0], 256))
    with pytest.raises(MeasurementParseError, match="no TRAINING line"):
        jobs.parse_training("Job failed\n")
    with pytest.raises(MeasurementParseError, match="lacks"):
        jobs.parse_training('TRAINING {"workers": 1}\n')


def inference_line(rate: float, requests: int, errors: int, p99: float | None) -> str:
    ok = requests - errors
    run = {
        "achieved_per_s": ok / (requests / rate), "connections": 64, "error_kinds": {"HTTP 503": errors},
        "error_rate": errors / requests, "errors": errors, "load_from": "10.210.0.96", "ok": ok,
        "p50_ms": 9.0, "p90_ms": 18.0, "p99_ms": p99, "rate": rate, "requests": requests, "seconds": 5.9,
    }  # fmt: skip
    return "INFERENCE " + json.dumps(run, sort_keys=True)  # the driver's (jobs/fleet_inference.py)


def test_inference_reports_percentiles_with_their_count_and_the_error_rate():
    log = "\n".join([inference_line(20, 1000, 0, 41.0), inference_line(80, 300, 3, None)])
    got = {(m.field, m.label("rate")): (m.value, m.unit) for m in jobs.parse_inference(log)}
    assert got[("latency.p99", "20")] == (41.0, "ms") and got[("requests", "20")] == (1000.0, "count")
    assert ("latency.p99", "80") not in got  # 300 requests: too few for a p99
    assert got[("error_rate", "80")] == (pytest.approx(3 / 300), "ratio")
    ms = jobs.parse_inference(log)
    assert jobs.error_rate_failures(ms, 0.02) == []
    (failure,) = jobs.error_rate_failures(ms, 0.005)
    assert failure.startswith("at 80 requests/s 3 of 300 requests failed") and "above 0.005" in failure
    with pytest.raises(MeasurementParseError, match="no INFERENCE line"):
        jobs.parse_inference("Traceback ...\n")


def test_a_resumed_run_says_which_checkpoint_it_started_from():
    log = "\n".join(
        [
            W + 'START {"host": "lab-gpu-1", "resumed_from": null, "step": 0, "workers": 2}',
            C + 'CHECKPOINT {"step": 19}',
            C + 'CHECKPOINT {"step": 39}',
            # Rank 0 reported step 59 too; the controller never registered it (rank 1 died).
            W + 'REPORTED {"loss": 0.05, "step": 59}',
            "(TrainController pid=2) Error count: 1 (max allowed: 2)",
            W + 'START {"host": "lab-gpu-1", "resumed_from": 39, "step": 40, "workers": 2}',
            C + 'CHECKPOINT {"step": 59}',
            'RESULT {"error": null, "final_step": 59}',
        ]
    )
    got = jobs.parse_resume(log)
    assert got.checkpoints == [19, 39] and got.starts == [(0, None), (40, 39)] and got.final_step == 59
    with pytest.raises(MeasurementParseError, match="no START line"):
        jobs.parse_resume("")


def _target(name: str, **kw) -> NodeTarget:
    base = {"site": "a", "underlay": "10.0.0.1", "mesh": "10.210.0.2", "nat": False, "scratch": None}
    return NodeTarget(name, **{**base, "gpu_backend": None, "head": False, **kw})


RAY = RayTarget("c", "head", "/opt/ray", "http://10.210.0.1:8265", "10.210.0.1", "/etc/ray/token")


def _run(
    stdout: str, rc: int, parts: list[str], gpu: str = "simulated"
) -> tuple[fleetrun.Outcome, list[str]]:
    seen: list[str] = []

    def shell(node: str, command: str, timeout_s: float, stdin: str | None = None) -> fleetrun.Result:
        seen.append(command)
        return fleetrun.Result(rc, stdout, "")

    targets = [
        _target("head", head=True, mesh_interface="wg0", mesh_mtu=1420),
        _target("w1", gpu_backend=gpu, ray_gpu_worker=True, mesh_interface="wg0", mesh_mtu=1420),
    ]
    return fleetrun.measure(targets, shell, parts, fleetrun.Options(), ray=RAY), seen


def test_an_error_rate_above_the_threshold_fails_the_run_and_keeps_the_figures():
    log = "\n".join([inference_line(20, 1000, 0, 41.0), inference_line(40, 1000, 200, 99.0)])
    outcome, _ = _run(log, 0, ["inference"])
    assert {m.label("rate") for m in outcome.measurements if m.field == "latency.p50"} == {"20", "40"}
    (failed,) = outcome.failed
    assert failed.part == "inference" and "200 of 1000 requests failed" in failed.why
    # Every request failing: no latency at all, still a failure (not a rate of 0 and exit 0).
    outcome, _ = _run(inference_line(20, 1000, 1000, None), 0, ["inference"])
    assert [n.what for n in outcome.failed] == ["Ray Serve error rate"]
    # A job that failed part-way keeps what it printed and is a failure.
    outcome, _ = _run(inference_line(20, 1000, 0, 41.0), 1, ["inference"])
    assert outcome.measurements and [n.why.startswith("the job failed") for n in outcome.failed] == [True]


def test_training_binds_its_collectives_to_the_mesh_interface_with_the_backend_the_gpus_allow():
    outcome, seen = _run(LOG, 0, ["training"])
    assert not outcome.failed and outcome.measurements
    argv = shlex.split(seen[0].split("python fleet_training.py", 1)[1].splitlines()[0])
    args = dict(zip(argv[::2], argv[1::2], strict=True))
    assert (args["--ifname"], args["--mtu"], args["--backend"]) == ("wg0", "1420", "gloo")
    _, seen = _run(LOG, 0, ["training"], gpu="nvml")
    assert "--backend nccl" in seen[0]


# Real output of jobs/fleet_training.py, captured on this host (tests/data/metrics/ray-train-*.log,
# their header says how): a single-node Ray 2.60.0 with two logical GPUs, torch 2.13.0+cpu, gloo on lo,
#   ray-train-stream.log:   --data stream --max-workers 2 --steps 10 --repeats 3 --warmup-steps 3
#                           --sweep-max-mib 0 --data-rows 16384 --nodes 192.0.2.2,192.0.2.2
#   ray-train-pipeline.log: --pipeline --steps 10 --repeats 3 --warmup-steps 3 (--batch 128,
#                           --micro-batches 4, --tolerance 1e-4 by default)
METRICS = Path(__file__).resolve().parents[1] / "data" / "metrics"
STEPS, REPEATS, BATCH, MICRO = 10, 3, 128, 4
# One streamed row: 64 float32 features and an int64 label (jobs/fleet_training.py digit_rows).
ROW_BYTES = 64 * 4 + 8


def test_streamed_training_reports_the_rows_and_bytes_each_worker_received_from_a_real_run():
    log = (METRICS / "ray-train-stream.log").read_text()
    got = jobs.parse_training(log, cluster="c")
    data = {
        (m.field, m.label("scaling"), m.label("workers"), m.label("rank")): (
            m.value,
            m.unit,
            m.label("address"),
        )
        for m in got
        if m.tool == "ray-data"
    }
    for workers in (1, 2):
        for scaling in ("weak", "strong"):
            per_worker = BATCH if scaling == "weak" else BATCH // workers
            for rank in range(workers):
                key = (scaling, str(workers), str(rank))
                # Every timed step took one batch of the worker's size from its shard.
                rows = per_worker * STEPS * REPEATS
                assert data[("rows", *key)] == (rows, "count", "192.0.2.2")
                assert data[("bytes", *key)] == (rows * ROW_BYTES, "bytes", "192.0.2.2")
                assert data[("wait", *key)][1] == "s" and data[("wait", *key)][0] >= 0
    assert ("rows", "weak", "2", "2") not in data  # as many ranks as workers
    # The throughput of a streamed run is its own series (label data=stream), recomputed
    # from the line's windows.
    lines = {(r["scaling"], r["workers"]): r["samples_per_s"] for r in jobs.tagged(log, "TRAINING")}
    figures = {
        (m.label("scaling"), int(m.label("workers") or 0)): m
        for m in got
        if m.field == "training.samples_per_s"
    }
    assert figures.keys() == lines.keys()
    for key, rates in lines.items():
        assert figures[key].value == statistics.median(rates) and figures[key].label("data") == "stream"
    # An in-memory run keeps the series it always had: no data label.
    assert {m.label("data") for m in jobs.parse_training(LOG)} == {None}


def test_a_data_line_whose_lists_disagree_is_an_error():
    line = (
        'DATA {"scaling": "weak", "workers": 2, "addresses": ["a"], '
        '"rows": [1, 2], "bytes": [1, 2], "wait_s": [0, 0]}'
    )
    with pytest.raises(MeasurementParseError, match="DATA line lacks"):
        jobs.parse_training(training_line(1, "weak", [1.0], 128) + "\n" + line)


def test_the_model_cut_over_two_workers_trains_as_the_whole_model_does_in_a_real_run():
    log = (METRICS / "ray-train-pipeline.log").read_text()
    [line] = jobs.tagged(log, "PIPELINE")
    got = {m.field: (m.value, m.unit) for m in jobs.parse_pipeline(log, cluster="c")}
    # The oracle the job ran: same seed, weights and batches, the whole model on one worker;
    # its loss at every step within the tolerance, and the run trained (the loss fell).
    assert got["pipeline.max_loss_diff"] == (line["max_loss_diff"], "nats") and line["match"] is True
    assert line["max_loss_diff"] <= 1e-4
    assert line["loss_last"] < line["loss_first"]
    assert line["total_steps"] == 3 + STEPS * REPEATS
    # Stage 0 sends one 256-wide float32 activation per sample of the batch.
    assert got["pipeline.activation_bytes"] == (BATCH * 256 * 4, "bytes")
    assert got["pipeline.samples_per_s"] == (statistics.median(line["samples_per_s"]), "samples/s")
    assert got["pipeline.reference_samples_per_s"][0] == statistics.median(line["reference_samples_per_s"])
    assert {m.labels for m in jobs.parse_pipeline(log)} == {
        (("micro_batches", str(MICRO)), ("repeats", str(REPEATS)), ("stages", "2"))
    }
    with pytest.raises(MeasurementParseError, match="no PIPELINE line"):
        jobs.parse_pipeline((METRICS / "ray-train-stream.log").read_text())


def test_training_workers_are_the_group_with_the_lowest_measured_mesh_rtt_pinned_in_rank_order():
    """``Options.training_workers``: the K GPU workers resolve.placement chooses from the
    mesh RTT (to each other and the head), passed to the job as --nodes (mesh addresses,
    rank order) and --max-workers K; without a measured group, nothing is submitted and the
    run says why (never an unplaced run reported as a placed one)."""
    seen: list[str] = []

    def shell(node: str, command: str, timeout_s: float, stdin: str | None = None) -> fleetrun.Result:
        seen.append(command)
        return fleetrun.Result(0, LOG, "")

    gpu = {"gpu_backend": "simulated", "ray_gpu_worker": True, "mesh_interface": "wg0", "mesh_mtu": 1420}
    targets = [
        _target("head", head=True, mesh="10.210.0.1"),
        _target("near", mesh="10.210.0.2", **gpu),
        _target("far", mesh="10.210.0.3", **gpu),
        _target("mid", mesh="10.210.0.4", **gpu),
    ]
    # head-near 1, head-mid 2, head-far 40: with the head as anchor, {near, mid} has the
    # lowest highest RTT (near-mid 3); near (1 + 3) is rank 0 before mid (2 + 3).
    rtt = {
        ("head", "near"): 1.0, ("head", "mid"): 2.0, ("head", "far"): 40.0,
        ("near", "mid"): 3.0, ("near", "far"): 41.0, ("far", "mid"): 39.0,
    }  # fmt: skip
    options = fleetrun.Options(training_workers=2)
    outcome = fleetrun.measure(targets, shell, ["training"], options, ray=RAY, rtt_ms=rtt)
    assert not outcome.failed
    argv = shlex.split(seen[0].split("python fleet_training.py", 1)[1].splitlines()[0])
    args = dict(zip(argv[::2], argv[1::2], strict=True))
    assert (args["--nodes"], args["--max-workers"]) == ("10.210.0.2,10.210.0.4", "2")
    # near-mid unmeasured: that group cannot be chosen; {far, mid} (highest 40: head-far)
    # beats {near, far} (41: near-far), and mid (2 + 39) is rank 0 before far (40 + 39).
    seen.clear()
    unmeasured = {k: v for k, v in rtt.items() if k != ("near", "mid")}
    fleetrun.measure(targets, shell, ["training"], options, ray=RAY, rtt_ms=unmeasured)
    assert "--nodes 10.210.0.4,10.210.0.3\n" in seen[0]
    # Nothing measured: nothing submitted, and the run says why.
    seen.clear()
    outcome = fleetrun.measure(targets, shell, ["training"], options, ray=RAY, rtt_ms={})
    (failed,) = outcome.failed
    assert not seen and failed.part == "training"
    assert failed.why.startswith("placement by RTT: no group of 2 has every RTT measured (none between ")


def test_streamed_data_and_the_pipeline_are_options_of_the_training_part():
    """``Options.training_data`` reaches the job as ``--data``; ``training_pipeline`` submits
    the job a second time with ``--pipeline`` and parses its PIPELINE line (here the real
    one); with one GPU worker the pipeline cannot run and the part says so."""
    pipeline_log = (METRICS / "ray-train-pipeline.log").read_text()
    seen: list[str] = []

    def shell(node: str, command: str, timeout_s: float, stdin: str | None = None) -> fleetrun.Result:
        seen.append(command)
        return fleetrun.Result(0, pipeline_log if "--pipeline" in command else LOG, "")

    gpu = {"gpu_backend": "simulated", "ray_gpu_worker": True, "mesh_interface": "wg0", "mesh_mtu": 1420}
    two = [_target("head", head=True), _target("w1", **gpu), _target("w2", **gpu)]
    options = fleetrun.Options(training_data="stream", training_pipeline=True)
    outcome = fleetrun.measure(two, shell, ["training"], options, ray=RAY)
    assert not outcome.failed and len(seen) == 2
    assert "--data stream" in seen[0] and "--pipeline" not in seen[0] and "--pipeline" in seen[1]
    assert {m.field for m in outcome.measurements} >= {"training.samples_per_s", "pipeline.max_loss_diff"}
    seen.clear()
    outcome = fleetrun.measure(two[:2], shell, ["training"], options, ray=RAY)
    assert len(seen) == 1 and [(n.what, n.why) for n in outcome.failed] == [
        ("Ray pipeline training", "the pipeline needs two GPU workers")
    ]


def test_a_failed_jobs_reason_is_the_jobs_own_last_line_not_the_ray_clis_closing_log(capsys):
    """CI saw "the job failed: ... INFO sdk.py:520 -- WebSocket closed for job ..." (the
    last line of `ray job submit`'s stderr), which says nothing. The banner and the status
    message below are printed by Ray's own CLI code (ray/dashboard/modules/job/cli.py)."""
    from ray.autoscaler._private.cli_logger import cli_logger
    from ray.dashboard.modules.job.cli import _log_big_error_msg

    reason = "training with 2 worker(s) failed: WorkerGroupStartupTimeoutError(...)"
    _log_big_error_msg("Job 'raysubmit_X' failed")
    cli_logger.print(
        f"Status message: Job entrypoint command failed with exit code 1, last available logs:\n{reason}",
        no_format=True,
    )
    banner = capsys.readouterr().out
    assert "Job 'raysubmit_X' failed" in banner
    stdout = f"TRAINING {{}}\n{reason}\n{banner}"
    stderr = (
        "2026-11-27 07:36:02,794\tINFO sdk.py:520 -- "
        "WebSocket closed for job raysubmit_X with close code 1000\n"
    )
    assert fleetrun.job_why(fleetrun.Result(1, stdout, stderr)) == reason
    # A job that never started has no line of its own: Ray's status message says why.
    _log_big_error_msg("Job 'raysubmit_Y' failed")
    cli_logger.print("Status message: Failed to set up runtime environment.", no_format=True)
    assert fleetrun.job_why(fleetrun.Result(1, capsys.readouterr().out, stderr)) == (
        "Failed to set up runtime environment."
    )
    # Nothing from Ray at all (ssh failed): the generic reason.
    assert fleetrun.job_why(fleetrun.Result(255, "", "ssh: connect to host: refused\n")) == (
        "ssh: connect to host: refused"
    )
