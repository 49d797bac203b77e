"""The bare-node Ray cluster (kind RayCluster) against the fleet it runs on.

Rules (a Mesh is already required wherever nodes are declared: ``kind.missing``):
``ray.head-not-unique``: the head selector must match exactly one node;
``ray.workers-match-nothing``: judged once the head is known;
``ray.head-behind-nat``: workers in other sites would reach a NAT'd head only through
keepalives and relays, so the head needs a public endpoint when they exist;
``ray.object-store-conflict``: a percent and a size both given;
``ray.object-store-too-large``: a fixed object store beyond 80% of a node's memory (Ray's cap);
``ray.ports-conflict``: two of Ray's ports equal (the dashboard's among them), or the worker
port range empty or holding another port, or a port (or the range) holding SSH's: 22 or a
member's declared SSH port (Ray's firewall drops its ports off the mesh).
"""

from __future__ import annotations

from collections.abc import Iterator

from ...fleet.diagnostics import Finding
from ...fleet.model import RayCluster
from ..analysis import Analysis
from ..ray import members

OBJECT_STORE_MAX_PERCENT = 80  # Ray refuses an object store above 80% of the node's memory


def ray_cluster(a: Analysis) -> Iterator[Finding]:
    ray = a.fleet.ray
    if ray is None:
        return
    yield from _ports(ray)
    if a.fleet.complete("Node"):
        yield from _ssh_ports(ray, a)
    if ray.object_store_memory_mib is not None and "object_store_percent" in ray.declared_keys:
        yield Finding(
            ray.source,
            ("spec", "object_store_percent"),
            "ray.object-store-conflict",
            "give object_store_percent or object_store_memory_mib, not both",
        )
    if not a.fleet.complete("Node"):
        return  # which nodes match is not known: a Node document failed (its error is reported)
    heads, workers = members(ray, a.fleet)
    if len(heads) != 1:
        yield Finding(
            ray.source,
            ("spec", "head", "selector"),
            "ray.head-not-unique",
            f"the head selector must match exactly one node; it matches {len(heads)}"
            + (f" ({', '.join(heads[:5])}{', ...' if len(heads) > 5 else ''})" if heads else ""),
        )
    if len(heads) == 1 and not workers:
        yield Finding(
            ray.source,
            ("spec", "workers", "selector") if "workers" in ray.declared_keys else ("spec",),
            "ray.workers-match-nothing",
            "no node other than the head matches the workers' selector",
        )
    if len(heads) == 1:
        head = a.fleet.nodes[heads[0]]
        away = sorted(w for w in workers if a.fleet.nodes[w].site != head.site)
        if head.nat and away:
            yield Finding(
                ray.source,
                ("spec", "head", "selector"),
                "ray.head-behind-nat",
                f"the head {head.name} is behind NAT and workers in other sites ({', '.join(away[:5])}) "
                "would reach it only through relays; choose a node with a public endpoint",
            )
    if ray.object_store_memory_mib is not None:
        for name in [*heads, *workers]:
            cap = a.fleet.nodes[name].memory_gib * 1024 * OBJECT_STORE_MAX_PERCENT // 100
            if ray.object_store_memory_mib > cap:
                yield Finding(
                    ray.source,
                    ("spec", "object_store_memory_mib"),
                    "ray.object-store-too-large",
                    f"{ray.object_store_memory_mib} MiB is above {OBJECT_STORE_MAX_PERCENT}% of {name}'s "
                    f"{a.fleet.nodes[name].memory_gib} GiB ({cap} MiB), Ray's cap",
                )
                break


def _ports(ray: RayCluster) -> Iterator[Finding]:
    ports = dict(ray.ports)
    low, high = ports.pop("min_worker"), ports.pop("max_worker")
    if ray.dashboard_enabled:
        ports["dashboard"] = ray.dashboard_port
    where = ("spec", "ports")
    if low > high:
        yield Finding(ray.source, (*where, "min_worker"), "ray.ports-conflict",
                      f"min_worker {low} is above max_worker {high}")  # fmt: skip
    seen: dict[int, str] = {}
    for name, port in sorted(ports.items()):
        if port in seen:
            yield Finding(
                ray.source, where, "ray.ports-conflict", f"{name} and {seen[port]} are both port {port}"
            )
        elif low <= port <= high:
            yield Finding(ray.source, where, "ray.ports-conflict",
                          f"{name} ({port}) is inside the worker port range {low}-{high}")  # fmt: skip
        seen[port] = name


def _ssh_ports(ray: RayCluster, a: Analysis) -> Iterator[Finding]:
    """Ray's firewall drops its ports on every interface but the mesh: a Ray port that is a
    member's SSH port (or 22) would cut SSH to every member but over the mesh."""
    heads, workers = members(ray, a.fleet)
    ssh = {22: "SSH's port 22"}
    for name in [*heads, *workers]:
        port = a.fleet.nodes[name].ssh_port
        ssh.setdefault(port, f"node {name}'s SSH port {port}")
    ports = dict(ray.ports)
    low, high = ports.pop("min_worker"), ports.pop("max_worker")
    if ray.dashboard_enabled:
        ports["dashboard"] = ray.dashboard_port
    for port, what in sorted(ssh.items()):
        clash = [n for n, p in sorted(ports.items()) if p == port]
        if clash:
            message = f"{clash[0]} ({port}) is {what}: Ray's firewall would cut SSH"
        elif low <= port <= high:
            message = f"the worker port range {low}-{high} holds {what}: Ray's firewall would cut SSH"
        else:
            continue
        yield Finding(ray.source, ("spec", "ports"), "ray.ports-conflict", message)


CHECKS = (ray_cluster,)
