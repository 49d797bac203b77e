"""A LatencyMatrix document from ping measurements: site-to-site RTT for the mesh resolver."""

from __future__ import annotations

from collections.abc import Mapping

import yaml

from swarm_infra.metrics.measurement import Measurement


def site_rtt_ms(measurements: list[Measurement], site_of: Mapping[str, str]) -> dict[tuple[str, str], float]:
    """The lowest ping ``rtt.p50`` (ms) per unordered site pair, keyed (a, b) with a <= b.

    Uses underlay measurements (``path`` label ``underlay`` or absent) whose ``src`` and ``dst``
    nodes ``site_of`` knows; the lowest, since the resolver wants the path's own RTT, not a
    busy node's.
    """
    out: dict[tuple[str, str], float] = {}
    for m in measurements:
        src, dst = m.label("src"), m.label("dst")
        if m.tool != "ping" or m.field != "rtt.p50" or m.label("path") not in (None, "underlay"):
            continue
        if src is None or dst is None or src not in site_of or dst not in site_of:
            continue
        a, b = sorted((site_of[src], site_of[dst]))
        out[(a, b)] = min(out.get((a, b), m.value), m.value)
    return out


def latency_matrix_yaml(
    rtt: Mapping[tuple[str, str], float], name: str = "measured", measured_at: str = ""
) -> str:
    """The LatencyMatrix document (schemas/latencymatrix.schema.json) as YAML, pairs sorted."""
    spec: dict[str, object] = {}
    if measured_at:
        spec["measured_at"] = measured_at
    spec["pairs"] = [{"a": a, "b": b, "rtt_ms": round(ms, 3)} for (a, b), ms in sorted(rtt.items())]
    doc = {
        "apiVersion": "swarm.io/v1alpha1",
        "kind": "LatencyMatrix",
        "metadata": {"name": name},
        "spec": spec,
    }
    return yaml.safe_dump(doc, sort_keys=False)
