"""Which fleet files an Ansible inventory source stands for (shared by the Ansible plugins).

``inventory/NAME`` (the directory, or a file in it) stands for ``inventory/NAME``,
``policies/NAME`` and ``policies/shared`` beside it (those that exist); a ``*.swarm.yml``
config lists ``fleet_paths`` relative to itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

CONFIG_SUFFIXES = (".swarm.yml", ".swarm.yaml")


def convention_paths(base: Path, name: str) -> list[Path]:
    """``inventory/NAME``, ``policies/NAME``, ``policies/shared`` under ``base`` (existing or not)."""
    return [base / "inventory" / name, base / "policies" / name, base / "policies" / "shared"]


def fleet_paths(source: str | Path) -> list[str]:
    """Absolute fleet paths for an inventory source; [] when it is not a swarm fleet source."""
    p = Path(source).resolve()
    if p.name.endswith(CONFIG_SUFFIXES):
        config: Any = yaml.safe_load(p.read_text()) or {}
        return [str((p.parent / f).resolve()) for f in config.get("fleet_paths") or []]
    inv_dir = p if p.is_dir() else p.parent
    if inv_dir.parent.name != "inventory":
        return []
    return [str(c) for c in convention_paths(inv_dir.parent.parent, inv_dir.name) if c.is_dir()]
