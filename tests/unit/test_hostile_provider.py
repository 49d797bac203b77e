"""A hostile provider's root gains nothing beyond its own nodes (issue #38): SSH targets,
mesh endpoints, WireGuard key bindings and the pull agent's signers.

Each case is what such a provider would declare or report; each was accepted before the
issue's change (the corpus files under tests/data/invalid and tests/data/hostile show the
validation rules at their lines; these show what they say, and the converge-time checks).
"""

from __future__ import annotations

import io
import json
import shutil
import socket
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from swarm_infra import validate
from swarm_infra.engines import keyrecord
from swarm_infra.engines.endpoints import endpoint_resolution_problems
from swarm_infra.engines.inventory import InventorySourceError, fleet_state, inventory_hosts
from swarm_infra.engines.pyinfra import operations as O
from swarm_infra.engines.pyinfra.runner import Reporter, _key_taken, run
from swarm_infra.resolve import desired_state, load_fleet
from swarm_infra.resolve.checks.network import endpoint_problem
from swarm_infra.resolve.controller import controller_peer_keys, controller_state
from swarm_infra.resolve.files import wireguard_conf, wireguard_peer_keys

from .conftest import ROOT, fleet_dirs
from .role_reader import run_layer
from .test_node_files import NODES, key

BASE = ROOT / "tests" / "data" / "base" / "fleet.yaml"


def _fleet(tmp_path: Path, extra: str) -> Path:
    """An inventory directory ``inventory/t`` holding the base fleet and ``extra``."""
    d = tmp_path / "inventory" / "t"
    d.mkdir(parents=True)
    shutil.copy(BASE, d / "fleet.yaml")
    (d / "extra.yaml").write_text(extra)
    return d


def _node(name: str, site: str, address: str, spec: str = "") -> str:
    return (
        f"---\napiVersion: swarm.io/v1alpha1\nkind: Node\nmetadata: {{name: {name}}}\nspec:\n"
        f"  site: {site}\n  address: {address}\n  roles: [cpu-worker]\n"
        f"  hardware: {{cpus: 8, memory_gib: 64}}\n{spec}"
    )


# ------------------------------------------------------------------ 2. SSH targets


def test_a_newcomer_named_first_cannot_take_the_heads_ssh_target(tmp_path: Path) -> None:
    """n1 is on its default target (its own address, 10.1.0.11); a new node whose name sorts
    before it declares that address. Before #38 the check saw the newcomer first and n1's
    default was never compared: the fleet validated."""
    fleet = _fleet(tmp_path, _node("a-new", "s1", "10.1.0.19", "  ssh: {host: 10.1.0.11}\n"))
    errors = validate([str(fleet)]).report.errors
    assert [(e.rule, e.path) for e in errors] == [("node.ssh-target-duplicate", "$.spec.ssh.host")]
    assert errors[0].file.endswith("extra.yaml")
    assert "a-new" in errors[0].message and "n1 (its own address)" in errors[0].message
    assert "10.1.0.11:22" in errors[0].message


def test_ssh_targets_are_judged_whatever_the_order(tmp_path: Path) -> None:
    """The same newcomer, named after n1 or before it: one error, on the newcomer."""
    for name in ("a-new", "z-new"):
        fleet = _fleet(tmp_path / name, _node(name, "s1", "10.1.0.19", "  ssh: {host: 10.1.0.11}\n"))
        errors = validate([str(fleet)]).report.errors
        assert [(e.rule, e.file.endswith("extra.yaml")) for e in errors] == [
            ("node.ssh-target-duplicate", True)
        ]


# ------------------------------------------------------------------ 5. mesh endpoints


@pytest.mark.parametrize(
    "endpoint",
    [
        "localhost",
        "LocalHost:51820",
        "gpu.localhost",
        "ip6-localhost",
        "ip6-loopback",
        "0x7f000001",
        "127.1",
        "2130706433",
        "0177.0.0.1",
        "0",
        "0.0.0.0",
        "169.254.169.254",
        "0xa9fea9fe",
        "224.0.0.1",
    ],
)
def test_every_spelling_of_the_machine_itself_is_refused(endpoint: str) -> None:
    assert endpoint_problem(endpoint), endpoint


def test_a_routable_endpoint_passes_and_a_numeric_one_in_disguise_does_not() -> None:
    assert endpoint_problem("gpu.provider.example:51820") is None
    assert endpoint_problem("203.0.113.9") is None
    assert "203.0.113.9 written another way" in (endpoint_problem("0xcb.0.113.9") or "")


def _getaddrinfo(table: dict[str, str]) -> Any:
    """A resolver that answers as /etc/hosts with ``table`` would (name -> address)."""

    def resolve(host: str, port: Any, family: int = 0, type: int = 0, *_: Any) -> list[tuple[Any, ...]]:
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        address = table[host]
        fam = socket.AF_INET6 if ":" in address else socket.AF_INET
        return [(fam, type, 17, "", (address, 0))]

    return resolve


NAMED = _node("n3", "s1", "10.1.0.13", "  mesh: {endpoint: gpu.provider.example}\n")


@pytest.mark.parametrize("address", ["127.0.0.1", "::1", "169.254.169.254", "0.0.0.0", "fe80::1"])
def test_an_endpoint_name_that_resolves_to_the_machine_itself_refuses_the_converge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, address: str
) -> None:
    """The name passes validation (it could be anyone's); at converge time it resolves to
    ``address``: the Ansible inventory refuses the fleet and pyinfra runs nothing, each
    naming the node, its name and the address."""
    fleet = _fleet(tmp_path, NAMED)
    state = desired_state(load_fleet([str(fleet)]))
    assert any(
        p["endpoint"] == "gpu.provider.example:51820"
        for n in state["nodes"].values()
        for p in n["mesh"]["peers"]
    ), "the name reaches a peer's configuration"
    monkeypatch.setattr(socket, "getaddrinfo", _getaddrinfo({"gpu.provider.example": address}))
    problems = endpoint_resolution_problems(state["nodes"])
    assert list(problems) == ["n3"]
    assert "gpu.provider.example resolves to " + address in problems["n3"]
    with pytest.raises(InventorySourceError, match=r"node n3.s mesh endpoint gpu\.provider\.example"):
        fleet_state(fleet)
    out = io.StringIO()
    reporter = Reporter(out)
    assert run("mesh", inventory_hosts(state), state["rollout"], reporter) == 1
    assert reporter.hosts["n3"].failed == 1 and "resolves to" in out.getvalue()
    assert set(reporter.hosts) == {"n3"}  # nothing ran on any host


def test_an_endpoint_name_that_resolves_to_a_peer_or_not_at_all_is_fine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fleet = _fleet(tmp_path, NAMED)
    for table in ({"gpu.provider.example": "203.0.113.9"}, {}):
        monkeypatch.setattr(socket, "getaddrinfo", _getaddrinfo(table))
        _, state = fleet_state(fleet)
        assert endpoint_resolution_problems(state["nodes"]) == {}


# ------------------------------------------- 4. a copied WireGuard key: the first binding
# lab-gpu-2 (behind NAT, reached by the controller over the mesh) was recorded first with
# its key; lab-gpu-1 stands for a newcomer whose root reports that same public key (a public
# key is public: anyone can copy it). Before #38 the record took both and the controller's
# peers and every node's peer list dropped both: the victim was cut off.
VICTIM, NEWCOMER = "lab-gpu-2", "lab-gpu-1"
STOLEN = key(VICTIM)


def test_the_wireguard_role_refuses_the_newcomer_naming_both_nodes() -> None:
    node = json.loads(json.dumps(NODES[NEWCOMER]))
    registered = {
        "wireguard_module": {"stat": {"exists": False}},
        "wireguard_pubkey": {"stdout": STOLEN, "stderr": ""},
    }
    hostvars = {
        "swarm": node,
        "inventory_hostname": NEWCOMER,
        "hostvars": {},
        "wireguard_key_record": {VICTIM: STOLEN},
    }
    fails = [
        c.args["msg"]
        for c in run_layer("mesh", hostvars, {"all"}, registered)
        if c.module == "ansible.builtin.fail"
    ]
    assert len(fails) == 1, fails
    assert fails[0].startswith(
        f"{NEWCOMER}: WireGuard public key refused: it reports the public key {STOLEN}"
    )
    assert f"node {VICTIM} holds (recorded first)" in fails[0] and f"{VICTIM} keeps it" in fails[0]
    # Its own key passes.
    registered["wireguard_pubkey"] = {"stdout": key(NEWCOMER), "stderr": ""}
    assert not [
        c for c in run_layer("mesh", hostvars, {"all"}, registered) if c.module == "ansible.builtin.fail"
    ]


class _State:
    """Stands for pyinfra's State (the operations keep per-state data in weak maps)."""


def test_pyinfra_takes_the_newcomers_key_back_before_any_peer_uses_it() -> None:
    state = _State()
    O.key_check(state).recorded = {VICTIM: STOLEN}
    O._publish(state, NEWCOMER, STOLEN)  # the operation's own checks: no record for it
    O._publish(state, VICTIM, STOLEN)
    newcomer = SimpleNamespace(name=NEWCOMER, data={"swarm": NODES[NEWCOMER]})
    victim = SimpleNamespace(name=VICTIM, data={"swarm": NODES[VICTIM]})
    problem = _key_taken(state, newcomer)
    assert problem and f"node {VICTIM} holds (recorded first)" in problem and NEWCOMER in problem
    assert _key_taken(state, victim) is None
    assert O.public_keys(state) == {VICTIM: STOLEN}


def test_the_victim_keeps_its_key_in_the_record_at_the_controller_and_on_every_peer() -> None:
    recorded = {VICTIM: STOLEN}
    declared = sorted(NODES)
    # The record: the newcomer's copy is not recorded; the victim keeps its binding.
    record = keyrecord.updated(recorded, {NEWCOMER: STOLEN, VICTIM: STOLEN}, declared)
    assert record == {VICTIM: STOLEN}
    # The controller's peer of the victim stays (it reaches the NAT'd victim over the mesh).
    ctl = controller_state(load_fleet([str(p) for p in fleet_dirs("lab")]))
    assert ctl is not None and {VICTIM, NEWCOMER} <= {p["name"] for p in ctl["peers"]}
    assert controller_peer_keys(ctl, record) == {VICTIM: STOLEN}
    # A node that recorded the victim's key before keeps it when the newcomer reports it.
    node = NODES["lab-head-1"]
    peers = wireguard_peer_keys(node, {VICTIM: STOLEN}, {NEWCOMER: STOLEN})
    assert peers == {VICTIM: STOLEN}
    assert f"PublicKey = {STOLEN}" in wireguard_conf(node, peers)
