"""The lab's package index: a wheelhouse on the host, served to the nodes over https.

Nodes install Ray (and the packages its jobs need) from the Python package index their
RayCluster policy names, as a provider with a private mirror would; they never reach the
internet for it. In the lab that index is this host: the wheels of the RayCluster's lock
are downloaded once, with pip in hash-checking mode, for the nodes' Python and platform into
``$SWARM_LAB_CACHE/wheelhouse/<key>`` (kept across labs, like the image), and
:mod:`.tlsindex` serves them as a PEP 503 index over https (its certificate from the lab's CA,
``$SWARM_LAB_CACHE/index-tls``) on the lab's service address, ``SERVICE_ADDRESS`` on a host
interface of its own, which every node reaches through its site router. A RayCluster whose
``package_index.url`` is on that address gets it.
"""

from __future__ import annotations

import fcntl
import hashlib
import ipaddress
import json
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlparse

from . import services, tlsindex
from .plan import PREFIX
from .system import LabError, run

# TEST-NET-1 (RFC 5737): never routed, so it names nothing but this host in the lab.
SERVICE_ADDRESS = ipaddress.IPv4Address("192.0.2.1")
SERVICE_LINK = f"{PREFIX}-svc"
# The nodes' Python: Debian 12's python3 in the lab image.
NODE_PYTHON = "3.11"
NODE_PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
)


def serves(url: str) -> bool:
    """The index at ``url`` is the lab's own (its host is the service address)."""
    return urlparse(url).hostname == str(SERVICE_ADDRESS)


def wheelhouse_key(lock: str) -> str:
    recipe = json.dumps([lock, NODE_PYTHON, NODE_PLATFORMS])
    return hashlib.sha256(recipe.encode()).hexdigest()[:12]


def ensure_wheelhouse(cache: Path, lock: str, log: Callable[[str], None] = print) -> Path:
    """The directory of the wheels the lock file text ``lock`` pins (every dependency is
    pinned in it), downloaded once with pip in hash-checking mode (binary wheels for the
    nodes' Python and platform: a file whose hash the lock does not list fails it);
    concurrent callers wait on a lock and a half-filled directory is never used. Raises
    LabError when pip fails."""
    final = cache / wheelhouse_key(lock)
    if (final / ".complete").exists():
        log(f"index  wheelhouse {final.name}: cached ({sum(1 for _ in final.glob('*.whl'))} wheels)")
        return final
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if (final / ".complete").exists():
            return final
        building = cache / f".building-{final.name}"
        shutil.rmtree(building, ignore_errors=True)
        pins = sum(1 for line in lock.splitlines() if line[:1].isalnum())
        log(f"index  wheelhouse {final.name}: downloading the lock's {pins} pins (once)")
        started = time.monotonic()
        platforms = [arg for p in NODE_PLATFORMS for arg in ("--platform", p)]
        building.mkdir(parents=True)
        (building / ".lock.txt").write_text(lock)
        proc = run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--require-hashes",
             "--python-version", NODE_PYTHON, "--implementation", "cp", *platforms,
             "--dest", str(building), "-r", str(building / ".lock.txt")],
            check=False,
            timeout=1800,
        )  # fmt: skip
        if proc.returncode != 0:
            tail = "\n".join(proc.stderr.strip().splitlines()[-10:])
            raise LabError(f"pip download for the lab's package index failed:\n{tail}")
        (building / ".complete").write_text(lock)
        building.rename(final)
        log(f"index  wheelhouse {final.name}: {sum(1 for _ in final.glob('*.whl'))} wheels in "
            f"{time.monotonic() - started:.0f} s")  # fmt: skip
    return final


def ensure_service_address() -> None:
    """The host interface holding SERVICE_ADDRESS, named in the lab's prefix so that
    ``down`` sweeps it with the rest.

    A veth pair with both ends on the host, not a dummy link: this machine's kernel has no
    ``dummy`` module ("Unknown device type"), and veth is what the lab is built of anyway.
    An address on any interface that is up is local to the host, so the nodes reach it
    through their site routers' default route."""
    if run(["ip", "link", "show", "dev", SERVICE_LINK], check=False).returncode != 0:
        run(["ip", "link", "add", SERVICE_LINK, "type", "veth", "peer", "name", f"{SERVICE_LINK}-p"])
    run(["ip", "addr", "replace", f"{SERVICE_ADDRESS}/32", "dev", SERVICE_LINK])
    run(["ip", "link", "set", f"{SERVICE_LINK}-p", "up"])
    run(["ip", "link", "set", SERVICE_LINK, "up"])


INDEX_MARKER = b"swarm_infra.lab.tlsindex"


def index_is_running(pid: int | None, port: int) -> bool:
    return services.is_running(pid, INDEX_MARKER, port)


def start_index(wheels: Path, root: Path, tls: Path, port: int, cgroup: Path, log_file: Path) -> int:
    """Serve the wheels of ``wheels`` as a PEP 503 index laid out in ``root`` over https
    (the certificate in ``tls``, :func:`.tlsindex.ensure_tls`) on SERVICE_ADDRESS:``port``,
    read-only; returns its PID once it answers. The process runs in the lab's cgroup, so
    ``down`` ends it whatever happens."""
    tlsindex.build_index(wheels, root)
    return services.start(
        [sys.executable, "-m", "swarm_infra.lab.tlsindex", "--address", str(SERVICE_ADDRESS),
         "--port", str(port), "--root", str(root), "--tls", str(tls)],
        str(SERVICE_ADDRESS), port, cgroup, log_file, "the lab's package index",
    )  # fmt: skip


def stop_index(pid: int | None, port: int) -> None:
    services.stop(pid, INDEX_MARKER, port)
    services.stop(pid, b"pypiserver", port)  # the plain-http index a lab before #22 started
