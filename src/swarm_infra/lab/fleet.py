"""Lab fleets of any size: ``inventory/lab-N`` and ``policies/lab-N``, made from the lab fleet.

The lab runs what a fleet declares, so a bigger lab is a bigger fleet: real Node documents
that the lab, both engines and verification read alike (``swarm lab fleet --nodes 16``,
then ``--fleet lab-16`` everywhere). The sites are the lab's; the nodes are its head
(``lab-head-1``, the relay) and N-1 GPU workers with simulated GPUs and a scratch device,
alternating between the two sites (H100s in ``lab-a``; A100s in ``lab-b``, behind NAT),
at the next free addresses. The policies are the lab's own, copied (the Ray cluster left
out with ``ray=False``: installing Ray is a minute of pip per node).
"""

from __future__ import annotations

import ipaddress
import shutil
from pathlib import Path

from ..fleet.sources import convention_paths
from ..resolve.mesh import derived_address

SITES = (("lab-a", "10.77.1", "H100-SXM5-80GB", False), ("lab-b", "10.77.2", "A100-SXM4-80GB", True))
FIRST_WORKER_HOST = 11  # lab-gpu-1 is 10.77.1.11, as in the lab fleet
RAY_POLICY = "ray.yaml"


def _node(name: str, site: str, address: str, roles: str, extra: str = "") -> str:
    return (
        "---\napiVersion: swarm.io/v1alpha1\nkind: Node\n"
        f"metadata:\n  name: {name}\n  labels: {{tier: {'control' if 'head' in roles else 'training'}}}\n"
        f"spec:\n  site: {site}\n  address: {address}\n  roles: [{roles}]\n{extra}"
    )


def nodes_yaml(
    count: int, mesh_cidr: str = "10.210.0.0/24", reserved: tuple[ipaddress.IPv4Address, ...] = ()
) -> str:
    """The Node documents of a lab fleet of ``count`` nodes (at least 2: the head and one
    worker; at most what the sites' /24s hold). A node whose derived mesh address collides
    with an earlier node's, or with one of ``reserved`` (the mesh controller's: Mesh
    ``spec.controller``), is pinned to the next free one, as the validator asks an operator
    to (``mesh.address-collision``)."""
    cidr = ipaddress.IPv4Network(mesh_cidr)
    taken: set[ipaddress.IPv4Address] = {derived_address(cidr, "lab-head-1"), *reserved}
    spare = (a for a in cidr.hosts())
    if not 2 <= count <= 2 * (254 - FIRST_WORKER_HOST):
        raise ValueError(f"a lab fleet has 2 to {2 * (254 - FIRST_WORKER_HOST)} nodes, not {count}")
    docs = [
        f"# A lab fleet of {count} nodes, made by `swarm lab fleet --nodes {count}` from the lab fleet.\n",
        _node("lab-head-1", "lab-a", "10.77.1.10", "head, relay", "  hardware: {cpus: 2, memory_gib: 4}\n"),
    ]
    for i in range(1, count):
        site, prefix, model, nat = SITES[(i - 1) % 2]
        host = FIRST_WORKER_HOST + (i - 1) // 2
        extra = (
            "  gpu_backend: simulated\n  hardware:\n    cpus: 2\n    memory_gib: 16\n"
            f"    gpus: [{{model: {model}, count: 2}}]\n    nvme: [{{device: /dev/nvme0n1, size_gib: 1}}]\n"
            + ("  mesh: {nat: true}\n" if nat else "")
        )
        name = f"lab-gpu-{i}"
        address = derived_address(cidr, name)
        if address in taken:
            address = next(a for a in spare if a not in taken)
            extra += f"  mesh: {{address: {address}{', nat: true' if nat else ''}}}\n"
            extra = extra.replace("  mesh: {nat: true}\n", "", 1)
        taken.add(address)
        docs.append(_node(name, site, f"{prefix}.{host}", "gpu-worker", extra))
    return "".join(docs)


def write_lab_fleet(base: Path, count: int, ray: bool = True) -> list[Path]:
    """Write fleet ``lab-COUNT`` under ``base`` (a repository root: ``inventory/lab-COUNT``
    and ``policies/lab-COUNT``, replaced if they exist) from the lab fleet there; returns
    the directories written. Raises ValueError for a count out of range, FileNotFoundError
    without the lab fleet."""
    name = f"lab-{count}"
    src_inventory, src_policies, _ = convention_paths(base, "lab")
    inventory, policies, _ = convention_paths(base, name)
    from ..resolve import load_fleet

    analysis = load_fleet([str(p) for p in convention_paths(base, "lab") if p.exists()])
    lab, controller = analysis.fleet, analysis.controller_address
    text = nodes_yaml(
        count,
        str(lab.mesh.cidr) if lab.mesh else "10.210.0.0/24",
        (controller,) if controller is not None else (),  # the lab's controller is a mesh member
    )
    for d in (inventory, policies):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    shutil.copy2(src_inventory / "sites.yaml", inventory / "sites.yaml")
    (inventory / "nodes.yaml").write_text(text)
    # The policies and the files they name (Ray's lock): every regular file.
    for f in sorted(p for p in src_policies.iterdir() if p.is_file()):
        if ray or f.name != RAY_POLICY:
            shutil.copy2(f, policies / f.name)
    return [inventory, policies]
