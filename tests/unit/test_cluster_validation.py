"""Every rendered object is valid for the API server that would receive it.

- Core objects: kubernetes-validate, strict (unknown fields refused), for the Kubernetes
  minors upstream supports as of 2026-11 (1.35, 1.36, 1.37).
- Kueue and KubeRay objects: the upstream CRD's openAPIV3Schema (reference copies in
  ../shared/reference/crds/), with unknown fields refused as strict field validation does.
- The CRDs' CEL rules: evaluated with cel-python on every object, and restated in Python
  (swarm_infra.cluster.rules); mutated objects show that both reject the same things.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from swarm_infra.cluster import rules
from swarm_infra.cluster.meta import API_VERSIONS, KUEUE_API, RAY_API

from .cluster_support import by_kind, cel_failures, crd_schema, mutated, needs_crds, objects, strict

KUBERNETES_VERSIONS = ("1.35", "1.36", "1.37")
FLEETS = ("example", "lab")
CRD_APIS = (KUEUE_API, RAY_API)


def _objects(fleet: str, crd: bool) -> list[dict[str, Any]]:
    return [o for o in objects(fleet).all() if (o["apiVersion"] in CRD_APIS) == crd]


def test_the_example_renders_every_kind() -> None:
    kinds = {o["kind"] for o in objects("example").all()}
    # Cohort objects appear only where a policy declares cohorts (tests/data/cluster).
    assert kinds == set(API_VERSIONS) - {"Cohort"}


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("fleet", FLEETS)
def test_core_objects_pass_kubernetes_validate_strict(fleet: str, version: str) -> None:
    core = _objects(fleet, crd=False)
    assert len(core) > 10
    for obj in core:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(
                f"{obj['kind']} {obj['metadata']['name']}: {'.'.join(map(str, exc.path))}: {exc.message}"
            )


def test_strict_validation_refuses_an_unknown_field() -> None:
    """The validator used above is strict: a misspelt field is an error, not pruned."""
    ns = dict(by_kind(objects("example").all(), "Namespace")["acme-ai"])
    ns["spec"] = {"finalizer": ["kubernetes"]}  # the field is "finalizers"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ns, KUBERNETES_VERSIONS[-1], strict=True)


@needs_crds
@pytest.mark.parametrize("fleet", FLEETS)
def test_kueue_and_kuberay_objects_match_the_upstream_crd_schemas(fleet: str) -> None:
    crs = _objects(fleet, crd=True)
    assert {o["kind"] for o in crs} >= {
        "ClusterQueue",
        "LocalQueue",
        "ResourceFlavor",
        "WorkloadPriorityClass",
    }
    for obj in crs:
        schema = strict(crd_schema(obj["kind"], obj["apiVersion"]))
        errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(obj), key=str)
        assert not errors, (
            f"{obj['kind']} {obj['metadata']['name']}: {errors[0].json_path}: {errors[0].message}"
        )


@needs_crds
def test_crd_schema_check_refuses_unknown_and_mistyped_fields() -> None:
    cq = by_kind(objects("example").all(), "ClusterQueue")["acme-ai"]
    schema = strict(crd_schema("ClusterQueue", KUEUE_API))
    typo = mutated(cq)
    typo["spec"]["cohort"] = typo["spec"].pop("cohortName")  # the v1beta1 name
    assert not jsonschema.Draft7Validator(schema).is_valid(typo)
    wrong = mutated(cq)
    wrong["spec"]["fairSharing"]["weight"] = 0.5  # int-or-string: a float is refused
    assert not jsonschema.Draft7Validator(schema).is_valid(wrong)


@needs_crds
@pytest.mark.parametrize("fleet", FLEETS)
def test_every_object_keeps_the_crd_cel_rules_and_the_restated_rules(fleet: str) -> None:
    for obj in objects(fleet).all():
        assert rules.violations(obj) == [], (obj["kind"], obj["metadata"]["name"])
        if obj["apiVersion"] in CRD_APIS:
            assert cel_failures(obj) == [], (obj["kind"], obj["metadata"]["name"])


def _queue() -> dict[str, Any]:
    return mutated(by_kind(objects("example").all(), "ClusterQueue")["acme-ai"])


def _flavor() -> dict[str, Any]:
    return mutated(by_kind(objects("example").all(), "ResourceFlavor")["h100-sxm5-80gb"])


def _drop_resource(o: dict[str, Any]) -> None:
    o["spec"]["resourceGroups"][0]["flavors"][0]["resources"].pop()


def _no_cohort(o: dict[str, Any]) -> None:
    del o["spec"]["cohortName"]


def _preemption(o: dict[str, Any]) -> None:
    o["spec"]["preemption"] = {
        "reclaimWithinCohort": "Never",
        "borrowWithinCohort": {"policy": "LowerPriority"},
    }


def _fungibility(o: dict[str, Any]) -> None:
    o["spec"]["flavorFungibility"] = {
        "preference": "BorrowingOverPreemption",
        "whenCanBorrow": "MayStopSearch",
    }


def _toleration_value(o: dict[str, Any]) -> None:
    o["spec"]["tolerations"][0]["value"] = "present"


def _toleration_no_key(o: dict[str, Any]) -> None:
    del o["spec"]["tolerations"][0]["key"]
    o["spec"]["tolerations"][0]["operator"] = "Equal"


def _toleration_seconds(o: dict[str, Any]) -> None:
    o["spec"]["tolerations"][0]["tolerationSeconds"] = 30


def _taint_effect(o: dict[str, Any]) -> None:
    o["spec"]["nodeTaints"] = [{"key": "nvidia.com/gpu", "effect": "NoRun"}]


def _topology_without_labels(o: dict[str, Any]) -> None:
    o["spec"]["topologyName"] = "default"
    o["spec"]["nodeLabels"] = {}


def _nothing(o: dict[str, Any]) -> None:
    pass


MUTATIONS = [
    (_queue, _nothing, False),
    (_queue, _drop_resource, True),
    (_queue, _no_cohort, True),
    (_queue, _preemption, True),
    (_queue, _fungibility, True),
    (_flavor, _nothing, False),
    (_flavor, _toleration_value, True),
    (_flavor, _toleration_no_key, True),
    (_flavor, _toleration_seconds, True),
    (_flavor, _taint_effect, True),
    (_flavor, _topology_without_labels, True),
]


@needs_crds
@pytest.mark.parametrize(
    ("make", "mutate", "bad"), MUTATIONS, ids=[m[1].__name__.strip("_") for m in MUTATIONS]
)
def test_restated_rules_agree_with_the_upstream_cel(make: Any, mutate: Any, bad: bool) -> None:
    obj = make()
    mutate(obj)
    upstream = cel_failures(obj)
    restated = [v for v in rules.violations(obj) if not v.startswith(("metadata", "label"))]
    assert bool(upstream) is bad, upstream
    assert bool(restated) is bad, restated


def test_metadata_rules_refuse_bad_names_and_labels() -> None:
    ns = mutated(by_kind(objects("example").all(), "Namespace")["acme-ai"])
    assert rules.violations(ns) == []
    ns["metadata"]["name"] = "Acme_AI"
    ns["metadata"]["labels"]["swarm.io/mesh-address"] = "10.0.0.1/32"
    found = rules.violations(ns)
    assert any("metadata.name" in v for v in found) and any("mesh-address" in v for v in found)


def test_kueue_rules_for_queued_rayclusters() -> None:
    rc = mutated(by_kind(objects("example").all(), "RayCluster")["acme-ai/acme-ai"])
    assert rc["spec"]["enableInTreeAutoscaling"] is True and rules.violations(rc) == []
    del rc["metadata"]["annotations"]
    assert any("elastic-job annotation" in v for v in rules.violations(rc))
    rc = mutated(by_kind(objects("example").all(), "RayCluster")["acme-ai/acme-ai"])
    rc["spec"]["workerGroupSpecs"][0]["template"]["spec"].pop("schedulingGates")
    assert any("scheduling gate" in v for v in rules.violations(rc))
