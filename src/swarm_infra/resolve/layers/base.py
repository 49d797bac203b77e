"""What a layer and each of its files are: the shape every layer module fills in.

A :class:`File` is one layout entry (path, mode, file or directory) and how it comes to be
on a node: its *writer*. A writer is a text function of NodeState (``text``), of NodeState
and the peers' public keys (``keyed_text``), a directory, or content made on the node
itself (``made_on_node``, a reason: a key, a token); or ``task``, the reason an engine's own
task writes it instead of :func:`swarm_infra.resolve.layers.layer_files` (the node-side
tunables code, a package manager, a task ordered between package installs). A file has
one content writer or none, and a ``task`` when it has no content writer; a ``task``
beside a ``text`` names the task that writes that text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from ..paths import managed_path
from ..types import ManagedPath, NodeState

Text = Callable[[NodeState], str]
KeyedText = Callable[[NodeState, Mapping[str, str]], str]
Wanted = Callable[[NodeState], bool]


@dataclass(frozen=True, kw_only=True)
class File:
    """One file or directory a layer manages.

    ``path``: absolute, ``{interface}`` standing for the node's mesh interface; ``mode``:
    octal text, by default 0755 for a directory and 0644 for a file (owner and group are
    root). ``directory``: a directory item. ``text`` /
    ``keyed_text`` / ``made_on_node`` / ``task``: its writer (see the module). ``wanted``:
    whether the node must hold it (default: the layer is declared). ``removed``: it is
    removed where not wanted, by :func:`layer_files` or, with ``task_removes``, by its
    task. ``read_back``: the engines read its text from the node to decide (the
    snapshot's ``texts``).

    Raises ValueError for a file with no writer, or with two content writers."""

    path: str
    mode: str = ""  # "": 0755 for a directory, 0644 for a file
    directory: bool = False
    text: Text | None = None
    keyed_text: KeyedText | None = None
    made_on_node: str = ""
    task: str = ""
    wanted: Wanted | None = None
    removed: bool = False
    task_removes: bool = False
    read_back: bool = False

    def __post_init__(self) -> None:
        writers = [w for w in (self.directory, self.text, self.keyed_text, self.made_on_node) if w]
        if len(writers) > 1:
            raise ValueError(f"{self.path}: two writers")
        if not writers and not self.task:
            raise ValueError(f"{self.path}: no writer, and no task named that writes it")
        if self.task_removes and not (self.task and self.removed):
            raise ValueError(f"{self.path}: task_removes without a task that removes it")

    @property
    def by_layer_files(self) -> bool:
        """Whether :func:`layer_files` writes it (else its ``task`` does)."""
        return not self.task

    def managed(self, interface: str) -> ManagedPath:
        """Its layout entry for a node whose mesh interface is ``interface``."""
        mode = self.mode or ("0755" if self.directory else "0644")
        return managed_path(self.path.format(interface=interface), mode, self.directory)


@dataclass(frozen=True, kw_only=True)
class Layer:
    """One node layer.

    ``name``: the layer (``swarm converge --layer NAME``, ``playbooks/NAME.yml``,
    ``deploys/NAME.py``). ``role``: the Ansible role that applies it; ``hosts``: the
    inventory group its play targets (both checked against ``playbooks/``). ``state``: the
    NodeState path whose value declares it (``("gpu", "driver")``: the GPU slice's driver).
    ``title`` and ``sources``: how the review shows a change of that state, and the fleet
    kinds such a change may come from besides the node's own document. ``files``: layout
    name -> :class:`File`, in the order to write them (removed in the reverse order).
    ``parents``: other layers' directories its files go in, made first. ``units``: layout
    unit name -> systemd unit (``{interface}`` as in paths). ``packages``: keys of
    :data:`..packages.PACKAGES` it may install (plus what NodeState names: the driver's
    packages, the scratch filesystem's). ``tunables``: the node-side tunables code's SPEC
    for the layer (:mod:`swarm_infra.nodeside.tunables`), where it has sysctls or sysfs
    values.
    """

    name: str
    role: str
    hosts: str
    state: tuple[str, ...]
    title: str
    sources: tuple[str, ...]
    files: Mapping[str, File]
    parents: tuple[str, ...] = ()
    units: Mapping[str, str] = field(default_factory=dict)
    packages: tuple[str, ...] = ()
    tunables: Callable[[NodeState], dict[str, Any]] | None = None

    def declared(self, node: NodeState) -> bool:
        """Whether ``node`` declares the layer: every step of ``state`` is set."""
        value: Any = node
        for key in self.state:
            value = cast(Mapping[str, Any], value)[key]
            if not value:
                return False
        return True

    def wants(self, node: NodeState, name: str) -> bool:
        """Whether ``node`` must hold the layer's file ``name``."""
        wanted = self.files[name].wanted
        return wanted(node) if wanted else self.declared(node)


def item(path: ManagedPath, state: str, content: str | None = None) -> dict[str, Any]:
    """One item for the node-side files code (:mod:`swarm_infra.nodeside.files`): ``state``
    file, directory or absent; a file without ``content`` has its mode managed only."""
    if state == "absent":
        return {"path": path["path"], "state": "absent"}
    return {
        "path": path["path"],
        "state": state,
        "content": content,
        "owner": path["owner"],
        "group": path["group"],
        "mode": path["mode"],
    }
