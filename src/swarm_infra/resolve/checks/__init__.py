"""Semantic checks: what JSON Schema cannot say. Each module checks one area.

Every check is a function ``(analysis) -> Iterator[Finding]`` over the built model; the
rule identifiers are listed in docs/fleet.md (Validation rules).
"""

from . import allocation, cluster, host_safety, network, nodes, profiles, pull, ray, references, storage

ALL = (
    *references.CHECKS,
    *nodes.CHECKS,
    *network.CHECKS,
    *allocation.CHECKS,
    *profiles.CHECKS,
    *host_safety.CHECKS,
    *storage.CHECKS,
    *cluster.CHECKS,
    *ray.CHECKS,
    *pull.CHECKS,
)
