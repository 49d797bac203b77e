"""The inventory every engine sees: hosts, their groups and connection variables.

One decision for both engines: the Ansible inventory plugin (``plugins/inventory/swarm.py``)
and the pyinfra inventory build their hosts from :func:`inventory_hosts`, so the same fleet
gives the same hosts, groups and data whichever engine runs.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import InventorySourceError as InventorySourceError
from ..fleet.diagnostics import FleetInvalid, excerpt
from ..fleet.sources import fleet_paths
from ..nodeside.atomic import write_atomic
from ..resolve import desired_state, load_fleet
from ..resolve.keys import SSH_LIVENESS_OPTIONS, known_hosts_text, strict_ssh_options
from ..resolve.types import DesiredState, NodeState
from . import controller
from .endpoints import endpoint_resolution_problems

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
    """How the controller reaches a node over SSH. Its host key is always checked strictly
    (:func:`swarm_infra.resolve.keys.strict_ssh_options`; never ``accept-new``): against
    ``known_hosts_file`` when the node's ``host_keys`` are known (declared in the fleet, or
    the lab's), else against the operator's own known_hosts. ``private_key_file`` is set for
    the lab (its own key)."""

    host: str
    port: int
    user: str
    private_key_file: str | None = None
    host_keys: tuple[str, ...] = ()  # "<type> <base64>"
    known_hosts_file: str | None = None  # inventory_hosts sets it for a node with host_keys


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
    port, user and host keys (the lab's connection file: ``{host, port, user,
    private_key_file, host_keys}``; the machine there is another, so are its keys). A
    node reached over the mesh (``ssh.via_mesh``: :func:`swarm_infra.resolve.mesh.ssh_over_mesh`)
    keeps its mesh address as the host: an override replaces the underlay address only.

    Each host with keys gets a known_hosts file of its own (:func:`write_known_hosts`, the
    text made by :func:`swarm_infra.resolve.keys.known_hosts_text` from that host's target
    and keys alone) as its ``known_hosts_file``: one node's key never authenticates another
    node, even where two targets meet (issue #38: with one file for every host, a newcomer
    declaring the head's address would be accepted with the head's key and get the
    newcomer's state applied to the head). Raises ValueError for an override's host key
    that is not one (the fleet's keys were validated already).
    """
    conns = {}
    for name, node in state["nodes"].items():
        o = (overrides or {}).get(name)
        if o:
            conns[name] = Connection(
                node["ssh"]["host"] if node["ssh"].get("via_mesh") else o["host"],
                int(o["port"]),
                o["user"],
                o.get("private_key_file"),
                tuple(o.get("host_keys", ())),
            )
        else:
            ssh = node["ssh"]
            conns[name] = Connection(ssh["host"], ssh["port"], ssh["user"], host_keys=tuple(ssh["host_keys"]))
    return [
        InventoryHost(name, node_groups(node), _with_known_hosts(conns[name]), node)
        for name, node in state["nodes"].items()
    ]


def _with_known_hosts(conn: Connection) -> Connection:
    """``conn`` with the known_hosts file of its own keys, or as it is without keys."""
    if not conn.host_keys:
        return conn
    text = known_hosts_text([(conn.host, conn.port, conn.host_keys)])
    return replace(conn, known_hosts_file=write_known_hosts(text))


def known_hosts_dir() -> Path:
    """Where the controller keeps the known_hosts files it makes from fleets:
    ``$SWARM_KNOWN_HOSTS_DIR``, else ``$XDG_CACHE_HOME/swarm/known_hosts`` (by default
    ``~/.cache/swarm/known_hosts``). On the controller, never in Git: the fleet is the
    source, each file is made again from it on every run."""
    explicit = os.environ.get("SWARM_KNOWN_HOSTS_DIR")
    if explicit:
        return Path(explicit)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "swarm" / "known_hosts"


def write_known_hosts(text: str) -> str:
    """``text`` as a known_hosts file (mode 0644) in :func:`known_hosts_dir`, named by its
    SHA-256; returns its path. The name follows the content, so hosts with different
    records, runs of different fleets (or of one fleet before and after a key change) never
    share a file, and a file is
    written whole (a temporary file renamed over it) or left as it is when it already holds
    ``text``: whatever an engine reads is what this run made."""
    d = known_hosts_dir()
    d.mkdir(parents=True, exist_ok=True)
    path = d / hashlib.sha256(text.encode()).hexdigest()
    try:
        if path.read_text() == text and stat.S_IMODE(path.stat().st_mode) == 0o644:
            return str(path)
    except OSError:
        pass
    write_atomic(path, text, 0o644)
    return str(path)


def ssh_option_args(conn: Connection) -> list[str]:
    """``["-o", option, ...]``: the host key options of ``conn``
    (:func:`swarm_infra.resolve.keys.strict_ssh_options`) and the liveness options
    (:data:`swarm_infra.resolve.keys.SSH_LIVENESS_OPTIONS`), as ssh's arguments."""
    options = [*strict_ssh_options(conn.known_hosts_file), *SSH_LIVENESS_OPTIONS]
    return [arg for option in options for arg in ("-o", option)]


def ansible_connection_vars(conn: Connection) -> dict[str, Any]:
    """Ansible's connection variables for ``conn`` (ansible_host, port, user, key, SSH args).

    Host keys: the strict options as ``ansible_ssh_common_args``, and
    ``ansible_ssh_host_key_checking`` pinned true: a host variable outranks the
    environment's ``ANSIBLE_HOST_KEY_CHECKING``, which, set false, would make Ansible put
    its own option that turns the check off before ours (ssh keeps the first value it
    reads)."""
    out: dict[str, Any] = {
        "ansible_host": conn.host,
        "ansible_port": conn.port,
        "ansible_user": conn.user,
        "ansible_ssh_host_key_checking": True,
        "ansible_ssh_common_args": shlex.join(ssh_option_args(conn)),
    }
    if conn.private_key_file:
        out["ansible_ssh_private_key_file"] = conn.private_key_file
    return out


def ssh_argv(conn: Connection, command: str) -> list[str]:
    """``ssh`` argv running ``command`` (one string, for the node's login shell) on ``conn``'s
    node: no prompts (BatchMode), a 10 s connect timeout, the lab's key when ``conn`` has
    it, and the host key checked strictly (the same options as the engines')."""
    argv = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-p", str(conn.port)]
    if conn.private_key_file:
        argv += ["-i", conn.private_key_file, "-o", "IdentitiesOnly=yes"]
    return [*argv, *ssh_option_args(conn), "--", f"{conn.user}@{conn.host}", command]


def fleet_state(source: str | Path) -> tuple[list[str], DesiredState]:
    """The fleet paths an inventory source stands for, and their desired state.

    Raises :class:`InventorySourceError`: the source is not a fleet (``inventory/NAME`` or a
    ``*.swarm.yml``), the fleet is invalid (nothing downstream may run), resolving it
    failed (a bug: the validator should have refused the fleet), or a node's mesh endpoint
    name resolves to loopback, link-local or another address that is not a peer's
    (:func:`.endpoints.endpoint_resolution_problems`).
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
        state = desired_state(load_fleet(paths))
    except FleetInvalid as exc:
        raise InventorySourceError(
            f"swarm: the fleet ({', '.join(paths)}) is invalid; nothing was run:\n{exc.report.text()}"
        ) from None
    except Exception as exc:  # a resolver bug must still not show the engine a traceback
        raise InventorySourceError(
            f"swarm: internal error while resolving the fleet ({', '.join(paths)}): "
            f"{type(exc).__name__}: {excerpt(str(exc), 300)} (a validator gap: please report it)"
        ) from None
    refused = endpoint_resolution_problems(state["nodes"])
    if refused:
        raise InventorySourceError(
            "\n".join(f"swarm: {why}" for why in refused.values()) + "\nswarm: nothing was run"
        )
    # A controller the fleet declares without its key: this controller's own (push mode).
    try:
        return paths, controller.with_own_key(state)
    except controller.ControllerError as exc:
        raise InventorySourceError(f"swarm: the controller's key: {exc}") from None
