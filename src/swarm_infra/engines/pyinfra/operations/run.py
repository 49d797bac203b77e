"""What the operations keep for one pyinfra run: one :class:`Run` per pyinfra ``State``.

pyinfra's ``State`` (pyinfra 3.10.0, pyinfra/api/state.py) holds pyinfra's own data and has
no place for a deploy's; so each State's Run lives in one map keyed weakly by the State,
and ends with it (a controller that converges twice, or the tests, make several States).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from weakref import WeakKeyDictionary

from pyinfra import host

from ....nodeside import snapshot as nodeside_snapshot
from ....resolve.layers import known_packages, read_back
from ....resolve.rollout import rollout_state
from ....resolve.types import NodeState
from ...keyrecord import KeyCheck
from .util import nodeside_fact, unit_name


def _default_settings() -> dict[str, Any]:
    return {"rollout": rollout_state(None), "verify_argv": []}


@dataclass
class Run:
    """One pyinfra run's data beside pyinfra's State, by host name where per host.

    + settings: set by the runner (:func:`run_settings`)
    + key_check: the controller's key record and the accepted key changes (set by the
      runner; empty: every well-formed key is trusted)
    + public_keys: the WireGuard public keys the hosts reported, once checked
    + notes: the notes for the operator, {host: [text]}, which ``swarm converge`` prints
    + boot_ids: each host's boot id before its reboot
    + snapshots: each host's snapshot (:func:`snapshot`), until an operation changes it
    """

    settings: dict[str, Any] = field(default_factory=_default_settings)
    key_check: KeyCheck = field(default_factory=KeyCheck)
    public_keys: dict[str, str] = field(default_factory=dict)
    notes: dict[str, list[str]] = field(default_factory=dict)
    boot_ids: dict[str, str] = field(default_factory=dict)
    snapshots: dict[str, dict[str, Any]] = field(default_factory=dict)

    def note(self, host_name: str, text: str) -> None:
        """Record ``text`` for the operator about host ``host_name``."""
        self.notes.setdefault(host_name, []).append(text)


_RUNS: WeakKeyDictionary[Any, Run] = WeakKeyDictionary()


def run_of(state: Any = None) -> Run:
    """``state``'s Run (default: the current host's), made empty on first use."""
    key = state if state is not None else host.state
    found = _RUNS.get(key)
    if found is None:
        found = _RUNS[key] = Run()
    return found


def record_note(text: str) -> None:
    """A note for the operator about the current host (printed by pyinfra and collected for
    ``swarm converge``'s progress lines)."""
    host.noop(text)
    run_of(host.state).note(host.name, text)


def notes(state: Any) -> dict[str, list[str]]:
    """The notes recorded in ``state``'s run, by host name."""
    return run_of(state).notes


def public_keys(state: Any) -> dict[str, str]:
    """WireGuard public keys of the hosts in ``state``'s run, by host name, as
    :func:`~.mesh.wireguard_key` found or made them (the other hosts' keys come from each
    node's peers file, as in the Ansible role)."""
    return run_of(state).public_keys


def key_check(state: Any) -> KeyCheck:
    """The controller's key record and the accepted key changes for ``state``'s run (set by
    the runner; empty: every well-formed key is trusted)."""
    return run_of(state).key_check


def run_settings(state: Any = None) -> dict[str, Any]:
    """``state``'s run (default: the current host's): ``rollout`` (RolloutState; the
    defaults until the runner sets the fleet's) and ``verify_argv`` (the swarm verify
    command a rebooted node is verified with; empty: not verified, and said so)."""
    return run_of(state).settings


def snapshot_spec(node: NodeState) -> dict[str, Any]:
    """What the snapshot of ``node`` reads: its layout's paths and units, the layers'
    packages, its mesh interface and key, scratch devices and mount, Ray's virtualenv, and
    the files whose text the deploys compare."""
    layout = node["layout"]
    files = layout["files"]
    mesh, storage, ray = node.get("mesh"), node.get("storage"), node.get("ray")
    scratch = storage["scratch"] if storage else None
    texts = list(dict.fromkeys(read_back()))  # the registry's read_back files, once each
    return {
        "paths": sorted(
            {f["path"] for f in files.values()}
            | ({scratch["array"]} if scratch and scratch["array"] else set())
        ),
        "texts": [files[t]["path"] for t in texts] + ["/etc/fstab"],
        "units": sorted(unit_name(u) for u in layout["units"].values()),
        "packages": known_packages(node),
        "interfaces": [mesh["interface"]] if mesh else [],
        "devices": sorted(set(scratch["devices"]) | {scratch["target"]}) if scratch else [],
        "venvs": [files["ray_venv"]["path"]] if ray else [],
        "public_keys": [files["wireguard_key"]["path"]] if mesh else [],
        "wireguard": [mesh["interface"]] if mesh else [],
        "mounts": [scratch["mount_path"]] if scratch else [],
        "modules": ["wireguard"],
        "users": [ray["user"]] if ray else [],
    }


def snapshot() -> dict[str, Any]:
    """The current host's snapshot, read once and kept until an operation changes the node."""
    cache = run_of(host.state).snapshots
    if host.name not in cache:
        cache[host.name] = nodeside_fact(
            nodeside_snapshot, "snapshot", "snapshot", snapshot_spec(host.data.swarm)
        )
    return cache[host.name]


def changing() -> None:
    """Drop the current host's snapshot: an operation is about to change the node."""
    run_of(host.state).snapshots.pop(host.name, None)
