"""One real lab per pytest session, shared by every lab test module (root only).

``swarm lab up`` runs once; each module that uses the ``lab`` fixture starts from the lab
fleet's declared shape (an idempotent ``swarm lab up --fleet lab``: stopped nodes start
again, nodes a module added are removed), and modules run in ``LAB_ORDER`` (lower first, 50
by default), so the lab's own tests see fresh nodes, convergence comes before the suites
that need a converged mesh, and the teardown check comes last. A finalizer that always runs
takes the lab down.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from swarm_infra.lab.state import state_dir
from tests.labkit import host_facts, swarm

IS_ROOT = os.geteuid() == 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Stable: tests keep their file order inside a module.
    items.sort(
        key=lambda item: getattr(item.module, "LAB_ORDER", 50) if item.get_closest_marker("lab") else 0
    )


@pytest.fixture(scope="session")
def lab_session() -> Iterator[dict[str, Any]]:
    """The session's lab: {"first_up": output of the first `swarm lab up`, "before": the
    host facts to restore}."""
    if not IS_ROOT:
        pytest.skip("needs root (network namespaces, mounts, cgroups)")
    if (state_dir() / "state.json").exists():
        pytest.fail(f"a lab is already up ({state_dir()}); run `swarm lab down` before these tests")
    before = host_facts()
    try:
        up = swarm("lab", "up", "--fleet", "lab")
        yield {"first_up": up.stdout, "before": before, "modules": 0}
    finally:
        swarm("lab", "down", check=False)


@pytest.fixture(scope="module")
def lab(lab_session: dict[str, Any]) -> dict[str, Any]:
    """The lab in the lab fleet's declared shape for this module; {"up": this module's
    `swarm lab up` output (the session's first for the first module), "before": host facts}."""
    lab_session["modules"] += 1
    if lab_session["modules"] == 1:
        return {"up": lab_session["first_up"], "before": lab_session["before"]}
    up = swarm("lab", "up", "--fleet", "lab")
    return {"up": up.stdout, "before": lab_session["before"]}
