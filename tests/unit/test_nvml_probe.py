"""scripts/gpu-probe.py: records what NVML reports and what the GPU layer would change,
calling no NVML function that changes a GPU; run against the documentation-derived fake
NVML (tests/unit/nvml_doc.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from swarm_infra.resolve.gpu import model_limits
from tests.unit.nvml_doc import MODELS, FakeNvml

ROOT = Path(__file__).resolve().parents[2]
H100, H200 = "H100-SXM5-80GB", "H200-SXM-141GB"


def _probe_script() -> Any:
    spec = importlib.util.spec_from_file_location("gpu_probe", ROOT / "scripts" / "gpu-probe.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _spec(models: list[str], settings: dict[str, Any]) -> dict[str, Any]:
    return {
        "backend": "nvml",
        "devices": [{"index": i, "model": m, "settings": settings} for i, m in enumerate(models)],
        "limits": {m: model_limits(m) for m in set(models)},
    }


def test_the_probe_records_nvmls_facts_and_the_diff_and_sets_nothing() -> None:
    fake = FakeNvml([H100, H200])
    fake.gpus[1].mig = (fake.NVML_DEVICE_MIG_ENABLE, fake.NVML_DEVICE_MIG_ENABLE)
    # Settings that differ: the check-mode diff must list them, and nothing may be set.
    settings = {"power_limit_w": 650, "persistence_mode": True, "ecc": False}
    out = _probe_script().probe(fake, _spec([H100, H200], settings))
    assert fake.calls == [] and out["refused"] == []
    assert out["versions"] == {"driver": fake.driver, "nvml": fake.nvmlSystemGetNVMLVersion(), "cuda": "12.8"}
    h100, h200 = out["gpus"]
    assert (h100["name"], h100["memory_mib"]) == (MODELS[H100]["name"], MODELS[H100]["memory_mib"])
    lo, hi, default = MODELS[H100]["power_mw"]
    assert (
        h100["power_limits_w"] == [lo // 1000, hi // 1000]
        and h100["power_default_limit_w"] == default // 1000
    )
    assert list(h100["supported_clocks_mhz"]) == [str(m) for m in MODELS[H100]["clocks"]]
    assert h100["mig_mode"] == {"current": False, "pending": False} and h100["mig_geometry"] is None
    # Placements are listed with MIG off too (nvml.h: "regardless of whether MIG is enabled").
    assert h100["mig_profiles"]["3g.40gb"] == {"slices": 3, "instances": 2, "size": 4, "starts": [0, 4]}
    assert h200["mig_profiles"]["3g.71gb"]["instances"] == 2 and h200["mig_geometry"] == []
    assert h100["ecc"] == {"current": True, "pending": True}
    assert {(c["gpu"], c["key"]) for c in out["diff"]["changes"]} == {
        (g, k) for g in (0, 1) for k in ("power_limit_w", "persistence_mode", "ecc")
    }


def test_the_probe_records_an_identity_refusal_and_deprecated_clocks() -> None:
    fake = FakeNvml(["L40S"], cuda=13000)
    out = _probe_script().probe(fake, _spec([H100], {"power_limit_w": 300}))
    assert out["diff"]["error"] == "IDENTITY" and fake.calls == []
    assert out["gpus"][0]["application_clocks_mhz"]["memory"]["error"] == "DEPRECATED"
    assert out["versions"]["cuda"] == "13.0"


def test_the_wrapper_refuses_every_nvml_function_that_is_not_a_getter() -> None:
    script = _probe_script()
    fake = FakeNvml([H100])
    guard = script.ReadOnlyNvml(fake)
    for name in (
        "nvmlDeviceSetPowerManagementLimit",
        "nvmlDeviceResetGpuLockedClocks",
        "nvmlDeviceSetMigMode",
        "nvmlDeviceCreateGpuInstance",
        "nvmlGpuInstanceDestroy",
        "nvmlDeviceClearEccErrorCounts",
    ):
        with pytest.raises(script.ProbeRefused):
            getattr(guard, name)(None, 0)
    assert fake.calls == [] and len(guard.refused) == 6
    assert guard.nvmlDeviceGetCount() == 1  # getters pass


def test_the_probe_cli_writes_the_json_record(tmp_path: Path, monkeypatch) -> None:
    fake = FakeNvml([H100])
    monkeypatch.setitem(__import__("sys").modules, "pynvml", fake)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(_spec([H100], {"power_limit_w": 650})))
    out = tmp_path / "probe.json"
    assert _probe_script().main(["gpu-probe.py", "--out", str(out), "--spec", str(spec)]) == 0
    record = json.loads(out.read_text())
    assert record["gpus"][0]["uuid"] == fake.gpus[0].uuid and record["diff"]["changes"][0]["after"] == 650
    assert fake.calls == []
