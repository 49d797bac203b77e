"""A LatencyMatrix document from ping measurements: site-to-site RTT for the mesh resolver."""

from __future__ import annotations

from collections.abc import Mapping

import yaml

from swarm_infra.metrics.measurement import Measurement
from swarm_infra.resolve.mesh import Topology


def site_rtt_ms(measurements: list[Measurement], site_of: Mapping[str, str]) -> dict[tuple[str, str], float]:
    """Round-trip time (ms) per unordered site pair, keyed (a, b) with a <= b: per direction
    (source site -> destination site) the lowest ping ``rtt.p50``, then the higher of the
    two directions when both are measured.

    Uses underlay measurements (``path`` label ``underlay`` or absent) whose ``src`` and ``dst``
    nodes ``site_of`` knows. The lowest per direction, since the resolver wants the path's
    own RTT, not a busy node's. The higher of the two directions, because a figure is what
    the *source* node reports, and relays are chosen from these figures: a node can claim a
    fast path from its site to any other, but cannot make the other site's own pings
    answer sooner. So a relay's site cannot draw other sites' pairs by its nodes' reports
    alone. A pair measured one way only (the other end behind NAT) keeps that one figure.
    """
    directed: dict[tuple[str, str], float] = {}
    for m in measurements:
        src, dst = m.label("src"), m.label("dst")
        if m.tool != "ping" or m.field != "rtt.p50" or m.label("path") not in (None, "underlay"):
            continue
        if src is None or dst is None or src not in site_of or dst not in site_of:
            continue
        key = (site_of[src], site_of[dst])
        directed[key] = min(directed.get(key, m.value), m.value)
    out: dict[tuple[str, str], float] = {}
    for (x, y), ms in directed.items():
        pair = (min(x, y), max(x, y))
        out[pair] = max(out.get(pair, ms), ms)
    return out


def site_directed_rtt_ms(
    measurements: list[Measurement], site_of: Mapping[str, str]
) -> dict[tuple[str, str], float]:
    """Round-trip time (ms) per direction between two different sites, keyed (source site,
    destination site): what the source site's nodes measured, the lowest ping ``rtt.p50``
    over the underlay, else over the mesh (``path`` ``mesh``). The mesh figure fills a
    direction the underlay cannot carry: nothing outside a NAT'd site pings its nodes'
    underlay addresses, but its relays and peers reach them over the mesh, straight through
    the tunnel the NAT'd node keeps open. The resolver chooses relays only on legs both
    ends measured (``resolve.mesh.agreed_rtt_ms``), which this gives the LatencyMatrix as
    ``a_to_b_ms`` and ``b_to_a_ms``."""
    best: dict[str, dict[tuple[str, str], float]] = {"underlay": {}, "mesh": {}}
    for m in measurements:
        src, dst = m.label("src"), m.label("dst")
        path = m.label("path") or "underlay"
        if m.tool != "ping" or m.field != "rtt.p50" or path not in best:
            continue
        if src is None or dst is None or src not in site_of or dst not in site_of:
            continue
        key = (site_of[src], site_of[dst])
        if key[0] != key[1]:
            best[path][key] = min(best[path].get(key, m.value), m.value)
    return dict(sorted({**best["mesh"], **best["underlay"]}.items()))


def node_rtt_ms(measurements: list[Measurement], path: str = "mesh") -> dict[tuple[str, str], float]:
    """Round-trip time (ms) per unordered node pair, keyed (a, b) with a < b, over ``path``
    (the ping ``path`` label: ``mesh``, the data path of the fleet's Ray jobs, or
    ``underlay``; an unlabelled figure counts as underlay): per direction the lowest ping
    ``rtt.p50``, then the higher of the two directions when both are measured, for the
    reasons :func:`site_rtt_ms` gives. For ``resolve.placement.closest_group``."""
    directed: dict[tuple[str, str], float] = {}
    for m in measurements:
        src, dst = m.label("src"), m.label("dst")
        if m.tool != "ping" or m.field != "rtt.p50" or (m.label("path") or "underlay") != path:
            continue
        if src is None or dst is None or src == dst:
            continue
        directed[(src, dst)] = min(directed.get((src, dst), m.value), m.value)
    out: dict[tuple[str, str], float] = {}
    for (x, y), ms in directed.items():
        pair = (min(x, y), max(x, y))
        out[pair] = max(out.get(pair, ms), ms)
    return out


def latency_matrix_yaml(
    rtt: Mapping[tuple[str, str], float],
    name: str = "measured",
    measured_at: str = "",
    relays: Mapping[tuple[str, str], str] | None = None,
    directed: Mapping[tuple[str, str], float] | None = None,
) -> str:
    """The LatencyMatrix document (schemas/latencymatrix.schema.json) as YAML, pairs sorted.

    ``directed``: per direction between two sites (:func:`site_directed_rtt_ms`), written as
    each pair's ``a_to_b_ms`` and ``b_to_a_ms``; a pair measured only there gets the higher
    of its directions as its ``rtt_ms``.

    ``relays``: the relay of each NAT-to-NAT site pair (a, b), a < b, as the fleet routes
    them now (``Topology.routes``), recorded so that the resolver's hysteresis keeps a pair
    on its relay unless the new figures beat it clearly; None or empty: none recorded.
    """
    spec: dict[str, object] = {}
    if measured_at:
        spec["measured_at"] = measured_at
    directed = directed or {}
    pairs = dict(rtt)
    for src, dst in directed:
        pair = (min(src, dst), max(src, dst))
        figures = [directed[k] for k in (pair, pair[::-1]) if k in directed]
        pairs.setdefault(pair, max(figures))
    entries: list[dict[str, object]] = []
    for (a, b), ms in sorted(pairs.items()):
        entry: dict[str, object] = {"a": a, "b": b, "rtt_ms": round(ms, 3)}
        for key, k in (("a_to_b_ms", (a, b)), ("b_to_a_ms", (b, a))):
            if k in directed:
                entry[key] = round(directed[k], 3)
        entries.append(entry)
    spec["pairs"] = entries
    if relays:
        spec["relays"] = [{"a": a, "b": b, "relay": r} for (a, b), r in sorted(relays.items())]
    doc = {
        "apiVersion": "swarm.io/v1alpha1",
        "kind": "LatencyMatrix",
        "metadata": {"name": name},
        "spec": spec,
    }
    return yaml.safe_dump(doc, sort_keys=False)


def current_relays(topology: Topology | None) -> dict[tuple[str, str], str]:
    """The relay of each NAT-to-NAT site pair as ``topology`` routes it (for ``relays``)."""
    return {pair: route.relay for pair, route in topology.routes.items()} if topology else {}
