from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def root() -> Path:
    return ROOT


def fleet_dirs(name: str) -> list[Path]:
    return [ROOT / "inventory" / name, ROOT / "policies" / name, ROOT / "policies" / "shared"]


@pytest.fixture(autouse=True, scope="session")
def _known_hosts_dir(tmp_path_factory: pytest.TempPathFactory):
    """The known_hosts files the inventory makes from a fleet (engines/inventory.py) go to a
    temporary directory, not the user's ~/.cache (subprocesses inherit it)."""
    patch = pytest.MonkeyPatch()
    patch.setenv("SWARM_KNOWN_HOSTS_DIR", str(tmp_path_factory.mktemp("known_hosts")))
    yield
    patch.undo()
