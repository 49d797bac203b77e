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

With real NVML, and the declared catalog limits at hand (NodeState.gpu.limits), the GPUs
are identified first (count, NVML name, total memory; :func:`identity_problems`): another
GPU refuses the node before any setting. A GPU NVML reports lost (GPU_IS_LOST) is reported
and left out, the others are set. LIB_RM_VERSION_MISMATCH (the driver changed, no reboot
yet) makes the node pending a reboot (:func:`pending_reboot`), not a failure. A MIG mode
change waits for a reset only when ``nvmlDeviceSetMigMode``'s activation status says so.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import tempfile
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
    INVALID_ARGUMENT, IN_USE, INSUFFICIENT_RESOURCES, GPU_IS_LOST, RESET_REQUIRED,
    LIB_RM_VERSION_MISMATCH, DEPRECATED (the nvmlReturn_t names of nvml.h), IDENTITY (the
    GPUs are not the declared ones), or UNKNOWN; the message says which GPU and what was
    asked."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


def mig_fit_problem(profiles: list[str], table: Mapping[str, Any], compute_slices: int) -> str | None:
    """Why the MIG ``profiles`` (GPU instance profile names, one per instance) cannot all
    be created on one GPU, or None.

    ``table``: {profile name: {``slices`` (compute slices), ``size`` (memory slices),
    ``starts`` [memory slice where an instance may start], ``instances`` (most instances
    of the profile)}}: what NVML offers (nvmlDeviceGetGpuInstanceProfileInfo,
    nvmlDeviceGetGpuInstancePossiblePlacements) or the catalog's copy of the MIG User
    Guide's "Supported MIG Profiles" tables. ``compute_slices``: the GPU's (7).

    The one fit rule (the validator applies it to the catalog, the node to NVML's own
    table, the simulated backend to the catalog's): every profile offered; at most
    ``instances`` of each; one media-extension (``+me``) instance per GPU; compute slices
    adding up to at most the GPU's; and one placement per instance with no two sharing a
    memory slice. Memory is judged by placement, not by adding up profile names: two
    ``3g.71gb`` fill an H200's 8 memory slices although 2 x 71 GB > 141 GB.
    """
    unknown = [p for p in profiles if p not in table]
    if unknown:
        return f"{', '.join(unknown)} not a MIG profile of this GPU (has: {', '.join(table) or 'none'})"
    slices = sum(int(table[p]["slices"]) for p in profiles)
    if slices > compute_slices:
        return f"profiles use {slices} compute slices; the GPU has {compute_slices}"
    for name in sorted(set(profiles)):
        if profiles.count(name) > int(table[name]["instances"]):
            return f"{profiles.count(name)} x {name}; the GPU offers at most {table[name]['instances']}"
    media = [p for p in profiles if p.endswith("+me")]
    if len(media) > 1:
        return f"{len(media)} media-extension (+me) instances ({', '.join(media)}); a GPU has one"
    # Largest first: fewer dead ends; the search itself tries every placement.
    order = sorted(profiles, key=lambda p: (-int(table[p]["size"]), p))
    used: set[int] = set()

    def place(i: int) -> bool:
        if i == len(order):
            return True
        size = int(table[order[i]]["size"])
        for start in table[order[i]]["starts"]:
            cells = set(range(int(start), int(start) + size))
            if not cells & used:
                used.update(cells)
                if place(i + 1):
                    return True
                used.difference_update(cells)
        return False

    if not place(0):
        return f"no placement of {', '.join(sorted(profiles))} fits: their memory slices overlap"
    return None


def catalog_mig_table(placements: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The fit rule's table (:func:`mig_fit_problem`) from catalog placements
    ({profile: {size, starts, instances}}): compute slices from the profile name."""
    out = {}
    for name, p in placements.items():
        m = MIG_PROFILE.match(name)
        out[name] = {**p, "slices": int(m["slices"]) if m else 0}
    return out


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
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True), 0o644)


# >>> write_atomic: verbatim from swarm_infra/nodeside/atomic.py (tests/unit/test_atomic_write.py)
def write_atomic(
    path: str | os.PathLike[str], data: bytes | str, mode: int, uid: int = -1, gid: int = -1
) -> None:
    """``data`` (bytes, or text written as UTF-8) into the file ``path``, whole, with the
    permission bits ``mode`` and, where given, the owner ``uid`` and group ``gid`` (``-1``:
    the writer's own); a missing parent directory is made (with the umask's mode).

    Readers see the old file or the new one, never a part. A temporary file is made in the
    same directory under a random name (:func:`tempfile.mkstemp`, which opens it with
    ``O_CREAT|O_EXCL|O_NOFOLLOW``, mode 0600: a file or symbolic link planted in advance is
    never written through), given its owner and then ``mode`` (so ``mode`` holds whatever
    the umask, and a secret is never readable more widely) before any byte is written; it is
    written, ``fsync``-ed, renamed over ``path`` (:func:`os.replace`: a symbolic link at
    ``path`` is replaced, not followed), and the directory is ``fsync``-ed so that the
    rename survives a crash. On any error the temporary file is removed and the error
    raised (OSError, or TypeError for ``data`` of another type); ``path`` is then as it was.
    """
    directory, name = os.path.split(os.fspath(path))
    directory = directory or "."
    os.makedirs(directory, exist_ok=True)
    blob = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".swarm-tmp", dir=directory)
    try:
        try:
            if uid != -1 or gid != -1:
                os.fchown(fd, uid, gid)  # before the mode: a change of owner clears set-id bits
            os.fchmod(fd, mode)
            view = memoryview(blob)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


# <<< write_atomic


# ---------------------------------------------------------------------------- backends


class GpuBackend(Protocol):
    """What :func:`converge` needs of a backend (:class:`NvmlBackend`,
    :class:`SimulatedBackend`). Settings and readings are JSON data: ``read`` reports a
    GPU's settings, limits and MIG state by key (the shape :func:`diff` and :func:`check`
    take as ``current``); ``set`` changes one setting (a key of the desired settings, or
    ``mig_geometry``) to a value as the settings document spells it, and returns, for the
    MIG mode, why the new mode is not in effect yet (None: it is)."""

    @property
    def simulated(self) -> bool: ...

    def count(self) -> int: ...

    def read(self, index: int) -> dict[str, Any]: ...

    def set(self, index: int, key: str, value: Any) -> str | None: ...


def _systemctl(*args: str) -> int:
    """Run ``systemctl ARGS`` (no shell; unit names are arguments); its exit status."""
    import subprocess

    return subprocess.run(["systemctl", *args], check=False, capture_output=True).returncode


class NvmlBackend:
    """Real GPUs through pynvml (nvidia-ml-py). ``readonly``: never changes a GPU or a file.

    ``mig_holders``: systemd units that keep GPU instances open without being compute
    processes (DCGM ``nvidia-dcgm.service``, ``dcgm-exporter.service``, the device plugin
    when it runs under systemd, ``nvidia-persistenced.service`` where needed): the active
    ones are stopped before MIG instances are destroyed and started again afterwards, as
    NVIDIA mig-parted's nvidia-mig-manager.service does with its hooks
    (deployments/systemd/hooks-default.yaml). ``systemctl``: how a unit is stopped,
    started or asked ``is-active``; returns the exit status (tests pass a fake).
    """

    simulated = False

    def __init__(
        self,
        readonly: bool = False,
        root: str = "/",
        mig_holders: list[str] | tuple[str, ...] = (),
        systemctl: Any = _systemctl,
    ) -> None:
        try:
            import pynvml
        except ImportError as exc:
            # The drivers layer installs Debian's python3-pynvml (bookworm contrib) for
            # /usr/bin/python3: say that, not "driver not loaded" (the driver may be fine).
            raise GpuError(
                "PYNVML_MISSING",
                f"pynvml is not importable by {sys.executable} ({exc}): install Debian's "
                "python3-pynvml (bookworm contrib; the drivers layer does) or nvidia-ml-py",
            ) from exc
        self.nvml = pynvml
        self.readonly = readonly
        self.mig_holders = list(mig_holders)
        self.systemctl = systemctl
        self.record_path = os.path.join(root, LOCKED_CLOCKS_RECORD.lstrip("/"))
        self._call("nvmlInit")

    def _call(self, name: str, *args: object) -> Any:  # pynvml is untyped
        try:
            return getattr(self.nvml, name)(*args)
        except self.nvml.NVMLError as exc:
            raise GpuError(self.code(getattr(exc, "value", None)), f"{name}: {exc}") from exc

    def code(self, value: object) -> str:
        """The GpuError code of an nvmlReturn_t value (nvml.h ``nvmlReturn_t``)."""
        n = self.nvml
        return {
            n.NVML_SUCCESS: "SUCCESS",
            n.NVML_ERROR_NO_PERMISSION: "NO_PERMISSION",
            n.NVML_ERROR_NOT_SUPPORTED: "NOT_SUPPORTED",
            n.NVML_ERROR_DRIVER_NOT_LOADED: "DRIVER_NOT_LOADED",
            n.NVML_ERROR_LIBRARY_NOT_FOUND: "DRIVER_NOT_LOADED",
            n.NVML_ERROR_INVALID_ARGUMENT: "INVALID_ARGUMENT",
            n.NVML_ERROR_IN_USE: "IN_USE",
            n.NVML_ERROR_INSUFFICIENT_RESOURCES: "INSUFFICIENT_RESOURCES",
            n.NVML_ERROR_GPU_IS_LOST: "GPU_IS_LOST",
            n.NVML_ERROR_RESET_REQUIRED: "RESET_REQUIRED",
            n.NVML_ERROR_LIB_RM_VERSION_MISMATCH: "LIB_RM_VERSION_MISMATCH",
            n.NVML_ERROR_DEPRECATED: "DEPRECATED",
        }.get(value, "UNKNOWN")

    def count(self) -> int:
        return int(self._call("nvmlDeviceGetCount"))

    def _h(self, index: int) -> object:
        return self._call("nvmlDeviceGetHandleByIndex", index)

    def _optional(self, name: str, *args: object, default: object) -> Any:
        """``name(*args)``, or ``default`` where this GPU or driver does not offer it:
        NOT_SUPPORTED, or DEPRECATED (nvml.h 13.x marks application clocks
        ``DEPRECATED(13.0)``, "will be removed in CUDA 14.0")."""
        try:
            return self._call(name, *args)
        except GpuError as exc:
            if exc.code in ("NOT_SUPPORTED", "DEPRECATED"):
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
        """Current settings and limits of GPU ``index`` (W, MHz, MiB). ``application_clocks``
        is None where NVML does not offer them (NOT_SUPPORTED, DEPRECATED)."""
        h, n = self._h(index), self.nvml
        lo, hi = self._call("nvmlDeviceGetPowerManagementLimitConstraints", h)
        ecc_cur, ecc_pend = self._optional("nvmlDeviceGetEccMode", h, default=(None, None))
        mig_cur, mig_pend = self._optional("nvmlDeviceGetMigMode", h, default=(None, None))
        mems = list(self._optional("nvmlDeviceGetSupportedMemoryClocks", h, default=[]))
        mig, table = None, {}
        if mig_cur is not None:
            enabled = mig_cur == n.NVML_DEVICE_MIG_ENABLE
            mig = {"enabled": enabled, "profiles": self._mig_geometry(h) if enabled else []}
            table = self.mig_table(h) if enabled else {}
        app = {
            "memory_mhz": self._optional("nvmlDeviceGetApplicationsClock", h, n.NVML_CLOCK_MEM, default=None),
            "graphics_mhz": self._optional(
                "nvmlDeviceGetApplicationsClock", h, n.NVML_CLOCK_GRAPHICS, default=None
            ),
        }
        return {
            "name": _text(self._call("nvmlDeviceGetName", h)),
            "memory_mib": int(self._call("nvmlDeviceGetMemoryInfo", h).total) // 2**20,
            "persistence_mode": self._call("nvmlDeviceGetPersistenceMode", h) == n.NVML_FEATURE_ENABLED,
            "power_limit_w": round(int(self._call("nvmlDeviceGetPowerManagementLimit", h)) / 1000),
            "power_limits_w": [round(lo / 1000), round(hi / 1000)],
            "application_clocks": None if app["memory_mhz"] is None and app["graphics_mhz"] is None else app,
            "supported_clocks": {
                str(m): list(self._optional("nvmlDeviceGetSupportedGraphicsClocks", h, m, default=[]))
                for m in mems
            },
            "compute_mode": COMPUTE_NAMES.get(self._call("nvmlDeviceGetComputeMode", h), "UNKNOWN"),
            "ecc": None if ecc_cur is None else ecc_cur == n.NVML_FEATURE_ENABLED,
            "ecc_pending": None if ecc_pend is None else ecc_pend == n.NVML_FEATURE_ENABLED,
            "mig": mig,
            "mig_pending": None if mig_pend is None else mig_pend == n.NVML_DEVICE_MIG_ENABLE,
            "mig_offered": sorted(table),
            "mig_table": table,
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
            out[_text(info.name).removeprefix("MIG ")] = info
        return out

    def mig_table(self, h: object) -> dict[str, dict[str, Any]]:
        """The fit rule's table (:func:`mig_fit_problem`) as NVML reports it: per offered
        profile, compute slices, most instances, and the possible placements (start and
        size in memory slices, nvmlDeviceGetGpuInstancePossiblePlacements_v2)."""
        import ctypes

        n, out = self.nvml, {}
        for name, info in self._mig_profiles(h).items():
            arr = (n.c_nvmlGpuInstancePlacement_t * max(int(info.instanceCount), 8))()
            count = ctypes.c_uint(len(arr))
            self._call("nvmlDeviceGetGpuInstancePossiblePlacements", h, info.id, arr, ctypes.byref(count))
            places = list(arr)[: count.value]
            out[name] = {
                "slices": int(info.sliceCount),
                "instances": int(info.instanceCount),
                "size": int(places[0].size) if places else 0,
                "starts": [int(p.start) for p in places],
            }
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

    def _create_in_order(self, h: object, profiles: list[str]) -> None:
        """Create one GPU instance with its full compute instance per profile, in this
        order (the driver chooses each placement, so the order decides what fits)."""
        n, offered = self.nvml, self._mig_profiles(h)
        for name in profiles:
            info = offered[name]
            gi = self._call("nvmlDeviceCreateGpuInstance", h, info.id)
            ci_info = self._call(
                "nvmlGpuInstanceGetComputeInstanceProfileInfo",
                gi,
                getattr(n, f"NVML_COMPUTE_INSTANCE_PROFILE_{_CI_PROFILE[int(info.sliceCount)]}"),
                n.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
            )
            self._call("nvmlGpuInstanceCreateComputeInstance", gi, ci_info.id)

    def _create(self, h: object, profiles: list[str]) -> None:
        """Create ``profiles`` on a GPU without instances, trying every distinct ordering
        until one fits (largest first, then the rest), clearing the GPU between tries,
        as mig-parted's iteratePermutationsUntilSuccess does; raises the last error."""
        from itertools import permutations

        first = sorted(profiles, key=lambda p: (-_slices(p), p))
        last: GpuError | None = None
        for order in dict.fromkeys(permutations(first)):
            try:
                self._create_in_order(h, list(order))
                return
            except GpuError as exc:
                last = exc
                self._destroy_all(h)
        if last is not None:
            raise GpuError(last.code, f"no ordering of {', '.join(first)} could be created; last: {last}")

    def _destroy_all(self, h: object) -> None:
        for _, gi, cis in self._mig_instances(h):
            for ci in cis:
                self._call("nvmlComputeInstanceDestroy", ci)
            self._call("nvmlGpuInstanceDestroy", gi)

    def _stop_holders(self) -> list[str]:
        """Stop the active declared holders; the ones stopped, to start again."""
        stopped: list[str] = []
        for unit in self.mig_holders:
            if self.systemctl("is-active", "--quiet", unit) == 0:
                if self.systemctl("stop", unit) != 0:
                    self._start(stopped)
                    raise GpuError("IN_USE", f"could not stop {unit}, which holds the GPU; nothing changed")
                stopped.append(unit)
        return stopped

    def _start(self, units: list[str]) -> None:
        for unit in reversed(units):
            self.systemctl("start", unit)

    def _set_geometry(self, index: int, h: object, profiles: list[str]) -> None:
        """Replace the GPU's instances by ``profiles``, the declared holders stopped
        meanwhile; on any failure put the previous geometry back (or say the GPU has no
        instances now) and raise."""
        if self._in_use(h):
            raise GpuError(
                "IN_USE", f"GPU {index}: compute processes are running; MIG geometry left as it is"
            )
        before = [name for name, _, cis in self._mig_instances(h) if cis]
        stopped = self._stop_holders()
        try:
            try:
                self._destroy_all(h)
                self._create(h, profiles)
                after = self._mig_geometry(h)
                if after != sorted(profiles):
                    raise GpuError(
                        "UNKNOWN", f"GPU {index}: MIG geometry reads back as {after}, not {sorted(profiles)}"
                    )
            except GpuError as exc:
                try:
                    if self._mig_geometry(h) != sorted(before):
                        self._destroy_all(h)
                        self._create(h, before)
                    restored = f"the previous geometry {sorted(before)} is in place"
                except GpuError:
                    restored = f"the GPU has MIG instances {self._mig_geometry(h)} now, not {sorted(before)}"
                raise GpuError(exc.code, f"GPU {index}: {exc}; {restored}") from exc
        finally:
            self._start(stopped)

    def set(self, index: int, key: str, value: Any) -> str | None:
        """Change ``key`` to ``value`` on GPU ``index``. Returns, for the MIG mode, why the
        new mode is not in effect yet (NVML's activation status), or None."""
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
                stopped = self._stop_holders()
                try:
                    self._destroy_all(h)
                finally:
                    self._start(stopped)
            # nvml.h nvmlDeviceSetMigMode: the mode is in effect when activationStatus is
            # NVML_SUCCESS; RESET_REQUIRED (no reset possible here) or IN_USE (the device
            # was not idle) leave it pending. pynvml returns the status, raising nothing.
            status = self._call("nvmlDeviceSetMigMode", h, mode)
            if status != n.NVML_SUCCESS:
                return f"needs a GPU reset or reboot (NVML activation status {self.code(status)})"
        elif key == "mig_geometry":
            self._set_geometry(index, h, list(value))
        else:
            raise GpuError("INVALID_ARGUMENT", f"unknown setting {key!r}")
        return None


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _slices(profile: str) -> int:
    m = MIG_PROFILE.match(profile)
    return int(m["slices"]) if m else 0


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

    def set(self, index: int, key: str, value: Any) -> str | None:
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
            self._save()
            return "needs a GPU reset or reboot (simulated: until the next boot)"
        elif key == "mig_geometry":
            table = catalog_mig_table(lim["mig_placements"])
            problem = mig_fit_problem(list(value), table, lim["mig_compute_slices"])
            if problem:
                raise GpuError("INSUFFICIENT_RESOURCES", f"GPU {index} ({lim['product_name']}): {problem}")
            v["mig_profiles"] = sorted(value)
        else:
            raise GpuError("INVALID_ARGUMENT", f"unknown setting {key!r}")
        self._save()
        return None


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
        table = current.get("mig_table") or {}
        if table:  # NVML's own placements and instance counts (a real GPU with MIG on)
            whole = max(int(t["slices"]) for t in table.values())
            problem = mig_fit_problem(list(value["profiles"]), table, whole)
            if problem:
                raise GpuError("INVALID_ARGUMENT", f"GPU {index}: {problem}")


# A GPU's total memory as NVML reports it may differ from the catalog's by this fraction:
# GDDR boards set 1/16 of their memory aside while ECC is on (L40S: the catalog's 46068
# MiB is 15/16 of 49152 MiB less reserved memory), and the catalog lists one ECC state. Sizes
# that tell apart models of one name family differ by far more (40/80 GB, 80/94 GB).
MEMORY_TOLERANCE = 0.10


def identity_problems(
    devices: list[dict[str, Any]], limits: Mapping[str, Any], found: int, readings: Mapping[int, Any]
) -> list[str]:
    """Why the GPUs NVML reports are not the declared ones: ``found`` GPUs against
    ``len(devices)``; per GPU (``readings`` {index: a backend's ``read``}), NVML's name
    against the catalog's ``product_name`` and total memory (MiB) against ``memory_mib``
    (within :data:`MEMORY_TOLERANCE`). ``limits``: NodeState.gpu.limits by model."""
    out = []
    if found != len(devices):
        out.append(f"{len(devices)} GPUs declared, {found} found")
    for dev in devices:
        cur, lim = readings.get(dev["index"]), limits.get(dev["model"])
        if cur is None or lim is None:
            continue
        if cur["name"] != lim["product_name"]:
            out.append(
                f"GPU {dev['index']} is a {cur['name']!r}, not the declared {dev['model']} "
                f"({lim['product_name']!r})"
            )
        elif abs(cur["memory_mib"] - lim["memory_mib"]) > lim["memory_mib"] * MEMORY_TOLERANCE:
            out.append(
                f"GPU {dev['index']} has {cur['memory_mib']} MiB, not the {lim['memory_mib']} MiB "
                f"of the declared {dev['model']}"
            )
    return out


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
                        "note": "may need a GPU reset or reboot (NVML says when it is set)",
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


def converge(
    backend: GpuBackend,
    devices: list[dict[str, Any]],
    check_mode: bool = False,
    limits: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Bring every GPU in ``devices`` ([{index, model, settings}]) to its settings.

    ``limits`` (NodeState.gpu.limits): with a real backend, the GPUs are first identified
    (:func:`identity_problems`); a GPU count, name or memory size other than declared
    refuses the node (GpuError IDENTITY) before anything is set.

    A GPU NVML reports lost (GPU_IS_LOST, "fallen off the bus") is left out and reported
    in ``lost``; the others are converged. Returns {changes, reboot_required,
    pending_reset {gpu: [modes]}, lost {gpu: message}, simulated, before}; raises GpuError
    (nothing is applied if any requested value is invalid for its GPU).
    """
    found = backend.count()
    identify = limits is not None and not backend.simulated
    if found != len(devices) and identify:
        raise GpuError("IDENTITY", f"{len(devices)} GPUs declared, {found} found; nothing was changed")
    if found < len(devices):
        raise GpuError("INVALID_ARGUMENT", f"{len(devices)} GPUs declared, {found} found")
    before: dict[int, dict[str, Any]] = {}
    lost: dict[int, str] = {}
    for dev in devices:
        try:
            before[dev["index"]] = backend.read(dev["index"])
        except GpuError as exc:
            if exc.code != "GPU_IS_LOST":
                raise
            lost[dev["index"]] = str(exc)
    if identify:
        assert limits is not None  # identify says so
        problems = identity_problems(devices, limits, found, before)
        if problems:
            raise GpuError("IDENTITY", "; ".join(problems) + "; nothing was changed on this node")
    plan = []
    for dev in devices:
        if dev["index"] in lost:
            continue
        cur = before[dev["index"]]
        for key, value in dev["settings"].items():
            check(dev["index"], key, value, cur)
        plan += diff(dev["index"], dev["settings"], cur)
    if not check_mode:
        planned = {(c["gpu"], c["key"]) for c in plan}
        for c in list(plan):
            if c["gpu"] in lost:
                continue
            try:
                note = backend.set(c["gpu"], c["key"], c["after"])
            except GpuError as exc:
                if exc.code != "GPU_IS_LOST":
                    raise
                lost[c["gpu"]] = str(exc)
                continue
            if c["key"] == "mig":
                c["note"] = note
                want = next(d["settings"]["mig"] for d in devices if d["index"] == c["gpu"])
                if note is None and want["enabled"] and want["profiles"]:
                    # The mode is in effect now: the geometry can be made in this run.
                    now = backend.read(c["gpu"])
                    geometry = [g for g in diff(c["gpu"], {"mig": want}, now) if g["key"] == "mig_geometry"]
                    for g in geometry:
                        check(c["gpu"], "mig", want, now)
                        backend.set(g["gpu"], g["key"], g["after"])
                    plan += geometry
        for dev in devices:
            for key in WRITE_ONLY:
                if key in dev["settings"] and (dev["index"], key) not in planned and dev["index"] not in lost:
                    backend.set(dev["index"], key, dev["settings"][key])
    pending = {i: reset_pending(cur) for i, cur in before.items() if reset_pending(cur)}
    return {
        "changes": plan,
        "reboot_required": any(c["note"] for c in plan) or bool(pending),
        "pending_reset": pending,
        "lost": lost,
        "simulated": backend.simulated,
        "before": before,
    }


# What the drivers layer's pending-reboot marker says (swarm_infra.resolve.files.reboot_required).
DRIVER_REBOOT_TAG = "NVIDIA driver"


def pending_reboot(exc: GpuError) -> dict[str, Any]:
    """The result of a node whose NVML library and kernel module differ
    (LIB_RM_VERSION_MISMATCH: "RM detects a driver/library version mismatch", nvml.h):
    the driver was changed and the node not rebooted yet. Nothing is read or set; the
    node is reported pending a reboot, which is neither a failure nor unknown."""
    return {
        "changes": [],
        "reboot_required": True,
        "pending_reboot": f"the NVIDIA driver changed and the node was not rebooted ({exc})",
        "pending_reset": {},
        "lost": {},
        "simulated": False,
        "before": {},
    }


def converge_spec(spec: Mapping[str, Any], check_mode: bool = False, root: str = "/") -> dict[str, Any]:
    """:func:`converge` on the backend a settings document (NodeState.gpu) asks for, the
    GPUs identified against its ``limits``; a LIB_RM_VERSION_MISMATCH anywhere becomes
    :func:`pending_reboot`. ``spec["mig_holders"]`` (optional): the systemd units the
    NVML backend stops around MIG changes (:class:`NvmlBackend`). ``spec["reboot_marker"]``
    (optional): the drivers layer's pending-reboot marker; while it names the NVIDIA driver
    (:data:`DRIVER_REBOOT_TAG`) the node is pending a reboot and nothing is read or set (the
    marker lives in /run, which a reboot empties)."""
    marker = spec.get("reboot_marker")
    if spec["backend"] == "nvml" and marker and os.path.isfile(marker):
        with open(marker, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        if DRIVER_REBOOT_TAG in text:
            return pending_reboot(GpuError("REBOOT_PENDING", f"{marker}: {text.strip()}"))
    try:
        backend = backend_for(dict(spec), root=root, readonly=check_mode)
        return converge(backend, spec["devices"], check_mode=check_mode, limits=spec.get("limits"))
    except GpuError as exc:
        if exc.code == "LIB_RM_VERSION_MISMATCH":
            return pending_reboot(exc)
        raise


def backend_for(spec: dict[str, Any], root: str = "/", readonly: bool = False) -> GpuBackend:
    """The backend a settings document asks for: NodeState.gpu's shape, {"backend":
    "nvml"|"simulated", "devices": [{index, model, settings}], "limits": {model: ...}}.
    ``readonly`` backends change nothing, on the GPU or on disk (check mode, diff, read)."""
    if spec["backend"] == "simulated":
        models = [d["model"] for d in sorted(spec["devices"], key=lambda d: d["index"])]
        return SimulatedBackend(models, spec["limits"], root, readonly=readonly)
    return NvmlBackend(readonly=readonly, root=root, mig_holders=list(spec.get("mig_holders") or []))


def run_spec(spec: dict[str, Any], apply: bool = False) -> dict[str, Any]:
    """:func:`converge` on the backend a settings document asks for (NodeState.gpu), as JSON
    data: ``{"changes", "reboot_required", "pending_reset" {gpu index as text: [modes]},
    "simulated"}``; with ``apply`` false the backend is read-only and nothing is written.
    A GpuError becomes ``{"error": message, "code": NVML-style code, "simulated"}``. Used
    by the pyinfra engine, which sends this file and the document to the node on stdin."""
    try:
        result = converge_spec(spec, check_mode=not apply)
    except GpuError as exc:
        return {"error": str(exc), "code": exc.code, "simulated": spec["backend"] == "simulated"}
    out = {
        "changes": result["changes"],
        "reboot_required": result["reboot_required"],
        "pending_reset": {str(k): v for k, v in result["pending_reset"].items()},
        "simulated": result["simulated"],
    }
    if result["lost"]:
        out["lost"] = {str(k): v for k, v in result["lost"].items()}
    if "pending_reboot" in result:
        out["pending_reboot"] = result["pending_reboot"]
    return out


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
        if argv[1] == "read":
            backend = backend_for(spec, readonly=True)
            out = {d["index"]: backend.read(d["index"]) for d in spec["devices"]}
            print(json.dumps({"simulated": backend.simulated, "gpus": out}, indent=2, sort_keys=True))
            return 0
        result = converge_spec(spec, check_mode=argv[1] == "diff")
    except GpuError as exc:
        print(f"swarm-gpu: {exc}", file=sys.stderr)
        return 1
    extra = {k: result[k] for k in ("pending_reboot",) if k in result}
    if result["lost"]:
        extra["lost"] = result["lost"]
    if argv[1] == "diff":
        print(
            json.dumps(
                {
                    "simulated": result["simulated"],
                    "changes": result["changes"],
                    "pending_reset": result["pending_reset"],
                    **extra,
                },
                sort_keys=True,
            )
        )
        return 0
    label = " [SIMULATED]" if result["simulated"] else ""
    for c in result["changes"]:
        print(f"swarm-gpu{label}: gpu {c['gpu']} {c['key']}: {c['before']} -> {c['after']}")
    print(f"swarm-gpu{label}: {len(result['changes'])} change(s)")
    if "pending_reboot" in result:
        print(f"swarm-gpu: pending reboot: {result['pending_reboot']}")
    for index, message in sorted(result["lost"].items()):
        print(f"swarm-gpu: gpu {index} lost, left as it is: {message}", file=sys.stderr)
    return 1 if result["lost"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
