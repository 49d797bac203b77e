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
{``enabled``, ``profiles``}: the MIG mode (a change needs a GPU reset or reboot) and the
geometry, one GPU instance with one full compute instance per profile name (``3g.40gb``).

How each is known (NVML has a getter for all but one):
  * locked clocks: NVML can set and reset them but not read them back (nvml.h 12.x-13.x has
    no getter; nvidia-smi and DCGM show none either). So the code keeps a record of what it
    applied, keyed by GPU UUID, ``/proc/sys/kernel/random/boot_id`` and the driver version,
    under /run (gone at reboot, like the locks): a reboot or another driver invalidates it.
    Because a GPU reset or a driver reload with the same version cannot be seen, locked
    clocks are set again on every apply run, reported as a change only when the record
    says they were not in place.
  * MIG geometry: the GPU instances and their compute instances, listed through NVML; the
    profiles compare as counts (as NVIDIA's mig-parted does), and a GPU instance without a
    compute instance is a difference.

Backends:
  * ``nvml``: the real driver through pynvml. Limits are NVML's own
    (``nvmlDeviceGetPowerManagementLimitConstraints``, supported clock lists, the GPU
    instance profiles the device offers).
  * ``simulated``: no GPU is touched. State lives in files on the node: volatile settings
    (power limit, clocks, persistence, compute mode, MIG instances) under /run, so they
    reset at boot like a real GPU's; ECC and MIG modes, with their pending values, under
    /var/lib. Each model's limits come from Swarm's GPU catalog and are enforced as NVML
    would. Everything this backend reports says "simulated".

Every run validates every requested value of every GPU before applying any (nothing is
half-applied); read-only backends (check mode, ``diff``, ``read``) write nothing at all.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping
from typing import Any, Protocol, cast

COMPUTE_MODES = {"DEFAULT": 0, "EXCLUSIVE_THREAD": 1, "PROHIBITED": 2, "EXCLUSIVE_PROCESS": 3}
COMPUTE_NAMES = {v: k for k, v in COMPUTE_MODES.items()}
SIM_VOLATILE = "/run/swarm-gpu-sim/state.json"
SIM_PERSISTENT = "/var/lib/swarm-gpu-sim/state.json"
LOCKED_CLOCKS_RECORD = "/run/swarm-gpu/locked-clocks.json"
BOOT_ID = "/proc/sys/kernel/random/boot_id"
# MIG profile name: [<C>c.]<G>g.<GB>gb[+me] (NVIDIA MIG User Guide, "Supported MIG Profiles").
MIG_PROFILE = re.compile(r"^(?P<slices>[1-8])g\.(?P<gb>[0-9]+)gb(?P<media>\+me)?\Z")
# Compute instance profile constant of a full compute instance, by GPU instance slices.
_CI_PROFILE = {
    1: "1_SLICE",
    2: "2_SLICE",
    3: "3_SLICE",
    4: "4_SLICE",
    6: "6_SLICE",
    7: "7_SLICE",
    8: "8_SLICE",
}


class GpuError(Exception):
    """A GPU operation failed. ``code``: NO_PERMISSION, NOT_SUPPORTED, DRIVER_NOT_LOADED,
    INVALID_ARGUMENT, IN_USE, INSUFFICIENT_RESOURCES, or UNKNOWN; the message says which
    GPU and what was asked."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


def mig_fit_problem(
    profiles: list[str], offered: list[str], compute_slices: int, memory_mib: int
) -> str | None:
    """Why the MIG ``profiles`` cannot all be created on one GPU that ``offered`` those
    profile names, has ``compute_slices`` compute slices and ``memory_mib`` MiB, or None.

    The one fit rule: the validator applies it from the GPU catalog before anything runs,
    and the simulated backend applies it on the node as NVML would. Each profile must be
    offered; compute slices and memory (profile names round GiB up: 143771 MiB is "141gb")
    must add up to at most the GPU's.
    """
    unknown = [p for p in profiles if p not in offered]
    if unknown:
        return f"{', '.join(unknown)} not a MIG profile of this GPU (has: {', '.join(offered) or 'none'})"
    parsed = [MIG_PROFILE.match(p) for p in profiles]
    slices = sum(int(m["slices"]) for m in parsed if m)
    if slices > compute_slices:
        return f"profiles use {slices} compute slices; the GPU has {compute_slices}"
    gb, total_gb = sum(int(m["gb"]) for m in parsed if m), -(-memory_mib // 1024)
    if gb > total_gb:
        return f"profiles use {gb} GB; the GPU has {total_gb} GB"
    return None


def _boot_id() -> str:
    try:
        with open(BOOT_ID) as fh:
            return fh.read().strip()
    except OSError:
        return "unknown"


def _load_json(path: str) -> dict[str, Any]:
    try:
        with open(path) as fh:
            return cast("dict[str, Any]", json.load(fh))
    except (FileNotFoundError, ValueError):
        return {}


def _save_json(path: str, data: dict[str, Any]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(data, fh, indent=2, sort_keys=True)
    os.replace(tmp, path)


# ---------------------------------------------------------------------------- backends


class GpuBackend(Protocol):
    """What :func:`converge` needs of a backend (:class:`NvmlBackend`,
    :class:`SimulatedBackend`). Settings and readings are JSON data: ``read`` reports a
    GPU's settings, limits and MIG state by key (the shape :func:`diff` and :func:`check`
    take as ``current``); ``set`` changes one setting (a key of the desired settings, or
    ``mig_geometry``) to a value as the settings document spells it."""

    @property
    def simulated(self) -> bool: ...

    def count(self) -> int: ...

    def read(self, index: int) -> dict[str, Any]: ...

    def set(self, index: int, key: str, value: Any) -> None: ...


class NvmlBackend:
    """Real GPUs through pynvml (nvidia-ml-py). ``readonly``: never changes a GPU or a file."""

    simulated = False

    def __init__(self, readonly: bool = False, root: str = "/") -> None:
        try:
            import pynvml
        except ImportError as exc:
            raise GpuError("DRIVER_NOT_LOADED", "pynvml (nvidia-ml-py) is not installed") from exc
        self.nvml = pynvml
        self.readonly = readonly
        self.record_path = os.path.join(root, LOCKED_CLOCKS_RECORD.lstrip("/"))
        self._call("nvmlInit")

    def _call(self, name: str, *args: object) -> Any:  # pynvml is untyped
        try:
            return getattr(self.nvml, name)(*args)
        except self.nvml.NVMLError as exc:
            n = self.nvml
            code = {
                n.NVML_ERROR_NO_PERMISSION: "NO_PERMISSION",
                n.NVML_ERROR_NOT_SUPPORTED: "NOT_SUPPORTED",
                n.NVML_ERROR_DRIVER_NOT_LOADED: "DRIVER_NOT_LOADED",
                n.NVML_ERROR_LIBRARY_NOT_FOUND: "DRIVER_NOT_LOADED",
                n.NVML_ERROR_INVALID_ARGUMENT: "INVALID_ARGUMENT",
                n.NVML_ERROR_IN_USE: "IN_USE",
                n.NVML_ERROR_INSUFFICIENT_RESOURCES: "INSUFFICIENT_RESOURCES",
            }.get(getattr(exc, "value", None), "UNKNOWN")
            raise GpuError(code, f"{name}: {exc}") from exc

    def count(self) -> int:
        return int(self._call("nvmlDeviceGetCount"))

    def _h(self, index: int) -> object:
        return self._call("nvmlDeviceGetHandleByIndex", index)

    def _optional(self, name: str, *args: object, default: object) -> Any:
        try:
            return self._call(name, *args)
        except GpuError as exc:
            if exc.code == "NOT_SUPPORTED":
                return default
            raise

    def _identity(self, h: object) -> dict[str, str]:
        """What a locked-clocks record must match: this GPU, this boot, this driver."""
        return {
            "uuid": str(self._call("nvmlDeviceGetUUID", h)),
            "boot_id": _boot_id(),
            "driver": str(self._call("nvmlSystemGetDriverVersion")),
        }

    def _locked_clocks(self, h: object) -> dict[str, Any] | None:
        ident = self._identity(h)
        entry = _load_json(self.record_path).get(ident["uuid"])
        if entry and entry.get("boot_id") == ident["boot_id"] and entry.get("driver") == ident["driver"]:
            return {"min_mhz": entry["min_mhz"], "max_mhz": entry["max_mhz"]}
        return None

    def read(self, index: int) -> dict[str, Any]:
        """Current settings and limits of GPU ``index`` (W, MHz)."""
        h, n = self._h(index), self.nvml
        lo, hi = self._call("nvmlDeviceGetPowerManagementLimitConstraints", h)
        ecc_cur, ecc_pend = self._optional("nvmlDeviceGetEccMode", h, default=(None, None))
        mig_cur, mig_pend = self._optional("nvmlDeviceGetMigMode", h, default=(None, None))
        mems = list(self._optional("nvmlDeviceGetSupportedMemoryClocks", h, default=[]))
        mig = None
        if mig_cur is not None:
            enabled = mig_cur == n.NVML_DEVICE_MIG_ENABLE
            mig = {"enabled": enabled, "profiles": self._mig_geometry(h) if enabled else []}
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
            "mig": mig,
            "mig_pending": None if mig_pend is None else mig_pend == n.NVML_DEVICE_MIG_ENABLE,
            "mig_offered": sorted(self._mig_profiles(h)) if mig and mig["enabled"] else [],
            "locked_clocks": self._locked_clocks(h),
        }

    # -- MIG (the sequence NVIDIA's mig-parted uses: pkg/mig/config/config.go)

    def _mig_profiles(self, h: object) -> dict[str, Any]:
        """{profile name: GPU instance profile info} this device offers (MIG enabled)."""
        n, out = self.nvml, {}
        for index in range(n.NVML_GPU_INSTANCE_PROFILE_COUNT):
            try:
                info = self.nvml.nvmlDeviceGetGpuInstanceProfileInfo(h, index)
            except n.NVMLError:  # NOT_SUPPORTED / INVALID_ARGUMENT: not on this device
                continue
            name = info.name.decode() if isinstance(info.name, bytes) else str(info.name)
            out[name.removeprefix("MIG ")] = info
        return out

    def _mig_instances(self, h: object) -> list[tuple[str, object, list[object]]]:
        """Every GPU instance: (profile name, GI handle, its compute instance handles)."""
        import ctypes

        n, out = self.nvml, []
        for name, info in self._mig_profiles(h).items():
            gis = (n.c_nvmlGpuInstance_t * max(int(info.instanceCount), 1))()
            count = ctypes.c_uint(0)
            self._call("nvmlDeviceGetGpuInstances", h, info.id, gis, ctypes.byref(count))
            for gi in list(gis)[: count.value]:
                ci_info = self._call(
                    "nvmlGpuInstanceGetComputeInstanceProfileInfo",
                    gi,
                    getattr(n, f"NVML_COMPUTE_INSTANCE_PROFILE_{_CI_PROFILE[int(info.sliceCount)]}"),
                    n.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
                )
                cis = (n.c_nvmlComputeInstance_t * max(int(ci_info.instanceCount), 1))()
                ci_count = ctypes.c_uint(0)
                self._call("nvmlGpuInstanceGetComputeInstances", gi, ci_info.id, cis, ctypes.byref(ci_count))
                out.append((name, gi, list(cis)[: ci_count.value]))
        return out

    def _mig_geometry(self, h: object) -> list[str]:
        """The profiles of the GPU instances that have their full compute instance, sorted;
        a GPU instance without one shows as ``<name> (no compute instance)``."""
        return sorted(
            name if cis else f"{name} (no compute instance)" for name, _, cis in self._mig_instances(h)
        )

    def _in_use(self, h: object) -> int:
        """Compute processes on the GPU and on each of its MIG devices."""
        procs = len(self._optional("nvmlDeviceGetComputeRunningProcesses", h, default=[]))
        for i in range(int(self._optional("nvmlDeviceGetMaxMigDeviceCount", h, default=0))):
            try:
                mig_dev = self.nvml.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
            except self.nvml.NVMLError:
                continue  # no MIG device at this index
            procs += len(self._optional("nvmlDeviceGetComputeRunningProcesses", mig_dev, default=[]))
        return procs

    def _create(self, h: object, profiles: list[str]) -> None:
        """Create one GPU instance with its full compute instance per profile, largest
        first (the driver places them; mig-parted sorts the same way)."""
        n, offered = self.nvml, self._mig_profiles(h)
        for name in sorted(profiles, key=lambda p: (-int(offered[p].sliceCount), p)):
            info = offered[name]
            gi = self._call("nvmlDeviceCreateGpuInstance", h, info.id)
            ci_info = self._call(
                "nvmlGpuInstanceGetComputeInstanceProfileInfo",
                gi,
                getattr(n, f"NVML_COMPUTE_INSTANCE_PROFILE_{_CI_PROFILE[int(info.sliceCount)]}"),
                n.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
            )
            self._call("nvmlGpuInstanceCreateComputeInstance", gi, ci_info.id)

    def _destroy_all(self, h: object) -> None:
        for _, gi, cis in self._mig_instances(h):
            for ci in cis:
                self._call("nvmlComputeInstanceDestroy", ci)
            self._call("nvmlGpuInstanceDestroy", gi)

    def _set_geometry(self, index: int, h: object, profiles: list[str]) -> None:
        """Replace the GPU's instances by ``profiles``; on any failure put the previous
        geometry back (or leave the GPU without instances, saying so) and raise."""
        if self._in_use(h):
            raise GpuError(
                "IN_USE", f"GPU {index}: compute processes are running; MIG geometry left as it is"
            )
        before = [name for name, _, cis in self._mig_instances(h) if cis]
        self._destroy_all(h)
        try:
            self._create(h, profiles)
            after = self._mig_geometry(h)
            if after != sorted(profiles):
                raise GpuError(
                    "UNKNOWN", f"GPU {index}: MIG geometry reads back as {after}, not {sorted(profiles)}"
                )
        except GpuError as exc:
            try:
                self._destroy_all(h)
                self._create(h, before)
                restored = f"the previous geometry {sorted(before)} is back"
            except GpuError:
                restored = "the GPU has no MIG instances now"
            raise GpuError(exc.code, f"{exc}; {restored}") from exc

    def set(self, index: int, key: str, value: Any) -> None:
        if self.readonly:
            raise GpuError("INVALID_ARGUMENT", "read-only backend: nothing may be set")
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
            record = _load_json(self.record_path)
            record[str(self._call("nvmlDeviceGetUUID", h))] = {**self._identity(h), **value}
            _save_json(self.record_path, record)
        elif key == "compute_mode":
            self._call("nvmlDeviceSetComputeMode", h, COMPUTE_MODES[value])
        elif key == "ecc":
            self._call(
                "nvmlDeviceSetEccMode", h, n.NVML_FEATURE_ENABLED if value else n.NVML_FEATURE_DISABLED
            )
        elif key == "mig":
            mode = n.NVML_DEVICE_MIG_ENABLE if value["enabled"] else n.NVML_DEVICE_MIG_DISABLE
            if not value["enabled"]:
                self._destroy_all(h)
            # pynvml returns the activation status instead of raising (RESET_REQUIRED, IN_USE).
            self._call("nvmlDeviceSetMigMode", h, mode)
        elif key == "mig_geometry":
            self._set_geometry(index, h, list(value))
        else:
            raise GpuError("INVALID_ARGUMENT", f"unknown setting {key!r}")


class SimulatedBackend:
    """GPUs simulated in files on the node, with each model's catalog limits enforced.
    ``readonly``: reads and reports, writes no file."""

    simulated = True

    def __init__(
        self, models: list[str], limits: dict[str, Any], root: str = "/", readonly: bool = False
    ) -> None:
        self.models, self.limits, self.readonly = models, limits, readonly
        self.volatile = os.path.join(root, SIM_VOLATILE.lstrip("/"))
        self.persistent = os.path.join(root, SIM_PERSISTENT.lstrip("/"))
        self.vol = _load_json(self.volatile)
        self.per = _load_json(self.persistent)
        fresh = not self.vol
        if fresh:  # first use since boot: pending ECC/MIG mode changes take effect now
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
            self.vol[str(i)].setdefault("mig_profiles", [])  # MIG instances never survive a boot
            self.per.setdefault(
                str(i),
                {"ecc": lim["ecc"], "ecc_pending": lim["ecc"], "mig_enabled": False, "mig_pending": False},
            )
        if fresh:
            self._save()

    def _save(self) -> None:
        if self.readonly:
            return
        _save_json(self.volatile, self.vol)
        _save_json(self.persistent, self.per)

    def count(self) -> int:
        return len(self.models)

    def read(self, index: int) -> dict[str, Any]:
        lim, v, p = self.limits[self.models[index]], self.vol[str(index)], self.per[str(index)]
        has_mig = bool(lim["mig_profiles"])
        return {
            "name": f"{lim['product_name']} (simulated)",
            "persistence_mode": v["persistence_mode"],
            "power_limit_w": v["power_limit_w"],
            **catalog_constraints(lim),
            "application_clocks": dict(v["application_clocks"]) if lim["application_clocks"] else None,
            "compute_mode": v["compute_mode"],
            "ecc": p["ecc"] if lim["ecc"] else None,
            "ecc_pending": p["ecc_pending"] if lim["ecc"] else None,
            "mig": {
                "enabled": p["mig_enabled"],
                "profiles": sorted(v["mig_profiles"]) if p["mig_enabled"] else [],
            }
            if has_mig
            else None,
            "mig_pending": p["mig_pending"] if has_mig else None,
            "mig_offered": list(lim["mig_profiles"]) if has_mig and p["mig_enabled"] else [],
            "locked_clocks": v["locked_clocks"],
        }

    def set(self, index: int, key: str, value: Any) -> None:
        if self.readonly:
            raise GpuError("INVALID_ARGUMENT", "read-only backend: nothing may be set")
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
            if not value["enabled"]:
                v["mig_profiles"] = []
        elif key == "mig_geometry":
            problem = mig_fit_problem(
                list(value), lim["mig_profiles"], lim["mig_compute_slices"], lim["memory_mib"]
            )
            if problem:
                raise GpuError("INSUFFICIENT_RESOURCES", f"GPU {index} ({lim['product_name']}): {problem}")
            v["mig_profiles"] = sorted(value)
        else:
            raise GpuError("INVALID_ARGUMENT", f"unknown setting {key!r}")
        self._save()


# ------------------------------------------------------------------------ constraints


def graphics_clocks(clocks: Mapping[str, Any]) -> list[int]:
    """The graphics clocks (MHz) a model offers by its catalog limits, highest first: from
    ``graphics_max_mhz`` down to ``graphics_min_mhz`` in ``graphics_step_mhz`` steps. This
    is the supported-clock list the simulated backend reports (NVML reports a GPU's own)."""
    step = clocks["graphics_step_mhz"]
    return list(range(clocks["graphics_max_mhz"], clocks["graphics_min_mhz"] - 1, -step))


def catalog_constraints(limits: Mapping[str, Any]) -> dict[str, Any]:
    """What a GPU of these catalog limits (NodeState.gpu.limits[model]) accepts, in the shape
    a backend's ``read`` reports it: ``power_limits_w`` [min, max] and ``supported_clocks``
    {memory MHz (text): [graphics MHz, ...]}."""
    graphics = graphics_clocks(limits["clocks"])
    return {
        "power_limits_w": [limits["power"]["min_w"], limits["power"]["max_w"]],
        "supported_clocks": {str(m): graphics for m in limits["clocks"]["memory_mhz"]},
    }


def _nearest(value: int, offered: list[int]) -> str:
    near = sorted(offered, key=lambda c: (abs(c - value), c))[:2]
    return " or ".join(str(c) for c in sorted(near))


def setting_problem(key: str, value: Any, constraints: dict[str, Any]) -> tuple[str | None, str | None]:
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


def check(index: int, key: str, value: Any, current: dict[str, Any]) -> None:
    """Raise GpuError(INVALID_ARGUMENT) when ``value`` is outside what this GPU supports
    (power limit constraints, supported clock lists, offered MIG profiles), as NVML would
    refuse it; the rule for power and clocks is :func:`setting_problem`."""
    _, problem = setting_problem(key, value, current)
    if problem:
        raise GpuError("INVALID_ARGUMENT", f"GPU {index}: {problem}")
    if key == "mig" and value["enabled"] and current["mig_offered"]:
        unknown = [p for p in value["profiles"] if p not in current["mig_offered"]]
        if unknown:
            raise GpuError(
                "INVALID_ARGUMENT",
                f"GPU {index}: MIG profiles {', '.join(unknown)} are not offered "
                f"(offered: {', '.join(current['mig_offered'])})",
            )


def diff(index: int, desired: dict[str, Any], current: dict[str, Any]) -> list[dict[str, Any]]:
    """Changes needed on GPU ``index``: [{gpu, key, before, after, note}].

    ECC and MIG mode compare against the pending mode (a change already made waits for a
    reboot or reset, it is not redone). MIG geometry (key ``mig_geometry``) is compared
    only once the MIG mode is in effect: instances can be made only then.
    """
    changes = []
    for key, want in sorted(desired.items()):
        if key == "ecc":
            have, note = current["ecc_pending"], "pending until reboot"
        elif key == "mig":
            mode = {"enabled": want["enabled"]}
            pending = None if current["mig_pending"] is None else {"enabled": current["mig_pending"]}
            if pending != mode:
                changes.append(
                    {
                        "gpu": index,
                        "key": "mig",
                        "before": pending,
                        "after": mode,
                        "note": "needs a GPU reset or reboot",
                    }
                )
            mig = current["mig"]
            if want["enabled"] and mig and mig["enabled"] and mig["profiles"] != sorted(want["profiles"]):
                changes.append(
                    {"gpu": index, "key": "mig_geometry", "before": mig["profiles"],
                     "after": sorted(want["profiles"]), "note": None}
                )  # fmt: skip
            continue
        else:
            have, note = current.get(key), None
        if have != want:
            changes.append({"gpu": index, "key": key, "before": have, "after": want, "note": note})
    return changes


def reset_pending(current: dict[str, Any]) -> list[str]:
    """Modes changed but not yet in effect on this GPU (they wait for a reboot or reset)."""
    out = []
    if current.get("ecc") is not None and current["ecc"] != current["ecc_pending"]:
        out.append("ecc")
    mig = current.get("mig")
    if mig is not None and mig["enabled"] != current["mig_pending"]:
        out.append("mig")
    return out


# Settings NVML cannot read back: set again on every apply run (a GPU reset would clear them).
WRITE_ONLY = ("locked_clocks",)


def converge(backend: GpuBackend, devices: list[dict[str, Any]], check_mode: bool = False) -> dict[str, Any]:
    """Bring every GPU in ``devices`` ([{index, settings}]) to its settings.

    Returns {changes, reboot_required, pending_reset {gpu: [modes]}, simulated, before};
    raises GpuError (nothing is applied if any requested value is invalid for its GPU).
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
        planned = {(c["gpu"], c["key"]) for c in plan}
        for dev in devices:
            for key in WRITE_ONLY:
                if key in dev["settings"] and (dev["index"], key) not in planned:
                    backend.set(dev["index"], key, dev["settings"][key])
    pending = {i: reset_pending(cur) for i, cur in before.items() if reset_pending(cur)}
    return {
        "changes": plan,
        "reboot_required": any(c["note"] for c in plan) or bool(pending),
        "pending_reset": pending,
        "simulated": backend.simulated,
        "before": before,
    }


def backend_for(spec: dict[str, Any], root: str = "/", readonly: bool = False) -> GpuBackend:
    """The backend a settings document asks for: NodeState.gpu's shape, {"backend":
    "nvml"|"simulated", "devices": [{index, model, settings}], "limits": {model: ...}}.
    ``readonly`` backends change nothing, on the GPU or on disk (check mode, diff, read)."""
    if spec["backend"] == "simulated":
        models = [d["model"] for d in sorted(spec["devices"], key=lambda d: d["index"])]
        return SimulatedBackend(models, spec["limits"], root, readonly=readonly)
    return NvmlBackend(readonly=readonly, root=root)


def run_spec(spec: dict[str, Any], apply: bool = False) -> dict[str, Any]:
    """:func:`converge` on the backend a settings document asks for (NodeState.gpu), as JSON
    data: ``{"changes", "reboot_required", "pending_reset" {gpu index as text: [modes]},
    "simulated"}``; with ``apply`` false the backend is read-only and nothing is written.
    A GpuError becomes ``{"error": message, "code": NVML-style code, "simulated"}``. Used
    by the pyinfra engine, which sends this file and the document to the node on stdin."""
    try:
        result = converge(backend_for(spec, readonly=not apply), spec["devices"], check_mode=not apply)
    except GpuError as exc:
        return {"error": str(exc), "code": exc.code, "simulated": spec["backend"] == "simulated"}
    return {
        "changes": result["changes"],
        "reboot_required": result["reboot_required"],
        "pending_reset": {str(k): v for k, v in result["pending_reset"].items()},
        "simulated": result["simulated"],
    }


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
        backend = backend_for(spec, readonly=argv[1] != "apply")
        if argv[1] == "read":
            out = {d["index"]: backend.read(d["index"]) for d in spec["devices"]}
            print(json.dumps({"simulated": backend.simulated, "gpus": out}, indent=2, sort_keys=True))
            return 0
        result = converge(backend, spec["devices"], check_mode=argv[1] == "diff")
    except GpuError as exc:
        print(f"swarm-gpu: {exc}", file=sys.stderr)
        return 1
    if argv[1] == "diff":
        print(
            json.dumps(
                {
                    "simulated": result["simulated"],
                    "changes": result["changes"],
                    "pending_reset": result["pending_reset"],
                },
                sort_keys=True,
            )
        )
        return 0
    label = " [SIMULATED]" if result["simulated"] else ""
    for c in result["changes"]:
        print(f"swarm-gpu{label}: gpu {c['gpu']} {c['key']}: {c['before']} -> {c['after']}")
    print(f"swarm-gpu{label}: {len(result['changes'])} change(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
