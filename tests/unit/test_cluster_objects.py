"""The cluster layer's objects say what the fleet declares: expected values come from the
policies and the resolved NodeState/ClusterState, never from a second copy."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from swarm_infra import desired_state, load_fleet
from swarm_infra.cluster import ScopeError, build
from swarm_infra.cluster import render as yaml_files
from swarm_infra.cluster.core import DEVICE_PLUGIN_CONFIG_LABEL
from swarm_infra.cluster.meta import KUEUE_PRIORITY_LABEL, KUEUE_QUEUE_LABEL, sort_key
from swarm_infra.resolve import ray
from swarm_infra.resolve.flavors import (
    flavor_shapes,
    node_sharing,
    ray_request_in_device_units,
    units_per_gpu,
)
from swarm_infra.resolve.node import FLAVOR_LABEL

from .cluster_support import (
    ROOT,
    by_kind,
    cel_failures,
    crd_schema,
    fleet_dirs,
    needs_crds,
    objects,
    state,
    strict,
)

DATA = ROOT / "tests" / "data"
GIB = 1 << 30


@cache
def extra_fleet() -> Any:
    return desired_state(load_fleet([DATA / "base", DATA / "cluster"]))


def declared(fleet: str, kind: str) -> list[dict[str, Any]]:
    """The fleet's documents of ``kind``, as written in its files."""
    docs = []
    for d in fleet_dirs(fleet):
        for f in sorted(Path(d).rglob("*.yaml")):
            docs += [
                x for x in yaml.safe_load_all(f.read_text()) if isinstance(x, dict) and x.get("kind") == kind
            ]
    return docs


def tolerates(tolerations: list[dict[str, Any]], taint: dict[str, str]) -> bool:
    """Kubernetes' toleration matching (ToleratesTaint)."""
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        if t.get("operator", "Equal") == "Exists" and t.get("key", taint["key"]) == taint["key"]:
            return True
        if t.get("key") == taint["key"] and t.get("value") == taint.get("value"):
            return True
    return False


# ------------------------------------------------------------------ determinism, labels


def test_the_same_fleet_renders_the_same_bytes() -> None:
    again = build(desired_state(load_fleet(fleet_dirs("example"))))
    assert again == objects("example")
    assert yaml_files.files(again.all(), "example") == yaml_files.files(objects("example").all(), "example")


@pytest.mark.parametrize("fleet", ["example", "lab"])
def test_libyaml_and_pure_python_emitters_write_the_same_text(fleet: str) -> None:
    objs = objects(fleet).all()
    assert yaml_files.dump(objs, yaml.CSafeDumper) == yaml_files.dump(objs, yaml.SafeDumper)


def test_objects_and_files_are_sorted() -> None:
    objs = objects("example")
    for group in (objs.cluster, objs.storage, objs.mesh, objs.ray):
        assert group == sorted(group, key=sort_key)
    for name, text in yaml_files.files(objs.all(), "example").items():
        docs = list(yaml.safe_load_all(text))
        assert docs == sorted(docs, key=sort_key), name
        assert docs and all(yaml_files.file_name(d["kind"]) == name for d in docs), name


def test_every_object_carries_managed_by_and_the_fleet_labels() -> None:
    (cluster_doc,) = declared("example", "Cluster")
    expected = {
        "app.kubernetes.io/managed-by": "swarm",
        "swarm.io/fleet": cluster_doc["metadata"]["name"],
        **cluster_doc["spec"]["labels"],
    }
    for obj in objects("example").all():
        labels = obj["metadata"]["labels"]
        assert labels.items() >= expected.items(), (obj["kind"], obj["metadata"]["name"])


def test_without_a_cluster_document_the_fleet_is_called_swarm(tmp_path: Path) -> None:
    paths = [p for p in fleet_dirs("lab") if p.name != "lab" or p.parent.name != "policies"]
    policies = tmp_path / "policies"
    policies.mkdir()
    # Without the Cluster document the fleet has no Ray version either: leave its Ray out.
    for f in (ROOT / "policies" / "lab").iterdir():
        if f.suffix == ".yaml" and f.name not in ("cluster.yaml", "ray.yaml"):
            docs = list(yaml.safe_load_all(f.read_text()))
            for d in docs:
                if d and d["kind"] == "Allocation":
                    for t in d["spec"].get("tenants", []):
                        t.pop("ray", None)
            (policies / f.name).write_text(yaml.safe_dump_all(docs))
    objs = build(desired_state(load_fleet([*paths, policies]))).all()
    assert {o["metadata"]["labels"]["swarm.io/fleet"] for o in objs} == {"swarm"}


# ---------------------------------------------------------------- tenants, priorities


def test_tenant_namespaces_carry_their_allowed_priorities() -> None:
    (alloc,) = declared("example", "Allocation")
    namespaces = by_kind(objects("example").all(), "Namespace")
    all_priorities = {d["metadata"]["name"] for d in declared("example", "Priority")}
    for t in alloc["spec"]["tenants"]:
        labels = namespaces[t.get("namespace", t["name"])]["metadata"]["labels"]
        allowed = {k.removeprefix("priority.swarm.io/") for k in labels if k.startswith("priority.swarm.io/")}
        assert allowed == set(t.get("priorities", all_priorities))
        assert labels["swarm.io/tenant"] == t["name"]


def test_each_priority_is_a_priority_class_and_a_workload_priority_class() -> None:
    objs = objects("example").all()
    pcs, wpcs = by_kind(objs, "PriorityClass"), by_kind(objs, "WorkloadPriorityClass")
    for doc in declared("example", "Priority"):
        name, spec = doc["metadata"]["name"], doc["spec"]
        assert pcs[name]["value"] == wpcs[name]["value"] == spec["value"]
        assert pcs[name]["globalDefault"] is False  # never cluster-wide (issue #24, item 11)
        assert pcs[name]["preemptionPolicy"] == spec.get("preemption_policy", "PreemptLowerPriority")
        assert wpcs[name]["description"] == spec["description"]
    assert len(pcs) == len(wpcs) == len(declared("example", "Priority"))


def test_local_queues_feed_the_declared_cluster_queues() -> None:
    (alloc,) = declared("example", "Allocation")
    lqs = by_kind(objects("example").all(), "LocalQueue")
    assert {k: v["spec"]["clusterQueue"] for k, v in lqs.items()} == {
        f"{t.get('namespace', t['name'])}/{t['name']}": t["queue"] for t in alloc["spec"]["tenants"]
    }


def test_caps_become_a_resource_quota_and_a_limit_range() -> None:
    (alloc,) = declared("example", "Allocation")
    objs = objects("example").all()
    quotas, limits = by_kind(objs, "ResourceQuota"), by_kind(objs, "LimitRange")
    quotas = {k: q for k, q in quotas.items() if k.endswith("/swarm-caps")}  # not the scratch quotas
    capped = [t for t in alloc["spec"]["tenants"] if "caps" in t]
    # Every tenant namespace has a ResourceQuota (at least its GPUs); the capped ones the caps.
    assert {k.split("/")[0] for k in quotas} == {t["name"] for t in alloc["spec"]["tenants"]}
    community = next(t for t in capped if t["name"] == "community")["caps"]
    hard = quotas["community/swarm-caps"]["spec"]["hard"]
    assert hard == {
        "requests.nvidia.com/gpu": str(community["gpus"]),
        "requests.cpu": str(community["cpu"]),
        "requests.memory": f"{community['memory_gib']}Gi",
        "pods": str(community["pods"]),
        "requests.storage": f"{community['storage_gib']}Gi",
        "persistentvolumeclaims": str(community["persistent_volume_claims"]),
    }
    (limit,) = limits["community/swarm-caps"]["spec"]["limits"]
    c = community["container"]
    assert limit["type"] == "Container"
    assert limit["max"] == {"cpu": str(c["max"]["cpu"]), "memory": f"{c['max']['memory_gib']}Gi"}
    assert limit["defaultRequest"] == {
        "cpu": str(c["default_request"]["cpu"]),
        "memory": f"{c['default_request']['memory_gib']}Gi",
    }
    # The lab's fractional requests are rounded to millicores and MiB.
    (lab_limit,) = by_kind(objects("lab").all(), "LimitRange")["team-b/swarm-caps"]["spec"]["limits"]
    assert lab_limit["defaultRequest"] == {"cpu": "100m", "memory": "256Mi"}


# ------------------------------------------------------------------------- Kueue, nodes


def _flavor_nodes(fleet_state: Any, flavor: str) -> list[Any]:
    return [
        n
        for n in fleet_state["nodes"].values()
        if n["labels"].get(FLAVOR_LABEL) == flavor and "gpu-worker" in n["roles"]
    ]


def test_cluster_queue_quotas_cover_gpus_in_device_units_and_the_nodes_cpu_and_memory() -> None:
    s = state("example")
    (alloc,) = declared("example", "Allocation")
    cqs = by_kind(objects("example").all(), "ClusterQueue")
    checked_units = set()
    for q in alloc["spec"]["queues"]:
        rg = cqs[q["name"]]["spec"]["resourceGroups"]
        assert [g["coveredResources"] for g in rg] == [["nvidia.com/gpu", "cpu", "memory"]]
        flavors = {
            f["name"]: {r["name"]: r for r in f["resources"]}
            for f in rg[0]["flavors"]
            if not f["name"].startswith("cpu-")  # a site's CPU flavor (Ray heads)
        }
        assert set(flavors) == {x["flavor"] for x in q["quotas"]}
        for x in q["quotas"]:
            nodes = _flavor_nodes(s, x["flavor"])
            gpus = sum(g["count"] for n in nodes for g in n["hardware"]["gpus"])
            (units,) = {n["gpu"]["sharing"]["units_per_gpu"] for n in nodes}
            checked_units.add(units)
            r = flavors[x["flavor"]]
            assert r["nvidia.com/gpu"]["nominalQuota"] == x["nominal_quota"] * units
            assert r["nvidia.com/gpu"].get("borrowingLimit") == (
                None if "borrowing_limit" not in x else x["borrowing_limit"] * units
            )
            cpus = sum(n["hardware"]["cpus"] for n in nodes) * x["nominal_quota"] // gpus
            assert r["cpu"]["nominalQuota"] == str(cpus)
            mem = sum(n["hardware"]["memory_gib"] for n in nodes) * 1024 * x["nominal_quota"] // gpus
            assert r["memory"]["nominalQuota"] in (f"{mem // 1024}Gi", f"{mem}Mi")
    # Whole GPUs, the A100 40GB's two MIG instances, the L40S's four time slices.
    assert checked_units == {1, 2, 4}


def test_cluster_queues_keep_cohort_preemption_weight_and_tenant_namespaces() -> None:
    (alloc,) = declared("example", "Allocation")
    cqs = by_kind(objects("example").all(), "ClusterQueue")
    for q in alloc["spec"]["queues"]:
        spec = cqs[q["name"]]["spec"]
        assert spec.get("cohortName") == q.get("cohort")
        assert float(spec["fairSharing"]["weight"]) == q.get("fair_sharing_weight", 1)
        p = q.get("preemption", {})
        assert spec["preemption"]["withinClusterQueue"] == p.get("within_cluster_queue", "Never")
        assert spec["preemption"]["borrowWithinCohort"]["policy"] == p.get("borrow_within_cohort", "Never")
        users = [t["name"] for t in alloc["spec"]["tenants"] if t["queue"] == q["name"]]
        assert spec["namespaceSelector"]["matchExpressions"][0]["values"] == sorted(users)


def test_resource_flavors_select_exactly_the_nodes_with_their_gpus() -> None:
    s = state("example")
    objs = objects("example").all()
    nodes = by_kind(objs, "Node")
    for name, rf in by_kind(objs, "ResourceFlavor").items():
        if name.startswith("cpu-"):
            continue  # a site's CPU flavor: test_cpu_flavors_select_a_sites_untainted_nodes
        selected = {
            n for n, o in nodes.items() if o["metadata"]["labels"].items() >= rf["spec"]["nodeLabels"].items()
        }
        with_gpus = {n for n, ns in s["nodes"].items() if ns["gpu"] and ns["labels"][FLAVOR_LABEL] == name}
        assert selected == with_gpus and selected


def test_gpu_nodes_are_tainted_and_flavors_tolerate_the_taint() -> None:
    s = state("example")
    objs = objects("example").all()
    nodes = by_kind(objs, "Node")
    assert set(nodes) == set(s["nodes"])
    tainted = {n for n, o in nodes.items() if o.get("spec", {}).get("taints")}
    assert tainted == {n for n, ns in s["nodes"].items() if ns["gpu"]}
    for name, rf in by_kind(objs, "ResourceFlavor").items():
        assert "nodeTaints" not in rf["spec"]
        if name.startswith("cpu-"):
            assert "tolerations" not in rf["spec"]  # CPU-only pods stay off the GPU nodes
            continue
        for n in tainted:
            for taint in nodes[n]["spec"]["taints"]:
                assert tolerates(rf["spec"]["tolerations"], taint)


def test_node_labels_give_site_region_flavor_and_mesh_address() -> None:
    s = state("example")
    for name, node in by_kind(objects("example").all(), "Node").items():
        ns, labels = s["nodes"][name], node["metadata"]["labels"]
        assert labels["swarm.io/site"] == ns["site"]
        assert labels["swarm.io/region"] == ns["region"]
        assert labels["swarm.io/mesh-address"] == ns["mesh"]["address"].split("/")[0]
        assert labels.get(FLAVOR_LABEL) == ns["labels"].get(FLAVOR_LABEL)
        assert labels.items() >= ns["labels"].items()


def test_gpu_sharing_configs_exist_for_every_node_label() -> None:
    objs = objects("example").all()
    maps = by_kind(objs, "ConfigMap")
    plugin = maps["gpu-operator/swarm-device-plugin-config"]["data"]
    for name, node in by_kind(objs, "Node").items():
        labels = node["metadata"]["labels"]
        if DEVICE_PLUGIN_CONFIG_LABEL in labels:
            assert labels[DEVICE_PLUGIN_CONFIG_LABEL] in plugin, name
    # From policies/shared/gpu-profiles.yaml: the L40S profile time-slices 4 ways and the
    # A100 40GB profile creates two 3g.20gb instances per GPU.
    profiles = {d["metadata"]["name"]: d["spec"] for d in declared("example", "GpuProfile")}
    l40s = yaml.safe_load(plugin["l40s-inference"])
    replicas = profiles["l40s-inference"]["sharing"]["time_slicing_replicas"]
    assert l40s["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": replicas}]
    # MIG layouts are the node layer's (it owns MIG); the device plugin only needs the strategy.
    assert profiles["a100-40gb-mig-inference"]["mig"]["profiles"]
    assert yaml.safe_load(plugin["a100-40gb-mig-inference"])["flags"]["migStrategy"] == "single"


# ---------------------------------------------------------------------- storage, mesh


def test_storage_classes_scratch_volumes_and_claims() -> None:
    s = state("example")
    objs = objects("example").all()
    (storage,) = declared("example", "Storage")
    classes = by_kind(objs, "StorageClass")
    scratch_class = storage["spec"]["scratch"].get("storage_class", "swarm-scratch")
    assert set(classes) == {c["name"] for c in storage["spec"]["classes"]} | {scratch_class}
    defaults = [n for n, c in classes.items() if c["metadata"].get("annotations")]
    assert defaults == [c["name"] for c in storage["spec"]["classes"] if c.get("default")]
    assert not by_kind(objs, "PersistentVolume")  # scratch volumes are provisioned on demand
    with_scratch = sorted(n for n, ns in s["nodes"].items() if ns["storage"])
    (term,) = classes[scratch_class]["allowedTopologies"]
    assert term["matchLabelExpressions"] == [{"key": "kubernetes.io/hostname", "values": with_scratch}]
    pvcs = by_kind(objs, "PersistentVolumeClaim")
    assert {k: v["spec"]["resources"]["requests"]["storage"] for k, v in pvcs.items()} == {
        f"{v['tenant']}/{v['name']}": f"{v['size_gib']}Gi" for v in storage["spec"]["volumes"]
    }


def test_the_mesh_configmap_holds_addresses_hubs_relays_and_edges() -> None:
    s = state("example")
    cm = by_kind(objects("example").all(), "ConfigMap")["swarm-system/swarm-mesh-topology"]
    topo = json.loads(cm["data"]["topology.json"])
    assert topo["addresses"] == {n: ns["mesh"]["address"].split("/")[0] for n, ns in s["nodes"].items()}
    edges = {tuple(e) for e in topo["edges"]}
    for n, ns in s["nodes"].items():
        for p in ns["mesh"]["peers"]:
            assert tuple(sorted((n, p["name"]))) in edges
    (mesh,) = declared("example", "Mesh")
    assert topo["cidr"] == mesh["spec"]["cidr"]
    assert topo["hubs"] == {"ams2": mesh["spec"]["sites"]["ams2"]["hub"], "tyo1": "tyo1-relay-01"}
    assert set(topo["relays"]) <= {n for n, ns in s["nodes"].items() if "relay" in ns["roles"]}


# ------------------------------------------------------------------------------- Ray


def test_ray_clusters_come_from_the_one_ray_decision() -> None:
    """The KubeRay objects show exactly what resolve.ray decides for each tenant."""
    s = state("example")
    a = load_fleet(fleet_dirs("example"))
    shapes = flavor_shapes(a, node_sharing(a))
    rcs = by_kind(objects("example").all(), "RayCluster")
    tenants = [t for t in a.fleet.allocation.tenants if t.ray]
    assert set(rcs) == {f"{t.namespace}/{t.name}" for t in tenants}
    default = next(p["name"] for p in s["cluster"]["priorities"] if p["global_default"])
    for t in tenants:
        request = ray_request_in_device_units(t.ray, units_per_gpu(a, node_sharing(a)))  # GPUs -> devices
        decided = ray.ray_cluster(
            t.name,
            t.namespace,
            request,
            shapes,
            priority=t.ray.priority or default,
            local_queue=t.name,
            ray_version=a.fleet.cluster.ray_version,
        )
        rc = rcs[f"{t.namespace}/{t.name}"]
        labels = rc["metadata"]["labels"]
        assert labels[KUEUE_QUEUE_LABEL] == t.name and labels[KUEUE_PRIORITY_LABEL] == decided["priority"]
        (cluster_doc,) = declared("example", "Cluster")
        assert rc["spec"]["rayVersion"] == cluster_doc["spec"]["ray_version"]
        groups = [rc["spec"]["headGroupSpec"], *rc["spec"]["workerGroupSpecs"]]
        for group, d in zip(groups, [decided["head"], *decided["workers"]], strict=True):
            pod = group["template"]["spec"]
            (c,) = pod["containers"]
            assert c["image"] == decided["image"]
            assert c["resources"]["limits"] == c["resources"]["requests"]
            assert c["resources"]["limits"]["cpu"] == str(d["cpus"])
            assert c["resources"]["limits"]["memory"] == f"{d['memory_gib']}Gi"
            assert c["resources"]["limits"].get("nvidia.com/gpu") == (str(d["gpus"]) if d["gpus"] else None)
            assert group["rayStartParams"]["object-store-memory"] == str(d["object_store_bytes"])
            assert pod["volumes"][0]["emptyDir"] == {
                "medium": "Memory",
                "sizeLimit": str(d["object_store_bytes"]),
            }
            assert pod["priorityClassName"] == decided["priority"]
        for w, d in zip(rc["spec"]["workerGroupSpecs"], decided["workers"], strict=True):
            assert (w["groupName"], w["minReplicas"], w["maxReplicas"]) == (
                d["flavor"],
                d["min_replicas"],
                d["max_replicas"],
            )
            assert w["template"]["spec"]["nodeSelector"] == {FLAVOR_LABEL: d["flavor"]}


def test_ray_sizes_default_from_the_flavor_nodes() -> None:
    """acme-ai asks for whole H100 nodes: all 8 GPUs, 90% of 192 CPUs and 2 TiB, 30% of
    that memory for the object store (policies/example, inventory/example/nodes/fra1.yaml)."""
    s = state("example")
    (acme,) = [r for r in s["cluster"]["ray_clusters"] if r["name"] == "acme-ai"]
    (w,) = acme["workers"]
    node = _flavor_nodes(s, "h100-sxm5-80gb")[0]["hardware"]
    assert w["gpus"] == node["gpus"][0]["count"]
    assert w["cpus"] == node["cpus"] * (100 - ray.RESERVE_PERCENT) // 100
    assert w["memory_gib"] == node["memory_gib"] * (100 - ray.RESERVE_PERCENT) // 100
    assert w["object_store_bytes"] == w["memory_gib"] * GIB * 30 // 100
    (community,) = [r for r in s["cluster"]["ray_clusters"] if r["name"] == "community"]
    assert [g["object_store_bytes"] for g in community["workers"]] == [64 * GIB * 20 // 100] * 2


# ----------------------------------------------------------------- scope, other fleets


def test_a_stack_for_one_site_gets_that_sites_nodes_and_flavors() -> None:
    s = state("example")
    objs = build(s, ["fra1"]).all()
    assert set(by_kind(objs, "Node")) == {n for n, ns in s["nodes"].items() if ns["site"] == "fra1"}
    assert set(by_kind(objs, "ResourceFlavor")) == {"h100-sxm5-80gb", "cpu-fra1"}  # acme-ai's head
    for name, cq in by_kind(objs, "ClusterQueue").items():
        expected = ["h100-sxm5-80gb", "cpu-fra1"] if name == "acme-ai" else ["h100-sxm5-80gb"]
        assert [f["name"] for f in cq["spec"]["resourceGroups"][0]["flavors"]] == expected
    assert set(by_kind(objs, "RayCluster")) == {"acme-ai/acme-ai"}  # community's workers are elsewhere
    assert by_kind(objs, "Namespace") == by_kind(objects("example").all(), "Namespace")
    (term,) = by_kind(objs, "StorageClass")["swarm-scratch"]["allowedTopologies"]
    assert term["matchLabelExpressions"][0]["values"] == sorted(
        n for n, ns in s["nodes"].items() if ns["site"] == "fra1" and ns["storage"]
    )


def test_a_flavor_split_between_sites_cannot_be_scoped() -> None:
    with pytest.raises(ScopeError, match="h100-sxm5-80gb"):
        build(extra_fleet(), ["s1"])
    with pytest.raises(ScopeError, match="no node is in site"):
        build(extra_fleet(), ["s9"])
    assert set(by_kind(build(extra_fleet(), ["s1", "s2"]).all(), "Node")) == {"n1", "n2", "n3"}


@needs_crds
def test_cohort_objects_where_the_policy_declares_them() -> None:
    objs = build(extra_fleet()).all()
    cohorts = by_kind(objs, "Cohort")
    assert {n: c["spec"] for n, c in cohorts.items()} == {
        "child": {"parentName": "root", "fairSharing": {"weight": "0.5"}},
        "root": {"fairSharing": {"weight": 3}},
    }
    for c in cohorts.values():
        assert jsonschema.Draft7Validator(strict(crd_schema("Cohort", c["apiVersion"]))).is_valid(c)
        assert cel_failures(c) == []
    assert by_kind(objs, "ClusterQueue")["q2"]["spec"]["fairSharing"] == {"weight": "0.25"}


def test_untainted_gpu_nodes_and_a_custom_system_namespace() -> None:
    objs = build(extra_fleet()).all()
    assert not any(o.get("spec", {}).get("taints") for o in by_kind(objs, "Node").values())
    assert not any("tolerations" in f["spec"] for f in by_kind(objs, "ResourceFlavor").values())
    assert "swarm-ops/swarm-mesh-topology" in by_kind(objs, "ConfigMap")
    assert all(o["metadata"]["labels"]["team"] == "infra" for o in objs)
    assert set(by_kind(objs, "LocalQueue")) == {"team-one/t1", "t2/t2"}
    # n3 has NVMe: the scratch class may place volumes there.
    (term,) = by_kind(objs, "StorageClass")["swarm-scratch"]["allowedTopologies"]
    assert "n3" in term["matchLabelExpressions"][0]["values"]
