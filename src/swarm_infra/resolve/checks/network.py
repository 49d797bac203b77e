"""Underlay and mesh networks: addresses inside their networks, no overlaps, room for all."""

from __future__ import annotations

from collections.abc import Iterator

from ...fleet.diagnostics import Finding
from ..analysis import Analysis


def underlay(a: Analysis) -> Iterator[Finding]:
    """``network.address-outside-site``: a node's address is not in its site's underlay CIDR;
    ``network.address-duplicate``: two nodes of a site share an address (or a node takes the
    site's gateway address); ``network.gateway-outside-site``: the gateway is not a host
    address of the underlay."""
    seen: dict[tuple[str, str], str] = {}
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
        site = a.fleet.sites.get(node.site)
        if site is None:
            continue
        if node.address not in site.underlay:
            yield Finding(
                node.source,
                ("spec", "address"),
                "network.address-outside-site",
                f"{node.address} is not in site {site.name!r} underlay {site.underlay}",
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


def mesh_network(a: Analysis) -> Iterator[Finding]:
    """The Mesh exists when there are nodes, its CIDR holds every node and overlaps no
    site underlay, and no node is both behind NAT and given an endpoint."""
    mesh, nodes = a.fleet.mesh, a.fleet.nodes
    if mesh is None:
        if nodes and "Mesh" not in a.fleet.invalid_names:
            first = next(iter(nodes.values()))
            yield Finding(
                first.source, (), "kind.missing", "the fleet declares nodes but no Mesh (one is required)"
            )
        return
    usable = max(mesh.cidr.num_addresses - 2, 0)
    if len(nodes) > usable:
        yield Finding(
            mesh.source,
            ("spec", "cidr"),
            "mesh.cidr-too-small",
            f"{mesh.cidr} has {usable} host addresses for {len(nodes)} nodes",
        )
    for site in a.fleet.sites.values():
        if mesh.cidr.overlaps(site.underlay):
            yield Finding(
                mesh.source,
                ("spec", "cidr"),
                "mesh.cidr-overlap",
                f"mesh CIDR {mesh.cidr} overlaps site {site.name!r} underlay {site.underlay}",
            )


def nat_endpoint(a: Analysis) -> Iterator[Finding]:
    """``mesh.endpoint-conflict``: ``nat: true`` and an endpoint contradict each other."""
    for node in a.fleet.nodes.values():
        if node.nat and node.endpoint is not None:
            yield Finding(
                node.source,
                ("spec", "mesh", "endpoint"),
                "mesh.endpoint-conflict",
                "a node behind NAT (nat: true) has no endpoint other sites can reach; remove one of the two",
            )


CHECKS = (underlay, mesh_network, nat_endpoint)
