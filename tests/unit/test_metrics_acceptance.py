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


def test_rtt_to_head_is_the_ping_to_the_head_and_the_head_itself_passes():
    def rtt(src: str, dst: str, ms: float) -> Measurement:
        return Measurement("ping", "rtt.p50", ms, "ms", make_labels(src=src, dst=dst, path="mesh"))

    head = NodeFacts("h1", "fra1", ("head",), (), False, head="h1")
    near = NodeFacts("w1", "fra1", ("gpu-worker",), (), False, head="h1")
    far = NodeFacts("w2", "tyo1", ("gpu-worker",), (), False, head="h1")
    # w1's slow ping goes to w2, not to the head: it does not count against w1.
    ms = [rtt("w1", "h1", 1.5), rtt("w1", "w2", 250.0), rtt("w2", "h1", 240.0)]
    verdicts = evaluate((({}, {"max_rtt_to_head_ms": 100.0}),), [head, near, far], ms)
    assert [(v.node, v.value, v.passed) for v in verdicts] == [
        ("h1", 0.0, True),
        ("w1", 1.5, True),
        ("w2", 240.0, False),
    ]


def test_bandwidth_to_the_hub_counts_the_nodes_tests_sending_or_receiving():
    def bw(src: str, dst: str, mbit: float) -> Measurement:
        labels = make_labels(src=src, dst=dst, path="mesh", streams=1)
        return Measurement("iperf3", "end.sum_received.bits_per_second", mbit * 1e6, "bits/s", labels)

    hub = NodeFacts("hub", "fra1", ("relay",), (), False)
    spoke = NodeFacts("s1", "fra1", ("gpu-worker",), (), False)
    verdicts = evaluate(
        (({}, {"min_mesh_bandwidth_to_hub_mbit": 500.0}),), [hub, spoke], [bw("s1", "hub", 400.0)]
    )
    assert [(v.node, v.value, v.passed) for v in verdicts] == [("hub", 400.0, False), ("s1", 400.0, False)]
