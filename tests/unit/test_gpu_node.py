"""The node-side GPU code: NVML path with the real pynvml attributes patched, simulated path
on files. A misspelt NVML function name fails here (monkeypatch refuses unknown attributes)."""

from __future__ import annotations

import ctypes
from pathlib import Path
from types import SimpleNamespace

import pynvml
import pytest

from swarm_infra.nodeside import gpu as node
from swarm_infra.resolve.gpu import model_limits

H100 = "H100-SXM5-80GB"


class FakeGpu:
    """What a driver would hold for one H100: power in mW, clocks in MHz."""

    def __init__(self) -> None:
        self.persistence = pynvml.NVML_FEATURE_DISABLED
        self.power_mw = 700_000
        self.app_clocks = {pynvml.NVML_CLOCK_MEM: 2619, pynvml.NVML_CLOCK_GRAPHICS: 1755}
        self.compute = 0
        self.ecc = (pynvml.NVML_FEATURE_ENABLED, pynvml.NVML_FEATURE_ENABLED)
        self.mig = (pynvml.NVML_DEVICE_MIG_DISABLE, pynvml.NVML_DEVICE_MIG_DISABLE)
        self.calls: list[tuple] = []
        self.processes: list[object] = []
        self.instances: dict[int, dict] = {}  # GI id -> {"profile": index, "cis": [CI ids]}
        self.next_id = 1


# H100 80GB GPU instance profiles: index (pynvml NVML_GPU_INSTANCE_PROFILE_*) -> name,
# slices. Profile IDs differ from indices on real GPUs (go-nvml#146): here id = 100 + index.
H100_MIG = {0: ("1g.10gb", 1), 7: ("1g.10gb+me", 1), 9: ("1g.20gb", 1), 1: ("2g.20gb", 2),
            2: ("3g.40gb", 3), 3: ("4g.40gb", 4), 4: ("7g.80gb", 7)}  # fmt: skip


def _handle(kind, ident: int):
    return ctypes.cast(ident, kind)


def _ident(handle) -> int:
    return ctypes.cast(handle, ctypes.c_void_p).value


def _fill(array, count_ref, idents: list[int], kind) -> int:
    for i, ident in enumerate(idents):
        array[i] = _handle(kind, ident)
    count_ref._obj.value = len(idents)
    return pynvml.NVML_SUCCESS


def _mig_patches(g: FakeGpu) -> tuple[dict, dict]:
    """Fake MIG on the real pynvml names: GPU instances with one compute instance each.
    Returns (reads, writes); only writes are recorded in ``g.calls``."""

    def profile_info(h, index, version=2):
        if index not in H100_MIG:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        name, slices = H100_MIG[index]
        return SimpleNamespace(
            id=100 + index, sliceCount=slices, instanceCount=7, name=f"MIG {name}".encode()
        )

    def create_gi(h, profile_id):
        used = sum(H100_MIG[gi["profile"]][1] for gi in g.instances.values())
        if used + H100_MIG[profile_id - 100][1] > 7:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        g.instances[g.next_id] = {"profile": profile_id - 100, "cis": []}
        g.next_id += 1
        return _handle(pynvml.c_nvmlGpuInstance_t, g.next_id - 1)

    def create_ci(gi, ci_profile_id):
        g.instances[_ident(gi)]["cis"].append(g.next_id)
        g.next_id += 1

    def destroy_ci(ci):
        for gi in g.instances.values():
            gi["cis"] = [c for c in gi["cis"] if c != _ident(ci)]

    reads = {
        "nvmlDeviceGetGpuInstanceProfileInfo": profile_info,
        "nvmlDeviceGetGpuInstances": lambda h, pid, arr, cnt: _fill(
            arr,
            cnt,
            [i for i, gi in g.instances.items() if 100 + gi["profile"] == pid],
            pynvml.c_nvmlGpuInstance_t,
        ),
        "nvmlGpuInstanceGetComputeInstanceProfileInfo": lambda gi, ci, eng, version=2: SimpleNamespace(
            id=200 + ci, instanceCount=1
        ),
        "nvmlGpuInstanceGetComputeInstances": lambda gi, pid, arr, cnt: _fill(
            arr, cnt, g.instances[_ident(gi)]["cis"], pynvml.c_nvmlComputeInstance_t
        ),
        "nvmlDeviceGetComputeRunningProcesses": lambda h: h.processes,
        "nvmlDeviceGetMaxMigDeviceCount": lambda h: 0,
    }
    writes = {
        "nvmlDeviceCreateGpuInstance": create_gi,
        "nvmlGpuInstanceCreateComputeInstance": create_ci,
        "nvmlComputeInstanceDestroy": destroy_ci,
        "nvmlGpuInstanceDestroy": lambda gi: g.instances.pop(_ident(gi)),
    }
    return reads, writes


@pytest.fixture
def gpu(monkeypatch) -> FakeGpu:
    g = FakeGpu()

    def setter(name, fn):
        def wrapped(*args):
            g.calls.append((name, *args[1:]))
            return fn(*args)

        monkeypatch.setattr(pynvml, name, wrapped)

    patches = {
        "nvmlInit": lambda: None,
        "nvmlDeviceGetCount": lambda: 1,
        "nvmlDeviceGetHandleByIndex": lambda i: g,
        "nvmlDeviceGetName": lambda h: "NVIDIA H100 80GB HBM3",
        "nvmlDeviceGetPersistenceMode": lambda h: h.persistence,
        "nvmlDeviceGetPowerManagementLimit": lambda h: h.power_mw,
        "nvmlDeviceGetPowerManagementLimitConstraints": lambda h: (200_000, 700_000),
        "nvmlDeviceGetApplicationsClock": lambda h, t: h.app_clocks[t],
        "nvmlDeviceGetSupportedMemoryClocks": lambda h: [2619],
        "nvmlDeviceGetSupportedGraphicsClocks": lambda h, m: list(range(1980, 344, -15)),
        "nvmlDeviceGetComputeMode": lambda h: h.compute,
        "nvmlDeviceGetEccMode": lambda h: h.ecc,
        "nvmlDeviceGetMigMode": lambda h: h.mig,
        "nvmlDeviceGetUUID": lambda h: "GPU-00000000-fake-0000",
        "nvmlSystemGetDriverVersion": lambda: "570.86.15",
    }
    for name, fn in patches.items():
        monkeypatch.setattr(pynvml, name, fn)
    reads, writes = _mig_patches(g)
    for name, fn in reads.items():
        monkeypatch.setattr(pynvml, name, fn)
    for name, fn in writes.items():
        setter(name, fn)
    setter("nvmlDeviceSetGpuLockedClocks", lambda h, lo, hi: None)
    setter("nvmlDeviceSetPersistenceMode", lambda h, v: setattr(h, "persistence", v))
    setter("nvmlDeviceSetPowerManagementLimit", lambda h, mw: setattr(h, "power_mw", mw))
    setter(
        "nvmlDeviceSetApplicationsClocks",
        lambda h, mem, gfx: h.app_clocks.update(
            {pynvml.NVML_CLOCK_MEM: mem, pynvml.NVML_CLOCK_GRAPHICS: gfx}
        ),
    )
    setter("nvmlDeviceSetComputeMode", lambda h, v: setattr(h, "compute", v))
    setter("nvmlDeviceSetEccMode", lambda h, v: setattr(h, "ecc", (h.ecc[0], v)))
    setter("nvmlDeviceSetMigMode", lambda h, v: setattr(h, "mig", (h.mig[0], v)))
    return g


DESIRED = {
    "persistence_mode": True,
    "power_limit_w": 650,
    "application_clocks": {"memory_mhz": 2619, "graphics_mhz": 1980},
    "compute_mode": "DEFAULT",
    "ecc": True,
}


def test_nvml_applies_only_the_differences_with_power_in_milliwatts(gpu: FakeGpu) -> None:
    result = node.converge(node.NvmlBackend(), [{"index": 0, "settings": DESIRED}])
    assert {c["key"] for c in result["changes"]} == {
        "persistence_mode",
        "power_limit_w",
        "application_clocks",
    }
    assert ("nvmlDeviceSetPowerManagementLimit", 650_000) in gpu.calls
    assert ("nvmlDeviceSetApplicationsClocks", 2619, 1980) in gpu.calls
    assert not [c for c in gpu.calls if c[0] in ("nvmlDeviceSetComputeMode", "nvmlDeviceSetEccMode")]
    assert not result["reboot_required"] and not result["simulated"]
    gpu.calls.clear()
    again = node.converge(node.NvmlBackend(), [{"index": 0, "settings": DESIRED}])
    assert again["changes"] == [] and gpu.calls == []


def test_nvml_check_mode_reports_and_applies_nothing(gpu: FakeGpu) -> None:
    result = node.converge(node.NvmlBackend(), [{"index": 0, "settings": DESIRED}], check_mode=True)
    assert len(result["changes"]) == 3 and gpu.calls == [] and gpu.power_mw == 700_000


def test_power_limit_outside_nvml_constraints_is_refused_before_anything_is_set(gpu: FakeGpu) -> None:
    bad = {**DESIRED, "power_limit_w": 150}
    with pytest.raises(node.GpuError, match="outside the constraints 200-700 W") as err:
        node.converge(node.NvmlBackend(), [{"index": 0, "settings": bad}])
    assert err.value.code == "INVALID_ARGUMENT" and gpu.calls == []


def test_unsupported_application_clocks_are_refused(gpu: FakeGpu) -> None:
    bad = {**DESIRED, "application_clocks": {"memory_mhz": 1593, "graphics_mhz": 1980}}
    with pytest.raises(node.GpuError, match="not in the supported list"):
        node.converge(node.NvmlBackend(), [{"index": 0, "settings": bad}])


def test_ecc_change_is_pending_and_not_redone(gpu: FakeGpu) -> None:
    off = {"ecc": False}
    first = node.converge(node.NvmlBackend(), [{"index": 0, "settings": off}])
    assert first["reboot_required"] and first["changes"][0]["note"] == "pending until reboot"
    assert node.converge(node.NvmlBackend(), [{"index": 0, "settings": off}])["changes"] == []


def test_nvml_errors_map_to_clear_codes(gpu: FakeGpu, monkeypatch) -> None:
    def denied(h, mw):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)

    monkeypatch.setattr(pynvml, "nvmlDeviceSetPowerManagementLimit", denied)
    with pytest.raises(node.GpuError) as err:
        node.converge(node.NvmlBackend(), [{"index": 0, "settings": {"power_limit_w": 600}}])
    assert err.value.code == "NO_PERMISSION"

    def missing():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    monkeypatch.setattr(pynvml, "nvmlInit", missing)
    with pytest.raises(node.GpuError) as err:
        node.NvmlBackend()
    assert err.value.code == "DRIVER_NOT_LOADED"


def _sim(tmp_path: Path):
    return node.SimulatedBackend([H100, H100], {H100: model_limits(H100)}, root=str(tmp_path))


def test_simulated_backend_enforces_catalog_limits_and_persists(tmp_path: Path) -> None:
    devices = [{"index": i, "settings": DESIRED} for i in (0, 1)]
    result = node.converge(_sim(tmp_path), devices)
    # Simulated defaults: clocks at their maximum (as desired), ECC on; persistence and power differ.
    assert result["simulated"] and {c["key"] for c in result["changes"]} == {
        "persistence_mode",
        "power_limit_w",
    }
    assert len(result["changes"]) == 4
    assert node.converge(_sim(tmp_path), devices)["changes"] == []  # state kept in files
    with pytest.raises(node.GpuError, match="outside the constraints"):
        node.converge(_sim(tmp_path), [{"index": 0, "settings": {"power_limit_w": 900}}])


def test_simulated_reboot_resets_volatile_settings_and_applies_pending_ecc(tmp_path: Path) -> None:
    node.converge(_sim(tmp_path), [{"index": 0, "settings": {"power_limit_w": 500, "ecc": False}}])
    assert _sim(tmp_path).read(0)["ecc"] is True  # pending only
    (tmp_path / node.SIM_VOLATILE.lstrip("/")).unlink()  # /run is emptied at boot
    after_boot = _sim(tmp_path).read(0)
    assert after_boot["power_limit_w"] == model_limits(H100)["power"]["default_w"]
    assert after_boot["ecc"] is False


def test_backend_for_takes_the_nodestate_gpu_slice_as_is(tmp_path: Path) -> None:
    # The role persists NodeState.gpu and verification sends it: models come from devices.
    spec = {
        "backend": "simulated",
        "devices": [{"index": 1, "model": H100, "settings": {}}, {"index": 0, "model": H100, "settings": {}}],
        "limits": {H100: model_limits(H100)},
        "profile": "ignored",
    }
    backend = node.backend_for(spec, root=str(tmp_path))
    assert backend.simulated and backend.models == [H100, H100] and backend.count() == 2


def _geometry(gpu: FakeGpu) -> list[str]:
    return sorted(H100_MIG[gi["profile"]][0] for gi in gpu.instances.values() if gi["cis"])


def test_locked_clocks_are_known_from_the_record_so_a_second_run_changes_nothing(
    gpu: FakeGpu, tmp_path: Path, monkeypatch
) -> None:
    boot = tmp_path / "boot_id"
    boot.write_text("boot-1\n")
    monkeypatch.setattr(node, "BOOT_ID", str(boot))
    want = [{"index": 0, "settings": {"locked_clocks": {"min_mhz": 1410, "max_mhz": 1755}}}]
    first = node.converge(node.NvmlBackend(root=str(tmp_path)), want)
    assert [c["key"] for c in first["changes"]] == ["locked_clocks"] and first["changes"][0]["before"] is None
    gpu.calls.clear()
    second = node.converge(node.NvmlBackend(root=str(tmp_path)), want)
    assert second["changes"] == []  # idempotent: known from the record of this boot and driver
    # ...and set again all the same: a GPU reset, which nothing can detect, would have cleared them.
    assert gpu.calls == [("nvmlDeviceSetGpuLockedClocks", 1410, 1755)]
    assert node.converge(node.NvmlBackend(root=str(tmp_path)), want, check_mode=True)["changes"] == []
    boot.write_text("boot-2\n")  # a reboot resets locked clocks: the record no longer counts
    assert [c["key"] for c in node.converge(node.NvmlBackend(root=str(tmp_path)), want)["changes"]] == [
        "locked_clocks"
    ]


def _mig_on(gpu: FakeGpu) -> None:
    gpu.mig = (pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_ENABLE)


def test_mig_geometry_is_created_by_profile_id_then_a_second_run_changes_nothing(gpu: FakeGpu) -> None:
    _mig_on(gpu)
    want = [{"index": 0, "settings": {"mig": {"enabled": True, "profiles": ["3g.40gb", "3g.40gb"]}}}]
    result = node.converge(node.NvmlBackend(), want)
    assert [(c["key"], c["before"], c["after"]) for c in result["changes"]] == [
        ("mig_geometry", [], ["3g.40gb", "3g.40gb"])
    ]
    assert _geometry(gpu) == ["3g.40gb", "3g.40gb"]
    assert ("nvmlDeviceCreateGpuInstance", 102) in gpu.calls  # the profile's ID, not its index (2)
    gpu.calls.clear()
    assert node.converge(node.NvmlBackend(), want)["changes"] == [] and gpu.calls == []
    # A new geometry replaces the old one whole.
    new = [{"index": 0, "settings": {"mig": {"enabled": True, "profiles": ["4g.40gb", "3g.40gb"]}}}]
    node.converge(node.NvmlBackend(), new)
    assert _geometry(gpu) == ["3g.40gb", "4g.40gb"]


def test_mig_geometry_the_driver_refuses_puts_the_previous_one_back(gpu: FakeGpu) -> None:
    _mig_on(gpu)
    node.converge(
        node.NvmlBackend(), [{"index": 0, "settings": {"mig": {"enabled": True, "profiles": ["2g.20gb"]}}}]
    )
    too_big = [{"index": 0, "settings": {"mig": {"enabled": True, "profiles": ["7g.80gb", "1g.10gb"]}}}]
    with pytest.raises(node.GpuError, match="previous geometry") as err:
        node.converge(node.NvmlBackend(), too_big)
    assert err.value.code == "INSUFFICIENT_RESOURCES"
    assert _geometry(gpu) == ["2g.20gb"]  # nothing half-applied


def test_mig_geometry_is_not_touched_while_processes_run(gpu: FakeGpu) -> None:
    _mig_on(gpu)
    gpu.processes = [object()]
    want = [{"index": 0, "settings": {"mig": {"enabled": True, "profiles": ["1g.10gb"]}}}]
    with pytest.raises(node.GpuError, match="processes are running") as err:
        node.converge(node.NvmlBackend(), want)
    assert err.value.code == "IN_USE" and not [c for c in gpu.calls if "Create" in c[0] or "Destroy" in c[0]]


def test_unoffered_mig_profile_is_refused_before_anything_is_set(gpu: FakeGpu) -> None:
    _mig_on(gpu)
    want = [{"index": 0, "settings": {"mig": {"enabled": True, "profiles": ["3g.20gb"]}}}]
    with pytest.raises(node.GpuError, match="not offered"):
        node.converge(node.NvmlBackend(), want)
    assert gpu.calls == []


def test_mig_mode_change_waits_for_a_reset_and_says_so_until_then(gpu: FakeGpu) -> None:
    want = [{"index": 0, "settings": {"mig": {"enabled": True, "profiles": ["3g.40gb"]}}}]
    first = node.converge(node.NvmlBackend(), want)
    assert [(c["key"], c["note"]) for c in first["changes"]] == [("mig", "needs a GPU reset or reboot")]
    assert ("nvmlDeviceSetMigMode", pynvml.NVML_DEVICE_MIG_ENABLE) in gpu.calls
    assert gpu.instances == {}  # no geometry before the mode is in effect
    again = node.converge(node.NvmlBackend(), want)
    assert again["changes"] == [] and again["reboot_required"] and again["pending_reset"] == {0: ["mig"]}


def test_read_only_backends_write_nothing_anywhere(tmp_path: Path, gpu: FakeGpu) -> None:
    spec = {
        "backend": "simulated",
        "devices": [{"index": 0, "model": H100, "settings": DESIRED}],
        "limits": {H100: model_limits(H100)},
    }
    result = node.converge(
        node.backend_for(spec, root=str(tmp_path), readonly=True), spec["devices"], check_mode=True
    )
    assert result["changes"] and list(tmp_path.rglob("*")) == []
    node.converge(node.NvmlBackend(readonly=True, root=str(tmp_path)),
                  [{"index": 0, "settings": {"locked_clocks": {"min_mhz": 1410, "max_mhz": 1755}}}],
                  check_mode=True)  # fmt: skip
    assert list(tmp_path.rglob("*")) == [] and gpu.calls == []


def test_simulated_backend_enforces_the_catalogs_mig_geometry(tmp_path: Path) -> None:
    want = {"mig": {"enabled": True, "profiles": ["7g.80gb", "1g.10gb"]}}
    node.converge(_sim(tmp_path), [{"index": 0, "settings": want}])  # the mode, pending
    (tmp_path / node.SIM_VOLATILE.lstrip("/")).unlink()  # a reboot: the mode takes effect
    with pytest.raises(node.GpuError, match="8 compute slices") as err:
        node.converge(_sim(tmp_path), [{"index": 0, "settings": want}])
    assert err.value.code == "INSUFFICIENT_RESOURCES"
    fits = {"mig": {"enabled": True, "profiles": ["3g.40gb", "2g.20gb", "1g.10gb"]}}
    assert [c["key"] for c in node.converge(_sim(tmp_path), [{"index": 0, "settings": fits}])["changes"]] == [
        "mig_geometry"
    ]
    assert _sim(tmp_path).read(0)["mig"] == {"enabled": True, "profiles": ["1g.10gb", "2g.20gb", "3g.40gb"]}
    assert node.converge(_sim(tmp_path), [{"index": 0, "settings": fits}])["changes"] == []
