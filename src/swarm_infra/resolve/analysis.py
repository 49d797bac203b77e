"""What the checks share: the fleet and the decisions computed once for it."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from ..fleet.model import Fleet
from .assign import Choice
from .mesh import Topology


@dataclass(frozen=True)
class Analysis:
    """The fleet plus profile choices, the nodes' mesh addresses and topology (None without a
    Mesh), and the controller's mesh address (None without Mesh ``spec.controller``, or
    when its address is in error)."""

    fleet: Fleet
    choices: dict[str, dict[str, Choice]]
    addresses: dict[str, ipaddress.IPv4Address]
    topology: Topology | None
    controller_address: ipaddress.IPv4Address | None = None

    def known(self, kind: str, name: str) -> bool:
        """``name`` is declared as ``kind``, validly or not (so no second error is due)."""
        table = {
            "Site": self.fleet.sites,
            "Node": self.fleet.nodes,
            "GpuProfile": self.fleet.gpu_profiles,
            "HostProfile": self.fleet.host_profiles,
            "Priority": self.fleet.priorities,
            "Assignment": self.fleet.assignments,
        }[kind]
        return name in table or self.fleet.may_declare(kind, name)

    def flavors(self) -> dict[str, str]:
        """GPU flavor name → catalog model, for the models present in the fleet."""
        from .catalog import gpu_catalog

        catalog = gpu_catalog()
        models = {s.model for n in self.fleet.nodes.values() for s in n.gpus if s.model in catalog}
        return {catalog[m]["flavor"]: m for m in sorted(models)}
