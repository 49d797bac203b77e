"""A node that reports a poisoned WireGuard public key (issue #22): both engines refuse it,
naming the node, and no peer's configuration gets its lines.

The poisoned key is what a hostile provider's root returns from `wg pubkey`: a valid key,
then lines that would route every address to that node and run a command as root on each
peer at its next `wg-quick up`. The lab test (tests/lab/test_hostile_node.py) shows the
same on real nodes; these show each engine's step without one.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from swarm_infra.engines.pyinfra import operations as O
from tests.unit.role_reader import run_layer
from tests.unit.test_node_files import NODES, POISONED, key

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "plugins" / "filter"))
import swarm as swarm_filters  # noqa: E402  (the Ansible filter plugin, as Ansible loads it)


class _State:
    """Stands for pyinfra's State (the operations keep each State's Run in a weak map)."""


def test_the_wireguard_role_fails_the_node_that_reports_a_poisoned_key() -> None:
    node = json.loads(json.dumps(NODES["lab-gpu-2"]))
    registered = {
        "wireguard_module": {"stat": {"exists": False}},
        "wireguard_pubkey": {"stdout": POISONED, "stderr": ""},
    }
    hostvars = {"swarm": node, "inventory_hostname": "lab-gpu-2", "hostvars": {}}
    calls = run_layer("mesh", hostvars, {"all"}, registered)
    fails = [c for c in calls if c.module == "ansible.builtin.fail"]
    assert len(fails) == 1
    assert fails[0].args["msg"].startswith("lab-gpu-2: WireGuard public key refused: expected a WireGuard")
    # With its own key, nothing fails.
    registered["wireguard_pubkey"] = {"stdout": key("lab-gpu-2"), "stderr": ""}
    assert not [
        c for c in run_layer("mesh", hostvars, {"all"}, registered) if c.module == "ansible.builtin.fail"
    ]


def test_the_peer_keys_filter_leaves_a_poisoned_key_out_of_every_peers_file() -> None:
    node = NODES["lab-gpu-1"]
    peers = [p["name"] for p in node["mesh"]["peers"]]
    hostvars = {
        peers[0]: {"wireguard_public_key": POISONED},
        peers[1]: {"wireguard_public_key": key(peers[1])},
    }
    keys = swarm_filters.swarm_wireguard_peer_keys(node, {peers[0]: key(peers[0])}, hostvars)
    assert dict(keys) == {peers[0]: key(peers[0]), peers[1]: key(peers[1])}
    text = str(swarm_filters.swarm_wireguard_conf(node, keys))
    assert "PostUp = curl" not in text and text.count("[Interface]") == 1


def test_pyinfra_refuses_the_key_naming_the_node(monkeypatch: pytest.MonkeyPatch) -> None:
    state = _State()
    with pytest.raises(O.OperationError, match="lab-gpu-2: WireGuard public key refused"):
        O._publish(state, "lab-gpu-2", POISONED)
    assert "lab-gpu-2" not in O.public_keys(state)
    O._publish(state, "lab-gpu-2", key("lab-gpu-2"))
    assert O.public_keys(state) == {"lab-gpu-2": key("lab-gpu-2")}


def test_pyinfra_refuses_a_poisoned_key_read_from_the_snapshot(monkeypatch: pytest.MonkeyPatch) -> None:
    path = NODES["lab-gpu-2"]["layout"]["files"]["wireguard_key"]["path"]
    monkeypatch.setattr(O.mesh, "snapshot", lambda: {"public_keys": {path: POISONED}})
    monkeypatch.setattr(O.mesh, "host", SimpleNamespace(state=_State(), name="lab-gpu-2"))
    with pytest.raises(O.OperationError, match="lab-gpu-2"):
        list(O.wireguard_key._inner(path=path))


# ------------------------------------------------ a key that changed since it was recorded
# The controller records each node's key the first time (swarm_infra.engines.keyrecord);
# a later, different key (well-formed: a reinstalled node, or another machine answering
# for it) is refused by both engines until the operator accepts it for that node.
OTHER = "hRMt9dcN3+4Yq1yQZ0a3gJ9eLs9RnNcp4eyIFkBd0Ck="  # any other well-formed key


def test_the_wireguard_role_fails_a_node_whose_key_changed_unless_accepted() -> None:
    assert O.wireguard_key_problem(OTHER) is None and key("lab-gpu-2") != OTHER
    node = json.loads(json.dumps(NODES["lab-gpu-2"]))
    registered = {
        "wireguard_module": {"stat": {"exists": False}},
        "wireguard_pubkey": {"stdout": OTHER, "stderr": ""},
    }
    recorded = {"lab-gpu-2": key("lab-gpu-2"), "lab-gpu-1": key("lab-gpu-1")}

    def fails(**extra: object) -> list[str]:
        hostvars = {"swarm": node, "inventory_hostname": "lab-gpu-2", "hostvars": {}, **extra}
        calls = run_layer("mesh", hostvars, {"all"}, registered)
        return [c.args["msg"] for c in calls if c.module == "ansible.builtin.fail"]

    refused = fails(wireguard_key_record=recorded)
    assert len(refused) == 1 and refused[0].startswith("lab-gpu-2: WireGuard public key refused: it reports")
    assert key("lab-gpu-2") in refused[0] and "--accept-key-change" in refused[0]
    assert not fails(wireguard_key_record=recorded, wireguard_key_change_accepted=["lab-gpu-2"])
    assert not fails()  # no record (plain ansible-playbook, a first converge): trusted
    # Another node's accepted change does not accept this one's.
    assert len(fails(wireguard_key_record=recorded, wireguard_key_change_accepted=["lab-gpu-1"])) == 1


def test_pyinfra_refuses_a_changed_key_unless_accepted() -> None:
    state = _State()
    O.key_check(state).recorded = {"lab-gpu-2": key("lab-gpu-2")}
    with pytest.raises(O.OperationError, match="lab-gpu-2: WireGuard public key refused: it reports"):
        O._publish(state, "lab-gpu-2", OTHER)
    assert O.public_keys(state) == {}
    O._publish(state, "lab-gpu-2", key("lab-gpu-2"))  # the recorded key passes
    O.key_check(state).accepted = frozenset({"lab-gpu-2"})
    O._publish(state, "lab-gpu-2", OTHER)
    assert O.public_keys(state) == {"lab-gpu-2": OTHER}


# ------------------------------------------------- a head whose token file is not a token
# The workers copy the head's token file; the head's root can put anything in it. Both
# engines check it (resolve.ray.token_problem) and never show the value.
TOKEN_PATH = NODES["lab-gpu-1"]["layout"]["files"]["ray_auth_token"]["path"]
BAD_TOKEN = "a" * 64 + "\n[Service]\nExecStartPre=/bin/sh -c 'touch /tmp/pwned'\n"


def test_token_problem_accepts_what_token_command_makes(tmp_path: Path) -> None:
    import subprocess

    from swarm_infra.resolve.ray import token_command, token_problem

    path = tmp_path / "token"
    subprocess.run(["sh", "-c", token_command(str(path))], check=True)
    assert token_problem(path.read_text()) is None
    for bad in (BAD_TOKEN, "A" * 64 + "\n", "a" * 63 + "\n", ""):
        problem = token_problem(bad)
        assert problem and "aaaa" not in problem and "AAAA" not in problem


def test_the_ray_role_refuses_a_heads_token_that_is_not_one() -> None:
    import base64

    node = json.loads(json.dumps(NODES["lab-gpu-1"]))
    assert node["ray"]["role"] == "worker"
    hostvars = {"swarm": node, "inventory_hostname": "lab-gpu-1", "hostvars": {}}

    def fails(content: str) -> list[str]:
        registered = {"ray_head_token": {"content": base64.b64encode(content.encode()).decode()}}
        calls = run_layer("ray", hostvars, {"all", "ray_workers", "gpu"}, registered)
        return [c.args["msg"] for c in calls if c.module == "ansible.builtin.fail"]

    refused = fails(BAD_TOKEN)
    assert len(refused) == 1 and "lab-gpu-1: the Ray token read from" in refused[0]
    assert "aaaa" not in refused[0]
    assert not fails("0123456789abcdef" * 4 + "\n")


def test_pyinfra_refuses_a_heads_token_that_is_not_one(monkeypatch: pytest.MonkeyPatch) -> None:
    head_out: list[str] = []
    head = SimpleNamespace(
        name="lab-head-1",
        run_shell_command=lambda *a, **k: (True, SimpleNamespace(stdout_lines=list(head_out))),
    )
    state = _State()
    state.inventory = [head]  # type: ignore[attr-defined]
    state.active_hosts = [head]  # type: ignore[attr-defined]
    for module in (O.ray, O.run):  # the operation's module, and changing()'s
        monkeypatch.setattr(module, "host", SimpleNamespace(state=state, name="lab-gpu-1"))
    monkeypatch.setattr(O.ray, "snapshot", lambda: {"paths": {}})
    head_out[:] = BAD_TOKEN.splitlines()
    with pytest.raises(
        O.OperationError, match="lab-gpu-1: the Ray token read from lab-head-1 is refused"
    ) as exc:
        list(O.ray_token._inner(path=TOKEN_PATH, head="lab-head-1"))
    assert "aaaa" not in str(exc.value)
    head_out[:] = ["0123456789abcdef" * 4]
    assert len(list(O.ray_token._inner(path=TOKEN_PATH, head="lab-head-1"))) == 1
