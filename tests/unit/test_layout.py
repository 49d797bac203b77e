"""The on-node layout is decided once (the layers' modules, resolve/layers/) and only read elsewhere; the code
shipped to nodes (nodeside/) stands alone."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

from swarm_infra.resolve import desired_state, load_fleet
from swarm_infra.resolve.layout import node_layout

from .conftest import ROOT, fleet_dirs

# Where the layout is decided: each layer's module names its files' paths and its units,
# under the directories of resolve/paths.py; resolve/layout.py assembles them.
LAYOUT_MODULES = {
    ROOT / "src/swarm_infra/resolve/layout.py",
    ROOT / "src/swarm_infra/resolve/paths.py",
    *(ROOT / "src/swarm_infra/resolve/layers").glob("*.py"),
}
# Code that applies or checks the layout: it must read it, never spell it.
CODE = [
    *(ROOT / "src").rglob("*.py"),
    *(ROOT / "plugins").rglob("*.py"),
    *(ROOT / "roles").rglob("*.yml"),
    *(ROOT / "roles").rglob("*.j2"),
    *(ROOT / "playbooks").rglob("*.yml"),
    *(ROOT / "deploys").rglob("*.py"),
    *(ROOT / "stacks").rglob("*.py"),
    *(ROOT / "tests").rglob("*.py"),
]


def test_every_node_carries_the_layout_of_its_mesh_interface() -> None:
    state = desired_state(load_fleet([str(p) for p in fleet_dirs("example")]))
    for node in state["nodes"].values():
        assert node["layout"] == node_layout(node["mesh"]["interface"])
    wg = node_layout("wg7")
    assert wg["files"]["wireguard_key"]["path"].endswith("/wg7.key")
    assert wg["units"]["wireguard"] == "wg-quick@wg7"
    assert wg["files"]["wireguard_key"]["mode"] == "0600"
    assert wg["files"]["wireguard_conf"]["mode"] == "0600"


@pytest.mark.parametrize("name", sorted(node_layout()["files"]))
def test_each_on_node_path_is_spelled_only_in_the_layout(name: str) -> None:
    path = node_layout()["files"][name]["path"]
    whole = re.compile(re.escape(path) + r"(?![\w.-])")  # /var/lib/swarm, not /var/lib/swarm-lab
    spelled = [
        str(f.relative_to(ROOT))
        for f in CODE
        if f.resolve() not in {*LAYOUT_MODULES, Path(__file__).resolve()}
        and f.is_file()
        and whole.search(f.read_text(errors="replace"))
    ]
    assert spelled == [], f"{path} is written out in {spelled}; read NodeState.layout instead"


def test_unit_names_are_spelled_only_in_the_layout() -> None:
    for unit in node_layout()["units"].values():
        spelled = [
            str(f.relative_to(ROOT))
            for f in CODE
            if f.resolve() not in LAYOUT_MODULES
            and f.suffix in (".yml", ".j2")
            and unit in f.read_text(errors="replace")
        ]
        assert spelled == [], f"{unit} is written out in {spelled}"


def test_nodeside_imports_only_the_standard_library_and_pynvml() -> None:
    for f in (ROOT / "src/swarm_infra/nodeside").glob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{f.name}: relative import"
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                # raydrain.py runs with the Python of the node's Ray virtualenv, Ray's own.
                ray = f.name == "raydrain.py" and top == "ray"
                assert top in sys.stdlib_module_names or top == "pynvml" or ray, f"{f.name} imports {name}"
