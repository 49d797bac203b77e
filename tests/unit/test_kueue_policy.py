"""Kueue enforces what the policy says (issue #24, items 6-9, 11, 12): flavor preference,
where Ray heads land, fair sharing or classical preemption, no way around a quota, tenant
namespaces and label keys, no cluster-wide default priority, the README's intent table.

Kueue cannot run here. Its flavor assignment is restated from kubernetes-sigs/kueue v0.17.5
pkg/scheduler/flavorassigner/flavorassigner.go (``findFlavorForPodSets``: the resource
group's flavors in order; ``checkFlavorForPodSets``: a flavor whose NoSchedule/NoExecute
``nodeTaints`` the pod does not tolerate, or whose ``nodeLabels`` do not satisfy the pod's
node selector restricted to the label keys of the group's flavors (``flavorSelector``), is
skipped); quota is left out: the first flavor that may hold the pod at all is the one it
gets when quota allows, which is what preference means.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from markdown_it import MarkdownIt

from swarm_infra import validate
from swarm_infra.cluster import rules
from swarm_infra.cluster.kueue import manager_config
from swarm_infra.resolve.checks.cluster import reserved_label
from swarm_infra.resolve.labels import SITE_LABEL

from .cluster_support import ROOT, by_kind, objects, state
from .test_cluster_objects import declared, tolerates

DATA = Path(__file__).resolve().parents[1] / "data"
FLEETS = ("example", "lab")


# ------------------------------------------------------------ Kueue's flavor assignment


def flavor_for(cq: dict[str, Any], flavors: dict[str, Any], pod: dict[str, Any], resource: str) -> str | None:
    """The first flavor of the resource group covering ``resource`` that may hold ``pod``
    (restated from Kueue v0.17.5, see the module doc), or None."""
    (group,) = [g for g in cq["spec"]["resourceGroups"] if resource in g["coveredResources"]]
    names = [f["name"] for f in group["flavors"]]
    keys = {k for n in names for k in flavors[n]["spec"].get("nodeLabels", {})}
    selector = {k: v for k, v in (pod.get("nodeSelector") or {}).items() if k in keys}
    for name in names:
        spec = flavors[name]["spec"]
        tolerations = [*(pod.get("tolerations") or []), *spec.get("tolerations", [])]
        if any(
            t["effect"] in ("NoSchedule", "NoExecute") and not tolerates(tolerations, t)
            for t in spec.get("nodeTaints", [])
        ):
            continue
        if all(spec.get("nodeLabels", {}).get(k) == v for k, v in selector.items()):
            return str(name)
    return None


def nodes_for(objs: list[dict[str, Any]], flavor: dict[str, Any], pod: dict[str, Any]) -> set[str]:
    """The Nodes a pod admitted to ``flavor`` can run on: Kueue adds the flavor's nodeLabels
    to its node selector and the flavor's tolerations to its tolerations; the scheduler then
    needs every selector label and every NoSchedule taint tolerated."""
    selector = {**(pod.get("nodeSelector") or {}), **flavor["spec"].get("nodeLabels", {})}
    tolerations = [*(pod.get("tolerations") or []), *flavor["spec"].get("tolerations", [])]
    return {
        name
        for name, node in by_kind(objs, "Node").items()
        if node["metadata"]["labels"].items() >= selector.items()
        and all(tolerates(tolerations, t) for t in node.get("spec", {}).get("taints", []))
    }


@pytest.mark.parametrize("fleet", FLEETS)
def test_cluster_queue_flavors_keep_the_policys_order(fleet: str) -> None:
    """Item 6: Kueue takes the order of a resource group's flavors as preference; the GPU
    flavors are the Allocation's quotas in the order written (before: sorted by name, so
    community tried H100 before its own RTX 4090)."""
    (alloc,) = declared(fleet, "Allocation")
    cqs = by_kind(objects(fleet).all(), "ClusterQueue")
    for q in alloc["spec"]["queues"]:
        (group,) = cqs[q["name"]]["spec"]["resourceGroups"]
        gpu = [f["name"] for f in group["flavors"] if not f["name"].startswith("cpu-")]
        assert gpu == [x["flavor"] for x in q["quotas"]], q["name"]
        # CPU flavors only after every GPU flavor: a GPU pod never reaches them first.
        names = [f["name"] for f in group["flavors"]]
        assert names[: len(gpu)] == gpu


@pytest.mark.parametrize("fleet", FLEETS)
def test_ray_pods_get_a_flavor_in_their_workers_site(fleet: str) -> None:
    """Item 6: a head (CPU only) takes a flavor whose nodes are in a site of its cluster's
    workers, never the queue's first GPU flavor elsewhere; each worker takes its own flavor.
    The sites expected come from the inventory: where the declared worker flavors' nodes are."""
    objs = objects(fleet).all()
    cqs, flavors = by_kind(objs, "ClusterQueue"), by_kind(objs, "ResourceFlavor")
    nodes = by_kind(objs, "Node")
    lqs = by_kind(objs, "LocalQueue")
    (alloc,) = declared(fleet, "Allocation")
    tenants = {t["name"]: t for t in alloc["spec"]["tenants"]}
    checked = 0
    for key, rc in by_kind(objs, "RayCluster").items():
        ns, name = key.split("/")
        cq = cqs[lqs[f"{ns}/{rc['metadata']['labels']['kueue.x-k8s.io/queue-name']}"]["spec"]["clusterQueue"]]
        worker_flavors = [w["flavor"] for w in tenants[name]["ray"]["workers"]]
        sites = {
            n["metadata"]["labels"][SITE_LABEL]
            for n in nodes.values()
            if n["metadata"]["labels"].get("swarm.io/gpu-flavor") in worker_flavors
        }
        head = rc["spec"]["headGroupSpec"]["template"]["spec"]
        got = flavor_for(cq, flavors, head, "cpu")
        assert got is not None, key
        assert got in worker_flavors or got.startswith("cpu-"), (key, got)
        placed = nodes_for(objs, flavors[got], head)
        assert placed, (key, got)
        assert {nodes[n]["metadata"]["labels"][SITE_LABEL] for n in placed} <= sites, (key, got)
        for w in rc["spec"]["workerGroupSpecs"]:
            assert flavor_for(cq, flavors, w["template"]["spec"], "nvidia.com/gpu") == w["groupName"]
        checked += 1
    assert checked == len(by_kind(objs, "RayCluster")) > 0


def test_a_head_uses_its_sites_cpu_nodes_when_they_can_hold_it() -> None:
    """acme-ai's head (8 CPUs, 64 GiB) fits fra1's node without GPUs: it takes fra1's CPU
    flavor and only that node; community's head (16 GiB) fits no node without GPUs in tyo1
    (4 CPUs, 8 GiB there), so it runs beside its RTX 4090 workers."""
    objs = objects("example").all()
    cqs, flavors = by_kind(objs, "ClusterQueue"), by_kind(objs, "ResourceFlavor")
    rcs = by_kind(objs, "RayCluster")
    acme = rcs["acme-ai/acme-ai"]["spec"]["headGroupSpec"]["template"]["spec"]
    assert flavor_for(cqs["acme-ai"], flavors, acme, "cpu") == "cpu-fra1"
    assert nodes_for(objs, flavors["cpu-fra1"], acme) == {"fra1-head-01"}
    community = rcs["community/community"]["spec"]["headGroupSpec"]["template"]["spec"]
    assert flavor_for(cqs["community"], flavors, community, "cpu") == "rtx-4090"


# (fleet, queue, CPU flavor) -> (CPUs, GiB): the only CPU flavor quotas, written from the
# tenants' declared heads (policies/<fleet>/scheduling.yaml) and the nodes without GPUs:
# - example acme-ai: head {cpus: 8, memory_gib: 64}, workers on H100s in fra1, where
#   fra1-head-01 (32 CPUs, 128 GiB, no GPU) can hold it: cpu-fra1 gets 8 CPUs, 64 GiB;
# - example community: head {cpus: 4, memory_gib: 16}, workers in tyo1, whose only node
#   without GPUs (tyo1-relay-01: 4 CPUs, 8 GiB) cannot hold it: no CPU flavor (it runs
#   beside its workers); helix-labs declares no Ray cluster;
# - lab team-a: head {cpus: 1, memory_gib: 2}, workers on lab-gpu-1 (H100, site lab-a),
#   where lab-head-1 (2 CPUs, 4 GiB) can hold it: cpu-lab-a gets 1 CPU, 2 GiB; team-b has
#   no Ray cluster.
HEAD_QUOTAS = {
    ("example", "acme-ai", "cpu-fra1"): (8, 64),
    ("lab", "team-a", "cpu-lab-a"): (1, 2),
}


def test_a_cpu_flavor_quota_is_exactly_its_heads() -> None:
    """The CPU flavor quota of a queue is its tenants' heads there, none of it lent (a head
    never waits for a borrower to finish); nvidia.com/gpu 0. Compared as quantities (any
    spelling Kubernetes reads as the same amount passes)."""
    found = {}
    for fleet in FLEETS:
        for name, cq in by_kind(objects(fleet).all(), "ClusterQueue").items():
            for f in cq["spec"]["resourceGroups"][0]["flavors"]:
                if f["name"].startswith("cpu-"):
                    found[(fleet, name, f["name"])] = {r["name"]: r for r in f["resources"]}
    assert set(found) == set(HEAD_QUOTAS)
    for key, (cpus, gib) in HEAD_QUOTAS.items():
        r = found[key]
        nominal = {n: rules.quantity(x["nominalQuota"]) for n, x in r.items()}
        assert nominal == {"nvidia.com/gpu": 0, "cpu": cpus, "memory": gib * 2**30}, key
        assert {n: rules.quantity(x["lendingLimit"]) for n, x in r.items()} == dict.fromkeys(r, 0), key


# --------------------------------------------------------- fair sharing, quota bypass


@pytest.mark.parametrize("fleet", FLEETS)
def test_kueue_configuration_follows_the_policy(fleet: str) -> None:
    """Items 7, 8, 12: fair sharing on exactly when the Allocation says so (then the queues
    carry their weights); jobs without a queue name in tenant namespaces are managed (held),
    elsewhere not; node-local resources are excluded; Kueue's own config validation passes."""
    (alloc,) = declared(fleet, "Allocation")
    on = alloc["spec"].get("fair_sharing", False)
    config = manager_config(state(fleet)["cluster"])
    assert rules.kueue_configuration_violations(config) == []
    assert ("fairSharing" in config) is on
    for cq in by_kind(objects(fleet).all(), "ClusterQueue").values():
        assert ("fairSharing" in cq["spec"]) is on
    assert config["manageJobsWithoutQueueName"] is True
    namespaces = by_kind(objects(fleet).all(), "Namespace")
    tenants = {t.get("namespace", t["name"]) for t in alloc["spec"]["tenants"]}
    selected = {
        n
        for n, o in namespaces.items()
        if rules.selector_matches(
            config["managedJobsNamespaceSelector"],
            {**o["metadata"]["labels"], "kubernetes.io/metadata.name": n},
        )
    }
    assert selected == tenants
    assert {"pod", "ray.io/raycluster", "batch/job"} <= set(config["integrations"]["frameworks"])
    assert config["resources"]["excludeResourcePrefixes"] == ["ephemeral-storage", "hugepages-", "rdma/"]


def test_kueue_configuration_rules_refuse_what_kueue_refuses() -> None:
    config = manager_config(state("example")["cluster"])
    bad = copy.deepcopy(config)
    bad["managedJobsNamespaceSelector"] = {"matchExpressions": [{"key": "x", "operator": "DoesNotExist"}]}
    assert any("kube-system" in v for v in rules.kueue_configuration_violations(bad))
    bad = copy.deepcopy(config)
    bad["fairSharing"] = {"preemptionStrategies": ["LessThanInitialShare", "LessThanOrEqualToFinalShare"]}
    assert rules.kueue_configuration_violations(bad)
    bad = copy.deepcopy(config)
    del bad["managedJobsNamespaceSelector"]
    assert rules.kueue_configuration_violations(bad)


def _capacity(fleet: str) -> dict[str, tuple[int, int]]:
    """Flavor → (GPUs on gpu-worker nodes, nvidia.com/gpu per GPU), from the node states."""
    out: dict[str, tuple[int, int]] = {}
    for n in state(fleet)["nodes"].values():
        flavor = n["labels"].get("swarm.io/gpu-flavor")
        if flavor and "gpu-worker" in n["roles"] and n["gpu"]:
            gpus, _ = out.get(flavor, (0, 0))
            count = sum(g["count"] for g in n["hardware"]["gpus"])
            out[flavor] = (gpus + count, n["gpu"]["sharing"]["units_per_gpu"])
    return out


# Tenant -> requests.nvidia.com/gpu of its namespace's ResourceQuota, in device units,
# written from policies/<fleet>/scheduling.yaml and the inventory. The rule: the tenant's
# caps.gpus, at most what its queue could ever be admitted: per flavor, the nominal quota
# plus (in a cohort) the borrowing limit, or every GPU of the flavor when borrowing is
# unlimited, times the flavor's device units per GPU.
# Example fleet, GPU-worker capacity (inventory/example/nodes): 80 H100 (fra1, 10 x 8),
# 48 A100 80GB (ams2-gpu-01..06, 8 each), 8 A100 40GB PCIe (ams2-gpu-07..08, 4 each),
# 40 L40S (sjc1, 10 x 4), 16 RTX 4090 (tyo1). Units per GPU (policies/shared/gpu-profiles.yaml):
# L40S 4 (time_slicing_replicas: 4), A100 40GB 2 (MIG: two 3g.20gb), the others 1.
GPU_QUOTAS = {
    "example": {
        # H100: nominal 48 + borrowable 16 = 64; A100 80GB: no borrowing limit, all 48
        # -> 64 + 48 = 112 (no caps.gpus).
        "acme-ai": 112,
        # H100 24 + 24 = 48; A100 80GB unlimited: 48; L40S unlimited: 40 GPUs x 4 = 160
        # -> 48 + 48 + 160 = 256 (no caps.gpus).
        "helix-labs": 256,
        # RTX 4090 all 16; L40S 40 x 4 = 160; A100 40GB 8 x 2 = 16; H100 0 + 8 = 8
        # -> 200; caps.gpus 32 (x 1, the smallest split of its flavors) -> 32.
        "community": 32,
    },
    # Lab: 2 H100 (lab-gpu-1), 2 A100 80GB (lab-gpu-2), 1 unit each.
    "lab": {
        # H100 1 + 1 = 2; A100 1 + 1 = 2 -> 4 (no caps.gpus).
        "team-a": 4,
        # H100 and A100 without a borrowing limit: all 2 + 2 = 4; caps.gpus 2 -> 2.
        "team-b": 2,
    },
}


@pytest.mark.parametrize("fleet", FLEETS)
def test_every_tenant_namespace_has_a_gpu_resource_quota(fleet: str) -> None:
    """Item 8: a pod that escapes Kueue still meets a ResourceQuota on nvidia.com/gpu (the
    numbers above). Before, acme-ai had no ResourceQuota at all."""
    quotas = by_kind(objects(fleet).all(), "ResourceQuota")
    got = {
        key.split("/")[0]: rules.quantity(q["spec"]["hard"]["requests.nvidia.com/gpu"])
        for key, q in quotas.items()
        if "requests.nvidia.com/gpu" in q["spec"]["hard"]
    }
    assert got == GPU_QUOTAS[fleet]


# ---------------------------------------------------------------- priorities, labels


@pytest.mark.parametrize("fleet", FLEETS)
def test_no_priority_class_is_a_cluster_wide_default(fleet: str) -> None:
    """Item 11: a globalDefault PriorityClass gives every class-less pod of the cluster its
    value, the Kueue and KubeRay controllers' included."""
    pcs = by_kind(objects(fleet).all(), "PriorityClass")
    assert pcs and all(p["globalDefault"] is False for p in pcs.values())


@pytest.mark.parametrize("fleet", FLEETS)
def test_every_label_key_the_cluster_layer_sets_is_reserved(fleet: str) -> None:
    """Item 9: the keys the project sets are exactly those a Cluster may not declare (so a
    Cluster label can never override one); the Cluster's own labels are the rest."""
    (cluster,) = declared(fleet, "Cluster")
    own = set(cluster["spec"].get("labels", {}))
    inventory = {k for n in declared(fleet, "Node") for k in n["metadata"].get("labels", {})}
    keys = {k for o in objects(fleet).all() for k in o["metadata"]["labels"]} - own - inventory
    assert keys and all(reserved_label(k) for k in keys), sorted(k for k in keys if not reserved_label(k))
    assert not any(reserved_label(k) for k in own)


# --------------------------------------------------------------------- validation


def _allocation(tmp_path: Path, spec: dict[str, Any]) -> list[Path]:
    doc = {"apiVersion": "swarm.io/v1alpha1", "kind": "Allocation", "metadata": {"name": "a"}, "spec": spec}
    (tmp_path / "alloc.yaml").write_text(yaml.safe_dump(doc))
    return [DATA / "base", tmp_path / "alloc.yaml"]


def test_gpus_in_no_queue_are_a_warning_unless_reserved(tmp_path: Path) -> None:
    """Item 12: the base fleet has 2 H100s; a queue with 1 leaves one that Kueue can never
    admit: a warning (not an error: nodes join before their quota is written), silenced by
    declaring it in reserved_gpus."""
    queues = [
        {
            "name": "q",
            "quotas": [
                {"flavor": "h100-sxm5-80gb", "nominal_quota": 1},
                {"flavor": "a100-sxm4-80gb", "nominal_quota": 2},
            ],
        }
    ]
    report = validate(_allocation(tmp_path, {"queues": queues})).report
    assert report.errors == []
    assert [(w.rule, w.path) for w in report.warnings if w.rule.startswith("allocation.")] == [
        ("allocation.capacity-unallocated", "$.spec.queues")
    ]
    report = validate(
        _allocation(tmp_path, {"queues": queues, "reserved_gpus": {"h100-sxm5-80gb": 1}})
    ).report
    assert report.errors == [] and not [w for w in report.warnings if w.rule.startswith("allocation.")]


@pytest.mark.parametrize("fleet", FLEETS)
def test_the_fleets_validate_without_errors_or_allocation_warnings(fleet: str) -> None:
    from .cluster_support import fleet_dirs

    report = validate(fleet_dirs(fleet)).report
    assert report.errors == []
    assert not [w for w in report.warnings if w.rule.startswith("allocation.")]


# ------------------------------------------------------------------- intent table

# The README's "Who gets which GPUs" table for the example fleet, written from the policy's
# meaning (policies/example/scheduling.yaml), not from what the renderer makes.
PREFERENCE = {
    "acme-ai": ["h100-sxm5-80gb", "a100-sxm4-80gb"],
    "helix-labs": ["h100-sxm5-80gb", "a100-sxm4-80gb", "l40s"],
    "community": ["rtx-4090", "l40s", "a100-pcie-40gb", "h100-sxm5-80gb"],
}
# (queue, flavor) -> GPUs it may borrow beyond its nominal quota (None: no limit).
BORROW = {
    ("acme-ai", "h100-sxm5-80gb"): 16,
    ("acme-ai", "a100-sxm4-80gb"): None,
    ("helix-labs", "h100-sxm5-80gb"): 24,
    ("helix-labs", "a100-sxm4-80gb"): None,
    ("helix-labs", "l40s"): None,
    ("community", "rtx-4090"): None,
    ("community", "l40s"): None,
    ("community", "a100-pcie-40gb"): None,
    ("community", "h100-sxm5-80gb"): 8,
}
LEND = {("acme-ai", "h100-sxm5-80gb"): 8, ("helix-labs", "a100-sxm4-80gb"): 16}
# (queue, flavor) -> nominal quota in GPUs (community has no H100 of its own).
NOMINAL = {
    ("acme-ai", "h100-sxm5-80gb"): 48,
    ("acme-ai", "a100-sxm4-80gb"): 16,
    ("helix-labs", "h100-sxm5-80gb"): 24,
    ("helix-labs", "a100-sxm4-80gb"): 32,
    ("helix-labs", "l40s"): 24,
    ("community", "rtx-4090"): 16,
    ("community", "l40s"): 16,
    ("community", "a100-pcie-40gb"): 8,
    ("community", "h100-sxm5-80gb"): 0,
}
RESERVED_H100 = 8  # reserved_gpus: in no queue
# queue -> (preempts lower priority in its own queue, reclaims its quota from: borrowers of
# any priority / of lower priority / never)
PREEMPTS = {
    "acme-ai": ("LowerPriority", "Any"),
    "helix-labs": ("LowerPriority", "LowerPriority"),
    "community": ("Never", "Never"),
}
WEIGHTS = {"acme-ai": 2, "helix-labs": 1, "community": 0.5}
PRIORITIES = {
    "acme-ai": {"production", "batch"},
    "helix-labs": {"production", "batch", "spot"},
    "community": {"spot"},
}


def test_intent_preference_borrowing_lending() -> None:
    """Rows 1-3: who uses which GPUs first and how many of its own, who may borrow how much,
    who lends how much."""
    cqs = by_kind(objects("example").all(), "ClusterQueue")
    capacity = _capacity("example")
    for queue, order in PREFERENCE.items():
        spec = cqs[queue]["spec"]
        assert spec["cohortName"] == "swarm"
        flavors = {
            f["name"]: {r["name"]: r for r in f["resources"]} for f in spec["resourceGroups"][0]["flavors"]
        }
        assert [f for f in flavors if not f.startswith("cpu-")] == order
        for f in order:
            gpu = flavors[f]["nvidia.com/gpu"]
            units = capacity[f][1]
            borrow = BORROW[(queue, f)]
            assert gpu.get("borrowingLimit") == (None if borrow is None else borrow * units), (queue, f)
            lend = LEND.get((queue, f))
            assert gpu.get("lendingLimit") == (None if lend is None else lend * units), (queue, f)
            # community may use H100s only by borrowing idle ones (nominal 0).
            assert rules.quantity(gpu["nominalQuota"]) == NOMINAL[(queue, f)] * units, (queue, f)


def test_intent_who_preempts_whom() -> None:
    """Row 4: acme-ai takes its quota back from any borrower, helix-labs from lower-priority
    borrowers only, community never preempts (its only priority, spot, never preempts either);
    under fair sharing no queue preempts to borrow."""
    objs = objects("example").all()
    cqs, pcs = by_kind(objs, "ClusterQueue"), by_kind(objs, "PriorityClass")
    for queue, (within, reclaim) in PREEMPTS.items():
        p = cqs[queue]["spec"]["preemption"]
        assert (p["withinClusterQueue"], p["reclaimWithinCohort"]) == (within, reclaim)
        assert p["borrowWithinCohort"]["policy"] == "Never"
    assert pcs["spot"]["preemptionPolicy"] == "Never"


def test_intent_fair_shares_and_priorities() -> None:
    """Rows 5-6: idle GPUs are shared 2 : 1 : 0.5 (fair sharing on); each tenant may use only
    its priorities; 8 H100s are held in reserve (in no queue)."""
    objs = objects("example").all()
    cqs, namespaces = by_kind(objs, "ClusterQueue"), by_kind(objs, "Namespace")
    assert "fairSharing" in manager_config(state("example")["cluster"])
    for queue, w in WEIGHTS.items():
        assert float(cqs[queue]["spec"]["fairSharing"]["weight"]) == w
    for tenant, allowed in PRIORITIES.items():
        labels = namespaces[tenant]["metadata"]["labels"]
        assert {k.split("/", 1)[1] for k in labels if k.startswith("priority.swarm.io/")} == allowed
    h100 = sum(
        f["resources"][0]["nominalQuota"]
        for cq in cqs.values()
        for f in cq["spec"]["resourceGroups"][0]["flavors"]
        if f["name"] == "h100-sxm5-80gb"
    )
    assert capacity_h100() - h100 == RESERVED_H100


def capacity_h100() -> int:
    return _capacity("example")["h100-sxm5-80gb"][0]


# The README names flavors as people do; these are the names its table uses.
README_FLAVORS = {
    "H100": "h100-sxm5-80gb",
    "A100 80GB": "a100-sxm4-80gb",
    "A100 40GB": "a100-pcie-40gb",
    "L40S": "l40s",
    "RTX 4090": "rtx-4090",
}
# The README's "preempts" phrases, as (withinClusterQueue, reclaimWithinCohort).
README_WITHIN = {"lower priority in its queue": "LowerPriority"}
README_RECLAIM = {
    "takes its quota back from any borrower": "Any",
    "takes its quota back from lower-priority borrowers": "LowerPriority",
}
README_NEVER = "never (and its only priority, spot, never preempts)"


def readme_intent_rows() -> dict[str, list[str]]:
    """The README's "Who gets which GPUs" table, parsed as Markdown (markdown-it-py, tables
    on): queue -> its cells' text, after checking the header."""
    tokens = MarkdownIt("commonmark").enable("table").parse((ROOT / "README.md").read_text())
    start = next(
        i
        for i, t in enumerate(tokens)
        if t.type == "inline" and tokens[i - 1].type == "heading_open" and "Who gets which GPUs" in t.content
    )
    open_at = next(i for i in range(start, len(tokens)) if tokens[i].type == "table_open")
    rows: list[list[str]] = []
    for t in tokens[open_at:]:
        if t.type == "table_close":
            break
        if t.type == "tr_open":
            rows.append([])
        elif t.type == "inline":
            rows[-1].append(t.content.strip())
    header, *body = rows
    assert header == [
        "queue",
        "uses first, in order",
        "may borrow beyond its quota",
        "lends at most",
        "preempts",
        "fair-sharing weight",
        "tenant priorities",
    ]
    return {row[0]: row[1:] for row in body}


def _flavor(name: str) -> str:
    assert name in README_FLAVORS, f"README flavor {name!r} is not one the test knows"
    return README_FLAVORS[name]


def _amount(text: str) -> tuple[int, str]:
    """``"48 H100"`` -> (48, flavor)."""
    m = re.fullmatch(r"(\d+) (.+)", text)
    assert m, text
    return int(m[1]), _flavor(m[2])


def test_readme_intent_table_says_what_the_tests_assert() -> None:
    """Each cell of the README's intent table, read as data, equals the constant the intent
    tests assert against the rendered objects (PREFERENCE, NOMINAL, BORROW, LEND, PREEMPTS,
    WEIGHTS, PRIORITIES): a README row that drifts from what is asserted fails here."""
    rows = readme_intent_rows()
    assert set(rows) == set(PREFERENCE)
    for queue, (uses, borrows, lends, preempts, weight, priorities) in rows.items():
        # "48 H100, then 16 A100 80GB[; H100 only borrowed]"
        first, _, borrowed_only = uses.partition("; ")
        order = [_amount(x) for x in first.split(", then ")]
        if borrowed_only:
            m = re.fullmatch(r"(.+) only borrowed", borrowed_only)
            assert m, borrowed_only
            order.append((0, _flavor(m[1])))
        assert [f for _, f in order] == PREFERENCE[queue], queue
        assert {f: n for n, f in order} == {f: n for (q, f), n in NOMINAL.items() if q == queue}, queue
        # "16 H100 (no quota of its own); any idle A100 80GB, L40S or A100 40GB"
        borrow: dict[str, int | None] = {}
        for part in borrows.split("; "):
            if part.startswith("any idle "):
                for name in re.split(r", | or ", part.removeprefix("any idle ")):
                    borrow[_flavor(name)] = None
            else:
                n, f = _amount(part.removesuffix(" (no quota of its own)"))
                borrow[f] = n
        assert borrow == {f: b for (q, f), b in BORROW.items() if q == queue}, queue
        # "8 of its H100" or "all"
        lend = {}
        if lends != "all":
            m = re.fullmatch(r"(\d+) of its (.+)", lends)
            assert m, lends
            lend[_flavor(m[2])] = int(m[1])
        assert lend == {f: n for (q, f), n in LEND.items() if q == queue}, queue
        if preempts == README_NEVER:
            assert PREEMPTS[queue] == ("Never", "Never"), queue
        else:
            within, reclaim = preempts.split("; ")
            assert (README_WITHIN[within], README_RECLAIM[reclaim]) == PREEMPTS[queue], queue
        assert float(weight) == WEIGHTS[queue], queue
        assert set(priorities.split(", ")) == PRIORITIES[queue], queue


def test_readme_reserved_h100s_are_what_is_asserted() -> None:
    """The sentence under the table: how many H100s are in no queue, out of how many."""
    m = re.search(r"(\d+) of the (\d+) H100s are in no queue", (ROOT / "README.md").read_text())
    assert m
    assert (int(m[1]), int(m[2])) == (RESERVED_H100, capacity_h100())


# ------------------------------------------------------------------------------ units


def test_ray_worker_gpus_are_gpus_like_the_quotas() -> None:
    """Item 12: ``workers[].gpus`` counts GPUs, as quotas do; the pod requests that many
    GPUs in the device plugin's units (community's L40S worker asks 1 GPU: 4 time slices,
    where before it got a quarter of an L40S)."""
    (alloc,) = declared("example", "Allocation")
    units = {f: u for f, (_, u) in _capacity("example").items()}
    rcs = by_kind(objects("example").all(), "RayCluster")
    checked = 0
    for t in alloc["spec"]["tenants"]:
        for w in t.get("ray", {}).get("workers", []):
            if "gpus" not in w:
                continue
            (group,) = [
                g
                for g in rcs[f"{t['name']}/{t['name']}"]["spec"]["workerGroupSpecs"]
                if g["groupName"] == w["flavor"]
            ]
            limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
            assert limits["nvidia.com/gpu"] == str(w["gpus"] * units[w["flavor"]]), (t["name"], w["flavor"])
            checked += 1
    assert checked >= 2 and any(u > 1 for u in units.values())


def test_caps_gpus_are_gpus_converted_with_the_queues_smallest_split(tmp_path: Path) -> None:
    """Item 12: ``caps.gpus`` counts GPUs; the ResourceQuota counts device units, so the cap
    is gpus times the fewest nvidia.com/gpu per GPU among the queue's flavors: never more
    than ``gpus`` GPUs on any flavor. The base fleet's H100s, time-sliced 4 ways here."""
    import shutil

    from swarm_infra import desired_state, load_fleet
    from swarm_infra.cluster import build

    base = tmp_path / "base"
    shutil.copytree(DATA / "base", base)
    fleet = base / "fleet.yaml"
    fleet.write_text(
        fleet.read_text().replace(
            "spec: {persistence_mode: true, power_limit_w: 600}",
            "spec: {persistence_mode: true, power_limit_w: 600, sharing: {time_slicing_replicas: 4}}",
        )
    )
    queues = [{"name": "q", "quotas": [{"flavor": "h100-sxm5-80gb", "nominal_quota": 2}]}]
    tenants = [{"name": "t", "queue": "q", "caps": {"gpus": 1}}]
    paths = _allocation(
        tmp_path, {"queues": queues, "tenants": tenants, "reserved_gpus": {"a100-sxm4-80gb": 2}}
    )
    paths[0] = base
    objs = build(desired_state(load_fleet(paths))).all()
    assert by_kind(objs, "ResourceQuota")["t/swarm-caps"]["spec"]["hard"]["requests.nvidia.com/gpu"] == "4"


# ---------------------------------------------------------- Kueue's webhooks, restated

MUTATIONS = [
    # (kind, what to break, a phrase of the upstream message), kueue v0.17.5 pkg/webhooks/
    (
        "ClusterQueue",
        lambda s: s["resourceGroups"][0]["flavors"].append(
            copy.deepcopy(s["resourceGroups"][0]["flavors"][0])
        ),
        "appears twice",
    ),
    (
        "ClusterQueue",
        lambda s: s["resourceGroups"][0]["flavors"][0]["resources"][0].update(nominalQuota=-1),
        "greater than or equal to 0",
    ),
    (
        "ClusterQueue",
        lambda s: s["resourceGroups"][0]["flavors"][0]["resources"][0].update(lendingLimit=1000),
        "less than or equal to the nominalQuota",
    ),
    (
        "ClusterQueue",
        lambda s: (
            s.pop("cohortName")
            and s["resourceGroups"][0]["flavors"][0]["resources"][0].update(lendingLimit=0)
        ),
        "must be nil when cohort is empty",
    ),
    (
        "ClusterQueue",
        lambda s: s["resourceGroups"][0]["coveredResources"].__setitem__(0, "bad key!"),
        "not a label key",
    ),
    (
        "ClusterQueue",
        lambda s: s["resourceGroups"][0]["flavors"][0]["resources"].reverse(),
        "must match the name in coveredResources",
    ),
    ("ClusterQueue", lambda s: s.update(fairSharing={"weight": "1n"}), "weight must be > 10e-9"),
    ("ClusterQueue", lambda s: s.update(fairSharing={"weight": -1}), "greater than or equal to 0"),
    (
        "ClusterQueue",
        lambda s: s["namespaceSelector"]["matchExpressions"][0].update(operator="Exists"),
        "must be empty",
    ),
    ("ResourceFlavor", lambda s: s["nodeLabels"].update({"x": "not a value!"}), "not a valid label value"),
    (
        "ResourceFlavor",
        lambda s: s.update(nodeTaints=[{"key": "a", "effect": "NoSchedule"}] * 2),
        "unique by key and effect",
    ),
]


@pytest.mark.parametrize(("kind", "mutate", "phrase"), MUTATIONS)
def test_restated_kueue_webhook_rules_refuse_what_kueue_refuses(kind: str, mutate: Any, phrase: str) -> None:
    """Each restated webhook rule refuses a mutated copy of a rendered object (acme-ai's
    ClusterQueue, the H100 flavor) with the upstream message; the original passes."""
    name = "acme-ai" if kind == "ClusterQueue" else "h100-sxm5-80gb"
    obj = copy.deepcopy(by_kind(objects("example").all(), kind)[name])
    assert rules.violations(obj) == []
    mutate(obj["spec"])
    assert any(phrase in v for v in rules.violations(obj)), rules.violations(obj)


def test_restated_cohort_webhook_rules() -> None:
    """Cohort: limits need a parent; a lendingLimit above nominal is allowed (unlike a
    ClusterQueue's: validationConfig.enforceNominalGreaterThanLending is false for Cohorts)."""
    group = {
        "coveredResources": ["nvidia.com/gpu"],
        "flavors": [
            {"name": "f", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 1, "lendingLimit": 2}]}
        ],
    }
    cohort = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Cohort",
        "metadata": {"name": "c", "labels": {}},
    }
    orphan = {**cohort, "spec": {"resourceGroups": [group]}}
    assert any("must be nil when parent is empty" in v for v in rules.violations(orphan))
    child = {**cohort, "spec": {"parentName": "p", "resourceGroups": [group]}}
    assert rules.violations(child) == []
