"""Nodes: names and labels that belong to someone else, hardware declared twice, SSH targets
and host keys."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

from ...fleet.diagnostics import Finding
from ...fleet.model import Node
from ..analysis import Analysis
from ..keys import ssh_host_key_fingerprint, ssh_host_key_problem
from ..labels import FLAVOR_LABEL, NODE_CLASS_LABEL, SITE_LABEL
from .cluster import reserved_label
from .network import unusable

# Ansible's implicit groups and host: a node with one of these names breaks inventory
# patterns (``--limit all``) or is silently taken for the controller (``localhost``). ``gpu``
# is a group the inventory makes (engines/inventory.py).
RESERVED_NODE_NAMES = {
    "all": "Ansible's group of every host",
    "ungrouped": "Ansible's group of hosts in no other group",
    "localhost": "Ansible's implicit controller host",
    "gpu": "the inventory group of every GPU node",
}
# Label prefixes (the part before '/') owned by others: swarm.io is this project's
# (SITE_LABEL, FLAVOR_LABEL are set from the fleet), kubernetes.io and k8s.io are
# Kubernetes' (its "reserved for Kubernetes core components" rule), with their subdomains.
RESERVED_LABEL_DOMAINS = ("swarm.io", "kubernetes.io", "k8s.io")
PROJECT_LABELS = (SITE_LABEL, FLAVOR_LABEL, NODE_CLASS_LABEL)


def _reserved_domain(key: str) -> str | None:
    if "/" not in key:
        return None
    prefix = key.split("/", 1)[0]
    return next((d for d in RESERVED_LABEL_DOMAINS if prefix == d or prefix.endswith("." + d)), None)


def names_and_labels(a: Analysis) -> Iterator[Finding]:
    """``name.reserved``: a node named like an Ansible implicit group or host (or the
    inventory's ``gpu`` group); ``label.reserved``: a user label under a prefix this project
    or Kubernetes owns (``swarm.io/gpu-flavor`` would be overwritten by the derived one), or
    any key a Cluster label may not use either (:func:`.cluster.reserved_label`: Kueue's,
    KubeRay's, NVIDIA's; ``nvidia.com/gpu.present=true`` would draw the device plugin onto
    the node). A node's document is trusted with that node only: its labels must not pull
    other tenants' work onto it."""
    for node in a.fleet.nodes.values():
        if node.name in RESERVED_NODE_NAMES:
            yield Finding(
                node.source,
                ("metadata", "name"),
                "name.reserved",
                f"{node.name!r} is {RESERVED_NODE_NAMES[node.name]}; a node cannot be named so",
            )
        for key in node.labels:
            domain = _reserved_domain(key)
            if domain is None and not reserved_label(key):
                continue
            derived = " (set from the fleet: it would be overwritten)" if key in PROJECT_LABELS else ""
            owner = f"the prefix {domain}/" if domain else "the key"
            yield Finding(
                node.source,
                ("metadata", "labels", key),
                "label.reserved",
                f"label {key!r}: {owner} is reserved{derived}; use your own prefix",
            )


def hardware(a: Analysis) -> Iterator[Finding]:
    """``hardware.nvme-duplicate``: one NVMe device listed twice in a node (its capacity
    would count twice, and scratch would stripe a device with itself)."""
    for node in a.fleet.nodes.values():
        seen: dict[str, int] = {}
        for i, (device, _) in enumerate(node.nvme):
            if device in seen:
                yield Finding(
                    node.source,
                    ("spec", "hardware", "nvme", i, "device"),
                    "hardware.nvme-duplicate",
                    f"{device} is already listed (nvme[{seen[device]}])",
                )
            else:
                seen[device] = i


def ssh_targets(a: Analysis) -> Iterator[Finding]:
    """Where the controller takes the operator's key (issue #22: SSH targets are part of the
    declared, reviewed state). ``node.ssh-target-outside-site``: ``ssh.host`` is not an IPv4
    address in the node's site underlay or the site's declared management network (a host
    name cannot be checked, and another provider's machine, ``localhost`` or a metadata
    address would receive this node's state as root), or it is an address no machine of the
    site can be (loopback, link-local, unspecified, multicast: :func:`.network.unusable`);
    ``node.ssh-target-duplicate``: two nodes at one host and port (one machine would get both
    nodes' states). Every node's target is compared, its default (its own address) included,
    whatever the nodes' order: a node on its own address keeps it and the other is refused,
    naming it (issue #38: a newcomer declaring ``ssh.host: <head's address>``); two declared
    targets that meet are both refused, each naming the other."""
    by_target: dict[tuple[str, int], list[Node]] = {}
    for node in a.fleet.nodes.values():
        by_target.setdefault((node.ssh_host.lower(), node.ssh_port), []).append(node)
        if node.ssh_host == str(node.address):
            continue  # the default (or the same): the address's own rules judge it, one mistake one error
        problem = _outside_site(a, node)
        if problem:
            yield Finding(node.source, ("spec", "ssh", "host"), "node.ssh-target-outside-site", problem)
    for (host, port), nodes in by_target.items():
        if len(nodes) < 2:
            continue
        # Two nodes on one address are network.address-duplicate's to report.
        owners = [n.name for n in nodes if n.ssh_host == str(n.address)]
        for node in nodes:
            if node.name in owners:
                continue
            others = ", ".join(
                f"{n.name} ({'its own address' if n.name in owners else 'declared'})"
                for n in nodes
                if n is not node
            )
            yield Finding(
                node.source,
                ("spec", "ssh", "host"),
                "node.ssh-target-duplicate",
                f"node {node.name}'s SSH target {host}:{port} is already that of node {others}: "
                "the controller would apply this node's state to that machine as root",
            )


def _outside_site(a: Analysis, node: Node) -> str | None:
    """Why ``node``'s declared ``ssh.host`` is not a machine of its site, or None."""
    try:
        host = ipaddress.IPv4Address(node.ssh_host)
    except ValueError:
        host = None
    if host is not None:
        why = unusable(ipaddress.IPv4Network(host))
        if why:
            return f"SSH target {host} is {why}: no machine of site {node.site} answers there"
    site = a.fleet.sites.get(node.site)
    if site is None:
        return None  # reference.* reports the site
    networks = [site.underlay, *([site.management] if site.management else [])]
    if host is not None and any(host in n for n in networks):
        return None
    where = " or ".join(str(n) for n in networks)
    what = f"{node.ssh_host!r} is not an IPv4 address" if host is None else f"{host} is not"
    return (
        f"SSH target {what} in site {site.name}'s networks ({where}); the controller would "
        "apply this node's state to whatever answers there"
    )


def ssh_host_keys(a: Analysis) -> Iterator[Finding]:
    """The keys the engines accept from a node (issue #22: host keys are declared, reviewed
    state). ``node.ssh-host-key-invalid``: a key the schema's pattern lets through whose
    type is not allowed, whose base64 does not decode (canonically), whose data holds
    another type or is no key of its type, or an RSA key under 2048 bits
    (``resolve.keys.ssh_host_key_problem``); ``node.ssh-host-key-duplicate``: a key another
    node declares too (two nodes cannot be one machine: a provider copied a key, or one
    machine would answer for both)."""
    owners: dict[str, str] = {}
    for node in a.fleet.nodes.values():
        for i, key in enumerate(node.ssh_host_keys):
            where = ("spec", "ssh", "host_keys", i)
            problem = ssh_host_key_problem(key)
            if problem:
                yield Finding(node.source, where, "node.ssh-host-key-invalid", problem)
                continue
            # Canonical base64 (checked above): one key has one spelling.
            owner = owners.setdefault(key, node.name)
            if owner != node.name:
                yield Finding(
                    node.source,
                    where,
                    "node.ssh-host-key-duplicate",
                    f"node {owner} declares the same host key ({ssh_host_key_fingerprint(key)}); "
                    "two nodes cannot be one machine",
                )


CHECKS = (names_and_labels, hardware, ssh_targets, ssh_host_keys)
