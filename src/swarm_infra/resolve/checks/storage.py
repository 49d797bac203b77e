"""Storage: where node-local scratch may be mounted."""

from __future__ import annotations

import posixpath
from collections.abc import Iterator

from ...fleet.diagnostics import Finding, excerpt
from ..analysis import Analysis
from ..layout import STATE_DIR

# Mounting scratch on (or inside) these would hide or replace the system's own files.
SYSTEM_DIRS = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/sys",
    "/usr",
    "/var",
    "/tmp",
    "/home",
    "/opt",
    "/srv",
    "/mnt",
    "/media",
)
# Inside these a mount is fine (/var/lib/scratch, /mnt/scratch), but not in the pseudo
# filesystems and the system's own trees.
NO_MOUNTS_INSIDE = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc",
                    "/run", "/sbin", "/sys", "/usr")  # fmt: skip
# Directories whose contents a scratch mount on them (or above them) would hide or replace:
# the kubelet's and the container runtimes' state, the logs, the package manager's state
# and the project's own record of what it set (layout STATE_DIR; issue #22).
NO_MOUNTS_AT_OR_INSIDE = (
    "/var/lib/kubelet",
    "/var/lib/containerd",
    "/var/lib/docker",
    "/var/log",
    "/var/lib/apt",
    "/var/lib/dpkg",
    STATE_DIR,
    "/var/lib/systemd",
)


def _overlaps(path: str, directory: str) -> bool:
    """``path`` is ``directory``, lies in it or contains it."""
    return path == directory or path.startswith(directory + "/") or directory.startswith(path + "/")


def scratch_mount(a: Analysis) -> Iterator[Finding]:
    """``storage.mount-path-invalid``: the scratch mount path is ``/``, is not in normal form
    (``.``, ``..``, ``//`` or a trailing ``/``), is a system directory itself, or lies
    inside one that must never be mounted over (``/etc``, ``/usr``, ``/proc``, ...)."""
    st = a.fleet.storage
    if st is None or st.scratch is None:
        return
    path = st.scratch["mount_path"]
    normal = posixpath.normpath(path)
    problem = None
    if path != normal or path.startswith("//"):
        problem = f"is not in normal form (it means {excerpt(normal)}); write it so"
    elif path == "/":
        problem = "is the root filesystem"
    elif path in SYSTEM_DIRS:
        problem = "is a system directory; mount scratch on a directory of its own (/scratch)"
    else:
        inside = next((d for d in NO_MOUNTS_INSIDE if path.startswith(d + "/")), None)
        covers = next((d for d in NO_MOUNTS_AT_OR_INSIDE if _overlaps(path, d)), None)
        if inside:
            problem = f"is inside {inside}, which must not be mounted over"
        elif covers:
            problem = f"would cover {covers} (system, kubelet, container runtime, log or swarm state)"
    if problem:
        yield Finding(
            st.source,
            ("spec", "scratch", "mount_path"),
            "storage.mount-path-invalid",
            f"mount path {excerpt(path)} {problem}",
        )


CHECKS = (scratch_mount,)
