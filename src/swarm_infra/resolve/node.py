"""NodeState: what one node should look like (GPU, driver, host tuning, mesh, storage, layout)."""

from __future__ import annotations

from typing import Any, Literal, cast

from ..fleet.model import Node
from . import gpu, host
from .analysis import Analysis
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
    HostState,
    NodeState,
    PackageCacheState,
    PeerState,
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

    def _host_state(self, profile: str) -> dict[str, Any]:
        if profile not in self._host:
            flat = host.flatten(profile, self.a.fleet.host_profiles)
            flat["sysctls"] = dict(sorted(flat["sysctls"].items()))
            flat["sysctl_text"] = {k: host.sysctl_text(v) for k, v in flat["sysctls"].items()}
            flat["sysfs"] = host.sysfs_items(flat)
            self._host[profile] = flat
        return self._host[profile]

    def node_state(self, node: Node) -> NodeState:
        """The NodeState of ``node`` (see :class:`swarm_infra.resolve.types.NodeState`)."""
        a, fleet = self.a, self.a.fleet
        choices = a.choices.get(node.name, {})
        # The project's labels are decided here, never taken from the node's own document
        # (which validation keeps out of reserved keys: label.reserved): a node is trusted
        # with itself only, and these labels decide which tenants' work lands on it.
        labels = dict(node.labels)
        labels[SITE_LABEL] = node.site
        via_mesh = ssh_over_mesh(fleet.mesh, node) and node.name in a.addresses
        labels[NODE_CLASS_LABEL] = "gpu" if node.gpus else "cpu"
        if node.gpus:
            labels[FLAVOR_LABEL] = gpu_catalog()[node.gpus[0].model]["flavor"]
        else:
            labels.pop(FLAVOR_LABEL, None)
        state: NodeState = {
            "name": node.name,
            "site": node.site,
            "region": fleet.sites[node.site].region,
            "roles": list(node.roles),
            "labels": dict(sorted(labels.items())),
            "address": str(node.address),
            "ssh": {
                "host": str(a.addresses[node.name]) if via_mesh else node.ssh_host,
                "via_mesh": via_mesh,
                "port": node.ssh_port,
                "user": node.ssh_user,
                "host_keys": list(node.ssh_host_keys),
            },
            "hardware": {
                "cpus": node.cpus,
                "memory_gib": node.memory_gib,
                "nic_speed_gbps": node.nic_speed_gbps,
                "gpus": [{"model": s.model, "count": s.count} for s in node.gpus],
                "nvme": [{"device": d, "size_gib": size} for d, size in node.nvme],
            },
            "gpu": None,
            "host": None,
            "mesh": None,
            "storage": None,
            "ray": None,
            "package_cache": package_cache(fleet.sites[node.site].apt_proxy),
            "pull": pull_state(node, fleet.rollout),
            "layout": node_layout(fleet.mesh.interface if fleet.mesh else "wg0"),
        }
        choice = choices.get("gpu_profile")
        if node.gpus:
            profile = choice.profile if choice else None
            gpu_devices: list[GpuDevice] = []
            for slot in node.gpus:
                settings = self._gpu_settings(profile, slot.model)
                gpu_devices += [
                    {"index": len(gpu_devices) + i, "model": slot.model, "settings": settings}
                    for i in range(slot.count)
                ]
            driver = fleet.gpu_profiles[profile].spec.get("driver") if profile else None
            state["gpu"] = {
                "backend": node.gpu_backend,
                "profile": profile,
                "assignment": choice.assignment if choice else None,
                "driver": driver_state(driver, state["hardware"]["gpus"]) if driver else None,
                "devices": gpu_devices,
                "limits": {m: gpu.model_limits(m) for m in sorted(set(node.gpu_models))},
                "sharing": self._gpu_sharing(profile),
                "mig_holders": list(MIG_HOLDERS),
                "reboot_marker": state["layout"]["files"]["reboot_required"]["path"],
            }
        choice = choices.get("host_profile")
        if choice:
            # The flattened HostProfile has the rest of HostState's keys (host.flatten).
            host_state = cast(
                HostState,
                {
                    "profile": choice.profile,
                    "assignment": choice.assignment,
                    **self._host_state(choice.profile),
                },
            )
            state["host"] = host_state
        if fleet.mesh is not None:
            m = fleet.mesh
            state["mesh"] = {
                "interface": m.interface,
                "address": f"{a.addresses[node.name]}/{m.cidr.prefixlen}",
                "listen_port": node.listen_port or m.listen_port,
                "mtu": m.mtu,
                "forwarding": node.name in self.forwarders,
                # Relays and hubs route between peers (ip-sysctl.rst: ip_forward, per namespace).
                "sysctls": FORWARDING_SYSCTLS if node.name in self.forwarders else {},
                "public_key": node.wireguard_public_key,
                "peers": self.peers.get(node.name, []),
            }
        role = self.ray_roles.get(node.name)
        if role and fleet.ray is not None and fleet.mesh is not None:
            head = next(n for n, r in self.ray_roles.items() if r == "head")
            member = RayMember(
                role=role,
                node_ip=str(a.addresses[node.name]),
                head_ip=str(a.addresses[head]),
                region=fleet.sites[node.site].region,
                interface=fleet.mesh.interface,
                head=head,
                members=tuple(str(a.addresses[n]) for n in self.ray_roles),
                ray_version=fleet_ray_version(fleet),
                wan_rtt=self.ray_rtt,
                token_clients=tuple(self.token_clients.values()) if role == "head" else (),
                token_by_pull=node.name in self.token_clients,
            )
            state["ray"] = bare_node_ray(fleet.ray, node, member)
        scratch = fleet.storage.scratch if fleet.storage is not None else None
        if scratch is not None and node.nvme:
            devices = [d for d, _ in node.nvme]
            raid0 = scratch["raid0"] and len(devices) > 1
            state["storage"] = {
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
        return state
