"""The one registry of the external commands the controller side runs, and the package of each.

Every program that ``swarm`` (lab, converge, verify, metrics, mesh, review) or the test
suite starts on the controller's own host is listed here with the Debian 12 package that
ships it, or with ``venv`` for a program the project installs into its virtualenv (``pip``,
or promtool unpacked from Debian's ``prometheus`` by ``scripts/install.sh``), or with
``operator`` for kubectl. ``scripts/install.sh``
installs exactly :func:`debian_packages` (it runs this file as a script, before the
project is installed, so this module imports the standard library only and nothing of
the package); ``tests/unit/test_host_tools.py`` finds every command the code and the tests
start (the argv of ``subprocess`` and of the project's runners, ``shutil.which``) and fails
on one that is not here, and, on Debian, checks with ``dpkg -S`` that each command is owned by
the package named here. Commands that run *on a node* (``nodeside/``, ``agent/``, the
engines' remote operations, the lab's calls through ``nsenter`` into a node) come from
the node's packages (``resolve/packages.py``), not from here.

A tool that a change adds joins this table in the same commit.

Run as a script: ``python3 src/swarm_infra/hosttools.py packages`` prints the Debian
packages, one a line (what install.sh installs); ``... check AREA...`` prints one line per
missing command of those areas and exits 1 when any is missing.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

VENV = "venv"
"""The "package" of a program the project installs into its own virtualenv."""

OPERATOR = "operator"
"""The "package" of a program the operator brings, at the version their cluster needs
(kubectl: within one minor version of the API server, Kubernetes' version skew policy;
Debian 12's kubernetes-client is 1.20): install.sh does not install it; the command that
needs it asks for it (area ``kubernetes``)."""

AREAS = (
    "lab", "lab-access", "converge", "verify", "metrics", "mesh", "mesh-key", "review", "kubernetes", "tests",
)  # fmt: skip
"""Who runs a tool on the controller: the ``swarm`` commands that start host programs
(``lab``: lab up and down; ``lab-access``: lab status, ssh and stop on a running lab;
``mesh-key``: the controller's key alone; ``kubernetes``: a converge whose Rollout drains
through kubectl), and ``tests``, the test suite's own host tools (the probes run on
loopback, promtool, the stand-in apt repository), which ``swarm`` never asks for.
install.sh installs every area's packages."""

INSTALL_HINT = "bash scripts/install.sh"


@dataclass(frozen=True)
class HostTool:
    """One external command: the Debian package that ships it (``package``; :data:`VENV`
    for the project's virtualenv, :data:`OPERATOR` for the operator's own) and the areas
    (:data:`AREAS`) whose commands run it. ``userspace_wireguard``: needed only where the
    kernel has no WireGuard (the code tries the kernel's first), so not asked for there;
    install.sh installs it everywhere."""

    package: str
    areas: tuple[str, ...]
    userspace_wireguard: bool = False


# command -> package, areas. The package is the one `dpkg -S` names for the program's path
# on Debian 12 (usr-merged: /sbin/ip is recorded, /usr/sbin/ip is found on PATH).
HOST_TOOLS: dict[str, HostTool] = {
    # iproute2: namespaces, veth, bridges, routes (lab); the controller's wg0 link (mesh);
    # tc shapes the lab's WAN.
    "ip": HostTool("iproute2", ("lab", "lab-access", "mesh")),
    "tc": HostTool("iproute2", ("lab",)),
    # The lab sites' NAT and the host's forwarding rules.
    "iptables": HostTool("iptables", ("lab",)),
    # util-linux: entering a node's namespaces, private mount namespaces, detached processes.
    "nsenter": HostTool("util-linux", ("lab", "lab-access")),
    "unshare": HostTool("util-linux", ("lab",)),
    "setsid": HostTool("util-linux", ("lab", "tests")),  # .ci/run: the background jobs' own session
    # Debian 12 ships losetup, mount and umount in `mount` (split from util-linux): the lab's
    # NVMe stand-ins are loop devices, the node's root an overlay mount (node-nspawn.sh).
    "losetup": HostTool("mount", ("lab",)),
    "mount": HostTool("mount", ("lab",)),
    "umount": HostTool("mount", ("lab",)),
    "sysctl": HostTool("procps", ("lab",)),
    "ping": HostTool("iputils-ping", ("lab",)),
    # The nodes: systemd-nspawn containers of a debootstrap image.
    "systemd-nspawn": HostTool("systemd-container", ("lab",)),
    "debootstrap": HostTool("debootstrap", ("lab",)),
    "systemctl": HostTool("systemd", ("lab",)),
    # The sites' package cache (lab/pkgcache.py), run with the lab's own configuration.
    "apt-cacher-ng": HostTool("apt-cacher-ng", ("lab",)),
    # The controller's WireGuard interface (cli/mesh.py, the lab host's peer): wg(8), and
    # wireguard-go where the kernel has no WireGuard module (this lab host's kernel has none).
    "wg": HostTool("wireguard-tools", ("lab", "mesh", "mesh-key")),
    "wireguard-go": HostTool("wireguard-go", ("lab", "mesh"), userspace_wireguard=True),
    # nftables: the filter of the controller's mesh interface (engines/controller.py, lab down).
    "nft": HostTool("nftables", ("lab", "mesh")),
    # OpenSSH's client: the engines, testinfra and the metrics probes reach nodes over SSH;
    # ssh-keygen makes the lab's keys and checks commit signatures (review, pull).
    "ssh": HostTool("openssh-client", ("lab", "lab-access", "converge", "verify", "metrics")),
    "ssh-keygen": HostTool("openssh-client", ("lab", "review")),
    # Git: the review's trees, the lab's fleet repository served over smart HTTP.
    "git": HostTool("git", ("lab", "review")),
    "git-http-backend": HostTool("git", ("lab",)),
    # The measurement probes run on the nodes (the node's packages); their unit tests run
    # them on this host too, on loopback.
    "iperf3": HostTool("iperf3", ("tests",)),
    "fio": HostTool("fio", ("tests",)),
    # dpkg-scanpackages builds the stand-in NVIDIA apt repository of the drivers test.
    "dpkg-scanpackages": HostTool("dpkg-dev", ("tests",)),
    # review.yml's targets script (actions/github-script's JavaScript) run by its test with
    # node, the runtime github-script runs it with.
    "node": HostTool("nodejs", ("tests",)),
    # The rollout's Kubernetes drain and uncordon (resolve/rollout.py), run on the controller
    # where a Rollout names a kubeconfig context.
    "kubectl": HostTool(OPERATOR, ("kubernetes",)),
    # The project's own virtualenv (pip; promtool unpacked from Debian's prometheus).
    # The test suite's own: the drivers test's stand-in repository and apt, the scratch
    # layer's filesystem tools, systemd's unit checker, the module tests' shell tools.
    "apt-get": HostTool("apt", ("tests",)),
    "apt-config": HostTool("apt", ("tests",)),
    "dpkg-deb": HostTool("dpkg", ("tests",)),
    "dpkg-query": HostTool("dpkg", ("tests",)),
    "mkfs.ext4": HostTool("e2fsprogs", ("tests",)),
    "blkid": HostTool("util-linux", ("tests",)),
    "systemd-analyze": HostTool("systemd", ("tests",)),
    "awk": HostTool("mawk", ("tests",)),
    "sh": HostTool("dash", ("lab", "tests")),
    "bash": HostTool("bash", ("tests",)),
    "grep": HostTool("grep", ("tests",)),
    "sleep": HostTool("coreutils", ("tests",)),
    "uname": HostTool("coreutils", ("tests",)),
    "renice": HostTool("bsdutils", ("tests",)),  # .ci/run: the background lint and unit tests
    "ansible-playbook": HostTool(VENV, ("converge", "lab")),
    "ansible-inventory": HostTool(VENV, ("tests",)),
    "pyinfra": HostTool(VENV, ("converge",)),
    "promtool": HostTool(VENV, ("tests",)),
}


def debian_packages() -> list[str]:
    """The Debian packages that provide :data:`HOST_TOOLS`'s commands, sorted, once each
    (what ``scripts/install.sh`` installs)."""
    return sorted({t.package for t in HOST_TOOLS.values() if t.package not in (VENV, OPERATOR)})


def _venv_bin() -> Path:
    return Path(sys.executable).parent


def locate(command: str) -> str | None:
    """The path ``command`` runs from: PATH, else (for git's helpers) git's exec path, else
    (for :data:`VENV` tools) beside this interpreter; None when it is not installed."""
    found = shutil.which(command)
    if found:
        return found
    for d in (Path("/usr/lib/git-core"), _venv_bin()):
        if (d / command).is_file():
            return str(d / command)
    return None


def kernel_wireguard(sys_module: Path = Path("/sys/module/wireguard"), modules: Path | None = None) -> bool:
    """Whether this kernel has WireGuard: loaded or built in (``/sys/module/wireguard``), or
    a module modprobe can load (named in ``/lib/modules/$(uname -r)/modules.dep``, the file
    ``ip link add ... type wireguard`` has modprobe read)."""
    if sys_module.exists():
        return True
    if modules is None:
        import os

        modules = Path("/lib/modules") / os.uname().release
    try:
        dep = (modules / "modules.dep").read_text()
    except OSError:
        return False
    return any(
        line.split(":", 1)[0].rsplit("/", 1)[-1].startswith("wireguard.ko") for line in dep.splitlines()
    )


def missing(areas: Iterable[str] = AREAS) -> list[tuple[str, str]]:
    """``[(command, package)]`` of the registry's commands for ``areas`` that are not
    installed, sorted by command; a userspace WireGuard tool only where the kernel has
    none. Raises ValueError on an unknown area."""
    wanted = set(areas)
    unknown = wanted - set(AREAS)
    if unknown:
        raise ValueError(f"unknown host-tool areas: {sorted(unknown)}; known: {list(AREAS)}")
    kernel = None
    out = []
    for cmd, tool in sorted(HOST_TOOLS.items()):
        if not wanted & set(tool.areas) or locate(cmd) is not None:
            continue
        if tool.userspace_wireguard:
            kernel = kernel_wireguard() if kernel is None else kernel
            if kernel:
                continue
        out.append((cmd, tool.package))
    return out


class HostToolMissing(Exception):
    """A command the asked work runs is not installed; the message is one line per command:
    the command, its package and the install step."""


def missing_message(absent: list[tuple[str, str]]) -> str:
    """One line per ``(command, package)``: what is missing, which package has it, and the
    install step that installs it."""

    def line(cmd: str, pkg: str) -> str:
        if pkg == OPERATOR:
            return f"'{cmd}' is not installed: install the version your cluster needs"
        source = "the project's virtualenv" if pkg == VENV else f"Debian package {pkg}"
        return f"'{cmd}' is not installed ({source}): run {INSTALL_HINT}"

    return "\n".join(line(cmd, pkg) for cmd, pkg in absent)


def require(*areas: str) -> None:
    """Raise :class:`HostToolMissing` naming every missing command of ``areas`` (all areas
    when none is named); checks PATH only, starts nothing."""
    absent = missing(areas or AREAS)
    if absent:
        raise HostToolMissing(missing_message(absent))


def _main(argv: list[str]) -> int:
    if argv[:1] == ["packages"]:
        print("\n".join(debian_packages()))
        return 0
    if argv[:1] == ["check"]:
        try:
            require(*argv[1:])
        except (HostToolMissing, ValueError) as exc:
            print(exc, file=sys.stderr)
            return 1
        return 0
    print("usage: hosttools.py packages | check [AREA...]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
