"""The pyinfra engine without nodes: its inventory is the Ansible plugin's (hosts, groups,
data, as the real ``pyinfra`` and ``ansible-inventory`` CLIs see them), its rolling batches
are Ansible's, and its run follows the playbooks' structure. Convergence itself, and the
equivalence with Ansible, are proven on the lab (tests/lab/test_pyinfra.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from swarm_infra.engines.inventory import inventory_hosts
from swarm_infra.engines.pyinfra import layers as L
from swarm_infra.engines.pyinfra.inventory import inventory_groups
from swarm_infra.engines.pyinfra.runner import plan
from swarm_infra.resolve import desired_state, load_fleet
from swarm_infra.resolve.rollout import batch_failed, rollout_batches

from .conftest import ROOT, fleet_dirs
from .test_inventory_plugin import SRC, ansible

BIN = Path(sys.executable).parent


def unwrap(value):
    """ansible-inventory's JSON of unsafe values ({"__ansible_unsafe": v}) as plain data."""
    if isinstance(value, dict):
        return (
            unwrap(value["__ansible_unsafe"])
            if set(value) == {"__ansible_unsafe"}
            else {k: unwrap(v) for k, v in value.items()}
        )
    return [unwrap(v) for v in value] if isinstance(value, list) else value


def state_of(fleet: str) -> dict:
    return desired_state(load_fleet([str(p) for p in fleet_dirs(fleet)]))


@pytest.mark.parametrize("fleet", ["lab", "example"])
def test_pyinfra_sees_the_hosts_groups_and_data_ansible_sees(fleet: str, tmp_path: Path) -> None:
    listed = ansible("ansible-inventory", "-i", f"inventory/{fleet}", "--list")
    assert listed.returncode == 0, listed.stderr
    ans = json.loads(listed.stdout)
    ans_groups = {
        g: set(v.get("hosts", [])) for g, v in ans.items() if g not in ("_meta", "all", "ungrouped")
    }
    ans_groups = {g: h for g, h in ans_groups.items() if h}
    out = tmp_path / "inv.json"
    code = (
        "import json,sys\n"
        "from pyinfra.api import State\n"
        "from pyinfra.context import ctx_state\n"
        "from pyinfra_cli.inventory import make_inventory\n"
        "with ctx_state.use(State()):\n"
        f"    inv = make_inventory({f'inventory/{fleet}.py'!r}, cwd={str(ROOT)!r})\n"
        "groups = {g: sorted(h.name for h in inv.get_group(g)) for g in inv.groups}\n"
        "data = {h.name: h.data.swarm for h in inv}\n"
        f"json.dump({{'groups': groups, 'data': data}}, open({str(out)!r}, 'w'))\n"
    )
    env = {
        "PATH": f"{BIN}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "SWARM_LAB_DIR": str(tmp_path / "no-lab"),
        "PYTHONPATH": str(SRC),
    }
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(out.read_text())
    pyi_groups = {g: set(h) for g, h in got["groups"].items() if g not in ("all", fleet)}
    assert pyi_groups == ans_groups
    assert got["data"] == {n: unwrap(ans["_meta"]["hostvars"][n]["swarm"]) for n in got["data"]}
    assert set(got["data"]) == set(state_of(fleet)["nodes"])


def test_an_invalid_fleet_stops_pyinfra_before_any_host_with_the_validators_report(tmp_path: Path) -> None:
    inv = tmp_path / "inventory"
    (inv / "bad").mkdir(parents=True)
    (inv / "bad" / "site.yaml").write_text(
        "apiVersion: swarm.io/v1alpha1\nkind: Site\nmetadata: {name: BAD}\nspec: {}\n"
    )
    (inv / "bad.py").write_text((ROOT / "inventory/lab.py").read_text())
    env = {
        "PATH": f"{BIN}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "SWARM_LAB_DIR": str(tmp_path / "no-lab"),
        "PYTHONPATH": str(SRC),
    }
    proc = subprocess.run(
        [str(BIN / "pyinfra"), "-y", str(inv / "bad.py"), "exec", "--", "true"],
        cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{inv / 'bad' / 'site.yaml'}:3:" in proc.stderr and "Traceback" not in proc.stderr + proc.stdout


@pytest.mark.parametrize(
    ("count", "serial", "sizes"),
    [
        (3, [1, "100%"], [1, 2]),
        (16, [1, "25%"], [1, 4, 4, 4, 3]),
        (10, [2, "30%", "50%"], [2, 3, 5]),
        (5, ["10%"], [1, 1, 1, 1, 1]),  # a percentage rounds down, at least one host
        (4, [10], [4]),
    ],
)
def test_batches_are_cut_as_ansible_cuts_serial(count: int, serial: list, sizes: list[int]) -> None:
    hosts = [f"h{i:02d}" for i in range(count)]
    batches = rollout_batches(hosts, {"serial": serial, "max_fail_percentage": 0})
    assert [len(b) for b in batches] == sizes
    assert [h for b in batches for h in b] == hosts


def test_a_batch_stops_the_rollout_past_the_tolerated_failures() -> None:
    assert not batch_failed(0, 4, {"serial": [], "max_fail_percentage": 0})
    assert batch_failed(1, 4, {"serial": [], "max_fail_percentage": 0})
    assert not batch_failed(1, 4, {"serial": [], "max_fail_percentage": 25})  # Ansible: more than
    assert batch_failed(2, 4, {"serial": [], "max_fail_percentage": 25})
    assert batch_failed(3, 3, {"serial": [], "max_fail_percentage": 100})  # every host failed


def test_the_run_follows_the_playbooks_keys_first_and_the_ray_head_before_its_workers() -> None:
    state = state_of("lab")
    hosts = inventory_hosts(state)
    steps = plan("site", hosts)
    functions = [s.functions for s in steps]
    assert functions[:4] == [L.LAYERS[n] for n in ("host", "drivers", "gpu", "storage")]
    assert functions[4:6] == [(L.mesh_keys,), (L.mesh_layer,)]
    assert not steps[4].batched and steps[5].batched
    ray = [s for s in steps if s.functions == (L.ray_layer,)]
    roles = {n: (s["ray"] or {}).get("role") for n, s in state["nodes"].items()}
    assert [set(roles[h] for h in s.hosts) for s in ray] == [{"head"}, {"worker"}] + (
        [{None}] if None in roles.values() else []
    )
    assert not ray[0].batched and ray[1].batched
    assert [s.functions for s in plan("host", hosts)] == [L.LAYERS["host"]]


def test_inventory_groups_put_data_on_all_only() -> None:
    hosts = inventory_hosts(state_of("lab"))
    groups = inventory_groups(hosts)
    assert [name for name, _ in groups["all"]] == sorted(h.name for h in hosts)
    assert all(isinstance(n, str) for g, members in groups.items() if g != "all" for n in members)


def test_a_host_refused_while_its_operations_are_added_fails_alone() -> None:
    # In check mode pyinfra runs each operation's generator as it is added: a refused
    # WireGuard key raises OperationError there. That host fails (named, with why) and gets
    # no later step; the others go on (it used to end the whole run with a traceback).
    from pyinfra import host
    from pyinfra.api import Config, Inventory, OperationError, State

    from swarm_infra.engines.pyinfra.runner import Step, _prepare

    state = State(Inventory((["a", "b"], {})), Config())
    calls = []

    def keys() -> None:
        calls.append(("keys", host.name))
        if host.name == "b":
            raise OperationError("b: WireGuard public key refused")

    def mesh() -> None:
        calls.append(("mesh", host.name))

    steps = [Step((keys,), ("a", "b"), False), Step((mesh,), ("a", "b"), True)]
    refused: dict[str, str] = {}
    out = _prepare(state, steps, {h.name: h for h in state.inventory}, {"a", "b"}, refused)
    assert refused == {"b": "keys: b: WireGuard public key refused"}
    assert calls == [("keys", "a"), ("keys", "b"), ("mesh", "a")]
    assert [[h.name for h in members] for _, members, _ in out] == [["a"], ["a"]]
