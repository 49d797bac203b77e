"""Mesh addressing at thousands of nodes: the MeshAddresses record (``swarm mesh allocate``).

What must hold (issue #27, "Mesh addressing at thousands of nodes"): addresses are stable
under additions and removals (no allocation ever moves a node that has one), and 10,000
nodes get distinct addresses with no hand pins. The expected values come from the rule
(distinct usable host addresses of the CIDR, unchanged entries), never from a previous run.
"""

from __future__ import annotations

import hashlib
import ipaddress
import random
import shutil
from pathlib import Path
from types import MappingProxyType

import pytest
import yaml

from swarm_infra import cli, desired_state, load_fleet, validate
from swarm_infra.fleet.diagnostics import Source
from swarm_infra.fleet.model import Mesh, MeshAddresses, Node
from swarm_infra.resolve.mesh import allocate, assign_addresses, derived_address, probe_address

from .conftest import fleet_dirs

SRC = Source("nodes.yaml", 0, 1)
RECORD_SRC = Source("mesh-addresses.yaml", 0, 1)


def _node(name: str, pin: str | None = None) -> Node:
    return Node(
        name=name,
        source=SRC,
        labels=MappingProxyType({}),
        site="s1",
        address=ipaddress.IPv4Address("192.0.2.1"),
        ssh_host="192.0.2.1",
        roles=("cpu-worker",),
        cpus=1,
        memory_gib=1,
        mesh_address=ipaddress.IPv4Address(pin) if pin else None,
    )


def _mesh(cidr: str) -> Mesh:
    return Mesh(name="m", source=SRC, cidr=ipaddress.IPv4Network(cidr))


def _record(addresses: dict[str, ipaddress.IPv4Address]) -> MeshAddresses:
    return MeshAddresses(name="m", source=RECORD_SRC, addresses=MappingProxyType(dict(addresses)))


def _usable(cidr: ipaddress.IPv4Network, addr: ipaddress.IPv4Address) -> bool:
    return addr in cidr and addr not in (cidr.network_address, cidr.broadcast_address)


def test_derived_addresses_collide_at_fleet_sizes_the_issue_names() -> None:
    """Why a record is needed: hashing 1,500 names into a /16 already collides (birthday
    bound: n(n-1)/2 / 65,534 ~ 17 pairs expected), 10,000 names ~ 763 pairs; without a
    record each is an error that only a hand pin would clear."""
    mesh = _mesh("10.200.0.0/16")
    for count, at_least in ((1_500, 1), (10_000, 500)):
        nodes = {f"site-gpu-{i:05d}": _node(f"site-gpu-{i:05d}") for i in range(count)}
        _, findings = assign_addresses(mesh, nodes)
        collisions = [f for f in findings if f.rule == "mesh.address-collision"]
        assert len(collisions) >= at_least, (count, len(collisions))


def test_ten_thousand_nodes_get_distinct_addresses_without_pins() -> None:
    mesh = _mesh("10.200.0.0/16")
    names = [f"prov{i % 97:02d}-gpu-{i:05d}" for i in range(10_000)]
    nodes = {n: _node(n) for n in names}
    record, _ = allocate(mesh, nodes)
    assert set(record) == set(names)
    assert len(set(record.values())) == 10_000
    assert all(_usable(mesh.cidr, a) for a in record.values())
    assert not any(n.mesh_address for n in nodes.values())  # no pins
    addresses, findings = assign_addresses(mesh, nodes, _record(record))
    assert findings == []
    assert addresses == record
    # Most nodes sit at their derived address; only the birthday collisions probe further.
    moved = sum(record[n] != derived_address(mesh.cidr, n) for n in names)
    assert 0 < moved < 1_000


@pytest.mark.parametrize("seed", range(8))
def test_additions_and_removals_never_move_an_existing_address(seed: int) -> None:
    """Random histories of additions and removals (and a few pins) in a /24 that fills up
    to ~70%, so derived addresses collide all the time: after every allocation each node
    that had an address keeps it, no address is held twice, and the record validates."""
    rng = random.Random(seed)
    mesh = _mesh("10.9.0.0/24")
    nodes: dict[str, Node] = {}
    record: dict[str, ipaddress.IPv4Address] | None = None
    serial = 0
    for _ in range(120):
        if nodes and rng.random() < 0.35:
            for name in rng.sample(sorted(nodes), k=min(len(nodes), rng.randint(1, 4))):
                del nodes[name]
        else:
            for _ in range(rng.randint(1, 6)):
                if len(nodes) >= 180:
                    break
                serial += 1
                name = f"n{serial}-{rng.getrandbits(24):06x}"
                pin = None
                if rng.random() < 0.05:  # an operator's pin on a free address
                    held = {*(record or {}).values(), *(n.mesh_address for n in nodes.values())}
                    pin = str(next(a for a in mesh.cidr.hosts() if a not in held))
                nodes[name] = _node(name, pin)
        before = dict(record or {})
        record, _ = allocate(mesh, nodes, record)
        for name, addr in before.items():
            if name in nodes and nodes[name].mesh_address is None:
                assert record[name] == addr, (name, addr, record[name])
        pins = [n.mesh_address for n in nodes.values() if n.mesh_address is not None]
        assert set(record) == {n for n, node in nodes.items() if node.mesh_address is None}
        assert len({*record.values(), *pins}) == len(record) + len(pins)
        addresses, findings = assign_addresses(mesh, nodes, _record(record))
        assert findings == []
        assert set(addresses) == set(nodes)


def test_a_new_node_probes_past_held_addresses_and_wraps() -> None:
    cidr = ipaddress.IPv4Network("10.9.0.0/29")  # usable: .1 to .6
    name = next(n for n in (f"x{i}" for i in range(1000)) if derived_address(cidr, n) == cidr[6])
    assert probe_address(cidr, name, set()) == cidr[6]
    assert probe_address(cidr, name, {cidr[6]}) == cidr[1]  # wraps to the first usable host
    assert probe_address(cidr, name, {cidr[6], cidr[1], cidr[2]}) == cidr[3]
    assert probe_address(cidr, name, set(cidr.hosts())) is None


def test_allocate_keeps_recorded_entries_and_drops_gone_and_pinned_nodes() -> None:
    mesh = _mesh("10.9.0.0/24")
    a, b = _node("a"), _node("b")
    home_a = derived_address(mesh.cidr, "a")
    # b's entry is a's derived address: a (new) must probe past it, b keeps it.
    record, changes = allocate(mesh, {"a": a, "b": b}, {"b": home_a, "gone": mesh.cidr[5]})
    assert record["b"] == home_a
    assert record["a"] == probe_address(mesh.cidr, "a", {home_a})
    assert "gone" not in record and any("dropped gone" in c for c in changes)
    pinned, _ = allocate(mesh, {"a": _node("a", "10.9.0.9"), "b": b}, record)
    assert pinned == {"b": home_a}


def test_validation_names_unrecorded_stale_duplicate_and_outside_entries() -> None:
    mesh = _mesh("10.9.0.0/24")
    nodes = {n: _node(n) for n in ("a", "b", "c")} | {"p": _node("p", "10.9.0.9")}
    record = _record(
        {
            "a": ipaddress.IPv4Address("10.9.0.10"),
            "b": ipaddress.IPv4Address("10.9.0.10"),  # held by a
            "p": ipaddress.IPv4Address("10.9.0.11"),  # p pins its own
            "gone": ipaddress.IPv4Address("10.9.0.12"),
            "maybe": ipaddress.IPv4Address("10.9.0.13"),  # a Node document that failed its schema
        }
    )
    addresses, findings = assign_addresses(mesh, nodes, record, lambda name: name == "maybe")
    got = {(f.rule, f.source.file, f.path) for f in findings}
    assert got == {
        ("mesh.address-duplicate", "mesh-addresses.yaml", ("spec", "addresses", "b")),
        ("mesh.address-record-stale", "mesh-addresses.yaml", ("spec", "addresses", "p")),
        ("mesh.address-record-stale", "mesh-addresses.yaml", ("spec", "addresses", "gone")),
        ("mesh.address-unrecorded", "nodes.yaml", ("metadata", "name")),
    }
    assert next(f.message for f in findings if f.rule == "mesh.address-unrecorded").startswith("node 'c'")
    assert addresses == {"a": ipaddress.IPv4Address("10.9.0.10"), "p": ipaddress.IPv4Address("10.9.0.9")}
    outside = _record({n: ipaddress.IPv4Address("10.9.0.255") for n in ("a",)})
    _, findings = assign_addresses(mesh, {"a": _node("a")}, outside)
    assert [f.rule for f in findings] == ["mesh.address-outside-cidr"]


def _example_copy(tmp_path: Path) -> Path:
    for d in fleet_dirs("example"):
        shutil.copytree(d, tmp_path / d.parent.name / d.name)
    return tmp_path


def _colliding_name(cidr: ipaddress.IPv4Network, taken: ipaddress.IPv4Address) -> str:
    """A node name whose derived address is ``taken`` (found by trying names: SHA-256)."""
    home = int(taken) - int(cidr.network_address) - 1
    usable = cidr.num_addresses - 2
    for i in range(2_000_000):
        name = f"fra1-gpu-x{i}"
        if int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big") % usable == home:
            return name
    raise AssertionError("no colliding name found")


def _mesh_addresses(root: Path) -> dict[str, str]:
    return {n: s["mesh"]["address"] for n, s in desired_state(load_fleet([root]))["nodes"].items()}


def test_swarm_mesh_allocate_on_the_example_fleet(tmp_path: Path, monkeypatch, capsys) -> None:
    """The operator's cycle: record the fleet (no address moves), add a node whose derived
    address is a running node's (valid at once after allocate, nobody moves), remove a node
    (its entry is stale, with file and line, until allocate drops it)."""
    root = _example_copy(tmp_path)
    monkeypatch.chdir(root)
    before = _mesh_addresses(root)
    assert cli.main(["mesh", "allocate", "--fleet", "example"]) == 0
    record_file = root / "inventory" / "example" / "mesh-addresses.yaml"
    doc = yaml.safe_load(record_file.read_text().split("---", 1)[1])
    assert doc["kind"] == "MeshAddresses"
    after = _mesh_addresses(root)
    assert after == before  # adopting the record moves nothing
    # A new node whose derived address is fra1-gpu-01's.
    cidr = ipaddress.IPv4Network("10.200.0.0/16")
    victim = before["fra1-gpu-01"].split("/")[0]
    newcomer = _colliding_name(cidr, ipaddress.IPv4Address(victim))
    nodes = root / "inventory" / "example" / "nodes" / "fra1.yaml"
    nodes.write_text(
        nodes.read_text()
        + f"""---
apiVersion: swarm.io/v1alpha1
kind: Node
metadata: {{name: {newcomer}}}
spec:
  site: fra1
  address: 10.10.0.77
  roles: [cpu-worker]
  hardware: {{cpus: 8, memory_gib: 32}}
  mesh: {{endpoint: 203.0.113.77}}
"""
    )
    report = validate([root]).report
    assert [d.rule for d in report.errors] == ["mesh.address-unrecorded"]
    assert report.errors[0].file.endswith("fra1.yaml") and report.errors[0].line > 1
    capsys.readouterr()
    assert cli.main(["mesh", "allocate", "--fleet", "example"]) == 0
    assert "(derived" in capsys.readouterr().out  # it says the newcomer probed past a held address
    grown = _mesh_addresses(root)
    assert {n: grown[n] for n in before} == before
    assert grown[newcomer] != grown["fra1-gpu-01"]
    # Remove a node: its entry is stale until allocate drops it; nobody else moves.
    text = nodes.read_text()
    start = text.index("  name: fra1-gpu-10\n")
    start = text.rindex("---", 0, start)
    end = text.find("---", start + 3)
    nodes.write_text(text[:start] + (text[end:] if end != -1 else ""))
    report = validate([root]).report
    assert [(d.rule, Path(d.file).name, d.path) for d in report.errors] == [
        ("mesh.address-record-stale", "mesh-addresses.yaml", "$.spec.addresses.fra1-gpu-10")
    ]
    assert report.errors[0].line > 1
    assert cli.main(["mesh", "allocate", "--fleet", "example"]) == 0
    shrunk = _mesh_addresses(root)
    assert shrunk == {n: a for n, a in grown.items() if n != "fra1-gpu-10"}


def test_allocate_refuses_while_the_fleet_has_other_errors(tmp_path: Path, monkeypatch) -> None:
    root = _example_copy(tmp_path)
    monkeypatch.chdir(root)
    mesh_file = root / "policies" / "example" / "mesh.yaml"
    mesh_file.write_text(mesh_file.read_text().replace("mtu: 1380", "mtu: 80"))
    assert cli.main(["mesh", "allocate", "--fleet", "example"]) == 2
    assert not (root / "inventory" / "example" / "mesh-addresses.yaml").exists()
