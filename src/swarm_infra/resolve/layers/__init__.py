"""The node layers, in one registry: what each manages, in which order, and how.

Each layer is one module (:mod:`.host`, :mod:`.drivers`, :mod:`.gpu`, :mod:`.storage`,
:mod:`.mesh`, :mod:`.ray`) defining its :class:`~.base.Layer`: its files, each with its
path, mode and writer (the text function beside it, in the same module), its units and
packages. Everything else is made from this table: the on-node layout
(:func:`swarm_infra.resolve.layout.node_layout`), the items each layer converges and
removes (:func:`layer_files`), the texts the roles render (:func:`static_file`), the
Ansible runner's and verification's layer lists, the pyinfra layers and the node snapshot
they read (:mod:`swarm_infra.engines.pyinfra`), the review's layers
(:mod:`swarm_infra.review`); ``tests/unit/test_layers.py`` proves ``playbooks/`` and
``deploys/`` apply exactly these layers with exactly these roles, and that every file is
written by its writer. Adding a managed file is one entry in its layer's ``files`` (and
its text function beside it).

A layer is *declared* on a node when the NodeState slice it applies (``state``) is set;
an undeclared layer removes what it made (``removed``): the declared state is the whole
truth.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ..packages import FILESYSTEM_PACKAGES, PACKAGES
from ..types import LayoutState, NodeState
from . import drivers, gpu, host, mesh, ray, storage
from .base import File, Layer, Text, item

__all__ = [
    "LAYERS",
    "NAMES",
    "STATIC",
    "File",
    "Layer",
    "declared",
    "known_packages",
    "layer",
    "layer_files",
    "layout",
    "node_packages",
    "read_back",
    "removed_files",
    "static_file",
    "tunables_spec",
]

# In the order they are applied (playbooks/site.yml, deploys/site.py).
LAYERS: tuple[Layer, ...] = (host.LAYER, drivers.LAYER, gpu.LAYER, storage.LAYER, mesh.LAYER, ray.LAYER)
NAMES: tuple[str, ...] = tuple(layer.name for layer in LAYERS)
_BY_NAME = {layer.name: layer for layer in LAYERS}

# What a push node must not hold of the pull agent's (the directory stays: the deploy key
# lives there).
AGENT_REMOVED = tuple(n for n, f in host.LAYER.files.items() if n.startswith("agent_") and f.removed)


def layer(name: str) -> Layer:
    """The layer ``name``; raises KeyError (naming the layers) for another name."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no layer {name!r} (layers: {', '.join(NAMES)})") from None


def declared(node: NodeState, name: str) -> bool:
    """Whether ``node`` declares layer ``name`` (its NodeState slice is set; the drivers
    layer's is the GPU slice's driver)."""
    return layer(name).declared(node)


def layout(interface: str) -> LayoutState:
    """Every layer's files and units for a node whose mesh interface is ``interface``
    (:func:`swarm_infra.resolve.layout.node_layout`). Raises ValueError for a name two
    layers register."""
    files, units = {}, {}
    for entry in LAYERS:
        for name, spec in entry.files.items():
            if name in files:
                raise ValueError(f"layout file {name!r} registered twice (layer {entry.name})")
            files[name] = spec.managed(interface)
        for name, unit in entry.units.items():
            if name in units:
                raise ValueError(f"layout unit {name!r} registered twice (layer {entry.name})")
            units[name] = unit.format(interface=interface)
    return {"files": files, "units": units}


def removed_files(node: NodeState, name: str) -> tuple[str, ...]:
    """Layout names of the files layer ``name`` removes on ``node``: its ``removed`` files
    the node does not want (the host layer's HostProfile, package cache and pull agent
    files each go on their own; another layer's when the layer is not declared), in the
    layer's order."""
    entry = layer(name)
    return tuple(n for n, f in entry.files.items() if f.removed and not entry.wants(node, n))


def layer_files(
    node: NodeState, layer: str, peer_keys: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """Every file and directory ``layer`` writes on ``node`` itself (those no engine task
    writes: :attr:`.base.File.task`), as items for the node-side files code
    (:mod:`swarm_infra.nodeside.files`: path, state file/directory/absent, content, owner,
    group, mode), in the order to apply them: what the node must hold (the parent
    directories first, then the layer's order), then what a declaration no longer made
    must not (the reverse order: units before what they run). The declared state is the
    whole truth.

    ``peer_keys``: the peers' public keys known in this run, for the mesh layer's files
    (:func:`.mesh.wireguard_peer_keys`). A file made on the node (the WireGuard private key,
    Ray's token) is an item without content: its mode is managed.

    Raises ValueError for a name that is not a layer."""
    entry = _BY_NAME.get(layer)
    if entry is None:
        raise ValueError(f"no managed files for layer {layer!r} (layers: {', '.join(NAMES)})")
    paths, keys = node["layout"]["files"], dict(peer_keys or {})
    written = [n for n, f in entry.files.items() if f.by_layer_files and entry.wants(node, n)]
    present = [item(paths[n], "directory") for n in entry.parents] if written else []
    for name in written:
        spec = entry.files[name]
        if spec.directory:
            present.append(item(paths[name], "directory"))
        elif spec.text is not None:
            present.append(item(paths[name], "file", spec.text(node)))
        elif spec.keyed_text is not None:
            present.append(item(paths[name], "file", spec.keyed_text(node, keys)))
        else:  # made on the node
            present.append(item(paths[name], "file"))
    gone = [
        item(paths[n], "absent")
        for n, f in reversed(list(entry.files.items()))
        if f.removed and not f.task_removes and not entry.wants(node, n)
    ]
    return present + gone


# Files whose text depends on NodeState alone, by their layout name: what the engines and
# verification can compare byte for byte. ``ray_unit``: the Ray unit of the node's role.
STATIC: dict[str, Text] = {
    **{n: f.text for entry in LAYERS for n, f in entry.files.items() if f.text is not None},
    "ray_unit": ray.ray_unit,
}


def static_file(node: NodeState, name: str) -> str:
    """The text of the file ``name`` (a key of :data:`STATIC`) for ``node``.

    Raises KeyError for a name that is not a static file."""
    return STATIC[name](node)


def tunables_spec(node: NodeState, layer: str) -> dict[str, Any]:
    """What the node-side tunables code converges for ``layer`` (:mod:`swarm_infra.nodeside.
    tunables` SPEC): ``"host"``, the HostProfile's sysctls and sysfs values (none when the
    node has no profile: its files go and the recorded values come back); ``"mesh"``, the
    forwarding sysctls of relays and hubs. Each layer has its own sysctl.d file and record,
    so removing one never touches the other's keys.

    Raises ValueError for a layer without tunables."""
    entry = _BY_NAME.get(layer)
    if entry is None or entry.tunables is None:
        raise ValueError(f"no tunables for layer {layer!r}")
    return entry.tunables(node)


def node_packages(node: NodeState, name: str, *, userspace_wireguard: bool = True) -> list[str]:
    """The Debian packages layer ``name`` installs on ``node`` (none when not declared), in
    install order. ``userspace_wireguard``: the node's kernel has no WireGuard module, so
    the mesh layer adds wireguard-go (a fact of the node, not of NodeState)."""
    if not declared(node, name):
        return []
    if name == "drivers":
        gpu = node["gpu"]
        assert gpu is not None and gpu["driver"] is not None
        driver = gpu["driver"]
        return [*driver["packages"], *driver["extra_packages"]]
    if name == "storage":
        storage = node["storage"]
        assert storage is not None
        scratch = storage["scratch"]
        keys = ["storage_tools", *(["storage_raid"] if scratch["raid0"] else [])]
        return [FILESYSTEM_PACKAGES[scratch["filesystem"]], *(p for k in keys for p in PACKAGES[k])]
    keys = [k for k in layer(name).packages if k != "wireguard_userspace" or userspace_wireguard]
    return [p for k in keys for p in PACKAGES[k]]


def known_packages(node: NodeState) -> list[str]:
    """Every Debian package any layer may install on ``node`` or remove from it (the
    drivers layer's ``absent_packages``), sorted: what the engines read the installed
    version of."""
    names = {p for layer_ in LAYERS for k in layer_.packages for p in PACKAGES[k]}
    names |= set(FILESYSTEM_PACKAGES.values())
    gpu = node["gpu"]
    absent = gpu["driver"]["absent_packages"] if gpu and gpu["driver"] else []
    return sorted(names | set(node_packages(node, "drivers")) | set(absent))


def read_back(names: tuple[str, ...] = NAMES) -> Iterator[str]:
    """The layout names of the files whose text the engines read from the node, for the
    layers ``names``, in registry order."""
    for layer_ in LAYERS:
        if layer_.name in names:
            yield from (n for n, f in layer_.files.items() if f.read_back)
