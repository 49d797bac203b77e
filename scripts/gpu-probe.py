#!/usr/bin/env python3
"""Read-only GPU probe: what NVML reports on this machine, and what the GPU layer would do.

Usage (as root on a GPU machine, with nvidia-ml-py or Debian's python3-pynvml):

    python3 scripts/gpu-probe.py --out probe.json [--spec gpu-spec.json]

Writes one JSON document: ``versions`` (driver, NVML, CUDA as the driver reports them) and
per GPU (``gpus``): name, UUID, total memory (MiB), power management limit, default and
constraints (W), supported memory and graphics clocks (MHz), application clocks (or the
NVML code that refused them), ECC current/pending, MIG mode current/pending, the MIG
profiles NVML offers with their placements and instance counts, the current MIG geometry,
and ``read``: what the GPU layer's read path (``NvmlBackend.read``) makes of it. With
``--spec`` (a NodeState.gpu document: backend, devices, limits) it also runs the identity
check and the diff in check mode (``converge(check_mode=True)``) and records the changes it
would make, or why it refuses the node.

It changes nothing: pynvml is replaced, for the whole run, by a wrapper that lets through
only ``nvmlInit*``, ``nvmlShutdown``, ``nvmlErrorString`` and the ``nvml{Device,System,
GpuInstance,ComputeInstance}Get*`` functions; any other NVML function (every
``*Set*``, ``*Reset*``, ``*Create*``, ``*Destroy*``, ``*Clear*`` among them) raises
:class:`ProbeRefused` before reaching the driver, and the refusals are listed in the
output (``refused``, which must be empty). The GPU layer's backend is opened read-only.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import re
import sys
import types
from typing import Any

# The only NVML functions the probe may reach: initialisation and getters.
ALLOWED = re.compile(
    r"^nvml(Init(_v2|WithFlags)?|Shutdown|ErrorString|(Device|System|GpuInstance|ComputeInstance)Get\w*)\Z"
)


class ProbeRefused(RuntimeError):
    """An NVML function other than a getter was called during the probe."""


class ReadOnlyNvml(types.ModuleType):
    """``pynvml`` with every function but :data:`ALLOWED` refused (``refused`` lists them)."""

    def __init__(self, real: Any) -> None:
        super().__init__("pynvml")
        self._real = real
        self.refused: list[str] = []

    def __getattr__(self, name: str) -> Any:  # only for names not set on the wrapper
        value = getattr(self._real, name, None)
        if name.startswith("nvml") and (value is None or callable(value)) and not ALLOWED.match(name):

            def refuse(*args: object, **kwargs: object) -> Any:
                self.refused.append(name)
                raise ProbeRefused(f"{name}: the GPU probe calls no NVML function that changes a GPU")

            return refuse
        if value is None and not hasattr(self._real, name):
            raise AttributeError(name)
        return value


@functools.cache
def _node_module() -> Any:
    """The node-side GPU code: the package in this checkout (src/), or the copy shipped to
    nodes (swarm_gpu_node.py) next to this script."""
    here = os.path.dirname(os.path.abspath(__file__))
    src = os.path.join(os.path.dirname(here), "src")
    if os.path.isdir(os.path.join(src, "swarm_infra")):
        sys.path.insert(0, src)
        from swarm_infra.nodeside import gpu

        return gpu
    spec = importlib.util.spec_from_file_location("swarm_gpu_node", os.path.join(here, "swarm_gpu_node.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _try(fn: Any, *args: object) -> Any:
    """``fn(*args)``, or {"error": NVML code name} where NVML refuses."""
    node = _node_module()
    try:
        return fn(*args)
    except node.GpuError as exc:
        return {"error": exc.code, "message": str(exc)}


def _gpu(backend: Any, nvml: Any, index: int) -> dict[str, Any]:
    call = backend._call  # the GPU layer's own NVML call: errors become GpuError codes
    h = _try(call, "nvmlDeviceGetHandleByIndex", index)
    if isinstance(h, dict):
        return {"index": index, **h}
    mems = _try(call, "nvmlDeviceGetSupportedMemoryClocks", h)
    mig_mode = _try(call, "nvmlDeviceGetMigMode", h)
    ecc = _try(call, "nvmlDeviceGetEccMode", h)
    constraints = _try(call, "nvmlDeviceGetPowerManagementLimitConstraints", h)
    mw = _try(call, "nvmlDeviceGetPowerManagementLimit", h)
    default_mw = _try(call, "nvmlDeviceGetPowerManagementDefaultLimit", h)
    memory = _try(call, "nvmlDeviceGetMemoryInfo", h)
    mig_on = isinstance(mig_mode, list | tuple) and mig_mode[0] == nvml.NVML_DEVICE_MIG_ENABLE

    def watts(v: Any) -> Any:
        return v if isinstance(v, dict) else round(int(v) / 1000)

    return {
        "index": index,
        "name": _try(lambda: str(call("nvmlDeviceGetName", h))),
        "uuid": _try(lambda: str(call("nvmlDeviceGetUUID", h))),
        "memory_mib": memory if isinstance(memory, dict) else int(memory.total) // 2**20,
        "power_limit_w": watts(mw),
        "power_default_limit_w": watts(default_mw),
        "power_limits_w": constraints if isinstance(constraints, dict) else [watts(c) for c in constraints],
        "supported_clocks_mhz": mems
        if isinstance(mems, dict)
        else {
            str(m): _try(lambda m=m: list(call("nvmlDeviceGetSupportedGraphicsClocks", h, m))) for m in mems
        },
        "application_clocks_mhz": {
            "memory": _try(call, "nvmlDeviceGetApplicationsClock", h, nvml.NVML_CLOCK_MEM),
            "graphics": _try(call, "nvmlDeviceGetApplicationsClock", h, nvml.NVML_CLOCK_GRAPHICS),
        },
        "ecc": ecc if isinstance(ecc, dict) else {"current": bool(ecc[0]), "pending": bool(ecc[1])},
        "mig_mode": mig_mode
        if isinstance(mig_mode, dict)
        else {"current": bool(mig_mode[0]), "pending": bool(mig_mode[1])},
        # nvml.h: possible placements are listed "regardless of whether MIG is enabled".
        "mig_profiles": _try(backend.mig_table, h),
        "mig_geometry": _try(backend._mig_geometry, h) if mig_on else None,
        "read": _try(backend.read, index),
    }


def probe(real_nvml: Any, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """Probe the GPUs behind ``real_nvml`` (the pynvml module) through the read-only
    wrapper; ``spec``: a NodeState.gpu document to diff against in check mode."""
    node = _node_module()
    guard = ReadOnlyNvml(real_nvml)
    saved = sys.modules.get("pynvml")
    sys.modules["pynvml"] = guard
    try:
        out: dict[str, Any] = {"refused": guard.refused}
        try:
            backend = node.NvmlBackend(readonly=True, mig_holders=[])
        except node.GpuError as exc:
            out["error"] = {"code": exc.code, "message": str(exc)}
            return out
        cuda = _try(backend._call, "nvmlSystemGetCudaDriverVersion")
        out["versions"] = {
            "driver": _try(backend._call, "nvmlSystemGetDriverVersion"),
            "nvml": _try(backend._call, "nvmlSystemGetNVMLVersion"),
            "cuda": cuda if isinstance(cuda, dict) else f"{cuda // 1000}.{cuda % 1000 // 10}",
        }
        count = backend.count()
        out["gpus"] = [_gpu(backend, guard, i) for i in range(count)]
        if spec is not None:
            try:
                result = node.converge(backend, spec["devices"], check_mode=True, limits=spec.get("limits"))
                out["diff"] = {
                    "changes": result["changes"],
                    "reboot_required": result["reboot_required"],
                    "pending_reset": {str(k): v for k, v in result["pending_reset"].items()},
                    "lost": {str(k): v for k, v in result["lost"].items()},
                }
            except node.GpuError as exc:
                out["diff"] = {"error": exc.code, "message": str(exc)}
        return out
    finally:
        if saved is None:
            sys.modules.pop("pynvml", None)
        else:
            sys.modules["pynvml"] = saved


def main(argv: list[str]) -> int:
    """CLI: ``--out FILE [--spec FILE]``. Exit 0 when the probe ran (NVML errors are in the
    JSON), 1 when pynvml is missing or a non-getter was called."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="where to write the JSON record")
    parser.add_argument("--spec", help="a NodeState.gpu JSON document to diff against (check mode)")
    args = parser.parse_args(argv[1:])
    try:
        import pynvml
    except ImportError:
        print("gpu-probe: pynvml is missing (Debian: python3-pynvml; pip: nvidia-ml-py)", file=sys.stderr)
        return 1
    spec = None
    if args.spec:
        with open(args.spec) as fh:
            spec = json.load(fh)
    try:
        out = probe(pynvml, spec)
    except ProbeRefused as exc:
        print(f"gpu-probe: {exc}", file=sys.stderr)
        return 1
    with open(args.out, "w") as fh:
        json.dump(out, fh, indent=2, sort_keys=True, default=str)
    print(f"gpu-probe: {len(out.get('gpus', []))} GPU(s) recorded in {args.out}")
    return 1 if out["refused"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
