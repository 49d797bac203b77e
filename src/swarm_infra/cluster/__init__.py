"""The cluster layer's objects, built from the desired state (pure: no I/O).

One decision, two outputs: the Pulumi program (``swarm_infra.engines.pulumi``) registers
these objects as resources, and ``swarm render`` writes them as YAML
(:mod:`swarm_infra.cluster.render`). Nothing is decided here that the resolver has not
decided already; this package only gives ClusterState and NodeState their Kubernetes shape.

``build(state, sites=None)`` → :class:`ClusterObjects`, grouped as the stack's components
are: ``cluster`` (namespaces, PriorityClasses, Kueue, the admission policy, tenant caps,
node labels and taints, GPU sharing configs), ``storage``, ``mesh``, ``ray``. Every object
carries ``app.kubernetes.io/managed-by: swarm`` and the fleet's labels; each group is
sorted by (apiVersion, kind, namespace, name).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..resolve.types import DesiredState
from . import admission, core, kuberay, kueue
from .meta import K8sObject, no_gc, sort_key
from .scope import ScopeError, scope

__all__ = ["ClusterObjects", "K8sObject", "ScopeError", "build"]


@dataclass(frozen=True)
class ClusterObjects:
    """The objects of one cluster, by stack component."""

    cluster: list[K8sObject]
    storage: list[K8sObject]
    mesh: list[K8sObject]
    ray: list[K8sObject]

    def all(self) -> list[K8sObject]:
        """Every object, sorted by (apiVersion, kind, namespace, name)."""
        return sorted([*self.cluster, *self.storage, *self.mesh, *self.ray], key=sort_key)


def build(
    state: DesiredState, sites: Iterable[str] | None = None, gpu_present: bool = False
) -> ClusterObjects:
    """The objects for ``state`` (from :func:`swarm_infra.resolve.desired_state`), for the
    whole fleet or for the cluster of ``sites`` (:func:`swarm_infra.cluster.scope.scope`).
    ``gpu_present``: label GPU nodes ``nvidia.com/gpu.present=true`` (the stack's
    device-plugin mode: :func:`swarm_infra.cluster.core.node_labels`).

    Raises :class:`ScopeError` when the sites cannot form a cluster of their own, and
    ValueError when the mesh topology is too large for a ConfigMap.
    """
    with no_gc():
        return _build(scope(state, sites), gpu_present)


def _build(state: DesiredState, gpu_present: bool) -> ClusterObjects:
    c = state["cluster"]
    nodes = list(state["nodes"].values())
    main = [
        *core.namespaces(c),
        *core.priority_classes(c),
        *kueue.workload_priority_classes(c),
        *kueue.resource_flavors(c),
        *kueue.cohorts(c),
        *kueue.cluster_queues(c),
        *kueue.local_queues(c),
        *admission.admission_objects(c),
        *core.caps(c),
        *core.nodes(c, nodes, gpu_present),
        *core.gpu_configs(c),
    ]
    return ClusterObjects(
        cluster=sorted(main, key=sort_key),
        storage=sorted(core.storage(c, nodes), key=sort_key),
        mesh=core.mesh_configmap(c),
        ray=sorted(kuberay.ray_clusters(c), key=sort_key),
    )
