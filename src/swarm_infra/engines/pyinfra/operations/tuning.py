"""Host tuning and GPU settings, by the node-side code the Ansible modules run
(:mod:`swarm_infra.nodeside.tunables`, :mod:`swarm_infra.nodeside.gpu`), sent on stdin."""

from __future__ import annotations

from collections.abc import Generator, Mapping
from typing import Any

from pyinfra import host
from pyinfra.api import OperationError, StringCommand, operation

from ....nodeside import gpu as nodeside_gpu
from ....nodeside import tunables as nodeside_tunables
from ....resolve.notes import gpu_reset_required, not_applied
from .run import changing, record_note
from .util import nodeside_command, nodeside_fact


@operation()
def tunables(spec: Mapping[str, Any]) -> Generator[StringCommand, None, None]:
    """Converge sysctls and sysfs values to exactly ``spec`` (one managed sysctl.d file, one
    tmpfiles.d file, live values where they differ, removed keys restored to their value
    before the project set them): the node-side code the Ansible module ``swarm_tunables``
    runs (:mod:`swarm_infra.nodeside.tunables`).

    + spec: ``{"sysctls": {key: text}, "sysfs": [...], "sysctl_conf": path, "tmpfiles_conf":
      path or None, "record": path, "label": why}`` (:func:`swarm_infra.resolve.files.
      tunables_spec`)

    **Example:**

    .. code:: python

        tunables(name="Host tuning", spec=tunables_spec(host.data.swarm, "host"))
    """
    plan = nodeside_fact(nodeside_tunables, "tunables", "plan", dict(spec))
    for item in plan["not_applied"]:
        record_note(not_applied(item))
    if plan["files"] or plan["writes"] or plan["restores"] or plan["record_changed"]:
        for f in plan["files"]:
            host.noop(f"{f['path']}: {'removed' if f['after'] is None else 'written'}")
        changing()
        yield nodeside_command(nodeside_tunables, "converge", dict(spec))


@operation()
def gpu_settings(gpu: Mapping[str, Any]) -> Generator[StringCommand, None, None]:
    """Converge the node's GPUs to NodeState.gpu (power management limit, clocks, persistence,
    compute, ECC and MIG modes) with the node-side GPU code the Ansible module ``swarm_gpu``
    runs (:mod:`swarm_infra.nodeside.gpu`): validate every setting, then apply; changes that
    wait for a reset or reboot are reported, never half-applied.

    **Example:** ``gpu_settings(name="GPU settings", gpu=host.data.swarm["gpu"])``"""
    found = nodeside_fact(nodeside_gpu, "gpu diff", "run_spec", dict(gpu), apply=False)
    if not found or found.get("error"):
        raise OperationError(f"swarm-gpu: {(found or {}).get('error', 'the node-side GPU code failed')}")
    label = "SIMULATED " if found["simulated"] else ""
    if found["reboot_required"]:
        record_note(gpu_reset_required(found))
    if found["changes"]:
        for c in found["changes"]:
            host.noop(f"{label}gpu {c['gpu']} {c['key']}: {c['before']} -> {c['after']}")
        changing()
        yield nodeside_command(nodeside_gpu, "run_spec", dict(gpu), apply=True)
