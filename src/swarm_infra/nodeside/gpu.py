"""Swarm's node-side GPU code: read GPU settings, diff them against the desired ones, apply
only the differences. One self-contained file (standard library, plus ``pynvml`` from
nvidia-ml-py for real GPUs), used by the Ansible module ``swarm_gpu``, by the boot-time
re-apply unit (``python3 swarm_gpu_node.py apply SETTINGS.json``) and by verification
(``python3 swarm_gpu_node.py diff -`` with the desired settings on stdin: what differs, as
JSON, changing nothing; ``read`` prints the current settings).

Settings per GPU (units as in the policy): ``persistence_mode`` (bool), ``power_limit_w``
(W; NVML takes mW), ``application_clocks`` {``memory_mhz``, ``graphics_mhz``},
``locked_clocks`` {``min_mhz``, ``max_mhz``}, ``compute_mode`` (DEFAULT |
EXCLUSIVE_PROCESS | PROHIBITED), ``ecc`` (bool; a change is pending until reboot), ``mig``
{``enabled``} (a change needs a GPU reset or reboot).

Backends:
  * ``nvml``: the real driver through pynvml. Limits are NVML's own
    (``nvmlDeviceGetPowerManagementLimitConstraints``, supported clock lists).
  * ``simulated``: no GPU is touched. State lives in files on the node: volatile settings
    (power limit, clocks, persistence, compute mode) under /run, so they reset at boot like a
    real GPU's; ECC and MIG modes, with their pending values, under /var/lib. Each model's
    limits come from Swarm's GPU catalog and are enforced as NVML would. Everything this
    backend reports says "simulated".
"""

from __future__ import annotations

import json
import os
import sys

COMPUTE_MODES = {"DEFAULT": 0, "EXCLUSIVE_THREAD": 1, "PROHIBITED": 2, "EXCLUSIVE_PROCESS": 3}
COMPUTE_NAMES = {v: k for k, v in COMPUTE_MODES.items()}
SIM_VOLATILE = "/run/swarm-gpu-sim/state.json"
SIM_PERSISTENT = "/var/lib/swarm-gpu-sim/state.json"


class GpuError(Exception):
    """A GPU operation failed. ``code``: NO_PERMISSION, NOT_SUPPORTED, DRIVER_NOT_LOADED,
    INVALID_ARGUMENT, or UNKNOWN; the message says which GPU and what was asked."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


# ---------------------------------------------------------------------------- backends


class NvmlBackend:
    """Real GPUs through pynvml (nvidia-ml-py)."""

    simulated = False

    def __init__(self) -> None:
        try:
            import pynvml
        except ImportError as exc:
            raise GpuError("DRIVER_NOT_LOADED", "pynvml (nvidia-ml-py) is not installed") from exc
        self.nvml = pynvml
        self._call("nvmlInit")

    def _call(self, name: str, *args: object) -> object:
        try:
            return getattr(self.nvml, name)(*args)
        except self.nvml.NVMLError as exc:
            code = {
                self.nvml.NVML_ERROR_NO_PERMISSION: "NO_PERMISSION",
                self.nvml.NVML_ERROR_NOT_SUPPORTED: "NOT_SUPPORTED",
                self.nvml.NVML_ERROR_DRIVER_NOT_LOADED: "DRIVER_NOT_LOADED",
                self.nvml.NVML_ERROR_LIBRARY_NOT_FOUND: "DRIVER_NOT_LOADED",
                self.nvml.NVML_ERROR_INVALID_ARGUMENT: "INVALID_ARGUMENT",
            }.get(getattr(exc, "value", None), "UNKNOWN")
            raise GpuError(code, f"{name}: {exc}") from exc

    def count(self) -> int:
        return int(self._call("nvmlDeviceGetCount"))

    def _h(self, index: int) -> object:
        return self._call("nvmlDeviceGetHandleByIndex", index)

    def read(self, index: int) -> dict:
        """Current settings and limits of GPU ``index`` (W, MHz)."""
        h, n = self._h(index), self.nvml
        lo, hi = self._call("nvmlDeviceGetPowerManagementLimitConstraints", h)
        ecc_cur, ecc_pend = self._optional("nvmlDeviceGetEccMode", h, default=(None, None))
        mig_cur, mig_pend = self._optional("nvmlDeviceGetMigMode", h, default=(None, None))
        mems = list(self._optional("nvmlDeviceGetSupportedMemoryClocks", h, default=[]))
        return {
            "name": self._call("nvmlDeviceGetName", h),
            "persistence_mode": self._call("nvmlDeviceGetPersistenceMode", h) == n.NVML_FEATURE_ENABLED,
            "power_limit_w": round(int(self._call("nvmlDeviceGetPowerManagementLimit", h)) / 1000),
            "power_limits_w": [round(lo / 1000), round(hi / 1000)],
            "application_clocks": {
                "memory_mhz": self._optional(
                    "nvmlDeviceGetApplicationsClock", h, n.NVML_CLOCK_MEM, default=None
                ),
                "graphics_mhz": self._optional(
                    "nvmlDeviceGetApplicationsClock", h, n.NVML_CLOCK_GRAPHICS, default=None
                ),
            },
            "supported_clocks": {
                str(m): list(self._optional("nvmlDeviceGetSupportedGraphicsClocks", h, m, default=[]))
                for m in mems
            },
            "compute_mode": COMPUTE_NAMES.get(self._call("nvmlDeviceGetComputeMode", h), "UNKNOWN"),
            "ecc": None if ecc_cur is None else ecc_cur == n.NVML_FEATURE_ENABLED,
            "ecc_pending": None if ecc_pend is None else ecc_pend == n.NVML_FEATURE_ENABLED,
            "mig": None if mig_cur is None else {"enabled": mig_cur == n.NVML_DEVICE_MIG_ENABLE},
            "mig_pending": None if mig_pend is None else mig_pend == n.NVML_DEVICE_MIG_ENABLE,
            # NVML cannot read locked clocks back; the re-apply unit sets them at every boot.
            "locked_clocks": None,
        }

    def _optional(self, name: str, *args: object, default: object) -> object:
        try:
            return self._call(name, *args)
        except GpuError as exc:
            if exc.code == "NOT_SUPPORTED":
                return default
            raise

    def set(self, index: int, key: str, value: object) -> None:
        h, n = self._h(index), self.nvml
        if key == "persistence_mode":
            self._call(
                "nvmlDeviceSetPersistenceMode",
                h,
                n.NVML_FEATURE_ENABLED if value else n.NVML_FEATURE_DISABLED,
            )
        elif key == "power_limit_w":
            self._call("nvmlDeviceSetPowerManagementLimit", h, int(value) * 1000)
        elif key == "application_clocks":
            self._call("nvmlDeviceSetApplicationsClocks", h, value["memory_mhz"], value["graphics_mhz"])
        elif key == "locked_clocks":
            self._call("nvmlDeviceSetGpuLockedClocks", h, value["min_mhz"], value["max_mhz"])
        elif key == "compute_mode":
            self._call("nvmlDeviceSetComputeMode", h, COMPUTE_MODES[value])
        elif key == "ecc":
            self._call(
                "nvmlDeviceSetEccMode", h, n.NVML_FEATURE_ENABLED if value else n.NVML_FEATURE_DISABLED
            )
        elif key == "mig":
            mode = n.NVML_DEVICE_MIG_ENABLE if value["enabled"] else n.NVML_DEVICE_MIG_DISABLE
            self._call("nvmlDeviceSetMigMode", h, mode)
        else:
            raise GpuError("INVALID_ARGUMENT", f"unknown setting {key!r}")


class SimulatedBackend:
    """GPUs simulated in files on the node, with each model's catalog limits enforced."""

    simulated = True

    def __init__(self, models: list[str], limits: dict, root: str = "/") -> None:
        self.models, self.limits = models, limits
        self.volatile = os.path.join(root, SIM_VOLATILE.lstrip("/"))
        self.persistent = os.path.join(root, SIM_PERSISTENT.lstrip("/"))
        self.vol = self._load(self.volatile)
        self.per = self._load(self.persistent)
        if not self.vol:  # first use since boot: pending ECC/MIG changes take effect now
            for gpu in self.per.values():
                gpu["ecc"], gpu["mig_enabled"] = gpu["ecc_pending"], gpu["mig_pending"]
        for i, model in enumerate(models):
            lim = limits[model]
            self.vol.setdefault(
                str(i),
                {
                    "persistence_mode": False,
                    "power_limit_w": lim["power"]["default_w"],
                    "application_clocks": {
                        "memory_mhz": max(lim["clocks"]["memory_mhz"]),
                        "graphics_mhz": lim["clocks"]["graphics_max_mhz"],
                    },
                    "locked_clocks": None,
                    "compute_mode": "DEFAULT",
                },
            )
            self.per.setdefault(
                str(i),
                {"ecc": lim["ecc"], "ecc_pending": lim["ecc"], "mig_enabled": False, "mig_pending": False},
            )
        self._save()

    @staticmethod
    def _load(path: str) -> dict:
        try:
            with open(path) as fh:
                return json.load(fh)
        except FileNotFoundError:
            return {}

    def _save(self) -> None:
        for path, data in ((self.volatile, self.vol), (self.persistent, self.per)):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = path + ".tmp"
            with open(tmp, "w") as fh:
                json.dump(data, fh, indent=2, sort_keys=True)
            os.replace(tmp, path)

    def count(self) -> int:
        return len(self.models)

    def read(self, index: int) -> dict:
        lim, v, p = self.limits[self.models[index]], self.vol[str(index)], self.per[str(index)]
        return {
            "name": f"{lim['product_name']} (simulated)",
            "persistence_mode": v["persistence_mode"],
            "power_limit_w": v["power_limit_w"],
            **catalog_constraints(lim),
            "application_clocks": dict(v["application_clocks"]) if lim["application_clocks"] else None,
            "compute_mode": v["compute_mode"],
            "ecc": p["ecc"] if lim["ecc"] else None,
            "ecc_pending": p["ecc_pending"] if lim["ecc"] else None,
            "mig": {"enabled": p["mig_enabled"]} if lim["mig_profiles"] else None,
            "mig_pending": p["mig_pending"] if lim["mig_profiles"] else None,
            "locked_clocks": v["locked_clocks"],
        }

    def set(self, index: int, key: str, value: object) -> None:
        lim, v, p = self.limits[self.models[index]], self.vol[str(index)], self.per[str(index)]
        if key in ("persistence_mode", "compute_mode", "power_limit_w", "locked_clocks"):
            v[key] = value
        elif key == "application_clocks":
            if not lim["application_clocks"]:
                raise GpuError("NOT_SUPPORTED", f"GPU {index} ({lim['product_name']}): no application clocks")
            v[key] = dict(value)
        elif key == "ecc":
            if not lim["ecc"]:
                raise GpuError("NOT_SUPPORTED", f"GPU {index} ({lim['product_name']}): no ECC")
            p["ecc_pending"] = bool(value)
        elif key == "mig":
            if not lim["mig_profiles"]:
                raise GpuError("NOT_SUPPORTED", f"GPU {index} ({lim['product_name']}): no MIG")
            p["mig_pending"] = bool(value["enabled"])
        else:
            raise GpuError("INVALID_ARGUMENT", f"unknown setting {key!r}")
        self._save()


# ------------------------------------------------------------------------ constraints


def graphics_clocks(clocks: dict) -> list:
    """The graphics clocks (MHz) a model offers by its catalog limits, highest first: from
    ``graphics_max_mhz`` down to ``graphics_min_mhz`` in ``graphics_step_mhz`` steps. This
    is the supported-clock list the simulated backend reports (NVML reports a GPU's own)."""
    step = clocks["graphics_step_mhz"]
    return list(range(clocks["graphics_max_mhz"], clocks["graphics_min_mhz"] - 1, -step))


def catalog_constraints(limits: dict) -> dict:
    """What a GPU of these catalog limits (NodeState.gpu.limits[model]) accepts, in the shape
    a backend's ``read`` reports it: ``power_limits_w`` [min, max] and ``supported_clocks``
    {memory MHz (text): [graphics MHz, ...]}."""
    graphics = graphics_clocks(limits["clocks"])
    return {
        "power_limits_w": [limits["power"]["min_w"], limits["power"]["max_w"]],
        "supported_clocks": {str(m): graphics for m in limits["clocks"]["memory_mhz"]},
    }


def _nearest(value: int, offered: list) -> str:
    near = sorted(offered, key=lambda c: (abs(c - value), c))[:2]
    return " or ".join(str(c) for c in sorted(near))


def setting_problem(key: str, value: object, constraints: dict) -> tuple:
    """Why a GPU with these ``constraints`` (a backend's ``read``, or
    :func:`catalog_constraints`) refuses ``value`` for ``key``: ``(field, message)``, where
    ``field`` is the part of the setting at fault (``memory_mhz``, ``graphics_mhz``,
    ``min_mhz``, ``max_mhz``, or None for the whole), or ``(None, None)`` when it accepts
    it. The one rule for power limits and clocks: the node applies it before NVML does,
    and the validator applies it to the catalog's limits."""
    if key == "power_limit_w":
        lo, hi = constraints["power_limits_w"]
        if not lo <= int(value) <= hi:
            return None, f"power limit {value} W is outside the constraints {lo}-{hi} W"
    elif key == "application_clocks":
        supported = constraints["supported_clocks"]
        mem, gfx = str(value["memory_mhz"]), value["graphics_mhz"]
        if mem not in supported:
            return "memory_mhz", (
                f"memory clock {mem} MHz is not in the supported list ({', '.join(supported) or 'none'} MHz)"
            )
        offered = supported[mem]
        if gfx not in offered:
            within = f"{min(offered)}-{max(offered)} MHz" if offered else "none"
            return "graphics_mhz", (
                f"graphics clock {gfx} MHz is not in the supported list at memory clock {mem} MHz "
                f"({within}{'; nearest: ' + _nearest(gfx, offered) if offered else ''})"
            )
    elif key == "locked_clocks":
        supported = constraints["supported_clocks"]
        offered = sorted({c for cs in supported.values() for c in cs})
        lo_mhz, hi_mhz = value["min_mhz"], value["max_mhz"]
        if offered:
            for field in ("min_mhz", "max_mhz"):
                if not offered[0] <= value[field] <= offered[-1]:
                    return field, f"locked clock {value[field]} MHz is outside {offered[0]}-{offered[-1]} MHz"
        if lo_mhz > hi_mhz:
            return "min_mhz", f"locked clocks: min_mhz {lo_mhz} is above max_mhz {hi_mhz}"
    return None, None


# ------------------------------------------------------------------------- diff / apply


def check(index: int, key: str, value: object, current: dict) -> None:
    """Raise GpuError(INVALID_ARGUMENT) when ``value`` is outside what this GPU supports
    (power limit constraints, supported clock lists), as NVML would refuse it; the rule is
    :func:`setting_problem`."""
    _, problem = setting_problem(key, value, current)
    if problem:
        raise GpuError("INVALID_ARGUMENT", f"GPU {index}: {problem}")


def diff(index: int, desired: dict, current: dict) -> list[dict]:
    """Changes needed on GPU ``index``: [{gpu, key, before, after, note}]. ECC and MIG compare
    against the pending mode (a change already made waits for a reboot, it is not redone)."""
    changes = []
    for key, want in sorted(desired.items()):
        if key == "ecc":
            have, note = current["ecc_pending"], "pending until reboot"
        elif key == "mig":
            want = {"enabled": want["enabled"]}
            have = None if current["mig_pending"] is None else {"enabled": current["mig_pending"]}
            note = "needs a GPU reset or reboot"
        else:
            have, note = current.get(key), None
        if have != want:
            changes.append({"gpu": index, "key": key, "before": have, "after": want, "note": note})
    return changes


def converge(backend: object, devices: list[dict], check_mode: bool = False) -> dict:
    """Bring every GPU in ``devices`` ([{index, settings}]) to its settings.

    Returns {changes, reboot_required, simulated, before}; raises GpuError (nothing is
    applied if any requested value is invalid for its GPU).
    """
    if backend.count() < len(devices):
        raise GpuError("INVALID_ARGUMENT", f"{len(devices)} GPUs declared, {backend.count()} found")
    before, plan = {}, []
    for dev in devices:
        cur = backend.read(dev["index"])
        before[dev["index"]] = cur
        for key, value in dev["settings"].items():
            check(dev["index"], key, value, cur)
        plan += diff(dev["index"], dev["settings"], cur)
    if not check_mode:
        for c in plan:
            backend.set(c["gpu"], c["key"], c["after"])
    return {
        "changes": plan,
        "reboot_required": any(c["key"] in ("ecc", "mig") for c in plan),
        "simulated": backend.simulated,
        "before": before,
    }


def backend_for(spec: dict, root: str = "/") -> object:
    """The backend a settings document asks for: NodeState.gpu's shape, {"backend":
    "nvml"|"simulated", "devices": [{index, model, settings}], "limits": {model: ...}}."""
    if spec["backend"] == "simulated":
        models = [d["model"] for d in sorted(spec["devices"], key=lambda d: d["index"])]
        return SimulatedBackend(models, spec["limits"], root)
    return NvmlBackend()


def main(argv: list[str]) -> int:
    """CLI: ``apply|diff|read SETTINGS.json`` (``-``: stdin). Exit 0, 1 on GpuError, 2 usage."""
    if len(argv) != 3 or argv[1] not in ("apply", "diff", "read"):
        print("usage: swarm_gpu_node.py apply|diff|read SETTINGS.json|-", file=sys.stderr)
        return 2
    if argv[2] == "-":
        spec = json.load(sys.stdin)
    else:
        with open(argv[2]) as fh:
            spec = json.load(fh)
    try:
        backend = backend_for(spec)
        if argv[1] == "read":
            out = {d["index"]: backend.read(d["index"]) for d in spec["devices"]}
            print(json.dumps({"simulated": backend.simulated, "gpus": out}, indent=2, sort_keys=True))
            return 0
        result = converge(backend, spec["devices"], check_mode=argv[1] == "diff")
    except GpuError as exc:
        print(f"swarm-gpu: {exc}", file=sys.stderr)
        return 1
    if argv[1] == "diff":
        print(json.dumps({"simulated": result["simulated"], "changes": result["changes"]}, sort_keys=True))
        return 0
    label = " [SIMULATED]" if result["simulated"] else ""
    for c in result["changes"]:
        print(f"swarm-gpu{label}: gpu {c['gpu']} {c['key']}: {c['before']} -> {c['after']}")
    print(f"swarm-gpu{label}: {len(result['changes'])} change(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
