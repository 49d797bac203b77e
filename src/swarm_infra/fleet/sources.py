"""Which fleet files a fleet name or an Ansible inventory source stands for.

A fleet *name* is a plain directory name in ``inventory/``: ``--fleet NAME`` reads
``inventory/NAME``, ``policies/NAME`` and ``policies/shared`` (those that exist), and
nothing else; an explicit path argument is the way to read files anywhere else.
An Ansible inventory source inside ``inventory/NAME`` (the directory, or any file below
it) stands for the same three; a ``*.swarm.yml`` config lists ``fleet_paths`` relative to
itself.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from ..errors import FleetEscapes as FleetEscapes
from ..errors import UnknownFleet as UnknownFleet

CONFIG_SUFFIXES = (".swarm.yml", ".swarm.yaml")
# A directory name, never a path: no '/', no leading '.', so never '..'.
FLEET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


def convention_paths(base: Path, name: str) -> list[Path]:
    """``inventory/NAME``, ``policies/NAME``, ``policies/shared`` under ``base`` (existing or not)."""
    return [base / "inventory" / name, base / "policies" / name, base / "policies" / "shared"]


def fleet_names(base: Path) -> list[str]:
    """The fleets under ``base``: directories of ``base/inventory`` with a plain name, sorted."""
    inventory = base / "inventory"
    if not inventory.is_dir():
        return []
    return sorted(p.name for p in inventory.iterdir() if FLEET_NAME.fullmatch(p.name) and p.is_dir())


def _inside(base: Path, convention: list[Path]) -> list[Path]:
    """The existing ``convention`` directories, each refused (:class:`FleetEscapes`) when it
    resolves outside ``base``: a pull request that makes ``inventory/NAME`` a link to
    ``/etc`` must not make CI read and echo what is there. Nothing is read to decide."""
    root = base.resolve()
    out = []
    for c in convention:
        if not c.is_dir():
            continue
        if not c.resolve().is_relative_to(root):
            raise FleetEscapes(f"{c} is a link leaving the repository ({root}); a fleet's files live in it")
        out.append(c)
    return out


def named_fleet_paths(base: Path, name: str) -> list[Path]:
    """The existing convention paths of fleet ``name`` under ``base``.

    Raises :class:`UnknownFleet` when ``name`` is not a plain directory name (``..``,
    ``a/b``, an absolute path) or ``base/inventory/NAME`` is not a directory.
    """
    known = fleet_names(base)
    listing = f"fleets in {base / 'inventory'}: {', '.join(known) or 'none'}"
    if not FLEET_NAME.fullmatch(name):
        raise UnknownFleet(
            f"{name!r} is not a fleet name (a directory name in inventory/, such as "
            f"{known[0] if known else 'lab'}); give files or directories elsewhere as PATHS ({listing})"
        )
    if not (base / "inventory" / name).is_dir():
        raise UnknownFleet(f"no fleet named {name!r} ({listing})")
    return _inside(base, convention_paths(base, name))


def fleet_root(source: str | Path) -> Path | None:
    """The ``inventory/NAME`` directory that ``source`` is (or is inside), or None. The
    path is made absolute, not resolved: a dangling or looping link inside the fleet is
    still inside it (and the validator reports it)."""
    p = Path(os.path.abspath(source))
    for candidate in (p, *p.parents):
        if candidate.parent.name == "inventory" and candidate.parent != candidate:
            return candidate
    return None


def fleet_paths(source: str | Path) -> list[str]:
    """Absolute fleet paths for an inventory source; [] when it is not a swarm fleet source.

    Raises ``ValueError`` for a ``*.swarm.yml`` config that is not a mapping with a list of
    strings as ``fleet_paths``, :class:`FleetEscapes` (a ``ValueError``) for one inside a
    fleet directory or a fleet directory that links out of the repository, and ``OSError``
    when it cannot be read.
    """
    p = Path(os.path.abspath(source))
    if p.name.endswith(CONFIG_SUFFIXES):
        if fleet_root(p) is not None:
            raise FleetEscapes(
                f"{p}: a *.swarm.yml inside a fleet directory would point the inventory at other "
                "files than the fleet's; remove it (the directory is the fleet)"
            )
        from .loader import parse, read

        data, problem = read(str(p))
        if data is None:
            raise ValueError(problem.text() if problem else f"cannot read {p}")
        docs, diags = parse(str(p), data)
        if diags:
            raise ValueError("\n".join(d.text() for d in diags))
        config: Any = docs[0].data if docs else {}
        listed = config.get("fleet_paths") if isinstance(config, dict) else None
        if not isinstance(listed, list) or not all(isinstance(f, str) for f in listed):
            raise ValueError(f"{p}: fleet_paths must be a list of file or directory names")
        return [os.path.abspath(p.parent / f) for f in listed]
    root = fleet_root(p)
    if root is None:
        return []
    base = root.parent.parent
    return [str(c) for c in _inside(base, convention_paths(base, root.name))]
