"""Which members a distributed job runs on, chosen from the measured RTT between them.

A synchronous data-parallel step (an all-reduce of the gradients) and a pipeline's
hand-off wait on their slowest link: a group of workers is as fast as the highest RTT
between two of its members. :func:`closest_group` picks, among the candidates, the ``k``
members whose highest pairwise RTT (and RTT to an ``anchor``, say the Ray head, when given)
is lowest; ``jobs/fleet_training.py --nodes`` then pins worker ``i`` to the ``i``-th member
(a Ray label selector on the node's ``ray.io/node-id``).

Pure: the RTTs come in as a mapping (``metrics.latency.node_rtt_ms`` makes one from ping
measurements); nothing here reads files or measures.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..errors import PlacementError as PlacementError

MAX_GROUPS = 200_000
"""Most candidate groups :func:`closest_group` compares (it tries every group of ``k``:
C(n, k) of them); a larger search is refused rather than approximated."""


@dataclass(frozen=True)
class Group:
    """A chosen group: ``members`` in rank order, the member with the lowest sum of RTTs to
    the other members and the anchor first (then by name); ``worst_rtt_ms`` the highest RTT
    (ms) between two members or a member and the anchor; ``total_rtt_ms`` the sum over
    those pairs."""

    members: tuple[str, ...]
    worst_rtt_ms: float
    total_rtt_ms: float


def rtt_between(rtt_ms: Mapping[tuple[str, str], float], a: str, b: str) -> float | None:
    """The RTT (ms) of the pair in either order, 0 for a node with itself, None when unmeasured."""
    if a == b:
        return 0.0
    found = rtt_ms.get((a, b), rtt_ms.get((b, a)))
    return None if found is None else float(found)


def closest_group(
    rtt_ms: Mapping[tuple[str, str], float],
    candidates: Sequence[str],
    k: int,
    anchor: str | None = None,
) -> Group:
    """The ``k`` candidates whose highest pairwise RTT is lowest.

    ``rtt_ms``: RTT in ms per node pair, in either order (a missing pair is unmeasured, never
    taken as fast). ``candidates``: node names (duplicates count once). ``anchor``: a node
    every member talks to as well (the Ray head, the data's source), counted in each
    group's pairs but never a member. Ties on the highest RTT go to the lower sum of RTTs,
    then to the names (sorted), so the choice is deterministic.

    Raises PlacementError when ``k`` is below 1 or above the number of candidates, when
    more than :data:`MAX_GROUPS` groups would be compared, or when every group has an
    unmeasured pair (naming one such pair).
    """
    nodes = sorted(set(candidates) - ({anchor} if anchor else set()))
    if k < 1 or k > len(nodes):
        raise PlacementError(f"cannot choose {k} of {len(nodes)} candidate(s): {', '.join(nodes) or 'none'}")
    if math.comb(len(nodes), k) > MAX_GROUPS:
        raise PlacementError(
            f"choosing {k} of {len(nodes)} candidates compares {math.comb(len(nodes), k)} groups, "
            f"more than {MAX_GROUPS}: name fewer candidates"
        )
    best: tuple[float, float, tuple[str, ...]] | None = None
    unmeasured: tuple[str, str] | None = None
    for group in itertools.combinations(nodes, k):
        ends = (*group, anchor) if anchor else group
        rtts = []
        for a, b in itertools.combinations(ends, 2):
            ms = rtt_between(rtt_ms, a, b)
            if ms is None:
                unmeasured = unmeasured or (a, b)
                break
            rtts.append(ms)
        else:
            key = (max(rtts, default=0.0), sum(rtts), group)
            if best is None or key < best:
                best = key
    if best is None:
        a, b = unmeasured or ("?", "?")
        raise PlacementError(f"no group of {k} has every RTT measured (none between {a} and {b})")
    worst, total, group = best
    others = (*group, anchor) if anchor else group

    def spread(node: str) -> float:
        return sum(rtt_between(rtt_ms, node, o) or 0.0 for o in others)

    return Group(tuple(sorted(group, key=lambda n: (spread(n), n))), worst, total)
