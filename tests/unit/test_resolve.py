"""Resolver: determinism, stable addressing, topology invariants, profile resolution."""

from __future__ import annotations

import ipaddress
import json
import shutil
from pathlib import Path

import pytest

from swarm_infra import desired_state, load_fleet, validate
from swarm_infra.resolve.mesh import derived_address

from .conftest import fleet_dirs


@pytest.fixture(scope="module")
def example() -> dict:
    return desired_state(load_fleet(fleet_dirs("example")))


@pytest.mark.parametrize("fleet", ["lab", "example"])
def test_example_fleets_validate_clean(fleet: str) -> None:
    report = validate(fleet_dirs(fleet)).report
    assert report.diagnostics == []


def test_same_input_gives_byte_identical_output() -> None:
    a = json.dumps(desired_state(load_fleet(fleet_dirs("example"))), sort_keys=True)
    b = json.dumps(desired_state(load_fleet(list(reversed(fleet_dirs("example"))))), sort_keys=True)
    assert a == b


def test_adding_a_node_keeps_every_existing_mesh_address(tmp_path: Path) -> None:
    for d in fleet_dirs("example"):
        shutil.copytree(d, tmp_path / d.parent.name / d.name)
    before = desired_state(load_fleet([tmp_path]))["nodes"]
    extra = tmp_path / "inventory" / "example" / "nodes" / "fra1.yaml"
    extra.write_text(
        extra.read_text()
        + """---
apiVersion: swarm.io/v1alpha1
kind: Node
metadata: {name: fra1-gpu-11}
spec:
  site: fra1
  address: 10.10.0.31
  roles: [gpu-worker]
  hardware: {cpus: 192, memory_gib: 2048, gpus: [{model: H100-SXM5-80GB, count: 8}]}
  mesh: {endpoint: 203.0.113.31}
"""
    )
    after = desired_state(load_fleet([tmp_path]))["nodes"]
    assert set(after) - set(before) == {"fra1-gpu-11"}
    assert all(after[n]["mesh"]["address"] == before[n]["mesh"]["address"] for n in before)


def test_derived_address_is_a_pure_function_of_name() -> None:
    cidr = ipaddress.IPv4Network("10.200.0.0/16")
    assert derived_address(cidr, "fra1-gpu-01") == derived_address(cidr, "fra1-gpu-01")
    addr = derived_address(cidr, "x")
    assert addr in cidr and addr not in (cidr.network_address, cidr.broadcast_address)


def _peering(nodes: dict) -> dict[str, dict[str, dict]]:
    return {n: {p["name"]: p for p in s["mesh"]["peers"]} for n, s in nodes.items()}


def test_peering_is_symmetric(example: dict) -> None:
    peering = _peering(example["nodes"])
    for node, peers in peering.items():
        for peer in peers:
            assert node in peering[peer], f"{node} peers {peer} but not back"


def test_every_node_routes_every_other_exactly_once(example: dict) -> None:
    nodes = example["nodes"]
    addr = {n: ipaddress.IPv4Interface(s["mesh"]["address"]).ip for n, s in nodes.items()}
    for name, state in nodes.items():
        for other, ip in addr.items():
            if other == name:
                continue
            covering = [
                p["name"]
                for p in state["mesh"]["peers"]
                if any(ip in ipaddress.IPv4Network(c) for c in p["allowed_ips"])
            ]
            assert len(covering) == 1, (name, other, covering)


def test_spokes_have_only_their_hub_and_hubs_forward(example: dict) -> None:
    nodes = example["nodes"]
    spoke = nodes["tyo1-gpu-01"]["mesh"]
    assert [p["name"] for p in spoke["peers"]] == ["tyo1-relay-01"]
    assert spoke["peers"][0]["allowed_ips"] == ["10.200.0.0/16"]
    assert nodes["tyo1-relay-01"]["mesh"]["forwarding"] is True
    assert nodes["fra1-gpu-01"]["mesh"]["forwarding"] is False


def test_keepalive_only_on_the_natted_side_across_sites() -> None:
    nodes = desired_state(load_fleet(fleet_dirs("lab")))["nodes"]
    natted = {p["name"]: p for p in nodes["lab-gpu-2"]["mesh"]["peers"]}
    assert {p["persistent_keepalive_s"] for p in natted.values()} == {25}
    public = {p["name"]: p for p in nodes["lab-gpu-1"]["mesh"]["peers"]}
    assert public["lab-gpu-2"]["persistent_keepalive_s"] == 0
    assert public["lab-gpu-2"]["endpoint"] is None  # NAT'd: it connects to us
    assert public["lab-head-1"]["endpoint"] == "10.77.1.10:51820"


def test_natted_nodes_of_different_sites_meet_through_a_relay(tmp_path: Path) -> None:
    docs = [
        "---\napiVersion: swarm.io/v1alpha1\nkind: Site\nmetadata: {name: " + s + "}\n"
        "spec: {region: r, underlay: {cidr: " + c + "}}\n"
        for s, c in (("s1", "10.1.0.0/24"), ("s2", "10.2.0.0/24"), ("s3", "10.3.0.0/24"))
    ]
    for name, site, addr, extra in (
        ("a", "s1", "10.1.0.5", "mesh: {nat: true}"),
        ("b", "s2", "10.2.0.5", "mesh: {nat: true}"),
        ("r", "s3", "10.3.0.5", "mesh: {endpoint: 192.0.2.1}"),
    ):
        docs.append(
            f"---\napiVersion: swarm.io/v1alpha1\nkind: Node\nmetadata: {{name: {name}}}\n"
            f"spec: {{site: {site}, address: {addr}, roles: [{'relay' if name == 'r' else 'cpu-worker'}], "
            f"hardware: {{cpus: 1, memory_gib: 1}}, {extra}}}\n"
        )
    docs.append(
        "---\napiVersion: swarm.io/v1alpha1\nkind: Mesh\nmetadata: {name: m}\nspec: {cidr: 10.9.0.0/24}\n"
    )
    (tmp_path / "f.yaml").write_text("".join(docs))
    nodes = desired_state(load_fleet([tmp_path]))["nodes"]
    a_peers = {p["name"]: p for p in nodes["a"]["mesh"]["peers"]}
    b_ip = nodes["b"]["mesh"]["address"].split("/")[0] + "/32"
    assert set(a_peers) == {"r"} and b_ip in a_peers["r"]["allowed_ips"]
    assert a_peers["r"]["endpoint"] == "192.0.2.1:51820"
    assert nodes["r"]["mesh"]["forwarding"] is True


def test_gpu_settings_per_gpu_and_percent_resolved_to_watts(example: dict) -> None:
    gpu = example["nodes"]["tyo1-gpu-01"]["gpu"]
    assert [d["index"] for d in gpu["devices"]] == [0, 1]
    assert gpu["devices"][0]["settings"]["power_limit_w"] == 360  # 80% of 450 W
    assert gpu["limits"]["RTX-4090"]["power"]["max_w"] == 600


def test_host_profile_includes_apply_in_order_and_later_wins(example: dict) -> None:
    host = example["nodes"]["fra1-gpu-01"]["host"]
    assert host["profile"] == "gpu-node"  # precedence 10 beats every-node's 0
    assert host["sysctls"]["vm.swappiness"] == 10
    assert host["sysctls"]["net.ipv4.tcp_rmem"] == [4096, 131072, 268435456]
    assert host["sysctls"]["vm.max_map_count"] == 262144  # from base, two includes deep
    assert host["hugepages"] == {"size_kib": 2048, "count": 4096}
    assert list(host["sysctls"]) == sorted(host["sysctls"])


def test_cluster_capacity_and_queues(example: dict) -> None:
    cluster = example["cluster"]
    assert cluster["capacity"]["h100-sxm5-80gb"] == {"gpus": 80, "nominal_quota": 72, "unallocated": 8}
    assert [q["name"] for q in cluster["cluster_queues"]] == ["acme-ai", "community", "helix-labs"]
    assert cluster["cohorts"] == ["swarm"]
    assert [p["name"] for p in cluster["priorities"]] == ["production", "batch", "spot"]
