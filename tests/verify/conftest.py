"""testinfra verification of every node against its resolved NodeState.

    pytest tests/verify --ansible-inventory=inventory/lab            # every node
    pytest tests/verify --ansible-inventory=inventory/lab --hosts=lab-gpu-1
    swarm verify                                                      # the same, with a table

The fleet is read from the inventory (``--swarm-fleet``, default the
``--ansible-inventory`` path) through the swarm_infra library, so the expected values are
the NodeState's. Connections are the engines' (swarm_infra.engines.inventory: the declared
SSH address, or a running lab's connection file with its key; host keys checked strictly), over
testinfra's SSH backend with one shared master connection per node.
Each test is one ``Check`` (swarm_infra.verification), with id ``node/layer/key``.
A failed check records ``drift`` (node, layer, key, desired, actual) in the test's
``user_properties`` (and so in JUnit XML); a check whose prerequisites failed is skipped
as "blocked".
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
import testinfra

from swarm_infra.engines.inventory import inventory_hosts, ssh_option_args
from swarm_infra.fleet.sources import fleet_paths
from swarm_infra.lab.state import read_connections
from swarm_infra.resolve import desired_state, load_fleet
from swarm_infra.verify.checks import checks_for


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--swarm-fleet",
        metavar="INVENTORY",
        help="fleet inventory (inventory/NAME or *.swarm.yml); default: --ansible-inventory",
    )


def _inventory(config: pytest.Config) -> str | None:
    return config.getoption("swarm_fleet") or config.getoption("ansible_inventory")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "verify: checks a node against its declared state")
    config._swarm_outcomes = {}  # check id -> passed?


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "check" not in metafunc.fixturenames:
        return
    inventory = _inventory(metafunc.config)
    if not inventory:
        raise pytest.UsageError("tests/verify needs --ansible-inventory=inventory/NAME (or --swarm-fleet)")
    state = desired_state(load_fleet(fleet_paths(Path(inventory))))
    metafunc.config._swarm_state = state
    wanted = [h.split("://")[-1] for h in metafunc.config.getoption("hosts") or []]
    checks = checks_for(state, wanted or None)
    metafunc.parametrize("check", checks, ids=[c.id for c in checks])


@pytest.fixture(scope="session")
def swarm_state(request: pytest.FixtureRequest) -> dict[str, Any]:
    return request.config._swarm_state


@pytest.fixture(scope="session")
def node_host(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """node name -> testinfra Host (one SSH master connection per node, reused by every
    command: ControlMaster/ControlPersist)."""
    conns = {h.name: h.connection for h in inventory_hosts(request.config._swarm_state, read_connections())}
    masters = tmp_path_factory.mktemp("ssh-masters")
    hosts: dict[str, testinfra.host.Host] = {}

    def get(name: str) -> testinfra.host.Host:
        if name not in hosts:
            c = conns[name]
            # testinfra pastes these into a shell command line: quoted.
            extra = ["-o", "BatchMode=yes", *ssh_option_args(c)]
            hosts[name] = testinfra.get_host(
                f"ssh://{c.user}@{c.host}:{c.port}",
                ssh_identity_file=c.private_key_file,
                ssh_extra_args=shlex.join(extra),
                controlpath=str(masters / name),
            )
        return hosts[name]

    return get


@pytest.fixture(scope="session")
def node_cache() -> dict[str, dict[str, Any]]:
    """Per-node memo of multi-item reads (sysctl.d file, wg dump, GPU diff) for one run."""
    return {}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    check = getattr(item, "callspec", None) and item.callspec.params.get("check")
    if check is not None and report.when == "call":
        item.config._swarm_outcomes[check.id] = report.passed
    return report
