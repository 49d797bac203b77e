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

KubeRay's own validation of a RayCluster (ray-project/kuberay, tag v1.6.0, the pinned
release): :func:`kuberay_violations`, each rule citing its file and function; a RayCluster
that breaks one gets the event ``InvalidRayClusterSpec`` and no pods (the controller) or is
refused (the optional webhook). The command KubeRay builds from ``rayStartParams`` is
simulated in the unit tests and parsed with the pinned Ray's own ``ray start``.

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

from ..resolve.addons import KUEUE_NAMESPACE
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
# KubeRay v1.6.0 ray-operator/controllers/ray/utils/constant.go: MaxRayClusterNameLength.
KUBERAY_MAX_NAME = 53
# apimachinery IsDNS1035Label: a lowercase letter first, at most 63 characters.
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# rayStartParams that make Ray resources; KubeRay v1.6.0 validation.go validateRayGroupResources.
RAY_START_RESOURCE_PARAMS = ("num-cpus", "num-gpus", "memory", "resources")
# What this project lets into a rayStartParams key and value: KubeRay pastes both unquoted
# into the container's `bash -c` line (pod.go convertParamMap: " --KEY=VALUE "), so a word
# must be one bash leaves alone: no blank, quote, $, `, \, glob, brace, ~, #, ; & | < > ( ).
RAY_START_KEY = re.compile(r"^[a-z0-9][a-z0-9-]*$")
RAY_START_VALUE = re.compile(r"^[A-Za-z0-9_.:/=,@%+-]*$")


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


# Kubernetes' resource.Quantity, restated from kubernetes/apimachinery tag v0.35.0,
# pkg/api/resource/quantity.go (the grammar in the doc comment of ``Quantity``, unchanged from
# v0.30.0 to v0.36.0; ``ParseQuantity`` for rounding and the cap) and suffix.go
# (``suffixHandler.interpret``: the suffix tables first, then ``e``/``E`` and an integer):
#
#   <quantity>        ::= <signedNumber><suffix>
#   <number>          ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
#   <signedNumber>    ::= <number> | <sign><number>      <sign> ::= "+" | "-"
#   <suffix>          ::= <binarySI> | <decimalExponent> | <decimalSI>
#   <binarySI>        ::= Ki | Mi | Gi | Ti | Pi | Ei
#   <decimalSI>       ::= n | u | m | "" | k | M | G | T | P | E
#   <decimalExponent> ::= "e" <signedNumber> | "E" <signedNumber>   (an integer: interpret
#                                                                    uses strconv.ParseInt)
_DECIMAL_SI = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SI = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?"
    r"(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|[eE](?P<exp>[+-]?[0-9]+)|(?P<dec>[numkMGTPE]?))"
)
_NANO = Fraction(1, 10**9)
_MAX_BINARY = Fraction(2**63 - 1)  # quantity.go maxAllowed
# A decimal exponent this restatement computes: Fraction would build 10**e digit by digit.
_MAX_EXPONENT = 1000


def quantity(value: int | float | str) -> Fraction:
    """A Kubernetes quantity as an exact number: ``8`` (a JSON number, parsed from its text as
    ``Quantity.UnmarshalJSON`` does), ``"500m"``, ``"16Gi"``, ``".5"``, ``"-1.5e3"``, ``"2E"``.

    As ``ParseQuantity`` (apimachinery v0.35.0, see the grammar above): a non-zero value is
    rounded away from zero to a whole number of nano (``"0.9n"`` is 1n), a binarySI value is
    capped at 2^63-1 in magnitude (``"9Ei"``). Raises ValueError for a string outside the
    grammar (``"1K"``, ``"0.1mi"``, ``" 1"``) and for a bool; also for ``"+"``, ``"-"`` and
    ``"."``, which the grammar excludes though Go's scanner reads them as 0, and for a decimal
    exponent beyond +-1000, which this restatement does not compute.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{value!r} is not a quantity")
    text = value if isinstance(value, str) else str(value)
    m = _QUANTITY.fullmatch(text)
    if not m or not (m["int"] or m["frac"]):
        raise ValueError(f"{value!r} is not a quantity")
    frac = m["frac"] or ""
    number = Fraction(int(m["int"] + frac or "0"), 10 ** len(frac))
    if m["bin"]:
        number *= 2 ** _BINARY_SI[m["bin"]]
    else:
        exponent = int(m["exp"]) if m["exp"] is not None else _DECIMAL_SI[m["dec"]]
        if abs(exponent) > _MAX_EXPONENT:
            raise ValueError(f"{value!r}: exponent {exponent} is not computed here")
        number *= Fraction(10) ** exponent
    if number:
        number = -(-number // _NANO) * _NANO  # ceiling to nano (inf.RoundUp on the magnitude)
    if m["bin"]:
        number = min(number, _MAX_BINARY)
    return -number if m["sign"] == "-" else number


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


def _env(container: dict[str, Any], name: str) -> str | None:
    """The value of the container's environment variable ``name`` ("" when set from a
    source), None when absent (KubeRay utils EnvVarByName)."""
    for e in container.get("env") or []:
        if e.get("name") == name:
            return str(e.get("value", ""))
    return None


def _label_problems(where: str, labels: dict[str, Any]) -> list[str]:
    out = []
    for key, value in labels.items():
        problem = _label_key(key)
        if problem:
            out.append(f"{where}: {problem}")
        if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE.match(value):
            out.append(f"{where}: label {key!r}: value {value!r} is not a valid label value")
    return out


def _group_violations(where: str, group: dict[str, Any]) -> list[str]:
    """KubeRay v1.6.0 ray-operator/controllers/ray/utils/validation.go on one group:
    validateRayGroupResources, validateRayGroupLabels; and the project's shell-word rule."""
    out = []
    params = group.get("rayStartParams") or {}
    # validateRayGroupResources: resources in rayStartParams or in the group's field, not both.
    if any(params.get(k) for k in RAY_START_RESOURCE_PARAMS) and group.get("resources"):
        out.append(f"{where}: resources in both rayStartParams and the group's resources field")
    # validateRayGroupLabels: rayStartParams['labels'] is refused; labels are Kubernetes labels.
    if "labels" in params:
        out.append(f"{where}: rayStartParams['labels'] is not supported; use the group's labels field")
    out += _label_problems(f"{where}.labels", group.get("labels") or {})
    # Not KubeRay's validation but its command line (common/pod.go convertParamMap, v1.6.0):
    # every key and value is pasted unquoted into `bash -c`.
    for key, value in params.items():
        if not RAY_START_KEY.match(key) or not isinstance(value, str) or not RAY_START_VALUE.match(value):
            out.append(f"{where}: rayStartParams {key}={value!r} is not a plain shell word")
    return out


def kuberay_violations(obj: K8sObject) -> list[str]:
    """What KubeRay v1.6.0 refuses in a RayCluster (ray-project/kuberay tag v1.6.0):

    - ``ray-operator/controllers/ray/utils/validation.go`` ValidateRayClusterMetadata: name
      at most 53 characters (constant.go MaxRayClusterNameLength) and a DNS-1035 label;
    - validation.go ValidateRayClusterSpec: the head and every worker group have a
      container; without in-tree autoscaling a worker group sets minReplicas and
      maxReplicas; neither is negative; minReplicas <= maxReplicas; per group
      validateRayGroupResources (Ray resources in rayStartParams or in the group's
      ``resources`` field, not both) and validateRayGroupLabels (no
      ``rayStartParams['labels']``; the group's ``labels`` are Kubernetes label keys and
      values); validateWorkerGroupIdleTimeout (not negative, autoscaler v2 only); no
      suspended worker group with autoscaling; ``RAY_enable_autoscaler_v2`` not set true
      without autoscaling, and not beside ``autoscalerOptions.version``; with autoscaler v2
      the head's and workers' restartPolicy is Never or unset;
      ``autoscalerOptions.idleTimeoutSeconds`` not negative; no ``redis-username`` in the
      head's rayStartParams nor ``REDIS_USERNAME`` in its container;
      ``RAY_REDIS_ADDRESS`` only with GCS fault tolerance; token auth (``authOptions.mode:
      token``) needs rayVersion >= 2.52.0;
    - ``ray-operator/pkg/webhooks/v1/raycluster_webhook.go`` validateWorkerGroups: worker
      group names unique;
    - ``common/pod.go`` labelPod: a worker group's name is the value of its pods' label
      ``ray.io/group``, so it must be a label value (else the pods are refused);
    - ``common/pod.go`` convertParamMap pastes every rayStartParams key and value unquoted
      into ``bash -c``: this project requires each to be a plain shell word.

    Not restated (this project renders none of it): GCS fault-tolerance options and their
    Redis settings, upgradeStrategy, RayJob/RayService rules.
    """
    meta, spec = obj["metadata"], obj["spec"]
    out = []
    name = meta.get("name", "")
    if len(name) > KUBERAY_MAX_NAME or not DNS1035_LABEL.match(name):
        out.append(
            f"RayCluster name {name!r} is not a DNS-1035 label of at most {KUBERAY_MAX_NAME} characters"
        )
    head = spec.get("headGroupSpec") or {}
    head_pod = (head.get("template") or {}).get("spec") or {}
    if not head_pod.get("containers"):
        return [*out, "headGroupSpec should have at least one container"]
    head_container = head_pod["containers"][0]  # utils.RayContainerIndex
    out += _group_violations("headGroupSpec", head)
    autoscaling = spec.get("enableInTreeAutoscaling") is True
    options = spec.get("autoscalerOptions") or {}
    v2 = options.get("version") == "v2"
    v2_env = _env(head_container, "RAY_enable_autoscaler_v2")
    seen: set[str] = set()
    for i, w in enumerate(spec.get("workerGroupSpecs") or []):
        group = w.get("groupName", "")
        where = f"workerGroupSpecs[{i}] ({group})"
        if not ((w.get("template") or {}).get("spec") or {}).get("containers"):
            out.append(f"{where}: workerGroupSpec should have at least one container")
            continue
        low, high = w.get("minReplicas"), w.get("maxReplicas")
        if not autoscaling and (low is None or high is None):
            out.append(f"{where}: minReplicas and maxReplicas are required when autoscaling is disabled")
        if (low is not None and low < 0) or (high is not None and high < 0):
            out.append(f"{where}: negative minReplicas or maxReplicas")
        if low is not None and high is not None and low > high:
            out.append(f"{where}: minReplicas {low} is greater than maxReplicas {high}")
        out += _group_violations(where, w)
        idle = w.get("idleTimeoutSeconds")
        if idle is not None and (idle < 0 or not (v2 or v2_env in ("1", "true"))):
            out.append(f"{where}: idleTimeoutSeconds needs autoscaler v2 and must not be negative")
        if w.get("suspend") is True and autoscaling:
            out.append(f"{where}: a worker group cannot be suspended with autoscaling")
        if group in seen:
            out.append(f"{where}: worker group names must be unique")
        seen.add(group)
        if len(group) > 63 or not LABEL_VALUE.match(group):
            out.append(f"{where}: the group name is not a label value (pods' label ray.io/group)")
    if not autoscaling and v2_env in ("1", "true"):
        out.append("RAY_enable_autoscaler_v2 is set true while enableInTreeAutoscaling is false")
    if autoscaling and "version" in options and v2_env is not None:
        out.append("both autoscalerOptions.version and the head's RAY_enable_autoscaler_v2 are set")
    if autoscaling and v2:
        pods = [
            head_pod,
            *(((w.get("template") or {}).get("spec") or {}) for w in spec.get("workerGroupSpecs") or []),
        ]
        if any(p.get("restartPolicy", "Never") != "Never" for p in pods):
            out.append("with autoscaler v2 every pod's restartPolicy must be Never or unset")
    if (options.get("idleTimeoutSeconds") or 0) < 0:
        out.append("autoscalerOptions.idleTimeoutSeconds must be non-negative")
    if (head.get("rayStartParams") or {}).get("redis-username") or _env(head_container, "REDIS_USERNAME"):
        out.append("a redis username in the head's rayStartParams or environment")
    fault_tolerant = (
        "gcsFaultToleranceOptions" in spec
        or str((meta.get("annotations") or {}).get("ray.io/ft-enabled", "")).lower() == "true"
    )
    if not fault_tolerant and _env(head_container, "RAY_REDIS_ADDRESS") is not None:
        out.append("RAY_REDIS_ADDRESS is set without gcsFaultToleranceOptions")
    if (spec.get("authOptions") or {}).get("mode") == "token" and not _version_at_least(
        spec.get("rayVersion", ""), (2, 52, 0)
    ):
        out.append("authOptions.mode token needs rayVersion 2.52.0 or later")
    return out


def _version_at_least(version: str, least: tuple[int, ...]) -> bool:
    """``version`` (``X.Y.Z``) is at least ``least``; False when it is not such a version."""
    parts = version.split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        return False
    return tuple(int(p) for p in parts) >= least


def _ray_cluster(obj: K8sObject) -> list[str]:
    """KubeRay's own rules, then Kueue's for a queued RayCluster."""
    return kuberay_violations(obj) + ray_cluster_violations(obj)


_BY_KIND = {
    "ClusterQueue": cluster_queue_violations,
    "Cohort": cohort_violations,
    "ResourceFlavor": resource_flavor_violations,
    "RayCluster": _ray_cluster,
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


def kueue_configuration_violations(config: dict[str, Any], namespace: str = KUEUE_NAMESPACE) -> list[str]:
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
