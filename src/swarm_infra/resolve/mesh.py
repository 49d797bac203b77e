"""WireGuard mesh: address assignment and topology (peers, AllowedIPs, endpoints).

Addressing
    A node's mesh address is ``spec.mesh.address`` when pinned. Otherwise it starts from its
    *derived* address, a function of its name alone (:func:`derived_address`:
    ``network + 1 + SHA-256(name) mod (usable hosts)``), in one of two modes:

    - Without a MeshAddresses document (small fleets): the derived address is the address.
      Adding or removing other nodes never moves it, but two names can hash to the same
      address (birthday bound: in a /16, even odds at about 300 nodes, ~760 colliding pairs
      expected at 10,000), and then the fleet is invalid (``mesh.address-collision``) until
      the addresses are recorded (``swarm mesh allocate``) or one of the two is pinned: a
      resolver without state cannot know which node came first.
    - With a MeshAddresses document (a record, like a lock file, written by
      ``swarm mesh allocate`` and reviewed): the address is the node's entry. Entries are
      never rewritten; a new node's entry is its derived address, or when a pin or another
      entry holds that, the next address after it that none holds (:func:`probe_address`,
      wrapping), so there are no collisions and no hand pins up to the CIDR's size, and
      additions and removals never move another node (:func:`allocate`). Validation
      requires the record to be exact: a node without an entry
      (``mesh.address-unrecorded``), an entry for no such unpinned node
      (``mesh.address-record-stale``), and an address held twice (``mesh.address-duplicate``)
      are errors at the node's or entry's line.

    IPv6 ULA addressing (a /64 would make hash collisions negligible) was not taken: the
    mesh address is also Ray's node IP, the firewall's member list and the lab's probe
    target, all IPv4 today (README, Mesh addressing).

Topology
    Inside a site nodes reach each other on the underlay. A *full-mesh* site peers every
    node with every node of the site; in a *hub-and-spoke* site each node (a spoke) peers
    only with the site hub, which routes for it. Across sites, every node that is not a
    spoke peers with every other such node unless both are behind NAT; such a pair talks
    through a relay (a node with role ``relay``, not behind NAT), one relay per site pair
    for both directions (see ``plan_relays``). A peer's AllowedIPs are the mesh addresses
    routed through it (its own, its spokes', and those of NAT'd nodes it relays for); a
    spoke's only peer, its hub, gets the whole mesh CIDR. PersistentKeepalive is set on
    the NAT'd side of every cross-site link.

Relays
    WireGuard decrypts at a relay: its provider can read, delay or drop what it carries. So
    a pair's relay is one of its own: in one of its two sites, or of one of their providers
    (who sees the traffic at its own end anyway), or of a provider the Mesh allows
    (``spec.relays.allowed_providers``); another provider's relay is used only when none of
    those exists, and is a warning (``mesh.relay-other-provider``). Among them a relay is
    chosen from what the fleet *measured* (the LatencyMatrix), never from what a site
    declares about itself (``wan.latency_ms`` is the lab's emulation input and a hint): a
    new site declaring 0 ms cannot draw other providers' pairs. A leg counts as measured
    only when both of its sites measured it, at the higher of the two figures
    (:func:`agreed_rtt_ms`): a ping's RTT is the pinging end's report, and the other end's
    root can delay its replies, so one end's figure alone is one party's word. Without a
    measurement a relay of the pair's own sites, then of their providers, is preferred;
    the rest is a per-pair hash, so no name sorts first for every pair. A recorded relay is
    kept unless a measured path is faster by more than a margin (hysteresis), and a relay
    carries at most ``Mesh.relay_max_site_pairs`` pairs. ``swarm review`` flags a relay
    that starts carrying another provider's pair (``relay-crosses-provider``).
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections import Counter, defaultdict
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from ..fleet.diagnostics import Finding
from ..fleet.model import Fleet, LatencyMatrix, Mesh, MeshAddresses, MeshController, Node
from .types import PeerState

Member = Node | MeshController
"""A holder of a mesh address: a node, or the controller (Mesh ``spec.controller``)."""


def members(mesh: Mesh, nodes: Mapping[str, Node]) -> dict[str, Member]:
    """The nodes and, when declared, the controller, by name: what holds mesh addresses.
    The controller is left out when a node has its name (``mesh.controller-name-taken``)."""
    ctl = mesh.controller
    if ctl is None or ctl.name in nodes:
        return dict(nodes)
    return {**nodes, ctl.name: ctl}


def _pin_path(m: Member) -> tuple[str, ...]:
    return ("spec", "controller", "address") if isinstance(m, MeshController) else ("spec", "mesh", "address")


def _name_path(m: Member) -> tuple[str, ...]:
    return ("spec", "controller") if isinstance(m, MeshController) else ("metadata", "name")


def _who(m: Member) -> str:
    return f"the controller {m.name!r}" if isinstance(m, MeshController) else f"node {m.name!r}"


def _usable(cidr: ipaddress.IPv4Network) -> int:
    """How many host addresses follow the network address (all but network and broadcast)."""
    return max(cidr.num_addresses - 2, 1)


def derived_address(cidr: ipaddress.IPv4Network, name: str) -> ipaddress.IPv4Address:
    """The *derived* (home) address of a node named ``name`` in ``cidr``: ``network + 1 +
    int(first 8 bytes of SHA-256(name), big-endian) mod (usable hosts)``. A function of the
    name alone: the address itself without a MeshAddresses record, where a new node's
    probe starts with one (module doc, Addressing)."""
    digest = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big")
    return cidr.network_address + 1 + digest % _usable(cidr)


def probe_address(
    cidr: ipaddress.IPv4Network, name: str, taken: Container[ipaddress.IPv4Address]
) -> ipaddress.IPv4Address | None:
    """The first address not in ``taken`` from ``name``'s derived address upwards through
    the usable hosts of ``cidr``, wrapping to the first after the last; None when every one
    is taken. Linear probing: at 10,000 nodes in a /16 (15% full) a probe reads about 1.1
    addresses on average."""
    usable = _usable(cidr)
    first = int(cidr.network_address) + 1
    home = int(derived_address(cidr, name)) - first
    for step in range(usable):
        addr = ipaddress.IPv4Address(first + (home + step) % usable)
        if addr not in taken:
            return addr
    return None


def _usable_host(cidr: ipaddress.IPv4Network, addr: ipaddress.IPv4Address) -> bool:
    return addr in cidr and addr not in (cidr.network_address, cidr.broadcast_address)


def _pinned(
    mesh: Mesh, nodes: Mapping[str, Member], findings: list[Finding]
) -> dict[ipaddress.IPv4Address, Member]:
    """Pinned addresses and their holders; pins outside the CIDR or held twice are findings."""
    owner: dict[ipaddress.IPv4Address, Member] = {}
    for node in nodes.values():
        addr = node.mesh_address
        if addr is None:
            continue
        path = _pin_path(node)
        if not _usable_host(mesh.cidr, addr):
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
                    f"{addr} is already pinned by {_who(owner[addr])}",
                )
            )
            continue
        owner[addr] = node
    return owner


def assign_addresses(
    mesh: Mesh,
    nodes: Mapping[str, Node],
    record: MeshAddresses | None = None,
    may_declare: Callable[[str], bool] = lambda name: False,
) -> tuple[dict[str, ipaddress.IPv4Address], list[Finding]]:
    """Mesh address of every node and of the controller when the Mesh declares one
    (``{name: address}``: :func:`members`), and findings (module doc, Addressing): the
    controller's address is pinned, derived or recorded like a node's and checked against
    the nodes' in the same pass. A holder whose address is in error is left out of the mapping.

    Findings: ``mesh.address-outside-cidr`` (a pin or entry not a usable host address of
    the CIDR), ``mesh.address-duplicate`` (a pin or entry equal to an earlier pin or entry),
    ``mesh.address-collision`` (without ``record``: a derived address equal to another
    node's; not reported when the CIDR is too small for the fleet, which
    ``mesh.cidr-too-small`` reports), ``mesh.address-unrecorded`` (with ``record``: an
    unpinned node without an entry), ``mesh.address-record-stale`` (an entry for a node
    that is not declared, or that pins its address; not for a name ``may_declare``
    accepts: a Node document that failed its schema may declare it). Cost O(nodes).
    """
    findings: list[Finding] = []
    held_by = members(mesh, nodes)
    owner = _pinned(mesh, held_by, findings)  # pins first: they own their address
    out = {node.name: addr for addr, node in owner.items()}
    if record is not None:
        return _recorded(mesh, held_by, record, may_declare, owner, out, findings)
    room = len(held_by) <= mesh.cidr.num_addresses - 2
    for node in held_by.values():
        if node.mesh_address is not None:
            continue
        addr = derived_address(mesh.cidr, node.name)
        if addr in owner:
            if room:
                findings.append(
                    Finding(
                        node.source,
                        _name_path(node),
                        "mesh.address-collision",
                        f"derived mesh address {addr} collides with {_who(owner[addr])}; record "
                        "the fleet's addresses with `swarm mesh allocate` (run it on the fleet before "
                        "this node was added, so that the running node keeps its address) or pin one "
                        "of them (normally the newer) with spec.mesh.address",
                    )
                )
            continue
        owner[addr] = node
        out[node.name] = addr
    return out, findings


def _recorded(
    mesh: Mesh,
    nodes: Mapping[str, Member],
    record: MeshAddresses,
    may_declare: Callable[[str], bool],
    owner: dict[ipaddress.IPv4Address, Member],
    out: dict[str, ipaddress.IPv4Address],
    findings: list[Finding],
) -> tuple[dict[str, ipaddress.IPv4Address], list[Finding]]:
    """:func:`assign_addresses` with a record: every unpinned node's address is its entry."""
    assert record.source is not None  # a record is a document
    held: dict[ipaddress.IPv4Address, str] = {a: f"pinned by {_who(n)}" for a, n in owner.items()}
    for name, addr in record.addresses.items():
        path = ("spec", "addresses", name)
        node = nodes.get(name)
        if node is None or node.mesh_address is not None:
            if node is None and may_declare(name):
                continue
            why = "no Node of that name is declared" if node is None else "the node pins spec.mesh.address"
            findings.append(
                Finding(
                    record.source,
                    path,
                    "mesh.address-record-stale",
                    f"entry for {name!r}: {why}; `swarm mesh allocate` drops the entry",
                )
            )
            continue
        if not _usable_host(mesh.cidr, addr):
            findings.append(
                Finding(
                    record.source,
                    path,
                    "mesh.address-outside-cidr",
                    f"{addr} is not a usable host address of mesh CIDR {mesh.cidr}",
                )
            )
            continue
        if addr in held:
            findings.append(
                Finding(record.source, path, "mesh.address-duplicate", f"{addr} is already {held[addr]}")
            )
            continue
        held[addr] = f"recorded for {_who(node)}"
        out[name] = addr
    for node in nodes.values():
        if node.mesh_address is None and node.name not in record.addresses:
            findings.append(
                Finding(
                    node.source,
                    _name_path(node),
                    "mesh.address-unrecorded",
                    f"{_who(node)} has no entry in MeshAddresses {record.name!r} "
                    f"({record.source.file}); run `swarm mesh allocate` and commit the record",
                )
            )
    return out, findings


def allocate(
    mesh: Mesh, nodes: Mapping[str, Node], record: Mapping[str, ipaddress.IPv4Address] | None = None
) -> tuple[dict[str, ipaddress.IPv4Address], list[str]]:
    """The record for ``nodes`` and the Mesh's controller (:func:`members`; ``{name:
    address}`` in name order, unpinned ones only) from the previous ``record`` (None: there
    was none), and what changed, as sentences.

    Every previous entry of a declared unpinned node is kept as it is, unless it is unusable
    (outside the CIDR, or held by a pin or an earlier entry); then, in name order, each
    node without an entry gets :func:`probe_address` past every pin and every entry so far.
    So no allocation moves a node that has a usable entry, and no address is held twice.
    Raises ValueError when the CIDR has no free address left for a node.
    """
    previous = dict(record or {})
    held_by = members(mesh, nodes)
    taken: set[ipaddress.IPv4Address] = {
        n.mesh_address for n in held_by.values() if n.mesh_address is not None
    }
    kept: dict[str, ipaddress.IPv4Address] = {}
    changes: list[str] = []
    for name, addr in previous.items():
        node = held_by.get(name)
        if node is None or node.mesh_address is not None:
            why = "no longer declared" if node is None else "now pinned"
            changes.append(f"dropped {name} ({addr}): {why}")
        elif not _usable_host(mesh.cidr, addr) or addr in taken:
            changes.append(f"re-allocating {name}: {addr} is outside {mesh.cidr} or held twice")
        else:
            kept[name] = addr
            taken.add(addr)
    for name, node in sorted(held_by.items()):
        if node.mesh_address is not None or name in kept:
            continue
        found = probe_address(mesh.cidr, name, taken)
        if found is None:
            raise ValueError(f"mesh CIDR {mesh.cidr} has no free address left for node {name!r}")
        home = derived_address(mesh.cidr, name)
        changes.append(f"added {name}: {found}" + ("" if found == home else f" (derived {home} is held)"))
        kept[name] = found
        taken.add(found)
    return dict(sorted(kept.items())), changes


def record_yaml(name: str, addresses: Mapping[str, ipaddress.IPv4Address]) -> str:
    """The MeshAddresses document (schemas/meshaddresses.schema.json) holding ``addresses``,
    as YAML, entries in name order. Names are DNS labels and addresses dotted quads (both
    checked by the schema on reading), so no value needs quoting."""
    lines = [
        "# Written by `swarm mesh allocate`: each node's mesh address. Entries are never changed;",
        "# review additions and removals like any other change.",
        "---",
        "apiVersion: swarm.io/v1alpha1",
        "kind: MeshAddresses",
        "metadata:",
        f"  name: {name}",
        "spec:",
        "  addresses:" + ("" if addresses else " {}"),
        *(f"    {n}: {a}" for n, a in sorted(addresses.items())),
    ]
    return "\n".join(lines) + "\n"


SitePair = tuple[str, str]
"""Two site names in name order (a NAT-to-NAT pair; one relay serves both directions)."""


@dataclass(frozen=True)
class RelayRoute:
    """The relay of one NAT-to-NAT site pair and why.

    ``path_rtt_ms``: the measured RTT source site -> relay site -> destination site (ms),
    None when a leg is not in the LatencyMatrix. ``basis``: ``measured`` (the fastest
    measured path), ``held`` (the recorded relay, kept because no path beats it by more
    than the hysteresis margin), ``unmeasured`` (no measured path: the fallback order).
    """

    relay: str
    path_rtt_ms: float | None
    basis: Literal["measured", "held", "unmeasured"]


@dataclass(frozen=True)
class Topology:
    """Who routes for whom: ``hub`` per hub-and-spoke site, ``spokes`` per hub, ``relays``
    (nodes that may relay) in name order, ``routes`` the relay of each NAT-to-NAT site pair."""

    hub: Mapping[str, str]
    spokes: Mapping[str, tuple[str, ...]]
    relays: tuple[str, ...]
    routes: Mapping[SitePair, RelayRoute] = field(default_factory=lambda: MappingProxyType({}))

    def is_spoke(self, node: Node) -> bool:
        hub = self.hub.get(node.site)
        return hub is not None and hub != node.name


def plan_topology(fleet: Fleet) -> tuple[Topology, list[Finding]]:
    """Pick each hub-and-spoke site's hub and the relays; report what cannot work.

    Findings: ``mesh.hub-missing`` (no hub named and not exactly one relay in the site),
    ``mesh.hub-invalid`` (the named hub is not a node of the site),
    ``mesh.hub-unreachable`` (the hub is behind NAT while other sites exist),
    ``reference.unresolved`` (a per-site override names an unknown site),
    ``mesh.relay-missing`` (NAT'd nodes in different sites and no relay to join them),
    ``mesh.relay-capacity`` (site pairs no relay has room for; see ``plan_relays``),
    ``mesh.relay-other-provider`` (a warning: a pair goes through a relay of neither of its
    providers nor of ``spec.relays.allowed_providers``, because none of those runs a relay).
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
    natted_sites = sorted({n.site for n in fleet.nodes.values() if n.nat and not topo.is_spoke(n)})
    if not relay_names:
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
    providers = {s: site.provider for s, site in fleet.sites.items()}
    candidates = [
        Relay(r, fleet.nodes[r].site, providers.get(fleet.nodes[r].site, fleet.nodes[r].site))
        for r in relay_names
    ]
    pairs = [(a, b) for i, a in enumerate(natted_sites) for b in natted_sites[i + 1 :]]
    latency = fleet.latency
    routes, unplaced = plan_relays(
        pairs, candidates, providers, agreed_rtt_ms(latency), latency.relays if latency else {}, mesh
    )
    by_name = {r.name: r for r in candidates}
    for (a, b), route in sorted(routes.items()):
        relay = by_name[route.relay]
        if not own_relay(a, b, relay, providers, mesh.relay_allowed_providers):
            pa, pb = providers.get(a, a), providers.get(b, b)
            findings.append(
                Finding(
                    fleet.nodes[relay.name].source,
                    ("spec", "roles"),
                    "mesh.relay-other-provider",
                    f"site pair {a}-{b} (providers {pa}, {pb}) goes through relay {relay.name!r} of "
                    f"provider {relay.provider!r}, which can read, delay or drop their traffic: no relay "
                    f"of {pa} or {pb} exists; add one, or allow {relay.provider!r} in the Mesh's "
                    "spec.relays.allowed_providers",
                    "warning",
                )
            )
    if unplaced and complete:
        shown = ", ".join(f"{a}-{b}" for a, b in unplaced[:5]) + (" ..." if len(unplaced) > 5 else "")
        findings.append(
            Finding(
                mesh.source,
                ("spec", "relays", "max_site_pairs"),
                "mesh.relay-capacity",
                f"{len(unplaced)} NAT-to-NAT site pair(s) ({shown}) find no relay with room: each "
                f"relay they may use (of the {len(candidates)}: their own providers' where one exists) "
                f"already carries {mesh.relay_max_site_pairs} site pairs (spec.relays.max_site_pairs); "
                "add a relay or raise the cap",
            )
        )
    return Topology(hubs, spokes, relay_names, MappingProxyType(routes)), findings


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
"""Measured round-trip time in ms between two sites, keyed (site, site) in either order."""


@dataclass(frozen=True)
class Relay:
    """A node that may relay: its name, site, and the site's provider."""

    name: str
    site: str
    provider: str


def agreed_rtt_ms(matrix: LatencyMatrix | None) -> dict[tuple[str, str], float]:
    """The site RTTs (ms) a relay may be chosen by, keyed (site, site) in both orders: for
    two different sites, the higher of the two directions when both sites' nodes measured
    the other (``directed_ms``: a pair's ``a_to_b_ms`` and ``b_to_a_ms``), else nothing (a
    leg one end measured, or ``rtt_ms`` alone, which does not say who measured it, is
    unmeasured); inside one site, its ``rtt_ms`` (the site's LAN, its own nodes both ends)."""
    if matrix is None:
        return {}
    out: dict[tuple[str, str], float] = {}
    for (src, dst), ms in matrix.directed_ms.items():
        back = matrix.directed_ms.get((dst, src))
        if src != dst and back is not None:
            out[(src, dst)] = max(ms, back)
    for (a, b), ms in matrix.rtt_ms.items():
        if a == b:
            out[(a, b)] = ms
    return out


def own_relay(
    a: str, b: str, relay: Relay, providers: Mapping[str, str], allowed: Container[str] = ()
) -> bool:
    """Whether ``relay`` is one of site pair (``a``, ``b``)'s own: in ``a`` or ``b``, or of
    one of their providers (``providers``: site -> provider; a site not in it is its own),
    or of a provider in ``allowed`` (Mesh ``spec.relays.allowed_providers``). A relay of one
    end's provider sees nothing that provider's own node at that end does not."""
    return (
        relay.site in (a, b)
        or relay.provider in (providers.get(a, a), providers.get(b, b))
        or relay.provider in allowed
    )


def path_rtt(a: str, b: str, via: str, rtt: SiteRtt) -> float | None:
    """Measured RTT (ms) from site ``a`` through a relay in site ``via`` to site ``b``:
    ``rtt(a, via) + rtt(via, b)``; None when a leg is not measured. A leg inside the relay's
    own site is the site LAN: its measured RTT, else 0 (nothing a site declares is read)."""
    total = 0.0
    for end in (a, b):
        leg = rtt.get((end, via), rtt.get((via, end)))
        if leg is None:
            if end != via:
                return None
            leg = 0.0
        total += leg
    return total


def _spread(a: str, b: str, relay: str) -> bytes:
    """The last tie-break: a hash of the pair and the relay (rendezvous hashing), so that
    no relay name comes first for every pair (a relay named ``aaa`` would, by name)."""
    return hashlib.sha256(f"{a}\0{b}\0{relay}".encode()).digest()[:8]


def rank_relays(
    a: str,
    b: str,
    relays: Iterable[Relay],
    providers: Mapping[str, str],
    rtt: SiteRtt,
    allowed: Container[str] = (),
) -> list[tuple[Relay, float | None]]:
    """The relays site pair (``a``, ``b``) may use, best first, each with its measured path
    RTT (``rtt``: :func:`agreed_rtt_ms`).

    Which: the pair's own relays (:func:`own_relay`, ``allowed`` the Mesh's
    ``spec.relays.allowed_providers``) when there is one, else every relay. Order: measured
    paths by RTT (ms) before every unmeasured one; then a relay in ``a`` or ``b`` itself,
    then one of their providers (``providers``: site -> provider; a site not in it is its
    own provider), then the rest; then :func:`_spread`, then the name. The sites' declared
    ``wan.latency_ms`` plays no part: a site could claim any figure.
    """
    own = {providers.get(a, a), providers.get(b, b)}
    relays = list(relays)
    relays = [r for r in relays if own_relay(a, b, r, providers, allowed)] or relays

    def key(item: tuple[Relay, float | None]) -> tuple[bool, float, int, bytes, str]:
        r, ms = item
        affinity = 0 if r.site in (a, b) else 1 if r.provider in own else 2
        return (ms is None, ms or 0.0, affinity, _spread(a, b, r.name), r.name)

    return sorted(((r, path_rtt(a, b, r.site, rtt)) for r in relays), key=key)


def hysteresis_margin_ms(current_ms: float, mesh: Mesh) -> float:
    """How much faster (ms) another path must be before a pair leaves a relay whose path
    takes ``current_ms``: the larger of ``relay_hysteresis_ms`` and
    ``relay_hysteresis_percent`` of ``current_ms``. Measured RTTs jitter by a few ms and a
    move re-routes every node pair of the two sites (``wg syncconf`` on each), so a small
    gain is not worth it, and a pair must not flap between two near-equal relays."""
    return max(mesh.relay_hysteresis_ms, current_ms * mesh.relay_hysteresis_percent / 100)


def plan_relays(
    pairs: Iterable[SitePair],
    relays: Sequence[Relay],
    providers: Mapping[str, str],
    rtt: SiteRtt,
    previous: Mapping[SitePair, str],
    mesh: Mesh,
) -> tuple[dict[SitePair, RelayRoute], list[SitePair]]:
    """The relay of each NAT-to-NAT site pair, and the pairs no relay has room for.

    ``pairs``: (a, b) with a < b; ``relays``: the candidates (non-empty for any pair to be
    placed), of which each pair may use those :func:`rank_relays` gives it (its own, when
    it has one: a pair whose own relays are full is not placed on another provider's);
    ``rtt``: measured site RTTs in ms that both ends agree with (:func:`agreed_rtt_ms`);
    ``previous``: the relay each pair went through when the matrix was written
    (LatencyMatrix ``relays``).

    First, in pair order, each pair whose recorded relay is still a candidate with a
    measured path keeps it unless the best path (:func:`rank_relays`) is faster by more than
    :func:`hysteresis_margin_ms`; held pairs claim their room first, so a new pair cannot
    push an old one off its relay. Then every other pair, in pair order, takes the first
    relay of its ranking with room: a relay carries at most ``mesh.relay_max_site_pairs``
    pairs. Returns ``({pair: RelayRoute}, [unplaced pairs in order])``.
    """
    cap = mesh.relay_max_site_pairs
    by_name = {r.name: r for r in relays}
    load: Counter[str] = Counter()
    allowed = mesh.relay_allowed_providers
    ranked = {p: rank_relays(p[0], p[1], relays, providers, rtt, allowed) for p in sorted(pairs)}
    out: dict[SitePair, RelayRoute] = {}
    for pair, ranking in ranked.items():
        held = by_name.get(previous.get(pair, ""))
        # A recorded relay the pair may no longer use (one of its own now exists) is not held.
        if held is None or held not in [r for r, _ in ranking]:
            continue
        held_ms = path_rtt(pair[0], pair[1], held.site, rtt)
        best, best_ms = ranking[0]
        # An unmeasured recorded relay has no claim: the record alone must not route a pair.
        if held_ms is None or best_ms is None or load[held.name] >= cap:
            continue
        if held_ms - best_ms <= hysteresis_margin_ms(held_ms, mesh):
            out[pair] = RelayRoute(held.name, held_ms, "measured" if held is best else "held")
            load[held.name] += 1
    unplaced: list[SitePair] = []
    for pair, ranking in ranked.items():
        if pair in out:
            continue
        for relay, ms in ranking:
            if load[relay.name] < cap:
                out[pair] = RelayRoute(relay.name, ms, "unmeasured" if ms is None else "measured")
                load[relay.name] += 1
                break
        else:
            unplaced.append(pair)
    return out, unplaced


def ssh_over_mesh(mesh: Mesh | None, node: Node) -> bool:
    """Whether the controller reaches ``node`` over the mesh (its mesh address as the SSH
    target) rather than at ``spec.ssh.host``: the Mesh declares a controller and its
    ``ssh_over_mesh`` is ``all``, or ``nat`` and the node is behind NAT (a provider's NAT has
    no inbound path; DESIGN.md, Trust model). The one place this is decided: the SSH target
    in NodeState (``ssh.host``, ``ssh.via_mesh``) follows it, and every consumer (both
    engines, verify, metrics, ``swarm lab ssh``) connects there."""
    ctl = mesh.controller if mesh is not None else None
    if ctl is None or ctl.name == node.name:
        return False
    return ctl.ssh_over_mesh == "all" or (ctl.ssh_over_mesh == "nat" and node.nat)


def controller_endpoint(mesh: Mesh) -> str | None:
    """``host:port`` where the nodes reach the Mesh's controller (its ``endpoint``, the port
    defaulting to its ``listen_port``, else the Mesh's), or None: none declared."""
    ctl = mesh.controller
    if ctl is None or ctl.endpoint is None:
        return None
    return ctl.endpoint if ":" in ctl.endpoint else f"{ctl.endpoint}:{ctl.listen_port or mesh.listen_port}"


def controller_peer(mesh: Mesh, node: Node, address: ipaddress.IPv4Address) -> PeerState:
    """The controller as a peer of ``node`` (not a spoke: a spoke reaches it through its hub,
    whose AllowedIPs are the whole CIDR). AllowedIPs: the controller's ``address``/32 only,
    so the controller can never route for the mesh; PersistentKeepalive on a node behind NAT
    when the controller has an endpoint: the node opens the tunnel and keeps its NAT mapping
    so that the controller can reach it."""
    ctl = mesh.controller
    assert ctl is not None
    endpoint = controller_endpoint(mesh)
    return {
        "name": ctl.name,
        "allowed_ips": [f"{address}/32"],
        "endpoint": endpoint,
        "persistent_keepalive_s": mesh.persistent_keepalive_s if node.nat and endpoint else 0,
        "public_key": ctl.public_key,
    }


def controller_peers(
    fleet: Fleet, topo: Topology, addresses: Mapping[str, ipaddress.IPv4Address]
) -> list[PeerState]:
    """The controller's own peer list (``swarm mesh controller-up``), in name order: every
    node that is not a spoke, AllowedIPs its mesh address and its spokes' (the hub routes
    for them), endpoint its public endpoint (None behind NAT: the node connects to the
    controller), PersistentKeepalive when the controller has no endpoint of its own (it is
    behind NAT then, and keeps the path to nodes with endpoints open). ``public_key``: the
    node's recorded key, None where none is recorded (the command refuses such a peer)."""
    mesh = fleet.mesh
    assert mesh is not None and mesh.controller is not None
    keepalive = mesh.persistent_keepalive_s if mesh.controller.endpoint is None else 0
    out: list[PeerState] = []
    for n in fleet.nodes.values():
        if topo.is_spoke(n) or n.name not in addresses:
            continue
        own = [addresses[n.name], *(addresses[s] for s in topo.spokes.get(n.name, ()) if s in addresses)]
        endpoint = _endpoint(n, False, n.listen_port or mesh.listen_port)
        out.append(
            {
                "name": n.name,
                "allowed_ips": _host_routes(own),
                "endpoint": endpoint,
                "persistent_keepalive_s": keepalive if endpoint else 0,
                "public_key": n.wireguard_public_key,
            }
        )
    return sorted(out, key=lambda p: p["name"])


def peers(
    fleet: Fleet,
    topo: Topology,
    addresses: Mapping[str, ipaddress.IPv4Address],
    controller_address: ipaddress.IPv4Address | None = None,
) -> tuple[dict[str, list[PeerState]], set[str]]:
    """Peer list of every node, and the nodes that route for others (they need IP forwarding).

    Peer lists: ``{node: [{name, allowed_ips, endpoint, persistent_keepalive_s,
    public_key}]}``.

    ``allowed_ips`` are CIDR strings in address order; ``endpoint`` is ``host:port`` or
    None (the peer connects to us); ``persistent_keepalive_s`` is 0 when not needed;
    ``public_key`` is the peer's WireGuard public key as recorded in the fleet (Node
    ``spec.mesh.public_key``), or None where none is recorded (the engines then learn it
    from the peer). So a node whose peers' keys are all recorded has its whole WireGuard
    configuration from the repository alone: what a pull node needs, with no controller.
    Peers are in name order. Cost is O(nodes + non-spokes^2). Lists may be shared
    between peers and must not be mutated.

    NAT-to-NAT pairs go through their site pair's relay in ``topo.routes`` (``plan_relays``).

    With a controller (Mesh ``spec.controller``, at ``controller_address``), every node that
    is not a spoke also peers with it (:func:`controller_peer`); the engines take it from
    here like any peer.
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
    relay_routes = topo.routes

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
                    "public_key": hub.wireguard_public_key,
                }
            ]
    for n in outward:
        routes: dict[str, list[list[str]]] = defaultdict(list)
        for p in outward:
            if p is n:
                continue
            if n.site == p.site or not n.nat or not p.nat:
                routes[p.name].append(behind[p.name])
            else:
                route = relay_routes.get((n.site, p.site) if n.site < p.site else (p.site, n.site))
                if route is None:  # no relay (mesh.relay-missing) or none with room (mesh.relay-capacity)
                    continue
                routes[route.relay].append(behind[p.name])
                forwarders.add(route.relay)
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
                    "public_key": p.wireguard_public_key,
                }
            )
        if mesh.controller is not None and controller_address is not None:
            entries.append(controller_peer(mesh, n, controller_address))
            entries.sort(key=lambda e: e["name"])
        result[n.name] = entries
    return result, forwarders


def site_representatives(node_sites: Mapping[str, str], preferred: Mapping[str, str]) -> dict[str, str]:
    """Each site's representative node: ``preferred[site]`` (its hub) when that node is in
    the site, else the site's first node by name. ``node_sites``: node -> site. Verification
    pings them (:func:`ping_sample`) and the network measurement tests bandwidth between
    them (``metrics.schedule.representative_pairs``)."""
    members: dict[str, list[str]] = defaultdict(list)
    for node, site in sorted(node_sites.items()):
        members[site].append(node)
    return {
        site: preferred[site] if preferred.get(site) in nodes else nodes[0] for site, nodes in members.items()
    }


def ping_sample(
    node_sites: Mapping[str, str], preferred: Mapping[str, str], natted: Container[str] = ()
) -> list[tuple[str, str]]:
    """The (source, target) node pairs whose mesh path verification pings: every node to
    its site's representative (:func:`site_representatives`, the hub where there is one),
    and one ping between the representatives of every two sites, sent by the one behind
    NAT (``natted``) when only one is (it can always open the path), else by the site
    first in name order. N - S + S(S-1)/2 pings for N nodes in S sites: linear in the
    nodes, where a ping of every peer pair grows with N^2. Sorted by source, target.

    The rest of the mesh is judged without traffic, from each node's ``wg show dump``
    (verify/checks.py ``judge_peers``)."""
    rep = site_representatives(node_sites, preferred)
    pairs = [(node, rep[site]) for node, site in node_sites.items() if node != rep[site]]
    sites = sorted(rep)
    for i, a in enumerate(sites):
        for b in sites[i + 1 :]:
            src, dst = rep[a], rep[b]
            if dst in natted and src not in natted:
                src, dst = dst, src
            pairs.append((src, dst))
    return sorted(pairs)


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
