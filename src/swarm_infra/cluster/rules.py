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

Restated webhook rules (kubernetes-sigs/kueue v0.17.5, pkg/webhooks/): what Kueue's
validating webhooks refuse beyond the CEL rules, for the kinds this project makes:

- ClusterQueue (clusterqueue_webhook.go ``validateClusterQueueSpec``) and Cohort
  (cohort_webhook.go ``validateCohort``), ``validateResourceGroups``: each covered resource
  name a label key, not covered twice in the object; each flavor once in the object; a
  flavor's i-th resource named as the i-th covered resource ("must match the name in
  coveredResources"); nominalQuota, borrowingLimit and lendingLimit not negative; a
  borrowingLimit or lendingLimit only with a cohort (Cohort: a parent), "must be nil when
  cohort is empty" (``validateLimit``); ClusterQueue only: lendingLimit at most nominalQuota
  (``validateLendingLimit``);
- ClusterQueue: at most 256 flavors and 256 covered resources over all resource groups,
  at most 512 flavor-resource pairs per group (``validateTotalFlavors``,
  ``validateTotalCoveredResources``, ``validateFlavorResourceCombinations``); the preemption
  rule above (``validatePreemption``); ``namespaceSelector`` a valid label selector;
- ClusterQueue and Cohort ``fairSharing.weight`` (common.go ``validateFairSharing``): not
  negative, and not in (0, 1e-9];
- ResourceFlavor (resourceflavor_webhook.go ``ValidateResourceFlavor``): nodeLabels valid
  labels; nodeTaints keys label names, values label values, unique by (key, effect);
- LocalQueue: v0.17.5 has no LocalQueue webhook (its CRD's CEL keeps clusterQueue
  immutable, which a first creation cannot break).
"""

from __future__ import annotations

import re
from fractions import Fraction
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


# Kubernetes quantity suffixes (apimachinery resource.Quantity), enough for Kueue's quotas.
_SUFFIX: dict[str, Fraction] = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
}
_QUANTITY = re.compile(r"^([+-]?[0-9]+(?:\.[0-9]*)?)(n|u|m|k|M|G|T|P|Ki|Mi|Gi|Ti|Pi)?$")


def quantity(value: int | float | str) -> Fraction:
    """A Kubernetes quantity (``8``, ``"500m"``, ``"16Gi"``, ``"0.5"``) as an exact number.
    Raises ValueError for anything else."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Fraction(value)
    m = _QUANTITY.match(str(value))
    if not m:
        raise ValueError(f"{value!r} is not a quantity")
    return Fraction(m[1]) * _SUFFIX[m[2] or ""]


def _webhook_resource_groups(
    groups: list[dict[str, Any]], *, has_parent: bool, cluster_queue: bool
) -> list[str]:
    """Kueue v0.17.5 pkg/webhooks/clusterqueue_webhook.go ``validateResourceGroups`` (used
    by ClusterQueue and Cohort)."""
    out: list[str] = []
    seen_resources: set[str] = set()
    seen_flavors: set[str] = set()
    parent = "cohort" if cluster_queue else "parent"
    for gi, g in enumerate(groups):
        at = f"spec.resourceGroups[{gi}]"
        covered = list(g.get("coveredResources", []))
        for name in covered:
            if _label_key(name):
                out.append(f"{at}.coveredResources: {name!r} is not a label key (Kueue webhook)")
            if name in seen_resources:
                out.append(f"{at}.coveredResources: {name!r} is covered twice (Kueue webhook)")
            seen_resources.add(name)
        for fi, f in enumerate(g.get("flavors", [])):
            fat = f"{at}.flavors[{fi}]"
            if f["name"] in seen_flavors:
                out.append(f"{fat}.name: flavor {f['name']!r} appears twice (Kueue webhook)")
            seen_flavors.add(f["name"])
            for ri, r in enumerate(f.get("resources", [])[: len(covered)]):
                rat = f"{fat}.resources[{ri}]"
                if r["name"] != covered[ri]:
                    out.append(f"{rat}.name: must match the name in coveredResources (Kueue webhook)")
                for key in ("nominalQuota", "borrowingLimit", "lendingLimit"):
                    if key in r and quantity(r[key]) < 0:
                        out.append(f"{rat}.{key}: must be greater than or equal to 0 (Kueue webhook)")
                for key in ("borrowingLimit", "lendingLimit"):
                    if key in r and not has_parent:
                        out.append(f"{rat}.{key}: must be nil when {parent} is empty (Kueue webhook)")
                if (
                    cluster_queue
                    and "lendingLimit" in r
                    and quantity(r["lendingLimit"]) > quantity(r.get("nominalQuota", 0))
                ):
                    out.append(
                        f"{rat}.lendingLimit: must be less than or equal to the nominalQuota (Kueue webhook)"
                    )
    return out


def _fair_sharing_weight(spec: dict[str, Any]) -> list[str]:
    """Kueue v0.17.5 pkg/webhooks/common.go ``validateFairSharing``."""
    w = (spec.get("fairSharing") or {}).get("weight")
    if w is None:
        return []
    q = quantity(w)
    if q < 0:
        return ["spec.fairSharing: weight must be greater than or equal to 0 (Kueue webhook)"]
    if 0 < q <= Fraction(1, 10**9):
        return ["spec.fairSharing: When not 0, weight must be > 10e-9 (Kueue webhook)"]
    return []


_SELECTOR_OPERATORS = {"In": True, "NotIn": True, "Exists": False, "DoesNotExist": False}


def _label_selector(selector: dict[str, Any] | None, where: str) -> list[str]:
    """apimachinery ValidateLabelSelector: label keys, operators, values only with In/NotIn
    (and at least one there)."""
    out: list[str] = []
    for key, value in ((selector or {}).get("matchLabels") or {}).items():
        if _label_key(key) or not LABEL_VALUE.match(str(value)) or len(str(value)) > 63:
            out.append(f"{where}.matchLabels: {key!r}: {value!r} is not a valid label")
    for e in (selector or {}).get("matchExpressions") or []:
        op = e.get("operator")
        if op not in _SELECTOR_OPERATORS:
            out.append(f"{where}.matchExpressions: operator {op!r} is not valid")
        elif _SELECTOR_OPERATORS[op] != bool(e.get("values")):
            need = "required" if _SELECTOR_OPERATORS[op] else "must be empty"
            out.append(f"{where}.matchExpressions: values {need} with {op}")
        if _label_key(e.get("key", "")):
            out.append(f"{where}.matchExpressions: key {e.get('key')!r} is not a label key")
    return out


def cluster_queue_webhook_violations(obj: K8sObject) -> list[str]:
    """Kueue v0.17.5 pkg/webhooks/clusterqueue_webhook.go ``validateClusterQueueSpec``."""
    spec = obj.get("spec", {})
    groups = spec.get("resourceGroups", [])
    out = _webhook_resource_groups(groups, has_parent=bool(spec.get("cohortName")), cluster_queue=True)
    out += _label_selector(spec.get("namespaceSelector"), "spec.namespaceSelector")
    out += _fair_sharing_weight(spec)
    flavors = sum(len(g.get("flavors", [])) for g in groups)
    covered = sum(len(g.get("coveredResources", [])) for g in groups)
    if flavors > 256:
        out.append(f"total number of flavors across all resourceGroups must be ≤ 256, got {flavors}")
    if covered > 256:
        out.append(
            f"total number of covered resources across all resourceGroups must be ≤ 256, got {covered}"
        )
    for gi, g in enumerate(groups):
        pairs = sum(len(f.get("resources", [])) for f in g.get("flavors", []))
        if pairs > 512:
            out.append(f"spec.resourceGroups[{gi}]: flavor-resource combinations must be ≤ 512, got {pairs}")
    return out


def cohort_violations(obj: K8sObject) -> list[str]:
    """The Cohort CRD's CEL rule and Kueue v0.17.5 pkg/webhooks/cohort_webhook.go ``validateCohort``."""
    spec = obj.get("spec", {})
    groups = spec.get("resourceGroups", [])
    return [
        *_resource_groups(groups, "spec"),
        *_fair_sharing_weight(spec),
        *_webhook_resource_groups(groups, has_parent=bool(spec.get("parentName")), cluster_queue=False),
    ]


def cluster_queue_violations(obj: K8sObject) -> list[str]:
    spec = obj.get("spec", {})
    out = _resource_groups(spec.get("resourceGroups", []), "spec")
    out += cluster_queue_webhook_violations(obj)
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
    # Kueue v0.17.5 pkg/webhooks/resourceflavor_webhook.go ValidateResourceFlavor.
    for key, value in (spec.get("nodeLabels") or {}).items():
        problem = _label_key(key)
        if problem:
            out.append(f"spec.nodeLabels: {problem} (Kueue webhook)")
        if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE.match(value):
            out.append(
                f"spec.nodeLabels: {key!r}: value {value!r} is not a valid label value (Kueue webhook)"
            )
    seen: set[tuple[str, str]] = set()
    for t in spec.get("nodeTaints", []):
        problem = _label_key(t.get("key", ""))
        if problem:
            out.append(f"spec.nodeTaints: {problem} (Kueue webhook)")
        value = t.get("value", "")
        if len(value) > 63 or not LABEL_VALUE.match(value):
            out.append(f"spec.nodeTaints: value {value!r} is not a valid label value (Kueue webhook)")
        pair = (t.get("key", ""), t.get("effect", ""))
        if pair in seen:
            out.append("spec.nodeTaints: taints must be unique by key and effect pair (Kueue webhook)")
        seen.add(pair)
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
    "Cohort": cohort_violations,
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


# Kueue v0.17.5 pkg/config/validation.go validStrategySets: the accepted preemption strategy lists.
FAIR_SHARING_STRATEGY_SETS = (
    ["LessThanOrEqualToFinalShare"],
    ["LessThanInitialShare"],
    ["LessThanOrEqualToFinalShare", "LessThanInitialShare"],
)


def selector_matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a LabelSelector (matchLabels, matchExpressions) selects ``labels``."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def kueue_configuration_violations(config: dict[str, Any], namespace: str = "kueue-system") -> list[str]:
    """What Kueue v0.17.5 refuses at start in its Configuration (pkg/config/validation.go),
    for the fields this project sets: ``fairSharing.preemptionStrategies`` one of
    :data:`FAIR_SHARING_STRATEGY_SETS` (``validateFairSharing``); with the ``pod`` integration,
    a ``managedJobsNamespaceSelector`` that is given (``validatePodIntegrationOptions``), and
    that matches neither kube-system nor Kueue's own namespace
    (``validateManagedJobsNamespaceSelector``: namespaces carry
    ``kubernetes.io/metadata.name``)."""
    out: list[str] = []
    fs = config.get("fairSharing")
    if fs is not None and list(fs.get("preemptionStrategies") or []) not in [
        list(x) for x in FAIR_SHARING_STRATEGY_SETS
    ]:
        out.append(f"fairSharing.preemptionStrategies: {fs.get('preemptionStrategies')!r} is not supported")
    selector = config.get("managedJobsNamespaceSelector")
    if selector is None:
        if "pod" in (config.get("integrations") or {}).get("frameworks", []):
            out.append("managedJobsNamespaceSelector: cannot be empty when pod integration is enabled")
        return out
    out += _label_selector(selector, "managedJobsNamespaceSelector")
    for ns in ("kube-system", namespace):
        if selector_matches(selector, {"kubernetes.io/metadata.name": ns}):
            out.append(f"managedJobsNamespaceSelector: should not match the {ns!r} namespace")
    return out
