"""The layer registry (resolve/layers.py) is what every consumer applies.

Playbooks, deploys, both runners, verification, the pyinfra snapshot and the roles'
argument specs are checked against the registry and NodeState's types, so a layer or file
added in one place and not the others fails here, not on a node.
"""

from __future__ import annotations

import ast
import re
import typing
from pathlib import Path

import pytest
import yaml

from swarm_infra.engines.ansible.runner import LAYERS as ANSIBLE_LAYERS
from swarm_infra.engines.pyinfra import layers as pyinfra_layers
from swarm_infra.engines.pyinfra.operations import snapshot_spec
from swarm_infra.resolve import types as T
from swarm_infra.resolve.layers import LAYERS, NAMES, declared, layer, node_packages
from swarm_infra.resolve.layout import node_layout
from swarm_infra.verify.checks import LAYERS as VERIFY_LAYERS
from tests.unit.cluster_support import state
from tests.unit.role_reader import in_pattern, plays

ROOT = Path(__file__).resolve().parents[2]


def test_site_playbook_imports_each_layer_in_registry_order() -> None:
    site = yaml.safe_load((ROOT / "playbooks" / "site.yml").read_text())
    assert [p["ansible.builtin.import_playbook"] for p in site] == [f"{n}.yml" for n in NAMES]


@pytest.mark.parametrize("name", NAMES)
def test_each_layer_playbook_applies_its_role_to_its_hosts(name: str) -> None:
    entry = layer(name)
    found = plays(name)
    assert found, f"playbooks/{name}.yml has no play applying a role"
    assert {p["role"] for p in found} == {entry.role}
    # The plays together reach exactly the hosts of the registry's group: a host in that
    # group, whatever other groups it has, is in some play; a host outside it in none.
    for groups in (
        {"all"},
        {"all", "gpu"},
        {"all", "ray_head"},
        {"all", "ray_worker"},
        {"all", "gpu", "ray_worker"},
    ):
        expected = entry.hosts in groups
        assert any(in_pattern(p["hosts"], groups) for p in found if p["tasks_from"] == "main") == expected, (
            groups
        )


@pytest.mark.parametrize("name", NAMES)
def test_each_deploy_runs_its_layer(name: str) -> None:
    tree = ast.parse((ROOT / "deploys" / f"{name}.py").read_text())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "layer"]
    assert [c.args[0].value for c in calls if isinstance(c.args[0], ast.Constant)] == [name]


def test_site_deploy_runs_every_layer() -> None:
    text = (ROOT / "deploys" / "site.py").read_text()
    assert re.search(r"^site\(\)$", text, re.M)
    assert list(pyinfra_layers.LAYERS) == list(NAMES)


def test_runners_and_verify_list_the_registry_layers() -> None:
    assert ("site", *NAMES) == ANSIBLE_LAYERS
    assert VERIFY_LAYERS == NAMES
    assert [x.name for x in LAYERS] == list(NAMES)


def test_every_layout_file_and_unit_belongs_to_a_layer() -> None:
    layout = node_layout("wg0")
    files = {f for x in LAYERS for f in (*x.files, *x.removed, *x.read_back, *(r[0] for r in x.restarts))}
    units = {u for x in LAYERS for u in (*x.units, *(r[1] for r in x.restarts))}
    assert files <= set(layout["files"]), files - set(layout["files"])
    assert units <= set(layout["units"]), units - set(layout["units"])
    # State files the node-side code keeps for every layer are registered too.
    assert set(layout["files"]) <= files, set(layout["files"]) - files
    assert set(layout["units"]) <= units, set(layout["units"]) - units
    for x in LAYERS:
        assert set(x.removed) <= set(x.files), x.name
        assert set(x.read_back) <= set(x.files), x.name


def test_the_snapshot_reads_back_the_registered_files() -> None:
    node = state("lab")["nodes"]["lab-gpu-1"]
    files = node["layout"]["files"]
    want = {files[f]["path"] for x in LAYERS for f in x.read_back}
    assert set(snapshot_spec(node)["texts"]) == want | {"/etc/fstab"}
    assert set(snapshot_spec(node)["packages"]) >= {p for n in NAMES for p in node_packages(node, n)}


def test_undeclared_layers_install_nothing() -> None:
    head = state("lab")["nodes"]["lab-head-1"]
    assert not declared(head, "gpu") and node_packages(head, "drivers") == []


# ------------------------------------------------------- roles' argument specs


def _typed_dict(description: str) -> type | None:
    match = re.search(r"swarm_infra\.resolve\.types\.(\w+)", description)
    return getattr(T, match.group(1)) if match else None


def _specs() -> list[tuple[str, str, dict]]:
    out = []
    for path in sorted(ROOT.glob("roles/*/meta/argument_specs.yml")):
        options = yaml.safe_load(path.read_text())["argument_specs"]["main"]["options"]
        out += [(path.parts[-3], name, spec) for name, spec in options.items()]
    return out


@pytest.mark.parametrize(("role", "option", "spec"), _specs(), ids=lambda v: v if isinstance(v, str) else "")
def test_argument_specs_of_nodestate_slices_match_their_types(role: str, option: str, spec: dict) -> None:
    """An option that carries a NodeState slice (its description names the TypedDict) has
    exactly that type's keys, required where the type requires them; and the role never
    tests a required key for being defined (it always is: such a test is a drift)."""
    typed = _typed_dict(str(spec.get("description", "")))
    if typed is None:
        return
    keys = typing.get_type_hints(typed)
    assert set(spec.get("options", {})) == set(keys), f"{role}.{option}"
    for key, sub in spec["options"].items():
        assert bool(sub.get("required", False)) == (key in typed.__required_keys__), f"{role}.{option}.{key}"
    tasks = "\n".join(p.read_text() for p in (ROOT / "roles" / role / "tasks").glob("*.yml"))
    for key in typed.__required_keys__:
        assert not re.search(rf"selectattr\(\s*'{key}'\s*,\s*'defined'|\b{key}\s+is\s+defined", tasks), key


def test_the_drivers_sources_are_described_by_their_type() -> None:
    described = [(r, o) for r, o, s in _specs() if _typed_dict(str(s.get("description", "")))]
    assert ("drivers", "drivers_apt_sources") in described
