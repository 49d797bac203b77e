"""The controller's record of the WireGuard public keys nodes reported.

A node's root can make a new key pair at any time, and a machine that takes over a node's
SSH address answers with its own: either way every other node would trust the new key on
the next converge. So ``swarm converge`` keeps what each node reported the first time
(trust on first use) in a file on the controller, and both engines refuse a node whose key
differs from it (:func:`swarm_infra.resolve.keys.key_change_problem`) until the operator
accepts the change for that node (``--accept-key-change NODE``). Peers keep the recorded
key meanwhile: no other node's configuration changes because of the refused one.

The file is ``$SWARM_STATE_DIR/<fleet>/wireguard-keys.json`` (default
``$XDG_STATE_HOME/swarm``, else ``~/.local/state/swarm``), a JSON object ``{node name:
public key}``, mode 0644 (public keys are not secret), one per fleet name (the inventory
directory's name, or a ``*.swarm.yml`` file's stem): copies of a fleet that converge the
same machines share it. Nodes no longer declared in the mesh leave it after a converge.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import KeyRecordInvalid as KeyRecordInvalid
from ..nodeside.atomic import write_atomic
from ..resolve.keys import key_holder, wireguard_key_problem

FILE_NAME = "wireguard-keys.json"


@dataclass
class KeyCheck:
    """What an engine's run needs to check reported keys against the record, and what it
    gives back: ``recorded`` {node: key} as loaded, ``accepted`` node names whose changed
    key the operator accepts, and ``published`` {node: key}, filled by the run with every
    key a node reported that passed both checks (format and record) and that peers use."""

    recorded: Mapping[str, str] = field(default_factory=dict)
    accepted: frozenset[str] = frozenset()
    published: dict[str, str] = field(default_factory=dict)


def fleet_name(inventory: Path) -> str:
    """The record's fleet name for an inventory source: ``inventory/lab`` -> ``lab``,
    ``x/prod.swarm.yml`` -> ``prod``."""
    name = inventory.name
    return name.removesuffix(".swarm.yml") if name.endswith(".swarm.yml") else name


def record_path(inventory: Path) -> Path:
    """Where the record of ``inventory``'s fleet lives (see the module's documentation)."""
    base = os.environ.get("SWARM_STATE_DIR") or os.path.join(
        os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state"), "swarm"
    )
    return Path(base) / fleet_name(inventory) / FILE_NAME


def load(path: Path) -> dict[str, str]:
    """The record at ``path`` ({} when there is none yet).

    Raises :class:`KeyRecordInvalid` when it is not a JSON object whose values are
    WireGuard public keys (the file is the operator's: a broken one stops the converge
    before anything runs, rather than trusting every key again)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise KeyRecordInvalid(f"{path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise KeyRecordInvalid(f"{path}: not UTF-8 text") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise KeyRecordInvalid(f"{path}:{exc.lineno}: not JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise KeyRecordInvalid(f"{path}: expected a JSON object {{node: public key}}")
    for name, key in data.items():
        problem = wireguard_key_problem(key)
        if problem:
            raise KeyRecordInvalid(f"{path}: $[{json.dumps(name)}]: {problem}")
    return dict(data)


def updated(
    recorded: Mapping[str, str], published: Mapping[str, str], declared: Iterable[str]
) -> dict[str, str]:
    """The record after a run: the keys ``published`` in it over those ``recorded``, for the
    ``declared`` mesh nodes only (a node removed from the fleet leaves the record; one
    outside ``--limit`` keeps its entry). The first binding stands (issue #38): a published
    key that the record holds for another declared node is not recorded for this one (the
    engines refused that node: :func:`swarm_infra.resolve.keys.key_taken_problem`)."""
    keep = set(declared)
    first = {name: key for name, key in recorded.items() if name in keep}
    merged = dict(recorded)
    for name, key in published.items():
        if key_holder(name, key, first) is None:
            merged[name] = key
    return {name: merged[name] for name in sorted(keep & set(merged))}


def save(path: Path, record: Mapping[str, str]) -> None:
    """Write ``record`` to ``path`` atomically (a new file renamed over the old), 0644."""
    write_atomic(path, json.dumps(dict(sorted(record.items())), indent=2) + "\n", 0o644)


def forget(path: Path, nodes: Iterable[str]) -> list[str]:
    """Drop ``nodes`` from the record at ``path`` (a lab node made anew has a new key, and
    nothing else could have its disk); returns the names that were in it."""
    record = load(path)
    gone = sorted(set(nodes) & set(record))
    if gone:
        save(path, {n: k for n, k in record.items() if n not in gone})
    return gone
