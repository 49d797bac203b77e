"""The node-side GPU code: NVML path with the real pynvml attributes patched, simulated path
on files. A misspelt NVML function name fails here (monkeypatch refuses unknown attributes)."""

from __future__ import annotations

from pathlib import Path

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
    }
    for name, fn in patches.items():
        monkeypatch.setattr(pynvml, name, fn)
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
