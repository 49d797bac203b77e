"""What `swarm metrics run` measures on each node, decided from the fleet and its desired state."""

from __future__ import annotations

from dataclasses import dataclass

from swarm_infra.fleet.model import Fleet
from swarm_infra.resolve.mesh import plan_topology
from swarm_infra.resolve.types import DesiredState


@dataclass(frozen=True)
class NodeTarget:
    """One node as the measurements see it.

    - ``underlay``: the node's underlay IPv4 address (NodeState.address).
    - ``mesh``: its mesh IPv4 address without the prefix (wg0), None when the fleet has no Mesh.
    - ``nat``: behind NAT, so no node of another site reaches its underlay address.
    - ``scratch``: the scratch mount path (fio runs there), None without scratch.
    - ``gpu_backend``: "nvml", "simulated", or None without GPUs.
    - ``head``: the node has the role ``head`` (``max_rtt_to_head_ms`` is measured to it).
    - ``hub``: the node stands for its site in bandwidth tests: the hub of a hub-and-spoke
      site, else the site's first relay, else its head (see :func:`fleet_targets`).
    - ``ray_gpu_worker``: a worker of the fleet's Ray cluster with GPUs (training and
      inference run there).
    - ``mesh_interface``, ``mesh_mtu``: the mesh's interface name and MTU on the node
      (NodeState.mesh), None without a Mesh: training binds its collectives' sockets to it.
    """

    name: str
    site: str
    underlay: str
    mesh: str | None
    nat: bool
    scratch: str | None
    gpu_backend: str | None
    head: bool
    hub: bool = False
    ray_gpu_worker: bool = False
    mesh_interface: str | None = None
    mesh_mtu: int | None = None

    def underlay_reachable_from(self, other: NodeTarget) -> bool:
        """Whether ``other`` can open a connection to this node's underlay address: always in
        its own site, and from other sites unless this node is behind NAT."""
        return other.site == self.site or not self.nat


@dataclass(frozen=True)
class RayTarget:
    """The fleet's own Ray cluster as the training and inference measurements reach it: jobs
    are submitted on the ``head`` node with its venv's ``ray`` to ``dashboard``
    (``http://<head mesh address>:<port>``), whose job API listens on the mesh only."""

    cluster: str
    head: str
    venv: str
    dashboard: str
    head_ip: str
    token: str  # the path of the cluster's token on the head (Ray's token authentication)


def ray_target(state: DesiredState) -> RayTarget | None:
    """The Ray cluster of the desired state, None when the fleet declares none."""
    for name, node in sorted(state["nodes"].items()):
        ray = node["ray"]
        if ray and ray["role"] == "head" and ray["dashboard"]:
            dash = ray["dashboard"]
            files = node["layout"]["files"]
            return RayTarget(
                ray["cluster"], name, files["ray_venv"]["path"], f"http://{dash['host']}:{dash['port']}",
                ray["node_ip"], files["ray_auth_token"]["path"],
            )  # fmt: skip
    return None


def fleet_targets(fleet: Fleet, state: DesiredState) -> list[NodeTarget]:
    """Every node of the desired state as a NodeTarget, in name order.

    A site's hub (``hub``) is the mesh's hub of a hub-and-spoke site (resolve.mesh's
    topology), else the site's first node by name with the role ``relay``, else the first
    with the role ``head``; a site with none of them has no hub (its first node by name
    stands for it).
    """
    topology, _ = plan_topology(fleet)
    hubs = dict(topology.hub)
    for role in ("relay", "head"):
        for name, node in sorted(state["nodes"].items()):
            if role in node["roles"]:
                hubs.setdefault(node["site"], name)
    out = []
    for name, node in sorted(state["nodes"].items()):
        mesh = node["mesh"]
        storage = node["storage"]
        out.append(
            NodeTarget(
                name=name,
                site=node["site"],
                underlay=node["address"],
                mesh=mesh["address"].split("/")[0] if mesh else None,
                nat=fleet.nodes[name].nat,
                scratch=storage["scratch"]["mount_path"] if storage else None,
                gpu_backend=node["gpu"]["backend"] if node["gpu"] else None,
                head="head" in node["roles"],
                hub=hubs.get(node["site"]) == name,
                ray_gpu_worker=bool(
                    node["ray"] and node["ray"]["role"] == "worker" and node["ray"]["num_gpus"]
                ),
                mesh_interface=mesh["interface"] if mesh else None,
                mesh_mtu=mesh["mtu"] if mesh else None,
            )
        )
    return out
