"""Nodes: names and labels that belong to someone else, hardware declared twice."""

from __future__ import annotations

from collections.abc import Iterator

from ...fleet.diagnostics import Finding
from ..analysis import Analysis
from ..node import FLAVOR_LABEL, SITE_LABEL

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
PROJECT_LABELS = (SITE_LABEL, FLAVOR_LABEL)


def _reserved_domain(key: str) -> str | None:
    if "/" not in key:
        return None
    prefix = key.split("/", 1)[0]
    return next((d for d in RESERVED_LABEL_DOMAINS if prefix == d or prefix.endswith("." + d)), None)


def names_and_labels(a: Analysis) -> Iterator[Finding]:
    """``name.reserved``: a node named like an Ansible implicit group or host (or the
    inventory's ``gpu`` group); ``label.reserved``: a user label under a prefix this project
    or Kubernetes owns (``swarm.io/gpu-flavor`` would be overwritten by the derived one)."""
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
            if domain is None:
                continue
            derived = " (set from the fleet: it would be overwritten)" if key in PROJECT_LABELS else ""
            yield Finding(
                node.source,
                ("metadata", "labels", key),
                "label.reserved",
                f"label {key!r}: the prefix {domain}/ is reserved{derived}; use your own prefix",
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


CHECKS = (names_and_labels, hardware)
