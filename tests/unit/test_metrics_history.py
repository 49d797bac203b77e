"""History in SQLite, comparison with the previous run, and the Prometheus textfile."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarm_infra.metrics.compare import compare, higher_is_better
from swarm_infra.metrics.fio import parse_fio
from swarm_infra.metrics.history import History
from swarm_infra.metrics.measurement import Measurement, make_labels
from swarm_infra.metrics.prometheus import metric_name, render_textfile

DATA = Path(__file__).resolve().parents[1] / "data" / "metrics"


def _m(field: str, value: float, unit: str = "bits/s", **labels: str) -> Measurement:
    return Measurement("iperf3", field, value, unit, make_labels(**labels))


def test_history_keeps_runs_in_order_and_measurements_round_trip(tmp_path):
    db = tmp_path / "nested" / "metrics.db"
    first = parse_fio((DATA / "fio-randread-4k-qd32.json").read_text(), node="n1")
    h = History(db)
    one = h.record("lab", "2026-01-01T00:00:00Z", first)
    two = h.record("lab", "2026-01-02T00:00:00Z", first[:1])
    h.record("other", "2026-01-03T00:00:00Z", first[:1])
    h.close()
    h = History(db)  # reopened from disk
    assert [i for i, _ in h.runs("lab")] == [one, two]
    assert h.measurements(one) == first
    assert h.previous("lab", two) == one and h.previous("lab", one) is None


def test_direction_aware_regressions_beyond_the_threshold():
    prev = [
        _m("end.sum_received.bits_per_second", 1000.0, src="a"),
        Measurement("fio", "read.clat_ns.percentile.99.000000", 100.0, "ns"),
        Measurement("ping", "rtt.p50", 10.0, "ms"),
    ]
    cur = [
        _m("end.sum_received.bits_per_second", 850.0, src="a"),  # 15% slower: regression
        Measurement("fio", "read.clat_ns.percentile.99.000000", 80.0, "ns"),  # 20% faster: fine
        Measurement("ping", "rtt.p50", 10.5, "ms"),  # 5% worse: within 10%
        _m("end.sum_received.bits_per_second", 1.0, src="new"),  # nothing to compare with
    ]
    changes = compare(cur, prev)
    assert [(c.current.field, c.regression) for c in changes] == [
        ("end.sum_received.bits_per_second", True),
        ("read.clat_ns.percentile.99.000000", False),
        ("rtt.p50", False),
    ]
    assert changes[0].change == pytest.approx((850 - 1000) / 1000)
    assert [c.regression for c in compare(cur, prev, threshold=0.01)] == [True, False, True]
    with pytest.raises(ValueError):
        compare(cur, prev, threshold=-1)


def test_directions():
    assert higher_is_better(Measurement("fio", "read.iops", 1, "IOPS"))
    assert not higher_is_better(Measurement("ping", "packet_loss", 1, "%"))
    assert not higher_is_better(Measurement("iperf3", "end.sum_sent.retransmits", 1, "count"))


def test_textfile_parses_as_prometheus_text_with_labels_and_values():
    parser = pytest.importorskip("prometheus_client.parser")
    ms = parse_fio((DATA / "fio-randread-4k-qd32.json").read_text(), node='n"1')
    text = render_textfile(ms)
    families = {f.name: f for f in parser.text_string_to_metric_families(text)}
    assert set(families) == {metric_name(m) for m in ms}
    iops = families["swarm_fio_read_iops"].samples[0]
    expected = next(m for m in ms if m.field == "read.iops")
    assert iops.value == expected.value and iops.labels == {"job": "randread-4k", "node": 'n"1'}
    assert render_textfile([]) == ""
