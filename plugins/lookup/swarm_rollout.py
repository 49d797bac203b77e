"""Lookup ``swarm_rollout``: the fleet's Rollout as Ansible play keywords.

Play keywords such as ``serial`` are templated before any host exists, so inventory
variables are not visible to them; this lookup reads the Rollout from the fleet behind the
run's inventory sources instead.
"""

from __future__ import annotations

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

DOCUMENTATION = r"""
name: swarm_rollout
short_description: Rolling-batch settings from the fleet's Rollout
description:
  - Returns C(serial) (a list, canary batch first) or C(max_fail_percentage) for the fleet
    behind the run's inventory sources (C(-i inventory/NAME)).
  - Without a Rollout in the fleet (or without a swarm inventory, with a warning) the
    defaults are a canary of 1 host, batches of 25%, and no failure tolerated.
options:
  _terms:
    description: C(serial) or C(max_fail_percentage).
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Converge
  hosts: all
  serial: "{{ lookup('swarm_rollout', 'serial') }}"
  max_fail_percentage: "{{ lookup('swarm_rollout', 'max_fail_percentage') }}"
"""

RETURN = r"""
_raw:
  description: The setting, once (serial is a list such as [1, "25%"]).
  type: list
  elements: raw
"""


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        from swarm_infra.fleet.diagnostics import FleetInvalid
        from swarm_infra.fleet.sources import fleet_paths
        from swarm_infra.resolve import load_fleet, rollout_state

        sources = (variables or {}).get("ansible_inventory_sources") or []
        try:
            paths = next((p for p in (fleet_paths(s) for s in sources) if p), None)
        except (OSError, ValueError) as exc:
            raise AnsibleLookupError(f"swarm_rollout: {exc}") from None
        if not paths:
            # Not a swarm inventory (a static host list, ansible-lint's syntax check): the
            # Rollout defaults, said out loud.
            self._display.warning(f"swarm_rollout: no swarm fleet among {list(sources)}; using defaults")
            rollout = rollout_state(None)
        else:
            try:
                rollout = rollout_state(load_fleet(paths))
            except FleetInvalid as exc:
                raise AnsibleLookupError(f"the fleet is invalid:\n{exc.report.text()}") from None
        unknown = [t for t in terms if t not in rollout]
        if unknown:
            raise AnsibleLookupError(f"swarm_rollout: unknown setting(s) {unknown}; known: {sorted(rollout)}")
        return [rollout[t] for t in terms]
