"""HostProfile flattening: ``include`` chains merged like tuned profiles, later wins."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import IncludeCycle as IncludeCycle
from ..fleet.model import HostProfile


def flatten(name: str, profiles: Mapping[str, HostProfile], _stack: tuple[str, ...] = ()) -> dict[str, Any]:
    """The effective settings of HostProfile ``name``.

    Included profiles are applied first, in order, then the profile itself; a later value
    replaces an earlier one, key by key for sysctls (tuned's include semantics).
    ``swappiness`` becomes the ``vm.swappiness`` sysctl. Unknown includes are skipped
    (the validator reports them). Returns ``{"sysctls": {...}, "hugepages": {...}|None,
    "transparent_hugepages": str|None, "cpu_governor": str|None}``.
    Raises :class:`IncludeCycle`.
    """
    if name in _stack:
        raise IncludeCycle([*_stack[_stack.index(name) :], name])
    profile = profiles[name]
    merged: dict[str, Any] = {
        "sysctls": {},
        "hugepages": None,
        "transparent_hugepages": None,
        "cpu_governor": None,
    }
    for inc in profile.include:
        if inc in profiles:
            base = flatten(inc, profiles, (*_stack, name))
            merged["sysctls"].update(base["sysctls"])
            for key in ("hugepages", "transparent_hugepages", "cpu_governor"):
                if base[key] is not None:
                    merged[key] = base[key]
    merged["sysctls"].update(profile.sysctls)
    if profile.swappiness is not None:
        merged["sysctls"]["vm.swappiness"] = profile.swappiness
    if profile.hugepages is not None:
        merged["hugepages"] = {
            "size_kib": profile.hugepages["size_kib"],
            "count": profile.hugepages["count"],
        }
    for key in ("transparent_hugepages", "cpu_governor"):
        if getattr(profile, key) is not None:
            merged[key] = getattr(profile, key)
    return merged


def sysctl_text(value: Any) -> str:
    """A sysctl value as sysctl.d(5) writes it: multi-value keys (``net.ipv4.tcp_rmem``,
    declared as a list) space-separated, everything else as its text. The one text form:
    NodeState carries it, roles write it, verification splits it into fields."""
    if isinstance(value, list | tuple):
        return " ".join(str(v) for v in value)
    return str(value)


def sysfs_items(flat: Mapping[str, Any]) -> list[dict[str, str]]:
    """The sysfs files behind a flattened profile's hugepages, THP and CPU governor:
    ``[{"name", "path", "glob", "value"}]`` (only those it sets). ``path`` is the file to
    read or check, ``glob`` what a tmpfiles.d(5) ``w`` line writes (every CPU for the
    governor), ``value`` the text written. Paths: the kernel's admin-guide/mm (hugetlbpage,
    transhuge) and cpu-freq documentation.
    """
    items = []
    if flat["hugepages"]:
        size = flat["hugepages"]["size_kib"]
        path = f"/sys/kernel/mm/hugepages/hugepages-{size}kB/nr_hugepages"
        count = str(flat["hugepages"]["count"])
        items.append({"name": "hugepages", "path": path, "glob": path, "value": count})
    if flat["transparent_hugepages"]:
        path = "/sys/kernel/mm/transparent_hugepage/enabled"
        items.append({"name": "transparent_hugepages", "path": path, "glob": path,
                      "value": flat["transparent_hugepages"]})  # fmt: skip
    if flat["cpu_governor"]:
        items.append({
            "name": "cpu_governor",
            "path": "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor",
            "glob": "/sys/devices/system/cpu/cpu*/cpufreq/scaling_governor",
            "value": flat["cpu_governor"],
        })  # fmt: skip
    return items
