"""Which pairs the bandwidth tests use, rounds that never share a node or link, and the
WireGuard overhead from their repeated runs."""

from __future__ import annotations

from itertools import combinations

import pytest

from swarm_infra.metrics.fleetrun import overhead
from swarm_infra.metrics.measurement import Measurement, make_labels
from swarm_infra.metrics.schedule import (
    PairTest,
    admission_pairs,
    representative_pairs,
    schedule_rounds,
)
from swarm_infra.resolve.mesh import site_representatives


def _fleet(sites: int, per_site: int) -> dict[str, str]:
    return {f"s{s}-n{n:02d}": f"s{s}" for s in range(sites) for n in range(per_site)}


@pytest.mark.parametrize("per_site", [2, 5, 40])
def test_pair_count_grows_with_sites_squared_not_nodes(per_site):
    sites = 4
    pairs = representative_pairs(_fleet(sites, per_site))
    assert len(pairs) == sites * (sites - 1) // 2 + sites  # the same for 8 nodes and for 160
    site_pairs = {frozenset((p.src_site, p.dst_site)) for p in pairs}
    assert site_pairs == {frozenset(c) for c in combinations([f"s{i}" for i in range(sites)], 2)} | {
        frozenset({f"s{i}"}) for i in range(sites)
    }


def test_single_node_site_has_no_intra_site_pair_and_preferred_hub_is_the_representative():
    nodes = {"a1": "a", "a2": "a", "a3": "a", "b1": "b"}
    pairs = representative_pairs(nodes, preferred={"a": "a3", "b": "nowhere"})
    # Inside a site the other node sends to the hub, as every node's admission test does.
    assert pairs == [PairTest("a1", "a3", "a", "a"), PairTest("a3", "b1", "a", "b")]


def test_rounds_share_no_node_or_link_and_respect_the_bound():
    tests = representative_pairs(_fleet(6, 3))
    for bound in (1, 2, 3, 100):
        rounds = schedule_rounds(tests, bound)
        assert sorted((t.src, t.dst) for r in rounds for t in r) == sorted((t.src, t.dst) for t in tests)
        for r in rounds:
            assert 1 <= len(r) <= bound
            for x, y in combinations(r, 2):
                assert not (x.resources() & y.resources()), (x, y)
    assert len(schedule_rounds(tests, 1)) == len(tests)


def test_disjoint_tests_run_together_and_a_shared_uplink_waits():
    ab, cd, ac = (
        PairTest("a1", "b1", "a", "b"),
        PairTest("c1", "d1", "c", "d"),
        PairTest("a2", "c2", "a", "c"),
    )
    assert schedule_rounds([ab, cd, ac], 4) == [[ab, cd], [ac]]  # ac shares a's uplink with ab
    lan_a = PairTest("a1", "a2", "a", "a")
    assert schedule_rounds([ab, lan_a], 4) == [[ab], [lan_a]]  # same node a1
    with pytest.raises(ValueError):
        schedule_rounds([ab], 0)


def test_every_node_but_its_sites_representative_sends_to_it():
    # What min_mesh_bandwidth_to_hub_mbit reads: one test per node, node -> its site's hub.
    nodes = _fleet(3, 4) | {"lone": "s9"}
    hubs = {"s1": "s1-n02"}
    tests = representative_pairs(nodes, hubs)
    tests += admission_pairs(nodes, tests, hubs)
    rep = site_representatives(nodes, hubs)
    to_hub = {(t.src, t.dst) for t in tests if t.intra_site}
    assert to_hub == {(n, rep[site]) for n, site in nodes.items() if n != rep[site]}
    assert ("s1-n00", "s1-n02") in to_hub and not any(t.src == rep[t.src_site] for t in tests if t.intra_site)


def test_wireguard_overhead_compares_the_medians_of_the_repeats():
    def bw(path: str, mbit: float, repeat: int) -> Measurement:
        labels = make_labels(src="a", dst="b", streams=4, path=path, repeat=repeat)
        return Measurement("iperf3", "end.sum_received.bits_per_second", mbit * 1e6, "bits/s", labels)

    # One disturbed underlay run (100) moves the median not at all: 1 - 800/1000.
    runs = [bw("underlay", 1000, 1), bw("mesh", 800, 1), bw("underlay", 100, 2), bw("mesh", 790, 2)]
    runs += [bw("underlay", 1010, 3), bw("mesh", 810, 3)]
    (m,) = overhead(runs)
    assert (m.field, m.unit, m.label("repeats"), m.label("streams")) == ("wireguard.overhead", "%", "3", "4")
    assert m.value == pytest.approx(100 * (1 - 800 / 1000))
    assert overhead(runs[:1]) == []  # one path only: no overhead
