"""Parsers of iperf3, fio and ping output, on real output from tests/data/metrics/regenerate.sh."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from swarm_infra.metrics.fio import block_size_bytes, parse_fio
from swarm_infra.metrics.iperf3 import parse_iperf3
from swarm_infra.metrics.measurement import MeasurementParseError
from swarm_infra.metrics.ping import parse_ping, percentile

DATA = Path(__file__).resolve().parents[1] / "data" / "metrics"


def _text(name: str) -> str:
    return (DATA / name).read_text()


def _by_field(measurements, unit=None):
    return {m.field: m for m in measurements if unit is None or m.unit == unit}


def test_iperf3_single_stream_reports_iperf3s_sums_in_bits_per_second():
    raw = json.loads(_text("iperf3-single.json"))
    got = _by_field(parse_iperf3(_text("iperf3-single.json"), src="a", dst="b", path="underlay"))
    assert got["end.sum_received.bits_per_second"].value == raw["end"]["sum_received"]["bits_per_second"]
    assert got["end.sum_sent.bits_per_second"].unit == "bits/s"
    assert got["end.sum_received.bits_per_second"].label("streams") == "1"
    assert got["end.sum_received.bits_per_second"].label("path") == "underlay"


def test_iperf3_parallel_sum_is_the_sum_of_its_four_streams():
    text = _text("iperf3-p4.json")
    raw = json.loads(text)
    got = _by_field(parse_iperf3(text))
    per_stream = [s["receiver"]["bits_per_second"] for s in raw["end"]["streams"]]
    assert len(per_stream) == 4
    assert got["end.sum_received.bits_per_second"].label("streams") == "4"
    assert got["end.sum_received.bits_per_second"].value == pytest.approx(sum(per_stream), rel=1e-6)
    assert got["end.sum_sent.retransmits"].unit == "count"


def test_iperf3_error_report_is_a_parse_error_naming_iperf3s_message():
    with pytest.raises(MeasurementParseError, match="iperf3: unable"):
        parse_iperf3(_text("iperf3-refused.json"))


@pytest.mark.parametrize("text", ["", "not json", "[]", '{"start": {}}'])
def test_iperf3_garbage_is_a_parse_error(text):
    with pytest.raises(MeasurementParseError):
        parse_iperf3(text)


def test_fio_randread_qd32_iops_and_p99_completion_latency():
    text = _text("fio-randread-4k-qd32.json")
    job = json.loads(text)["jobs"][0]
    assert job["job options"]["iodepth"] == "32" and job["job options"]["bs"] == "4k"
    got = _by_field(parse_fio(text, node="n1"))
    assert got["read.iops"].value == job["read"]["iops"] and got["read.iops"].unit == "IOPS"
    p99 = got["read.clat_ns.percentile.99.000000"]
    assert p99.unit == "ns" and p99.value == job["read"]["clat_ns"]["percentile"]["99.000000"]
    assert p99.label("jobname") == "randread-4k" and p99.label("node") == "n1"
    # What the job did, from its options: what NodeAcceptance's storage thresholds select on.
    assert (p99.label("rw"), p99.label("bs"), p99.label("iodepth")) == ("randread", "4096", "32")
    assert p99.label("job") is None  # Prometheus's scrape label, never a measurement's
    assert not any(m.field.startswith("write.") for m in got.values())  # a read-only job


def test_fio_sequential_bandwidth_in_bytes_per_second_despite_leading_notes():
    text = _text("fio-seq-1m.json")
    assert not text.startswith("{")  # fio printed notes before the JSON
    jobs = {j["jobname"]: j for j in json.loads(text[text.index("{") :])["jobs"]}
    got = parse_fio(text)
    for name, direction in (("seqread-1m", "read"), ("seqwrite-1m", "write")):
        mine = [(m.unit, m.value) for m in got if m.label("jobname") == name and "bw" in m.field]
        # fio's own bw_bytes, once: no second copy of the same figure in another unit.
        assert mine == [("bytes/s", jobs[name][direction]["bw_bytes"])]


def test_fio_job_shape_comes_from_job_then_global_options_then_fios_defaults():
    doc = json.loads(_text("fio-probe.json"))  # fio_command's real output: options given globally and per job
    assert doc["global options"]["direct"] == "1" and "rw" not in doc["global options"]
    shapes = {
        (m.label("jobname"), m.label("rw"), m.label("bs"), m.label("iodepth"))
        for m in parse_fio(json.dumps(doc))
    }
    assert shapes == {
        ("randread-4k-qd32", "randread", "4096", "32"),
        ("seqread-1m", "read", "1048576", "8"),
        ("seqwrite-1m", "write", "1048576", "8"),
    }
    # A job that states nothing: fio(1)'s defaults rw=read, bs=4096, iodepth=1.
    doc["global options"] = {"bs": "64k"}
    for job in doc["jobs"]:
        job["job options"] = {"name": job["jobname"]}
    shapes = {(m.label("rw"), m.label("bs"), m.label("iodepth")) for m in parse_fio(json.dumps(doc))}
    assert shapes == {("read", "65536", "1")}
    assert [block_size_bytes(b) for b in ("4k", "4K", "4KiB", "1m", "512", "8k,32k", "4k-16k")] == [
        "4096", "4096", "4096", "1048576", "512", "8192", "4k-16k",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no JSON"),
        ("{", "not JSON"),
        ('{"jobs": []}', "lacks 'jobs'"),
        ('{"jobs": [{"jobname": "x", "error": 5}]}', "failed with error 5"),
    ],
)
def test_fio_bad_output_is_a_parse_error(text, message):
    with pytest.raises(MeasurementParseError, match=message):
        parse_fio(text)


def test_ping_p99_of_twenty_replies_is_the_slowest_and_p50_lies_between():
    text = _text("ping-loopback.txt")
    rtt_min, _, rtt_max, _ = (float(x) for x in re.search(r"= ([0-9./]+) ms", text).group(1).split("/"))
    got = _by_field(parse_ping(text, src="a", dst="b", path="mesh"))
    assert got["rtt.p99"].value == rtt_max  # nearest rank of 99% of 20 is the 20th
    assert rtt_min <= got["rtt.p50"].value <= rtt_max
    assert got["packet_loss"].value == 0.0 and got["packet_loss"].unit == "%"


def test_ping_with_no_replies_reports_only_full_loss():
    text = (
        "PING 10.0.0.9 (10.0.0.9) 56(84) bytes of data.\n\n--- 10.0.0.9 ping statistics ---\n"
        "3 packets transmitted, 0 received, 100% packet loss, time 2040ms\n"
    )
    got = parse_ping(text)
    assert [(m.field, m.value) for m in got] == [("packet_loss", 100.0)]
    with pytest.raises(MeasurementParseError):
        parse_ping("ping: unknown host")


def test_percentile_is_nearest_rank():
    assert percentile([5.0, 1.0, 3.0, 2.0, 4.0], 50) == 3.0
    assert percentile([1.0, 2.0], 99) == 2.0
    with pytest.raises(ValueError):
        percentile([], 50)
