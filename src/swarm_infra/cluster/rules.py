"""Rules the API server enforces that a JSON Schema of the objects does not state, restated
as Python: the Kueue CRDs' CEL rules (``x-kubernetes-validations``), Kueue's webhook rules
for queued RayClusters, and Kubernetes' name and label syntax.

``violations(obj)`` lists what is wrong with one object ([] when nothing is). The builder's
output must give [] for every object (tests check it, and check that each restated CEL
rule agrees with the upstream rule evaluated by a CEL library on good and bad objects).
The fleet's validator (``swarm validate``) rejects the policies that would lead here, so a
violation is a bug in the builder, never a user error.

Restated CEL rules (kueue.x-k8s.io v1beta2, reference CRDs of commit ff69552):

- ClusterQueue and Cohort ``resourceGroups[]``: "flavors must have the same number of
  resources as the coveredResources" (this project also requires the same names in the
  same order, as Kueue's webhook does);
- ClusterQueue: "borrowingLimit must be nil when cohort is empty";
- ClusterQueue ``preemption``: "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never";
- ClusterQueue ``flavorFungibility``: "preference can only be set when both whenCanBorrow
  and whenCanPreempt are TryNextFlavor";
- ResourceFlavor ``nodeTaints``: effect in NoSchedule, PreferNoSchedule, NoExecute;
- ResourceFlavor ``tolerations``: operator Exists when key is empty; tolerationSeconds
  only with NoExecute; operator Equal or Exists; no value with Exists; the effects above;
- ResourceFlavor: "at least one nodeLabel is required when topology is set".
"""

from __future__ import annotations

import re
from typing import Any

from .meta import K8sObject

EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# Kubernetes apimachinery validation (IsDNS1123Label/Subdomain, IsQualifiedName, IsValidLabelValue).
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
# Kinds whose names are DNS-1123 labels (the rest are subdomains).
LABEL_NAMED = {"Namespace"}
KUEUE_MAX_POD_SETS = 8  # a RayCluster: the head and at most 7 worker groups


def _label_key(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix)):
        return f"label key {key!r}: prefix is not a DNS subdomain"
    if not name or len(name) > 63 or not QUALIFIED_NAME.match(name):
        return f"label key {key!r}: name is not a qualified name of at most 63 characters"
    return None


def metadata_violations(obj: K8sObject) -> list[str]:
    """Name, namespace and label syntax (what ObjectMeta validation enforces)."""
    out = []
    meta = obj["metadata"]
    name = meta.get("name", "")
    pattern, limit = (DNS1123_LABEL, 63) if obj["kind"] in LABEL_NAMED else (DNS1123_SUBDOMAIN, 253)
    if len(name) > limit or not pattern.match(name):
        out.append(f"metadata.name {name!r} is not a valid {obj['kind']} name")
    ns = meta.get("namespace")
    if ns is not None and (len(ns) > 63 or not DNS1123_LABEL.match(ns)):
        out.append(f"metadata.namespace {ns!r} is not a DNS-1123 label")
    for key, value in (meta.get("labels") or {}).items():
        problem = _label_key(key)
        if problem:
            out.append(problem)
        if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE.match(value):
            out.append(f"label {key!r}: value {value!r} is not a valid label value")
    return out


def _resource_groups(groups: list[dict[str, Any]], where: str) -> list[str]:
    out = []
    for gi, g in enumerate(groups):
        covered = g["coveredResources"]
        for f in g["flavors"]:
            names = [r["name"] for r in f["resources"]]
            if len(names) != len(covered):
                out.append(
                    f"{where}.resourceGroups[{gi}]: flavor {f['name']!r} has {len(names)} resources, "
                    f"coveredResources {len(covered)} (Kueue CEL rule)"
                )
            elif names != covered:
                out.append(
                    f"{where}.resourceGroups[{gi}]: flavor {f['name']!r} lists {names}, not the "
                    f"coveredResources {covered} in order"
                )
    return out


def cluster_queue_violations(obj: K8sObject) -> list[str]:
    spec = obj.get("spec", {})
    out = _resource_groups(spec.get("resourceGroups", []), "spec")
    if "cohortName" not in spec:
        for g in spec.get("resourceGroups", []):
            for f in g["flavors"]:
                if any("borrowingLimit" in r for r in f["resources"]):
                    out.append(f"flavor {f['name']!r}: borrowingLimit must be nil when cohort is empty")
    p = spec.get("preemption", {})
    if p.get("reclaimWithinCohort", "Never") == "Never" and p.get("borrowWithinCohort", {}).get(
        "policy", "Never"
    ) not in (None, "Never"):
        out.append("preemption: reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never")
    ff = spec.get("flavorFungibility")
    if (
        ff
        and "preference" in ff
        and not (
            ff.get("whenCanBorrow", "MayStopSearch") == "TryNextFlavor"
            and ff.get("whenCanPreempt", "TryNextFlavor") == "TryNextFlavor"
        )
    ):
        out.append("flavorFungibility: preference needs whenCanBorrow and whenCanPreempt TryNextFlavor")
    return out


def resource_flavor_violations(obj: K8sObject) -> list[str]:
    spec = obj.get("spec", {})
    out = []
    for t in spec.get("nodeTaints", []):
        if t.get("effect") not in EFFECTS:
            out.append(f"nodeTaints: effect {t.get('effect')!r} is not one of {', '.join(EFFECTS)}")
    for t in spec.get("tolerations", []):
        op = t.get("operator")
        if "key" not in t and op != "Exists":
            out.append("tolerations: operator must be Exists when key is empty")
        if "tolerationSeconds" in t and t.get("effect") != "NoExecute":
            out.append("tolerations: tolerationSeconds needs effect NoExecute")
        if op is not None and op not in ("Equal", "Exists"):
            out.append(f"tolerations: operator {op!r} is not Equal or Exists")
        if op == "Exists" and "value" in t:
            out.append("tolerations: a value must be empty when operator is Exists")
        if "effect" in t and t["effect"] not in EFFECTS:
            out.append(f"tolerations: effect {t['effect']!r} is not one of {', '.join(EFFECTS)}")
    if "topologyName" in spec and len(spec.get("nodeLabels") or {}) < 1:
        out.append("at least one nodeLabel is required when topology is set")
    return out


def ray_cluster_violations(obj: K8sObject) -> list[str]:
    """Kueue's webhook for a queued RayCluster: at most 7 worker groups, none named head,
    autoscaling only as an elastic job (annotation and scheduling gate on every template)."""
    if "kueue.x-k8s.io/queue-name" not in obj["metadata"].get("labels", {}):
        return []
    spec = obj["spec"]
    workers = spec.get("workerGroupSpecs", [])
    out = []
    if len(workers) > KUEUE_MAX_POD_SETS - 1:
        out.append(f"{len(workers)} worker groups; a queued RayCluster has at most 7")
    if any(w["groupName"] == "head" for w in workers):
        out.append("a worker group is named 'head', which Kueue reserves")
    if spec.get("enableInTreeAutoscaling"):
        gate = {"name": "kueue.x-k8s.io/elastic-job"}
        if obj["metadata"].get("annotations", {}).get("kueue.x-k8s.io/elastic-job") != "true":
            out.append("autoscaling without the kueue.x-k8s.io/elastic-job annotation")
        for t in [spec["headGroupSpec"]["template"], *(w["template"] for w in workers)]:
            if gate not in t["spec"].get("schedulingGates", []):
                out.append("autoscaling without the elastic-job scheduling gate on a pod template")
                break
    return out


_BY_KIND = {
    "ClusterQueue": cluster_queue_violations,
    "Cohort": lambda o: _resource_groups(o.get("spec", {}).get("resourceGroups", []), "spec"),
    "ResourceFlavor": resource_flavor_violations,
    "RayCluster": ray_cluster_violations,
}


def violations(obj: K8sObject) -> list[str]:
    """Everything the rules above find wrong with ``obj``."""
    out = metadata_violations(obj)
    check = _BY_KIND.get(obj["kind"])
    if check is not None:
        out += check(obj)
    return out
