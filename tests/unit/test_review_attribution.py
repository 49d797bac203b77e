"""Which lines of a change `swarm review` names behind each cluster object it changes: the
document the object is made from, never the Allocation by default (the helpers of
``test_review``). Where an object comes from is read from the cluster layer's own builder
(``swarm_infra.cluster.core``): the scratch quota from ``Storage.scratch.tenant_quota_gib``,
a ClusterQueue's CPU and memory quotas from its flavors' nodes, the local-path
provisioner's RBAC from ``Storage.scratch``.
"""

from __future__ import annotations

from pathlib import Path

from .test_review import ALLOC, change, line_of, replace

# base_repo and repo: tests/unit/conftest.py's (the example fleet committed, a copy per test).

NODES = "inventory/example/nodes/ams2.yaml"
NODE_CPUS = "    cpus: 128\n    memory_gib: 1024\n    gpus: [{model: A100-SXM4-80GB, count: 8}]"
SCRATCH = "tenant_quota_gib: 1024"


def test_scratch_quotas_and_queue_cpu_quotas_name_their_own_documents(repo: Path) -> None:
    """One change of the scratch quota (Storage) and of an A100 node's CPUs (Node): each
    tenant's ``swarm-scratch`` ResourceQuota names the Storage line, each ClusterQueue whose
    CPU quota moved names the Node lines, not each other's."""

    def edit() -> None:
        replace(repo, ALLOC, SCRATCH, "tenant_quota_gib: 4096")
        replace(repo, NODES, NODE_CPUS, NODE_CPUS.replace("cpus: 128", "cpus: 96"))

    _, _, r = change(repo, edit)
    objects = r.fleets[0].objects
    storage_line = line_of(repo, ALLOC, "tenant_quota_gib: 4096")
    scratch = [o for o in objects if o.kind == "ResourceQuota" and o.name == "swarm-scratch"]
    assert scratch
    for o in scratch:
        assert [(w.file, w.line) for w in o.where] == [(ALLOC, storage_line)], o.namespace
    queues = [o for o in objects if o.kind == "ClusterQueue"]
    assert queues
    for o in queues:
        assert o.where and {w.file for w in o.where} == {NODES}, o.name


def test_a_site_cpu_flavor_names_the_ray_head_that_needs_it(repo: Path) -> None:
    """``cpu-<site>`` exists for the Ray heads placed on the site's nodes without GPUs (the
    Allocation's ``ray.head``): a head grown past every such node removes it, and the review
    names the head's line (beside the Node change made in the same commit: nodes without
    GPUs decide it too)."""
    head = "        head: {cpus: 8, memory_gib: 64}"

    def edit() -> None:
        replace(repo, ALLOC, head, head.replace("cpus: 8", "cpus: 96"))
        replace(repo, NODES, NODE_CPUS, NODE_CPUS.replace("cpus: 128", "cpus: 96"))

    before, after, r = change(repo, edit)
    gone = {f["name"] for f in before["cluster"]["cpu_flavors"]} - {
        f["name"] for f in after["cluster"]["cpu_flavors"]
    }
    assert gone
    flavors = [o for o in r.fleets[0].objects if o.kind == "ResourceFlavor" and o.name in gone]
    assert flavors
    for o in flavors:
        assert (ALLOC, line_of(repo, ALLOC, "head: {cpus: 96")) in [(w.file, w.line) for w in o.where]
