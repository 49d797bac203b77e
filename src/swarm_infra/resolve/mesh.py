"""WireGuard mesh: address assignment and topology (peers, AllowedIPs, endpoints).

Addressing
    A node's mesh address is ``spec.mesh.address`` when pinned, else derived from its name
    alone: ``network + 1 + SHA-256(name) mod (usable hosts)``. It depends on nothing else,
    so adding or removing other nodes never moves it. When a derived address lands on
    another node's address the fleet is invalid (``mesh.address-collision``) until one of
    the two (normally the newer) is pinned: the stable choice cannot be made silently,
    because a resolver without state cannot know which node came first.

Topology
    Inside a site nodes reach each other on the underlay. A *full-mesh* site peers every
    node with every node of the site; in a *hub-and-spoke* site each node (a spoke) peers
    only with the site hub, which routes for it. Across sites, every node that is not a
    spoke peers with every other such node unless both are behind NAT; such a pair talks
    through a relay (a node with role ``relay``, not behind NAT): the relay with the lowest
    path RTT (source site -> relay site -> destination site; see ``relay_for``), ties going
    to the destination's own site, then to the first relay by name. A peer's
    AllowedIPs are the mesh addresses routed through it (its own, its spokes', and those
    of NAT'd nodes it relays for); a spoke's only peer, its hub, gets the whole mesh CIDR.
    PersistentKeepalive is set on the NAT'd side of every cross-site link.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..fleet.diagnostics import Finding
from ..fleet.model import Fleet, Mesh, Node
from .types import PeerState


def derived_address(cidr: ipaddress.IPv4Network, name: str) -> ipaddress.IPv4Address:
    """The address a node named ``name`` gets in ``cidr`` unless pinned (see module doc)."""
    usable = max(cidr.num_addresses - 2, 1)
    digest = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big")
    return cidr.network_address + 1 + digest % usable


def assign_addresses(
    mesh: Mesh, nodes: Mapping[str, Node]
) -> tuple[dict[str, ipaddress.IPv4Address], list[Finding]]:
    """Mesh address of every node, and findings for duplicates and collisions.

    Findings: ``mesh.address-outside-cidr`` (pinned address not in the mesh CIDR, or the
    network/broadcast address), ``mesh.address-duplicate`` (two pinned addresses equal),
    ``mesh.address-collision`` (a derived address equals another node's; not reported
    when the CIDR is too small for the fleet, which ``mesh.cidr-too-small`` reports).
    """
    findings: list[Finding] = []
    owner: dict[ipaddress.IPv4Address, Node] = {}
    out: dict[str, ipaddress.IPv4Address] = {}
    path = ("spec", "mesh", "address")
    for node in nodes.values():  # pinned first: they own their address
        addr = node.mesh_address
        if addr is None:
            continue
        if addr not in mesh.cidr or addr in (mesh.cidr.network_address, mesh.cidr.broadcast_address):
            findings.append(
                Finding(
                    node.source,
                    path,
                    "mesh.address-outside-cidr",
                    f"{addr} is not a usable host address of mesh CIDR {mesh.cidr}",
                )
            )
            continue
        if addr in owner:
            findings.append(
                Finding(
                    node.source,
                    path,
                    "mesh.address-duplicate",
                    f"{addr} is already pinned by node {owner[addr].name!r}",
                )
            )
            continue
        owner[addr] = node
        out[node.name] = addr
    room = len(nodes) <= mesh.cidr.num_addresses - 2
    for node in nodes.values():
        if node.mesh_address is not None:
            continue
        addr = derived_address(mesh.cidr, node.name)
        if addr in owner:
            if room:
                findings.append(
                    Finding(
                        node.source,
                        ("metadata", "name"),
                        "mesh.address-collision",
                        f"derived mesh address {addr} collides with node {owner[addr].name!r}; pin "
                        "one of them (normally the newer) with spec.mesh.address",
                    )
                )
            continue
        owner[addr] = node
        out[node.name] = addr
    return out, findings


@dataclass(frozen=True)
class Topology:
    """Who routes for whom: ``hub`` per hub-and-spoke site, ``spokes`` per hub, ``relays`` in name order."""

    hub: Mapping[str, str]
    spokes: Mapping[str, tuple[str, ...]]
    relays: tuple[str, ...]

    def is_spoke(self, node: Node) -> bool:
        hub = self.hub.get(node.site)
        return hub is not None and hub != node.name


def plan_topology(fleet: Fleet) -> tuple[Topology, list[Finding]]:
    """Pick each hub-and-spoke site's hub and the relays; report what cannot work.

    Findings: ``mesh.hub-missing`` (no hub named and not exactly one relay in the site),
    ``mesh.hub-invalid`` (the named hub is not a node of the site),
    ``mesh.hub-unreachable`` (the hub is behind NAT while other sites exist),
    ``reference.unresolved`` (a per-site override names an unknown site),
    ``mesh.relay-missing`` (NAT'd nodes in different sites and no relay to join them).
    """
    mesh = fleet.mesh
    assert mesh is not None
    findings: list[Finding] = []
    by_site: dict[str, list[Node]] = defaultdict(list)
    for node in fleet.nodes.values():
        by_site[node.site].append(node)
    for site in mesh.sites:
        if site not in fleet.sites and not fleet.may_declare("Site", site):
            findings.append(
                Finding(
                    mesh.source, ("spec", "sites", site), "reference.unresolved", f"no Site named {site!r}"
                )
            )
    hubs: dict[str, str] = {}
    complete = fleet.complete("Node")  # else a missing hub or relay may be a node that failed
    for site, members in sorted(by_site.items()):
        conf = mesh.site(site)
        if conf.topology != "hub-and-spoke":
            continue
        where = ("spec", "sites", site, "hub") if site in mesh.sites else ("spec", "topology")
        if conf.hub is not None:
            hub = next((n for n in members if n.name == conf.hub), None)
            if hub is None:
                if not complete:
                    continue
                findings.append(
                    Finding(
                        mesh.source,
                        where,
                        "mesh.hub-invalid",
                        f"hub {conf.hub!r} is not a node of site {site!r}",
                    )
                )
                continue
        else:
            relays = [n for n in members if "relay" in n.roles]
            if len(relays) != 1:
                if not complete:
                    continue
                findings.append(
                    Finding(
                        mesh.source,
                        where,
                        "mesh.hub-missing",
                        f"site {site!r} is hub-and-spoke but has {len(relays)} nodes with role relay; "
                        "give it exactly one or name the hub in spec.sites."
                        f"{site}.hub",
                    )
                )
                continue
            hub = relays[0]
        if hub.nat and len(by_site) > 1:
            findings.append(
                Finding(
                    hub.source,
                    ("spec", "mesh", "nat"),
                    "mesh.hub-unreachable",
                    f"node {hub.name!r} is the hub of site {site!r} but is behind NAT: "
                    "nodes of other sites cannot reach it",
                )
            )
            continue
        hubs[site] = hub.name
    spokes = {hub: tuple(n.name for n in by_site[site] if n.name != hub) for site, hub in hubs.items()}
    topo = Topology(hubs, spokes, ())
    relay_names = tuple(
        n.name for n in fleet.nodes.values() if "relay" in n.roles and not n.nat and not topo.is_spoke(n)
    )
    topo = Topology(hubs, spokes, relay_names)
    if not relay_names:
        natted_sites = sorted({n.site for n in fleet.nodes.values() if n.nat and not topo.is_spoke(n)})
        if len(natted_sites) > 1 and complete:
            findings.append(
                Finding(
                    mesh.source,
                    ("spec",),
                    "mesh.relay-missing",
                    f"sites {', '.join(natted_sites)} have nodes behind NAT that must reach each "
                    "other, but no node with role relay has a public endpoint",
                )
            )
    return topo, findings


def _endpoint(node: Node, same_site: bool, port: int) -> str | None:
    if same_site:
        return f"{node.address}:{port}"
    endpoint = node.public_endpoint
    if endpoint is None:
        return None
    return endpoint if ":" in endpoint else f"{endpoint}:{port}"


def _host_routes(ips: list[ipaddress.IPv4Address]) -> list[str]:
    return [f"{ip}/32" for ip in sorted(ips)]


def _merge(parts: list[list[str]]) -> list[str]:
    """One peer's AllowedIPs from several sorted lists (rare: relays), in address order."""
    if len(parts) == 1:
        return parts[0]
    return sorted((r for part in parts for r in part), key=lambda r: ipaddress.IPv4Network(r))


SiteRtt = Mapping[tuple[str, str], float]
"""Round-trip time in ms between two sites, keyed (site, site) in either order."""


def declared_site_rtt(fleet: Fleet) -> dict[tuple[str, str], float]:
    """RTT (ms) between every two sites from their declared ``wan.latency_ms`` (one-way to the core).

    a -> core -> b and back: ``2 * (latency_a + latency_b)``; a site with none declared counts 0.
    Inside a site the RTT is 0.
    """
    one_way = {name: float(site.wan.get("latency_ms", 0) or 0) for name, site in fleet.sites.items()}
    return {(a, b): 0.0 if a == b else 2 * (one_way[a] + one_way[b]) for a in one_way for b in one_way}


def _rtt(rtt: SiteRtt, a: str, b: str) -> float:
    if a == b:
        return rtt.get((a, b), 0.0)
    value = rtt.get((a, b), rtt.get((b, a)))
    return float("inf") if value is None else value


def relay_for(src_site: str, dst_site: str, relays: list[tuple[str, str]], rtt: SiteRtt) -> str:
    """The relay for traffic from a NAT'd node in ``src_site`` to one in ``dst_site``.

    ``relays``: (name, site) pairs, non-empty. The one with the lowest path RTT
    ``rtt(src, relay) + rtt(relay, dst)`` (ms; a missing site pair is infinitely far), ties
    to a relay in ``dst_site``, then by name.
    """
    return min(
        relays,
        key=lambda r: (_rtt(rtt, src_site, r[1]) + _rtt(rtt, r[1], dst_site), r[1] != dst_site, r[0]),
    )[0]


def peers(
    fleet: Fleet,
    topo: Topology,
    addresses: Mapping[str, ipaddress.IPv4Address],
    measured_rtt_ms: SiteRtt | None = None,
) -> tuple[dict[str, list[PeerState]], set[str]]:
    """Peer list of every node, and the nodes that route for others (they need IP forwarding).

    Peer lists: ``{node: [{name, allowed_ips, endpoint, persistent_keepalive_s}]}``.

    ``allowed_ips`` are CIDR strings in address order; ``endpoint`` is ``host:port`` or
    None (the peer connects to us); ``persistent_keepalive_s`` is 0 when not needed.
    Peers are in name order. Cost is O(nodes + non-spokes^2). Lists may be shared
    between peers and must not be mutated.

    Relays for NAT-to-NAT pairs are picked by ``relay_for`` from ``measured_rtt_ms`` (site
    pairs measured by ``swarm metrics``), falling back per site pair to the declared RTT.
    """
    mesh = fleet.mesh
    assert mesh is not None
    nodes = fleet.nodes
    port = {n.name: n.listen_port or mesh.listen_port for n in nodes.values()}
    outward = [n for n in nodes.values() if not topo.is_spoke(n)]
    # Addresses reached through each outward node: its own and its spokes'.
    # Routes reached through each outward node (its own address and its spokes'), built
    # once and shared by every peer list that names the node.
    behind = {
        n.name: _host_routes([addresses[n.name], *(addresses[s] for s in topo.spokes.get(n.name, ()))])
        for n in outward
    }
    rtt: dict[tuple[str, str], float] = declared_site_rtt(fleet) if topo.relays else {}
    for (a, b), ms in (measured_rtt_ms or {}).items():
        rtt[(a, b)] = rtt[(b, a)] = ms
    relay_sites = [(r, nodes[r].site) for r in topo.relays]
    chosen: dict[tuple[str, str], str] = {}  # (source site, destination site) -> relay

    result: dict[str, list[PeerState]] = {}
    forwarders = {hub for hub, spokes in topo.spokes.items() if spokes}
    whole_mesh = [str(mesh.cidr)]
    for n in nodes.values():
        if topo.is_spoke(n):
            hub = nodes[topo.hub[n.site]]
            result[n.name] = [
                {
                    "name": hub.name,
                    "allowed_ips": whole_mesh,
                    "endpoint": _endpoint(hub, True, port[hub.name]),
                    "persistent_keepalive_s": 0,
                }
            ]
    for n in outward:
        routes: dict[str, list[list[str]]] = defaultdict(list)
        for p in outward:
            if p is n:
                continue
            if n.site == p.site or not n.nat or not p.nat:
                routes[p.name].append(behind[p.name])
            elif relay_sites:
                key = (n.site, p.site)
                if key not in chosen:
                    chosen[key] = relay_for(n.site, p.site, relay_sites, rtt)
                routes[chosen[key]].append(behind[p.name])
                forwarders.add(chosen[key])
        for s in topo.spokes.get(n.name, ()):
            routes[s].append([f"{addresses[s]}/32"])
        entries: list[PeerState] = []
        for name in sorted(routes):
            p = nodes[name]
            same_site = p.site == n.site
            entries.append(
                {
                    "name": name,
                    "allowed_ips": _merge(routes[name]),
                    "endpoint": _endpoint(p, same_site, port[name]),
                    "persistent_keepalive_s": mesh.persistent_keepalive_s if n.nat and not same_site else 0,
                }
            )
        result[n.name] = entries
    return result, forwarders


@dataclass(frozen=True)
class MeshApply:
    """How the wireguard role applies a change of a node's MeshState (roles/wireguard):

    ``restart``: the interface address (or the interface itself) changes: wg-quick restarts
    it, and every tunnel of the node drops until its peers handshake again;
    ``syncconf``: peers, endpoints, AllowedIPs, keepalives or the listen port change:
    ``wg syncconf`` applies them and existing tunnels stay up;
    ``mtu``: the MTU changes: set on the running interface (``ip link set mtu``), no drop;
    ``forwarding``: IP forwarding (relays, hubs) changes: a sysctl, no drop.
    """

    restart: bool
    syncconf: bool
    mtu: bool
    forwarding: bool


def mesh_apply(before: Mapping[str, Any], after: Mapping[str, Any]) -> MeshApply:
    """What applying ``after`` on a node that runs ``before`` does (both MeshState dicts of
    :mod:`swarm_infra.resolve.types`; a node entering or leaving the mesh is not a change
    of a running interface, so both must be given)."""
    return MeshApply(
        restart=before["address"] != after["address"] or before["interface"] != after["interface"],
        syncconf=before["peers"] != after["peers"] or before["listen_port"] != after["listen_port"],
        mtu=before["mtu"] != after["mtu"],
        forwarding=before["forwarding"] != after["forwarding"],
    )
