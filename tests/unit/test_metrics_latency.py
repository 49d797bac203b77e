"""Ping measurements -> a LatencyMatrix the fleet loader accepts and the resolver uses."""

from __future__ import annotations

from swarm_infra.metrics.latency import latency_matrix_yaml, site_rtt_ms
from swarm_infra.metrics.measurement import Measurement, make_labels
from swarm_infra.resolve import load_fleet


def _rtt(v: float, src: str, dst: str, path: str = "underlay") -> Measurement:
    return Measurement("ping", "rtt.p50", v, "ms", make_labels(src=src, dst=dst, path=path))


def test_lowest_underlay_rtt_per_unordered_site_pair_round_trips_through_the_loader(tmp_path):
    sites = {"a1": "a", "a2": "a", "b1": "b"}
    ms = [
        _rtt(30.0, "a1", "b1"),
        _rtt(25.0, "b1", "a2"),
        _rtt(1.0, "a1", "b1", "mesh"),
        _rtt(0.3, "a1", "a2"),
    ]
    rtt = site_rtt_ms(ms, sites)
    assert rtt == {("a", "b"): 25.0, ("a", "a"): 0.3}
    (tmp_path / "lm.yaml").write_text(latency_matrix_yaml(rtt, measured_at="2026-11-24T22:00:00Z"))
    (tmp_path / "sites.yaml").write_text(  # a matrix's sites must be declared
        "".join(
            f"---\napiVersion: swarm.io/v1alpha1\nkind: Site\nmetadata: {{name: {s}}}\n"
            f"spec: {{region: r, underlay: {{cidr: 10.{i}.0.0/24}}}}\n"
            for i, s in enumerate(("a", "b"), 1)
        )
    )
    fleet = load_fleet([tmp_path]).fleet
    assert fleet.latency is not None
    assert fleet.latency.rtt_ms[("b", "a")] == 25.0 and fleet.latency.rtt_ms[("a", "a")] == 0.3
