"""Ansible inventory plugin ``swarm``: the fleet, read through the swarm_infra library.

DOCUMENTATION, below, is what ``ansible-doc -t inventory swarm`` shows. The plugin is
thin: the hosts, groups and variables come from ``swarm_infra.engines``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar

from ansible.errors import AnsibleParserError
from ansible.plugins.inventory import BaseInventoryPlugin
from ansible.utils.display import Display

display = Display()

DOCUMENTATION = r"""
name: swarm
short_description: Swarm fleet inventory (inventory/NAME + policies/NAME + policies/shared)
description:
  - Reads the declared fleet with the swarm_infra library, validates it and gives each Node
    its resolved desired state (NodeState) as the host variable C(swarm). Roles read only
    their slice (C(swarm.host), C(swarm.gpu), C(swarm.mesh)).
  - Point C(-i) at a fleet's inventory directory (C(-i inventory/lab)), or at any file below
    it; the plugin then reads C(inventory/lab), C(policies/lab) and C(policies/shared). Or
    give a file named C(*.swarm.yml) with C(plugin=swarm) and C(fleet_paths).
  - An invalid fleet fails the run before any host is touched, with the validator's
    messages (C(any_unparsed_is_failed) is set in ansible.cfg).
  - Every host variable is marked unsafe (C(wrap_var)), so Ansible never templates fleet
    data.
  - Groups C(site_<site>), C(role_<role>), C(gpu_<model>) (e.g. C(gpu_h100_sxm5_80gb)),
    C(gpu), C(simulated_gpu) (the same groups the pyinfra inventory has).
  - When a local lab is up (C(swarm lab up)), connection details (address, user, lab key,
    host keys) come from its connection file, C($SWARM_LAB_DIR/connection.json).
  - Host keys are checked strictly (C(StrictHostKeyChecking=yes), never trust on first
    use), each node against a known_hosts file of its own, made from its declared
    C(spec.ssh.host_keys) (or the lab's) in C($SWARM_KNOWN_HOSTS_DIR), default
    C(~/.cache/swarm/known_hosts), so one node's key never authenticates another; a node
    without keys against the operator's own known_hosts.
options:
  plugin:
    description: Must be C(swarm) in a C(*.swarm.yml) file.
    type: str
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


class InventoryModule(BaseInventoryPlugin):
    NAME = "swarm"
    # The result per fleet (its hosts, or the error to show): every file of an inventory
    # directory is offered to the plugin, and the fleet is read once.
    _results: ClassVar[dict[tuple[str, ...], list | str]] = {}

    def verify_file(self, path: str) -> bool:
        """A ``*.swarm.yml`` config, or any entry inside ``.../inventory/NAME/`` (at any
        depth: the fleet is the whole directory, whatever each file holds; a link that
        names nothing is taken too, so that the validator, not Ansible, reports it)."""
        from swarm_infra.fleet.sources import CONFIG_SUFFIXES, fleet_root

        p = Path(path)
        return p.name.endswith(CONFIG_SUFFIXES) or (os.path.lexists(p) and fleet_root(p) is not None)

    def parse(self, inventory, loader, path, cache=True):
        super().parse(inventory, loader, path, cache)
        from swarm_infra.engines.ansible.hostvars import unsafe_host_vars
        from swarm_infra.engines.inventory import InventorySourceError, fleet_state, inventory_hosts
        from swarm_infra.fleet.sources import fleet_root
        from swarm_infra.lab.state import read_connections

        root = fleet_root(path)
        key = (str(root) if root else str(Path(path).resolve()),)
        result = self._results.get(key)
        if result is None:
            try:
                _, state = fleet_state(path)
                result = inventory_hosts(state, read_connections())
            except InventorySourceError as exc:
                result = str(exc)
            except (OSError, ValueError) as exc:  # the lab's connection file
                result = f"swarm: cannot read the lab's connection file: {exc}"
            self._results[key] = result
            if isinstance(result, str):
                # Once, unwrapped: Ansible's warnings re-wrap text and would join the
                # report's file:line:col lines into a paragraph.
                display.error(result, wrap_text=False)
        if isinstance(result, str):
            raise AnsibleParserError(result.splitlines()[0] + " (the report is above)")
        if all(h.name in inventory.hosts for h in result):
            return
        for host in result:
            self.inventory.add_host(host.name)
            for g in host.groups:
                self.inventory.add_group(g)
                self.inventory.add_child(g, host.name)
            for var, value in unsafe_host_vars(host).items():
                self.inventory.set_variable(host.name, var, value)
