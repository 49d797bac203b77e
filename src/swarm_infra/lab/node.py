"""One lab node: its root filesystem overlay, its systemd, its identity (hostname, SSH keys).

A node is a system container: own network, mount, PID, UTS, IPC and cgroup namespaces;
``systemd`` as PID 1; root filesystem = overlay of the shared base image (read-only lower)
and the node's own upper directory. It shares the host's kernel: see the README's lab
section for what that means for GPUs, WireGuard and sysctls.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import time
from importlib import resources
from pathlib import Path

from .network import wait_exit
from .plan import LabNode
from .system import LabError, run

# systemd's "poweroff" signal: SIGTERM would make it re-execute itself, not stop (systemd(1)).
POWEROFF = signal.SIGRTMIN + 4
BOOT_TIMEOUT_S = 90


def cgroup2_root() -> Path:
    """Where the host's cgroup v2 hierarchy is mounted (``/sys/fs/cgroup`` or its ``unified``)."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.split(" ", 1)[0] == "cgroup2":
            return Path(left.split()[4])
    raise LabError("no cgroup v2 hierarchy is mounted on this host; systemd in the nodes needs one")


class NodeDirs:
    """Host-side paths of a node: ``<state>/nodes/<name>/{upper,work,root,console.log}``."""

    def __init__(self, state_dir: Path, name: str) -> None:
        self.base = state_dir / "nodes" / name
        self.upper, self.work, self.root = self.base / "upper", self.base / "work", self.base / "root"
        self.log = self.base / "console.log"
        self.notify = self.base / "notify.sock"
        self.cgroup = cgroup2_root() / "swarm-lab" / "nodes" / name


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
    path = parent / Path(rel).name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.chmod(path, mode)


def prepare(node: LabNode, dirs: NodeDirs, image: Path, hosts: str, authorized_key: str) -> str:
    """Give a fresh node its identity in its upper layer; returns its SSH host public key line.

    Writes the hostname, ``/etc/hosts`` (every lab node by name), the host's resolver, root's
    ``authorized_keys`` (0600 in a 0700 ``.ssh``) and a new ed25519 SSH host key made on the
    host with ssh-keygen (private part 0600, written only into the node's own layer).
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
    os.chmod(dirs.upper / "root/.ssh", 0o700)
    key = _mkdirs_like(image, dirs.upper, "etc/ssh") / "ssh_host_ed25519_key"
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{node.name}", "-f", str(key)])
    return key.with_suffix(".pub").read_text().strip()


def start(node: LabNode, dirs: NodeDirs, image: Path) -> tuple[int, socket.socket]:
    """Boot the node's systemd in its namespaces; returns (systemd's host PID, notify socket).

    ``setsid -f`` detaches the launcher so the node outlives ``swarm lab up``; the init stage
    reports its host PID on a pipe, and systemd reports boot completion on the returned
    datagram socket (``$NOTIFY_SOCKET``), which :func:`wait_booted` reads.
    """
    dirs.notify.unlink(missing_ok=True)
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(dirs.notify))
    script = resources.files("swarm_infra.lab").joinpath("data/node-init.sh")
    with resources.as_file(script) as path, open(dirs.log, "a") as log:
        proc = subprocess.Popen(
            [
                "setsid",
                "-f",
                "/bin/sh",
                str(path),
                "host",
                str(dirs.cgroup),
                f"/run/netns/{node.netns}",
                str(image),
                str(dirs.upper),
                str(dirs.work),
                str(dirs.root),
                node.name,
                str(dirs.log),
                str(dirs.notify),
            ],
            stdout=subprocess.PIPE,
            stderr=log,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        proc.wait()
        proc.stdout.close()
    if not line.isdigit():
        notify.close()
        tail = "\n".join(dirs.log.read_text(errors="replace").splitlines()[-10:])
        raise LabError(f"node {node.name} did not start (log: {dirs.log}):\n{tail}")
    return int(line), notify


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
                raise LabError(f"node {node.name} did not finish booting in {timeout:.0f} s")
            notify.settimeout(left)
            try:
                message = notify.recv(4096).decode(errors="replace")
            except TimeoutError:
                continue
            if "READY=1" in message.split("\n"):
                break
    state = system_state(pid)
    if state not in ("running", "degraded"):
        raise LabError(f"node {node.name} booted into state {state!r}")
    return state


def _nsenter(pid: int) -> list[str]:
    return ["nsenter", "-t", str(pid), "-m", "-u", "-i", "-n", "-p", "-C"]


def system_state(pid: int) -> str:
    """The node's ``systemctl is-system-running`` answer, without waiting."""
    proc = subprocess.run(
        [*_nsenter(pid), "systemctl", "is-system-running"], capture_output=True, text=True, timeout=20
    )
    return proc.stdout.strip() or "unknown"


def is_running(node: LabNode, pid: int | None) -> bool:
    """``pid`` is alive and is the init of this node (its network namespace is the node's),
    so a recycled PID is never mistaken for the node."""
    if not pid:
        return False
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat(f"/run/netns/{node.netns}").st_ino and (
            Path(f"/proc/{pid}/comm").read_text().strip() == "systemd"
        )
    except OSError:
        return False


def stop(node: LabNode, pid: int | None, timeout: float = 20) -> str:
    """Power the node off: systemd's poweroff signal, then SIGKILL of its init after ``timeout``
    seconds (which ends every process of its PID namespace). Returns how it stopped once the
    node's launcher (the init's parent, which holds the node's cgroup) has exited too."""
    if not is_running(node, pid):
        return "not running"
    assert pid is not None
    launcher = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    os.kill(pid, POWEROFF)
    how = "powered off"
    if not wait_exit(pid, timeout):
        os.kill(pid, signal.SIGKILL)
        wait_exit(pid, 5)
        how = f"killed after {timeout:.0f} s"
    wait_exit(launcher, 5)
    return how


def remove(dirs: NodeDirs) -> None:
    """Delete the node's cgroup directories (deepest first) and its files on the host."""
    remove_cgroup(dirs.cgroup)
    shutil.rmtree(dirs.base, ignore_errors=True)


def remove_cgroup(cgroup: Path) -> None:
    """Remove a cgroup directory and those below it, deepest first (cgroupfs has no rm -r)."""
    if cgroup.exists():
        below = [p for p in cgroup.rglob("*") if p.is_dir()]
        for path in sorted(below, key=lambda p: len(p.parts), reverse=True):
            path.rmdir()
        cgroup.rmdir()
