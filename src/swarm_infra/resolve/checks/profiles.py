"""GPU and host profiles against the hardware they are assigned to."""

from __future__ import annotations

from collections.abc import Iterator

from ...fleet.diagnostics import Finding, excerpt
from .. import gpu, host
from ..analysis import Analysis
from ..catalog import SYSCTL_KEY, gpu_catalog, sysctl_catalog, sysctl_value_problem


def gpu_profiles(a: Analysis) -> Iterator[Finding]:
    """Each GpuProfile against each catalog model of the nodes it is assigned to (rules in
    :func:`swarm_infra.gpu.problems`); reported once per profile, model and field, naming
    an affected node. ``gpu.no-profile`` (warning): a gpu-worker with GPUs and no profile."""
    catalog = gpu_catalog()
    reported: set[tuple[str, str, tuple[str, ...]]] = set()
    for node in a.fleet.nodes.values():
        choice = a.choices.get(node.name, {}).get("gpu_profile")
        if choice is None:
            if node.gpus and "gpu-worker" in node.roles and a.fleet.complete("Assignment"):
                yield Finding(
                    node.source,
                    ("spec", "hardware", "gpus"),
                    "gpu.no-profile",
                    "no Assignment gives this node a GpuProfile; its GPUs keep their current settings",
                    "warning",
                )
            continue
        profile = a.fleet.gpu_profiles.get(choice.profile)
        if profile is None:
            continue
        for model in dict.fromkeys(node.gpu_models):
            if model not in catalog:
                continue
            for path, rule, message in gpu.problems(profile.spec, model):
                key = (profile.name, model, path)
                if key in reported:
                    continue
                reported.add(key)
                yield Finding(
                    profile.source,
                    ("spec", *path),
                    rule,
                    f"{message} (given to node {node.name!r} by Assignment {choice.assignment!r})",
                )


def host_profiles(a: Analysis) -> Iterator[Finding]:
    """Sysctl names and values, include cycles, swappiness given twice, hugepages vs memory.

    ``sysctl.key-invalid``: not the form of a /proc/sys path; ``sysctl.value-invalid``: wrong
    type or range for a known key; ``sysctl.unknown`` (warning): key not in the catalog;
    ``host.swappiness-conflict``; ``host.include-cycle``; ``host.hugepages-exceed-memory``:
    reserved hugepages at least the node's memory.
    """
    known = sysctl_catalog()
    for hp in a.fleet.host_profiles.values():
        for key, value in hp.sysctls.items():
            path = ("spec", "sysctls", key)
            if not SYSCTL_KEY.fullmatch(key):
                yield Finding(
                    hp.source,
                    path,
                    "sysctl.key-invalid",
                    f"{excerpt(key)} is not a sysctl name: expected dot-separated /proc/sys "
                    "path components under abi, crypto, debug, dev, fs, kernel, net, "
                    "sunrpc, user or vm",
                )
                continue
            if key not in known:
                yield Finding(
                    hp.source,
                    path,
                    "sysctl.unknown",
                    f"{key!r} is not in the sysctl catalog; its value's type is not checked",
                    "warning",
                )
                continue
            problem = sysctl_value_problem(key, value)
            if problem:
                yield Finding(hp.source, path, "sysctl.value-invalid", problem)
        if hp.swappiness is not None and "vm.swappiness" in hp.sysctls:
            yield Finding(
                hp.source,
                ("spec", "swappiness"),
                "host.swappiness-conflict",
                "swappiness is also set as sysctl vm.swappiness; keep one",
            )
        try:
            host.flatten(hp.name, a.fleet.host_profiles)
        except host.IncludeCycle as cycle:
            yield Finding(
                hp.source, ("spec", "include"), "host.include-cycle", "include cycle: " + str(cycle)
            )
    reported: set[str] = set()
    for node in a.fleet.nodes.values():
        choice = a.choices.get(node.name, {}).get("host_profile")
        if choice is None or choice.profile not in a.fleet.host_profiles or choice.profile in reported:
            continue
        try:
            flat = host.flatten(choice.profile, a.fleet.host_profiles)
        except host.IncludeCycle:
            continue
        pages = flat["hugepages"]
        if pages and pages["count"] * pages["size_kib"] >= node.memory_gib * 1024 * 1024:
            reported.add(choice.profile)
            hp = a.fleet.host_profiles[choice.profile]
            yield Finding(
                hp.source,
                ("spec", "hugepages"),
                "host.hugepages-exceed-memory",
                f"{pages['count']} x {pages['size_kib']} KiB hugepages reserve at least "
                f"node {node.name!r}'s {node.memory_gib} GiB of memory",
            )


CHECKS = (gpu_profiles, host_profiles)
