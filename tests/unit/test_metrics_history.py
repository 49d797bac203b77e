"""History in SQLite and comparison with the previous run."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from swarm_infra.metrics.compare import DIRECTIONS, compare, direction
from swarm_infra.metrics.fio import parse_fio
from swarm_infra.metrics.fleetrun import overhead
from swarm_infra.metrics.history import History, RunInfo
from swarm_infra.metrics.iperf3 import parse_iperf3
from swarm_infra.metrics.measurement import Measurement, make_labels
from swarm_infra.metrics.ping import parse_ping
from swarm_infra.metrics.report import to_json, to_table

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


def test_directions_are_declared_per_field_and_an_unknown_field_is_not_judged():
    def pair(tool: str, field: str, before: float, after: float, unit: str = "count"):
        return [Measurement(tool, field, after, unit)], [Measurement(tool, field, before, unit)]

    # Worse in the field's own terms: more failed requests, more of the underlay lost to
    # WireGuard, more retransmits, a slower p99, fewer IOPS.
    for tool, field, before, after in (
        ("ray-serve", "errors", 0.0, 40.0),
        ("swarm", "wireguard.overhead", 5.0, 60.0),
        ("iperf3", "end.sum_sent.retransmits", 10.0, 200.0),
        ("ray-serve", "latency.p99", 100.0, 150.0),
        ("fio", "read.iops", 1000.0, 500.0),
        ("ping", "packet_loss", 0.0, 2.0),
    ):
        (change,) = compare(*pair(tool, field, before, after))
        assert change.regression and change.direction in ("higher", "lower"), (tool, field)
    # A field nobody declared: reported with its change, never judged either way.
    (unknown,) = compare(*pair("example-tool", "new.field", 0.0, 3.0))
    assert (unknown.regression, unknown.direction, unknown.change) == (False, None, float("inf"))
    assert direction(Measurement("example-tool", "new.field", 0, "count")) is None
    # Telemetry snapshots are declared as not judged.
    (power,) = compare(*pair("nvidia-smi", "power.draw", 300.0, 100.0, "W"))
    assert (power.regression, power.direction) == (False, "none")
    doc = json.loads(to_json(1, [unknown.current, power.current], [unknown, power]))
    assert [m["direction"] for m in doc["measurements"]] == ["unknown", "none"]
    assert to_table([unknown.current], [unknown]).splitlines()[1].endswith("+inf%  direction unknown")


def test_every_field_the_parsers_emit_has_a_declared_direction():
    ms = [
        *parse_fio((DATA / "fio-probe.json").read_text()),
        *parse_iperf3((DATA / "iperf3-p4.json").read_text()),
        *parse_ping((DATA / "ping-loopback.txt").read_text()),
        *overhead(
            [
                _m("end.sum_received.bits_per_second", 9.0, src="a", dst="b", streams="4", path=p)
                for p in ("mesh", "underlay")
            ]
        ),
    ]
    assert ms and [m.field for m in ms if direction(m) is None] == []
    assert set(DIRECTIONS.values()) <= {"higher", "lower", "none"}


def test_a_run_keeps_its_options_tool_versions_commit_and_what_was_not_measured(tmp_path):
    db = tmp_path / "m.db"
    info = RunInfo(
        parts=("network", "storage"),
        nodes=("n1", "n2"),
        options={"iperf3_duration_s": 10, "iperf3_streams": [1, 4], "limit": None},
        tool_versions={"fio": {"fio-3.33": ["n1", "n2"]}, "iperf3": {"iperf 3.12 (cJSON 1.7.15)": ["n1"]}},
        fleet_commit="0" * 40,
        not_measured=(
            {"node": "n2", "part": "storage", "what": "fio", "why": "no scratch", "failed": False},
        ),
    )
    h = History(db)
    one = h.record("lab", "2026-01-01T00:00:00+00:00", [], info)
    two = h.record("lab", "2026-01-02T00:00:00+00:00", [])
    h.close()
    h = History(db)
    assert h.info(one) == info and h.info(two) is None


def test_a_database_of_an_earlier_version_opens_and_its_runs_say_nothing_of_their_scope(tmp_path):
    db = tmp_path / "old.db"
    with sqlite3.connect(db) as old:  # the schema before run_info and not_measured existed
        old.executescript(
            "CREATE TABLE runs (id INTEGER PRIMARY KEY AUTOINCREMENT, started_at TEXT NOT NULL,"
            " fleet TEXT NOT NULL);"
            "CREATE TABLE measurements (run_id INTEGER NOT NULL, tool TEXT NOT NULL, field TEXT NOT NULL,"
            " unit TEXT NOT NULL, labels TEXT NOT NULL, value REAL NOT NULL);"
            "INSERT INTO runs (started_at, fleet) VALUES ('2026-01-01T00:00:00Z', 'lab');"
        )
    old.close()
    h = History(db)
    assert h.runs("lab") == [(1, "2026-01-01T00:00:00Z")] and h.info(1) is None
    run = h.record("lab", "2026-01-02T00:00:00Z", [], RunInfo(parts=("network",)))
    assert h.info(run) == RunInfo(parts=("network",))
