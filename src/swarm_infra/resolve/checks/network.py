"""Underlay and mesh networks: addresses inside their networks, no overlaps, room for all,
endpoints that can exist."""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterator

from ...fleet.diagnostics import Finding, excerpt
from ..analysis import Analysis

# Address blocks no site network or mesh can use (RFC 6890 special-purpose registry): they
# are not routed as unicast host addresses.
UNUSABLE = (
    (ipaddress.IPv4Network("0.0.0.0/8"), "'this network' (0.0.0.0/8), which is not routed"),
    (ipaddress.IPv4Network("127.0.0.0/8"), "loopback (127.0.0.0/8)"),
    (ipaddress.IPv4Network("169.254.0.0/16"), "link-local (169.254.0.0/16), which is not routed"),
    (ipaddress.IPv4Network("224.0.0.0/4"), "multicast (224.0.0.0/4)"),
    (ipaddress.IPv4Network("240.0.0.0/4"), "reserved (240.0.0.0/4, with the broadcast address)"),
)


def unusable(net: ipaddress.IPv4Network) -> str | None:
    """Why no host of ``net`` can be a unicast address, or None."""
    return next((why for block, why in UNUSABLE if net.overlaps(block)), None)


def split_endpoint(text: str) -> tuple[str, int | None]:
    """``host[:port]`` as (host, port or None). Raises ``ValueError`` for a port that is not
    a number."""
    host, sep, port = text.rpartition(":")
    return (host, int(port)) if sep else (text, None)


# Names that stand for the machine itself wherever they are resolved: RFC 6761 6.3
# (``localhost`` and every name under ``.localhost``), and the loopback names Debian's and
# Red Hat's /etc/hosts give ::1 and 127.0.0.1.
LOOPBACK_NAMES = frozenset(
    {
        "localhost",
        "ip6-localhost",
        "ip6-loopback",
        "localhost.localdomain",
        "localhost4",
        "localhost4.localdomain4",
        "localhost6",
        "localhost6.localdomain6",
    }
)


def address_problem(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Why ``ip`` is no address of another machine a peer could reach (loopback,
    unspecified, link-local, multicast, IPv4's reserved blocks), or None."""
    if isinstance(ip, ipaddress.IPv4Address):
        return unusable(ipaddress.IPv4Network(ip))
    if ip.ipv4_mapped is not None:
        return address_problem(ip.ipv4_mapped)
    for test, why in (
        (ip.is_loopback, "loopback (::1)"),
        (ip.is_unspecified, "unspecified (::)"),
        (ip.is_link_local, "link-local (fe80::/10)"),
        (ip.is_multicast, "multicast (ff00::/8)"),
    ):
        if test:
            return why
    return None


def numeric_host(host: str) -> ipaddress.IPv4Address | None:
    """The IPv4 address ``host`` stands for when it is numeric in any spelling the C
    library's resolver takes (``inet_aton(3)``: ``127.1``, ``0x7f000001``, ``2130706433``,
    octal ``0177.0.0.1``), or None for a host name."""
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except (OSError, ValueError):
        return None


def endpoint_problem(text: str) -> str | None:
    """Why an endpoint (``host`` or ``host:port``) cannot be reached, or None: a port
    outside 1..65535; a numeric host (any spelling :func:`numeric_host` takes) that is not a
    unicast address of another machine (loopback, unspecified, link-local, multicast:
    :func:`address_problem`) or is not written as a dotted quad (the review shows what peers
    connect to); a name of the machine itself (:data:`LOOPBACK_NAMES`, ``*.localhost``); a
    host name with an empty or over-long label (RFC 1035: 63 per label, 253 in all). A name
    that resolves to such an address is refused where it is resolved, at converge time
    (``swarm_infra.engines.endpoints``)."""
    try:
        host, port = split_endpoint(text)
    except ValueError:
        return "the port is not a number"
    if port is not None and not 1 <= port <= 65535:
        return f"port {port} is outside 1..65535"
    ip = numeric_host(host)
    if ip is not None:
        why = address_problem(ip)
        if why:
            return f"{excerpt(host)} is {ip}, {why}: peers would send this node's tunnel to themselves"
        if host != str(ip):
            return f"{excerpt(host)} is {ip} written another way; write {ip}"
        return None
    if host.replace(".", "").isdigit():
        return f"{excerpt(host)} is not an IPv4 address"
    name = host.lower().rstrip(".")
    if name in LOOPBACK_NAMES or name.endswith(".localhost"):
        return (
            f"{excerpt(host)} names the machine itself (RFC 6761): peers would send this node's "
            "tunnel to themselves"
        )
    labels = host.split(".")
    if len(host) > 253 or any(not 1 <= len(label) <= 63 for label in labels):
        return f"{excerpt(host)} is not a host name (labels of 1 to 63 characters, 253 in all)"
    if any(label.startswith("-") or label.endswith("-") for label in labels):
        return f"{excerpt(host)} is not a host name (a label starts or ends with '-')"
    return None


def underlay(a: Analysis) -> Iterator[Finding]:
    """``network.cidr-unusable``: a site underlay in a block that is not unicast (loopback,
    multicast, ``0.0.0.0/8``, ...); ``network.underlay-overlap``: two sites' underlays
    overlap (or are the same); ``network.address-outside-site``: a node's address is not in
    its site's underlay CIDR; ``network.address-not-host``: it is the underlay's network or
    broadcast address; ``network.address-duplicate``: two nodes of a site share an address
    (or a node takes the site's gateway address); ``network.gateway-outside-site``: the
    gateway is not a host address of the underlay."""
    seen: dict[tuple[str, str], str] = {}
    for site in a.fleet.sites.values():
        why = unusable(site.underlay)
        if why:
            yield Finding(
                site.source,
                ("spec", "underlay", "cidr"),
                "network.cidr-unusable",
                f"underlay {site.underlay} overlaps {why}",
            )
    # CIDR blocks nest or are disjoint: in address order, a block overlaps an earlier one
    # exactly when it starts before the furthest end seen so far.
    ordered = sorted(
        a.fleet.sites.values(), key=lambda s: (s.underlay.network_address, -s.underlay.prefixlen)
    )
    furthest = None
    for site in ordered:
        if furthest is not None and site.underlay.network_address <= furthest.underlay.broadcast_address:
            same = "is the same network as" if site.underlay == furthest.underlay else "overlaps"
            yield Finding(
                site.source,
                ("spec", "underlay", "cidr"),
                "network.underlay-overlap",
                f"underlay {site.underlay} {same} site {furthest.name!r}'s {furthest.underlay}; "
                "sites route to each other by underlay, so each needs its own network",
            )
        if furthest is None or site.underlay.broadcast_address > furthest.underlay.broadcast_address:
            furthest = site
    for site in a.fleet.sites.values():
        gw = site.gateway
        if gw is None:
            continue
        if gw not in site.underlay or gw in (site.underlay.network_address, site.underlay.broadcast_address):
            yield Finding(
                site.source,
                ("spec", "underlay", "gateway"),
                "network.gateway-outside-site",
                f"gateway {gw} is not a host address of underlay {site.underlay}",
            )
        else:
            seen[(site.name, str(gw))] = f"the gateway of site {site.name}"
    for node in a.fleet.nodes.values():
        if node.site not in a.fleet.sites:
            continue
        site = a.fleet.sites[node.site]
        if node.address not in site.underlay:
            yield Finding(
                node.source,
                ("spec", "address"),
                "network.address-outside-site",
                f"{node.address} is not in site {site.name!r} underlay {site.underlay}",
            )
        elif site.underlay.prefixlen <= 30 and node.address in (
            site.underlay.network_address,
            site.underlay.broadcast_address,
        ):
            which = "network" if node.address == site.underlay.network_address else "broadcast"
            yield Finding(
                node.source,
                ("spec", "address"),
                "network.address-not-host",
                f"{node.address} is the {which} address of site {site.name!r} underlay "
                f"{site.underlay}, not a host address",
            )
        key = (node.site, str(node.address))
        if key in seen:
            yield Finding(
                node.source,
                ("spec", "address"),
                "network.address-duplicate",
                f"{node.address} is already the address of {seen[key]}",
            )
        else:
            seen[key] = f"node {node.name!r}"


# The widest management network a site may declare. A Site's management network is where
# the controller may SSH to that site's nodes besides the underlay (a node's ssh.host must
# lie in one of the two), so it is address space one provider's document claims as its own
# machines. A /16 (65,534 hosts) is 256 times the /24 LANs the examples' and the lab's sites
# use, room for any one site's management network; a wider claim reaches into blocks every
# provider uses at once (a /12 is all of 172.16.0.0/12, RFC 1918), and 0.0.0.0/0 admits
# every address: other providers' nodes, the controller, loopback, the metadata service.
MANAGEMENT_MIN_PREFIXLEN = 16


def management(a: Analysis) -> Iterator[Finding]:
    """A Site's ``management`` network (issue #38): ``network.management-unusable`` (it
    overlaps loopback, link-local with the metadata address 169.254.169.254, ``0.0.0.0/8``
    with the unspecified address, multicast or reserved blocks: :func:`unusable`);
    ``network.management-too-wide`` (wider than /:data:`MANAGEMENT_MIN_PREFIXLEN`, e.g.
    ``0.0.0.0/0``); ``network.management-overlap`` (it overlaps another site's underlay or
    the mesh: those are other machines, not this site's)."""
    where = ("spec", "management", "cidr")
    mesh = a.fleet.mesh
    for site in a.fleet.sites.values():
        net = site.management
        if net is None:
            continue
        if net.prefixlen < MANAGEMENT_MIN_PREFIXLEN:
            yield Finding(
                site.source,
                where,
                "network.management-too-wide",
                f"management network {net} is wider than /{MANAGEMENT_MIN_PREFIXLEN}: SSH targets there "
                "could be any provider's machines; declare the site's own management LAN",
            )
            continue
        why = unusable(net)
        if why:
            yield Finding(
                site.source, where, "network.management-unusable", f"management network {net} overlaps {why}"
            )
            continue
        others = [
            f"site {o.name!r}'s underlay {o.underlay}"
            for o in a.fleet.sites.values()
            if o.name != site.name and net.overlaps(o.underlay)
        ]
        if mesh is not None and net.overlaps(mesh.cidr):
            others.append(f"the mesh {mesh.cidr}")
        if others:
            yield Finding(
                site.source,
                where,
                "network.management-overlap",
                f"management network {net} overlaps {', '.join(others)}: an SSH target there would be "
                "another machine than this site's",
            )


def mesh_network(a: Analysis) -> Iterator[Finding]:
    """The Mesh exists when there are nodes, its CIDR holds every node and overlaps no
    site underlay, and no node is both behind NAT and given an endpoint."""
    mesh, nodes = a.fleet.mesh, a.fleet.nodes
    if mesh is None:
        if nodes and a.fleet.complete("Mesh"):
            first = next(iter(nodes.values()))
            yield Finding(
                first.source, (), "kind.missing", "the fleet declares nodes but no Mesh (one is required)"
            )
        return
    why = unusable(mesh.cidr)
    if why:
        yield Finding(
            mesh.source, ("spec", "cidr"), "mesh.cidr-unusable", f"mesh CIDR {mesh.cidr} overlaps {why}"
        )
    usable = max(mesh.cidr.num_addresses - 2, 0)
    holders = len(nodes) + (mesh.controller is not None)
    if holders > usable:
        ctl = " and the controller" if mesh.controller is not None else ""
        yield Finding(
            mesh.source,
            ("spec", "cidr"),
            "mesh.cidr-too-small",
            f"{mesh.cidr} has {usable} host addresses for {len(nodes)} nodes{ctl}",
        )
    for site in a.fleet.sites.values():
        if mesh.cidr.overlaps(site.underlay):
            yield Finding(
                mesh.source,
                ("spec", "cidr"),
                "mesh.cidr-overlap",
                f"mesh CIDR {mesh.cidr} overlaps site {site.name!r} underlay {site.underlay}",
            )


def endpoints(a: Analysis) -> Iterator[Finding]:
    """``mesh.endpoint-conflict``: ``nat: true`` and an endpoint contradict each other;
    ``mesh.endpoint-invalid``: an endpoint that cannot exist (see :func:`endpoint_problem`);
    ``mesh.endpoint-duplicate``: two nodes reached at the same host and port (the port
    defaults to the node's listen port), one of them by a declared endpoint."""
    default_port = a.fleet.mesh.listen_port if a.fleet.mesh else 51820
    owner: dict[tuple[str, int], tuple[str, bool]] = {}
    for node in a.fleet.nodes.values():
        path = ("spec", "mesh", "endpoint")
        if node.nat and node.endpoint is not None:
            yield Finding(
                node.source,
                path,
                "mesh.endpoint-conflict",
                "a node behind NAT (nat: true) has no endpoint other sites can reach; remove one of the two",
            )
            continue
        if node.endpoint is not None:
            problem = endpoint_problem(node.endpoint)
            if problem:
                yield Finding(
                    node.source,
                    path,
                    "mesh.endpoint-invalid",
                    f"endpoint {excerpt(node.endpoint)}: {problem}",
                )
                continue
        public = node.public_endpoint
        if public is None:
            continue
        host, port = split_endpoint(public)
        key = (host.lower(), port or node.listen_port or default_port)
        declared = node.endpoint is not None
        if key in owner:
            other, other_declared = owner[key]
            if declared or other_declared:
                yield Finding(
                    node.source,
                    path if declared else ("spec", "address"),
                    "mesh.endpoint-duplicate",
                    f"{key[0]}:{key[1]} is already node {other!r}'s endpoint; each node needs its own "
                    "host or port (a different listen_port behind port forwarding)",
                )
            continue
        owner[key] = (node.name, declared)


# Interface names the underlay or the host already uses by convention (systemd's predictable
# names en*/wl*/ww*/ib*, the kernel's eth*, loopback, bridges, bonds, VLANs, tunnels and the
# container runtimes' own): a mesh interface named so would be one of them, and Ray's
# firewall, which admits the mesh interface, would open Ray's ports there.
UNDERLAY_INTERFACE = re.compile(
    r"(lo|eth|en|wl|ww|ib|bond|br|team|vlan|veth|virbr|docker|cni|flannel|cali|vxlan|tun|tap|ppp)[a-z0-9]*"
)


def mesh_interface(a: Analysis) -> Iterator[Finding]:
    """``mesh.interface-underlay``: the mesh's interface is named like an underlay, loopback
    or container interface (:data:`UNDERLAY_INTERFACE`)."""
    mesh = a.fleet.mesh
    if mesh is not None and UNDERLAY_INTERFACE.fullmatch(mesh.interface):
        yield Finding(
            mesh.source,
            ("spec", "interface"),
            "mesh.interface-underlay",
            f"interface {mesh.interface!r} is named like an underlay, loopback or container interface; "
            "the mesh needs a WireGuard interface of its own (wg0): Ray's firewall admits it",
        )


# Nodes that each peer with every other (full-mesh sites, and one hub per hub-and-spoke
# site): their peer lists grow with the square of their number. At 1,000 such nodes each
# node's WireGuard holds about 1,000 peers and the desired state about a million peer
# entries (~0.5 GiB); beyond, hub-and-spoke sites keep it linear.
MAX_FULL_MESH_NODES = 1000


def mesh_size(a: Analysis) -> Iterator[Finding]:
    """``mesh.full-mesh-too-large``: more than :data:`MAX_FULL_MESH_NODES` nodes would each
    peer with all the others (every node of a full-mesh site, the hub of a hub-and-spoke
    one); refused before the resolver builds a peer list that grows with their square."""
    mesh = a.fleet.mesh
    if mesh is None:
        return
    per_site: dict[str, int] = {}
    for node in a.fleet.nodes.values():
        per_site[node.site] = per_site.get(node.site, 0) + 1
    peering = sum(n if mesh.site(site).topology == "full-mesh" else 1 for site, n in per_site.items())
    if peering > MAX_FULL_MESH_NODES:
        yield Finding(
            mesh.source,
            ("spec", "topology"),
            "mesh.full-mesh-too-large",
            f"{peering} nodes would each peer with all the others (full-mesh sites, and hubs); at most "
            f"{MAX_FULL_MESH_NODES}: make the large sites hub-and-spoke (spec.sites.SITE.topology)",
        )


def controller(a: Analysis) -> Iterator[Finding]:
    """The Mesh's controller (``spec.controller``): ``mesh.controller-name-taken`` (a Node has
    its name: peer lists and MeshAddresses are keyed by name), ``mesh.controller-endpoint-invalid``
    (see :func:`endpoint_problem`), ``mesh.controller-endpoint-missing`` (``ssh_over_mesh``
    names nodes behind NAT but the controller has no endpoint: such a node cannot be
    reached first, it must open the tunnel to the controller, and it can only if it knows
    where the controller is)."""
    mesh = a.fleet.mesh
    ctl = mesh.controller if mesh is not None else None
    if ctl is None:
        return
    if ctl.name in a.fleet.nodes:
        yield Finding(
            ctl.source,
            ("spec", "controller", "name"),
            "mesh.controller-name-taken",
            f"node {ctl.name!r} has the controller's name; give the controller another "
            "(spec.controller.name): peers and mesh addresses are keyed by name",
        )
    if ctl.endpoint is not None:
        problem = endpoint_problem(ctl.endpoint)
        if problem:
            yield Finding(
                ctl.source,
                ("spec", "controller", "endpoint"),
                "mesh.controller-endpoint-invalid",
                f"endpoint {excerpt(ctl.endpoint)}: {problem}",
            )
    elif ctl.ssh_over_mesh != "none":
        natted = sorted(n.name for n in a.fleet.nodes.values() if n.nat)
        if natted:
            shown = ", ".join(natted[:5]) + (" ..." if len(natted) > 5 else "")
            yield Finding(
                ctl.source,
                ("spec", "controller", "ssh_over_mesh"),
                "mesh.controller-endpoint-missing",
                f"ssh_over_mesh {ctl.ssh_over_mesh!r} reaches {shown} (behind NAT) over the mesh, "
                "but the controller has no endpoint (spec.controller.endpoint): a node behind NAT "
                "cannot be reached first, it must open the tunnel to the controller's endpoint",
            )


CHECKS = (underlay, management, mesh_network, endpoints, mesh_interface, mesh_size, controller)
