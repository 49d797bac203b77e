"""Reference catalogs shipped with the library: GPU models and sysctls.

Both are YAML files in ``swarm_infra/data/`` whose header comments give the source of
every number. Accessors return plain dicts so the resolved desired state can carry them
to the node (the simulated NVML backend enforces the catalog's limits there).
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import Any, cast

import yaml

from ..nodeside import gpu as nodeside_gpu

# A sysctl name in dot form is a path under /proc/sys: a known top-level directory, then
# components that are valid file names (no '/', not '.' or '..'). Match with fullmatch:
# '$' would also match before a trailing newline, and "vm.swappiness\n" would pass.
SYSCTL_KEY = re.compile(
    r"(abi|crypto|debug|dev|fs|kernel|net|sunrpc|user|vm)(\.[A-Za-z0-9_][A-Za-z0-9_\-]*)+"
)


def _data(name: str) -> Any:
    return yaml.safe_load((resources.files("swarm_infra") / "data" / name).read_text("utf-8"))


@cache
def gpu_catalog() -> dict[str, dict[str, Any]]:
    """GPU models by catalog name (e.g. ``H100-SXM5-80GB``).

    Each entry: ``flavor`` (Kueue flavor name), ``product_name`` (as NVML reports it),
    ``memory_mib``, ``power`` {``default_w``, ``min_w``, ``max_w``} in W, ``clocks``
    {``graphics_min_mhz``, ``graphics_max_mhz``, ``memory_mhz`` list} in MHz,
    ``application_clocks`` (bool), ``ecc`` (bool), ``mig`` ({``compute_slices``,
    ``profiles``} or None) and ``source`` (datasheet URL).
    """
    return cast("dict[str, dict[str, Any]]", _data("gpu_catalog.yaml"))


@cache
def sysctl_catalog() -> dict[str, dict[str, Any]]:
    """Known sysctls by dotted name: ``type`` (int | ints | str), ``count``, ``min``, ``max``
    (every integer entry has both: the kernel's own bounds, or its C type's), ``enum``."""
    return cast("dict[str, dict[str, Any]]", _data("sysctls.yaml"))


def sysctl_value_problem(key: str, value: Any) -> str | None:
    """Why ``value`` is wrong for the known sysctl ``key``, or None if it fits (or ``key`` is unknown)."""
    spec = sysctl_catalog().get(key)
    if spec is None:
        return None
    kind = spec["type"]
    if kind == "str":
        if not isinstance(value, str):
            return f"expected a string for {key}, got {value!r}"
        if "enum" in spec and value not in spec["enum"]:
            return f"{value!r} is not one of: " + ", ".join(spec["enum"])
        return None
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            return f"expected an integer for {key}, got {value!r}"
        values = [value]
    else:
        count = spec["count"]
        if not (isinstance(value, list) and len(value) == count):
            return f"expected a list of {count} integers for {key}, got {value!r}"
        values = value
    lo, hi = spec.get("min"), spec.get("max")
    for v in values:
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            bounds = f"{'-inf' if lo is None else lo}..{'inf' if hi is None else hi}"
            return f"{v} is outside {key}'s range {bounds}"
    return None


def mig_fit_problem(model: str, profiles: list[str]) -> str | None:
    """Why the MIG ``profiles`` cannot all be created on one ``model`` GPU, or None.

    The model must support MIG; then the node-side rule applies over the catalog's
    placement table (``mig.placements``, from the MIG User Guide's "Supported MIG
    Profiles"): :func:`swarm_infra.nodeside.gpu.mig_fit_problem`, the function the node
    applies to NVML's own table and the simulated backend to the catalog's.
    """
    entry = gpu_catalog()[model]
    mig = entry["mig"]
    if not mig:
        return f"{model} does not support MIG"
    table = nodeside_gpu.catalog_mig_table(mig["placements"])
    problem = nodeside_gpu.mig_fit_problem(profiles, table, mig["compute_slices"])
    return problem and problem.replace("this GPU", model).replace("the GPU", model).replace("a GPU", model)
