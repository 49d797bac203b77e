"""GPU profile → per-GPU settings, and the checks of a profile against a catalog model.

One decision, used twice: :func:`settings_for` gives the values the node must have;
:func:`problems` says why a profile cannot be applied to a model (the validator reports
them; the resolver never sees an invalid profile).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Literal, cast

from ..nodeside import gpu as nodeside_gpu
from .catalog import gpu_catalog, mig_fit_problem
from .drivers import DEBIAN_BRANCH
from .types import ClockLimits, GpuLimits, GpuSettings, GpuSharingState, MigPlacement, PowerLimits


def power_limit_w(spec: Mapping[str, Any], model: str) -> int | None:
    """The power management limit in W the profile asks for on ``model``, or None.

    ``power_limit_percent`` is a percentage of the model's default limit, rounded down.
    """
    if "power_limit_w" in spec:
        return int(spec["power_limit_w"])
    if "power_limit_percent" in spec:
        return int(gpu_catalog()[model]["power"]["default_w"]) * int(spec["power_limit_percent"]) // 100
    return None


def problems(spec: Mapping[str, Any], model: str) -> Iterator[tuple[tuple[str, ...], str, str]]:
    """Why ``spec`` (a GpuProfile spec) does not fit ``model``: ``(path in spec, rule, message)``.

    Rules: ``gpu.power-limit-range`` (outside the model's min..max W),
    ``gpu.power-limit-conflict`` (both W and percent given),
    ``gpu.clocks-unsupported`` (a memory clock not offered, a graphics clock not in the
    supported list, application clocks on a model without them, locked clocks outside the
    range or min above max), ``gpu.ecc-unsupported``, ``gpu.mig-unsupported``,
    ``gpu.driver-source`` (a branch the declared source does not publish: Debian 12 has one).

    Power limits and clocks are judged by the node-side code's own rule
    (:func:`swarm_infra.nodeside.gpu.setting_problem`) over :func:`model_limits`, the limits
    the node receives in NodeState: what validates is what the node accepts.
    """
    limits = model_limits(model)
    constraints = nodeside_gpu.catalog_constraints(limits)
    driver = spec.get("driver") or {}
    if driver.get("source") == "debian" and driver["branch"] != DEBIAN_BRANCH:
        yield (
            ("driver", "branch"),
            "gpu.driver-source",
            f"Debian 12 (bookworm non-free) publishes the {DEBIAN_BRANCH} driver branch only, not "
            f"{driver['branch']}: declare branch {DEBIAN_BRANCH}, or source nvidia-cuda",
        )
    if "power_limit_w" in spec and "power_limit_percent" in spec:
        yield (
            ("power_limit_percent",),
            "gpu.power-limit-conflict",
            "power_limit_w and power_limit_percent are exclusive; give one",
        )
    watts = power_limit_w(spec, model)
    if watts is not None:
        _, problem = nodeside_gpu.setting_problem("power_limit_w", watts, constraints)
        if problem:
            key = "power_limit_w" if "power_limit_w" in spec else "power_limit_percent"
            yield ((key,), "gpu.power-limit-range", f"{model}: {problem}")
    app = spec.get("application_clocks")
    if app:
        if not limits["application_clocks"]:
            yield (
                ("application_clocks",),
                "gpu.clocks-unsupported",
                f"{model} does not support application clocks; use locked_clocks",
            )
        else:
            field, problem = nodeside_gpu.setting_problem("application_clocks", dict(app), constraints)
            if problem:
                assert field is not None  # a clock problem names its field
                yield (("application_clocks", field), "gpu.clocks-unsupported", f"{model}: {problem}")
    locked = spec.get("locked_clocks")
    if locked:
        field, problem = nodeside_gpu.setting_problem("locked_clocks", dict(locked), constraints)
        if problem:
            assert field is not None  # a clock problem names its field
            yield (("locked_clocks", field), "gpu.clocks-unsupported", f"{model}: {problem}")
    if spec.get("ecc") and not limits["ecc"]:
        yield (("ecc",), "gpu.ecc-unsupported", f"{model} has no ECC memory")
    mig = spec.get("mig")
    if mig and mig.get("enabled"):
        problem = mig_fit_problem(model, list(mig["profiles"]))
        if problem:
            yield (("mig",), "gpu.mig-unsupported", problem)


def settings_for(spec: Mapping[str, Any], model: str) -> GpuSettings:
    """Desired settings of one ``model`` GPU under profile ``spec``; only declared keys.

    Keys: ``persistence_mode`` (bool), ``power_limit_w`` (int, W), ``application_clocks``
    {``memory_mhz``, ``graphics_mhz``}, ``locked_clocks`` {``min_mhz``, ``max_mhz``},
    ``compute_mode`` (DEFAULT | EXCLUSIVE_PROCESS | PROHIBITED), ``ecc`` (bool),
    ``mig`` {``enabled``, ``profiles``}.
    """
    out: dict[str, Any] = {}
    for key in ("persistence_mode", "compute_mode", "ecc"):
        if key in spec:
            out[key] = spec[key]
    watts = power_limit_w(spec, model)
    if watts is not None:
        out["power_limit_w"] = watts
    for key in ("application_clocks", "locked_clocks"):
        if key in spec:
            out[key] = dict(spec[key])
    if "mig" in spec:
        out["mig"] = {"enabled": spec["mig"]["enabled"], "profiles": list(spec["mig"]["profiles"])}
    return cast(GpuSettings, out)  # the keys above, from the validated profile


def model_limits(model: str) -> GpuLimits:
    """The catalog limits the node-side code (and the simulated backend) enforces for
    ``model`` (NodeState.gpu.limits[model]); the validator judges profiles by the same.
    ``product_name`` and ``memory_mib`` are also what the node checks NVML's name and
    total memory against before any setting (nodeside ``identity_problems``);
    ``mig_placements`` is the model's MIG placement table (catalog ``mig.placements``)."""
    entry = gpu_catalog()[model]
    return {
        "product_name": entry["product_name"],
        "memory_mib": entry["memory_mib"],
        "power": cast(PowerLimits, dict(entry["power"])),
        "clocks": cast(ClockLimits, dict(entry["clocks"])),
        "application_clocks": entry["application_clocks"],
        "ecc": entry["ecc"],
        "mig_profiles": list(entry["mig"]["profiles"]) if entry["mig"] else [],
        "mig_compute_slices": entry["mig"]["compute_slices"] if entry["mig"] else 0,
        "mig_placements": {k: cast(MigPlacement, dict(v)) for k, v in entry["mig"]["placements"].items()}
        if entry["mig"]
        else {},
    }


def sharing_state(profile: str | None, spec: Mapping[str, Any]) -> GpuSharingState:
    """How the NVIDIA device plugin advertises GPUs under GpuProfile ``profile`` (``spec``).

    Returns a :class:`~swarm_infra.resolve.types.GpuSharingState`:

    - MIG: a layout of one repeated profile uses the device plugin's ``single`` strategy
      (each MIG instance is one ``nvidia.com/gpu``); a mixed layout uses ``mixed``
      (``nvidia.com/mig-<profile>`` resources, no ``nvidia.com/gpu``: ``units_per_gpu``
      None); MIG disabled or not declared: ``none``. The MIG layout itself is the node
      layer's (issue #23).
    - Time-slicing (``sharing.time_slicing_replicas``) multiplies what is advertised.
    - ``device_plugin_config`` is the profile's name when the profile shares GPUs or uses
      MIG, else ``default`` (no sharing, strategy none). A node without a profile: default.
    """
    mig = spec.get("mig")
    replicas = spec.get("sharing", {}).get("time_slicing_replicas")
    strategy: Literal["none", "single", "mixed"]
    units: int | None
    strategy, units = "none", 1
    if mig is not None and mig["enabled"]:
        layout = list(mig["profiles"])
        if len(set(layout)) <= 1:
            strategy, units = "single", len(layout)
        else:
            strategy, units = "mixed", None
    if replicas and units is not None:
        units *= replicas
    custom = profile is not None and (strategy != "none" or replicas is not None)
    return {
        "device_plugin_config": profile if custom and profile is not None else "default",
        "mig_strategy": strategy,
        "time_slicing_replicas": replicas,
        "units_per_gpu": units,
    }
