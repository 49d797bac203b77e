"""The node-side GPU code: the NVML path against the documentation-derived fake pynvml
(tests/unit/nvml_doc.py, which uses nvidia-ml-py's own constants and structures, so a
misspelt NVML name fails), the simulated path on files."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarm_infra.nodeside import gpu as node
from swarm_infra.resolve.gpu import model_limits
from tests.unit.nvml_doc import MODELS, FakeNvml

H100 = "H100-SXM5-80GB"


@pytest.fixture
def gpu(monkeypatch) -> FakeNvml:
    """One H100 80GB HBM3 behind the fake NVML, installed as ``pynvml``."""
    fake = FakeNvml([H100])
    monkeypatch.setitem(__import__("sys").modules, "pynvml", fake)
    return fake


DESIRED = {
    "persistence_mode": True,
    "power_limit_w": 650,
    "application_clocks": {"memory_mhz": 2619, "graphics_mhz": 1980},
    "compute_mode": "DEFAULT",
    "ecc": True,
}


def test_nvml_applies_only_the_differences_with_power_in_milliwatts(gpu: FakeNvml) -> None:
    import pynvml

    gpu.gpus[0].app_clocks[pynvml.NVML_CLOCK_GRAPHICS] = 1755  # not the desired 1980
    result = node.converge(node.NvmlBackend(), [{"index": 0, "settings": DESIRED}])
    assert {c["key"] for c in result["changes"]} == {
        "persistence_mode",
        "power_limit_w",
        "application_clocks",
    }
    assert ("nvmlDeviceSetPowerManagementLimit", "gpu0", 650_000) in gpu.calls
    assert ("nvmlDeviceSetApplicationsClocks", "gpu0", 2619, 1980) in gpu.calls
    assert not [c for c in gpu.calls if c[0] in ("nvmlDeviceSetComputeMode", "nvmlDeviceSetEccMode")]
    assert not result["reboot_required"] and not result["simulated"]
    gpu.calls.clear()
    again = node.converge(node.NvmlBackend(), [{"index": 0, "settings": DESIRED}])
    assert again["changes"] == [] and gpu.calls == []


def test_nvml_check_mode_reports_and_applies_nothing(gpu: FakeNvml) -> None:
    import pynvml

    gpu.gpus[0].app_clocks[pynvml.NVML_CLOCK_GRAPHICS] = 1755
    result = node.converge(node.NvmlBackend(), [{"index": 0, "settings": DESIRED}], check_mode=True)
    assert len(result["changes"]) == 3 and gpu.calls == [] and gpu.gpus[0].power_mw == 700_000


def test_power_limit_outside_nvml_constraints_is_refused_before_anything_is_set(gpu: FakeNvml) -> None:
    bad = {**DESIRED, "power_limit_w": 150}
    with pytest.raises(node.GpuError, match="outside the constraints 200-700 W") as err:
        node.converge(node.NvmlBackend(), [{"index": 0, "settings": bad}])
    assert err.value.code == "INVALID_ARGUMENT" and gpu.calls == []


def test_unsupported_application_clocks_are_refused(gpu: FakeNvml) -> None:
    other = next(m for m in (2619, 1593) if m not in MODELS[H100]["clocks"])  # H100 PCIe's
    bad = {**DESIRED, "application_clocks": {"memory_mhz": other, "graphics_mhz": 1980}}
    with pytest.raises(node.GpuError, match="not in the supported list"):
        node.converge(node.NvmlBackend(), [{"index": 0, "settings": bad}])


def test_ecc_change_is_pending_and_not_redone(gpu: FakeNvml) -> None:
    off = {"ecc": False}
    first = node.converge(node.NvmlBackend(), [{"index": 0, "settings": off}])
    assert first["reboot_required"] and first["changes"][0]["note"] == "pending until reboot"
    assert node.converge(node.NvmlBackend(), [{"index": 0, "settings": off}])["changes"] == []


def test_nvml_errors_map_to_clear_codes(gpu: FakeNvml, monkeypatch) -> None:
    import pynvml

    def denied(h, mw):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)

    monkeypatch.setattr(gpu, "nvmlDeviceSetPowerManagementLimit", denied)
    with pytest.raises(node.GpuError) as err:
        node.converge(node.NvmlBackend(), [{"index": 0, "settings": {"power_limit_w": 600}}])
    assert err.value.code == "NO_PERMISSION"

    def missing():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    monkeypatch.setattr(gpu, "nvmlInit", missing)
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


def test_locked_clocks_are_known_from_the_record_so_a_second_run_changes_nothing(
    gpu: FakeNvml, tmp_path: Path, monkeypatch
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
    assert gpu.calls == [("nvmlDeviceSetGpuLockedClocks", "gpu0", 1410, 1755)]
    assert node.converge(node.NvmlBackend(root=str(tmp_path)), want, check_mode=True)["changes"] == []
    boot.write_text("boot-2\n")  # a reboot resets locked clocks: the record no longer counts
    assert [c["key"] for c in node.converge(node.NvmlBackend(root=str(tmp_path)), want)["changes"]] == [
        "locked_clocks"
    ]


def _mig_on(gpu: FakeNvml) -> None:
    import pynvml

    gpu.gpus[0].mig = (pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_ENABLE)


def test_mig_geometry_is_created_by_profile_id_then_a_second_run_changes_nothing(gpu: FakeNvml) -> None:
    _mig_on(gpu)
    want = [{"index": 0, "settings": {"mig": {"enabled": True, "profiles": ["3g.40gb", "3g.40gb"]}}}]
    result = node.converge(node.NvmlBackend(), want)
    assert [(c["key"], c["before"], c["after"]) for c in result["changes"]] == [
        ("mig_geometry", [], ["3g.40gb", "3g.40gb"])
    ]
    assert gpu.geometry(0) == ["3g.40gb", "3g.40gb"]
    # The profile's ID (9 for 3g, MIG User Guide `nvidia-smi mig -lgip`), not its index (2).
    assert ("nvmlDeviceCreateGpuInstance", "gpu0", MODELS[H100]["mig"]["3g.40gb"]["id"]) in gpu.calls
    gpu.calls.clear()
    assert node.converge(node.NvmlBackend(), want)["changes"] == [] and gpu.calls == []
    # A new geometry replaces the old one whole.
    new = [{"index": 0, "settings": {"mig": {"enabled": True, "profiles": ["4g.40gb", "3g.40gb"]}}}]
    node.converge(node.NvmlBackend(), new)
    assert gpu.geometry(0) == ["3g.40gb", "4g.40gb"]


def test_mig_geometry_the_driver_refuses_puts_the_previous_one_back(gpu: FakeNvml, monkeypatch) -> None:
    import pynvml

    _mig_on(gpu)
    node.converge(
        node.NvmlBackend(), [{"index": 0, "settings": {"mig": {"enabled": True, "profiles": ["2g.20gb"]}}}]
    )
    create = gpu.nvmlDeviceCreateGpuInstance
    four_g = MODELS[H100]["mig"]["4g.40gb"]["id"]

    def refuse_4g(h, pid):  # the driver refuses this profile now, whatever the order
        if pid == four_g:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        return create(h, pid)

    monkeypatch.setattr(gpu, "nvmlDeviceCreateGpuInstance", refuse_4g)
    want = [{"index": 0, "settings": {"mig": {"enabled": True, "profiles": ["4g.40gb", "3g.40gb"]}}}]
    with pytest.raises(node.GpuError, match="previous geometry") as err:
        node.converge(node.NvmlBackend(), want)
    assert err.value.code == "INSUFFICIENT_RESOURCES"
    assert gpu.geometry(0) == ["2g.20gb"]  # nothing half-applied


def test_mig_geometry_outside_nvmls_placement_table_is_refused_before_anything_is_set(gpu: FakeNvml) -> None:
    _mig_on(gpu)
    too_big = [{"index": 0, "settings": {"mig": {"enabled": True, "profiles": ["7g.80gb", "1g.10gb"]}}}]
    with pytest.raises(node.GpuError, match="8 compute slices") as err:
        node.converge(node.NvmlBackend(), too_big)
    assert err.value.code == "INVALID_ARGUMENT" and gpu.calls == []


def test_mig_geometry_is_not_touched_while_processes_run(gpu: FakeNvml) -> None:
    _mig_on(gpu)
    gpu.gpus[0].processes = [object()]
    want = [{"index": 0, "settings": {"mig": {"enabled": True, "profiles": ["1g.10gb"]}}}]
    with pytest.raises(node.GpuError, match="processes are running") as err:
        node.converge(node.NvmlBackend(), want)
    assert err.value.code == "IN_USE" and not [c for c in gpu.calls if "Create" in c[0] or "Destroy" in c[0]]


def test_unoffered_mig_profile_is_refused_before_anything_is_set(gpu: FakeNvml) -> None:
    _mig_on(gpu)
    want = [{"index": 0, "settings": {"mig": {"enabled": True, "profiles": ["3g.20gb"]}}}]
    with pytest.raises(node.GpuError, match="not offered"):
        node.converge(node.NvmlBackend(), want)
    assert gpu.calls == []


def test_mig_mode_change_waits_for_a_reset_when_nvml_says_so_and_says_so_until_then(gpu: FakeNvml) -> None:
    import pynvml

    # nvml.h nvmlDeviceSetMigMode: activationStatus RESET_REQUIRED where the reset is not
    # possible (A100 in use, pass-through): the mode stays pending.
    gpu.gpus[0].activation = pynvml.NVML_ERROR_RESET_REQUIRED
    want = [{"index": 0, "settings": {"mig": {"enabled": True, "profiles": ["3g.40gb"]}}}]
    first = node.converge(node.NvmlBackend(), want)
    assert [c["key"] for c in first["changes"]] == ["mig"] and first["reboot_required"]
    assert first["changes"][0]["note"].startswith("needs a GPU reset or reboot")
    assert "RESET_REQUIRED" in first["changes"][0]["note"]
    assert ("nvmlDeviceSetMigMode", "gpu0", pynvml.NVML_DEVICE_MIG_ENABLE) in gpu.calls
    assert gpu.gpus[0].instances == {}  # no geometry before the mode is in effect
    again = node.converge(node.NvmlBackend(), want)
    assert again["changes"] == [] and again["reboot_required"] and again["pending_reset"] == {0: ["mig"]}


def test_read_only_backends_write_nothing_anywhere(tmp_path: Path, gpu: FakeNvml) -> None:
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
