"""The stack's ComponentResources. Each takes typed args, creates its children with
``parent=self`` and registers its outputs; none decides anything: the objects come from
``swarm_infra.cluster.build`` (the same objects ``swarm render`` writes).

- :class:`Operators`: Helm releases of Kueue and the KubeRay operator (each switchable);
- :class:`Cluster`: namespaces, PriorityClasses, Kueue objects, the admission policy, tenant
  caps, node labels and taints (NodePatch) and the GPU sharing ConfigMaps;
- :class:`GpuOperator`: the NVIDIA GPU Operator or device plugin (Helm), after its
  namespace and ConfigMaps exist;
- :class:`Storage`: StorageClasses, local scratch PersistentVolumes and the tenants' claims;
- :class:`Mesh`: the topology ConfigMap; its outputs are the topology;
- :class:`RayClusters`: the tenants' RayClusters, after the KubeRay operator.

Dependencies are explicit: a namespaced object waits for its Namespace, Kueue's objects for
Kueue's release (its CRDs and webhooks), claims for their StorageClass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from ...cluster import K8sObject
from ...cluster.core import DEVICE_PLUGIN_CONFIGMAP, MIG_CONFIGMAP
from ...cluster.meta import KUEUE_API
from . import config as cfg
from .resources import register, resource_name

ELASTIC_GATE = "ElasticJobsViaWorkloadSlices"  # Kueue feature gate for autoscaling RayClusters


def _key(obj: K8sObject) -> str:
    return f"{obj['kind']}:{resource_name(obj)}"


def _add(
    parent: pulumi.ComponentResource,
    objects: Sequence[K8sObject],
    namespaces: Mapping[str, pulumi.Resource],
    extra: Mapping[str, Sequence[pulumi.Resource]] | None = None,
) -> dict[str, pulumi.CustomResource]:
    """Register ``objects`` as children of ``parent``; ``extra`` adds dependencies by kind."""
    out: dict[str, pulumi.CustomResource] = {}
    for obj in objects:
        deps: list[pulumi.Resource] = list((extra or {}).get(obj["kind"], ()))
        ns = obj["metadata"].get("namespace")
        if ns in namespaces:
            deps.append(namespaces[ns])
        out[_key(obj)] = register(obj, pulumi.ResourceOptions(parent=parent, depends_on=deps or None))
    return out


def _repository(url: str | None, conf: cfg.StackConfig) -> k8s.helm.v3.RepositoryOptsArgsDict | None:
    if url is None:
        return None
    repo: k8s.helm.v3.RepositoryOptsArgsDict = {"repo": url}
    if conf.helm_username:
        repo["username"] = conf.helm_username
        repo["password"] = conf.helm_password
    return repo


@dataclass(frozen=True)
class OperatorsArgs:
    config: cfg.StackConfig
    elastic_ray: bool  # a RayCluster autoscales: Kueue needs the ElasticJobsViaWorkloadSlices gate
    # Kueue's Configuration (swarm_infra.cluster.kueue.manager_config); None: the chart's own.
    kueue_config: Mapping[str, Any] | None = None


class Operators(pulumi.ComponentResource):
    """Kueue and the KubeRay operator as Helm releases with pinned chart versions."""

    kueue: k8s.helm.v3.Release | None
    kuberay: k8s.helm.v3.Release | None

    def __init__(self, name: str, args: OperatorsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("swarm:cluster:Operators", name, None, opts)
        c = args.config
        child = pulumi.ResourceOptions(parent=self)
        self.kueue = self.kuberay = None
        if c.kueue.enabled:
            values: dict[str, Any] = {}
            if args.elastic_ray:
                values = {"controllerManager": {"featureGates": [{"name": ELASTIC_GATE, "enabled": True}]}}
            if args.kueue_config is not None:
                # The chart writes this string as the manager's ConfigMap (kueue chart v0.17.5
                # values.yaml: managerConfig.controllerManagerConfigYaml), replacing its default.
                text = yaml.safe_dump(dict(args.kueue_config), sort_keys=False, default_flow_style=False)
                values["managerConfig"] = {"controllerManagerConfigYaml": text}
            self.kueue = k8s.helm.v3.Release(
                "kueue",
                name="kueue",
                chart=cfg.KUEUE_CHART,
                version=c.kueue.version,
                namespace="kueue-system",
                create_namespace=True,
                values=values,
                opts=child,
            )
        if c.kuberay.enabled:
            self.kuberay = k8s.helm.v3.Release(
                "kuberay-operator",
                name="kuberay-operator",
                chart="kuberay-operator",
                version=c.kuberay.version,
                namespace="ray-system",
                create_namespace=True,
                repository_opts=_repository(cfg.KUBERAY_REPO, c),
                opts=child,
            )
        self.register_outputs(
            {
                "kueue": c.kueue.version if self.kueue else None,
                "kuberay": c.kuberay.version if self.kuberay else None,
            }
        )


@dataclass(frozen=True)
class ClusterArgs:
    objects: Sequence[K8sObject]  # ClusterObjects.cluster
    kueue: pulumi.Resource | None = None  # Kueue's release: its objects wait for it


class Cluster(pulumi.ComponentResource):
    """Namespaces, priorities, Kueue, the admission policy, caps, node labels and taints."""

    resources: dict[str, pulumi.CustomResource]
    namespaces: dict[str, pulumi.Resource]

    def __init__(self, name: str, args: ClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("swarm:cluster:Cluster", name, None, opts)
        first = [o for o in args.objects if o["kind"] == "Namespace"]
        rest = [o for o in args.objects if o["kind"] != "Namespace"]
        self.resources = _add(self, first, {})
        self.namespaces = {o["metadata"]["name"]: self.resources[_key(o)] for o in first}
        kueue = [args.kueue] if args.kueue is not None else []
        waits = {o["kind"]: kueue for o in rest if o["apiVersion"] == KUEUE_API}
        self.resources.update(_add(self, rest, self.namespaces, waits))
        by_kind: dict[str, list[str]] = {}
        for o in args.objects:
            by_kind.setdefault(o["kind"], []).append(resource_name(o))
        self.register_outputs({"objects": by_kind})


@dataclass(frozen=True)
class GpuOperatorArgs:
    config: cfg.StackConfig
    namespace: str  # ClusterSettingsState.gpu_namespace (made by Cluster)
    mig: bool  # the MIG manager's ConfigMap exists
    depends_on: Sequence[pulumi.Resource] = field(default_factory=list)


class GpuOperator(pulumi.ComponentResource):
    """The NVIDIA GPU Operator (or the device plugin alone), reading the device plugin and
    MIG configs the Cluster component made. The node layer installs the driver and the
    container toolkit, so the operator's own are off."""

    release: k8s.helm.v3.Release | None

    def __init__(self, name: str, args: GpuOperatorArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("swarm:cluster:GpuOperator", name, None, opts)
        c = args.config
        child = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on) or None)
        self.release = None
        if c.gpu_mode == "gpu-operator":
            values: dict[str, Any] = {
                "driver": {"enabled": False},
                "toolkit": {"enabled": False},
                "devicePlugin": {"config": {"name": DEVICE_PLUGIN_CONFIGMAP, "default": "default"}},
            }
            if args.mig:
                values["migManager"] = {"config": {"name": MIG_CONFIGMAP, "default": "all-disabled"}}
                values["mig"] = {"strategy": "single"}
            self.release = k8s.helm.v3.Release(
                "gpu-operator",
                name="gpu-operator",
                chart="gpu-operator",
                version=c.gpu.version,
                namespace=args.namespace,
                repository_opts=_repository(cfg.NVIDIA_REPO, c),
                values=values,
                opts=child,
            )
        elif c.gpu_mode == "device-plugin":
            self.release = k8s.helm.v3.Release(
                "nvidia-device-plugin",
                name="nvidia-device-plugin",
                chart="nvidia-device-plugin",
                version=c.gpu.version,
                namespace=args.namespace,
                repository_opts=_repository(cfg.DEVICE_PLUGIN_REPO, c),
                values={"config": {"name": DEVICE_PLUGIN_CONFIGMAP, "default": "default"}},
                opts=child,
            )
        self.register_outputs({"mode": c.gpu_mode, "version": c.gpu.version if self.release else None})


@dataclass(frozen=True)
class StorageArgs:
    objects: Sequence[K8sObject]  # ClusterObjects.storage
    namespaces: Mapping[str, pulumi.Resource] = field(default_factory=dict)


class Storage(pulumi.ComponentResource):
    """StorageClasses, local scratch PersistentVolumes and the tenants' claims (each claim
    after its namespace and its StorageClass)."""

    resources: dict[str, pulumi.CustomResource]

    def __init__(self, name: str, args: StorageArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("swarm:cluster:Storage", name, None, opts)
        classes = [o for o in args.objects if o["kind"] == "StorageClass"]
        self.resources = _add(self, classes, {})
        by_class = {o["metadata"]["name"]: self.resources[_key(o)] for o in classes}
        self.resources.update(_add(self, [o for o in args.objects if o["kind"] == "PersistentVolume"], {}))
        for o in args.objects:
            if o["kind"] == "PersistentVolumeClaim":
                cls = by_class.get(o["spec"]["storageClassName"])
                self.resources.update(
                    _add(self, [o], args.namespaces, {"PersistentVolumeClaim": [cls] if cls else []})
                )
        self.register_outputs(
            {
                "classes": sorted(o["metadata"]["name"] for o in classes),
                "claims": sorted(
                    resource_name(o) for o in args.objects if o["kind"] == "PersistentVolumeClaim"
                ),
            }
        )


@dataclass(frozen=True)
class MeshArgs:
    objects: Sequence[K8sObject]  # ClusterObjects.mesh: the topology ConfigMap
    topology: Mapping[str, Any] | None  # ClusterState.mesh
    namespaces: Mapping[str, pulumi.Resource] = field(default_factory=dict)


class Mesh(pulumi.ComponentResource):
    """The mesh topology ConfigMap; outputs ``addresses``, ``hubs``, ``relays``, ``edges``."""

    addresses: pulumi.Output[Any]
    hubs: pulumi.Output[Any]
    relays: pulumi.Output[Any]
    edges: pulumi.Output[Any]

    def __init__(self, name: str, args: MeshArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("swarm:cluster:Mesh", name, None, opts)
        self.resources = _add(self, args.objects, args.namespaces)
        topo = args.topology or {}
        self.addresses = pulumi.Output.from_input(topo.get("addresses", {}))
        self.hubs = pulumi.Output.from_input(topo.get("hubs", {}))
        self.relays = pulumi.Output.from_input(topo.get("relays", []))
        self.edges = pulumi.Output.from_input(topo.get("edges", []))
        self.register_outputs(
            {"addresses": self.addresses, "hubs": self.hubs, "relays": self.relays, "edges": self.edges}
        )


@dataclass(frozen=True)
class RayClustersArgs:
    objects: Sequence[K8sObject]  # ClusterObjects.ray
    namespaces: Mapping[str, pulumi.Resource] = field(default_factory=dict)
    operator: pulumi.Resource | None = None  # the KubeRay release (its CRDs)
    queues: Sequence[pulumi.Resource] = field(default_factory=list)  # LocalQueues and priorities


class RayClusters(pulumi.ComponentResource):
    """The tenants' RayClusters, after the KubeRay operator, their namespace and queues."""

    resources: dict[str, pulumi.CustomResource]

    def __init__(self, name: str, args: RayClustersArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("swarm:cluster:RayClusters", name, None, opts)
        waits = [*([args.operator] if args.operator else []), *args.queues]
        self.resources = _add(self, args.objects, args.namespaces, {"RayCluster": waits})
        self.register_outputs({"clusters": sorted(resource_name(o) for o in args.objects)})


__all__ = [
    "Cluster",
    "ClusterArgs",
    "GpuOperator",
    "GpuOperatorArgs",
    "Mesh",
    "MeshArgs",
    "Operators",
    "OperatorsArgs",
    "RayClusters",
    "RayClustersArgs",
    "Storage",
    "StorageArgs",
]
