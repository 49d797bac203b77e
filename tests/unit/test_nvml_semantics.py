"""The GPU layer against NVIDIA's documented NVML and MIG behaviour (issue 23, items 5, 7
and 8, identity before settings), with the documentation-derived fake pynvml
(tests/unit/nvml_doc.py: per-model MIG tables from the MIG User Guide and mig-parted's
config-default.yaml, return codes from nvml.h 13.3)."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from swarm_infra.nodeside import gpu as node
from swarm_infra.resolve.catalog import mig_fit_problem
from swarm_infra.resolve.gpu import model_limits
from tests.unit.nvml_doc import MODELS, FakeNvml

H100, H200, A100_40 = "H100-SXM5-80GB", "H200-SXM-141GB", "A100-SXM4-40GB"


@pytest.fixture
def install(monkeypatch):
    """Put a fake NVML with GPUs of these catalog models in place of pynvml."""

    def make(*models: str, **kw: Any) -> FakeNvml:
        fake = FakeNvml(list(models), **kw)
        monkeypatch.setitem(sys.modules, "pynvml", fake)
        return fake

    return make


def _spec(models: list[str], settings: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A NodeState.gpu slice as the resolver makes it (limits from the catalog)."""
    return {
        "backend": "nvml",
        "devices": [{"index": i, "model": m, "settings": settings} for i, m in enumerate(models)],
        "limits": {m: model_limits(m) for m in set(models)},
        **extra,
    }


def _mig(*profiles: str) -> dict[str, Any]:
    return {"mig": {"enabled": True, "profiles": list(profiles)}}


def _mig_on(fake: FakeNvml) -> None:
    for g in fake.gpus:
        g.mig = (fake.NVML_DEVICE_MIG_ENABLE, fake.NVML_DEVICE_MIG_ENABLE)


# --------------------------------------------------------------- MIG fit (item 7)


def test_two_media_extension_instances_are_refused_by_the_validator_and_on_the_node(install) -> None:
    # MIG User Guide, "Supported MIG Profiles": 1g.10gb+me, "Number of Instances
    # Available: 1 (A single 1g profile can include media extensions)". Summing slices
    # and memory (2 of 7, 20 of 80 GB) accepted two.
    assert "H100-SXM5-80GB offers at most 1" in mig_fit_problem(H100, ["1g.10gb+me", "1g.10gb+me"])
    fake = install(H100)
    _mig_on(fake)
    with pytest.raises(node.GpuError, match=r"at most 1") as err:
        node.converge_spec(_spec([H100], _mig("1g.10gb+me", "1g.10gb+me")))
    assert err.value.code == "INVALID_ARGUMENT" and fake.setter_calls() == []


def test_h200_two_3g_71gb_fit_by_placement_though_their_names_add_up_to_142gb(install) -> None:
    # mig-parted config-default.yaml: all-3g.71gb is "3g.71gb": 2 on H200 141GB.
    assert mig_fit_problem(H200, ["3g.71gb", "3g.71gb"]) is None
    fake = install(H200)
    _mig_on(fake)
    result = node.converge_spec(_spec([H200], _mig("3g.71gb", "3g.71gb")))
    assert [c["key"] for c in result["changes"]] == ["mig_geometry"]
    assert fake.geometry(0) == ["3g.71gb", "3g.71gb"]


def test_layouts_whose_memory_slices_overlap_are_refused_though_compute_slices_fit() -> None:
    # 3g takes 4 of 8 memory slices at start 0 or 4 (the guide's placement diagram): two
    # of them leave no room for a 1g, although 3 + 3 + 1 = 7 compute slices.
    assert "overlap" in mig_fit_problem(H100, ["3g.40gb", "3g.40gb", "1g.10gb"])
    # ...and the A100-40GB 1g.10gb (2 of 8 memory slices) fits 4 times, not 7.
    assert "at most 4" in mig_fit_problem(A100_40, ["1g.10gb"] * 5)


def test_creation_tries_orderings_until_one_fits(install) -> None:
    # mig-parted's "all-balanced" H100 layout. Largest first, with the driver placing each
    # instance at its lowest free start, leaves the second 1g.10gb without a place
    # (3g at 0-3, 2g at 4-5, 1g at 6, then none); mig-parted tries other orderings.
    layout = ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]
    assert mig_fit_problem(H100, layout) is None
    fake = install(H100)
    _mig_on(fake)
    result = node.converge_spec(_spec([H100], _mig(*layout)))
    assert fake.geometry(0) == sorted(layout) and result["changes"][0]["after"] == sorted(layout)
    assert [c for c in fake.calls if c[0] == "nvmlGpuInstanceDestroy"]  # a failed ordering was cleared


def test_declared_holders_are_stopped_around_the_change_and_started_again(install) -> None:
    fake = install(H100)
    _mig_on(fake)
    dcgm = "nvidia-dcgm.service"
    node.converge_spec(_spec([H100], _mig("2g.20gb")))
    fake.holders, fake.active_units = {dcgm}, {dcgm}  # DCGM runs and holds the instances
    fake.calls.clear()
    backend = node.NvmlBackend(mig_holders=[dcgm], systemctl=fake.systemctl)
    node.converge(backend, _spec([H100], _mig("3g.40gb", "3g.40gb"))["devices"])
    assert fake.geometry(0) == ["3g.40gb", "3g.40gb"] and fake.active_units == {dcgm}
    order = [c[:2] for c in fake.calls if c[0] in ("systemctl", "nvmlGpuInstanceDestroy")]
    assert order.index(("systemctl", "stop")) < order.index(("nvmlGpuInstanceDestroy", "gi1"))
    assert order[-1] == ("systemctl", "start")


def test_a_holder_not_declared_leaves_the_previous_geometry_in_place(install) -> None:
    # nvml.h nvmlComputeInstanceDestroy / nvmlGpuInstanceDestroy: IN_USE while processes
    # are active on the instance (DCGM here, not a compute process NVML lists).
    fake = install(H100)
    _mig_on(fake)
    node.converge_spec(_spec([H100], _mig("2g.20gb")))
    fake.holders = {"dcgm-exporter.service"}
    fake.active_units = {"dcgm-exporter.service"}
    with pytest.raises(node.GpuError, match=r"previous geometry \['2g.20gb'\] is in place") as err:
        node.converge_spec(_spec([H100], _mig("3g.40gb")))
    assert err.value.code == "IN_USE" and fake.geometry(0) == ["2g.20gb"]


def test_mig_mode_activated_at_once_claims_no_reset_and_makes_the_geometry(install) -> None:
    # nvml.h nvmlDeviceSetMigMode: activationStatus NVML_SUCCESS, the mode is in effect.
    fake = install(H100)
    result = node.converge_spec(_spec([H100], _mig("3g.40gb")))
    assert [(c["key"], c["note"]) for c in result["changes"]] == [("mig", None), ("mig_geometry", None)]
    assert not result["reboot_required"] and fake.geometry(0) == ["3g.40gb"]


def test_the_simulated_backend_applies_the_placement_rule_too(tmp_path) -> None:
    sim = node.SimulatedBackend([H200], {H200: model_limits(H200)}, root=str(tmp_path))
    sim.set(0, "mig", {"enabled": True, "profiles": []})
    (tmp_path / node.SIM_VOLATILE.lstrip("/")).unlink()  # a reboot: the mode takes effect
    sim = node.SimulatedBackend([H200], {H200: model_limits(H200)}, root=str(tmp_path))
    sim.set(0, "mig_geometry", ["3g.71gb", "3g.71gb"])
    with pytest.raises(node.GpuError, match="at most 1"):
        sim.set(0, "mig_geometry", ["1g.18gb+me", "1g.18gb+me"])


# ------------------------------------------------------------- NVML semantics (items 5, 8)


def test_deprecated_application_clocks_read_as_absent_and_the_rest_applies(install) -> None:
    fake = install(H100, cuda=13000)  # a CUDA 13 driver: DEPRECATED(13.0) in nvml.h 13.3
    result = node.converge_spec(_spec([H100], {"power_limit_w": 650, "persistence_mode": True}))
    assert {c["key"] for c in result["changes"]} == {"power_limit_w", "persistence_mode"}
    assert fake.gpus[0].power_mw == 650_000
    assert node.NvmlBackend(readonly=True).read(0)["application_clocks"] is None


def test_a_driver_changed_without_reboot_is_pending_reboot_not_a_failure(install, monkeypatch) -> None:
    fake = install(H100)
    fake.rm_mismatch = True  # NVML_ERROR_LIB_RM_VERSION_MISMATCH (nvml.h: 18)
    spec = _spec([H100], {"power_limit_w": 650})
    out = node.run_spec(spec, apply=True)
    assert "error" not in out and out["reboot_required"] and out["changes"] == []
    assert "not rebooted" in out["pending_reboot"] and fake.setter_calls() == []
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(spec)))
    assert node.main(["swarm_gpu_node.py", "apply", "-"]) == 0


def test_a_lost_gpu_is_reported_and_the_others_are_set(install, monkeypatch, capsys) -> None:
    fake = install(H100, H100)
    fake.gpus[1].lost = True  # NVML_ERROR_GPU_IS_LOST: "fallen off the bus"
    spec = _spec([H100, H100], {"power_limit_w": 650})
    result = node.converge_spec(spec)
    assert list(result["lost"]) == [1] and "GPU_IS_LOST" in result["lost"][1]
    assert [c["gpu"] for c in result["changes"]] == [0] and fake.gpus[0].power_mw == 650_000
    fake.gpus[0].power_mw = 700_000
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(spec)))
    assert node.main(["swarm_gpu_node.py", "apply", "-"]) == 1  # the boot unit shows it...
    assert fake.gpus[0].power_mw == 650_000 and "gpu 1 lost" in capsys.readouterr().err  # ...after the rest


# ------------------------------------------------------------ identity before settings


def test_a_gpu_other_than_declared_refuses_the_node_before_any_setting(install) -> None:
    fake = install("L40S")
    with pytest.raises(node.GpuError, match="'NVIDIA L40S', not the declared H100-SXM5-80GB") as err:
        node.converge_spec(_spec([H100], {"power_limit_w": 300}))
    assert err.value.code == "IDENTITY" and fake.setter_calls() == []
    out = node.run_spec(_spec([H100], {"power_limit_w": 300}), apply=True)
    assert out["code"] == "IDENTITY"


def test_a_gpu_count_other_than_declared_refuses_the_node(install) -> None:
    fake = install(H100, H100, H100)
    with pytest.raises(node.GpuError, match="2 GPUs declared, 3 found") as err:
        node.converge_spec(_spec([H100, H100], {"power_limit_w": 650}))
    assert err.value.code == "IDENTITY" and fake.setter_calls() == []


def test_a_gpu_with_another_memory_size_under_the_same_name_is_refused(install, monkeypatch) -> None:
    # An H100 NVL-like board: same NVML name, 94 GB (MIG User Guide "Supported GPUs").
    monkeypatch.setitem(MODELS, "H100-94GB", {**MODELS[H100], "memory_mib": 95830})
    fake = install("H100-94GB")
    with pytest.raises(node.GpuError, match="95830 MiB, not the 81559 MiB") as err:
        node.converge_spec(_spec([H100], {"power_limit_w": 650}))
    assert err.value.code == "IDENTITY" and fake.setter_calls() == []


def test_the_resolved_limits_carry_what_identifies_a_gpu() -> None:
    lim = model_limits(H200)
    assert (lim["product_name"], lim["memory_mib"]) == (MODELS[H200]["name"], MODELS[H200]["memory_mib"])
    table = {
        k: {"size": v["size"], "starts": v["starts"], "instances": v["instances"]}
        for k, v in MODELS[H200]["mig"].items()
    }
    assert lim["mig_placements"] == table


# ------------------------------------------------------------------ the Ansible module


def _run_module(monkeypatch, capsys, args: dict[str, Any]) -> dict[str, Any]:
    """Run plugins/modules/swarm_gpu.py in this process (the fake NVML in place) with
    ``args``; its JSON result."""
    import importlib.util

    from ansible.module_utils import basic

    monkeypatch.setitem(sys.modules, "ansible.module_utils.swarm_gpu_node", node)
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", json.dumps({"ANSIBLE_MODULE_ARGS": args}).encode())
    if hasattr(basic, "_ANSIBLE_PROFILE"):
        monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy")
    path = Path(__file__).resolve().parents[2] / "plugins" / "modules" / "swarm_gpu.py"
    spec = importlib.util.spec_from_file_location("swarm_gpu_module", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(SystemExit):
        module.main()
    return json.loads(capsys.readouterr().out)


def test_the_module_reports_pending_reboot_and_lost_gpus(install, monkeypatch, capsys) -> None:
    fake = install(H100, H100)
    fake.rm_mismatch = True
    pending = _run_module(monkeypatch, capsys, _spec([H100, H100], {"power_limit_w": 650}))
    assert (
        not pending.get("failed")
        and pending["reboot_required"]
        and "not rebooted" in pending["pending_reboot"]
    )
    fake.rm_mismatch, fake.gpus[1].lost = False, True
    lost = _run_module(monkeypatch, capsys, _spec([H100, H100], {"power_limit_w": 650}))
    assert not lost.get("failed") and list(lost["lost_gpus"]) == ["1"] and lost["changed"]
    assert fake.gpus[0].power_mw == 650_000


def test_both_engines_word_a_pending_reboot_the_same(install) -> None:
    from swarm_infra.resolve.notes import gpu_reset_required

    fake = install(H100)
    fake.rm_mismatch = True
    found = node.run_spec(_spec([H100], {"power_limit_w": 650}), apply=False)  # pyinfra's diff
    assert gpu_reset_required(found).startswith("pending reboot, GPU settings not applied")
