"""The Ansible inventory plugin with the real ``ansible-inventory`` and ``ansible-playbook``.

Both shipped fleets work with plain Ansible (host counts and groups as the resolver says);
an invalid or hostile fleet fails with the validator's report, file:line, and no
traceback; and no fleet value is ever templated (issue #11, classes 1, 17 and 18).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pytest

import swarm_infra
from swarm_infra import validate
from swarm_infra.engines.inventory import node_groups
from swarm_infra.fleet.sources import fleet_paths
from swarm_infra.resolve import desired_state, load_fleet

from ..jinja_fleet import jinja_fleet, payload
from .conftest import ROOT

BIN = Path(sys.executable).parent
HOME = Path(tempfile.mkdtemp(prefix="swarm-test-ansible-home-"))  # no user configuration, no lab
# The library these tests import (this checkout's), for the plugin in the Ansible processes
# too: the venv may have been installed from another checkout.
SRC = Path(swarm_infra.__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"


def ansible(
    tool: str, *args: str, cwd: Path = ROOT, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """An Ansible CLI of this venv, with no lab connection file and no user configuration,
    reading this checkout's library."""
    base = {
        "PATH": f"{BIN}:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": str(HOME),
        "ANSIBLE_FORCE_COLOR": "0",
        "SWARM_LAB_DIR": str(HOME / "no-lab"),
        "ANSIBLE_LOCAL_TEMP": str(HOME / "tmp"),
        "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
        "PYTHONPATH": str(SRC),
    }
    env = {**base, **(env or {})}
    return subprocess.run(
        [str(BIN / tool), *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=300
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with this one's ansible.cfg, plugins and playbooks, and no fleet yet."""
    for name in ("ansible.cfg",):
        shutil.copy(ROOT / name, tmp_path / name)
    for name in ("plugins", "playbooks", "roles"):
        (tmp_path / name).symlink_to(ROOT / name)
    return tmp_path


def copy_fleet(repo: Path, name: str = "lab") -> Path:
    shutil.copytree(ROOT / "inventory" / name, repo / "inventory" / name)
    for part in (name, "shared"):
        shutil.copytree(ROOT / "policies" / part, repo / "policies" / part)
    return repo / "inventory" / name


def unsafe(value: object) -> object:
    """``value`` from ``ansible-inventory --list`` with its unsafe markers removed; asserts
    that every string was marked (``{"__ansible_unsafe": text}``: what Ansible prints for a
    value wrapped with wrap_var, which it never templates)."""
    if isinstance(value, dict):
        if set(value) == {"__ansible_unsafe"}:
            return value["__ansible_unsafe"]
        return {k: unsafe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unsafe(v) for v in value]
    assert not isinstance(value, str), f"a string reached Ansible unmarked: {value!r}"
    return value


# ------------------------------------------------------------------- the shipped fleets


@pytest.mark.parametrize("fleet", ["example", "lab"])
def test_shipped_fleet_lists_every_node_with_its_groups(fleet: str) -> None:
    proc = ansible("ansible-inventory", "-i", f"inventory/{fleet}", "--list")
    assert proc.returncode == 0, proc.stderr[-3000:]
    listed = json.loads(proc.stdout)
    state = desired_state(load_fleet(fleet_paths(ROOT / "inventory" / fleet)))
    assert set(listed["_meta"]["hostvars"]) == set(state["nodes"])
    for name, node in state["nodes"].items():
        for group in node_groups(node):
            assert name in listed[group]["hosts"], (name, group)
        hostvars = listed["_meta"]["hostvars"][name]
        assert unsafe(hostvars["swarm"]) == json.loads(json.dumps(node))
        assert unsafe(hostvars["ansible_host"]) == node["ssh"]["host"]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("fleet", ["example", "lab"])
def test_shipped_fleet_lists_its_hosts_for_site_yml(fleet: str) -> None:
    proc = ansible("ansible-playbook", "-i", f"inventory/{fleet}", "playbooks/site.yml", "--list-hosts")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    nodes = set(desired_state(load_fleet(fleet_paths(ROOT / "inventory" / fleet)))["nodes"])
    listed = {line.strip() for line in proc.stdout.splitlines() if line.startswith("      ")}
    assert listed == nodes


def test_any_file_of_the_fleet_stands_for_the_fleet(repo: Path) -> None:
    """A quoted apiVersion, a file in a subdirectory, a file that is not YAML: the fleet is
    the directory (the plugin used to sniff each file and failed on the example fleet)."""
    inv = copy_fleet(repo)
    (inv / "more").mkdir()
    nodes = inv / "nodes.yaml"
    text = nodes.read_text().replace("apiVersion: swarm.io/v1alpha1", 'apiVersion: "swarm.io/v1alpha1"')
    nodes.unlink()
    (inv / "more" / "nodes.yaml").write_text(text)
    (inv / "hosts.ini").write_text("[ignored]\nnot-a-node\n")
    proc = ansible("ansible-inventory", "-i", "inventory/lab", "--list", cwd=repo)
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = set(desired_state(load_fleet(fleet_paths(inv)))["nodes"])
    assert set(json.loads(proc.stdout)["_meta"]["hostvars"]) == expected and len(expected) == 3


# ------------------------------------------------------------- invalid input, reported


def break_fleet(inv: Path, case: str) -> tuple[Path, str]:
    """Make one mistake in the copied lab fleet; (file, rule) the report must name."""
    nodes = inv / "nodes.yaml"
    text = nodes.read_text()
    if case == "node-named-all":
        nodes.write_text(text.replace("name: lab-head-1", "name: all", 1))
        return nodes, "name.reserved"
    if case == "float-count":
        nodes.write_text(text.replace("count: 2}", "count: 2.0}", 1))
        return nodes, "schema.type"
    if case == "alias-bomb":
        bomb = inv / "bomb.yaml"
        shutil.copy(DATA / "hostile" / "yaml-alias-bomb.yaml", bomb)
        return bomb, "yaml.alias-budget"
    if case == "kind-list":
        nodes.write_text(text.replace("kind: Node", "kind: [Node]", 1))
        return nodes, "schema.kind"
    if case == "dangling-symlink":
        link = inv / "aa-gone.yaml"  # first in the directory: Ansible offers it first
        link.symlink_to(inv / "nowhere.yaml")
        return link, "file.dangling-symlink"
    if case == "symlink-loop":
        link = inv / "aa-loop.yaml"
        link.symlink_to(link)
        return link, "file.symlink-loop"
    if case == "nul-byte":
        nodes.write_bytes(text.replace("tier: control", "tier: con\x00trol", 1).encode())
        return nodes, "yaml.syntax"
    raise AssertionError(case)


@pytest.mark.parametrize(
    "case",
    [
        "node-named-all",
        "float-count",
        "alias-bomb",
        "kind-list",
        "nul-byte",
        "dangling-symlink",
        "symlink-loop",
    ],
)
def test_invalid_fleet_fails_with_the_validators_report(repo: Path, case: str) -> None:
    inv = copy_fleet(repo)
    bad, rule = break_fleet(inv, case)
    [error] = validate(fleet_paths(inv)).report.errors
    assert (error.file, error.rule) == (str(bad), rule)
    proc = ansible("ansible-inventory", "-i", "inventory/lab", "--list", cwd=repo)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stdout + proc.stderr
    # The validator's line, whole: Ansible's own warnings would wrap it.
    assert error.text() in proc.stderr.splitlines(), proc.stderr[-3000:]
    play = ansible("ansible-playbook", "-i", "inventory/lab", "playbooks/site.yml", "--list-hosts", cwd=repo)
    assert play.returncode != 0 and error.text() in play.stderr.splitlines()


# ------------------------------------------------------- nothing from the fleet is templated

PLAYBOOK = """\
- name: Read every swarm string
  hosts: all
  gather_facts: false
  tasks:
    - name: Every value
      ansible.builtin.debug:
        var: swarm
    - name: Strings through a template expression
      ansible.builtin.debug:
        msg: "region={{ swarm.region }} site={{ swarm.site }} labels={{ swarm.labels }}"
    - name: Every value through a template file
      ansible.builtin.template:
        src: every.j2
        dest: "{{ out_dir }}/{{ inventory_hostname }}.template"
        mode: "0600"
    - name: Every value through copy content
      ansible.builtin.copy:
        content: "{{ swarm | to_nice_json }}"
        dest: "{{ out_dir }}/{{ inventory_hostname }}.copy"
        mode: "0600"
"""
TEMPLATE = (
    "{{ swarm | to_nice_json }}\n{% for key, value in swarm.items() %}{{ key }}={{ value }}\n{% endfor %}\n"
)

# A test-only inventory plugin: the real one, with every string of every NodeState set to
# the payload after validation (a stand-in for any gap in the validator), and, when
# SWARM_TEST_UNWRAPPED=1, without wrap_var (the control that shows the payload is live).
POISONED_PLUGIN = """\
import dataclasses
import importlib.util
import os

from swarm_infra.engines import inventory as inv
from swarm_infra.engines.ansible import hostvars

spec = importlib.util.spec_from_file_location("swarm_under_test", os.environ["SWARM_TEST_PLUGIN"])
real = importlib.util.module_from_spec(spec)
spec.loader.exec_module(real)
PAYLOAD = os.environ["SWARM_TEST_PAYLOAD"]


def poison(value):
    if isinstance(value, str):
        return PAYLOAD
    if isinstance(value, dict):
        return {k: poison(v) for k, v in value.items()}
    if isinstance(value, list):
        return [poison(v) for v in value]
    return value


_hosts = inv.inventory_hosts
inv.inventory_hosts = lambda *a, **k: [dataclasses.replace(h, state=poison(h.state)) for h in _hosts(*a, **k)]
if os.environ.get("SWARM_TEST_UNWRAPPED") == "1":
    hostvars.unsafe_host_vars = lambda h: {"swarm": h.state, **inv.ansible_connection_vars(h.connection)}


class InventoryModule(real.InventoryModule):
    NAME = "swarm_poisoned"
"""


def run_playbook(
    repo: Path, out: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The read.yml playbook above on every host of inventory/lab, locally (-c local)."""
    (repo / "read.yml").write_text(PLAYBOOK)
    (repo / "every.j2").write_text(TEMPLATE)
    out.mkdir(exist_ok=True)
    args = ("-i", "inventory/lab", "-c", "local", "-e", f"out_dir={out}", "read.yml")
    return ansible("ansible-playbook", *args, cwd=repo, env=env)


def test_jinja_in_every_free_form_string_is_refused_or_never_evaluated(repo: Path, tmp_path: Path) -> None:
    marker = tmp_path / "pwned-everywhere"
    inv, poisoned = jinja_fleet(repo, marker, everywhere=True)
    errors = validate(fleet_paths(inv)).report.errors
    refused = Counter((str(p.file), p.path) for p in poisoned if not p.accepted)
    assert Counter((e.file, e.path) for e in errors) == refused and len(refused) >= 5
    assert all(e.rule == "schema.pattern" and e.line >= 1 for e in errors)
    proc = ansible("ansible-inventory", "-i", "inventory/lab", "--list", cwd=repo)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert all(e.text() in proc.stderr.splitlines() for e in errors)
    play = run_playbook(repo, tmp_path / "out")
    assert play.returncode != 0 and "Traceback" not in play.stderr
    assert not marker.exists()


def test_jinja_where_the_schema_allows_text_is_never_evaluated(repo: Path, tmp_path: Path) -> None:
    marker = tmp_path / "pwned-accepted"
    inv, poisoned = jinja_fleet(repo, marker, everywhere=False)
    assert all(p.accepted for p in poisoned) and len(poisoned) > 20
    assert validate(fleet_paths(inv)).report.ok
    listed = ansible("ansible-inventory", "-i", "inventory/lab", "--list", cwd=repo)
    assert listed.returncode == 0, listed.stderr[-3000:]
    play = run_playbook(repo, tmp_path / "out")
    assert play.returncode == 0, play.stdout[-3000:] + play.stderr[-3000:]
    assert not marker.exists()


def test_every_swarm_value_reaches_ansible_unsafe(repo: Path, tmp_path: Path) -> None:
    """Every string of every NodeState set to the payload after validation: debug,
    template and copy show the literal text and the command never runs; without wrap_var
    (the control) the same run does run it."""
    copy_fleet(repo)
    plugins = tmp_path / "test-plugins"
    plugins.mkdir()
    (plugins / "swarm_poisoned.py").write_text(POISONED_PLUGIN)
    marker = tmp_path / "pwned-poisoned"
    env = {
        "ANSIBLE_INVENTORY_PLUGINS": str(plugins),
        "ANSIBLE_INVENTORY_ENABLED": "swarm_poisoned",
        "SWARM_TEST_PLUGIN": str(ROOT / "plugins" / "inventory" / "swarm.py"),
        "SWARM_TEST_PAYLOAD": payload(marker),
    }
    out = tmp_path / "out"
    play = run_playbook(repo, out, env)
    assert play.returncode == 0, play.stdout[-3000:] + play.stderr[-3000:]
    assert not marker.exists()
    literal = payload(marker)
    assert f'"region": "{literal}"' in play.stdout
    assert f'"msg": "region={literal} site={literal} labels=' in play.stdout
    for host in ("lab-head-1", "lab-gpu-1", "lab-gpu-2"):
        copied = json.loads((out / f"{host}.copy").read_text())
        templated = (out / f"{host}.template").read_text()
        assert json.loads(templated[: templated.index("\n}\n") + 2]) == copied
        assert copied["region"] == copied["site"] == copied["labels"]["tier"] == literal
        assert f"region={literal}\n" in templated
    control = run_playbook(repo, tmp_path / "out-control", {**env, "SWARM_TEST_UNWRAPPED": "1"})
    assert marker.exists(), control.stdout[-2000:] + control.stderr[-2000:]
