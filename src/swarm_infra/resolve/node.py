"""NodeState: what one node should look like (GPU, driver, host tuning, mesh, storage, layout)."""

from __future__ import annotations

from collections.abc import Mapping
from ipaddress import IPv4Address
from typing import Any, Literal, cast

from ..fleet.model import Mesh, Node, Storage
from . import gpu, host
from .analysis import Analysis
from .assign import Choice
from .catalog import gpu_catalog
from .drivers import driver_state
from .labels import FLAVOR_LABEL, NODE_CLASS_LABEL, SITE_LABEL
from .layout import node_layout
from .mesh import ssh_over_mesh
from .pull import pull_state
from .ray import RayMember, bare_node_ray, fleet_ray_version, token_admission, wan_rtt_ms
from .ray import members as ray_members
from .types import (
    GpuDevice,
    GpuSettings,
    GpuSharingState,
    GpuState,
    HardwareState,
    HostState,
    LayoutState,
    MeshState,
    NodeState,
    PackageCacheState,
    PeerState,
    RayNodeState,
    SshState,
    StorageState,
)

FORWARDING_SYSCTLS = {"net.ipv4.ip_forward": "1"}
# Scratch: the md array's name (mdadm(8) /dev/md/NAME) and the filesystem label, which fits
# both xfs (12 characters at most) and ext4 (16): fstab mounts it by label.
SCRATCH_ARRAY = "/dev/md/swarm-scratch"
SCRATCH_LABEL = "swarmscratch"
# systemd units that hold MIG GPU instances open without being compute processes, stopped
# (when active) before instances are destroyed and started again after, as NVIDIA mig-parted's
# nvidia-mig-manager.service hooks do (NVIDIA/mig-parted deployments/systemd/hooks.sh,
# pre-apply-config: k8s_services dcgm-exporter.service; pre-apply-mode: driver_services
# nvidia-dcgm.service; utils-custom.sh stops the same DCGM units): the exporter first, then
# DCGM. kubelet (also in hooks.sh) is left to the cluster layer's drain, and
# nvidia-persistenced holds no GPU instance (mig-parted stops it only to unload the module).
MIG_HOLDERS = ("dcgm-exporter.service", "nvidia-dcgm.service")


def package_cache(apt_proxy: str | None) -> PackageCacheState | None:
    """A site's package cache as its nodes use it: the proxy URL and the host and port the
    node probes before each apt run (the schema's form: ``http://HOST:PORT``)."""
    if not apt_proxy:
        return None
    host, _, port = apt_proxy.removeprefix("http://").rpartition(":")
    return {"apt_proxy": apt_proxy, "host": host, "port": int(port)}


class NodeResolver:
    """Builds NodeStates for one analysed fleet, sharing identical parts between nodes
    (a profile's GPU settings, a flattened HostProfile), which keeps 10,000 nodes cheap."""

    def __init__(self, a: Analysis, peers: dict[str, list[PeerState]], forwarders: set[str]) -> None:
        self.a, self.peers, self.forwarders = a, peers, forwarders
        # The fleet's own Ray cluster: its head and workers (validated: one head).
        self.ray_roles: dict[str, Literal["head", "worker"]] = {}
        if a.fleet.ray is not None and a.fleet.mesh is not None:
            heads, workers = ray_members(a.fleet.ray, a.fleet)
            self.ray_roles = {heads[0]: "head", **dict.fromkeys(workers, "worker")}
        # One figure for the whole cluster: the GCS judges every node by the same settings.
        sites = [a.fleet.nodes[n].site for n in self.ray_roles]
        self.ray_rtt = wan_rtt_ms(a.fleet, sites[0], sites) if sites else 0.0  # sites[0]: the head's
        # The pull workers the head serves the token to over the mesh (its direct peers).
        self.token_clients: dict[str, str] = {}
        if self.ray_roles:
            head = next(n for n, r in self.ray_roles.items() if r == "head")
            pull = {
                n: str(a.addresses[n])
                for n, r in self.ray_roles.items()
                if r == "worker" and a.fleet.nodes[n].convergence == "pull"
            }
            self.token_clients, _ = token_admission(peers.get(head, []), pull)
        self._gpu: dict[tuple[str, str], GpuSettings] = {}
        self._host: dict[str, dict[str, Any]] = {}
        self._sharing: dict[str | None, GpuSharingState] = {}

    def _gpu_sharing(self, profile: str | None) -> GpuSharingState:
        if profile not in self._sharing:
            spec = self.a.fleet.gpu_profiles[profile].spec if profile else {}
            self._sharing[profile] = gpu.sharing_state(profile, spec)
        return self._sharing[profile]

    def _gpu_settings(self, profile: str | None, model: str) -> GpuSettings:
        key = (profile or "", model)
        if key not in self._gpu:
            spec = self.a.fleet.gpu_profiles[profile].spec if profile else {}
            self._gpu[key] = gpu.settings_for(spec, model)
        return self._gpu[key]

    def _host_profile(self, profile: str) -> dict[str, Any]:
        if profile not in self._host:
            flat = host.flatten(profile, self.a.fleet.host_profiles)
            flat["sysctls"] = dict(sorted(flat["sysctls"].items()))
            flat["sysctl_text"] = {k: host.sysctl_text(v) for k, v in flat["sysctls"].items()}
            flat["sysfs"] = host.sysfs_items(flat)
            self._host[profile] = flat
        return self._host[profile]

    def node_state(self, node: Node) -> NodeState:
        """The NodeState of ``node`` (see :class:`swarm_infra.resolve.types.NodeState`):
        its declared identity, then one slice per layer, each decided by the function named."""
        fleet = self.a.fleet
        choices = self.a.choices.get(node.name, {})
        site = fleet.sites[node.site]
        hardware = hardware_state(node)
        layout = node_layout(fleet.mesh.interface if fleet.mesh else "wg0")
        return {
            "name": node.name,
            "site": node.site,
            "region": site.region,
            "roles": list(node.roles),
            "labels": node_labels(node),
            "address": str(node.address),
            "ssh": ssh_state(node, fleet.mesh, self.a.addresses.get(node.name)),
            "hardware": hardware,
            "gpu": self._gpu_state(node, choices.get("gpu_profile"), hardware, layout),
            "host": self._host_state(choices.get("host_profile")),
            "mesh": mesh_state(fleet.mesh, node, self.a.addresses, node.name in self.forwarders, self.peers),
            "storage": storage_state(fleet.storage, node),
            "ray": self._ray_state(node),
            "package_cache": package_cache(site.apt_proxy),
            "pull": pull_state(node, fleet.rollout),
            "layout": layout,
        }

    def _gpu_state(
        self, node: Node, choice: Choice | None, hardware: HardwareState, layout: LayoutState
    ) -> GpuState | None:
        """NodeState.gpu: None for a node without GPUs; else one device per GPU (indices in
        slot order, ``spec.hardware.gpus``) with the settings of the GpuProfile ``choice``
        names (none: settings left as they are), its driver pinned for the node's models
        (:func:`.drivers.driver_state`), the catalog's limits per model, how the device
        plugin shares them, and what a MIG change stops (:data:`MIG_HOLDERS`)."""
        if not node.gpus:
            return None
        fleet = self.a.fleet
        profile = choice.profile if choice else None
        devices: list[GpuDevice] = []
        for slot in node.gpus:
            settings = self._gpu_settings(profile, slot.model)
            devices += [
                {"index": len(devices) + i, "model": slot.model, "settings": settings}
                for i in range(slot.count)
            ]
        driver = fleet.gpu_profiles[profile].spec.get("driver") if profile else None
        return {
            "backend": node.gpu_backend,
            "profile": profile,
            "assignment": choice.assignment if choice else None,
            "driver": driver_state(driver, hardware["gpus"]) if driver else None,
            "devices": devices,
            "limits": {m: gpu.model_limits(m) for m in sorted(set(node.gpu_models))},
            "sharing": self._gpu_sharing(profile),
            "mig_holders": list(MIG_HOLDERS),
            "reboot_marker": layout["files"]["reboot_required"]["path"],
        }

    def _host_state(self, choice: Choice | None) -> HostState | None:
        """NodeState.host: None when no Assignment gives the node a HostProfile; else the
        profile ``choice`` names, flattened with its includes (:func:`.host.flatten`)."""
        if choice is None:
            return None
        # The flattened HostProfile has the rest of HostState's keys (host.flatten).
        return cast(
            HostState,
            {
                "profile": choice.profile,
                "assignment": choice.assignment,
                **self._host_profile(choice.profile),
            },
        )

    def _ray_state(self, node: Node) -> RayNodeState | None:
        """NodeState.ray: None for a node outside the fleet's bare-node Ray cluster (no
        RayCluster, no Mesh, or not a member); else its place in it (:func:`.ray.bare_node_ray`):
        its role, the mesh addresses of the head and the members, the cluster's WAN RTT and,
        for the head, the pull workers it serves the token to."""
        fleet, addresses = self.a.fleet, self.a.addresses
        role = self.ray_roles.get(node.name)
        if not role or fleet.ray is None or fleet.mesh is None:
            return None
        head = next(n for n, r in self.ray_roles.items() if r == "head")
        member = RayMember(
            role=role,
            node_ip=str(addresses[node.name]),
            head_ip=str(addresses[head]),
            region=fleet.sites[node.site].region,
            interface=fleet.mesh.interface,
            head=head,
            members=tuple(str(addresses[n]) for n in self.ray_roles),
            ray_version=fleet_ray_version(fleet),
            wan_rtt=self.ray_rtt,
            token_clients=tuple(self.token_clients.values()) if role == "head" else (),
            token_by_pull=node.name in self.token_clients,
        )
        return bare_node_ray(fleet.ray, node, member)


def node_labels(node: Node) -> dict[str, str]:
    """NodeState.labels, sorted by key: the node's own ``metadata.labels`` plus the
    project's: :data:`.labels.SITE_LABEL` (its Site), :data:`.labels.NODE_CLASS_LABEL`
    (``gpu`` or ``cpu``) and, on a GPU node, :data:`.labels.FLAVOR_LABEL` (its first
    model's flavor in the GPU catalog)."""
    # The project's labels are decided here, never taken from the node's own document
    # (which validation keeps out of reserved keys: label.reserved): a node is trusted
    # with itself only, and these labels decide which tenants' work lands on it.
    labels = dict(node.labels)
    labels[SITE_LABEL] = node.site
    labels[NODE_CLASS_LABEL] = "gpu" if node.gpus else "cpu"
    if node.gpus:
        labels[FLAVOR_LABEL] = gpu_catalog()[node.gpus[0].model]["flavor"]
    else:
        labels.pop(FLAVOR_LABEL, None)
    return dict(sorted(labels.items()))


def ssh_state(node: Node, mesh: Mesh | None, mesh_address: IPv4Address | None) -> SshState:
    """NodeState.ssh: how the controller reaches ``node`` (``spec.ssh``): at its mesh
    address (``mesh_address``, None when it has none) when the Mesh says so
    (:func:`.mesh.ssh_over_mesh`), else at ``spec.ssh.host``; its port, user and declared
    host keys (``"<type> <base64>"``)."""
    via_mesh = ssh_over_mesh(mesh, node) and mesh_address is not None
    return {
        "host": str(mesh_address) if via_mesh else node.ssh_host,
        "via_mesh": via_mesh,
        "port": node.ssh_port,
        "user": node.ssh_user,
        "host_keys": list(node.ssh_host_keys),
    }


def hardware_state(node: Node) -> HardwareState:
    """NodeState.hardware, as ``spec.hardware`` declares it: CPUs, memory (GiB), NIC speed
    (Gbit/s, None: not declared), GPU slots ``[{model, count}]`` and NVMe devices
    ``[{device, size_gib}]``."""
    return {
        "cpus": node.cpus,
        "memory_gib": node.memory_gib,
        "nic_speed_gbps": node.nic_speed_gbps,
        "gpus": [{"model": s.model, "count": s.count} for s in node.gpus],
        "nvme": [{"device": d, "size_gib": size} for d, size in node.nvme],
    }


def mesh_state(
    mesh: Mesh | None,
    node: Node,
    addresses: Mapping[str, IPv4Address],
    forwarding: bool,
    peers: Mapping[str, list[PeerState]],
) -> MeshState | None:
    """NodeState.mesh: None when the fleet has no Mesh; else the node's WireGuard
    interface: its mesh address (``addresses``, with the Mesh's prefix), listen port (the
    node's, else the Mesh's), MTU, whether it routes between peers (``forwarding``: a
    relay or hub in use) with the sysctls that needs, its recorded public key and its
    ``peers`` (by node name, from :func:`.mesh.peers`)."""
    if mesh is None:
        return None
    return {
        "interface": mesh.interface,
        "address": f"{addresses[node.name]}/{mesh.cidr.prefixlen}",
        "listen_port": node.listen_port or mesh.listen_port,
        "mtu": mesh.mtu,
        "forwarding": forwarding,
        # Relays and hubs route between peers (ip-sysctl.rst: ip_forward, per namespace).
        "sysctls": FORWARDING_SYSCTLS if forwarding else {},
        "public_key": node.wireguard_public_key,
        "peers": peers.get(node.name, []),
    }


def storage_state(storage: Storage | None, node: Node) -> StorageState | None:
    """NodeState.storage: None unless the fleet's Storage declares scratch and the node has
    NVMe devices; else the scratch filesystem over all of them: one md RAID 0 array
    (:data:`SCRATCH_ARRAY`) when ``raid0`` is asked and there is more than one device, else
    the first device; size in GiB, the sum of the devices'."""
    scratch = storage.scratch if storage is not None else None
    if scratch is None or not node.nvme:
        return None
    devices = [d for d, _ in node.nvme]
    raid0 = scratch["raid0"] and len(devices) > 1
    return {
        "scratch": {
            "mount_path": scratch["mount_path"],
            "filesystem": scratch["filesystem"],
            "raid0": raid0,
            "devices": devices,
            "size_gib": sum(size for _, size in node.nvme),
            "array": SCRATCH_ARRAY if raid0 else None,
            "target": SCRATCH_ARRAY if raid0 else devices[0],
            "label": SCRATCH_LABEL,
            # noatime: scratch is rewritten constantly and nothing reads access times;
            # "discard" joins it on the node where the target device supports TRIM.
            "mount_options": ["noatime"],
        }
    }
