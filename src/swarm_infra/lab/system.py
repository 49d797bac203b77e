"""Running the host's own tools (iproute2, tc, iptables, debootstrap, ssh-keygen) for the lab.

Which tools those are, and the package of each, is ``swarm_infra.hosttools.HOST_TOOLS``
(area ``lab``): ``swarm lab`` checks them before any work.

Every command is an argument list, never a shell string: names that reach a command come
from the validated fleet, and nothing is interpolated into a shell.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from ..errors import LabError as LabError


def require_root() -> None:
    """Raise :class:`LabError` unless running as root (namespaces, mounts, bridges need it)."""
    if os.geteuid() != 0:
        raise LabError(
            "swarm lab needs root: it creates network namespaces, bridges, overlay mounts and "
            "runs systemd in containers. Run it with sudo, or as root."
        )


def process_argv(pid: int | None) -> list[bytes]:
    """Process ``pid``'s command line (/proc/PID/cmdline), empty when there is no such
    process: what tells a lab process from a recycled PID."""
    if not pid:
        return []
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return []


def run(
    argv: Sequence[str],
    *,
    netns: str | None = None,
    check: bool = True,
    input: str | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` (in network namespace ``netns`` if given) and return its result.

    Raises :class:`LabError` with the command and its stderr when it fails and ``check``.
    """
    full = ["ip", "netns", "exec", netns, *argv] if netns else list(argv)
    try:
        proc = subprocess.run(full, input=input, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise LabError(f"timed out after {timeout:.0f} s: {' '.join(full)}") from exc
    if check and proc.returncode != 0:
        raise LabError(f"failed ({proc.returncode}): {' '.join(full)}\n{proc.stderr.strip()}")
    return proc
