"""The inventory every engine sees: hosts, their groups and connection variables.

One decision for both engines: the Ansible inventory plugin (``plugins/inventory/swarm.py``)
and the pyinfra inventory build their hosts from :func:`inventory_hosts`, so the same fleet
gives the same hosts, groups and data whichever engine runs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..fleet.diagnostics import FleetInvalid, excerpt
from ..fleet.sources import fleet_paths
from ..resolve import desired_state, load_fleet
from ..resolve.types import DesiredState, NodeState

_UNSAFE = re.compile(r"[^a-z0-9_]")


def group_name(prefix: str, name: str) -> str:
    """A group name valid in Ansible and pyinfra: ``prefix_name`` lower-cased, with every
    character outside ``[a-z0-9_]`` replaced by ``_`` (``gpu_h100_sxm5_80gb``)."""
    return f"{prefix}_{_UNSAFE.sub('_', name.lower())}"


def node_groups(node: NodeState) -> list[str]:
    """The groups of a node: ``site_<site>``, ``role_<role>`` per role, for GPU nodes
    ``gpu``, ``gpu_<model>`` per model and ``simulated_gpu`` for the simulated backend, and
    ``ray_head`` or ``ray_worker`` in the fleet's own Ray cluster."""
    groups = [group_name("site", node["site"])] + [group_name("role", r) for r in node["roles"]]
    if node["gpu"]:
        groups.append("gpu")
        groups += [group_name("gpu", g["model"]) for g in node["hardware"]["gpus"]]
        if node["gpu"]["backend"] == "simulated":
            groups.append("simulated_gpu")
    ray = node.get("ray")
    if ray:
        groups.append(f"ray_{ray['role']}")
    return groups


@dataclass(frozen=True)
class Connection:
    """How the controller reaches a node over SSH. ``private_key_file`` and
    ``known_hosts_file`` are set for the lab (its own key and strict host keys)."""

    host: str
    port: int
    user: str
    private_key_file: str | None = None
    known_hosts_file: str | None = None


@dataclass(frozen=True)
class InventoryHost:
    name: str
    groups: list[str]
    connection: Connection
    state: NodeState = field(repr=False)


def inventory_hosts(
    state: DesiredState, overrides: Mapping[str, Mapping[str, Any]] | None = None
) -> list[InventoryHost]:
    """Every node of ``state`` as an inventory host, in name order.

    ``overrides``: connection details by node name that replace the declared SSH address,
    port and user (the lab's connection file: ``{host, port, user, private_key_file,
    known_hosts_file}``).
    """
    hosts = []
    for name, node in state["nodes"].items():
        o = (overrides or {}).get(name)
        if o:
            conn = Connection(
                o["host"], int(o["port"]), o["user"], o.get("private_key_file"), o.get("known_hosts_file")
            )
        else:
            conn = Connection(node["ssh"]["host"], node["ssh"]["port"], node["ssh"]["user"])
        hosts.append(InventoryHost(name, node_groups(node), conn, node))
    return hosts


def ansible_connection_vars(conn: Connection) -> dict[str, Any]:
    """Ansible's connection variables for ``conn`` (ansible_host, port, user, key, SSH args)."""
    out: dict[str, Any] = {"ansible_host": conn.host, "ansible_port": conn.port, "ansible_user": conn.user}
    if conn.private_key_file:
        out["ansible_ssh_private_key_file"] = conn.private_key_file
    if conn.known_hosts_file:
        out["ansible_ssh_common_args"] = (
            f"-o UserKnownHostsFile={conn.known_hosts_file} -o StrictHostKeyChecking=yes"
        )
    return out


def ssh_argv(conn: Connection, command: str) -> list[str]:
    """``ssh`` argv running ``command`` (one string, for the node's login shell) on ``conn``'s
    node: no prompts (BatchMode), a 10 s connect timeout, and the lab's key and known_hosts
    with strict checking when ``conn`` has them (the same as the engines' SSH settings)."""
    argv = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-p", str(conn.port)]
    if conn.private_key_file:
        argv += ["-i", conn.private_key_file, "-o", "IdentitiesOnly=yes"]
    if conn.known_hosts_file:
        argv += ["-o", f"UserKnownHostsFile={conn.known_hosts_file}", "-o", "StrictHostKeyChecking=yes"]
    return [*argv, "--", f"{conn.user}@{conn.host}", command]


class InventorySourceError(Exception):
    """An inventory source that gives no hosts: not a fleet, an invalid fleet (the message
    holds the validator's report, one ``file:line:col`` line per problem), or a failure to
    resolve it. The message is what the engine shows; no traceback is due."""


def fleet_state(source: str | Path) -> tuple[list[str], DesiredState]:
    """The fleet paths an inventory source stands for, and their desired state.

    Raises :class:`InventorySourceError`: the source is not a fleet (``inventory/NAME`` or a
    ``*.swarm.yml``), the fleet is invalid (nothing downstream may run), or resolving it
    failed (a bug: the validator should have refused the fleet).
    """
    try:
        paths = fleet_paths(source)
    except (OSError, ValueError) as exc:
        raise InventorySourceError(f"swarm: {source}: {exc}") from None
    if not paths:
        raise InventorySourceError(
            f"swarm: {source} is not a fleet: a path inside inventory/NAME, or a *.swarm.yml config"
        )
    try:
        return paths, desired_state(load_fleet(paths))
    except FleetInvalid as exc:
        raise InventorySourceError(
            f"swarm: the fleet ({', '.join(paths)}) is invalid; nothing was run:\n{exc.report.text()}"
        ) from None
    except Exception as exc:  # a resolver bug must still not show the engine a traceback
        raise InventorySourceError(
            f"swarm: internal error while resolving the fleet ({', '.join(paths)}): "
            f"{type(exc).__name__}: {excerpt(str(exc), 300)} (a validator gap: please report it)"
        ) from None
