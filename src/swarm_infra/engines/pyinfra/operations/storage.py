"""Scratch storage: an md RAID 0 array and its mdadm.conf line, a filesystem, its mount
and /etc/fstab line (as ``ansible.posix.mount`` keeps them), and the record of what swarm
made."""

from __future__ import annotations

import json
import shlex
from collections.abc import Generator
from pathlib import Path
from typing import Any

from pyinfra import host
from pyinfra.api import OperationError, QuoteString, StringCommand, operation

from ..facts import MdadmBrief
from .run import changing, snapshot
from .util import text_lines


def storage_record() -> dict[str, Any]:
    """What scratch the project made on the node, from its record (``{}`` when none)."""
    text = snapshot()["texts"].get(host.data.swarm["layout"]["files"]["storage_record"]["path"])
    try:
        data = json.loads(text) if text else {}
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


@operation()
def md_raid0(array: str, devices: list[str]) -> Generator[StringCommand, None, None]:
    """Create the md RAID 0 ``array`` over ``devices`` (mdadm), unless it exists.

    **Example:** ``md_raid0(name="Scratch array", array="/dev/md/scratch", devices=[...])``"""
    if snapshot()["paths"].get(array) is not None:
        return
    changing()
    yield StringCommand(
        "mdadm", "--create", QuoteString(array), "--level=0", f"--raid-devices={len(devices)}",
        QuoteString(f"--name={array.rsplit('/', 1)[-1]}"), "--run", *(QuoteString(d) for d in devices),
    )  # fmt: skip


@operation()
def mdadm_conf(array: str, path: str) -> Generator[StringCommand, None, None]:
    """Keep the array's ``ARRAY`` line (``mdadm --detail --brief``) in mdadm.conf(5), so it
    is assembled at boot; the line of the same array is replaced, others are kept.

    **Example:** ``mdadm_conf(name="Array at boot", array="/dev/md/scratch", path=conf)``"""
    line = host.get_fact(MdadmBrief, array=array)
    if not line:
        return
    prefix = f"ARRAY {array} "
    if [ln for ln in text_lines(snapshot()["texts"].get(path)) if ln.startswith(prefix)] == [line]:
        return
    p = shlex.quote(path)
    script = f"mkdir -p {shlex.quote(str(Path(path).parent))} && touch {p} && " + replace_script(
        path, f"{{ grep -v {shlex.quote('^' + prefix)} {p}; echo {shlex.quote(line)}; }}"
    )
    changing()
    yield StringCommand("sh", "-c", QuoteString(script))


@operation()
def filesystem(device: str, fstype: str, label: str) -> Generator[StringCommand, None, None]:
    """Make a ``fstype`` filesystem labelled ``label`` on ``device`` when it holds none (as
    ``community.general.filesystem``: an existing filesystem of that type is kept; another
    type fails, never reformatted).

    **Example:** ``filesystem(name="Scratch fs", device="/dev/nvme0n1", fstype="xfs", label="scratch")``"""
    probe = (snapshot()["devices"].get(device) or {}).get("probe", {})
    kind = probe.get("TYPE")
    if kind == fstype:
        return
    if kind:
        raise OperationError(f"{device} holds {kind}, not {fstype}; refusing to reformat it")
    changing()
    yield StringCommand(f"mkfs.{fstype}", "-L", QuoteString(label), QuoteString(device))


def _fstab_line(source: str, path: str, fstype: str, options: list[str]) -> str:
    # As ansible.posix.mount writes it (dump and passno 0).
    return f"{source} {path} {fstype} {','.join(options) or 'defaults'} 0 0"


def _fstab_mine(path: str) -> list[str]:
    lines = text_lines(snapshot()["texts"].get("/etc/fstab"))
    return [
        ln
        for ln in lines
        if not ln.lstrip().startswith("#") and len(ln.split()) > 1 and ln.split()[1] == path
    ]


def replace_script(path: str, produce: str) -> str:
    """A POSIX sh command that replaces ``path`` (0644) with what the shell command
    ``produce`` prints: into a new file of a random name beside it (``mktemp``: O_EXCL, mode
    0600, so nothing planted at a predictable name is followed), then renamed over ``path``;
    the temporary file is removed when a step fails. The node-side counterpart of
    ``nodeside.atomic.write_atomic`` for files a pyinfra command computes on the node."""
    tmp = shlex.quote(f"{path}.XXXXXXXX")
    return (
        f'tmp=$(mktemp {tmp}) && {{ {produce} > "$tmp" && chmod 0644 "$tmp" && '
        f'mv "$tmp" {shlex.quote(path)}; }} || {{ rm -f "$tmp"; exit 1; }}'
    )


def _fstab_script(path: str, line: str | None) -> str:
    keep = f"awk -v p={shlex.quote(path)} '$1 ~ /^#/ || $2 != p' /etc/fstab"
    add = f" && echo {shlex.quote(line)}" if line else ""
    return replace_script("/etc/fstab", f"{{ {keep}{add}; }}")


@operation()
def mount(source: str, path: str, fstype: str, options: list[str]) -> Generator[StringCommand, None, None]:
    """Mount ``source`` at ``path`` and keep it in /etc/fstab, as ``ansible.posix.mount``
    with ``state: mounted`` does (the same fstab line, ``SOURCE PATH FSTYPE OPTIONS 0 0``):
    the mount point is made, a changed line remounts.

    **Example:**

    .. code:: python

        mount(name="Scratch", source="LABEL=scratch", path=p, fstype="xfs", options=["noatime"])
    """
    line = _fstab_line(source, path, fstype, options)
    line_changed = _fstab_mine(path) != [line]
    mounted = snapshot()["mounts"].get(path)
    if not line_changed and mounted:
        return
    changing()
    # The mount point may be gone even when the line is in place (ansible.posix.mount makes
    # it whenever it is missing); the snapshot does not say, and mkdir -p is harmless.
    if line_changed or not mounted:
        yield StringCommand("mkdir", "-p", QuoteString(path))
    if line_changed:
        yield StringCommand("sh", "-c", QuoteString(_fstab_script(path, line)))
    if not mounted:
        yield StringCommand("mount", QuoteString(path))
    else:
        yield StringCommand(
            "mount", "-o", QuoteString(f"remount,{','.join(options) or 'defaults'}"), QuoteString(path)
        )


@operation()
def unmount(path: str) -> Generator[StringCommand, None, None]:
    """Unmount ``path``, drop its /etc/fstab line and remove the (empty) mount point, as
    ``ansible.posix.mount`` with ``state: absent`` does; data on the device stays.

    **Example:** ``unmount(name="Scratch no longer declared", path="/old-scratch")``

    Called only where the record of what the project made names a mount point no longer
    declared; every command is safe to repeat."""
    p = shlex.quote(path)
    changing()
    yield StringCommand("sh", "-c", QuoteString(f"! mountpoint -q {p} || umount {p}"))
    yield StringCommand("sh", "-c", QuoteString(_fstab_script(path, None)))
    yield StringCommand("sh", "-c", QuoteString(f"! test -d {p} || rmdir {p}"))
