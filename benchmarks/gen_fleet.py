"""Synthetic fleet generator for benchmarks.

    python benchmarks/gen_fleet.py OUT_DIR --nodes 10000 --tenants 200

Writes one file per site (200 nodes each, hub-and-spoke mesh with a relay hub, mixed
GPU models, NAT'd spokes), shared profiles, priorities and an Allocation with
``--tenants`` queues whose quotas fit the generated capacity. Derived mesh addresses
that collide are pinned, as an operator would; with ``--mesh-record`` the mesh is a /16
(the issue's case: ~760 colliding pairs at 10,000 nodes) and every address is recorded in a
MeshAddresses document instead, as ``swarm mesh allocate`` writes it (no pins).
``--cluster`` adds the cluster layer's inputs: a Cluster document, Storage with NVMe scratch
(a local PersistentVolume per node) and a claim per tenant, caps on every tenant and a Ray
cluster on every 10th. The result validates clean.
"""

from __future__ import annotations

import argparse
import ipaddress
import re
import shutil
from pathlib import Path

from swarm_infra.resolve.mesh import derived_address

MODELS = ["H100-SXM5-80GB", "A100-SXM4-80GB", "L40S", "RTX-4090"]
FLAVORS = {
    "H100-SXM5-80GB": "h100-sxm5-80gb",
    "A100-SXM4-80GB": "a100-sxm4-80gb",
    "L40S": "l40s",
    "RTX-4090": "rtx-4090",
}
PER_SITE = 200
MESH = ipaddress.IPv4Network("10.128.0.0/9")
RECORD_MESH = ipaddress.IPv4Network("10.200.0.0/16")
HEAD = "apiVersion: swarm.io/v1alpha1\n"


def generate(out: Path, nodes: int, tenants: int, cluster: bool = False, mesh_record: bool = False) -> None:
    if mesh_record:
        _generate(out, nodes, tenants, cluster, RECORD_MESH)
        _record(out, RECORD_MESH)
    else:
        _generate(out, nodes, tenants, cluster, MESH)


def _record(out: Path, cidr: ipaddress.IPv4Network) -> None:
    """Replace the pins by a MeshAddresses record: what `swarm mesh allocate` writes."""
    from swarm_infra.resolve.mesh import probe_address, record_yaml

    names = []
    for f in sorted((out / "nodes").glob("*.yaml")):
        text = f.read_text()
        names += [line.split(": ", 1)[1] for line in text.splitlines() if line.startswith("  name: ")]
        f.write_text(re.sub(r", address: [0-9.]+\}", "}", text))
    taken: set[ipaddress.IPv4Address] = set()
    record = {}
    for name in sorted(names):  # allocate's order
        addr = probe_address(cidr, name, taken)
        assert addr is not None
        taken.add(addr)
        record[name] = addr
    (out / "mesh-addresses.yaml").write_text(record_yaml("bench", record))


def _generate(out: Path, nodes: int, tenants: int, cluster: bool, mesh_cidr: ipaddress.IPv4Network) -> None:
    MESH = mesh_cidr
    if out.exists():
        shutil.rmtree(out)
    (out / "nodes").mkdir(parents=True)
    sites = (nodes + PER_SITE - 1) // PER_SITE
    taken: set[ipaddress.IPv4Address] = set()
    spare = iter(MESH.hosts())
    gpus = dict.fromkeys(MODELS, 0)
    site_docs = []
    for s in range(sites):
        site = f"site-{s:03d}"
        base = f"10.{s // 250}.{s % 250}"
        site_docs.append(
            f"---\n{HEAD}kind: Site\nmetadata: {{name: {site}}}\nspec:\n  region: r{s % 7}\n"
            f"  underlay: {{cidr: {base}.0/24}}\n  wan: {{latency_ms: {5 + s % 90}}}\n"
        )
        docs = []
        count = min(PER_SITE, nodes - s * PER_SITE)
        for i in range(count):
            name = f"{site}-n{i:03d}"
            addr = derived_address(MESH, name)
            mesh = "{nat: true}" if i else f"{{endpoint: 198.18.{s // 250}.{s % 250}}}"
            if addr in taken:  # pin the newcomer, as the validator asks
                addr = next(a for a in spare if a not in taken)
                mesh = mesh[:-1] + f", address: {addr}}}"
            taken.add(addr)
            model = MODELS[(s + i) % len(MODELS)]
            count_gpus = 0 if i == 0 else 8
            gpus[model] += count_gpus
            roles = "[relay]" if i == 0 else "[gpu-worker]"
            gpu_line = f"\n    gpus: [{{model: {model}, count: 8}}]" if count_gpus else ""
            docs.append(
                f"---\n{HEAD}kind: Node\nmetadata:\n  name: {name}\n"
                f"  labels: {{provider: p{s % 13}, tier: t{i % 3}}}\n"
                f"spec:\n  site: {site}\n  address: {base}.{i + 10 if i < 240 else i - 230}\n"
                f"  ssh: {{user: swarm}}\n  roles: {roles}\n  hardware:\n    cpus: 64\n    memory_gib: 512"
                f"{gpu_line}\n    nvme: [{{device: /dev/nvme0n1, size_gib: 3840}}]\n"
                f"    nic_speed_gbps: 100\n  mesh: {mesh}\n"
            )
        (out / "nodes" / f"{site}.yaml").write_text("".join(docs))
    (out / "sites.yaml").write_text("".join(site_docs))
    (out / "mesh.yaml").write_text(
        f"---\n{HEAD}kind: Mesh\nmetadata: {{name: bench}}\nspec: {{cidr: {MESH}, topology: hub-and-spoke}}\n"
    )
    profiles = [
        f"---\n{HEAD}kind: GpuProfile\nmetadata: {{name: {FLAVORS[m]}}}\n"
        f"spec: {{persistence_mode: true, power_limit_percent: 90, compute_mode: DEFAULT}}\n"
        f"---\n{HEAD}kind: Assignment\nmetadata: {{name: gpu-{FLAVORS[m]}}}\n"
        f"spec: {{selector: {{gpu_models: [{m}]}}, gpu_profile: {FLAVORS[m]}}}\n"
        for m in MODELS
    ]
    profiles.append(
        f"---\n{HEAD}kind: HostProfile\nmetadata: {{name: tuned}}\nspec:\n  swappiness: 10\n"
        "  sysctls: {net.core.rmem_max: 268435456, net.ipv4.tcp_rmem: [4096, 131072, 268435456]}\n"
        f"---\n{HEAD}kind: Assignment\nmetadata: {{name: all}}\n"
        "spec: {selector: {}, host_profile: tuned}\n"
    )
    for p, v in (("high", 1000), ("normal", 100), ("low", 0)):
        profiles.append(f"---\n{HEAD}kind: Priority\nmetadata: {{name: {p}}}\nspec: {{value: {v}}}\n")
    (out / "policies.yaml").write_text("".join(profiles))
    queues, tenant_docs = [], []
    for t in range(tenants):
        quotas = ", ".join(
            f"{{flavor: {FLAVORS[m]}, nominal_quota: {gpus[m] // tenants}, borrowing_limit: 8}}"
            for m in MODELS
        )
        queues.append(f"    - {{name: q{t:03d}, cohort: c{t % 10}, quotas: [{quotas}]}}\n")
        tenant_docs.append(f"    - {{name: tenant-{t:03d}, queue: q{t:03d}, priorities: [normal, low]}}\n")
    if cluster:  # the cluster layer's inputs too: caps on every tenant, a Ray cluster on every 10th
        tenant_docs = [
            doc[:-2]
            + ", caps: {gpus: 64, cpu: 2048, memory_gib: 16384, pods: 500, storage_gib: 10240}"
            + (
                f", ray: {{version: 2.41.0, priority: normal, head: {{cpus: 4, memory_gib: 16}}, workers: "
                f"[{{flavor: {FLAVORS[MODELS[t % len(MODELS)]]}, min_replicas: 1, max_replicas: 1}}]}}"
                if t % 10 == 0
                else ""
            )
            + "}\n"
            for t, doc in enumerate(tenant_docs)
        ]
        volumes = "".join(
            f"    - {{name: data, tenant: tenant-{t:03d}, class: shared, size_gib: 1024, purpose: dataset}}\n"
            for t in range(tenants)
        )
        (out / "cluster.yaml").write_text(
            f"---\n{HEAD}kind: Cluster\nmetadata: {{name: bench}}\nspec: {{labels: {{env: bench}}}}\n"
            f"---\n{HEAD}kind: Storage\nmetadata: {{name: bench}}\n"
            "spec:\n  scratch: {mount_path: /scratch}\n"
            "  classes: [{name: shared, provisioner: nfs.csi.k8s.io, default: true}]\n  volumes:\n" + volumes
        )
    (out / "allocation.yaml").write_text(
        f"---\n{HEAD}kind: Allocation\nmetadata: {{name: bench}}\nspec:\n  queues:\n"
        + "".join(queues)
        + "  tenants:\n"
        + "".join(tenant_docs)
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("out", type=Path)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--tenants", type=int, default=200)
    parser.add_argument(
        "--cluster", action="store_true", help="add the cluster layer's inputs (storage, caps, Ray clusters)"
    )
    parser.add_argument(
        "--mesh-record", action="store_true", help="a /16 mesh with a MeshAddresses record instead of pins"
    )
    args = parser.parse_args()
    generate(args.out, args.nodes, args.tenants, args.cluster, args.mesh_record)


if __name__ == "__main__":
    main()
