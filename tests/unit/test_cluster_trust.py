"""Issue #24 review follow-ups: a node's own labels cannot pull other tenants' work onto it,
site CPU flavors hold only nodes without GPUs, and a regional stack's GPU ResourceQuota is
what its own cluster could admit.

Kueue v0.17.5 behaviour restated (no cluster here):

- ``pkg/scheduler/flavorassigner/flavorassigner.go``: an admitted pod set gets its flavor's
  ``nodeLabels`` as node selector, so a flavor's pods run only on nodes carrying all of
  those labels;
- a ClusterQueue is admitted at most ``nominalQuota + borrowingLimit`` of a flavor's
  resource (no ``borrowingLimit``: unbounded, within its cohort), and nothing is borrowed
  outside a cohort (Kueue docs, "Cluster Queue", "Borrowing"); never more than the
  flavor's nodes have.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from swarm_infra import load_fleet
from swarm_infra.cluster import build
from swarm_infra.cluster.scope import scope
from swarm_infra.resolve.node import NodeResolver
from swarm_infra.resolve.types import DesiredState

from .cluster_support import by_kind, fleet_dirs, objects, state

FLAVOR_LABEL = "swarm.io/gpu-flavor"
SITES = ("fra1", "ams2")  # Pulumi.example-eu.yaml


def selects(node_labels: Mapping[str, str], node: Mapping[str, str]) -> bool:
    """Whether a pod with ``node_labels`` as node selector may run on a node labelled ``node``."""
    return all(node.get(k) == v for k, v in node_labels.items())


def node_object_labels(fleet: str) -> dict[str, dict[str, str]]:
    """The labels the stack's NodePatch gives each node (build's Node objects)."""
    return {name: o["metadata"]["labels"] for name, o in by_kind(objects(fleet).all(), "Node").items()}


# ------------------------------------------------------------------ item 1: node labels


def test_a_cpu_node_declaring_a_gpu_flavor_does_not_join_it() -> None:
    """A node's document is trusted with that node only: a CPU node that declares the H100
    flavor's label (validation refuses it: ``label.reserved``; the resolver never trusts it
    either) is not selected by any GPU ResourceFlavor, and a GPU node's flavor is its
    GPUs' catalog flavor, whatever it declares."""
    a = load_fleet(fleet_dirs("example"))
    resolver = NodeResolver(a, {}, set())
    cpu = next(n for n in a.fleet.nodes.values() if not n.gpus)
    gpu = next(n for n in a.fleet.nodes.values() if n.gpus)
    flavors = {f["name"]: f for f in state("example")["cluster"]["flavors"]}
    forged = next(f for f in flavors if f != state("example")["nodes"][gpu.name]["labels"][FLAVOR_LABEL])
    cpu_state = resolver.node_state(dataclasses.replace(cpu, labels={FLAVOR_LABEL: forged}))
    assert not any(selects(f["node_labels"], cpu_state["labels"]) for f in flavors.values())
    gpu_state = resolver.node_state(dataclasses.replace(gpu, labels={FLAVOR_LABEL: forged}))
    assert gpu_state["labels"][FLAVOR_LABEL] == state("example")["nodes"][gpu.name]["labels"][FLAVOR_LABEL]


# ------------------------------------------------------------ item 8: site CPU flavors


def test_site_cpu_flavors_select_only_the_sites_nodes_without_gpus() -> None:
    """A Ray head admitted to ``cpu-<site>`` must run on a node without GPUs of that site,
    whether or not GPU nodes are tainted (``gpu_taint: false`` leaves only the labels)."""
    s = state("example")
    labels = node_object_labels("example")
    flavors = by_kind(objects("example").all(), "ResourceFlavor")
    cpu = [f for name, f in flavors.items() if name.startswith("cpu-")]
    assert cpu
    for f in cpu:
        site = f["metadata"]["name"].removeprefix("cpu-")
        chosen = {n for n, node in labels.items() if selects(f["spec"]["nodeLabels"], node)}
        expected = {n for n, ns in s["nodes"].items() if ns["site"] == site and ns["hardware"]["gpus"] == []}
        assert chosen == expected and expected, f["metadata"]["name"]


# --------------------------------------------------------- item 7: regional GPU quotas


def _admissible(cq: Mapping[str, Any], gpus: Mapping[str, int]) -> int:
    """The most nvidia.com/gpu Kueue could admit a ClusterQueue object (see the module doc),
    with ``gpus`` the nvidia.com/gpu each flavor's nodes in the cluster advertise."""
    total = 0
    for group in cq["spec"]["resourceGroups"]:
        for flavor in group["flavors"]:
            for r in flavor["resources"]:
                if r["name"] != "nvidia.com/gpu" or flavor["name"] not in gpus:
                    continue
                nominal = int(r["nominalQuota"])
                if "cohortName" not in cq["spec"]:
                    most = nominal
                elif "borrowingLimit" in r:
                    most = nominal + int(r["borrowingLimit"])
                else:
                    most = gpus[flavor["name"]]
                total += min(most, gpus[flavor["name"]])
    return total


def _cluster_gpus(s: DesiredState) -> dict[str, int]:
    """nvidia.com/gpu per flavor on the gpu-worker nodes of ``s`` (GPUs times the device
    plugin's units per GPU of the flavor)."""
    units = {f["name"]: f["units_per_gpu"] or 0 for f in s["cluster"]["flavors"]}
    out: dict[str, int] = {}
    for n in s["nodes"].values():
        flavor = n["labels"].get(FLAVOR_LABEL)
        if flavor in units and "gpu-worker" in n["roles"]:
            count = sum(g["count"] for g in n["hardware"]["gpus"])
            out[flavor] = out.get(flavor, 0) + count * units[flavor]
    return out


def test_a_regional_stacks_gpu_quota_is_what_its_own_cluster_could_admit() -> None:
    """``--sites``/``swarm:sites``: each tenant namespace's ``requests.nvidia.com/gpu`` is at
    most its ``caps.gpus`` and what its ClusterQueue could be admitted in that cluster (0
    when the queue is not there), not in the whole fleet."""
    s = state("example")
    regional = scope(s, SITES)
    objs = build(s, SITES).all()
    queues = by_kind(objs, "ClusterQueue")
    quotas = by_kind(objs, "ResourceQuota")
    gpus = _cluster_gpus(regional)
    smaller = 0
    for t in s["cluster"]["tenants"]:
        cq = queues.get(t["cluster_queue"])
        admissible = _admissible(cq, gpus) if cq is not None else 0
        cap = t["caps"]["gpus"] if t["caps"] is not None else None
        expected = admissible if cap is None else min(cap, admissible)
        hard = quotas[f"{t['namespace']}/swarm-caps"]["spec"]["hard"]
        assert int(hard["requests.nvidia.com/gpu"]) == expected, t["name"]
        smaller += expected < t["gpu_quota"]
    assert smaller, "the regional cluster should admit less than the fleet for some tenant"
