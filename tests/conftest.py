"""One real lab per pytest session, shared by every lab test module (root only).

Each lab module declares the lab state it needs, ``LAB_NEEDS``, and may declare the state it
leaves, ``LAB_LEAVES`` (when it declares none, or one of its tests failed, the lab is left
"dirty": in no known state):

- ``"fresh"``: the lab fleet's nodes as ``swarm lab up`` creates them, never converged;
- ``"converged"``: the lab fleet converged, every layer (Ray included), by either engine;
- ``"running"``: the lab fleet's nodes up, whatever was done to them;
- ``"spent"`` (a state a module leaves only): running, with changes no converge undoes (a
  module that needs the lab fresh or converged gets a new one).

Ray nodes get the lab's prebuilt Ray virtualenv (``swarm lab up``'s default, lab/rayvenv.py)
except those a module names in ``LAB_UNSEEDED``, which install Ray with pip at their
converge; a lab seeded otherwise than a module asks is made again.

The session records the state the lab is in and the ``lab`` fixture provides what a module
needs, reusing the current state when it matches: a fresh lab is a ``swarm lab down`` and
``up`` away, a converged one a pyinfra converge of the lab fleet. Before each module the lab
is put back in the fleet's declared shape (an idempotent ``swarm lab up --fleet lab``:
stopped nodes start again, nodes a module added are removed). So no module depends on what
an earlier one left, and any one of them runs alone. Modules run in ``LAB_ORDER`` (lower
first, 50 by default) so that the session needs few fresh labs and converges: the two
fresh-lab modules (one fresh converge per engine) first, then the modules that need the lab
converged (each leaves it converged or close to it), then those that leave it changed in
ways only a converge repairs (node layer, hostile converge, drivers: they need it only
running), the teardown check last. A
finalizer that always runs takes the lab down.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from swarm_infra.lab.state import state_dir
from tests.labkit import converge_summary, host_facts, mark_package_cache_warm, swarm

IS_ROOT = os.geteuid() == 0
STATES = ("fresh", "converged", "running")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Stable: tests keep their file order inside a module.
    items.sort(
        key=lambda item: getattr(item.module, "LAB_ORDER", 50) if item.get_closest_marker("lab") else 0
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if report.failed and item.get_closest_marker("lab"):
        item.module.__dict__["_lab_failed"] = True  # what it leaves is then unknown
    return report


@pytest.fixture(scope="session")
def lab_session() -> Iterator[dict[str, Any]]:
    """The session's lab: {"state": what the lab is in ("down", "fresh", "converged",
    "dirty"), "created": the output of the `swarm lab up` that created it, "before": the host
    facts to restore}."""
    if not IS_ROOT:
        pytest.skip("needs root (network namespaces, mounts, cgroups)")
    if (state_dir() / "state.json").exists():
        pytest.fail(f"a lab is already up ({state_dir()}); run `swarm lab down` before these tests")
    session = {"state": "down", "created": "", "unseeded": (), "before": host_facts()}
    try:
        yield session
    finally:
        swarm("lab", "down", check=False)


def _up(unseeded: tuple[str, ...]) -> str:
    return swarm("lab", "up", "--fleet", "lab", *(f"--unseeded={n}" for n in unseeded)).stdout


def _create(session: dict[str, Any], unseeded: tuple[str, ...]) -> None:
    if session["state"] != "down":
        swarm("lab", "down")
    session.update(state="fresh", created=_up(unseeded), unseeded=unseeded)


def converge_lab_fleet() -> None:
    """Converge the lab fleet with pyinfra (every layer) and check that every node converged."""
    proc = swarm("converge", "--engine", "pyinfra", check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    summary = converge_summary(proc.stdout)
    assert summary and all(row["failed"] == 0 and row["unreachable"] == 0 for row in summary.values())
    mark_package_cache_warm()


@pytest.fixture(scope="module")
def lab(lab_session: dict[str, Any], request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """The lab in the state the module declares (``LAB_NEEDS``), in the lab fleet's declared
    shape; {"up": the output of the `swarm lab up` that created this lab, "before": host
    facts}. Afterwards the session records what the module left (``LAB_LEAVES``)."""
    module = request.module
    needs = getattr(module, "LAB_NEEDS", None)
    leaves = getattr(module, "LAB_LEAVES", "dirty")
    unseeded = tuple(getattr(module, "LAB_UNSEEDED", ()))
    assert needs in STATES, f"{module.__name__}: LAB_NEEDS must be one of {STATES}, not {needs!r}"
    if (
        lab_session["state"] == "down"
        or (needs == "fresh" and lab_session["state"] != "fresh")
        or (needs != "running" and lab_session["state"] == "spent")
        or lab_session.get("unseeded", ()) != unseeded
    ):
        _create(lab_session, unseeded)
    else:
        _up(unseeded)
    if needs == "converged" and lab_session["state"] != "converged":
        converge_lab_fleet()
        lab_session["state"] = "converged"
    # Until the module is done, the lab is in no known state.
    kept, lab_session["state"] = lab_session["state"], "dirty"
    yield {"up": lab_session["created"], "before": lab_session["before"]}
    if module.__dict__.get("_lab_failed"):
        lab_session["state"] = "dirty"
    elif leaves == "unchanged":
        lab_session["state"] = kept
    elif leaves == "down":
        lab_session["state"] = "down"
    else:
        lab_session["state"] = leaves
