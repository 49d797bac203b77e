"""GPU capacity per flavor: what nominalQuota can add up to (validation and ClusterState)."""

from __future__ import annotations

from collections import defaultdict

from ..fleet.model import Fleet
from .catalog import gpu_catalog


def gpu_capacity(fleet: Fleet) -> dict[str, int]:
    """GPUs per flavor on nodes with role gpu-worker (models missing from the catalog are
    left out: the validator reports them)."""
    catalog = gpu_catalog()
    capacity: dict[str, int] = defaultdict(int)
    for node in fleet.nodes.values():
        if "gpu-worker" in node.roles:
            for slot in node.gpus:
                if slot.model in catalog:
                    capacity[catalog[slot.model]["flavor"]] += slot.count
    return dict(capacity)
