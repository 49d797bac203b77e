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
member's declared SSH port (Ray's firewall drops its ports off the mesh);
``ray.lock-invalid``: a line of the lock file that is not ``name==version --hash=sha256:...``
(reported at the lock file's line, :mod:`swarm_infra.fleet.lockfile`);
``ray.version-too-old``: the fleet's Ray version predates token authentication (2.52.0),
which both Rays run;
``ray.version-missing``: the fleet declares Ray (this RayCluster, or a tenant's ``ray`` in
the Allocation) but not its Ray version (kind Cluster, ``spec.ray_version``, the one place it
is declared), reported at each Ray declaration;
``ray.lock-mismatch``: the lock does not pin ``ray`` with its extras at the fleet's Ray
version (Cluster ``spec.ray_version``), or leaves out an entry of ``packages`` (or pins it
at another version or without its extras);
``ray.ca-file-invalid``: ``package_index.ca_file`` is not PEM certificates of a CA;
``file.*`` at ``lock_file`` / ``package_index.ca_file``: the file is missing, unreadable, too
large, or outside the fleet's directories. (``http://`` indexes are refused by the schema.)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from ...fleet.diagnostics import Diagnostic, Finding
from ...fleet.lockfile import (
    MAX_CA_BYTES,
    MAX_LOCK_BYTES,
    Pin,
    ca_problem,
    canonical_name,
    normalised_pem,
    parse_lock,
    read_referenced,
)
from ...fleet.model import Fleet, RayCluster
from ..analysis import Analysis
from ..ray import RAY_EXTRAS, TOKEN_AUTH_MIN_VERSION, members, token_auth_supported

OBJECT_STORE_MAX_PERCENT = 80  # Ray refuses an object store above 80% of the node's memory


def ray_cluster(a: Analysis) -> Iterator[Finding]:
    ray = a.fleet.ray
    if ray is None:
        return
    yield from _ports(ray)
    # With a Node document left out (its own error reported), the nodes that match are only
    # some of the members: what is wrong with them stays wrong whatever the one left out
    # declares (a member's SSH port, its memory, a second head); what is missing (no head,
    # no worker) or true of exactly one head may be the left-out node's, and waits.
    complete = a.fleet.complete("Node")
    yield from _ssh_ports(ray, a)
    if ray.object_store_memory_mib is not None and "object_store_percent" in ray.declared_keys:
        yield Finding(
            ray.source,
            ("spec", "object_store_percent"),
            "ray.object-store-conflict",
            "give object_store_percent or object_store_memory_mib, not both",
        )
    heads, workers = members(ray, a.fleet)
    if len(heads) > 1 or (not heads and complete):
        yield Finding(
            ray.source,
            ("spec", "head", "selector"),
            "ray.head-not-unique",
            f"the head selector must match exactly one node; it matches {len(heads)}"
            + (f" ({', '.join(heads[:5])}{', ...' if len(heads) > 5 else ''})" if heads else ""),
        )
    if len(heads) == 1 and not workers and complete:
        yield Finding(
            ray.source,
            ("spec", "workers", "selector") if "workers" in ray.declared_keys else ("spec",),
            "ray.workers-match-nothing",
            "no node other than the head matches the workers' selector",
        )
    if len(heads) == 1 and complete:
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


def read_ray_files(fleet: Fleet, roots: Sequence[str]) -> tuple[Fleet, list[Finding], list[Diagnostic]]:
    """Read the RayCluster's lock file and CA file (:mod:`swarm_infra.fleet.lockfile`) into
    the model: ``(fleet with ray.lock and ray.index_ca filled, findings at the policy's
    fields, diagnostics at the lock file's lines)``. ``roots``: real paths of the directories
    the fleet was read from; the files must lie inside them. A lock with any problem is left
    empty (and its pins unchecked: the lines are what is wrong)."""
    ray = fleet.ray
    if ray is None:
        return fleet, [], []
    findings: list[Finding] = []
    diagnostics: list[Diagnostic] = []
    base = Path(ray.source.file).parent
    lock_path, data, problem = read_referenced(base, ray.lock_file, list(roots), MAX_LOCK_BYTES)
    pins: tuple[Pin, ...] = ()
    if problem:
        findings.append(Finding(ray.source, ("spec", "lock_file"), *problem))
    elif data is not None:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = None
            findings.append(Finding(ray.source, ("spec", "lock_file"), "ray.lock-invalid",
                                    f"{lock_path} is not UTF-8 text"))  # fmt: skip
        if text is not None:
            parsed, problems = parse_lock(text)
            for line, message in problems:
                diagnostics.append(Diagnostic(str(lock_path), line, 1, "$", "ray.lock-invalid", message))
            pins = () if problems else tuple(parsed)
    ca: str | None = None
    if ray.index_ca_file is not None:
        where = ("spec", "package_index", "ca_file")
        ca_path, data, problem = read_referenced(base, ray.index_ca_file, list(roots), MAX_CA_BYTES)
        if problem:
            findings.append(Finding(ray.source, where, *problem))
        elif data is not None:
            why = ca_problem(data)
            if why:
                findings.append(Finding(ray.source, where, "ray.ca-file-invalid", f"{ca_path}: {why}"))
            else:
                ca = normalised_pem(data)
    return replace(fleet, ray=replace(ray, lock=pins, index_ca=ca)), findings, diagnostics


def version_declared(a: Analysis) -> Iterator[Finding]:
    """Every Ray of the fleet runs the fleet's Ray version: it must be declared (Cluster
    ``spec.ray_version``) when the fleet declares a RayCluster or a tenant's ``ray``."""
    declared = a.fleet.cluster.ray_version
    if declared is not None:
        uses_ray = a.fleet.ray is not None or any(
            t.ray is not None for t in (a.fleet.allocation.tenants if a.fleet.allocation else ())
        )
        if uses_ray and not token_auth_supported(declared) and a.fleet.cluster.source is not None:
            least = ".".join(map(str, TOKEN_AUTH_MIN_VERSION))
            yield Finding(
                a.fleet.cluster.source,
                ("spec", "ray_version"),
                "ray.version-too-old",
                f"Ray {declared} has no token authentication, which every Ray of the fleet runs "
                f"(the bare-node cluster's token, KubeRay's authOptions): {least} or later",
            )
        return
    why = "the fleet's Ray version is not declared: give it once, in the Cluster document's spec.ray_version"
    if a.fleet.ray is not None:
        yield Finding(a.fleet.ray.source, ("spec",), "ray.version-missing", why)
    alloc = a.fleet.allocation
    if alloc is None:
        return
    for i, t in enumerate(alloc.tenants):
        if t.ray is not None:
            yield Finding(alloc.source, ("spec", "tenants", i, "ray"), "ray.version-missing", why)


def lock_matches(a: Analysis) -> Iterator[Finding]:
    """The lock pins Ray with its extras at the fleet's Ray version and every entry of packages."""
    ray = a.fleet.ray
    version = a.fleet.cluster.ray_version
    if ray is None or not ray.lock or version is None:
        return
    pins = {canonical_name(p.name): p for p in ray.lock}
    need = set(RAY_EXTRAS.split(","))
    got = pins.get("ray")
    if got is None or got.version != version or not need <= set(got.extras):
        found = f"it pins {got.requirement} (line {got.line})" if got else "it does not pin ray"
        yield Finding(
            ray.source,
            ("spec", "lock_file"),
            "ray.lock-mismatch",
            f"the lock must pin ray[{RAY_EXTRAS}]=={version} (the fleet's Cluster spec.ray_version); {found}",
        )
    for i, package in enumerate(ray.packages):
        name, _, version = package.partition("==")
        bare, _, extras = name.partition("[")
        pin = pins.get(canonical_name(bare))
        wanted = set(filter(None, extras.rstrip("]").split(",")))
        if pin is None:
            why = f"the lock does not pin {bare}"
        elif version and pin.version != version:
            why = f"the lock pins {pin.requirement} (line {pin.line}), not version {version}"
        elif not wanted <= set(pin.extras):
            why = f"the lock pins {pin.requirement} (line {pin.line}) without the extras {sorted(wanted)}"
        else:
            continue
        yield Finding(ray.source, ("spec", "packages", i), "ray.lock-mismatch",
                      f"{why}; regenerate it (scripts/ray-lock.py)")  # fmt: skip


CHECKS = (ray_cluster, version_declared, lock_matches)
