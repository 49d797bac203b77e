"""NodeAcceptance: thresholds per site, role or GPU model against measurements."""

from __future__ import annotations

import json
from pathlib import Path

from swarm_infra.metrics.acceptance import (
    NOT_SIMULATED,
    PART_OF,
    THE_HUB,
    NodeFacts,
    evaluate,
    matches,
    uncovered,
)
from swarm_infra.metrics.fio import parse_fio
from swarm_infra.metrics.measurement import Measurement, make_labels

DATA = Path(__file__).resolve().parents[1] / "data" / "metrics"
SCHEMA = Path(__file__).resolve().parents[2] / "schemas" / "nodeacceptance.schema.json"
GPU = NodeFacts("gpu-1", "fra1", ("gpu-worker",), ("RTX-4090",), simulated_gpu=True)
CPU = NodeFacts("cpu-1", "tyo1", ("cpu-worker",), (), simulated_gpu=False, hub="hub")


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
            make_labels(src="cpu-1", dst="hub", path="mesh", streams=4),
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


def test_bandwidth_to_the_hub_is_the_nodes_own_multi_stream_test_sending_to_its_hub():
    def bw(
        src: str, dst: str, mbit: float, streams: int = 4, path: str = "mesh", repeat: int = 1
    ) -> Measurement:
        labels = make_labels(src=src, dst=dst, path=path, streams=streams, repeat=repeat)
        return Measurement("iperf3", "end.sum_received.bits_per_second", mbit * 1e6, "bits/s", labels)

    hub = NodeFacts("hub", "fra1", ("relay",), (), False, hub="hub")
    spoke = NodeFacts("s1", "fra1", ("gpu-worker",), (), False, hub="hub")
    ms = [
        bw("s1", "hub", 600.0),
        bw("s1", "hub", 450.0, repeat=2),  # the worst repeat decides
        bw("s1", "hub", 100.0, streams=1),  # one TCP flow: not the threshold's figure
        bw("hub", "s1", 50.0),  # the other direction
        bw("s1", "tyo1-hub", 10.0),  # across sites, not to the hub
        bw("hub", "tyo1-hub", 5.0),  # the hub's own cross-site test
        bw("s1", "hub", 1.0, path="underlay"),  # not over wg0
    ]
    verdicts = evaluate((({}, {"min_mesh_bandwidth_to_hub_mbit": 500.0}),), [hub, spoke], ms)
    assert [(v.node, v.value, v.passed, v.note) for v in verdicts] == [
        ("hub", None, True, THE_HUB),
        ("s1", 450.0, False, ""),
    ]
    # Without a multi-stream test to the hub the node is not measured, whatever else it ran.
    (v,) = evaluate((({}, {"min_mesh_bandwidth_to_hub_mbit": 1.0}),), [spoke], ms[2:])
    assert (v.value, v.passed, v.note) == (None, False, "not measured")


def test_storage_thresholds_judge_the_4k_random_read_qd32_job_only():
    # fio_command's real output (tests/data/metrics/regenerate.sh): all three jobs of a run.
    text = (DATA / "fio-probe.json").read_text()
    jobs = json.loads(text)["jobs"]
    (rand,) = [
        j for j in jobs if j["job options"]["rw"] == "randread" and j["job options"]["iodepth"] == "32"
    ]
    iops, p99_ms = rand["read"]["iops"], rand["read"]["clat_ns"]["percentile"]["99.000000"] / 1e6
    seq = [j for j in jobs if j["job options"]["rw"] == "read"]
    # The fixture shows the defect: the sequential read does fewer IOPS, with a slower p99.
    assert seq and all(j["read"]["iops"] < iops / 2 for j in seq)
    assert all(j["read"]["clat_ns"]["percentile"]["99.000000"] / 1e6 > 2 * p99_ms for j in seq)
    rules = (({}, {"min_scratch_iops": iops / 2, "max_storage_p99_ms": p99_ms * 2}),)
    verdicts = evaluate(rules, [CPU], parse_fio(text, node="cpu-1"))
    assert [(v.threshold_name, v.value, v.passed) for v in verdicts] == [
        ("min_scratch_iops", iops, True),
        ("max_storage_p99_ms", p99_ms, True),
    ]
    # A file with sequential jobs only has no figure for them: not measured, never the wrong job.
    sequential = parse_fio((DATA / "fio-seq-1m.json").read_text(), node="cpu-1")
    assert [(v.value, v.note) for v in evaluate(rules, [CPU], sequential)] == [(None, "not measured")] * 2


def test_a_run_that_did_not_cover_a_threshold_is_named_per_part_and_node():
    head = NodeFacts("h1", "fra1", ("head",), (), False, head="h1", hub="h1")
    w1 = NodeFacts("w1", "fra1", ("gpu-worker",), (), False, head="h1", hub="h1")
    w2 = NodeFacts("w2", "tyo1", ("gpu-worker",), (), False, head="h1", hub="w3")
    rules = (
        ({}, {"max_rtt_to_head_ms": 100.0, "min_mesh_bandwidth_to_hub_mbit": 10.0}),
        ({"role": "gpu-worker"}, {"min_scratch_iops": 1000.0}),
    )
    nodes = [head, w1, w2]
    assert uncovered(rules, nodes, ["network", "storage"], ["h1", "w1", "w2", "w3"]) == []
    assert uncovered(rules, nodes, ["network", "storage"], None) == []  # imported: nodes not said
    assert uncovered(rules, nodes, ["network"], None) == [
        "the run did not measure storage, which min_scratch_iops needs"
    ]
    # A --limit run of w2 alone: w2's RTT needs the head, its bandwidth its site's hub.
    assert uncovered(rules, [w2], ["network", "storage"], ["w2"]) == [
        "the run did not measure h1, which max_rtt_to_head_ms of w2 needs",
        "the run did not measure w3, which min_mesh_bandwidth_to_hub_mbit of w2 needs",
    ]
    assert uncovered(rules, [w1], ["network", "storage"], ["h1"]) == [
        f"the run did not measure w1, which {t} of w1 needs"
        for t in ("max_rtt_to_head_ms", "min_mesh_bandwidth_to_hub_mbit", "min_scratch_iops")
    ]
    assert set(PART_OF) == set(
        json.loads(SCHEMA.read_text())["properties"]["spec"]["properties"]["rules"]["items"]["properties"]
    ) - {"match"}
