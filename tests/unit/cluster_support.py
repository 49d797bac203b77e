"""What the cluster-layer tests share: the fleets' states and objects, the upstream CRDs'
schemas (read from ../shared/reference/crds/, never copied here) and their CEL rules."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import celpy
import kubernetes_validate.utils
import pytest
import yaml

from swarm_infra import desired_state, load_fleet
from swarm_infra.cluster import ClusterObjects, build
from swarm_infra.resolve.types import DesiredState

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT.parent / "shared" / "reference" / "crds"
CRD_FILES = {
    "ClusterQueue": "kueue.x-k8s.io_clusterqueues.yaml",
    "Cohort": "kueue.x-k8s.io_cohorts.yaml",
    "LocalQueue": "kueue.x-k8s.io_localqueues.yaml",
    "ResourceFlavor": "kueue.x-k8s.io_resourceflavors.yaml",
    "WorkloadPriorityClass": "kueue.x-k8s.io_workloadpriorityclasses.yaml",
    "RayCluster": "ray.io_rayclusters.yaml",
}
needs_crds = pytest.mark.skipif(not CRDS.is_dir(), reason=f"reference CRDs not found at {CRDS}")


# kubernetes-validate reads its schema files again for every object; the files never change,
# so keep what it read (its validation logic itself is untouched).
kubernetes_validate.utils.schema_contents = cache(kubernetes_validate.utils.schema_contents)


def fleet_dirs(name: str) -> list[Path]:
    return [ROOT / "inventory" / name, ROOT / "policies" / name, ROOT / "policies" / "shared"]


@cache
def state(name: str) -> DesiredState:
    """The desired state of fleet ``name`` (shared: treat as read-only)."""
    return desired_state(load_fleet(fleet_dirs(name)))


@cache
def objects(name: str) -> ClusterObjects:
    return build(state(name))


def by_kind(objs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    """``namespace/name`` (or ``name``) → object, for one kind."""
    out = {}
    for o in objs:
        if o["kind"] == kind:
            m = o["metadata"]
            out[f"{m['namespace']}/{m['name']}" if "namespace" in m else m["name"]] = o
    return out


@cache
def crd_schema(kind: str, api_version: str) -> dict[str, Any]:
    """``spec.versions[name==version].schema.openAPIV3Schema`` of the reference CRD."""
    crd = yaml.load(
        (CRDS / CRD_FILES[kind]).read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    )
    version = api_version.split("/")[1]
    (entry,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    return entry["schema"]["openAPIV3Schema"]


def strict(schema: Any) -> Any:
    """``schema`` with unknown fields refused, as the API server's strict field validation
    does (a structural schema would otherwise prune them silently): ``additionalProperties:
    false`` wherever properties are listed and nothing else is allowed. ``metadata`` stays
    open (ObjectMeta is checked by ``swarm_infra.cluster.rules``)."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    if "properties" in out and "metadata" in out["properties"]:
        out["properties"]["metadata"] = {"type": "object"}
    return out


def cel_rules(
    schema: dict[str, Any], value: Any, path: str = "$"
) -> Iterator[tuple[str, dict[str, Any], Any]]:
    """Every ``x-kubernetes-validations`` rule of ``schema`` that applies somewhere in
    ``value``: (path, rule, the value it applies to as ``self``). Transition rules
    (``oldSelf``) are left out: they only apply to updates."""
    for rule in schema.get("x-kubernetes-validations", []):
        if "oldSelf" not in rule["rule"]:
            yield path, rule, value
    if isinstance(value, dict):
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, sub in value.items():
            if key in props:
                yield from cel_rules(props[key], sub, f"{path}.{key}")
            elif isinstance(extra, dict):
                yield from cel_rules(extra, sub, f"{path}.{key}")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, sub in enumerate(value):
            yield from cel_rules(schema["items"], sub, f"{path}[{i}]")


_ENV = celpy.Environment()


@cache
def _program(expr: str) -> Any:
    return _ENV.program(_ENV.compile(expr))


def cel(expr: str, **activation: Any) -> Any:
    """Evaluate the CEL expression ``expr`` (cel-python) with JSON values bound to names."""
    return _program(expr).evaluate({k: celpy.json_to_cel(v) for k, v in activation.items()})


def cel_failures(obj: dict[str, Any]) -> list[str]:
    """The upstream CRD's CEL rules that ``obj`` breaks: ``path: message``."""
    schema = crd_schema(obj["kind"], obj["apiVersion"])
    return [
        f"{path}: {rule['message']}"
        for path, rule, value in cel_rules(schema, obj)
        if not cel(rule["rule"], self=value)
    ]


def mutated(obj: dict[str, Any]) -> dict[str, Any]:
    return copy.deepcopy(obj)
