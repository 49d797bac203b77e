"""What an Ansible role would manage on a node, read from the role itself.

The engine-parity test needs the Ansible side of each layer without a node: this walks a
role's tasks in order (``tasks/main.yml``, blocks, ``include_tasks``/``import_tasks``) with
Ansible's own Templar, the role's own defaults, the project's own filters
(``plugins/filter``) and the node's host variables from the real inventory plugin, and
records every module call with its templated arguments (one per loop item). Tasks run in
order: ``set_fact`` and task ``vars`` bind, ``meta: end_role`` ends the role when its
condition holds. What only a node can answer (a registered result: is the WireGuard module
loaded, is an NVIDIA device present, did a file change) comes from a fixture of the node's
facts (``registered``); a condition that still needs an unknown result counts as true, so
the record is everything the role may do, as the pyinfra side records every operation its
layer may run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]

# Task keywords that are not the module (ansible-core 2.18 playbook keywords on a task).
KEYWORDS = {
    "name", "when", "loop", "loop_control", "vars", "register", "notify", "changed_when",
    "failed_when", "check_mode", "no_log", "tags", "environment", "become", "delegate_to",
    "run_once", "ignore_errors", "until", "retries", "delay", "block", "rescue", "always",
    "args", "diff", "throttle", "listen",
}  # fmt: skip


@dataclass
class Call:
    module: str
    args: dict[str, Any]
    task: str
    environment: dict[str, Any] = field(default_factory=dict)


@dataclass
class RoleRun:
    calls: list[Call] = field(default_factory=list)
    ended: str | None = None  # the task that ended the role, if any


_LOADER: list[Any] = []


def _templar(variables: dict[str, Any]) -> Any:
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    if not _LOADER:
        from ansible.plugins.loader import filter_loader, init_plugin_loader

        init_plugin_loader()
        filter_loader.add_directory(str(ROOT / "plugins" / "filter"))
        _LOADER.append(DataLoader())
    return Templar(loader=_LOADER[0], variables=variables)


class _Unknown(Exception):
    pass


def _render(templar: Any, value: Any) -> Any:
    from ansible.errors import AnsibleFilterError, AnsibleUndefinedVariable

    try:
        return templar.template(value)
    except (AnsibleUndefinedVariable, AnsibleFilterError) as exc:
        # An unknown result (a registered value the fixture does not give, or a test
        # such as `is changed` on it).
        raise _Unknown(str(exc)) from None


def _holds(templar: Any, conditions: Any) -> bool:
    """Every condition of a ``when`` holds; one that needs an unknown result counts as true."""
    for cond in conditions if isinstance(conditions, list) else [conditions]:
        if isinstance(cond, bool):
            if not cond:
                return False
            continue
        try:
            held = _render(templar, "{% if " + str(cond) + " %}True{% else %}False{% endif %}")
            if held not in (True, "True"):
                return False
        except _Unknown:
            continue
    return True


def _tasks(path: Path) -> list[dict[str, Any]]:
    return yaml.safe_load(path.read_text()) or []


def plays(layer: str) -> list[dict[str, Any]]:
    """The plays of ``playbooks/<layer>.yml``, each as ``{"hosts": pattern, "role": name,
    "tasks_from": file}`` (a play's ``roles:`` entry or its ``include_role`` task)."""
    out = []
    for play in yaml.safe_load((ROOT / "playbooks" / f"{layer}.yml").read_text()):
        for entry in play.get("roles", []):
            out.append({"hosts": play["hosts"], "role": entry["role"], "tasks_from": "main"})
        for task in play.get("tasks", []):
            inc = task.get("ansible.builtin.include_role") or task.get("ansible.builtin.import_role")
            if inc:
                out.append(
                    {"hosts": play["hosts"], "role": inc["name"], "tasks_from": inc.get("tasks_from", "main")}
                )
    return out


def in_pattern(pattern: str, groups: set[str]) -> bool:
    """Whether a host in ``groups`` (``all`` included) matches a play's ``hosts`` pattern of
    the forms ``g``, ``g1:g2`` and ``g:!h`` (Ansible's pattern syntax, the subset used)."""
    terms = pattern.split(":")
    wanted = any(t in groups for t in terms if not t.startswith("!") and not t.startswith("&"))
    return wanted and not any(t[1:] in groups for t in terms if t.startswith("!"))


def run_layer(
    layer: str, hostvars: dict[str, Any], groups: set[str], registered: dict[str, Any]
) -> list[Call]:
    """Every module call of ``playbooks/<layer>.yml`` on a host in ``groups``: each play the
    host is in, in order, variables set in one play (``set_fact``) kept for the next."""
    calls: list[Call] = []
    facts: dict[str, Any] = {}
    for play in plays(layer):
        if in_pattern(play["hosts"], groups):
            run = run_role(play["role"], {**hostvars, **facts}, registered, play["tasks_from"], facts)
            calls += run.calls
    return calls


def run_role(
    role: str,
    hostvars: dict[str, Any],
    registered: dict[str, Any],
    tasks_from: str = "main",
    facts: dict[str, Any] | None = None,
) -> RoleRun:
    """The module calls ``roles/<role>`` (its ``tasks/<tasks_from>.yml``) would make on the
    host with ``hostvars`` (the inventory plugin's variables of that host, ``hostvars`` of
    every host under the key ``hostvars``), given the node's ``registered`` results by
    register name. ``facts`` receives what ``set_fact`` set."""
    role_dir = ROOT / "roles" / role
    defaults = yaml.safe_load((role_dir / "defaults" / "main.yml").read_text()) or {}
    variables: dict[str, Any] = {
        "ansible_check_mode": False,
        "inventory_hostname": hostvars.get("inventory_hostname", ""),
        **defaults,
        **hostvars,
        **registered,
    }
    run = RoleRun()
    before = set(variables)
    _walk(_tasks(role_dir / "tasks" / f"{tasks_from}.yml"), role_dir, variables, registered, run)
    if facts is not None:
        facts.update({k: v for k, v in variables.items() if k not in before and k not in defaults})
    return run


def _walk(
    tasks: list[dict[str, Any]],
    role_dir: Path,
    variables: dict[str, Any],
    registered: dict[str, Any],
    run: RoleRun,
) -> None:
    for task in tasks:
        if run.ended:
            return
        local = {**variables, **(task.get("vars") or {})}
        templar = _templar(local)
        if "when" in task and not _holds(templar, task["when"]):
            continue
        if "block" in task:
            # The block's own vars for its tasks; what they register or set outlives it.
            inner = {**local}
            _walk(task["block"], role_dir, inner, registered, run)
            variables.update({k: v for k, v in inner.items() if k not in (task.get("vars") or {})})
            continue
        module = next(k for k in task if k not in KEYWORDS)
        args = task[module]
        if module in ("ansible.builtin.include_tasks", "ansible.builtin.import_tasks"):
            _walk(_tasks(role_dir / "tasks" / str(args)), role_dir, variables, registered, run)
            continue
        if module == "ansible.builtin.meta":
            if args == "end_role":
                run.ended = task.get("name", "end_role")
            continue
        if module == "ansible.builtin.set_fact":
            for key, value in args.items():
                try:
                    variables[key] = _render(templar, value)
                except _Unknown:
                    variables[key] = None  # depends on a result the fixture does not give
            continue
        items: list[Any] = [None]
        if "loop" in task:
            try:
                items = list(_render(templar, task["loop"]))
            except _Unknown:
                items = []
        for item in items:
            item_templar = _templar({**local, "item": item}) if item is not None else templar
            try:
                rendered = _render(item_templar, args)
            except _Unknown:
                rendered = {"__unknown__": True}
            try:
                env = _render(item_templar, task.get("environment") or {})
            except _Unknown:
                env = {}
            args_ = rendered if isinstance(rendered, dict) else {"_": rendered}
            run.calls.append(Call(module, args_, task.get("name", ""), env))
        if "register" in task and task["register"] not in registered:
            variables[task["register"]] = {"changed": True, "changed_paths": []}
