"""A hostile provider's root gains nothing beyond its own nodes (issue #38): SSH targets,
mesh endpoints, WireGuard key bindings and the pull agent's signers.

Each case is what such a provider would declare or report; each was accepted before the
issue's change (the corpus files under tests/data/invalid and tests/data/hostile show the
validation rules at their lines; these show what they say, and the converge-time checks).
"""

from __future__ import annotations

import io
import shutil
import socket
from pathlib import Path
from typing import Any

import pytest

from swarm_infra import validate
from swarm_infra.engines.endpoints import endpoint_resolution_problems
from swarm_infra.engines.inventory import InventorySourceError, fleet_state, inventory_hosts
from swarm_infra.engines.pyinfra.runner import Reporter, run
from swarm_infra.resolve import desired_state, load_fleet
from swarm_infra.resolve.checks.network import endpoint_problem

from .conftest import ROOT

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
