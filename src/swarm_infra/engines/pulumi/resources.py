"""One Kubernetes object → one Pulumi resource, with the object's fields as its inputs.

Core kinds use pulumi-kubernetes' typed resources (``Node`` as ``NodePatch``: the stack
only claims labels and taints of nodes that exist). Custom resources whose fields sit under
``spec`` use ``apiextensions.CustomResource``. Kinds with other top-level fields
(WorkloadPriorityClass: ``value``, ``description``) cannot: Python's ``CustomResource``
takes only ``spec``, so :class:`KubernetesObject` registers the whole object under the same
``kubernetes:<apiVersion>:<kind>`` type the provider serves.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes import _utilities

from ...cluster import K8sObject

_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


def _snake(name: str) -> str:
    return _CAMEL.sub("_", name).lower()


class KubernetesObject(pulumi.CustomResource):
    """Any Kubernetes object, all its top-level fields as inputs (type
    ``kubernetes:<apiVersion>:<kind>``, served by the kubernetes provider)."""

    def __init__(
        self, resource_name: str, obj: K8sObject, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(version=_utilities.get_version()))
        super().__init__(f"kubernetes:{obj['apiVersion']}:{obj['kind']}", resource_name, dict(obj), opts)


TYPED: dict[str, Callable[..., pulumi.CustomResource]] = {
    "Namespace": k8s.core.v1.Namespace,
    "ServiceAccount": k8s.core.v1.ServiceAccount,
    "ClusterRole": k8s.rbac.v1.ClusterRole,
    "ClusterRoleBinding": k8s.rbac.v1.ClusterRoleBinding,
    "Role": k8s.rbac.v1.Role,
    "RoleBinding": k8s.rbac.v1.RoleBinding,
    "Deployment": k8s.apps.v1.Deployment,
    "ConfigMap": k8s.core.v1.ConfigMap,
    "Node": k8s.core.v1.NodePatch,
    "ResourceQuota": k8s.core.v1.ResourceQuota,
    "LimitRange": k8s.core.v1.LimitRange,
    "PersistentVolumeClaim": k8s.core.v1.PersistentVolumeClaim,
    "PriorityClass": k8s.scheduling.v1.PriorityClass,
    "StorageClass": k8s.storage.v1.StorageClass,
    "ValidatingAdmissionPolicy": k8s.admissionregistration.v1.ValidatingAdmissionPolicy,
    "ValidatingAdmissionPolicyBinding": k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding,
}
SPEC_ONLY = {"ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue", "RayCluster"}


def resource_name(obj: K8sObject) -> str:
    """The Pulumi name: ``namespace/name`` or ``name`` (unique per type in a stack)."""
    meta = obj["metadata"]
    return f"{meta['namespace']}/{meta['name']}" if "namespace" in meta else meta["name"]


def resource_type(kind: str) -> str:
    """What :func:`register` makes for ``kind``: ``typed``, ``custom`` or ``object``."""
    return "typed" if kind in TYPED else "custom" if kind in SPEC_ONLY else "object"


def register(obj: K8sObject, opts: pulumi.ResourceOptions) -> pulumi.CustomResource:
    """The Pulumi resource for ``obj`` (see the module doc)."""
    name, kind = resource_name(obj), obj["kind"]
    fields = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
    if kind in TYPED:
        return TYPED[kind](name, opts=opts, **{_snake(k): v for k, v in fields.items()})
    if kind in SPEC_ONLY:
        extra = set(fields) - {"metadata", "spec"}
        assert not extra, f"{kind} has top-level fields {extra}: not a spec-only custom resource"
        return k8s.apiextensions.CustomResource(
            name,
            api_version=obj["apiVersion"],
            kind=kind,
            metadata=fields["metadata"],
            spec=fields.get("spec"),
            opts=opts,
        )
    return KubernetesObject(name, obj, opts)
