"""A fake ``pynvml`` built from NVIDIA's documents, for the node-side GPU code's tests.

The real :class:`swarm_infra.nodeside.gpu.NvmlBackend` runs against it (patched in as
``pynvml`` through ``sys.modules``). Constants, ctypes structures and the ``NVMLError``
classes are nvidia-ml-py's own (so a misspelt name fails); the functions model a driver
with the behaviour NVIDIA documents. Sources, cited per value below:

* nvml.h of NVML 13.3.29 as vendored by NVIDIA/go-nvml (pkg/nvml/nvml.h, commit
  2f9e261f): return codes and their meaning per function.
* NVIDIA MIG User Guide, "Supported MIG Profiles"
  (https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html):
  per model the profiles, their fraction of memory (placement size in eighths) and
  "Number of Instances Available"; the "+me" rows: "A single 1g profile can include
  media extensions" (one per GPU).
* NVIDIA mig-parted, deployments/systemd/config-default.yaml (commit bd7160f): the
  per-model instance counts again (all-1g.10gb 7 on H100/A100-80GB, 4 on A100-40GB,
  all-1g.20gb 4, all-2g.20gb 3, all-3g.40gb 2, ...; H200: all-1g.18gb 7, all-1g.35gb 4,
  all-2g.35gb 3, all-3g.71gb 2, all-4g.71gb 1, all-7g.141gb 1; all-*.me 1) and its
  "all-balanced" layouts (H100: 2 x 1g.10gb + 2g.20gb + 3g.40gb).

What NVIDIA does not document, and this fake therefore chooses (each named where used):
which free placement ``nvmlDeviceCreateGpuInstance`` picks (here: the lowest start, the
case in which the creation order decides what fits, which is why mig-parted tries
orderings); whether ``nvmlInit`` itself returns LIB_RM_VERSION_MISMATCH (nvml.h 13.3
lists the code, "RM detects a driver/library version mismatch", but under no function;
here nvmlInit returns it after a driver change without reboot); and whether
``nvmlDeviceGetApplicationsClock`` returns NVML_ERROR_DEPRECATED: nvml.h 13.3 marks it
``DEPRECATED(13.0)`` ("Applications clocks are deprecated and will be removed in CUDA
14.0") and defines NVML_ERROR_DEPRECATED = 26 ("The requested functionality has been
deprecated"), but does not say the getter returns it; the issue reports that CUDA 13-era
drivers do. Here a driver reporting CUDA >= 13.0 returns it.
"""

from __future__ import annotations

import ctypes
import re
import types
from dataclasses import dataclass, field
from typing import Any

import pynvml as real

# -------------------------------------------------------------------- per-model data

# GPU instance profiles per memory class. Per profile: the NVML_GPU_INSTANCE_PROFILE_*
# index (nvml.h: 1_SLICE 0x0, 2_SLICE 0x1, 3_SLICE 0x2, 4_SLICE 0x3, 7_SLICE 0x4,
# 1_SLICE_REV1 0x7: the media-extension variant, 1_SLICE_REV2 0x9: one compute slice with
# two memory slices), the profile ID (MIG User Guide, "Getting Started with MIG" > "List
# GPU Instance Profiles": `nvidia-smi mig -lgip` lists IDs 19, 20, 15, 14, 9, 5, 0; IDs
# differ from indices, go-nvml#146), compute slices (the name's "<n>g"), placement size in
# memory slices of 8 and possible starts ("Supported MIG Profiles": fraction of memory and
# the placement diagram "Profiles on A100", the same grid on H100 and H200), and the
# "Number of Instances Available".
_GRID = [
    # (suffix key, index, id, slices, size, starts, instances)
    ("1g", 0x0, 19, 1, 1, [0, 1, 2, 3, 4, 5, 6], 7),
    ("1g+me", 0x7, 20, 1, 1, [0, 1, 2, 3, 4, 5, 6], 1),
    ("1g.2m", 0x9, 15, 1, 2, [0, 2, 4, 6], 4),
    ("2g", 0x1, 14, 2, 2, [0, 2, 4], 3),
    ("3g", 0x2, 9, 3, 4, [0, 4], 2),
    ("4g", 0x3, 5, 4, 4, [0], 1),
    ("7g", 0x4, 0, 7, 8, [0], 1),
]


def _mig(names: list[str], gb_per_eighth: float) -> dict[str, dict[str, Any]]:
    out = {}
    for name, (_, index, pid, slices, size, starts, instances) in zip(names, _GRID, strict=True):
        out[name] = {
            "index": index,
            "id": pid,
            "slices": slices,
            "size": size,
            "starts": starts,
            "instances": instances,
            "memory_mb": int(size * gb_per_eighth * 1024),
        }
    return out


# name: nvmlDeviceGetName; memory: nvmlDeviceGetMemoryInfo().total in bytes (MiB x 2**20,
# the catalog's memory_mib); power: nvmlDeviceGetPowerManagementLimitConstraints and the
# default limit in mW; clocks: supported memory clock and graphics clocks (MHz).
MODELS: dict[str, dict[str, Any]] = {
    "H100-SXM5-80GB": {
        "name": "NVIDIA H100 80GB HBM3",
        "memory_mib": 81559,
        "power_mw": (200_000, 700_000, 700_000),
        "clocks": {2619: list(range(1980, 344, -15))},
        # "For A100-SXM4-80GB [and H100 80GB] the profile names ... 1g.10gb, 1g.10gb+me,
        # 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb"
        "mig": _mig(["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"], 10),
    },
    "H200-SXM-141GB": {
        "name": "NVIDIA H200",
        "memory_mib": 143771,
        "power_mw": (200_000, 700_000, 700_000),
        "clocks": {3201: list(range(1980, 344, -15))},
        # H200 141GB: 1g.18gb x7, 1g.18gb+me x1, 1g.35gb x4, 2g.35gb x3, 3g.71gb x2,
        # 4g.71gb x1, 7g.141gb x1 (mig-parted config-default.yaml, the MIG User Guide).
        "mig": _mig(
            ["1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"], 17.625
        ),
    },
    "A100-SXM4-40GB": {
        "name": "NVIDIA A100-SXM4-40GB",
        "memory_mib": 40960,
        "power_mw": (100_000, 400_000, 400_000),
        "clocks": {1215: list(range(1410, 209, -15))},
        # The A100-SXM4-40GB table: 1g.5gb 7, 1g.5gb+me 1, 1g.10gb 4, 2g.10gb 3, 3g.20gb 2,
        # 4g.20gb 1, 7g.40gb 1.
        "mig": _mig(["1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"], 5),
    },
    "A100-SXM4-80GB": {
        "name": "NVIDIA A100-SXM4-80GB",
        "memory_mib": 81920,
        "power_mw": (100_000, 400_000, 400_000),
        "clocks": {1593: list(range(1410, 209, -15))},
        "mig": _mig(["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"], 10),
    },
    "L40S": {
        "name": "NVIDIA L40S",
        "memory_mib": 46068,
        "power_mw": (100_000, 350_000, 350_000),
        "clocks": {9001: list(range(2520, 209, -15))},
        "mig": {},  # not in the MIG User Guide's "Supported GPUs"
    },
}

# Functions that change a GPU: recorded in ``FakeNvml.calls``.
SETTER = re.compile(r"^nvml\w*?(Set|Reset|Create|Destroy|Clear)(?=[A-Z]|$)")


def _err(code: int) -> real.NVMLError:
    return real.NVMLError(code)


@dataclass
class FakeGpu:
    """One GPU as the driver holds it (mW, MHz)."""

    model: str
    uuid: str
    persistence: int = real.NVML_FEATURE_DISABLED
    power_mw: int = 0
    app_clocks: dict[int, int] = field(default_factory=dict)
    compute: int = 0  # NVML_COMPUTEMODE_DEFAULT
    ecc: tuple[int, int] = (real.NVML_FEATURE_ENABLED, real.NVML_FEATURE_ENABLED)
    mig: tuple[int, int] = (real.NVML_DEVICE_MIG_DISABLE, real.NVML_DEVICE_MIG_DISABLE)
    # What nvmlDeviceSetMigMode reports as activationStatus: NVML_SUCCESS when the driver
    # could reset the GPU itself; RESET_REQUIRED / IN_USE leave the mode pending (nvml.h).
    activation: int = real.NVML_SUCCESS
    lost: bool = False
    processes: list[object] = field(default_factory=list)
    instances: dict[int, dict[str, Any]] = field(default_factory=dict)  # GI id -> profile, start, cis

    @property
    def spec(self) -> dict[str, Any]:
        return MODELS[self.model]


class FakeNvml(types.ModuleType):
    """The fake ``pynvml`` module: ``gpus`` (FakeGpu per index), ``cuda`` (the driver's
    CUDA version as nvmlSystemGetCudaDriverVersion reports it, 13000 = 13.0), ``driver``,
    ``rm_mismatch`` (the driver was changed and the node not rebooted), ``holders``
    (systemd units that hold GPU instances open while active) and ``active_units``;
    ``calls`` lists every call that changes a GPU, with its arguments (handles as GPU
    index / instance id)."""

    def __init__(self, models: list[str], cuda: int = 12080, driver: str = "570.86.15") -> None:
        super().__init__("pynvml")
        for name in dir(real):  # nvidia-ml-py's constants, structures and error classes
            if name.startswith(("NVML_", "c_nvml", "NVMLError")):
                setattr(self, name, getattr(real, name))
        self.gpus = [
            FakeGpu(
                m,
                f"GPU-{i:08x}-0000-4000-8000-{abs(hash(m)) % 10**12:012d}",
                power_mw=MODELS[m]["power_mw"][2],
                app_clocks={
                    real.NVML_CLOCK_MEM: max(MODELS[m]["clocks"]),
                    real.NVML_CLOCK_GRAPHICS: max(next(iter(MODELS[m]["clocks"].values()))),
                },
            )
            for i, m in enumerate(models)
        ]
        self.cuda, self.driver = cuda, driver
        self.rm_mismatch = False
        self.holders: set[str] = set()
        self.active_units: set[str] = set()
        self.calls: list[tuple[Any, ...]] = []
        self._next = 1
        self._handles: dict[int, tuple[str, int, int]] = {}  # address -> (kind, gpu, id)

    def __getattribute__(self, name: str) -> Any:
        value = super().__getattribute__(name)
        if SETTER.match(name) and callable(value):

            def recorded(*args: Any) -> Any:
                self.calls.append((name, *[self._label(a) for a in args]))
                return value(*args)

            return recorded
        return value

    # -- handles: real ctypes pointers (the code sizes ctypes arrays of them)

    def _handle(self, kind: str, gpu: int, ident: int, ctype: Any) -> Any:
        address = 0x1000 + len(self._handles) * 16
        self._handles[address] = (kind, gpu, ident)
        return ctypes.cast(address, ctype)

    def _resolve(self, handle: Any) -> tuple[str, int, int]:
        address = ctypes.cast(handle, ctypes.c_void_p).value
        return self._handles[address]

    def _label(self, arg: Any) -> Any:
        if isinstance(arg, ctypes._Pointer):  # type: ignore[attr-defined]
            kind, gpu, ident = self._resolve(arg)
            return f"{kind}{gpu}" if kind == "gpu" else f"{kind}{ident}"
        return arg

    def _gpu(self, handle: Any) -> FakeGpu:
        _, index, _ = self._resolve(handle)
        gpu = self.gpus[index]
        if gpu.lost:  # nvml.h: "NVML_ERROR_GPU_IS_LOST if the target GPU has fallen off the bus"
            raise _err(real.NVML_ERROR_GPU_IS_LOST)
        return gpu

    # -- system

    def nvmlInit(self) -> None:
        if self.rm_mismatch:
            raise _err(real.NVML_ERROR_LIB_RM_VERSION_MISMATCH)

    def nvmlShutdown(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetNVMLVersion(self) -> str:
        return f"{self.cuda // 1000}.{self.driver}"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.cuda

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        if not 0 <= index < len(self.gpus):
            raise _err(real.NVML_ERROR_INVALID_ARGUMENT)
        if self.gpus[index].lost:
            raise _err(real.NVML_ERROR_GPU_IS_LOST)
        return self._handle("gpu", index, index, real.c_nvmlDevice_t)

    # -- device reads

    def nvmlDeviceGetName(self, h: Any) -> str:
        return str(self._gpu(h).spec["name"])

    def nvmlDeviceGetUUID(self, h: Any) -> str:
        return self._gpu(h).uuid

    def nvmlDeviceGetMemoryInfo(self, h: Any) -> Any:
        total = self._gpu(h).spec["memory_mib"] * 2**20
        return types.SimpleNamespace(total=total, free=total, used=0)

    def nvmlDeviceGetPersistenceMode(self, h: Any) -> int:
        return self._gpu(h).persistence

    def nvmlDeviceGetPowerManagementLimit(self, h: Any) -> int:
        return self._gpu(h).power_mw

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h: Any) -> int:
        return int(self._gpu(h).spec["power_mw"][2])

    def nvmlDeviceGetPowerManagementLimitConstraints(self, h: Any) -> list[int]:
        lo, hi, _ = self._gpu(h).spec["power_mw"]
        return [lo, hi]

    def nvmlDeviceGetApplicationsClock(self, h: Any, clock: int) -> int:
        gpu = self._gpu(h)
        if self.cuda >= 13000:  # see the module docstring: DEPRECATED(13.0)
            raise _err(real.NVML_ERROR_DEPRECATED)
        return gpu.app_clocks[clock]

    def nvmlDeviceGetSupportedMemoryClocks(self, h: Any) -> list[int]:
        return sorted(self._gpu(h).spec["clocks"], reverse=True)

    def nvmlDeviceGetSupportedGraphicsClocks(self, h: Any, memory_mhz: int) -> list[int]:
        clocks = self._gpu(h).spec["clocks"]
        if memory_mhz not in clocks:
            raise _err(real.NVML_ERROR_NOT_FOUND)
        return list(clocks[memory_mhz])

    def nvmlDeviceGetComputeMode(self, h: Any) -> int:
        return self._gpu(h).compute

    def nvmlDeviceGetEccMode(self, h: Any) -> list[int]:
        return list(self._gpu(h).ecc)

    def nvmlDeviceGetMigMode(self, h: Any) -> list[int]:
        gpu = self._gpu(h)
        if not gpu.spec["mig"]:
            raise _err(real.NVML_ERROR_NOT_SUPPORTED)
        return list(gpu.mig)

    def nvmlDeviceGetComputeRunningProcesses(self, h: Any) -> list[object]:
        return list(self._gpu(h).processes)

    def nvmlDeviceGetMaxMigDeviceCount(self, h: Any) -> int:
        return 0

    # -- device writes

    def nvmlDeviceSetPersistenceMode(self, h: Any, mode: int) -> None:
        self._gpu(h).persistence = mode

    def nvmlDeviceSetPowerManagementLimit(self, h: Any, mw: int) -> None:
        gpu = self._gpu(h)
        lo, hi, _ = gpu.spec["power_mw"]
        if not lo <= mw <= hi:
            raise _err(real.NVML_ERROR_INVALID_ARGUMENT)
        gpu.power_mw = mw

    def nvmlDeviceSetApplicationsClocks(self, h: Any, mem: int, gfx: int) -> None:
        gpu = self._gpu(h)
        if self.cuda >= 13000:
            raise _err(real.NVML_ERROR_DEPRECATED)
        gpu.app_clocks = {real.NVML_CLOCK_MEM: mem, real.NVML_CLOCK_GRAPHICS: gfx}

    def nvmlDeviceSetGpuLockedClocks(self, h: Any, lo: int, hi: int) -> None:
        self._gpu(h)

    def nvmlDeviceSetComputeMode(self, h: Any, mode: int) -> None:
        self._gpu(h).compute = mode

    def nvmlDeviceSetEccMode(self, h: Any, mode: int) -> None:
        gpu = self._gpu(h)
        gpu.ecc = (gpu.ecc[0], mode)  # pending until reboot (nvml.h nvmlDeviceSetEccMode)

    def nvmlDeviceSetMigMode(self, h: Any, mode: int) -> int:
        """nvml.h: returns NVML_SUCCESS; the outcome is ``activationStatus`` (pynvml
        returns it): SUCCESS, the mode is in effect; otherwise it is pending."""
        gpu = self._gpu(h)
        if not gpu.spec["mig"]:
            raise _err(real.NVML_ERROR_NOT_SUPPORTED)
        if gpu.activation == real.NVML_SUCCESS:
            gpu.mig = (mode, mode)
            gpu.instances.clear()
        else:
            gpu.mig = (gpu.mig[0], mode)
        return gpu.activation

    # -- MIG

    def _profiles(self, gpu: FakeGpu) -> dict[str, dict[str, Any]]:
        return dict(gpu.spec["mig"])

    def _by_id(self, gpu: FakeGpu, pid: int) -> tuple[str, dict[str, Any]]:
        for name, p in gpu.spec["mig"].items():
            if p["id"] == pid:
                return name, p
        raise _err(real.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetGpuInstanceProfileInfo(self, h: Any, index: int, version: int = 2) -> Any:
        """nvml.h: NOT_SUPPORTED "if device doesn't support MIG or profile isn't supported";
        INVALID_ARGUMENT past the last profile index."""
        gpu = self._gpu(h)
        if index >= real.NVML_GPU_INSTANCE_PROFILE_COUNT:
            raise _err(real.NVML_ERROR_INVALID_ARGUMENT)
        for name, p in gpu.spec["mig"].items():
            if p["index"] == index:
                return types.SimpleNamespace(
                    id=p["id"],
                    sliceCount=p["slices"],
                    instanceCount=p["instances"],
                    memorySizeMB=p["memory_mb"],
                    name=f"MIG {name}".encode(),
                )
        raise _err(real.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetGpuInstancePossiblePlacements(self, h: Any, pid: int, array: Any, count_ref: Any) -> int:
        """nvml.h: "all the possible placements for the given profile regardless of
        whether MIG is enabled or not"."""
        gpu = self._gpu(h)
        _, p = self._by_id(gpu, pid)
        for i, start in enumerate(p["starts"]):
            array[i].start, array[i].size = start, p["size"]
        count_ref._obj.value = len(p["starts"])
        return real.NVML_SUCCESS

    def _used(self, gpu: FakeGpu) -> set[int]:
        out: set[int] = set()
        for gi in gpu.instances.values():
            size = gpu.spec["mig"][gi["profile"]]["size"]
            out |= set(range(gi["start"], gi["start"] + size))
        return out

    def nvmlDeviceCreateGpuInstance(self, h: Any, pid: int) -> Any:
        """nvml.h: NOT_SUPPORTED without MIG mode; INSUFFICIENT_RESOURCES "if the requested
        GPU instance could not be created"; "Creation of new GPU instance will fail if
        there is overlap with the already occupied memory slices". The placement chosen
        is the lowest free start (not documented; see the module docstring)."""
        gpu = self._gpu(h)
        if gpu.mig[0] != real.NVML_DEVICE_MIG_ENABLE:
            raise _err(real.NVML_ERROR_NOT_SUPPORTED)
        name, p = self._by_id(gpu, pid)
        existing = [gi["profile"] for gi in gpu.instances.values()]
        slices = sum(gpu.spec["mig"][n]["slices"] for n in existing)
        if (
            existing.count(name) >= p["instances"]
            or (name.endswith("+me") and any(n.endswith("+me") for n in existing))
            or slices + p["slices"] > 7
        ):
            raise _err(real.NVML_ERROR_INSUFFICIENT_RESOURCES)
        used = self._used(gpu)
        for start in p["starts"]:
            if not set(range(start, start + p["size"])) & used:
                ident, self._next = self._next, self._next + 1
                gpu.instances[ident] = {"profile": name, "start": start, "cis": []}
                return self._handle("gi", self.gpus.index(gpu), ident, real.c_nvmlGpuInstance_t)
        raise _err(real.NVML_ERROR_INSUFFICIENT_RESOURCES)

    def _gi(self, handle: Any) -> tuple[FakeGpu, int, dict[str, Any]]:
        _, index, ident = self._resolve(handle)
        gpu = self.gpus[index]
        if ident not in gpu.instances:
            raise _err(real.NVML_ERROR_INVALID_ARGUMENT)
        return gpu, ident, gpu.instances[ident]

    def nvmlDeviceGetGpuInstances(self, h: Any, pid: int, array: Any, count_ref: Any) -> int:
        gpu = self._gpu(h)
        name, _ = self._by_id(gpu, pid)
        index = self.gpus.index(gpu)
        found = [i for i, gi in gpu.instances.items() if gi["profile"] == name]
        for n, ident in enumerate(found):
            array[n] = self._handle("gi", index, ident, real.c_nvmlGpuInstance_t)
        count_ref._obj.value = len(found)
        return real.NVML_SUCCESS

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, gi: Any, profile: int, eng: int, version: int = 2
    ) -> Any:
        self._gi(gi)
        return types.SimpleNamespace(id=profile, instanceCount=1)

    def nvmlGpuInstanceCreateComputeInstance(self, gi: Any, ci_profile: int) -> Any:
        gpu, _, inst = self._gi(gi)
        if inst["cis"]:
            raise _err(real.NVML_ERROR_INSUFFICIENT_RESOURCES)
        ident, self._next = self._next, self._next + 1
        inst["cis"].append(ident)
        return self._handle("ci", self.gpus.index(gpu), ident, real.c_nvmlComputeInstance_t)

    def nvmlGpuInstanceGetComputeInstances(self, gi: Any, pid: int, array: Any, count_ref: Any) -> int:
        gpu, _, inst = self._gi(gi)
        for n, ident in enumerate(inst["cis"]):
            array[n] = self._handle("ci", self.gpus.index(gpu), ident, real.c_nvmlComputeInstance_t)
        count_ref._obj.value = len(inst["cis"])
        return real.NVML_SUCCESS

    def _held(self) -> bool:
        """A declared holder (DCGM, dcgm-exporter, the device plugin) is running: nvml.h
        nvmlComputeInstanceDestroy / nvmlGpuInstanceDestroy return IN_USE "if processes
        ... are active on the compute instance"."""
        return bool(self.holders & self.active_units)

    def nvmlComputeInstanceDestroy(self, ci: Any) -> int:
        _, index, ident = self._resolve(ci)
        if self._held():
            raise _err(real.NVML_ERROR_IN_USE)
        for gi in self.gpus[index].instances.values():
            gi["cis"] = [c for c in gi["cis"] if c != ident]
        return real.NVML_SUCCESS

    def nvmlGpuInstanceDestroy(self, gi: Any) -> int:
        """nvml.h: IN_USE "if processes ... or compute instances are active on the GPU instance"."""
        gpu, ident, inst = self._gi(gi)
        if self._held() or inst["cis"]:
            raise _err(real.NVML_ERROR_IN_USE)
        del gpu.instances[ident]
        return real.NVML_SUCCESS

    # -- helpers for tests

    def geometry(self, index: int) -> list[str]:
        """The profiles of GPU ``index``'s instances that have a compute instance, sorted."""
        return sorted(gi["profile"] for gi in self.gpus[index].instances.values() if gi["cis"])

    def systemctl(self, *args: str) -> int:
        """A fake ``systemctl`` for the holders: is-active --quiet UNIT, stop UNIT, start UNIT."""
        verb, unit = args[0], args[-1]
        self.calls.append(("systemctl", verb, unit))
        if verb == "is-active":
            return 0 if unit in self.active_units else 3
        if verb == "stop":
            self.active_units.discard(unit)
        elif verb == "start":
            self.active_units.add(unit)
        return 0

    def setter_calls(self) -> list[tuple[Any, ...]]:
        return [c for c in self.calls if c[0] != "systemctl"]
