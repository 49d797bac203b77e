"""Which pairs the bandwidth tests use, and rounds that never share a node or link."""

from __future__ import annotations

from itertools import combinations

import pytest

from swarm_infra.metrics.schedule import PairTest, representative_pairs, schedule_rounds


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
