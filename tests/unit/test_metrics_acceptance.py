"""NodeAcceptance: thresholds per site, role or GPU model against measurements."""

from __future__ import annotations

import json
from pathlib import Path

from swarm_infra.metrics.acceptance import NOT_SIMULATED, NodeFacts, evaluate, matches
from swarm_infra.metrics.fio import parse_fio
from swarm_infra.metrics.measurement import Measurement, make_labels

DATA = Path(__file__).resolve().parents[1] / "data" / "metrics"
GPU = NodeFacts("gpu-1", "fra1", ("gpu-worker",), ("RTX-4090",), simulated_gpu=True)
CPU = NodeFacts("cpu-1", "tyo1", ("cpu-worker",), (), simulated_gpu=False)


def test_matching_by_site_role_and_gpu_model():
    assert matches({}, CPU) and matches({"site": "fra1", "gpu_model": "RTX-4090"}, GPU)
    assert not matches({"role": "gpu-worker"}, CPU) and not matches({"site": "fra1"}, CPU)


def test_thresholds_pass_and_fail_with_values_in_the_thresholds_units():
    fio_text = (DATA / "fio-randread-4k-qd32.json").read_text()
    job = json.loads(fio_text)["jobs"][0]["read"]
    iops, p99_ms = job["iops"], job["clat_ns"]["percentile"]["99.000000"] / 1e6
    ms = [
        *parse_fio(fio_text, node="cpu-1"),
        Measurement(
            "iperf3",
            "end.sum_received.bits_per_second",
            250000000.0,
            "bits/s",
            make_labels(src="cpu-1", dst="hub", path="mesh"),
        ),
    ]
    rules = (
        ({}, {"min_scratch_iops": iops / 2, "max_storage_p99_ms": p99_ms * 2}),  # passes
        ({"site": "tyo1"}, {"min_scratch_iops": iops * 2, "min_mesh_bandwidth_to_hub_mbit": 300.0}),
        ({"role": "gpu-worker"}, {"min_tflops": 50.0}),  # not for cpu-1
    )
    got = {(v.threshold_name, v.threshold): v for v in evaluate(rules, [CPU], ms)}
    assert len(got) == 4
    assert got[("min_scratch_iops", iops / 2)].passed and got[("max_storage_p99_ms", p99_ms * 2)].passed
    assert got[("max_storage_p99_ms", p99_ms * 2)].value == p99_ms
    assert not got[("min_scratch_iops", iops * 2)].passed
    bw = got[("min_mesh_bandwidth_to_hub_mbit", 300.0)]
    assert not bw.passed and bw.value == 250.0


def test_simulated_gpu_is_never_a_number_and_missing_data_fails():
    verdicts = evaluate((({}, {"min_tflops": 50.0, "max_rtt_to_head_ms": 20.0}),), [GPU], [])
    assert [(v.threshold_name, v.value, v.passed, v.note) for v in verdicts] == [
        ("min_tflops", None, False, NOT_SIMULATED),
        ("max_rtt_to_head_ms", None, False, "not measured"),
    ]
