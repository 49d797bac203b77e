#!/usr/bin/python
"""Ansible module ``swarm_gpu``: converge GPU settings (NVML or simulated)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: swarm_gpu
short_description: Converge a node's GPU settings through NVML (or the simulated backend)
description:
  - Per GPU, reads the current state, diffs it against the desired settings and applies only
    the differences; C(changed) only when something changed. Full check mode and diff.
  # A block scalar: the text holds colon-spaces, which end a plain YAML scalar.
  - >-
    Persistence mode, power management limit (W; validated against
    nvmlDeviceGetPowerManagementLimitConstraints), application or locked clocks (validated
    against the supported clock lists; locked clocks, which NVML cannot read back, are known
    from a record of what was applied in this boot with this driver, and set again on every
    run), compute mode, ECC (pending until reboot), MIG mode (reported as needing a reset or
    reboot when NVML's activation status says so) and MIG geometry (GPU and compute
    instances, fitted to NVML's placement table, replaced whole as NVIDIA's mig-parted does:
    declared holders stopped, every creation order tried, the previous geometry put back
    on failure, checked after applying).
  - With C(backend=nvml) the GPUs are identified first (count, NVML name, memory against
    C(limits)); a mismatch refuses the node before any setting. A driver changed without
    a reboot (LIB_RM_VERSION_MISMATCH) reports C(pending_reboot) and succeeds; a lost GPU
    is reported in C(lost_gpus) and the others are converged.
  - Every value of every GPU is validated before any is applied. In check mode nothing is
    written, on the GPU or on disk.
  - With C(backend=simulated) no GPU is touched; state lives in files on the node and the
    GPU catalog's limits are enforced. Results then say C(simulated=true) and messages say
    "SIMULATED".
options:
  backend:
    description: C(nvml) for real GPUs, C(simulated) for the lab.
    type: str
    choices: [nvml, simulated]
    required: true
  devices:
    description: GPUs to converge, each C({index, model, settings}) as in NodeState.gpu.devices.
    type: list
    elements: dict
    required: true
  limits:
    description:
      - Catalog limits per model (NodeState.gpu.limits). The simulated backend enforces them;
        with C(nvml) they identify the GPUs first (count, NVML name, total memory), and a
        mismatch refuses the node before any setting.
    type: dict
    default: {}
  mig_holders:
    description:
      - systemd units that hold MIG instances open (DCGM, dcgm-exporter, the device plugin
        where it runs under systemd); the active ones are stopped before MIG instances are
        destroyed and started again after, as NVIDIA mig-parted does.
    type: list
    elements: str
    default: []
  reboot_marker:
    description:
      - >-
        The drivers layer's pending-reboot marker (NodeState.gpu.reboot_marker). While it
        names the NVIDIA driver, the node is pending a reboot: nothing is read or set, the
        result says C(pending_reboot) and the task does not fail.
    type: str
    default: ""
author: Swarm infrastructure team
"""

EXAMPLES = r"""
- name: Converge GPU settings
  swarm_gpu:
    backend: "{{ swarm.gpu.backend }}"
    devices: "{{ swarm.gpu.devices }}"
    limits: "{{ swarm.gpu.limits }}"
"""

RETURN = r"""
changes:
  description: What changed (or would change in check mode), per GPU and key.
  returned: always
  type: list
  elements: dict
reboot_required:
  description: True when an ECC or MIG mode change waits for a reboot or GPU reset (made now or before).
  returned: always
  type: bool
pending_reset:
  description: Per GPU index, the modes changed but not yet in effect (ecc, mig).
  returned: always
  type: dict
pending_reboot:
  description:
    - Why the node waits for a reboot before its GPUs can be read (the NVIDIA driver changed
      and NVML reports LIB_RM_VERSION_MISMATCH); nothing was read or set. Not a failure.
  returned: when the node is pending a reboot
  type: str
lost_gpus:
  description: Per GPU index, why NVML reports it lost (GPU_IS_LOST); the other GPUs were converged.
  returned: always
  type: dict
simulated:
  description: True when the simulated backend was used (no GPU was touched).
  returned: always
  type: bool
"""

# Ansible modules keep their documentation before the imports (ansible-doc reads it so).
from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.swarm_gpu_node import GpuError, converge_spec  # noqa: E402


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "backend": {"type": "str", "choices": ["nvml", "simulated"], "required": True},
            "devices": {"type": "list", "elements": "dict", "required": True},
            "limits": {"type": "dict", "default": {}},
            "mig_holders": {"type": "list", "elements": "str", "default": []},
            "reboot_marker": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        result = converge_spec(p, check_mode=module.check_mode)
    except GpuError as exc:
        hint = {
            "NO_PERMISSION": " (run as root)",
            "DRIVER_NOT_LOADED": " (is the NVIDIA driver installed and loaded? run the drivers role first)",
            "PYNVML_MISSING": " (the drivers layer installs python3-pynvml; run it first)",
            "NOT_SUPPORTED": " (this GPU model does not support the setting; change the GpuProfile)",
            "IN_USE": " (stop the GPU's workloads first; nothing was changed on that GPU)",
            "IDENTITY": " (the node's GPUs are not the ones its inventory declares; fix the inventory)",
        }.get(exc.code, "")
        module.fail_json(msg=f"{exc}{hint}", code=exc.code, simulated=p["backend"] == "simulated")
    if "pending_reboot" in result:
        module.exit_json(
            changed=False,
            changes=[],
            reboot_required=True,
            pending_reset={},
            pending_reboot=result["pending_reboot"],
            lost_gpus={},
            simulated=False,
            msg=f"pending reboot: {result['pending_reboot']}",
        )
    label = "SIMULATED " if result["simulated"] else ""
    lost = {str(k): v for k, v in result["lost"].items()}
    keys = ("persistence_mode", "power_limit_w", "application_clocks", "locked_clocks", "compute_mode")

    def view(states: dict) -> dict:
        return {
            f"gpu{i}": {
                **{k: s.get(k) for k in keys},
                "ecc_pending": s.get("ecc_pending"),
                "mig_pending": s.get("mig_pending"),
                "mig_geometry": (s.get("mig") or {}).get("profiles"),
            }
            for i, s in states.items()
        }

    after = view(result["before"])
    for c in result["changes"]:
        name = {"ecc": "ecc_pending", "mig": "mig_pending"}.get(c["key"], c["key"])
        after[f"gpu{c['gpu']}"][name] = c["after"]["enabled"] if c["key"] == "mig" else c["after"]
    module.exit_json(
        changed=bool(result["changes"]),
        changes=result["changes"],
        reboot_required=result["reboot_required"],
        pending_reset={str(k): v for k, v in result["pending_reset"].items()},
        simulated=result["simulated"],
        lost_gpus=lost,
        warnings=[f"GPU {i} lost, left as it is: {m}" for i, m in sorted(lost.items())],
        msg=f"{label}{len(result['changes'])} GPU setting(s) "
        + ("to change" if module.check_mode else "changed"),
        diff={"before": view(result["before"]), "after": after},
    )


if __name__ == "__main__":
    main()
