"""Last of the lab modules: `swarm lab down` leaves nothing behind (root; CI runs it)."""

from __future__ import annotations

import pytest

from tests.labkit import assert_nothing_left, swarm

pytestmark = [pytest.mark.root, pytest.mark.lab]
LAB_ORDER = 99
LAB_NEEDS, LAB_LEAVES = "running", "down"


def test_down_leaves_nothing_behind(lab) -> None:
    out = swarm("lab", "down").stdout
    assert "nothing left" in out
    assert_nothing_left(lab["before"])
