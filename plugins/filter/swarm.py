"""Ansible filters ``swarm_*``: decisions the library makes, for roles to apply.

Filters run on the controller, like the inventory plugin, so they call the swarm_infra
library directly; roles never restate its rules in Jinja.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: swarm_scratch_problems
short_description: Why devices must not become scratch storage
description:
  - Takes the registered results of C(blkid -p -o export DEVICE) looped over the scratch
    devices (each result's C(item) is the device) and NodeState.storage.scratch; returns one
    message per device that holds something swarm did not make (empty when all are blank or
    hold swarm's own scratch filesystem or array member).
"""


def swarm_scratch_problems(results: list, scratch: dict) -> list[str]:
    from swarm_infra.nodeside.facts import blkid_export, scratch_device_problem

    problems = (
        scratch_device_problem(str(r["item"]), blkid_export(str(r.get("stdout", ""))), dict(scratch))
        for r in results
    )
    return [p for p in problems if p]


class FilterModule:
    def filters(self) -> dict:
        return {"swarm_scratch_problems": swarm_scratch_problems}
