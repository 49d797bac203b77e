"""What the node layers tell the operator, worded once for both engines.

The Ansible roles print these through the ``swarm_note`` filter (``plugins/filter/swarm.
py``) and the pyinfra layers through ``record_note``; ``swarm converge`` shows either
engine's the same way. Each function is pure: NodeState (and, for the notes that report
what the node found, the node-side code's result) in, one line of text out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .types import NodeState


def _driver_version(node: NodeState) -> str:
    gpu = node["gpu"]
    assert gpu is not None and gpu["driver"] is not None
    return gpu["driver"]["apt_version"]


def drivers_simulated(node: NodeState) -> str:
    """The node's GPUs are simulated: no driver is installed."""
    return (
        "SIMULATED NVML backend: no NVIDIA driver is installed on this node "
        f"(would pin {_driver_version(node)})"
    )


def drivers_no_device(node: NodeState) -> str:
    """No NVIDIA PCI device (vendor 0x10de) was found: no driver is installed."""
    return (
        f"no NVIDIA PCI device found: driver {_driver_version(node)} not installed (declared GPUs missing?)"
    )


# How every note of a node left pending a reboot begins: the converge summary marks the node
# with it (swarm_infra.engines.report), whichever layer said it.
PENDING_REBOOT = "pending reboot"


def drivers_reboot_pending(node: NodeState) -> str:
    """The driver changed and the GPU profile allows no reboot."""
    return (
        f"{PENDING_REBOOT} (reboot required): NVIDIA driver changed to {_driver_version(node)}; "
        "allow_reboot is false in the GPU profile, the GPU layer waits for the reboot"
    )


def gpu_simulated(node: NodeState) -> str:
    """The GPU layer works on simulated GPUs."""
    return "SIMULATED NVML backend: GPU state is kept in files on the node; no GPU is touched"


def ray_simulated_gpus(node: NodeState) -> str:
    """Ray is told of GPUs that are simulated."""
    ray = node["ray"]
    assert ray is not None
    return f"SIMULATED GPUs: Ray is told of {ray['num_gpus']} logical GPU(s); no GPU is used"


def gpu_reset_required(found: Mapping[str, Any]) -> str:
    """The GPU changes that wait for a reboot or a GPU reset, from the node-side GPU code's
    result (:func:`swarm_infra.nodeside.gpu.run_spec`: ``changes`` with ``note``,
    ``pending_reset`` by GPU, ``simulated``; ``pending_reboot`` when the driver changed
    and the node was not rebooted, nothing read or set)."""
    if found.get("pending_reboot"):
        return f"{PENDING_REBOOT}, GPU settings not applied: {found['pending_reboot']}"
    pending = {m for modes in found.get("pending_reset", {}).values() for m in modes}
    keys = sorted({c["key"] for c in found.get("changes", []) if c.get("note")} | pending)
    label = "SIMULATED " if found.get("simulated") else ""
    return f"{label}reboot or GPU reset required for: {', '.join(keys)}"


def not_applied(item: Mapping[str, Any]) -> str:
    """A tunable persisted but not applied on this node (``{key, reason}`` from the node-side
    tunables code: a container's read-only /proc/sys, say)."""
    return f"{item['key']}: not applied: {item['reason']}"


NOTES = {
    "drivers_simulated": drivers_simulated,
    "drivers_no_device": drivers_no_device,
    "drivers_reboot_pending": drivers_reboot_pending,
    "gpu_simulated": gpu_simulated,
    "ray_simulated_gpus": ray_simulated_gpus,
}


def note(node: NodeState, name: str) -> str:
    """The note ``name`` (a key of :data:`NOTES`) for ``node``; raises KeyError otherwise."""
    return NOTES[name](node)
