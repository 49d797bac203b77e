"""The stack's ComponentResources. Each takes typed args, creates its children with
``parent=self`` and registers its outputs; none decides anything: the objects come from
``swarm_infra.cluster.build`` (the same objects ``swarm render`` writes).

- :class:`Operators`: Helm releases of Kueue and the KubeRay operator (each switchable);
- :class:`Cluster`: namespaces, PriorityClasses, Kueue objects, the admission policy, tenant
  caps, node labels and taints (NodePatch) and the GPU sharing ConfigMaps;
- :class:`GpuOperator`: the NVIDIA GPU Operator or device plugin (Helm), after its
  namespace and ConfigMaps exist;
- :class:`Storage`: the provisioners (csi-driver-nfs, local-path), StorageClasses, the
  scratch quotas and the tenants' claims;
- :class:`Mesh`: the topology ConfigMap; its outputs are the topology;
- :class:`RayClusters`: the tenants' RayClusters, after the KubeRay operator.

Dependencies are explicit: a namespaced object waits for its Namespace, Kueue's objects for
Kueue's release (its CRDs and webhooks), a StorageClass for its provisioner, claims for
their StorageClass. Every chart comes from the declared mirror, or from its public home
with no credentials (:meth:`~swarm_infra.engines.pulumi.config.StackConfig.chart`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from ...cluster import K8sObject
from ...cluster.core import DEVICE_PLUGIN_CONFIGMAP
from ...cluster.meta import KUEUE_API
from ...resolve.addons import KUBERAY_NAMESPACE, KUEUE_NAMESPACE, LOCAL_PATH_NAMESPACE
from ...resolve.drivers import CONTAINER_RUNTIME_OWNER
from ...resolve.provisioners import LOCAL_PATH, NFS_CSI
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


def _chart(name: str, conf: cfg.StackConfig) -> dict[str, Any]:
    """``chart`` and ``repository_opts`` of a Helm Release for chart ``name``: from the
    declared mirror with its credentials, or from the public home with none
    (:meth:`StackConfig.chart`)."""
    c = conf.chart(name)
    repo: k8s.helm.v3.RepositoryOptsArgsDict = {}
    if c.repo is not None:
        repo["repo"] = c.repo
    if c.username:
        repo["username"] = c.username
        repo["password"] = c.password
    return {"chart": c.chart, "repository_opts": repo or None}


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
                **_chart("kueue", c),
                version=c.kueue.version,
                namespace=KUEUE_NAMESPACE,
                create_namespace=True,
                values=values,
                opts=child,
            )
        if c.kuberay.enabled:
            self.kuberay = k8s.helm.v3.Release(
                "kuberay-operator",
                name="kuberay-operator",
                **_chart("kuberay-operator", c),
                version=c.kuberay.version,
                namespace=KUBERAY_NAMESPACE,
                create_namespace=True,
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
    # GpuSharingClusterState.operator_mig_strategy: the Operator's one MIG strategy, decided
    # by the library from the device plugin configs (resolve.cluster.operator_mig_strategy)
    mig_strategy: str
    depends_on: Sequence[pulumi.Resource] = field(default_factory=list)


def gpu_operator_values(mig_strategy: str) -> dict[str, Any]:
    """The GPU Operator's Helm values: one owner per concern.

    - driver: the node layer (``driver.enabled: false``);
    - container runtime: the Operator's toolkit (``toolkit.enabled: true``, the chart's
      default) configures containerd for the NVIDIA runtime, with CDI (``cdi.enabled``,
      default true in v26.3.3), as the library decides once
      (``resolve.drivers.CONTAINER_RUNTIME_OWNER``); the node layer installs the driver and
      no container toolkit (``resolve.drivers.container_runtime_problems`` holds both to it);
    - MIG: the node layer (issue #23); ``migManager.enabled: false``, so the Operator never
      labels ``nvidia.com/mig.config`` (``state_manager.go`` sets it only while the MIG
      manager is enabled) and no NodePatch conflicts with it on day two;
    - node discovery: NFD on (``nfd.enabled: true``, the default), whose
      ``feature.node.kubernetes.io/pci-10de.present`` lets the Operator label GPU nodes
      ``nvidia.com/gpu.present=true`` and deploy its operands there;
    - the device plugin reads the stack's config ConfigMap (``devicePlugin.config``);
    - ``mig.strategy``: ``mig_strategy``, always given (the chart's default is ``single``),
      since the Operator passes it to the device plugin and GFD as ``MIG_STRATEGY``, which
      overrides each config's ``migStrategy`` (the library derives it from those configs).

    Defaults from NVIDIA/gpu-operator v26.3.3 ``deployments/gpu-operator/values.yaml``;
    ``driver.enabled: false`` is NVIDIA's documented setting for pre-installed drivers
    (GPU Operator docs, "Install NVIDIA GPU Operator", chart customization options).
    """
    operator_runtime = CONTAINER_RUNTIME_OWNER == "gpu-operator"
    values: dict[str, Any] = {
        "driver": {"enabled": False},
        "toolkit": {"enabled": operator_runtime},
        "cdi": {"enabled": operator_runtime},
        "nfd": {"enabled": True},
        "migManager": {"enabled": False},
        "devicePlugin": {"config": {"name": DEVICE_PLUGIN_CONFIGMAP, "default": "default"}},
        "mig": {"strategy": mig_strategy},
    }
    return values


class GpuOperator(pulumi.ComponentResource):
    """The NVIDIA GPU Operator, reading the device plugin config the Cluster component
    made: the node layer owns the driver and MIG, the Operator the container runtime
    (:func:`gpu_operator_values`). The device plugin alone (``device-plugin``) is refused by
    :class:`~.config.StackConfig` until the node layer configures the runtime."""

    release: k8s.helm.v3.Release | None

    def __init__(self, name: str, args: GpuOperatorArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("swarm:cluster:GpuOperator", name, None, opts)
        c = args.config
        child = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on) or None)
        self.release = None
        if c.gpu_mode == "gpu-operator":
            self.release = k8s.helm.v3.Release(
                "gpu-operator",
                name="gpu-operator",
                **_chart("gpu-operator", c),
                version=c.gpu.version,
                namespace=args.namespace,
                values=gpu_operator_values(args.mig_strategy),
                opts=child,
            )
        self.register_outputs({"mode": c.gpu_mode, "version": c.gpu.version if self.release else None})


@dataclass(frozen=True)
class StorageArgs:
    objects: Sequence[K8sObject]  # ClusterObjects.storage
    namespaces: Mapping[str, pulumi.Resource] = field(default_factory=dict)
    config: cfg.StackConfig = field(default_factory=cfg.StackConfig)


class Storage(pulumi.ComponentResource):
    """What provisions each StorageClass, then the classes, then the claims.

    The provisioners first: the csi-driver-nfs Helm release when a class names
    ``nfs.csi.k8s.io``, and the local-path provisioner's objects (namespace, RBAC,
    ConfigMap, Deployment) when the scratch class exists. Each StorageClass waits for its
    provisioner, each claim for its namespace and class (pulumi-kubernetes awaits an
    ``Immediate`` claim until it binds, and a ``WaitForFirstConsumer`` one only once its
    class is readable: pulumi/pulumi-kubernetes#3130), each scratch ResourceQuota for its
    tenant namespace."""

    resources: dict[str, pulumi.CustomResource]
    nfs: k8s.helm.v3.Release | None

    def __init__(self, name: str, args: StorageArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("swarm:cluster:Storage", name, None, opts)
        objs = list(args.objects)
        classes = [o for o in objs if o["kind"] == "StorageClass"]
        self.nfs = None
        if any(o["provisioner"] == NFS_CSI for o in classes):
            self.nfs = k8s.helm.v3.Release(
                "csi-driver-nfs",
                name="csi-driver-nfs",
                **_chart("csi-driver-nfs", args.config),
                version=args.config.csi_nfs_version,
                namespace=cfg.CSI_NFS_NAMESPACE,
                opts=pulumi.ResourceOptions(parent=self),
            )
        own_ns = [o for o in objs if o["kind"] == "Namespace"]
        self.resources = _add(self, own_ns, {})
        namespaces = {**args.namespaces, **{o["metadata"]["name"]: self.resources[_key(o)] for o in own_ns}}
        local_path = [
            o
            for o in objs
            if o["metadata"].get("namespace") == LOCAL_PATH_NAMESPACE
            or o["kind"] in ("ClusterRole", "ClusterRoleBinding")
        ]
        self.resources.update(_add(self, local_path, namespaces))
        deployment = [r for k, r in self.resources.items() if k.startswith("Deployment:")]
        provisioner: dict[str, list[pulumi.Resource]] = {
            NFS_CSI: [self.nfs] if self.nfs is not None else [],
            LOCAL_PATH: [*deployment],
        }
        by_class: dict[str, pulumi.CustomResource] = {}
        for o in classes:
            made = _add(self, [o], {}, {"StorageClass": provisioner.get(o["provisioner"], [])})
            self.resources.update(made)
            by_class[o["metadata"]["name"]] = made[_key(o)]
        placed = {id(o) for o in [*own_ns, *local_path, *classes]}
        rest = [o for o in objs if id(o) not in placed]
        for o in rest:
            deps: list[pulumi.Resource] = []
            if o["kind"] == "PersistentVolumeClaim" and o["spec"]["storageClassName"] in by_class:
                deps.append(by_class[o["spec"]["storageClassName"]])
            self.resources.update(_add(self, [o], namespaces, {o["kind"]: deps}))
        self.register_outputs(
            {
                "classes": sorted(o["metadata"]["name"] for o in classes),
                "claims": sorted(resource_name(o) for o in objs if o["kind"] == "PersistentVolumeClaim"),
                "provisioners": sorted(
                    p
                    for p, deps in provisioner.items()
                    if deps and any(c["provisioner"] == p for c in classes)
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
