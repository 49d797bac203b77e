"""Placement by measured latency: resolve.placement.closest_group over a node RTT matrix,
and metrics.latency.node_rtt_ms, which makes that matrix from ping measurements.

The matrix: a head and five GPU nodes over three sites, the figures a fleet's pings over
the mesh would give (sub-millisecond inside a site, tens of ms across). Each expected
group is derived below from the rule the module states (lowest highest-RTT, then lowest
sum, then names), by hand, next to the figures it follows from.
"""

from __future__ import annotations

import pytest

from swarm_infra.metrics.latency import node_rtt_ms
from swarm_infra.metrics.measurement import Measurement, make_labels
from swarm_infra.resolve.placement import MAX_GROUPS, PlacementError, closest_group

# Sites: a (head, a1, a2), b (b1, b2), c (c1).
RTT = {
    ("head", "a1"): 0.3, ("head", "a2"): 0.6, ("head", "b1"): 30.0, ("head", "b2"): 31.0,
    ("head", "c1"): 80.0,
    ("a1", "a2"): 0.5, ("a1", "b1"): 29.0, ("a1", "b2"): 30.5, ("a1", "c1"): 79.0,
    ("a2", "b1"): 29.5, ("a2", "b2"): 30.0, ("a2", "c1"): 81.0,
    ("b1", "b2"): 0.4, ("b1", "c1"): 60.0, ("b2", "c1"): 61.0,
}  # fmt: skip
GPUS = ["a1", "a2", "b1", "b2", "c1"]


def test_the_tightest_pair_is_chosen_and_an_anchor_draws_the_group_to_its_site():
    # Without an anchor, b1-b2 (0.4 ms) is the lowest RTT of any pair (a1-a2 is 0.5).
    assert closest_group(RTT, GPUS, 2).members == ("b1", "b2")
    # With the head as anchor, a group in site b pays head-b2 (31 ms); a1-a2 with the head:
    # max(0.5, 0.3, 0.6) = 0.6 ms.
    group = closest_group(RTT, GPUS, 2, anchor="head")
    assert group.members == ("a1", "a2") and group.worst_rtt_ms == 0.6
    assert group.total_rtt_ms == pytest.approx(0.5 + 0.3 + 0.6)
    # Rank order: a1's sum (0.5 + 0.3) is below a2's (0.5 + 0.6), so a1 is rank 0.
    assert closest_group(RTT, ["a2", "a1"], 2, anchor="head").members == ("a1", "a2")


def test_a_group_across_sites_is_judged_by_its_slowest_link_then_by_its_sum():
    # Three of five: any three span two sites. Without c1 the worst link is a-b; the
    # lowest a-b worst over {a1,a2,b1} is a2-b1 29.5 (a1-b1 29.0, a1-a2 0.5); {a1,b1,b2}
    # has a1-b2 30.5; {a2,b1,b2} a2-b1 29.5, a2-b2 30.0 -> 30.0. So {a1, a2, b1}.
    group = closest_group(RTT, GPUS, 3)
    assert set(group.members) == {"a1", "a2", "b1"} and group.worst_rtt_ms == 29.5
    # A tie on the worst link goes to the lower sum, before names: with a2-b2 at 29.0,
    # {a2,b1,b2} has worst 29.5 (a2-b1) and sum 29.5 + 29.0 + 0.4 = 58.9, below {a1,a2,b1}'s
    # 0.5 + 29.0 + 29.5 = 59.0 (same worst, 29.5, and first by name).
    tied = closest_group({**RTT, ("a2", "b2"): 29.0}, GPUS, 3)
    assert set(tied.members) == {"a2", "b1", "b2"} and tied.worst_rtt_ms == 29.5
    assert tied.total_rtt_ms == pytest.approx(58.9)


def test_an_unmeasured_pair_is_never_taken_as_fast():
    # b1-b2 unmeasured: the pair can no longer win; a1-a2 (0.5) does.
    partial = {k: v for k, v in RTT.items() if k != ("b1", "b2")}
    assert closest_group(partial, GPUS, 2).members == ("a1", "a2")
    # Every group of two among b1, b2 lacks its one pair.
    with pytest.raises(PlacementError, match=r"every RTT measured \(none between b1 and b2\)"):
        closest_group(partial, ["b1", "b2"], 2)


def test_impossible_or_too_large_choices_are_refused():
    with pytest.raises(PlacementError, match="cannot choose 6 of 5"):
        closest_group(RTT, GPUS, 6)
    with pytest.raises(PlacementError, match="cannot choose 0"):
        closest_group(RTT, GPUS, 0)
    # The anchor is never a member: choosing 2 of {head, a1} leaves one candidate.
    with pytest.raises(PlacementError, match="cannot choose 2 of 1"):
        closest_group(RTT, ["head", "a1"], 2, anchor="head")
    many = [f"n{i}" for i in range(40)]  # C(40, 10) is far above the bound
    with pytest.raises(PlacementError, match=f"more than {MAX_GROUPS}"):
        closest_group({}, many, 10)


def _ping(ms: float, src: str, dst: str, path: str | None) -> Measurement:
    return Measurement("ping", "rtt.p50", ms, "ms", make_labels(src=src, dst=dst, path=path))


def test_node_rtt_from_pings_takes_the_mesh_path_the_lowest_per_direction_and_the_slower_direction():
    ms = [
        _ping(0.9, "a1", "b1", "mesh"),
        _ping(0.7, "a1", "b1", "mesh"),  # a1 -> b1: the lowest, 0.7
        _ping(1.2, "b1", "a1", "mesh"),  # b1 -> a1: 1.2, the pair's figure (the slower way)
        _ping(0.1, "a1", "b1", "underlay"),  # another path: left out
        _ping(0.2, "a1", "c1", None),  # unlabelled: underlay
        _ping(5.0, "c1", "b1", "mesh"),  # one way only: kept
        Measurement("ping", "rtt.p99", 0.01, "ms", make_labels(src="a1", dst="c1", path="mesh")),
    ]
    assert node_rtt_ms(ms) == {("a1", "b1"): 1.2, ("b1", "c1"): 5.0}
    assert node_rtt_ms(ms, path="underlay") == {("a1", "b1"): 0.1, ("a1", "c1"): 0.2}
    # ... and the chooser reads it: a1-b1 (1.2) beats b1-c1 (5.0); a1-c1 has no mesh figure.
    assert closest_group(node_rtt_ms(ms), ["a1", "b1", "c1"], 2).members == ("a1", "b1")
