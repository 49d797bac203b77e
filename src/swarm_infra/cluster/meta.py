"""What every object shares: apiVersions, metadata, Kubernetes quantities, ordering."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

K8sObject = dict[str, Any]  # a plain Kubernetes object: apiVersion, kind, metadata, ...

KUEUE_API = "kueue.x-k8s.io/v1beta2"
RAY_API = "ray.io/v1"
API_VERSIONS: dict[str, str] = {
    "Namespace": "v1",
    "ServiceAccount": "v1",
    "ClusterRole": "rbac.authorization.k8s.io/v1",
    "ClusterRoleBinding": "rbac.authorization.k8s.io/v1",
    "Role": "rbac.authorization.k8s.io/v1",
    "RoleBinding": "rbac.authorization.k8s.io/v1",
    "Deployment": "apps/v1",
    "ConfigMap": "v1",
    "Node": "v1",
    "ResourceQuota": "v1",
    "LimitRange": "v1",
    "PersistentVolumeClaim": "v1",
    "PriorityClass": "scheduling.k8s.io/v1",
    "StorageClass": "storage.k8s.io/v1",
    "ValidatingAdmissionPolicy": "admissionregistration.k8s.io/v1",
    "ValidatingAdmissionPolicyBinding": "admissionregistration.k8s.io/v1",
    "WorkloadPriorityClass": KUEUE_API,
    "ResourceFlavor": KUEUE_API,
    "Cohort": KUEUE_API,
    "ClusterQueue": KUEUE_API,
    "LocalQueue": KUEUE_API,
    "RayCluster": RAY_API,
}
# Labels and annotations the objects carry (besides the fleet's, ClusterSettingsState.labels).
TENANT_LABEL = "swarm.io/tenant"
PRIORITY_LABEL_PREFIX = "priority.swarm.io/"  # + Priority name, on a tenant namespace: allowed
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"


def k8s_object(
    kind: str,
    name: str,
    labels: dict[str, str],
    namespace: str | None = None,
    annotations: dict[str, str] | None = None,
    **fields: Any,
) -> K8sObject:
    """``{apiVersion, kind, metadata: {name, namespace?, labels, annotations?}, **fields}``.

    ``labels`` is copied (sorted); fields whose value is None are left out.
    """
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    metadata["labels"] = dict(sorted(labels.items()))
    if annotations:
        metadata["annotations"] = dict(sorted(annotations.items()))
    obj: K8sObject = {"apiVersion": API_VERSIONS[kind], "kind": kind, "metadata": metadata}
    obj.update((k, v) for k, v in fields.items() if v is not None)
    return obj


def sort_key(obj: K8sObject) -> tuple[str, str, str, str]:
    """Objects are listed by (apiVersion, kind, namespace, name)."""
    meta = obj["metadata"]
    return (obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"])


def cpu(millicores: int) -> str:
    """A CPU quantity: whole cores as ``"8"``, else millicores ``"500m"``."""
    return str(millicores // 1000) if millicores % 1000 == 0 else f"{millicores}m"


def memory(mib: int) -> str:
    """A memory quantity: whole GiB as ``"16Gi"``, else ``"512Mi"``."""
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


def weight(value: float) -> int | str:
    """A fair-sharing weight as Kueue's int-or-string quantity: ``2``, ``"0.5"``."""
    return int(value) if float(value).is_integer() else repr(float(value))


@contextmanager
def no_gc() -> Iterator[None]:
    """Cyclic GC off while many small objects are made that all stay alive (the objects, a
    YAML representer's nodes): it would rescan them repeatedly for nothing."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
