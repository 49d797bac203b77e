"""Ping measurements -> a LatencyMatrix the fleet loader accepts and the resolver uses."""

from __future__ import annotations

from swarm_infra.metrics.latency import current_relays, latency_matrix_yaml, site_rtt_ms
from swarm_infra.metrics.measurement import Measurement, make_labels
from swarm_infra.resolve import load_fleet


def _rtt(v: float, src: str, dst: str, path: str = "underlay") -> Measurement:
    return Measurement("ping", "rtt.p50", v, "ms", make_labels(src=src, dst=dst, path=path))


def _sites(tmp_path, names=("a", "b")) -> None:
    (tmp_path / "sites.yaml").write_text(  # a matrix's sites must be declared
        "".join(
            f"---\napiVersion: swarm.io/v1alpha1\nkind: Site\nmetadata: {{name: {s}}}\n"
            f"spec: {{region: r, underlay: {{cidr: 10.{i}.0.0/24}}}}\n"
            for i, s in enumerate(names, 1)
        )
    )


def test_per_direction_lowest_then_the_slower_direction_round_trips_through_the_loader(tmp_path):
    sites = {"a1": "a", "a2": "a", "b1": "b"}
    ms = [
        _rtt(30.0, "a1", "b1"),
        _rtt(33.0, "a2", "b1"),  # a -> b: the lowest of the two, 30
        _rtt(25.0, "b1", "a2"),  # b -> a: 25
        _rtt(1.0, "a1", "b1", "mesh"),  # not the underlay: left out
        _rtt(0.3, "a1", "a2"),
    ]
    rtt = site_rtt_ms(ms, sites)
    assert rtt == {("a", "b"): max(min(30.0, 33.0), 25.0), ("a", "a"): 0.3}
    (tmp_path / "lm.yaml").write_text(latency_matrix_yaml(rtt, measured_at="2026-11-24T22:00:00Z"))
    _sites(tmp_path)
    fleet = load_fleet([tmp_path]).fleet
    assert fleet.latency is not None
    assert fleet.latency.rtt_ms[("b", "a")] == 30.0 and fleet.latency.rtt_ms[("a", "a")] == 0.3
    assert dict(fleet.latency.relays) == {}


def test_a_site_reporting_fast_pings_cannot_lower_a_pair_the_other_site_measured():
    """Each figure is what its source node says. A relay site's node claiming 0.5 ms to
    every site would, as the lowest of all, draw their pairs; the other side's own pings
    bound it. A pair measured one way only (the other end behind NAT) keeps that figure."""
    sites = {"relay-1": "r", "x1": "x", "y1": "y"}
    ms = [
        _rtt(0.5, "relay-1", "x1"),  # the claim
        _rtt(42.0, "x1", "relay-1"),  # x's own measurement
        _rtt(17.0, "y1", "relay-1"),  # y behind NAT: only y -> r is measured
    ]
    assert site_rtt_ms(ms, sites) == {("r", "x"): 42.0, ("r", "y"): 17.0}


def test_the_matrix_records_the_fleets_current_relays_and_the_loader_reads_them(tmp_path):
    """What `swarm metrics --write-latency-matrix` records: the relay each NAT-to-NAT site
    pair goes through before the new figures (``current_relays``), for hysteresis."""
    _sites(tmp_path, ("a", "b", "c"))
    nodes = [("x", "a", "10.1.0.5", "cpu-worker", True), ("y", "b", "10.2.0.5", "cpu-worker", True)]
    nodes.append(("r1", "c", "10.3.0.5", "relay", False))
    (tmp_path / "nodes.yaml").write_text(
        "".join(
            f"---\napiVersion: swarm.io/v1alpha1\nkind: Node\nmetadata: {{name: {n}}}\n"
            f"spec: {{site: {s}, address: {ip}, roles: [{role}], hardware: {{cpus: 1, memory_gib: 1}}, "
            f"mesh: {{nat: {str(nat).lower()}}}}}\n"
            for n, s, ip, role, nat in nodes
        )
        + "---\napiVersion: swarm.io/v1alpha1\nkind: Mesh\nmetadata: {name: m}\nspec: {cidr: 10.9.0.0/24}\n"
    )
    relays = current_relays(load_fleet([tmp_path]).topology)
    assert relays == {("a", "b"): "r1"}  # the only relay, for the only NAT'd site pair
    (tmp_path / "lm.yaml").write_text(latency_matrix_yaml({("a", "c"): 12.0}, relays=relays))
    fleet = load_fleet([tmp_path]).fleet
    assert fleet.latency is not None and dict(fleet.latency.relays) == {("a", "b"): "r1"}


def test_a_nat_sites_legs_get_both_directions_from_the_mesh_where_the_underlay_has_one(tmp_path):
    """Behind NAT, y's nodes ping the relay's site over the underlay, but nothing outside y
    reaches y's underlay addresses: the relay's direction comes from its mesh pings (through
    the tunnel y keeps open). Both directions are written, so the resolver counts the leg as
    measured by both ends (resolve.mesh.agreed_rtt_ms), at the higher of the two; the
    underlay figure wins over the mesh one where a direction has both."""
    from swarm_infra.metrics.latency import site_directed_rtt_ms
    from swarm_infra.resolve.mesh import agreed_rtt_ms

    sites = {"relay-1": "r", "y1": "y", "x1": "x"}
    ms = [
        _rtt(17.0, "y1", "relay-1"),  # y -> r over the underlay (outbound through y's NAT)
        _rtt(19.0, "relay-1", "y1", "mesh"),  # r -> y: only over the mesh
        _rtt(40.0, "x1", "relay-1"),
        _rtt(41.0, "x1", "relay-1", "mesh"),  # the underlay's 40 counts for x -> r
        _rtt(0.4, "relay-1", "x1", "mesh"),
        _rtt(39.0, "relay-1", "x1"),
    ]
    directed = site_directed_rtt_ms(ms, sites)
    assert directed == {("r", "x"): 39.0, ("r", "y"): 19.0, ("x", "r"): 40.0, ("y", "r"): 17.0}
    rtt = site_rtt_ms(ms, sites)
    (tmp_path / "lm.yaml").write_text(latency_matrix_yaml(rtt, directed=directed))
    _sites(tmp_path, ("r", "x", "y"))
    fleet = load_fleet([tmp_path]).fleet
    agreed = agreed_rtt_ms(fleet.latency)
    assert agreed[("y", "r")] == agreed[("r", "y")] == 19.0  # both ends' figures, the higher
    assert agreed[("x", "r")] == 40.0
    # Without the mesh direction, y's leg is one end's word only: unmeasured for relays.
    (tmp_path / "lm.yaml").write_text(latency_matrix_yaml(rtt))
    assert ("y", "r") not in agreed_rtt_ms(load_fleet([tmp_path]).fleet.latency)
