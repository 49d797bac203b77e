"""Ansible inventory plugin ``swarm``: the fleet, read through the swarm_infra library.

DOCUMENTATION, below, is what ``ansible-doc -t inventory swarm`` shows.
"""

from __future__ import annotations

import json
import os
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
    C(gpu), C(simulated_gpu). Group C(all) gets C(swarm_rollout) (serial,
    max_fail_percentage) from the fleet's Rollout.
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
_SAFE = re.compile(r"[^a-z0-9_]")


def _group(prefix: str, name: str) -> str:
    return f"{prefix}_{_SAFE.sub('_', name.lower())}"


class InventoryModule(BaseInventoryPlugin):
    NAME = "swarm"
    # Desired state per fleet: every file of an inventory directory is offered to the
    # plugin, and the fleet is read once.
    _states: ClassVar[dict[tuple[str, ...], dict]] = {}

    def verify_file(self, path: str) -> bool:
        """A ``*.swarm.yml`` config, or a fleet YAML file inside ``.../inventory/NAME/``."""
        from swarm_infra.inventory_sources import CONFIG_SUFFIXES

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
        from swarm_infra.diagnostics import FleetInvalid
        from swarm_infra.inventory_sources import fleet_paths
        from swarm_infra.resolve import desired_state
        from swarm_infra.validate import load_fleet

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
        lab = _lab_connections()
        self.inventory.set_variable("all", "swarm_rollout", state["rollout"])
        for name, node in state["nodes"].items():
            self.inventory.add_host(name)
            groups = [_group("site", node["site"])] + [_group("role", r) for r in node["roles"]]
            if node["gpu"]:
                groups.append("gpu")
                groups += [_group("gpu", g["model"]) for g in node["hardware"]["gpus"]]
                if node["gpu"]["backend"] == "simulated":
                    groups.append("simulated_gpu")
            for g in groups:
                self.inventory.add_group(g)
                self.inventory.add_child(g, name)
            self.inventory.set_variable(name, "swarm", node)
            conn = lab.get(name)
            if conn:
                self.inventory.set_variable(name, "ansible_host", conn["host"])
                self.inventory.set_variable(name, "ansible_port", conn["port"])
                self.inventory.set_variable(name, "ansible_user", conn["user"])
                self.inventory.set_variable(name, "ansible_ssh_private_key_file", conn["private_key_file"])
                self.inventory.set_variable(
                    name,
                    "ansible_ssh_common_args",
                    f"-o UserKnownHostsFile={conn['known_hosts_file']} -o StrictHostKeyChecking=yes",
                )
            else:
                self.inventory.set_variable(name, "ansible_host", node["ssh"]["host"])
                self.inventory.set_variable(name, "ansible_port", node["ssh"]["port"])
                self.inventory.set_variable(name, "ansible_user", node["ssh"]["user"])


def _lab_connections() -> dict[str, dict]:
    path = Path(os.environ.get("SWARM_LAB_DIR", "/var/lib/swarm-lab")) / "connection.json"
    if not path.exists():
        return {}
    return json.loads(path.read_text()).get("nodes", {})
