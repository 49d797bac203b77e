"""Packages: Debian packages installed, removed, pinned to a version glob and held (apt,
dpkg), and a virtualenv's pinned requirements (pip)."""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Generator, Mapping

from pyinfra import host
from pyinfra.api import QuoteString, StringCommand, operation

from ....nodeside.facts import requirements_missing
from ..facts import DpkgSelections
from .run import changing, snapshot


@operation()
def apt_install(packages: list[str], cache_time_s: int = 3600) -> Generator[StringCommand, None, None]:
    """Install the ``packages`` that are not installed (without recommends), refreshing apt's
    package lists first when they are older than ``cache_time_s`` (their update stamp, else
    the lists directory, as Ansible's ``apt`` with ``cache_valid_time`` reads them).
    Nothing runs when every package is installed, so a converged node reports no change.

    **Example:** ``apt_install(name="WireGuard tools", packages=["wireguard-tools"])``"""
    known = snapshot()["packages"]
    if any(p not in known for p in packages):
        from pyinfra.facts.deb import DebPackages

        known = {**known, **{p: "" for p in host.get_fact(DebPackages)}}
    missing = [p for p in packages if known.get(p) is None]
    if not missing:
        return
    changing()
    fresh = (
        '-n "$(find /var/lib/apt/periodic/update-success-stamp /var/lib/apt/lists -maxdepth 0 '
        f"-newermt '-{int(cache_time_s)} seconds' 2>/dev/null)\""
    )
    yield StringCommand("sh", "-c", QuoteString(f"[ {fresh} ] || apt-get update -q"))
    yield StringCommand(
        "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-q", "--no-install-recommends",
        *(QuoteString(p) for p in missing),
    )  # fmt: skip


@operation()
def apt_absent(packages: list[str]) -> Generator[StringCommand, None, None]:
    """Remove the ``packages`` that are installed (``apt-get remove``, their configuration
    kept, as Ansible's ``apt`` with ``state: absent``); nothing runs when none is.

    **Example:** ``apt_absent(name="No container toolkit", packages=["nvidia-container-toolkit"])``"""
    known = snapshot()["packages"]
    if any(p not in known for p in packages):
        from pyinfra.facts.deb import DebPackages

        known = {**known, **{p: "" for p in host.get_fact(DebPackages)}}
    present = [p for p in packages if known.get(p) is not None]
    if not present:
        return
    changing()
    yield StringCommand(
        "DEBIAN_FRONTEND=noninteractive", "apt-get", "remove", "-y", "-q", *(QuoteString(p) for p in present)
    )


@operation()
def apt_pinned(packages: list[str], version: str) -> Generator[StringCommand, None, None]:
    """Install ``packages`` at the Debian version glob ``version`` (``570.86.15-*``), up or
    down, through holds; installed versions matching the glob yield nothing (pyinfra's
    ``apt.packages`` compares versions exactly, and a pin is a glob).

    **Example:** ``apt_pinned(name="Driver", packages=["nvidia-driver"], version="570.86.15-*")``"""
    installed = snapshot()["packages"]
    if all(installed.get(p) and fnmatch.fnmatchcase(installed[p], version) for p in packages):
        return
    changing()
    yield StringCommand(
        "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-q", "--no-install-recommends",
        "--allow-downgrades", "--allow-change-held-packages",
        *(QuoteString(f"{p}={version}") for p in packages),
    )  # fmt: skip


@operation()
def dpkg_hold(packages: list[str]) -> Generator[StringCommand, None, None]:
    """Hold ``packages`` (``dpkg --set-selections``), so that ``apt upgrade`` cannot move them;
    a package whose selection is already ``hold`` yields nothing.

    **Example:** ``dpkg_hold(name="Hold the driver", packages=["nvidia-driver"])``"""
    selections = host.get_fact(DpkgSelections)
    for name in packages:
        if selections.get(name) != "hold":
            yield StringCommand("echo", QuoteString(f"{name} hold"), "|", "dpkg", "--set-selections")


@operation()
def pip_requirements(
    venv: str, requirements: list[str], lock: str, environment: Mapping[str, str]
) -> Generator[StringCommand, None, None]:
    """Make the virtualenv ``venv`` (``python3 -m venv``) and install the lock file ``lock``
    (a path on the node) in it with pip's ``environment`` (the index, hash-checking mode,
    wheels only, the index's CA: :func:`swarm_infra.resolve.ray.pip_environment`), when a
    pin of ``requirements`` (the lock's pins) is missing or not at its version
    (:func:`swarm_infra.nodeside.facts.requirements_missing`, the Ansible role's test too).

    **Example:**

    .. code:: python

        pip_requirements(name="Ray", venv=files["ray_venv"]["path"],
                         requirements=["ray[default]==2.60.0", ...], lock=files["ray_lock"]["path"],
                         environment={"PIP_INDEX_URL": "https://mirror/simple/", "PIP_REQUIRE_HASHES": "1"})
    """
    installed = snapshot()["venvs"].get(venv) or {}
    if not requirements_missing(list(requirements), json.dumps(installed)):
        return
    changing()
    if not installed:
        yield StringCommand("python3", "-m", "venv", QuoteString(venv))
    yield StringCommand(
        "env", *(QuoteString(f"{k}={v}") for k, v in sorted(environment.items())),
        QuoteString(f"{venv}/bin/pip"), "install", "-r", QuoteString(lock),
    )  # fmt: skip
