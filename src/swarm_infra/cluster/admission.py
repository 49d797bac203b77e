"""Allowed priorities per tenant, enforced by the API server: a ValidatingAdmissionPolicy
(admissionregistration.k8s.io/v1, CEL) and its binding.

Kueue does not restrict which WorkloadPriorityClass a namespace may use, and Kubernetes
does not restrict PriorityClasses per namespace. So each tenant namespace carries one
label ``priority.swarm.io/<priority>: allowed`` per priority the tenant may use, and one
policy, bound to every namespace labelled ``swarm.io/tenant``, refuses:

- a Pod that names no ``spec.priorityClassName``: the cluster has no globalDefault
  PriorityClass (it would apply to every pod of the cluster, the add-ons' included, see
  :func:`swarm_infra.cluster.core.priority_classes`), so such a pod would run at priority
  0, outside the fleet's declared priorities; the message names the fleet's default;
- a Pod whose ``spec.priorityClassName`` is not allowed in its namespace;
- any object (Job, RayCluster, RayJob, JobSet, ...) whose ``kueue.x-k8s.io/priority-class``
  label names a WorkloadPriorityClass that is not allowed.

Tenants cannot widen their own list: namespace labels are cluster-scoped data that a
namespace admin (ClusterRole ``admin``) cannot change. The expressions use core CEL only
(no Kubernetes extension libraries), so a CEL library evaluates them exactly as written
(``tests/unit/test_cluster_admission.py``).
"""

from __future__ import annotations

from typing import Any

from ..resolve.types import ClusterState
from .meta import KUEUE_PRIORITY_LABEL, PRIORITY_LABEL_PREFIX, TENANT_LABEL, K8sObject, k8s_object

POLICY_NAME = "swarm-allowed-priorities"
ALLOWED = "allowed"  # value of the priority.swarm.io/<name> namespace labels


def _quote(text: str) -> str:
    """A CEL string literal of ``text``. Raises ValueError for a quote or backslash (names
    are DNS labels, so none can occur: the schema refuses them before this is reached)."""
    if "'" in text or "\\" in text:
        raise ValueError(f"{text!r} cannot be a CEL string literal here (quote or backslash)")
    return f"'{text}'"


def variables() -> list[dict[str, str]]:
    """The policy's CEL variables: a Pod's PriorityClass ('' when none or not a Pod) and
    the Kueue label."""
    return [
        {
            "name": "podClass",
            "expression": (
                "request.kind.group == '' && request.kind.kind == 'Pod' && "
                "has(object.spec.priorityClassName) ? object.spec.priorityClassName : ''"
            ),
        },
        {
            "name": "kueueClass",
            "expression": (
                f"has(object.metadata.labels) && {_quote(KUEUE_PRIORITY_LABEL)} in object.metadata.labels ? "
                f"object.metadata.labels[{_quote(KUEUE_PRIORITY_LABEL)}] : ''"
            ),
        },
    ]


def _allowed(var: str) -> str:
    return (
        f"variables.{var} == '' || (has(namespaceObject.metadata.labels) && "
        f"({_quote(PRIORITY_LABEL_PREFIX)} + variables.{var}) in namespaceObject.metadata.labels)"
    )


def validations(default_priority: str | None) -> list[dict[str, str]]:
    """A Pod names a class; then one validation per priority system (Kubernetes
    PriorityClass, Kueue WorkloadPriorityClass)."""
    where = "' is not allowed in namespace ' + namespaceObject.metadata.name"
    hint = f" (the default Priority is {default_priority})" if default_priority else ""
    return [
        {
            "expression": (
                "variables.podClass != '' || !(request.kind.group == '' && request.kind.kind == 'Pod')"
            ),
            "messageExpression": (
                "'a Pod in tenant namespace ' + namespaceObject.metadata.name + "
                + _quote(f" must name its PriorityClass{hint}")
            ),
            "reason": "Forbidden",
        },
        {
            "expression": _allowed("podClass"),
            "messageExpression": f"'PriorityClass ' + variables.podClass + {where}",
            "reason": "Forbidden",
        },
        {
            "expression": _allowed("kueueClass"),
            "messageExpression": f"'WorkloadPriorityClass ' + variables.kueueClass + {where}",
            "reason": "Forbidden",
        },
    ]


def admission_objects(cluster: ClusterState) -> list[K8sObject]:
    """The ValidatingAdmissionPolicy and its binding (none without tenants)."""
    if not cluster["tenants"]:
        return []
    labels = cluster["settings"]["labels"]
    default = next((p["name"] for p in cluster["priorities"] if p["global_default"]), None)
    tenant_namespaces: dict[str, Any] = {"matchExpressions": [{"key": TENANT_LABEL, "operator": "Exists"}]}
    policy = k8s_object(
        "ValidatingAdmissionPolicy",
        POLICY_NAME,
        labels,
        spec={
            "failurePolicy": "Fail",
            "matchConstraints": {
                "namespaceSelector": tenant_namespaces,
                # Every kind: a Kueue priority label on any workload kind is checked, and a
                # kind added to Kueue later is covered without a change here.
                "resourceRules": [
                    {
                        "apiGroups": ["*"],
                        "apiVersions": ["*"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["*"],
                    }
                ],
            },
            "variables": variables(),
            "validations": validations(default),
        },
    )
    binding = k8s_object(
        "ValidatingAdmissionPolicyBinding",
        POLICY_NAME,
        labels,
        spec={
            "policyName": POLICY_NAME,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": tenant_namespaces},
        },
    )
    return [policy, binding]
