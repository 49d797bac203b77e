"""Resolve a checked fleet into desired state: one NodeState per node and one ClusterState.

Desired state is plain JSON data (dicts, lists, str, int, float, bool, None), with
sorted keys and name-ordered lists, so the same declarations always give byte-identical
``json.dumps(..., sort_keys=True)`` output; plan/diff and review rely on that. It holds
no secrets: WireGuard peers are named, their public keys are exchanged at converge time.
Treat it as read-only: identical sub-structures (a profile's GPU settings, a relay's
AllowedIPs) may be shared between nodes.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from . import gpu, host, mesh
from .catalog import gpu_catalog
from .checks.allocation import gpu_capacity
from .checks.context import Analysis
from .model import Node, Rollout

GPU_RESOURCE = "nvidia.com/gpu"
FLAVOR_LABEL = "swarm.io/gpu-flavor"
SITE_LABEL = "swarm.io/site"


def _node_state(
    a: Analysis,
    node: Node,
    peers: dict[str, list[dict[str, Any]]],
    forwarders: set[str],
    gpu_cache: dict[tuple[str, str], dict[str, Any]],
    host_cache: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    fleet, catalog = a.fleet, gpu_catalog()
    choices = a.choices.get(node.name, {})
    labels = dict(node.labels)
    labels[SITE_LABEL] = node.site
    if node.gpus:
        labels[FLAVOR_LABEL] = catalog[node.gpus[0].model]["flavor"]
    state: dict[str, Any] = {
        "name": node.name,
        "site": node.site,
        "region": fleet.sites[node.site].region,
        "roles": list(node.roles),
        "labels": dict(sorted(labels.items())),
        "address": str(node.address),
        "ssh": {"host": node.ssh_host, "port": node.ssh_port, "user": node.ssh_user},
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
    }
    choice = choices.get("gpu_profile")
    if node.gpus:
        spec = fleet.gpu_profiles[choice.profile].spec if choice else {}
        devices, index = [], 0
        for slot in node.gpus:
            key = (choice.profile if choice else "", slot.model)
            if key not in gpu_cache:
                gpu_cache[key] = gpu.settings_for(spec, slot.model)
            for _ in range(slot.count):
                devices.append({"index": index, "model": slot.model, "settings": gpu_cache[key]})
                index += 1
        driver = spec.get("driver")
        state["gpu"] = {
            "backend": node.gpu_backend,
            "profile": choice.profile if choice else None,
            "assignment": choice.assignment if choice else None,
            "driver": driver_state(driver) if driver else None,
            "devices": devices,
            "limits": {m: gpu.model_limits(m) for m in sorted(set(node.gpu_models))},
        }
    choice = choices.get("host_profile")
    if choice:
        if choice.profile not in host_cache:
            flat = host.flatten(choice.profile, fleet.host_profiles)
            flat["sysctls"] = dict(sorted(flat["sysctls"].items()))
            flat["sysfs"] = host.sysfs_items(flat)
            host_cache[choice.profile] = flat
        state["host"] = {
            "profile": choice.profile,
            "assignment": choice.assignment,
            **host_cache[choice.profile],
        }
    if fleet.mesh is not None:
        m = fleet.mesh
        state["mesh"] = {
            "interface": m.interface,
            "address": f"{a.addresses[node.name]}/{m.cidr.prefixlen}",
            "listen_port": node.listen_port or m.listen_port,
            "mtu": m.mtu,
            "forwarding": node.name in forwarders,
            "peers": peers.get(node.name, []),
        }
    st = fleet.storage
    if st is not None and st.scratch is not None and node.nvme:
        state["storage"] = {
            "scratch": {
                "mount_path": st.scratch["mount_path"],
                "filesystem": st.scratch.get("filesystem", "xfs"),
                "raid0": st.scratch.get("raid0", True) and len(node.nvme) > 1,
                "devices": [d for d, _ in node.nvme],
                "size_gib": sum(size for _, size in node.nvme),
            }
        }
    return state


def cluster_state(a: Analysis) -> dict[str, Any]:
    """ClusterState: flavors, ClusterQueues, cohorts, tenants, priorities, storage, capacity.

    Quotas are in GPUs of resource ``nvidia.com/gpu``; ``capacity`` gives per flavor the
    fleet's GPUs (on gpu-worker nodes), the sum of nominal quotas and what is unallocated.
    """
    fleet, catalog = a.fleet, gpu_catalog()
    capacity = gpu_capacity(a)
    flavors = a.flavors()
    nominal: dict[str, int] = defaultdict(int)
    queues, tenants, cohorts = [], [], set()
    if fleet.allocation is not None:
        for q in sorted(fleet.allocation.queues, key=lambda q: q.name):
            if q.cohort:
                cohorts.add(q.cohort)
            quotas = []
            for quota in sorted(q.quotas, key=lambda x: x.flavor):
                nominal[quota.flavor] += quota.nominal_quota
                quotas.append(
                    {
                        "flavor": quota.flavor,
                        "resource": GPU_RESOURCE,
                        "nominal_quota": quota.nominal_quota,
                        "borrowing_limit": quota.borrowing_limit,
                        "lending_limit": quota.lending_limit,
                    }
                )
            queues.append(
                {
                    "name": q.name,
                    "cohort": q.cohort,
                    "fair_sharing_weight": q.fair_sharing_weight,
                    "preemption": {
                        "within_cluster_queue": q.within_cluster_queue,
                        "reclaim_within_cohort": q.reclaim_within_cohort,
                        "borrow_within_cohort": q.borrow_within_cohort,
                    },
                    "quotas": quotas,
                }
            )
        for t in sorted(fleet.allocation.tenants, key=lambda t: t.name):
            tenants.append(
                {
                    "name": t.name,
                    "namespace": t.namespace,
                    "local_queue": t.name,
                    "cluster_queue": t.queue,
                    "priorities": sorted(t.priorities)
                    if t.priorities is not None
                    else sorted(fleet.priorities),
                }
            )
    namespaces = {t["name"]: t["namespace"] for t in tenants}
    storage = None
    if fleet.storage is not None:
        st = fleet.storage
        storage = {
            "scratch": dict(st.scratch) if st.scratch else None,
            "classes": sorted(
                (
                    {
                        "name": c["name"],
                        "provisioner": c["provisioner"],
                        "parameters": dict(sorted(c.get("parameters", {}).items())),
                        "reclaim_policy": c.get("reclaim_policy", "Delete"),
                        "volume_binding_mode": c.get("volume_binding_mode", "WaitForFirstConsumer"),
                        "default": c.get("default", False),
                    }
                    for c in st.classes
                ),
                key=lambda c: c["name"],
            ),
            "volumes": sorted(
                (
                    {
                        "name": v["name"],
                        "tenant": v["tenant"],
                        "namespace": namespaces[v["tenant"]],
                        "class": v["class"],
                        "size_gib": v["size_gib"],
                        "purpose": v.get("purpose", "other"),
                        "access_modes": list(v.get("access_modes", ["ReadWriteMany"])),
                    }
                    for v in st.volumes
                ),
                key=lambda v: (v["namespace"], v["name"]),
            ),
        }
    return {
        "flavors": [
            {
                "name": f,
                "gpu_model": m,
                "product_name": catalog[m]["product_name"],
                "node_labels": {FLAVOR_LABEL: f},
                "gpus": capacity.get(f, 0),
            }
            for f, m in flavors.items()
        ],
        "cohorts": sorted(cohorts),
        "cluster_queues": queues,
        "tenants": tenants,
        "priorities": [
            {
                "name": p.name,
                "value": p.value,
                "preemption_policy": p.preemption_policy,
                "global_default": p.global_default,
                "description": p.description,
            }
            for p in sorted(fleet.priorities.values(), key=lambda p: (-p.value, p.name))
        ],
        "storage": storage,
        "capacity": {
            f: {
                "gpus": capacity.get(f, 0),
                "nominal_quota": nominal.get(f, 0),
                "unallocated": capacity.get(f, 0) - nominal.get(f, 0),
            }
            for f in flavors
        },
    }


def driver_state(driver: dict[str, Any]) -> dict[str, Any]:
    """A GpuProfile's ``driver`` as NodeState: branch, version, allow_reboot, and
    ``apt_version``, the Debian version glob that pins it (``570.86.15-*`` for a version,
    ``570.*`` for a whole branch; apt_preferences(5) and ``apt-get install name=glob``)."""
    version = driver.get("version")
    return {
        "branch": driver["branch"],
        "version": version,
        "allow_reboot": driver.get("allow_reboot", False),
        "apt_version": f"{version}-*" if version else f"{driver['branch']}.*",
    }


def desired_state(a: Analysis) -> dict[str, Any]:
    """``{"nodes": {name: NodeState}, "cluster": ClusterState}`` for a checked fleet.

    ``a`` comes from :func:`swarm_infra.validate.load_fleet` (errors already excluded).
    NodeState keys: name, site, region, roles, labels, address, ssh, hardware, gpu (None
    without GPUs: backend, profile, driver (with apt_version), devices[index, model,
    settings], limits), host (None without a HostProfile: sysctls, hugepages,
    transparent_hugepages, cpu_governor, sysfs[name, path, glob, value]), mesh (interface,
    address, listen_port, mtu, forwarding, peers) and storage (scratch on NVMe, or None).
    """
    peers: dict[str, list[dict[str, Any]]] = {}
    forwarders: set[str] = set()
    if a.fleet.mesh is not None and a.topology is not None:
        peers, forwarders = mesh.peers(a.fleet, a.topology, a.addresses)
    gpu_cache: dict[tuple[str, str], dict[str, Any]] = {}
    host_cache: dict[str, dict[str, Any]] = {}
    nodes = {
        name: _node_state(a, node, peers, forwarders, gpu_cache, host_cache)
        for name, node in a.fleet.nodes.items()
    }
    return {"nodes": nodes, "cluster": cluster_state(a), "rollout": rollout_state(a)}


def rollout_state(a: Analysis | None) -> dict[str, Any]:
    """Ansible play keywords for node convergence: ``serial`` (canary batch first, then a
    percentage of the hosts) and ``max_fail_percentage``, from the fleet's Rollout, or the
    Rollout defaults when it has none (or ``a`` is None: no fleet)."""
    r = (a and a.fleet.rollout) or Rollout("default", None)  # type: ignore[arg-type]
    return {"serial": [r.canary_hosts, f"{r.batch_percent}%"], "max_fail_percentage": r.max_fail_percentage}
