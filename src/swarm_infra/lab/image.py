"""The lab's shared Debian 12 base image: built once with debootstrap, cached, read-only.

Every node's root filesystem is an overlay with this image as its lower layer, so nodes
start in a second and share ~330 MiB on disk. The cache key covers the suite, the mirror,
the package list and the customisation below: change any and a new image is built next to the
old one, which stays until removed by hand (it is only disk, under ``/var/cache/swarm-lab``).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from .system import LabError, run

SUITE = "bookworm"
# What a node needs to be managed: systemd as init, sshd, Python for Ansible's modules
# (python3-apt for its apt module), iproute2/ping for the network. Everything the roles
# install (wireguard-tools, wireguard-go, ...) comes later from the mirror, through the
# lab's NAT, so convergence proves real apt.
PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "openssh-server",
    "python3",
    "python3-apt",
    "iproute2",
    "iputils-ping",
    "procps",
    "kmod",
    "ca-certificates",
    "gpgv",  # apt verifies the mirror's signatures with it; minbase leaves it out
)
# Units that cannot work in a container without a console; masked so boot ends "running".
MASKED_UNITS = ("console-getty.service", "getty@tty1.service", "systemd-udevd.service")
# Bump when customise() changes, so cached images are rebuilt.
RECIPE_VERSION = "2"
# apt's timeout (s) for a connection that sends nothing, and its retries of a failed fetch.
APT_MIRROR_CONF = 'Acquire::http::Timeout "15";\nAcquire::Retries "5";\n'
_ONE_LINE = re.compile(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+" + SUITE + r"\s", re.M)


def host_mirror(apt_dir: Path = Path("/etc/apt")) -> str:
    """The host's configured Debian mirror for ``bookworm`` (deb822 or one-line sources).

    Returns the first URI whose entry names the suite and ends in ``/debian``; falls back to
    ``http://deb.debian.org/debian``. ``SWARM_LAB_MIRROR`` overrides it.
    """
    if os.environ.get("SWARM_LAB_MIRROR"):
        return os.environ["SWARM_LAB_MIRROR"].rstrip("/")
    files = [apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*"))]
    for path in files:
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError):
            continue
        if path.suffix == ".sources":
            # deb822 (sources.list(5)), read by python-debian: field names case-insensitive,
            # comments and continuation lines as apt reads them.
            from debian.deb822 import Deb822

            for stanza in Deb822.iter_paragraphs(text.splitlines()):
                uris = stanza.get("URIs", "").split()
                if (
                    uris
                    and SUITE in stanza.get("Suites", "").split()
                    and uris[0].rstrip("/").endswith("/debian")
                ):
                    return uris[0].rstrip("/")
        else:
            for uri in _ONE_LINE.findall(text):
                if uri.rstrip("/").endswith("/debian"):
                    return uri.rstrip("/")
    return "http://deb.debian.org/debian"


def image_key(mirror: str) -> str:
    """12 hex digits identifying an image: suite, mirror, packages, masked units, recipe."""
    recipe = json.dumps([SUITE, mirror, sorted(PACKAGES), sorted(MASKED_UNITS), RECIPE_VERSION])
    return hashlib.sha256(recipe.encode()).hexdigest()[:12]


def customise(rootfs: Path, mirror: str) -> None:
    """Make a debootstrapped tree a lab node template: no per-node identity, quiet boot."""
    for key in (rootfs / "etc/ssh").glob("ssh_host_*"):
        key.unlink()  # each node gets its own host key at creation
    (rootfs / "etc/machine-id").write_text("")  # systemd makes one per node at first boot
    (rootfs / "etc/hostname").unlink(missing_ok=True)
    for unit in MASKED_UNITS:
        link = rootfs / "etc/systemd/system" / unit
        link.unlink(missing_ok=True)
        link.symlink_to("/dev/null")
    security = mirror.rsplit("/", 1)[0] + "/debian-security"
    (rootfs / "etc/apt/sources.list").write_text(
        f"deb {mirror} {SUITE} main\n"
        f"deb {mirror} {SUITE}-updates main\n"
        f"deb {security} {SUITE}-security main\n"
    )
    # A mirror connection that stalls mid-transfer (seen here: the lab's mirror stopped sending
    # and apt waited minutes per try, past a converge's patience) becomes a quick retry.
    (rootfs / "etc/apt/apt.conf.d/80swarm-lab-mirror").write_text(APT_MIRROR_CONF)
    shutil.rmtree(rootfs / "var/cache/apt/archives", ignore_errors=True)
    (rootfs / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)


def ensure_image(cache_dir: Path, mirror: str | None = None, log: Callable[[str], None] = print) -> Path:
    """The root filesystem of the base image, built with debootstrap unless cached.

    Concurrent callers wait on a lock file; a half-built image is never used (the tree is
    built under a temporary name and renamed when complete). Raises :class:`LabError` when
    debootstrap fails (its log's tail is in the message).
    """
    mirror = mirror or host_mirror()
    key = image_key(mirror)
    final = cache_dir / f"debian-{SUITE}-{key}"
    if (final / "rootfs").is_dir():
        log(f"image  debian {SUITE} {key}: cached at {final}")
        return final / "rootfs"
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / "rootfs").is_dir():
            return final / "rootfs"
        building = cache_dir / f".building-{key}"
        shutil.rmtree(building, ignore_errors=True)
        building.mkdir()
        log(f"image  debian {SUITE} {key}: building with debootstrap from {mirror} (about a minute)")
        started = time.monotonic()
        proc = run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(PACKAGES)}",
                SUITE,
                str(building / "rootfs"),
                mirror,
            ],
            check=False,
            timeout=1800,
        )
        (building / "debootstrap.log").write_text(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
            raise LabError(f"debootstrap failed (log: {building / 'debootstrap.log'}):\n{tail}")
        customise(building / "rootfs", mirror)
        (building / "image.json").write_text(
            json.dumps({"suite": SUITE, "mirror": mirror, "packages": PACKAGES, "key": key}, indent=2)
        )
        building.rename(final)
        log(f"image  debian {SUITE} {key}: built in {time.monotonic() - started:.0f} s")
    return final / "rootfs"
