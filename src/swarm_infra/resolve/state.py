"""The whole desired state of a checked fleet: NodeState per node, ClusterState, Rollout.

Desired state is plain JSON data with sorted keys and name-ordered lists, so the same
declarations always give byte-identical ``json.dumps(..., sort_keys=True)`` output; plan,
diff and review rely on that. It holds no secrets: WireGuard peers are named, their public
keys are exchanged at converge time. Treat it as read-only: identical sub-structures (a
profile's GPU settings, a relay's AllowedIPs, the layout) are shared between nodes.
"""

from __future__ import annotations

from . import mesh
from .analysis import Analysis
from .cluster import cluster_state
from .node import NodeResolver
from .rollout import rollout_state
from .types import DesiredState, PeerState


def desired_state(a: Analysis) -> DesiredState:
    """``{"nodes": {name: NodeState}, "cluster": ClusterState, "rollout": RolloutState}``.

    ``a`` comes from :func:`swarm_infra.resolve.load_fleet` (errors already excluded); the
    shapes are in :mod:`swarm_infra.resolve.types`.
    """
    peers: dict[str, list[PeerState]] = {}
    forwarders: set[str] = set()
    if a.fleet.mesh is not None and a.topology is not None:
        peers, forwarders = mesh.peers(a.fleet, a.topology, a.addresses, a.controller_address)
    resolver = NodeResolver(a, peers, forwarders)
    nodes = {name: resolver.node_state(node) for name, node in a.fleet.nodes.items()}
    return {"nodes": nodes, "cluster": cluster_state(a, peers), "rollout": rollout_state(a)}
