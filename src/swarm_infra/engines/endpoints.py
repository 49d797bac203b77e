"""Mesh endpoints resolved where the engines converge, before any peer's file is written.

A node's ``spec.mesh.endpoint`` may be a host name, written as it is into its peers'
wg0.conf (``Endpoint = name:port``), which ``wg`` resolves when the interface comes up. The
validator refuses every spelling of the machine itself it can see (loopback, unspecified,
link-local, multicast in any numeric form ``inet_aton`` takes, ``localhost`` and
``*.localhost``: :func:`swarm_infra.resolve.checks.network.endpoint_problem`); what a name
resolves to is known only at converge time, and a provider's DNS can answer ``127.0.0.1``
for its node's name (issue #38): its peers would then send that node's tunnel to
themselves. So each engine resolves every peer endpoint that is a name (``getaddrinfo``,
as wg does) before it runs, and refuses the run, naming the node whose endpoint it is, the
name and what it resolved to. A name that does not resolve here is no such problem: wg on
the peer cannot resolve it either, or resolves it by its own resolver.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..resolve.checks.network import address_problem, numeric_host, split_endpoint
from ..resolve.types import NodeState

Resolver = Callable[..., Iterable[tuple[Any, ...]]]


def resolved_addresses(host: str, resolve: Resolver | None = None) -> list[str]:
    """The addresses ``host`` resolves to (``resolve``, default ``socket.getaddrinfo``, for
    UDP as WireGuard's), in the resolver's order without repeats; [] when it does not
    resolve."""
    try:
        infos = (resolve or socket.getaddrinfo)(host, None, 0, socket.SOCK_DGRAM)
    except (OSError, UnicodeError):
        return []
    out: list[str] = []
    for info in infos:
        address = str(info[4][0]).split("%", 1)[0]  # an IPv6 zone (fe80::1%eth0)
        if address not in out:
            out.append(address)
    return out


def endpoint_resolution_problems(
    nodes: Mapping[str, NodeState], resolve: Resolver | None = None
) -> dict[str, str]:
    """``{node: why}`` for each node whose mesh endpoint, as its peers in ``nodes`` hold it
    (PeerState ``endpoint``), is a host name that resolves to an address that is not
    another machine's (:func:`swarm_infra.resolve.checks.network.address_problem`). Each
    name is resolved once."""
    hosts: dict[str, set[str]] = {}  # peer -> the hosts of its endpoints (same-site peers: underlay)
    for node in nodes.values():
        mesh = node["mesh"]
        for peer in mesh["peers"] if mesh else []:
            endpoint = peer["endpoint"]
            if endpoint:
                hosts.setdefault(peer["name"], set()).add(split_endpoint(endpoint)[0])
    problems: dict[str, str] = {}
    seen: dict[str, str | None] = {}
    for name in sorted(hosts):
        for host in sorted(hosts[name]):
            if numeric_host(host) is not None:
                continue  # the validator judged it (endpoint_problem)
            if host not in seen:
                seen[host] = _problem(host, resolve)
            if seen[host]:
                problems[name] = (
                    f"node {name}'s mesh endpoint {host} resolves to {seen[host]}: its peers would "
                    "send its tunnel to themselves; the endpoint is refused (spec.mesh.endpoint)"
                )
                break
    return problems


def _problem(host: str, resolve: Resolver | None) -> str | None:
    """``"ADDRESS, why"`` for the first address ``host`` resolves to that is no peer's."""
    for address in resolved_addresses(host, resolve):
        try:
            why = address_problem(ipaddress.ip_address(address))
        except ValueError:
            continue
        if why:
            return f"{address}, {why}"
    return None
