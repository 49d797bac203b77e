"""Sysctls that open a node to its tenants or take it down (issue #22, host safety).

A HostProfile is applied as root on nodes that run other people's code. Rules:

``host.sysctl-unsafe``: a value that opens the node (a root code path or a privilege a
tenant could use), unless the profile allows that key with a reason in
``allow_unsafe_sysctls``:

- ``kernel.modprobe``, any value: the kernel runs that program as root to load modules;
- ``kernel.core_pattern`` starting with ``|``: the kernel pipes every core dump, as root, to
  that program (core(5), "Piping core dumps to a program");
- ``fs.suid_dumpable`` other than 0: set-user-ID programs dump core (proc_sys_fs(5));
- ``kernel.yama.ptrace_scope`` 0: any process may ptrace any other of its user (Yama docs);
- ``kernel.unprivileged_bpf_disabled`` 0: unprivileged users load BPF programs (the
  kernel's sysctl/kernel.rst; Debian ships 2);
- ``kernel.kptr_restrict`` 0, ``kernel.dmesg_restrict`` 0, ``kernel.perf_event_paranoid``
  below 2, ``kernel.randomize_va_space`` below 2, ``fs.protected_symlinks``,
  ``fs.protected_hardlinks``, ``fs.protected_regular``, ``fs.protected_fifos`` 0: the
  kernel's own hardening turned off (sysctl/kernel.rst, sysctl/fs.rst).

``host.sysctl-takes-node-down``: a value that leaves a node of the fleet unable to run its
work, judged against each node the profile is assigned to (same escape as above):

- ``vm.min_free_kbytes`` at or above a quarter of the node's memory (the kernel reclaims
  to keep that much free: "setting this too high will OOM your machine instantly",
  sysctl/vm.rst);
- ``vm.nr_hugepages`` times 2 MiB (x86-64's default huge page) at or above its memory;
- ``kernel.pid_max`` below 32768 (PID_MAX_DEFAULT: GPU runtimes, Ray's workers and
  containers need thousands of PIDs);
- ``vm.overcommit_memory`` 2: strict accounting refuses the large virtual reservations CUDA
  and Ray make (sysctl/vm.rst, overcommit-accounting.rst).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ...fleet.diagnostics import Finding
from ...fleet.model import HostProfile, Node
from .. import host
from ..analysis import Analysis


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _is(want: int) -> Callable[[Any], bool]:
    return lambda v: _int(v) == want


def _below(floor: int) -> Callable[[Any], bool]:
    def below(value: Any) -> bool:
        number = _int(value)
        return number is not None and number < floor

    return below


# key -> (is the value unsafe?, why)
UNSAFE: dict[str, tuple[Callable[[Any], bool], str]] = {
    "kernel.modprobe": (lambda v: True, "the kernel runs this program as root to load modules"),
    "kernel.core_pattern": (
        lambda v: str(v).startswith("|"),
        "a pipe makes the kernel run that program as root for every core dump",
    ),
    "fs.suid_dumpable": (lambda v: _int(v) != 0, "set-user-ID programs would dump core"),
    "kernel.yama.ptrace_scope": (_is(0), "any process could trace any other of its user"),
    "kernel.unprivileged_bpf_disabled": (_is(0), "unprivileged users could load BPF programs"),
    "kernel.kptr_restrict": (_is(0), "kernel addresses would be shown to every user"),
    "kernel.dmesg_restrict": (_is(0), "every user could read the kernel log"),
    "kernel.perf_event_paranoid": (_below(2), "unprivileged users could profile the kernel"),
    "kernel.randomize_va_space": (_below(2), "address space randomisation would be weakened"),
    "fs.protected_symlinks": (_is(0), "the kernel's symlink protection would be off"),
    "fs.protected_hardlinks": (_is(0), "the kernel's hardlink protection would be off"),
    "fs.protected_regular": (_is(0), "the kernel's protection of files in sticky directories would be off"),
    "fs.protected_fifos": (_is(0), "the kernel's protection of FIFOs in sticky directories would be off"),
}
PID_MAX_FLOOR = 32768  # PID_MAX_DEFAULT (include/linux/threads.h)
HUGEPAGE_KIB = 2048  # x86-64's default huge page size


def _unsafe(hp: HostProfile) -> Iterator[Finding]:
    for key, value in hp.sysctls.items():
        rule = UNSAFE.get(key)
        if rule and rule[0](value) and key not in hp.allow_unsafe:
            yield Finding(
                hp.source,
                ("spec", "sysctls", key),
                "host.sysctl-unsafe",
                f"{key} = {value}: {rule[1]}; allow it in allow_unsafe_sysctls with a reason, or drop it",
            )


def _takes_down(sysctls: dict[str, Any], node: Node) -> Iterator[tuple[str, str]]:
    memory_kib = node.memory_gib * 1024 * 1024
    free = _int(sysctls.get("vm.min_free_kbytes"))
    if free is not None and free >= memory_kib // 4:
        yield (
            "vm.min_free_kbytes",
            f"{free} KiB is at least a quarter of node {node.name}'s {node.memory_gib} GiB",
        )
    pages = _int(sysctls.get("vm.nr_hugepages"))
    if pages is not None and pages * HUGEPAGE_KIB >= memory_kib:
        yield (
            "vm.nr_hugepages",
            (f"{pages} x 2 MiB huge pages reserve all of node {node.name}'s {node.memory_gib} GiB"),
        )
    pid_max = _int(sysctls.get("kernel.pid_max"))
    if pid_max is not None and pid_max < PID_MAX_FLOOR:
        yield "kernel.pid_max", f"{pid_max} is below {PID_MAX_FLOOR}: node {node.name} would run out of PIDs"
    if _int(sysctls.get("vm.overcommit_memory")) == 2:
        yield (
            "vm.overcommit_memory",
            "2 (strict accounting) refuses the virtual reservations CUDA and Ray make",
        )


def host_safety(a: Analysis) -> Iterator[Finding]:
    """``host.sysctl-unsafe`` per profile; ``host.sysctl-takes-node-down`` per profile and
    key, judged on each node the profile is assigned to (reported once, naming a node)."""
    for hp in a.fleet.host_profiles.values():
        yield from _unsafe(hp)
    reported: set[tuple[str, str]] = set()
    for node in a.fleet.nodes.values():
        choice = a.choices.get(node.name, {}).get("host_profile")
        if choice is None or choice.profile not in a.fleet.host_profiles:
            continue
        hp = a.fleet.host_profiles[choice.profile]
        try:
            flat = host.flatten(choice.profile, a.fleet.host_profiles)
        except host.IncludeCycle:
            continue
        for key, why in _takes_down(flat["sysctls"], node):
            if (hp.name, key) in reported or key in hp.allow_unsafe:
                continue
            reported.add((hp.name, key))
            path = ("spec", "sysctls", key) if key in hp.sysctls else ("spec",)
            message = f"{key}: {why}; allow it in allow_unsafe_sysctls with a reason, or change it"
            yield Finding(hp.source, path, "host.sysctl-takes-node-down", message)


CHECKS = (host_safety,)
