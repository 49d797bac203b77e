"""The node layers, in one registry: what each manages, in which order, and how.

Every consumer reads this table and nothing else for the shape of a layer: the Ansible
runner's and verification's layer lists, the pyinfra layers and the node snapshot they
read (:mod:`swarm_infra.engines.pyinfra`), the files each layer converges and removes
(:func:`swarm_infra.resolve.files.layer_files`), and the unit tests that prove
``playbooks/`` and ``deploys/`` apply exactly these layers with exactly these roles
(``tests/unit/test_layers.py``) and that both engines manage the same things
(``tests/unit/test_engine_parity.py``). Adding a managed file to a layer is a change here
(``files``), in :mod:`.layout` (its path and mode) and in :mod:`.files` (its text).

A layer is *declared* on a node when the NodeState slice it applies (``state``) is set;
an undeclared layer removes what it made (``removed``): the declared state is the whole
truth.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

from .packages import FILESYSTEM_PACKAGES, PACKAGES
from .types import NodeState

# The pull agent's files the host layer writes on a pull node (Node spec.convergence: pull)
# and removes on a push node. Its state directory, deploy key, known hosts and pause file
# are the node's own (swarm node bootstrap, the provider): never written nor removed here.
AGENT_FILES = (
    "agent_dir",
    "agent_config",
    "agent_allowed_signers",
    "agent_revoked_signers",
    "agent_service",
    "agent_timer",
)
# What a push node must not hold (the directory stays: the deploy key lives there).
AGENT_REMOVED = AGENT_FILES[1:]


@dataclass(frozen=True, kw_only=True)
class Layer:
    """One node layer.

    ``name``: the layer (``swarm converge --layer NAME``, ``playbooks/NAME.yml``,
    ``deploys/NAME.py``). ``role``: the Ansible role that applies it. ``hosts``: the
    inventory group its play targets. ``state``: the NodeState key whose value declares it.
    ``files``: layout file names (:func:`.layout.node_layout`) it writes while declared;
    ``removed``: those it removes once no longer declared. ``read_back``: files whose text
    the engines read from the node to decide (the snapshot's ``texts``). ``units``: layout
    unit names it manages; ``restarts``: (file, unit) pairs, a change of the file reloads
    or restarts the unit. ``packages``: keys of :data:`.packages.PACKAGES` it may install
    (plus what NodeState names: the driver's packages, the scratch filesystem's).
    ``may_reboot``: it may reboot the node (only where the GPU profile allows it).
    """

    name: str
    role: str
    hosts: str
    state: str
    summary: str
    files: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    read_back: tuple[str, ...] = ()
    units: tuple[str, ...] = ()
    restarts: tuple[tuple[str, str], ...] = ()
    packages: tuple[str, ...] = ()
    may_reboot: bool = False


LAYERS: tuple[Layer, ...] = (
    Layer(
        name="host",
        role="host_tuning",
        hosts="all",
        state="host",
        summary="sysctls, hugepages, transparent hugepages, CPU governor of the HostProfile; "
        "apt through the site's package cache; the pull agent's timer on pull nodes",
        files=(
            "sysctl_conf",
            "tmpfiles_conf",
            "state_dir",
            "host_tunables_record",
            "lib_dir",
            "apt_cache_detect",
            "apt_cache_conf",
            *AGENT_FILES,
        ),
        # The node-side tunables code removes the sysctl and tmpfiles files (and restores the
        # recorded values); the package cache's files go when the site declares none; the
        # agent's when the node converges by push.
        removed=("sysctl_conf", "tmpfiles_conf", "apt_cache_conf", "apt_cache_detect", *AGENT_REMOVED),
        units=("agent_timer", "agent_service"),
        restarts=(("agent_service", "agent_timer"), ("agent_timer", "agent_timer")),
    ),
    Layer(
        name="drivers",
        role="drivers",
        hosts="gpu",
        state="gpu",
        summary="the NVIDIA driver stack of the declared source at the declared version, pinned and "
        "held; persistenced, Fabric Manager on NVSwitch boards; pynvml, kernel headers",
        files=("nouveau_blacklist", "apt_keyrings_dir", "driver_preferences", "reboot_required"),
        units=("persistenced", "fabricmanager"),
        read_back=("reboot_required",),  # an earlier run's pending reboot
        may_reboot=True,
    ),
    Layer(
        name="gpu",
        role="gpu_tuning",
        hosts="all",
        state="gpu",
        summary="GPU settings through NVML, persisted and re-applied at boot",
        files=("lib_dir", "etc_dir", "gpu_code", "gpu_settings", "gpu_unit"),
        removed=("gpu_unit", "gpu_settings", "gpu_code"),
        units=("gpu_apply",),
        restarts=(("gpu_unit", "gpu_apply"),),
    ),
    Layer(
        name="storage",
        role="storage",
        hosts="all",
        state="storage",
        summary="local NVMe scratch: RAID 0, filesystem, mount by label",
        files=("storage_record", "mdadm_conf"),
        removed=("storage_record",),
        read_back=("storage_record", "mdadm_conf"),
        packages=("storage_tools", "storage_raid"),
    ),
    Layer(
        name="mesh",
        role="wireguard",
        hosts="all",
        state="mesh",
        summary="the WireGuard mesh: keys made on the node, peers, forwarding on relays and hubs",
        files=(
            "wireguard_dir",
            "wireguard_key",
            "wireguard_peers",
            "wireguard_conf",
            "wireguard_dropin_dir",
            "wireguard_dropin",
            "mesh_sysctl_conf",
            "mesh_tunables_record",
        ),
        read_back=("wireguard_peers",),
        units=("wireguard",),
        restarts=(("wireguard_dropin", "wireguard"),),
        packages=("wireguard", "mesh_tools", "wireguard_userspace"),
    ),
    Layer(
        name="ray",
        role="ray",
        hosts="all",
        state="ray",
        summary="the fleet's Ray cluster over the mesh, its firewall and virtualenv",
        files=(
            "etc_dir",
            "ray_venv",
            "ray_auth_token",
            "ray_sysusers",
            "ray_firewall_rules",
            "ray_firewall_unit",
            "ray_head_unit",
            "ray_worker_unit",
            "ray_token_socket",
            "ray_token_service",
            "ray_lock",
            "ray_index_ca",
        ),
        removed=(
            "ray_head_unit",
            "ray_worker_unit",
            "ray_token_socket",
            "ray_token_service",
            "ray_firewall_unit",
            "ray_firewall_rules",
            "ray_venv",
            "ray_auth_token",
            "ray_sysusers",
            "ray_lock",
            "ray_index_ca",
        ),
        units=("ray_firewall", "ray_head", "ray_worker", "ray_token_socket"),
        restarts=(
            ("ray_firewall_unit", "ray_firewall"),
            ("ray_token_socket", "ray_token_socket"),
            ("ray_firewall_rules", "ray_firewall"),
            ("ray_head_unit", "ray_head"),
            ("ray_worker_unit", "ray_worker"),
        ),
        packages=("ray",),
    ),
)

NAMES: tuple[str, ...] = tuple(layer.name for layer in LAYERS)
_BY_NAME = {layer.name: layer for layer in LAYERS}


def layer(name: str) -> Layer:
    """The layer ``name``; raises KeyError (naming the layers) for another name."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no layer {name!r} (layers: {', '.join(NAMES)})") from None


def declared(node: NodeState, name: str) -> bool:
    """Whether ``node`` declares layer ``name`` (its NodeState slice is set; the drivers
    layer also needs a declared driver)."""
    value = cast(Mapping[str, Any], node)[layer(name).state]
    if name == "drivers":
        return bool(value and value["driver"])
    return bool(value)


# The host layer's two parts, each removed on its own when the node no longer declares it.
_HOST_TUNING_FILES = ("sysctl_conf", "tmpfiles_conf")  # removed by the node-side tunables code
PACKAGE_CACHE_FILES = ("apt_cache_conf", "apt_cache_detect")


def removed_files(node: NodeState, name: str) -> tuple[str, ...]:
    """Layout names of the files layer ``name`` removes on ``node``: those of the parts the
    node does not declare (the host layer's HostProfile files and package cache files go
    each on its own; another layer's ``removed`` go when the layer is not declared)."""
    if name == "host":
        return (
            (() if node["host"] else _HOST_TUNING_FILES)
            + (() if node["package_cache"] else PACKAGE_CACHE_FILES)
            + (() if node["pull"] else AGENT_REMOVED)
        )
    return () if declared(node, name) else layer(name).removed


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
            yield from layer_.read_back
