"""Nodes: names and labels that belong to someone else, hardware declared twice, SSH targets
and host keys."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

from ...fleet.diagnostics import Finding
from ..analysis import Analysis
from ..keys import ssh_host_key_fingerprint, ssh_host_key_problem
from ..labels import FLAVOR_LABEL, NODE_CLASS_LABEL, SITE_LABEL
from .cluster import reserved_label

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
    address would receive this node's state as root); ``node.ssh-target-duplicate``: two
    nodes at one host and port (one machine would get both nodes' states)."""
    seen: dict[tuple[str, int], str] = {}
    for node in a.fleet.nodes.values():
        if node.ssh_host == str(node.address):
            # The default (or the same): the address's own rules judge it, one mistake one error.
            seen.setdefault((node.ssh_host, node.ssh_port), node.name)
            continue
        site = a.fleet.sites.get(node.site)
        declared = ("spec", "ssh", "host")
        try:
            host = ipaddress.IPv4Address(node.ssh_host)
        except ValueError:
            host = None
        if site is not None:
            networks = [site.underlay, *([site.management] if site.management else [])]
            if host is None or not any(host in n for n in networks):
                where = " or ".join(str(n) for n in networks)
                what = f"{node.ssh_host!r} is not an IPv4 address" if host is None else f"{host} is not"
                yield Finding(
                    node.source,
                    declared,
                    "node.ssh-target-outside-site",
                    f"SSH target {what} in site {site.name}'s networks ({where}); the controller would "
                    "apply this node's state to whatever answers there",
                )
        key = (node.ssh_host, node.ssh_port)
        if key in seen:
            yield Finding(
                node.source,
                declared,
                "node.ssh-target-duplicate",
                f"node {seen[key]} has the same SSH target {node.ssh_host}:{node.ssh_port}",
            )
        seen.setdefault(key, node.name)


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
