"""Which node pairs the network measurement tests, and in what order.

Bandwidth is measured on one representative pair per site pair plus one pair inside each site
that has two nodes or more: S·(S-1)/2 + S tests at most for S sites, however many nodes there
are. The tests run in rounds; no two tests of a round share a node or a link, and a round
holds at most ``max_parallel`` tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import combinations

from swarm_infra.resolve.mesh import site_representatives


@dataclass(frozen=True)
class PairTest:
    """One bandwidth test: ``src`` sends to ``dst`` (node names), between ``src_site`` and ``dst_site``.

    ``intra_site`` when both ends are in the same site (the test then crosses the site's LAN,
    not its uplink).
    """

    src: str
    dst: str
    src_site: str
    dst_site: str

    @property
    def intra_site(self) -> bool:
        return self.src_site == self.dst_site

    def resources(self) -> frozenset[str]:
        """What the test occupies while it runs: both nodes, and the site uplinks or the site LAN."""
        links = (
            {f"lan:{self.src_site}"}
            if self.intra_site
            else {f"uplink:{self.src_site}", f"uplink:{self.dst_site}"}
        )
        return frozenset({f"node:{self.src}", f"node:{self.dst}", *links})


def representative_pairs(
    node_sites: Mapping[str, str], preferred: Mapping[str, str] | None = None
) -> list[PairTest]:
    """The pairs to measure, sorted by (src_site, dst_site).

    ``node_sites`` maps node name -> site name. A site's representative is
    :func:`swarm_infra.resolve.mesh.site_representatives`' (``preferred[site]``, its hub,
    when that node is in the site, else its first node by name): the node verification
    pings too. Inside a site
    the first other node by name sends to the representative (the direction every node's
    test to its hub has: :func:`admission_pairs`). Sites with a single node get no intra-site
    test.
    """
    members = _members(node_sites)
    rep = site_representatives(node_sites, preferred or {})
    pairs = [PairTest(rep[a], rep[b], a, b) for a, b in combinations(sorted(members), 2)]
    for site, nodes in members.items():
        others = [n for n in nodes if n != rep[site]]
        if others:
            pairs.append(PairTest(others[0], rep[site], site, site))
    return sorted(pairs, key=lambda p: (p.src_site, p.dst_site))


def _members(node_sites: Mapping[str, str]) -> dict[str, list[str]]:
    members: dict[str, list[str]] = {}
    for node, site in sorted(node_sites.items()):
        members.setdefault(site, []).append(node)
    return members


def admission_pairs(
    node_sites: Mapping[str, str], tests: list[PairTest], preferred: Mapping[str, str] | None = None
) -> list[PairTest]:
    """One more test for every node that none of ``tests`` involves: the node sends to its
    site's representative (NodeAcceptance's bandwidth to the hub needs a figure per node).
    S·(S-1)/2 + S + (N - 2·S) tests at most with ``tests`` from :func:`representative_pairs`:
    linear in the nodes, never N²."""
    covered = {n for t in tests for n in (t.src, t.dst)}
    rep = site_representatives(node_sites, preferred or {})
    return [
        PairTest(node, rep[site], site, site)
        for node, site in sorted(node_sites.items())
        if node not in covered and node != rep[site]
    ]


def schedule_rounds(tests: list[PairTest], max_parallel: int) -> list[list[PairTest]]:
    """Rounds of tests that may run at once: each round's tests share no resource, at most ``max_parallel``.

    Greedy first fit in the given order (deterministic). Raises ValueError when
    ``max_parallel`` < 1.
    """
    if max_parallel < 1:
        raise ValueError(f"max_parallel must be at least 1, not {max_parallel}")
    rounds: list[list[PairTest]] = []
    busy: list[set[str]] = []
    for test in tests:
        need = test.resources()
        for i, taken in enumerate(busy):
            if len(rounds[i]) < max_parallel and not (need & taken):
                rounds[i].append(test)
                taken |= need
                break
        else:
            rounds.append([test])
            busy.append(set(need))
    return rounds
