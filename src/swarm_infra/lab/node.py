"""One lab node: a systemd-nspawn container booting the cached image, and its identity.

A node is ``systemd-nspawn --boot`` on a root filesystem that is an overlay of the shared
base image (read-only lower) and the node's own upper directory, in the network namespace
the lab made for it (``--network-namespace-path``). nspawn gives it its own mount, PID,
UTS, IPC and cgroup namespaces, systemd as PID 1, a read-only ``/proc/sys`` except the
node's own ``net.*``, read-only ``/sys``, a minimal ``/dev``, a capability bounding set
without CAP_SYS_MODULE, CAP_SYS_RAWIO, CAP_SYS_TIME and the like, and a seccomp filter
(module loading, kexec, swap, raw I/O). The lab adds CAP_NET_ADMIN (the node configures its
own network: WireGuard) and ``/dev/net/tun`` (wireguard-go). The host's PID 1 is not
systemd here, so nspawn neither registers with machined nor makes a scope
(``--register=no --keep-unit``); the lab gives each node its own cgroup instead. Nodes share
the host's kernel: see the README's lab section for GPUs, WireGuard and sysctls.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import socket
import stat
import subprocess
import time
from importlib import resources
from pathlib import Path

from ..nodeside.atomic import write_atomic
from .network import wait_exit
from .plan import LabNode
from .state import state_dir
from .system import LabError, run

BOOT_TIMEOUT_S = 90
NSPAWN = "systemd-nspawn"
# systemd-nspawn keeps per-machine state here on the host (mount propagation into the
# machine). On a tmpfs /run it cleans up after itself; where /run is on disk it refuses to,
# so the lab removes what it leaves.
NSPAWN_RUN_DIR = Path("/run/systemd/nspawn")


def cgroup2_root() -> Path:
    """Where the host's cgroup v2 hierarchy is mounted (``/sys/fs/cgroup`` or its ``unified``)."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.split(" ", 1)[0] == "cgroup2":
            return Path(left.split()[4])
    raise LabError("no cgroup v2 hierarchy is mounted on this host; systemd in the nodes needs one")


def cgroup_roots() -> list[Path]:
    """Every hierarchy the lab's cgroups appear in: cgroup v2, and on a hybrid host the v1
    ``name=systemd`` hierarchy, where nspawn mirrors the node's cgroup path."""
    roots = [cgroup2_root()]
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields = right.split()
        if fields and fields[0] == "cgroup" and "name=systemd" in fields[-1].split(","):
            roots.append(Path(left.split()[4]))
    return roots


class NodeDirs:
    """Host-side paths of a node: ``<state>/nodes/<name>/{upper,work,root,console.log,disks}``."""

    def __init__(self, state_dir: Path, name: str) -> None:
        self.base = state_dir / "nodes" / name
        self.upper, self.work, self.root = self.base / "upper", self.base / "work", self.base / "root"
        self.log = self.base / "console.log"
        self.notify = self.base / "notify.sock"
        self.disks = self.base / "disks"
        self.cgroup = cgroup2_root() / "swarm-lab" / "nodes" / name

    def disk_image(self, device: str) -> Path:
        """The sparse file behind the node's declared block device ``device`` (/dev/nvme0n1)."""
        return self.disks / f"{Path(device).name}.img"


def attach_disks(node: LabNode, dirs: NodeDirs) -> dict[str, str]:
    """Give each declared NVMe device a loop device over a sparse file of its size (kept
    across restarts, so a node's scratch filesystem survives them); returns {declared
    path: /dev/loopN}. The lab proves the storage role's array, filesystem and mount
    steps on them, not NVMe itself (no NVMe namespaces, TRIM through the loop driver)."""
    out = {}
    for device, size_gib in node.nvme:
        image = dirs.disk_image(device)
        if not image.exists():
            dirs.disks.mkdir(parents=True, exist_ok=True)
            with open(image, "wb") as fh:
                fh.truncate(size_gib << 30)
        attached = run(
            ["losetup", "--noheadings", "--output", "NAME", "--associated", str(image)]
        ).stdout.split()
        out[device] = (
            attached[0] if attached else run(["losetup", "--find", "--show", str(image)]).stdout.strip()
        )
    return out


def detach_disks(dirs: NodeDirs) -> None:
    """Detach every loop device over the node's disk images."""
    for image in sorted(dirs.disks.glob("*.img")) if dirs.disks.is_dir() else []:
        for loop in run(
            ["losetup", "--noheadings", "--output", "NAME", "--associated", str(image)]
        ).stdout.split():
            run(["losetup", "--detach", loop], check=False)


def _mkdirs_like(lower: Path, upper: Path, rel: str) -> Path:
    """Create ``upper/rel`` with each directory's mode and owner copied from ``lower``: in an
    overlay the upper directory's attributes win, so /root must stay 0700 and so on."""
    current_l, current_u = lower, upper
    for part in Path(rel).parts:
        current_l, current_u = current_l / part, current_u / part
        if not current_u.exists():
            current_u.mkdir()
            if current_l.is_dir():
                st = current_l.stat()
                os.chmod(current_u, stat.S_IMODE(st.st_mode))
                os.chown(current_u, st.st_uid, st.st_gid)
    return current_u


def _write(lower: Path, upper: Path, rel: str, text: str, mode: int = 0o644) -> None:
    parent = _mkdirs_like(lower, upper, str(Path(rel).parent))
    write_atomic(parent / Path(rel).name, text, mode)


PIP_CA = "etc/ssl/certs/swarm-lab-index-ca.pem"


def prepare(
    node: LabNode, dirs: NodeDirs, image: Path, hosts: str, authorized_key: str, index_ca: str | None = None
) -> str:
    """Give a fresh node its identity in its upper layer; returns its SSH host public key line.

    Writes the hostname, ``/etc/hosts`` (every lab node by name), the host's resolver, root's
    ``authorized_keys`` (0600 in a 0700 ``.ssh``) and a new ed25519 SSH host key made on the
    host with ssh-keygen (private part 0600, written only into the node's own layer). With
    ``index_ca`` (the lab package index's CA, PEM), pip's trust in it: the certificate and
    ``/etc/pip.conf`` naming it (``cert``), as a provider's machine trusts its own CA.
    """
    shutil.rmtree(dirs.base, ignore_errors=True)
    for d in (dirs.upper, dirs.work, dirs.root):
        d.mkdir(parents=True)
    os.chmod(dirs.base, 0o700)
    dirs.log.touch(mode=0o600)
    _write(image, dirs.upper, "etc/hostname", f"{node.name}\n")
    _write(image, dirs.upper, "etc/hosts", hosts)
    resolv = Path("/etc/resolv.conf").read_text() if Path("/etc/resolv.conf").exists() else ""
    _write(image, dirs.upper, "etc/resolv.conf", resolv)
    _write(image, dirs.upper, "root/.ssh/authorized_keys", authorized_key.strip() + "\n", 0o600)
    if index_ca is not None:
        _write(image, dirs.upper, PIP_CA, index_ca)
        _write(image, dirs.upper, "etc/pip.conf", f"[global]\ncert = /{PIP_CA}\n")
    os.chmod(dirs.upper / "root/.ssh", 0o700)
    key = _mkdirs_like(image, dirs.upper, "etc/ssh") / "ssh_host_ed25519_key"
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{node.name}", "-f", str(key)])
    return key.with_suffix(".pub").read_text().strip()


def nspawn_args(node: LabNode, dirs: NodeDirs, disks: dict[str, str]) -> list[str]:
    """systemd-nspawn's arguments for ``node`` (after the launcher has mounted its root);
    ``disks``: {path in the node: host block device} to bind in."""
    return [
        "--quiet",
        "--register=no",  # the host's PID 1 is not systemd: no machined
        "--keep-unit",  # and no scope: the node stays in the cgroup the launcher joined
        "--notify-ready=yes",  # READY=1 on $NOTIFY_SOCKET once the node's systemd has booted
        f"--directory={dirs.root}",
        "--boot",
        f"--machine={node.name}",  # also the hostname
        f"--network-namespace-path=/run/netns/{node.netns}",
        "--capability=CAP_NET_ADMIN",  # in nspawn's set only with a private network of its own
        "--bind=/dev/net/tun",  # wireguard-go: the kernel has no WireGuard module
        "--resolv-conf=off",  # prepare() wrote the host's resolver into the node
        "--timezone=off",
        "--link-journal=no",
        "--console=pipe",  # the node's console (systemd's boot messages) to the log file
        *(f"--bind={host}:{path}" for path, host in sorted(disks.items())),
        # Also under its kernel name: without udev, LABEL= and UUID= lookups (mount, fstab)
        # scan /proc/partitions, which names the loop device.
        *(f"--bind={host}" for host in sorted(set(disks.values()))),
    ]


def start(node: LabNode, dirs: NodeDirs, lower: str | Path) -> tuple[int, socket.socket]:
    """Boot the node; returns (systemd-nspawn's host PID, the notify socket). ``lower``: the
    overlay's read-only lower directories, top first, ``:``-separated (the image last).

    The launcher runs in its own session, so the node outlives ``swarm lab up``; nspawn
    reports boot completion on the returned datagram socket (``$NOTIFY_SOCKET``), which
    :func:`wait_booted` reads. ``SYSTEMD_NSPAWN_API_VFS_WRITABLE=network`` keeps ``/proc/sys``
    read-only but makes the node's own ``/proc/sys/net`` writable (systemd's ENVIRONMENT.md).
    """
    dirs.notify.unlink(missing_ok=True)
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(dirs.notify))
    script = resources.files("swarm_infra.lab").joinpath("data/node-nspawn.sh")
    env = {
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        "NOTIFY_SOCKET": str(dirs.notify),
        "SYSTEMD_NSPAWN_API_VFS_WRITABLE": "network",
    }
    argv = [str(dirs.cgroup), str(lower), str(dirs.upper), str(dirs.work), str(dirs.root), "--"]
    with resources.as_file(script) as path, open(dirs.log, "a") as log:
        proc = subprocess.Popen(
            ["/bin/sh", str(path), *argv, *nspawn_args(node, dirs, attach_disks(node, dirs))],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
            start_new_session=True,
        )
    return proc.pid, notify


def wait_booted(node: LabNode, pid: int, notify: socket.socket, timeout: float = BOOT_TIMEOUT_S) -> str:
    """Block until the node's systemd reports READY=1 (boot finished); returns its state.

    Raises :class:`LabError` on timeout, if the node dies while booting, or if it ends in a
    state other than running/degraded (``systemctl is-system-running``).
    """
    deadline = time.monotonic() + timeout
    with notify:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise LabError(f"node {node.name} did not finish booting in {timeout:.0f} s ({_tail(node)})")
            notify.settimeout(min(left, 1.0))
            try:
                message = notify.recv(4096).decode(errors="replace")
            except TimeoutError:
                if not is_running(node, pid):
                    raise LabError(f"node {node.name} exited while booting ({_tail(node)})") from None
                continue
            if "READY=1" in message.split("\n"):
                break
    state = system_state(pid)
    if state not in ("running", "degraded"):
        raise LabError(f"node {node.name} booted into state {state!r}")
    return state


def _tail(node: LabNode) -> str:
    return f"see {NodeDirs(state_dir(), node.name).log}"


def leader(pid: int) -> int | None:
    """The host PID of the node's systemd: the child of its systemd-nspawn ``pid``."""
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_file.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            return int(stat_file.parent.name)
    return None


def _nsenter(pid: int) -> list[str]:
    return ["nsenter", "-t", str(pid), "-m", "-u", "-i", "-n", "-p", "-C"]


CONSOLE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
}


def console(
    pid: int, argv: list[str], input: bytes | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv`` as root in the running node whose systemd-nspawn is ``pid``, as at its
    console: entered from the host through the node's namespaces (nsenter into its init's
    mount, UTS, IPC, network, PID and cgroup namespaces), not over the network, so it
    works whatever the node's network lets in. A clean environment (:data:`CONSOLE_ENV`);
    ``input`` on stdin; output captured (bytes); ``timeout`` in seconds. Raises LabError
    when the node is not running."""
    init = leader(pid)
    if init is None:
        raise LabError(f"no node runs as systemd-nspawn pid {pid}")
    return subprocess.run(
        [*_nsenter(init), *argv],
        input=input,
        capture_output=True,
        env=CONSOLE_ENV,
        timeout=timeout,
        check=False,
    )


def system_state(pid: int) -> str:
    """The node's ``systemctl is-system-running`` answer, without waiting (``pid``: its
    systemd-nspawn)."""
    init = leader(pid)
    if init is None:
        return "unknown"
    proc = subprocess.run(
        [*_nsenter(init), "systemctl", "is-system-running"], capture_output=True, text=True, timeout=20
    )
    return proc.stdout.strip() or "unknown"


def is_running(node: LabNode, pid: int | None) -> bool:
    """``pid`` is alive and is this node's systemd-nspawn (its command line names the node's
    network namespace), so a recycled PID is never mistaken for the node."""
    if not pid:
        return False
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return False
    return comm == NSPAWN and f"--network-namespace-path=/run/netns/{node.netns}".encode() in argv


def stop(node: LabNode, pid: int | None, timeout: float = 20) -> str:
    """Power the node off: SIGTERM to systemd-nspawn, which asks the node's systemd to power
    off and waits for it; SIGKILL to both after ``timeout`` seconds (at once when it is 0: a
    crash). Returns how it stopped once nspawn has exited (its overlay mount goes with its
    mount namespace)."""
    if not is_running(node, pid):
        return "not running"
    assert pid is not None
    init = leader(pid)
    how = "powered off"
    if timeout > 0:
        os.kill(pid, signal.SIGTERM)
    if timeout <= 0 or not wait_exit(pid, timeout):
        for victim in (init, pid):
            if victim:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(victim, signal.SIGKILL)
        wait_exit(pid, 5)
        how = f"killed after {timeout:.0f} s" if timeout > 0 else "killed (crashed)"
    return how


def remove(dirs: NodeDirs) -> None:
    """Delete the node's cgroup directories (deepest first, in every hierarchy) and its
    files on the host."""
    for root in cgroup_roots():
        remove_cgroup(root / dirs.cgroup.relative_to(cgroup2_root()))
    detach_disks(dirs)
    shutil.rmtree(NSPAWN_RUN_DIR / "propagate" / dirs.base.name, ignore_errors=True)
    shutil.rmtree(dirs.base, ignore_errors=True)


def remove_cgroup(cgroup: Path, timeout_s: float = 10.0) -> None:
    """Remove a cgroup directory and those below it, deepest first (cgroupfs has no rm -r).

    A cgroup stays busy (EBUSY) while a task in it is still exiting: seen when `swarm lab
    down` had to SIGKILL nodes busy with Ray, in the v1 hierarchy that no stray-kill walks.
    So each directory's remaining tasks are killed and its removal retried until
    ``timeout_s`` (seconds) has passed; then the OSError is raised.
    """
    if not cgroup.exists():
        return
    below = [p for p in cgroup.rglob("*") if p.is_dir()]
    deadline = time.monotonic() + timeout_s
    for path in [*sorted(below, key=lambda p: len(p.parts), reverse=True), cgroup]:
        while True:
            try:
                path.rmdir()
                break
            except OSError as err:
                if err.errno != errno.EBUSY or time.monotonic() > deadline:
                    raise
            with contextlib.suppress(OSError):
                for pid in (path / "cgroup.procs").read_text().split():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
            time.sleep(0.05)  # the kernel finishes the exit on its own; nothing to wait on
