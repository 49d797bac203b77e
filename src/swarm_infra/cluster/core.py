"""Core Kubernetes objects: namespaces, PriorityClasses, tenant caps, node labels and taints,
GPU sharing configuration, storage and the mesh topology ConfigMap."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import yaml

from ..resolve.labels import SITE_LABEL
from ..resolve.types import CapsState, ClusterState, ComputeState, NodeState
from .admission import ALLOWED
from .meta import PRIORITY_LABEL_PREFIX, TENANT_LABEL, K8sObject, cpu, k8s_object, memory

REGION_LABEL = "swarm.io/region"
MESH_ADDRESS_LABEL = "swarm.io/mesh-address"
# Read by the NVIDIA device plugin's config manager and the GPU Operator's MIG manager.
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
DEVICE_PLUGIN_CONFIGMAP = "swarm-device-plugin-config"
MIG_CONFIGMAP = "swarm-mig-config"
MIG_CONFIG_KEY = "config.yaml"
MESH_CONFIGMAP = "swarm-mesh-topology"
MESH_CONFIG_KEY = "topology.json"
CAPS_NAME = "swarm-caps"  # the ResourceQuota and LimitRange of a tenant namespace
DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
PURPOSE_LABEL = "swarm.io/purpose"
HOSTNAME_LABEL = "kubernetes.io/hostname"
CONFIGMAP_MAX_BYTES = 1024 * 1024  # the API server's limit on a ConfigMap's data


def _dump(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=True, default_flow_style=False)


def namespaces(cluster: ClusterState) -> list[K8sObject]:
    """One per tenant (labelled with the tenant and its allowed priorities), the system
    namespace and the GPU namespace (pod security ``privileged``: the GPU Operator's pods are)."""
    s = cluster["settings"]
    out = [
        k8s_object(
            "Namespace",
            t["namespace"],
            {
                **s["labels"],
                TENANT_LABEL: t["name"],
                **{PRIORITY_LABEL_PREFIX + p: ALLOWED for p in t["priorities"]},
            },
        )
        for t in cluster["tenants"]
    ]
    out.append(k8s_object("Namespace", s["system_namespace"], s["labels"]))
    out.append(
        k8s_object(
            "Namespace",
            s["gpu_namespace"],
            {**s["labels"], "pod-security.kubernetes.io/enforce": "privileged"},
        )
    )
    return out


def priority_classes(cluster: ClusterState) -> list[K8sObject]:
    """A scheduling.k8s.io/v1 PriorityClass per Priority, none of them ``globalDefault``.

    A global default applies to every pod that names no class in the whole cluster (the API
    server's Priority admission plugin), the Kueue, KubeRay and GPU Operator pods included:
    tenant pods of a higher class could then preempt the add-ons, and the add-ons would
    preempt tenants. The fleet's default Priority is a tenants' matter: the admission policy
    (:mod:`.admission`) refuses a tenant pod without a class and names the default."""
    labels = cluster["settings"]["labels"]
    return [
        k8s_object(
            "PriorityClass",
            p["name"],
            labels,
            value=p["value"],
            preemptionPolicy=p["preemption_policy"],
            globalDefault=False,
            description=p["description"],
        )
        for p in cluster["priorities"]
    ]


def _compute(c: ComputeState | None) -> dict[str, str] | None:
    if not c:
        return None
    out = {}
    if "cpu_millicores" in c:
        out["cpu"] = cpu(c["cpu_millicores"])
    if "memory_mib" in c:
        out["memory"] = memory(c["memory_mib"])
    return out


def caps(cluster: ClusterState) -> list[K8sObject]:
    """A ResourceQuota on every tenant namespace (its GPUs, ``TenantState.gpu_quota``, and
    the caps' totals): a pod that escapes Kueue (a queue label removed, a pod created before
    Kueue's webhook) still cannot take more GPUs than the tenant's queue could be admitted;
    and a LimitRange (per container) where a tenant has container caps."""
    labels = cluster["settings"]["labels"]
    out: list[K8sObject] = []
    for t in cluster["tenants"]:
        c: CapsState | None = t["caps"]
        gpus = {"requests.nvidia.com/gpu": str(t["gpu_quota"])}
        if c is None:
            out.append(k8s_object("ResourceQuota", CAPS_NAME, labels, t["namespace"], spec={"hard": gpus}))
            continue
        hard = {
            **gpus,
            "requests.cpu": None if c["cpu_millicores"] is None else cpu(c["cpu_millicores"]),
            "requests.memory": None if c["memory_mib"] is None else memory(c["memory_mib"]),
            "pods": None if c["pods"] is None else str(c["pods"]),
            "requests.storage": None if c["storage_gib"] is None else f"{c['storage_gib']}Gi",
            "persistentvolumeclaims": None
            if c["persistent_volume_claims"] is None
            else str(c["persistent_volume_claims"]),
        }
        hard = {k: v for k, v in sorted(hard.items()) if v is not None}
        if hard:
            out.append(k8s_object("ResourceQuota", CAPS_NAME, labels, t["namespace"], spec={"hard": hard}))
        container = c["container"]
        if container is not None:
            limit = {
                "type": "Container",
                "defaultRequest": _compute(container["default_request"]),
                "default": _compute(container["default_limit"]),
                "max": _compute(container["max"]),
            }
            out.append(
                k8s_object(
                    "LimitRange",
                    CAPS_NAME,
                    labels,
                    t["namespace"],
                    spec={"limits": [{k: v for k, v in limit.items() if v is not None}]},
                )
            )
    return out


def node_labels(node: NodeState) -> dict[str, str]:
    """The labels a node gets: its own and site/GPU flavor (NodeState.labels), region, mesh
    address, and the device plugin and MIG configs its GpuProfile selects."""
    labels = dict(node["labels"])
    labels[REGION_LABEL] = node["region"]
    if node["mesh"] is not None:
        labels[MESH_ADDRESS_LABEL] = node["mesh"]["address"].split("/")[0]
    gpu = node["gpu"]
    if gpu is not None:
        sharing = gpu["sharing"]
        labels[DEVICE_PLUGIN_CONFIG_LABEL] = sharing["device_plugin_config"]
        if sharing["mig_config"] is not None:
            labels[MIG_CONFIG_LABEL] = sharing["mig_config"]
    return labels


def nodes(cluster: ClusterState, states: Iterable[NodeState]) -> list[K8sObject]:
    """A Node per fleet node: labels, and the GPU taint on nodes with GPUs. Applied as a
    patch (server-side apply), so only these fields are claimed."""
    s = cluster["settings"]
    taint = s["gpu_taint"]
    out = []
    for node in states:
        spec = {"taints": [dict(taint)]} if taint is not None and node["gpu"] is not None else None
        out.append(k8s_object("Node", node["name"], {**node_labels(node), **s["labels"]}, spec=spec))
    return out


def gpu_configs(cluster: ClusterState) -> list[K8sObject]:
    """The NVIDIA device plugin's configs (one key per config; nodes select one with
    ``nvidia.com/device-plugin.config``) and, when a profile declares MIG, the GPU Operator
    MIG manager's layouts (mig-parted format, selected with ``nvidia.com/mig.config``)."""
    s = cluster["settings"]
    sharing = cluster["gpu_sharing"]
    data = {}
    for c in sharing["device_plugin_configs"]:
        config: dict[str, Any] = {"version": "v1", "flags": {"migStrategy": c["mig_strategy"]}}
        if c["time_slicing_replicas"]:
            config["sharing"] = {
                "timeSlicing": {
                    "resources": [
                        {"name": r, "replicas": c["time_slicing_replicas"]}
                        for r in c["time_slicing_resources"]
                    ]
                }
            }
        data[c["name"]] = _dump(config)
    out = [k8s_object("ConfigMap", DEVICE_PLUGIN_CONFIGMAP, s["labels"], s["gpu_namespace"], data=data)]
    if sharing["mig_configs"]:
        layouts = {
            m["name"]: [
                {"devices": "all", "mig-enabled": True, "mig-devices": dict(m["devices"])}
                if m["enabled"]
                else {"devices": "all", "mig-enabled": False}
            ]
            for m in sharing["mig_configs"]
        }
        text = _dump({"version": "v1", "mig-configs": layouts})
        out.append(
            k8s_object(
                "ConfigMap", MIG_CONFIGMAP, s["labels"], s["gpu_namespace"], data={MIG_CONFIG_KEY: text}
            )
        )
    return out


def mesh_configmap(cluster: ClusterState) -> list[K8sObject]:
    """The mesh topology as JSON (addresses, hubs, relays, edges) in the system namespace.

    Raises ValueError when it exceeds what a ConfigMap can hold (1 MiB).
    """
    topo = cluster["mesh"]
    if topo is None:
        return []
    s = cluster["settings"]
    text = json.dumps(topo, sort_keys=True, separators=(",", ":"))
    if len(text.encode()) > CONFIGMAP_MAX_BYTES:
        raise ValueError(f"the mesh topology is {len(text.encode())} bytes, above a ConfigMap's 1 MiB")
    return [
        k8s_object(
            "ConfigMap", MESH_CONFIGMAP, s["labels"], s["system_namespace"], data={MESH_CONFIG_KEY: text}
        )
    ]


def storage(cluster: ClusterState, states: Iterable[NodeState]) -> list[K8sObject]:
    """StorageClasses (declared, and the local scratch class), a local PersistentVolume per
    node with scratch (node affinity on ``kubernetes.io/hostname``, which must be the node's
    fleet name), and a PVC per declared volume."""
    st = cluster["storage"]
    if st is None:
        return []
    labels = cluster["settings"]["labels"]
    out: list[K8sObject] = []
    for c in st["classes"]:
        out.append(
            k8s_object(
                "StorageClass",
                c["name"],
                labels,
                annotations={DEFAULT_CLASS_ANNOTATION: "true"} if c["default"] else None,
                provisioner=c["provisioner"],
                parameters=dict(c["parameters"]) or None,
                reclaimPolicy=c["reclaim_policy"],
                volumeBindingMode=c["volume_binding_mode"],
            )
        )
    scratch = st["scratch"]
    if scratch is not None:
        cls = scratch["storage_class"]
        out.append(
            k8s_object(
                "StorageClass",
                cls,
                labels,
                provisioner="kubernetes.io/no-provisioner",
                reclaimPolicy="Retain",
                volumeBindingMode="WaitForFirstConsumer",
            )
        )
        for node in states:
            if node["storage"] is None:
                continue
            sc = node["storage"]["scratch"]
            out.append(
                k8s_object(
                    "PersistentVolume",
                    f"scratch-{node['name']}",
                    {**labels, SITE_LABEL: node["site"]},
                    spec={
                        "capacity": {"storage": f"{sc['size_gib']}Gi"},
                        "accessModes": ["ReadWriteOnce"],
                        "persistentVolumeReclaimPolicy": "Retain",
                        "storageClassName": cls,
                        "volumeMode": "Filesystem",
                        "local": {"path": sc["mount_path"]},
                        "nodeAffinity": {
                            "required": {
                                "nodeSelectorTerms": [
                                    {
                                        "matchExpressions": [
                                            {
                                                "key": HOSTNAME_LABEL,
                                                "operator": "In",
                                                "values": [node["name"]],
                                            }
                                        ]
                                    }
                                ]
                            }
                        },
                    },
                )
            )
    for v in st["volumes"]:
        out.append(
            k8s_object(
                "PersistentVolumeClaim",
                v["name"],
                {**labels, TENANT_LABEL: v["tenant"], PURPOSE_LABEL: v["purpose"]},
                v["namespace"],
                spec={
                    "accessModes": list(v["access_modes"]),
                    "storageClassName": v["class"],
                    "resources": {"requests": {"storage": f"{v['size_gib']}Gi"}},
                },
            )
        )
    return out
