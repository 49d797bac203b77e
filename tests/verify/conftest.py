"""testinfra verification of every node against its resolved NodeState.

    pytest tests/verify --ansible-inventory=inventory/lab            # every node
    pytest tests/verify --ansible-inventory=inventory/lab --hosts=lab-gpu-1
    swarm verify                                                      # the same, with a table

The fleet is read from the inventory (``--swarm-fleet``, default the
``--ansible-inventory`` path) through the swarm_infra library, so the expected values are
the NodeState's. Connections are the engines' (swarm_infra.engines.inventory: the declared
SSH address, or a running lab's connection file with its key; host keys checked strictly), over
testinfra's SSH backend with one shared master connection per node.
Each test is one ``Check`` (swarm_infra.verify.checks), with id ``node/layer/key``. The
checks are read before the first test reports, up to ``--swarm-forks`` nodes at once
(swarm_infra.verify.runner: in waves, each node's checks in order); the tests then report
each outcome in the checks' order.
A failed check records ``drift`` (node, layer, key, desired, actual) in the test's
``user_properties`` (and so in JUnit XML); a check whose prerequisites failed is skipped
as "blocked".
"""

from __future__ import annotations

import shlex
import threading
from pathlib import Path
from typing import Any

import pytest
import testinfra

from swarm_infra.engines.inventory import fleet_state, inventory_hosts, ssh_option_args
from swarm_infra.lab.state import read_connections
from swarm_infra.verify import readers
from swarm_infra.verify.checks import Check, check_waves
from swarm_infra.verify.runner import DEFAULT_FORKS, Outcome, run_waves, where


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--swarm-fleet",
        metavar="INVENTORY",
        help="fleet inventory (inventory/NAME or *.swarm.yml); default: --ansible-inventory",
    )
    parser.addoption(
        "--swarm-forks",
        type=int,
        default=DEFAULT_FORKS,
        metavar="N",
        help=f"most nodes read at once (default: {DEFAULT_FORKS}, as ansible.cfg's forks)",
    )


def _inventory(config: pytest.Config) -> str | None:
    return config.getoption("swarm_fleet") or config.getoption("ansible_inventory")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "verify: checks a node against its declared state")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "check" not in metafunc.fixturenames:
        return
    inventory = _inventory(metafunc.config)
    if not inventory:
        raise pytest.UsageError("tests/verify needs --ansible-inventory=inventory/NAME (or --swarm-fleet)")
    # The engines' state: a controller the fleet declares without its key has this
    # controller's own in the nodes' peer lists, as push mode wrote it (engines/controller.py).
    _, state = fleet_state(Path(inventory))
    metafunc.config._swarm_state = state
    wanted = [h.split("://")[-1] for h in metafunc.config.getoption("hosts") or []]
    waves = check_waves(state, wanted or None)
    metafunc.config._swarm_waves = waves
    checks = [c for wave in waves for c in wave]
    metafunc.parametrize("check", checks, ids=[c.id for c in checks])


def pytest_collection_finish(session: pytest.Session) -> None:
    """The checks to read: those of the collected tests (after -k or node id selection)."""
    chosen = {
        item.callspec.params["check"].id
        for item in session.items
        if hasattr(item, "callspec") and "check" in item.callspec.params
    }
    waves = getattr(session.config, "_swarm_waves", [])
    session.config._swarm_waves = [[c for c in wave if c.id in chosen] for wave in waves]


@pytest.fixture(scope="session")
def swarm_state(request: pytest.FixtureRequest) -> dict[str, Any]:
    return request.config._swarm_state


@pytest.fixture(scope="session")
def node_host(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """node name -> testinfra Host (one SSH master connection per node, reused by every
    command: ControlMaster/ControlPersist). Safe to call from the runner's threads."""
    conns = {h.name: h.connection for h in inventory_hosts(request.config._swarm_state, read_connections())}
    masters = tmp_path_factory.mktemp("ssh-masters")
    hosts: dict[str, testinfra.host.Host] = {}
    lock = threading.Lock()

    def get(name: str) -> testinfra.host.Host:
        with lock:
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
def verified(request: pytest.FixtureRequest, node_host) -> dict[str, Outcome]:
    """Every collected check's outcome, read once for the session (runner.run_waves)."""
    state = request.config._swarm_state
    # Per node the commands run on, a memo of multi-item reads (sysctl.d file, GPU diff, the
    # head's list of Ray nodes): one group, one thread, at a time per node.
    caches: dict[str, dict[str, Any]] = {}
    keys: dict[str, str | None] = {}
    key_locks: dict[str, threading.Lock] = {}
    locks_lock = threading.Lock()

    def key_of(name: str) -> str | None:
        """A node's public key, read once, whichever peers check asks first (the others
        wait on that node's lock, not on every node's)."""
        with locks_lock:
            lock = key_locks.setdefault(name, threading.Lock())
        if name not in state["nodes"]:
            return None  # the controller: its key is the fleet's or this controller's, or unknown
        with lock:
            if name not in keys:
                key_file = state["nodes"][name]["layout"]["files"]["wireguard_key"]["path"]
                try:
                    keys[name] = readers.public_key(node_host(name), key_file)
                except Exception:  # the peer node is unreachable: that peer's problem, not the check's
                    keys[name] = None
            return keys[name]

    def read(check: Check, passed: Any) -> Any:
        host = node_host(where(check))
        cache = caches.setdefault(where(check), {})
        if check.kind == "wg_peers":
            key_of(check.node)  # its own key first, on its own thread: its peers' checks need it
            # A peer whose own tunnel drifted is that drift, not one of this node's too.
            down = frozenset(
                p
                for p, v in check.args["peers"].items()
                if v["service"] and passed.get(v["service"]) is False
            )
            return readers.wg_peers(host, check, cache, key_of, down)
        if check.kind == "gpu":
            return readers.gpu(host, check, cache, state["nodes"][check.node]["gpu"])
        return getattr(readers, check.kind)(host, check, cache)

    return run_waves(request.config._swarm_waves, read, request.config.getoption("swarm_forks"))
