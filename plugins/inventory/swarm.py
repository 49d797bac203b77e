"""Ansible inventory plugin ``swarm``: the fleet, read through the swarm_infra library.

DOCUMENTATION, below, is what ``ansible-doc -t inventory swarm`` shows.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import ClassVar

from ansible.errors import AnsibleParserError
from ansible.plugins.inventory import BaseInventoryPlugin

DOCUMENTATION = r"""
name: swarm
short_description: Swarm fleet inventory (inventory/NAME + policies/NAME + policies/shared)
description:
  - Reads the declared fleet with the swarm_infra library, validates it and gives each Node
    its resolved desired state (NodeState) as the host variable C(swarm). Roles read only
    their slice (C(swarm.host), C(swarm.gpu), C(swarm.mesh)).
  - Point C(-i) at a fleet's inventory directory (C(-i inventory/lab)); the plugin then reads
    C(inventory/lab), C(policies/lab) and C(policies/shared). Or give a file named
    C(*.swarm.yml) with C(plugin=swarm) and C(fleet_paths).
  - An invalid fleet fails the run before any host is touched, with the validator's
    messages (C(any_unparsed_is_failed) is set in ansible.cfg).
  - Groups C(site_<site>), C(role_<role>), C(gpu_<model>) (e.g. C(gpu_h100_sxm5_80gb)),
    C(gpu), C(simulated_gpu) (the same groups the pyinfra inventory has).
  - When a local lab is up (C(swarm lab up)), connection details (address, user, lab key,
    known_hosts) come from its connection file, C($SWARM_LAB_DIR/connection.json).
options:
  plugin:
    description: Must be C(swarm) in a C(*.swarm.yml) file.
    required: false
    choices: [swarm]
  fleet_paths:
    description: Fleet files or directories, relative to the C(*.swarm.yml) file.
    type: list
    elements: str
    required: false
"""

EXAMPLES = r"""
# ansible-playbook -i inventory/lab playbooks/site.yml
# or, in fleet.swarm.yml:
plugin: swarm
fleet_paths: [inventory/lab, policies/lab, policies/shared]
"""

_API = re.compile(r"^apiVersion:\s*swarm\.io/", re.M)


class InventoryModule(BaseInventoryPlugin):
    NAME = "swarm"
    # Desired state per fleet: every file of an inventory directory is offered to the
    # plugin, and the fleet is read once.
    _states: ClassVar[dict[tuple[str, ...], dict]] = {}

    def verify_file(self, path: str) -> bool:
        """A ``*.swarm.yml`` config, or a fleet YAML file inside ``.../inventory/NAME/``."""
        from swarm_infra.fleet.sources import CONFIG_SUFFIXES

        p = Path(path)
        if p.name.endswith(CONFIG_SUFFIXES):
            return True
        if p.suffix not in (".yml", ".yaml") or p.parent.parent.name != "inventory":
            return False
        try:
            return bool(_API.search(p.read_text(errors="replace")))
        except OSError:
            return False

    def parse(self, inventory, loader, path, cache=True):
        super().parse(inventory, loader, path, cache)
        from swarm_infra.engines.inventory import ansible_connection_vars, inventory_hosts
        from swarm_infra.fleet.diagnostics import FleetInvalid
        from swarm_infra.fleet.sources import fleet_paths
        from swarm_infra.lab.state import read_connections
        from swarm_infra.resolve import desired_state, load_fleet

        paths = fleet_paths(path)
        key = tuple(paths)
        state = self._states.get(key)
        if state is not None and all(h in inventory.hosts for h in state["nodes"]):
            return
        if state is None:
            try:
                analysis = load_fleet(paths)
            except FleetInvalid as exc:
                raise AnsibleParserError(
                    f"the fleet ({', '.join(paths)}) is invalid; nothing was run:\n{exc.report.text()}"
                ) from None
            state = self._states[key] = desired_state(analysis)
        for host in inventory_hosts(state, read_connections()):
            self.inventory.add_host(host.name)
            for g in host.groups:
                self.inventory.add_group(g)
                self.inventory.add_child(g, host.name)
            self.inventory.set_variable(host.name, "swarm", host.state)
            for var, value in ansible_connection_vars(host.connection).items():
                self.inventory.set_variable(host.name, var, value)
