"""The lab's site package cache: Debian's apt-cacher-ng on the lab's service address.

The lab fleet's sites declare ``package_cache.apt_proxy`` on SERVICE_ADDRESS
(inventory/lab/sites.yaml), as a provider's site names its own cache; the host layer then
points the nodes' apt at it (resolve/files.py ``apt_cache_detect``). This host runs that
cache: apt-cacher-ng with a configuration directory of its own (not /etc/apt-cacher-ng, and
not the package's system daemon), its cache in ``$SWARM_LAB_CACHE/apt-cacher-ng`` kept across
labs like the image, so it is warmed once per machine and a converge fetches each package
from the mirror at most once.

apt-cacher-ng revalidates index files (``InRelease``) with the mirror on every request and
answers with an error when the mirror cannot be reached, even for index files it holds
(measured here with 3.7.4 and the route to the mirror cut: HTTP 500 after 17 s for a cached
``InRelease``, 503 for an uncached ``Packages.xz``, 200 for a cached ``.deb``;
``FreshIndexMaxAge`` did not change it). Its ``Offlinemode`` ("work without an internet
connection or respond with 503 error where it's not possible", acng.conf) serves what it
holds. So the lab probes the mirror each time it starts or re-checks the cache (every
``swarm lab up``), and runs the cache offline while the mirror does not answer and the
cache holds packages (a cold cache stays online: offline it could serve nothing).
"""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

from . import services
from .image import SUITE
from .mirror import SERVICE_ADDRESS

PROGRAM = "/usr/sbin/apt-cacher-ng"
PROBE_TIMEOUT_S = 10


def serves(apt_proxy: str | None) -> bool:
    """A site's declared ``apt_proxy`` (http://HOST:PORT) is the lab's cache."""
    return bool(apt_proxy) and urlparse(apt_proxy).hostname == str(SERVICE_ADDRESS)


def port_of(apt_proxy: str) -> int:
    return urlparse(apt_proxy).port or 3142


def mirror_answers(mirror: str, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """The mirror serves its ``InRelease`` for the lab's suite within ``timeout`` seconds."""
    request = urllib.request.Request(f"{mirror}/dists/{SUITE}/InRelease", method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def holds_packages(cache: Path) -> bool:
    """The cache holds at least one package (a warm cache: something to serve offline)."""
    return cache.is_dir() and next(cache.rglob("*.deb"), None) is not None


def config(cache: Path, logs: Path) -> str:
    """acng.conf for the lab's cache (apt-cacher-ng's own names; acng.conf documents each).

    No remapping backends (requests are cached under the host and path the nodes ask for,
    which is the lab image's mirror); ``ExThreshold`` keeps unreferenced files 4 days, and
    no user ports but 80 (the mirror's)."""
    return (
        "# swarm lab: the sites' package cache (swarm_infra/lab/pkgcache.py)\n"
        f"CacheDir: {cache}\n"
        f"LogDir: {logs}\n"
        "ForeGround: 1\n"
        "ExThreshold: 4\n"
        "ReuseConnections: 1\n"
        "AllowUserPorts: 80\n"
    )


def argv(config_dir: Path, port: int, offline: bool) -> list[str]:
    """The command line: the listening address, port and mode as key=value overrides
    (apt-cacher-ng(8)), so the running process says what it serves."""
    return [
        PROGRAM, "-c", str(config_dir), f"BindAddress={SERVICE_ADDRESS}", f"Port={port}",
        f"Offlinemode={int(offline)}",
    ]  # fmt: skip


def is_running(pid: int | None, port: int, offline: bool) -> bool:
    """``pid`` is the lab's cache on ``port`` in the given mode."""
    mode = f"Offlinemode={int(offline)}".encode()
    return services.is_running(pid, b"apt-cacher-ng", port) and services.is_running(pid, mode, port)


def start(config_dir: Path, cache: Path, logs: Path, port: int, offline: bool, cgroup: Path) -> int:
    """Write the configuration and start the cache; returns its PID once it answers.
    Raises LabError (lab/services.py) when it does not start."""
    for d in (config_dir, cache, logs):
        d.mkdir(parents=True, exist_ok=True)
    (config_dir / "acng.conf").write_text(config(cache, logs))
    return services.start(
        argv(config_dir, port, offline), str(SERVICE_ADDRESS), port, cgroup, logs / "lab.log",
        "the lab's package cache (apt-cacher-ng)",
    )  # fmt: skip


def stop(pid: int | None, port: int) -> None:
    services.stop(pid, b"apt-cacher-ng", port)
