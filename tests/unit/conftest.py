from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def root() -> Path:
    return ROOT


def fleet_dirs(name: str) -> list[Path]:
    return [ROOT / "inventory" / name, ROOT / "policies" / name, ROOT / "policies" / "shared"]
