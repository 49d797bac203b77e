"""Core Kubernetes objects: namespaces, PriorityClasses, tenant caps, node labels and taints,
GPU sharing configuration, storage and the mesh topology ConfigMap."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import yaml

from ..resolve.addons import LOCAL_PATH_NAMESPACE
from ..resolve.provisioners import LOCAL_PATH
from ..resolve.types import CapsState, ClusterSettingsState, ClusterState, ComputeState, NodeState
from .admission import ALLOWED
from .meta import PRIORITY_LABEL_PREFIX, TENANT_LABEL, K8sObject, cpu, k8s_object, memory

REGION_LABEL = "swarm.io/region"
MESH_ADDRESS_LABEL = "swarm.io/mesh-address"
# Read by the NVIDIA device plugin's config manager (both modes).
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"
DEVICE_PLUGIN_CONFIGMAP = "swarm-device-plugin-config"
# The device plugin chart's (0.17.2) default node affinity admits a node with this label (or
# NFD's PCI vendor label, which nothing installs in device-plugin mode). In gpu-operator mode
# NFD runs and the Operator sets it itself, and resets a value it cannot back with NFD's
# labels: so the stack sets it only in device-plugin mode.
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
MESH_CONFIGMAP = "swarm-mesh-topology"
MESH_CONFIG_KEY = "topology.json"
CAPS_NAME = "swarm-caps"  # the ResourceQuota and LimitRange of a tenant namespace
DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
PURPOSE_LABEL = "swarm.io/purpose"
HOSTNAME_LABEL = "kubernetes.io/hostname"
CONFIGMAP_MAX_BYTES = 1024 * 1024  # the API server's limit on a ConfigMap's data
# rancher/local-path-provisioner, pinned; objects restated from its deploy/local-path-storage.yaml
# at this tag (namespace, RBAC, Deployment, ConfigMap), with the node paths set to scratch.
LOCAL_PATH_VERSION = "v0.0.37"
LOCAL_PATH_IMAGE = f"docker.io/rancher/local-path-provisioner:{LOCAL_PATH_VERSION}"
# The helper pods' image (setup/teardown: sh, mkdir, rm). Upstream's deploy manifest at
# v0.0.37 names docker.io/library/busybox with no tag (so `latest`, whatever it is that day)
# and its chart's values.yaml helperImage.tag is `latest`; its binary's own default helper
# image is pinned (main.go DefaultHelperImage at v0.0.37): that one.
LOCAL_PATH_HELPER_IMAGE = "docker.io/rancher/library-busybox:1.32.1"
LOCAL_PATH_NAME = "local-path-provisioner"
LOCAL_PATH_ACCOUNT = "local-path-provisioner-service-account"
LOCAL_PATH_CONFIGMAP = "local-path-config"
SCRATCH_QUOTA = "swarm-scratch"  # the ResourceQuota on scratch in each tenant namespace


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


def node_labels(node: NodeState, gpu_present: bool = False) -> dict[str, str]:
    """The labels a node gets: its own and site/GPU flavor (NodeState.labels), region, mesh
    address, the device plugin config its GpuProfile selects and, with ``gpu_present`` (the
    stack's device-plugin mode), ``nvidia.com/gpu.present=true`` on GPU nodes.

    No ``nvidia.com/mig.config``: the node layer owns MIG (issue #23) and the GPU Operator's
    MIG manager is off, so nothing reads it, and the Operator's own default for it would
    conflict with this patch (issue #24, item 5)."""
    labels = dict(node["labels"])
    labels[REGION_LABEL] = node["region"]
    if node["mesh"] is not None:
        labels[MESH_ADDRESS_LABEL] = node["mesh"]["address"].split("/")[0]
    gpu = node["gpu"]
    if gpu is not None:
        labels[DEVICE_PLUGIN_CONFIG_LABEL] = gpu["sharing"]["device_plugin_config"]
        if gpu_present:
            labels[GPU_PRESENT_LABEL] = "true"
    return labels


def nodes(cluster: ClusterState, states: Iterable[NodeState], gpu_present: bool = False) -> list[K8sObject]:
    """A Node per fleet node: labels (:func:`node_labels`), and the GPU taint on nodes with
    GPUs. Applied only as a patch (Pulumi ``NodePatch``, server-side apply), so only these
    fields are claimed and a node that has not joined is never created; ``swarm render``
    leaves them out (a ``Node`` applied by a GitOps tool would create a phantom node)."""
    s = cluster["settings"]
    taint = s["gpu_taint"]
    out = []
    for node in states:
        spec = {"taints": [dict(taint)]} if taint is not None and node["gpu"] is not None else None
        labels = {**node_labels(node, gpu_present), **s["labels"]}
        out.append(k8s_object("Node", node["name"], labels, spec=spec))
    return out


def gpu_configs(cluster: ClusterState) -> list[K8sObject]:
    """The NVIDIA device plugin's configs (one key per config; nodes select one with
    ``nvidia.com/device-plugin.config``). MIG layouts are the node layer's (it owns MIG);
    the device plugin only needs each config's MIG strategy."""
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
    return [k8s_object("ConfigMap", DEVICE_PLUGIN_CONFIGMAP, s["labels"], s["gpu_namespace"], data=data)]


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


def _hostname_in(names: list[str]) -> dict[str, Any]:
    return {"key": HOSTNAME_LABEL, "values": names}


def local_path_provisioner(cluster: ClusterState, scratch_nodes: list[NodeState]) -> list[K8sObject]:
    """rancher/local-path-provisioner (``LOCAL_PATH_VERSION``), the provisioner of the scratch
    class: its namespace (pod security ``privileged``: its helper pods mount the node's path),
    service account and RBAC, Deployment and ConfigMap, restated from upstream
    ``deploy/local-path-storage.yaml`` at that tag. The config maps each node with scratch to
    its mount path and names no ``DEFAULT_PATH_FOR_NON_LISTED_NODES``, so no volume is ever
    made outside scratch (upstream ``getPathOnNode`` refuses an unlisted node). Its helper
    pods (``setup``/``teardown``, which deletes a volume's directory when its claim goes)
    tolerate the GPU taint, since scratch is on GPU nodes, and run :data:`LOCAL_PATH_HELPER_IMAGE`.

    Raises ValueError when the ConfigMap's data (the config in compact JSON: about 35 bytes per
    node plus its name and mount path) exceeds what a ConfigMap can hold (1 MiB)."""
    s = cluster["settings"]
    labels, ns = s["labels"], LOCAL_PATH_NAMESPACE
    return [
        k8s_object("Namespace", ns, {**labels, "pod-security.kubernetes.io/enforce": "privileged"}),
        k8s_object("ServiceAccount", LOCAL_PATH_ACCOUNT, labels, ns),
        *_local_path_rbac(labels),
        k8s_object("ConfigMap", LOCAL_PATH_CONFIGMAP, labels, ns, data=_local_path_config(s, scratch_nodes)),
        _local_path_deployment(labels),
    ]


def _local_path_config(settings: ClusterSettingsState, scratch_nodes: list[NodeState]) -> dict[str, str]:
    """The provisioner's ConfigMap data: ``config.json`` (``nodePathMap``: each node of
    ``scratch_nodes`` with its scratch mount path, in their order), the helper pod's
    ``setup``/``teardown`` scripts and ``helperPod.yaml`` (:func:`_local_path_helper_pod`).

    Raises ValueError when the values' bytes sum above :data:`CONFIGMAP_MAX_BYTES`."""
    paths = {n["name"]: [n["storage"]["scratch"]["mount_path"]] for n in scratch_nodes if n["storage"]}
    config = {"nodePathMap": [{"node": name, "paths": p} for name, p in paths.items()]}
    data = {
        "config.json": json.dumps(config, sort_keys=True, separators=(",", ":")),
        "setup": '#!/bin/sh\nset -eu\nmkdir -m 0777 -p "$VOL_DIR"\n',
        "teardown": '#!/bin/sh\nset -eu\nrm -rf "$VOL_DIR"\n',
        "helperPod.yaml": _dump(_local_path_helper_pod(settings)),
    }
    # The API server sums the bytes of a ConfigMap's values (kubernetes
    # pkg/apis/core/validation/validation.go, ValidateConfigMap: totalSize > MaxSecretSize).
    size = sum(len(v.encode()) for v in data.values())
    if size > CONFIGMAP_MAX_BYTES:
        raise ValueError(
            f"the local-path config (scratch paths of {len(paths)} nodes) is {size} bytes, "
            "above a ConfigMap's 1 MiB"
        )
    return data


def _local_path_helper_pod(settings: ClusterSettingsState) -> dict[str, Any]:
    """The Pod the provisioner runs on a node to make or delete a volume's directory:
    system-node-critical, :data:`LOCAL_PATH_HELPER_IMAGE`, tolerating disk pressure and, when
    GPU nodes are tainted, the GPU taint (any value)."""
    tolerations: list[dict[str, str]] = [
        {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"}
    ]
    taint = settings["gpu_taint"]
    if taint is not None:
        tolerations.append({"key": taint["key"], "operator": "Exists", "effect": taint["effect"]})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "helper-pod"},
        "spec": {
            "priorityClassName": "system-node-critical",
            "tolerations": tolerations,
            "containers": [
                {
                    "name": "helper-pod",
                    "image": LOCAL_PATH_HELPER_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
        },
    }


def _local_path_rbac(labels: dict[str, str]) -> list[K8sObject]:
    """The provisioner's Role (pods in its namespace), ClusterRole (read nodes, claims,
    ConfigMaps, pods and their logs; manage PersistentVolumes; write events; read
    StorageClasses) and their bindings to its service account, as upstream's manifest."""
    ns, rbac = LOCAL_PATH_NAMESPACE, "rbac.authorization.k8s.io"
    role, binding = LOCAL_PATH_NAME + "-role", LOCAL_PATH_NAME + "-bind"
    subject = [{"kind": "ServiceAccount", "name": LOCAL_PATH_ACCOUNT, "namespace": ns}]
    return [
        k8s_object(
            "Role",
            role,
            labels,
            ns,
            rules=[
                {
                    "apiGroups": [""],
                    "resources": ["pods"],
                    "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"],
                }
            ],
        ),
        k8s_object(
            "ClusterRole",
            role,
            labels,
            rules=[
                {
                    "apiGroups": [""],
                    "resources": ["nodes", "persistentvolumeclaims", "configmaps", "pods", "pods/log"],
                    "verbs": ["get", "list", "watch"],
                },
                {
                    "apiGroups": [""],
                    "resources": ["persistentvolumes"],
                    "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"],
                },
                {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
                {
                    "apiGroups": ["storage.k8s.io"],
                    "resources": ["storageclasses"],
                    "verbs": ["get", "list", "watch"],
                },
            ],
        ),
        k8s_object(
            "RoleBinding",
            binding,
            labels,
            ns,
            roleRef={"apiGroup": rbac, "kind": "Role", "name": role},
            subjects=subject,
        ),
        k8s_object(
            "ClusterRoleBinding",
            binding,
            labels,
            roleRef={"apiGroup": rbac, "kind": "ClusterRole", "name": role},
            subjects=subject,
        ),
    ]


def _local_path_deployment(labels: dict[str, str]) -> K8sObject:
    """The provisioner's Deployment: one replica of :data:`LOCAL_PATH_IMAGE` under its service
    account, reading its config from the ConfigMap, with upstream's health probes (port
    8080: startup, liveness, readiness)."""
    probe = {"httpGet": {"path": "/health", "port": "health"}}
    container = {
        "name": LOCAL_PATH_NAME,
        "image": LOCAL_PATH_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "command": ["local-path-provisioner", "start", "--config", "/etc/config/config.json"],
        "ports": [{"name": "health", "containerPort": 8080, "protocol": "TCP"}],
        "startupProbe": {**probe, "initialDelaySeconds": 5, "periodSeconds": 5, "failureThreshold": 12},
        "livenessProbe": {**probe, "initialDelaySeconds": 10, "periodSeconds": 10},
        "readinessProbe": {
            "httpGet": {"path": "/ready", "port": "health"},
            "initialDelaySeconds": 5,
            "periodSeconds": 5,
        },
        "volumeMounts": [{"name": "config-volume", "mountPath": "/etc/config/"}],
        "env": [
            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "CONFIG_MOUNT_PATH", "value": "/etc/config/"},
            {"name": "HEALTH_PORT", "value": "8080"},
        ],
    }
    app = {"app": LOCAL_PATH_NAME}
    return k8s_object(
        "Deployment",
        LOCAL_PATH_NAME,
        labels,
        LOCAL_PATH_NAMESPACE,
        spec={
            "replicas": 1,
            "selector": {"matchLabels": app},
            "template": {
                "metadata": {"labels": app},
                "spec": {
                    "serviceAccountName": LOCAL_PATH_ACCOUNT,
                    "containers": [container],
                    "volumes": [{"name": "config-volume", "configMap": {"name": LOCAL_PATH_CONFIGMAP}}],
                },
            },
        },
    )


def storage(cluster: ClusterState, states: Iterable[NodeState]) -> list[K8sObject]:
    """StorageClasses (declared, and the scratch class), what provisions the scratch class,
    the scratch quota of each tenant namespace, and a PVC per declared volume.

    The scratch class (``rancher.io/local-path``, ``Delete``, ``WaitForFirstConsumer``,
    allowed topology: the nodes with scratch by ``kubernetes.io/hostname``, which must be the
    node's fleet name; kube-scheduler's VolumeBinding plugin places a pod with an unbound
    claim only on a node the class's ``allowedTopologies`` admit: kubernetes
    ``pkg/scheduler/framework/plugins/volumebinding/binder.go``, ``checkVolumeProvisions``)
    gets volumes made on demand under a node's scratch mount and removed
    with their claim, so a released volume never keeps a tenant's data and many claims share
    a node. A ResourceQuota ``swarm-scratch`` on
    ``<class>.storageclass.storage.k8s.io/requests.storage`` in every tenant namespace caps
    what each tenant requests (``scratch.tenant_quota_gib``). Classes of other provisioners
    are those :mod:`swarm_infra.resolve.provisioners` allows (installed by the stack).

    Raises ValueError for a volume of the scratch class when no node of ``states`` has
    scratch: that class is not made, and the claim would stay ``Pending`` (validation
    refuses it for the fleet, ``storage.scratch-unavailable``, and
    :func:`swarm_infra.cluster.scope.scope` leaves such claims out of a cluster without
    scratch)."""
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
    scratch_nodes = sorted((n for n in states if n["storage"] is not None), key=lambda n: n["name"])
    if scratch is not None and scratch_nodes:
        cls = scratch["storage_class"]
        out.append(
            k8s_object(
                "StorageClass",
                cls,
                labels,
                provisioner=LOCAL_PATH,
                reclaimPolicy="Delete",
                volumeBindingMode="WaitForFirstConsumer",
                allowedTopologies=[
                    {"matchLabelExpressions": [_hostname_in([n["name"] for n in scratch_nodes])]}
                ],
            )
        )
        out.extend(local_path_provisioner(cluster, scratch_nodes))
        hard = {f"{cls}.storageclass.storage.k8s.io/requests.storage": f"{scratch['tenant_quota_gib']}Gi"}
        for t in cluster["tenants"]:
            out.append(
                k8s_object("ResourceQuota", SCRATCH_QUOTA, labels, t["namespace"], spec={"hard": hard})
            )
    for v in st["volumes"]:
        if scratch is not None and v["class"] == scratch["storage_class"] and not scratch_nodes:
            raise ValueError(
                f"volume {v['namespace']}/{v['name']} is in the scratch class {v['class']!r}, "
                "but no node of this cluster has scratch: the claim would stay Pending"
            )
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
