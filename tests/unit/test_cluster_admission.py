"""The allowed-priorities admission policy's CEL, evaluated (cel-python) against workloads
the policy must admit and refuse, with the rendered namespaces as ``namespaceObject``.

The evaluation follows the API server: variables are evaluated first and bound as
``variables.<name>``; a request is admitted when every validation is true, and refused with
the first false validation's message.
"""

from __future__ import annotations

from typing import Any

import pytest

from swarm_infra.cluster.admission import POLICY_NAME
from swarm_infra.cluster.meta import KUEUE_PRIORITY_LABEL, KUEUE_QUEUE_LABEL

from .cluster_support import by_kind, cel, objects, state

OBJECTS = objects("example").all()
POLICY = by_kind(OBJECTS, "ValidatingAdmissionPolicy")[POLICY_NAME]
NAMESPACES = by_kind(OBJECTS, "Namespace")
TENANTS = {t["name"]: t for t in state("example")["cluster"]["tenants"]}
PRIORITIES = [p["name"] for p in state("example")["cluster"]["priorities"]]
DEFAULT = next(p["name"] for p in state("example")["cluster"]["priorities"] if p["global_default"])


def admit(obj: dict[str, Any], kind: tuple[str, str], namespace: str) -> str | None:
    """None when the policy admits ``obj``, else the refusal message."""
    spec = POLICY["spec"]
    activation = {
        "object": obj,
        "request": {"kind": {"group": kind[0], "version": "v1", "kind": kind[1]}, "namespace": namespace},
        "namespaceObject": NAMESPACES[namespace],
    }
    variables = {v["name"]: cel(v["expression"], **activation) for v in spec["variables"]}
    for check in spec["validations"]:
        if not cel(check["expression"], **activation, variables=variables):
            return str(cel(check["messageExpression"], **activation, variables=variables))
    return None


def pod(priority: str | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox"}]}
    if priority is not None:
        spec["priorityClassName"] = priority
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": labels or {}},
        "spec": spec,
    }


def job(priority: str | None) -> dict[str, Any]:
    labels = {KUEUE_QUEUE_LABEL: "q"} | ({KUEUE_PRIORITY_LABEL: priority} if priority else {})
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "labels": labels}, "spec": {}}


CASES = [(t, p, p in TENANTS[t]["priorities"]) for t in sorted(TENANTS) for p in PRIORITIES]


def test_the_cases_include_refusals_and_admissions() -> None:
    assert {allowed for *_, allowed in CASES} == {True, False}


@pytest.mark.parametrize(("tenant", "priority", "allowed"), CASES)
def test_a_pod_naming_a_priority_class(tenant: str, priority: str, allowed: bool) -> None:
    ns = TENANTS[tenant]["namespace"]
    result = admit(pod(priority), ("", "Pod"), ns)
    if allowed:
        assert result is None
    else:
        assert result == f"PriorityClass {priority} is not allowed in namespace {ns}"


@pytest.mark.parametrize(("tenant", "priority", "allowed"), CASES)
def test_a_job_naming_a_workload_priority_class(tenant: str, priority: str, allowed: bool) -> None:
    ns = TENANTS[tenant]["namespace"]
    result = admit(job(priority), ("batch", "Job"), ns)
    if allowed:
        assert result is None
    else:
        assert result == f"WorkloadPriorityClass {priority} is not allowed in namespace {ns}"


@pytest.mark.parametrize("tenant", sorted(TENANTS))
def test_a_pod_naming_no_class_is_refused_with_the_default_named(tenant: str) -> None:
    """No PriorityClass is a cluster-wide globalDefault (it would apply to the add-ons'
    pods too: issue #24, item 11), so a tenant pod without a class would run at priority 0,
    outside the fleet's priorities: every tenant's such pod is refused, and told the default."""
    ns = TENANTS[tenant]["namespace"]
    result = admit(pod(None), ("", "Pod"), ns)
    assert (
        result
        == f"a Pod in tenant namespace {ns} must name its PriorityClass (the default Priority is {DEFAULT})"
    )
    assert admit(pod(""), ("", "Pod"), ns) == result  # an empty name is no name


def test_a_pod_is_checked_on_both_its_class_and_its_kueue_label() -> None:
    ns = TENANTS["community"]["namespace"]
    assert admit(pod("spot", {KUEUE_PRIORITY_LABEL: "spot"}), ("", "Pod"), ns) is None
    assert admit(pod("spot", {KUEUE_PRIORITY_LABEL: "production"}), ("", "Pod"), ns) == (
        "WorkloadPriorityClass production is not allowed in namespace community"
    )


def test_objects_without_priorities_and_non_pods_pass() -> None:
    ns = TENANTS["community"]["namespace"]
    assert admit(job(None), ("batch", "Job"), ns) is None
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {}}
    assert admit(config, ("", "ConfigMap"), ns) is None
    # A non-Pod kind called Pod in another group is not a Pod.
    assert admit({"metadata": {}, "spec": {"priorityClassName": "production"}}, ("x.io", "Pod"), ns) is None


def test_a_namespace_without_labels_refuses_every_named_priority() -> None:
    bare = {"metadata": {"name": "acme-ai"}}
    spec = POLICY["spec"]
    activation = {
        "object": job("batch"),
        "request": {"kind": {"group": "batch", "kind": "Job"}},
        "namespaceObject": bare,
    }
    variables = {v["name"]: cel(v["expression"], **activation) for v in spec["variables"]}
    assert [bool(cel(c["expression"], **activation, variables=variables)) for c in spec["validations"]] == [
        True,
        True,
        False,
    ]


def test_the_fleets_own_ray_clusters_and_their_pods_are_admitted() -> None:
    for name, rc in by_kind(OBJECTS, "RayCluster").items():
        ns = rc["metadata"]["namespace"]
        assert admit(rc, ("ray.io", "RayCluster"), ns) is None, name
        spec = rc["spec"]
        for template in [
            spec["headGroupSpec"]["template"],
            *(w["template"] for w in spec["workerGroupSpecs"]),
        ]:
            assert (
                admit({"metadata": template["metadata"], "spec": template["spec"]}, ("", "Pod"), ns) is None
            )


def test_the_binding_selects_exactly_the_tenant_namespaces() -> None:
    binding = by_kind(OBJECTS, "ValidatingAdmissionPolicyBinding")[POLICY_NAME]
    assert binding["spec"]["policyName"] == POLICY_NAME and binding["spec"]["validationActions"] == ["Deny"]
    (expr,) = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    selected = {n for n, o in NAMESPACES.items() if expr["key"] in o["metadata"]["labels"]}
    assert selected == {t["namespace"] for t in TENANTS.values()}
