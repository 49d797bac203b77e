"""WireGuard peers from the keys recorded in the fleet (issue #27, "the mesh without a
controller in the middle"): each Node's ``spec.mesh.public_key`` reaches every peer's
NodeState, so a node's WireGuard configuration comes from the repository alone (a pull node
needs no controller), and a node holding another key than its recorded one is refused by
both engines, whatever the controller recorded or the operator accepts (the fleet is
reviewed; what a node reports never replaces it: docs/design.md, trust model)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from swarm_infra.engines.pyinfra import operations as O
from swarm_infra.resolve import desired_state, load_fleet
from swarm_infra.resolve.files import wireguard_conf, wireguard_peer_keys
from swarm_infra.resolve.keys import key_change_problem, wireguard_key_problem
from swarm_infra.resolve.mesh import mesh_apply
from tests.unit.pullfleet import CONTROLLER_KEY, copy_lab, declare_pull, record_controller_key
from tests.unit.role_reader import run_layer
from tests.unit.test_node_files import NODES as UNKEYED
from tests.unit.test_node_files import key
from tests.unit.test_review import change, flags, line_of, render, replace

# base_repo and repo: tests/unit/conftest.py's (the example fleet committed, a copy per test).

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "plugins" / "filter"))
import swarm as swarm_filters  # noqa: E402  (the Ansible filter plugin, as Ansible loads it)


def recorded(name: str) -> str:
    """The key the fleet records for node ``name``: not :func:`key` (what other tests make
    nodes report), so a key taken from a node's report instead shows."""
    return key(f"recorded in the fleet: {name}")


def keyed_fleet(tmp: Path, keyed: dict[str, str], pull: tuple[str, ...] = ()) -> Path:
    """The lab fleet copied under ``tmp`` with ``spec.mesh.public_key`` set on the nodes of
    ``keyed`` (name -> key; ``controller``: the Mesh's ``spec.controller.public_key``) and the
    ``pull`` nodes converging by pull (tests/unit/pullfleet.py: the Rollout's pull settings, the
    controller's key recorded); returns the fleet's root."""
    copy_lab(tmp)
    path = tmp / "inventory/lab/nodes.yaml"
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    for doc in docs:
        if doc["metadata"]["name"] in keyed:
            doc["spec"].setdefault("mesh", {})["public_key"] = keyed[doc["metadata"]["name"]]
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    if pull:
        declare_pull(tmp, pull, remote="https://git.example.org/swarm/fleet.git", interval_s=600)
    if "controller" in keyed:
        record_controller_key(tmp / "policies/lab", keyed["controller"])
    return tmp


def state_of(root: Path) -> dict[str, Any]:
    a = load_fleet(
        [root / "inventory/lab", root / "policies/lab", root / "policies/shared"]
    )  # raises on errors
    return json.loads(json.dumps(desired_state(a)))  # as the inventory plugin hands it over


ALL = {n: recorded(n) for n in UNKEYED}
# What the keyed pull fleet records for each peer: every node's key and the controller's
# (declare_pull records it: a pull node computes its peers from the repository alone).
RECORDED = {**ALL, "controller": CONTROLLER_KEY}


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every lab node's key recorded; lab-gpu-2 (behind NAT) converges by pull."""
    return state_of(keyed_fleet(tmp_path_factory.mktemp("keyed"), ALL, pull=("lab-gpu-2",)))["nodes"]


def test_every_peer_of_every_node_has_the_key_recorded_in_the_fleet(keyed: dict[str, Any]) -> None:
    assert len(keyed) == 3 and keyed["lab-gpu-2"]["pull"] is not None
    for name, node in keyed.items():
        mesh = node["mesh"]
        assert mesh["public_key"] == ALL[name]
        assert mesh["peers"], name
        for peer in mesh["peers"]:
            assert peer["public_key"] == RECORDED[peer["name"]]


@pytest.mark.parametrize("name", ["lab-head-1", "lab-gpu-1", "lab-gpu-2"])
def test_the_wireguard_config_comes_from_the_repository_alone(keyed: dict[str, Any], name: str) -> None:
    """No key reported by any node, none recorded on the node or on the controller: every
    peer is a [Peer] with its recorded key (what a pull node applies, no controller)."""
    node = keyed[name]
    peers = [p["name"] for p in node["mesh"]["peers"]]
    keys = wireguard_peer_keys(node, {}, {})
    assert keys == {p: RECORDED[p] for p in sorted(peers)}
    text = wireguard_conf(node, keys)
    assert "not known yet" not in text
    for p in peers:
        assert f"[Peer]\n# {p}\nPublicKey = {RECORDED[p]}\n" in text


def test_the_recorded_key_wins_over_what_nodes_report_and_the_peers_file(keyed: dict[str, Any]) -> None:
    node = keyed["lab-gpu-1"]
    peers = [p["name"] for p in node["mesh"]["peers"]]
    reported = {p: key(p) for p in peers}  # well-formed, not the recorded ones
    on_node = {p: key(f"old {p}") for p in peers}
    assert wireguard_peer_keys(node, on_node, reported) == {p: RECORDED[p] for p in sorted(peers)}


def test_unrecorded_peers_keep_todays_keys_and_none_takes_a_recorded_one(tmp_path: Path) -> None:
    """Only lab-head-1's key is recorded: lab-gpu-1's peer lab-gpu-2 is learnt as before (this
    run's key over the peers file), and a key reported for it that is lab-head-1's recorded
    key is left out (two peers with one key would take each other's traffic)."""
    node = state_of(keyed_fleet(tmp_path, {"lab-head-1": ALL["lab-head-1"]}))["nodes"]["lab-gpu-1"]
    by_name = {p["name"]: p for p in node["mesh"]["peers"]}
    assert by_name["lab-head-1"]["public_key"] == ALL["lab-head-1"]
    assert by_name["lab-gpu-2"]["public_key"] is None and node["mesh"]["public_key"] is None
    assert wireguard_peer_keys(node, {"lab-gpu-2": key("old")}, {"lab-gpu-2": key("lab-gpu-2")}) == {
        "lab-head-1": ALL["lab-head-1"],
        "lab-gpu-2": key("lab-gpu-2"),
    }
    assert wireguard_peer_keys(node, {"lab-gpu-2": key("old")}, {}) == {
        "lab-head-1": ALL["lab-head-1"],
        "lab-gpu-2": key("old"),
    }
    assert wireguard_peer_keys(node, {}, {"lab-gpu-2": ALL["lab-head-1"]}) == {
        "lab-head-1": ALL["lab-head-1"]
    }


def test_a_fleet_without_recorded_keys_resolves_as_before() -> None:
    for node in UNKEYED.values():
        assert node["mesh"]["public_key"] is None
        assert {p["public_key"] for p in node["mesh"]["peers"]} == {None}
    node = UNKEYED["lab-gpu-1"]
    assert wireguard_peer_keys(node, {}, {}) == {}


def test_a_changed_recorded_key_is_a_peers_change_applied_without_restart(
    keyed: dict[str, Any], tmp_path: Path
) -> None:
    """Recording lab-gpu-2's new key changes its peers' NodeState (``wg syncconf``, tunnels
    stay up), and lab-gpu-2's own (the key it must hold)."""
    moved = state_of(keyed_fleet(tmp_path, {**ALL, "lab-gpu-2": key("reinstalled")}, pull=("lab-gpu-2",)))
    for name in ("lab-head-1", "lab-gpu-1"):
        before, after = keyed[name]["mesh"], moved["nodes"][name]["mesh"]
        assert mesh_apply(before, after).syncconf and not mesh_apply(before, after).restart
        (peer,) = [p for p in after["peers"] if p["name"] == "lab-gpu-2"]
        assert peer["public_key"] == key("reinstalled")
    assert moved["nodes"]["lab-gpu-2"]["mesh"]["public_key"] == key("reinstalled")


# ------------------------------------------------- the node's own key against the recorded one
OTHER = key("another machine")


def test_key_change_problem_with_a_recorded_key() -> None:
    mine = ALL["lab-gpu-2"]
    assert wireguard_key_problem(OTHER) is None and mine != OTHER
    assert key_change_problem(mine, None, False, mine) is None
    assert key_change_problem("", None, False, mine) is None  # check mode on a fresh node
    # The reviewed key wins over the controller's trust-on-first-use record.
    assert key_change_problem(mine, OTHER, False, mine) is None
    for controller, accepted in ((None, False), (OTHER, False), (OTHER, True), (mine, True)):
        problem = key_change_problem(OTHER, controller, accepted, mine)
        assert problem and OTHER in problem and mine in problem
        assert "recorded in the fleet" in problem and "spec.mesh.public_key" in problem


def _role_fails(node: dict[str, Any], reported: str, **extra: Any) -> tuple[list[str], list[Any]]:
    registered = {
        "wireguard_module": {"stat": {"exists": False}},
        "wireguard_pubkey": {"stdout": reported, "stderr": ""},
    }
    hostvars = {"swarm": node, "inventory_hostname": node["name"], "hostvars": {}, **extra}
    calls = run_layer("mesh", hostvars, {"all"}, registered)
    return [c.args["msg"] for c in calls if c.module == "ansible.builtin.fail"], calls


def test_the_wireguard_role_refuses_a_node_holding_another_key_than_recorded(keyed: dict[str, Any]) -> None:
    node = keyed["lab-gpu-2"]
    mine = ALL["lab-gpu-2"]
    fails, _ = _role_fails(node, OTHER)
    assert len(fails) == 1
    assert fails[0].startswith(f"lab-gpu-2: WireGuard public key refused: it holds the public key {OTHER}")
    assert mine in fails[0] and "recorded in the fleet" in fails[0]
    # Neither the controller's record nor an accepted change lets it in.
    fails, _ = _role_fails(
        node, OTHER, wireguard_key_record={"lab-gpu-2": OTHER}, wireguard_key_change_accepted=["lab-gpu-2"]
    )
    assert len(fails) == 1
    # Its recorded key passes, even where the controller recorded another one before.
    assert not _role_fails(node, mine)[0]
    assert not _role_fails(node, mine, wireguard_key_record={"lab-gpu-2": OTHER})[0]


def test_the_wireguard_role_of_a_pull_node_writes_every_peer_from_the_fleet(keyed: dict[str, Any]) -> None:
    """lab-gpu-2 applies by itself (``-c local``): no other host in the play, no peers file,
    no controller record; its wg-quick configuration still has every peer."""
    node = keyed["lab-gpu-2"]
    fails, calls = _role_fails(node, ALL["lab-gpu-2"])
    assert not fails
    path = node["layout"]["files"]["wireguard_conf"]["path"]
    (item,) = [
        i for c in calls if c.module.endswith("swarm_files") for i in c.args["items"] if i["path"] == path
    ]
    for peer in node["mesh"]["peers"]:
        assert f"PublicKey = {RECORDED[peer['name']]}\n" in item["content"]
    assert "not known yet" not in item["content"]


def test_the_peer_keys_filter_uses_the_recorded_key_over_the_plays_hostvars(keyed: dict[str, Any]) -> None:
    node = keyed["lab-head-1"]
    hostvars = {p["name"]: {"wireguard_public_key": key(p["name"])} for p in node["mesh"]["peers"]}
    keys = swarm_filters.swarm_wireguard_peer_keys(node, {}, hostvars)
    assert dict(keys) == {p["name"]: RECORDED[p["name"]] for p in node["mesh"]["peers"]}


class _State:
    """Stands for pyinfra's State (the operations keep each State's Run in a weak map)."""


def test_pyinfra_refuses_a_node_holding_another_key_than_recorded() -> None:
    mine = ALL["lab-gpu-2"]
    state = _State()
    O.key_check(state).recorded = {"lab-gpu-2": OTHER}
    O.key_check(state).accepted = frozenset({"lab-gpu-2"})
    with pytest.raises(O.OperationError, match="lab-gpu-2: WireGuard public key refused: it holds") as exc:
        O._publish(state, "lab-gpu-2", OTHER, mine)
    assert "recorded in the fleet" in str(exc.value)
    assert O.public_keys(state) == {}
    O._publish(state, "lab-gpu-2", mine, mine)
    assert O.public_keys(state) == {"lab-gpu-2": mine}


def test_pyinfra_checks_the_key_read_from_the_node_against_the_recorded_one(
    keyed: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    node = keyed["lab-gpu-2"]
    path = node["layout"]["files"]["wireguard_key"]["path"]
    monkeypatch.setattr(O.mesh, "snapshot", lambda: {"public_keys": {path: OTHER}})
    monkeypatch.setattr(O.mesh, "host", SimpleNamespace(state=_State(), name="lab-gpu-2"))
    with pytest.raises(O.OperationError, match="recorded in the fleet"):
        list(O.wireguard_key._inner(path=path, declared=node["mesh"]["public_key"]))


def test_the_pyinfra_mesh_layer_passes_the_recorded_key(
    keyed: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from swarm_infra.engines.pyinfra import layers as L

    node = keyed["lab-gpu-2"]
    seen: dict[str, Any] = {}

    class Ops:
        def snapshot(self) -> dict[str, Any]:
            return {"modules": {}}

        def wireguard_key(self, **kw: Any) -> None:
            seen.update(kw)

        def __getattr__(self, name: str) -> Any:
            return lambda *a, **kw: None

    monkeypatch.setattr(L, "ops", Ops())
    monkeypatch.setattr(L, "_node", lambda: node)
    monkeypatch.setattr(L, "directory", lambda *a, **kw: None)
    L.mesh_keys()
    assert seen["declared"] == ALL["lab-gpu-2"]


def test_converge_refuses_accepting_a_change_of_a_key_the_fleet_records(
    keyed: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import argparse

    from swarm_infra.cli import converge

    monkeypatch.setenv("SWARM_STATE_DIR", str(tmp_path))
    state: Any = {"nodes": keyed}
    args = argparse.Namespace(accept_key_change=["lab-gpu-2"])
    assert converge._key_check(args, Path("inventory/lab"), state) == converge.EXIT_INVALID
    err = capsys.readouterr().err
    assert "--accept-key-change lab-gpu-2: the fleet records the node's WireGuard public key" in err
    assert "nothing was run" in err
    # Where the fleet records none, the change is the operator's to accept, as before.
    unkeyed: Any = {"nodes": UNKEYED}
    assert converge._key_check(args, Path("inventory/lab"), unkeyed).accepted == {"lab-gpu-2"}


# ------------------------------------------------------------------------- the review
def test_review_flags_a_recorded_key_added_changed_or_removed_and_shows_the_peers(
    repo: Path,
) -> None:
    """The example fleet (test_review's repository): fra1-gpu-01's key recorded, changed,
    removed. Each is a ``mesh-key-changed`` warning at the key's line, and each peer's
    entry shows the key (applied with ``wg syncconf``, no restart)."""
    path, node = "inventory/example/nodes/fra1.yaml", "fra1-gpu-01"
    endpoint = "mesh: {endpoint: 203.0.113.21}"
    first, second = recorded(node), key("fra1-gpu-01 reinstalled")

    def record(value: str) -> Callable[[], None]:
        return lambda: replace(repo, path, endpoint, f"mesh: {{endpoint: 203.0.113.21, public_key: {value}}}")

    _, after, r = change(repo, record(first))
    (flag,) = flags(r)["mesh-key-changed"]
    assert flag.action == "warn" and r.exit_code == 0
    assert flag.reason.startswith(f"{node}'s WireGuard public key is now recorded ({first})")
    assert [(w.file, w.line) for w in flag.where] == [(path, line_of(repo, path, first))]
    peers_of = [n for n, s in after["nodes"].items() if any(p["name"] == node for p in s["mesh"]["peers"])]
    assert peers_of
    (entry,) = [p for p in r.fleets[0].mesh.peers if p.peer == node]
    assert (entry.what, entry.before, entry.after) == ("public_key", None, first)
    assert sorted(entry.nodes) == sorted(peers_of)
    assert sorted(r.fleets[0].mesh.syncconf) == sorted(peers_of) and not r.fleets[0].mesh.restart
    assert "recorded public key" in render(r)

    _, _, r = change(repo, lambda: replace(repo, path, first, second))
    (flag,) = flags(r)["mesh-key-changed"]
    assert flag.reason.startswith(f"{node}'s recorded WireGuard public key changes ({first} → {second})")

    _, _, r = change(repo, lambda: replace(repo, path, f", public_key: {second}", ""))
    (flag,) = flags(r)["mesh-key-changed"]
    assert flag.reason.startswith(f"{node}'s recorded WireGuard public key ({second}) is removed")
    # Nothing else of the fleet changes: no flag.
    _, _, r = change(repo, lambda: replace(repo, path, "tier: training}", "tier: training}  # same"))
    assert "mesh-key-changed" not in flags(r)
