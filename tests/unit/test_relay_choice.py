"""NAT-to-NAT pairs go through the relay with the lowest path RTT (measured, else declared)."""

from __future__ import annotations

from pathlib import Path

from swarm_infra.resolve import load_fleet, mesh
from swarm_infra.resolve.mesh import relay_for


def test_relay_for_picks_the_fast_relay_over_the_first_by_name():
    relays = [("r-a", "slow"), ("r-b", "fast")]
    rtt = {("s1", "slow"): 150.0, ("slow", "s2"): 150.0, ("s1", "fast"): 10.0, ("fast", "s2"): 12.0}
    assert relay_for("s1", "s2", relays, rtt) == "r-b"
    # equal paths: the destination's own site, then the name
    assert relay_for("s1", "s2", [("r-a", "x"), ("r-b", "s2")], {("s1", "x"): 5, ("s1", "s2"): 5}) == "r-b"
    assert relay_for("s1", "s2", [("r-b", "x"), ("r-a", "x")], {("s1", "x"): 5, ("x", "s2"): 5}) == "r-a"
    # a site pair with no RTT known is never preferred to a known one
    assert relay_for("s1", "s2", [("r-a", "x"), ("r-b", "y")], {("s1", "y"): 90, ("y", "s2"): 90}) == "r-b"


def _analysis(tmp_path: Path, latency: dict[str, int]):
    sites = {"s1": "10.1.0.0/24", "s2": "10.2.0.0/24", "slow": "10.3.0.0/24", "fast": "10.4.0.0/24"}
    docs = [
        f"---\napiVersion: swarm.io/v1alpha1\nkind: Site\nmetadata: {{name: {s}}}\n"
        f"spec: {{region: r, underlay: {{cidr: {c}}}, wan: {{latency_ms: {latency[s]}}}}}\n"
        for s, c in sites.items()
    ]
    for name, site, addr, role, extra in (
        ("a", "s1", "10.1.0.5", "cpu-worker", "mesh: {nat: true}"),
        ("b", "s2", "10.2.0.5", "cpu-worker", "mesh: {nat: true}"),
        ("relay-a", "slow", "10.3.0.5", "relay", "mesh: {endpoint: 192.0.2.1}"),
        ("relay-b", "fast", "10.4.0.5", "relay", "mesh: {endpoint: 192.0.2.2}"),
    ):
        docs.append(
            f"---\napiVersion: swarm.io/v1alpha1\nkind: Node\nmetadata: {{name: {name}}}\n"
            f"spec: {{site: {site}, address: {addr}, roles: [{role}], "
            f"hardware: {{cpus: 1, memory_gib: 1}}, {extra}}}\n"
        )
    docs.append(
        "---\napiVersion: swarm.io/v1alpha1\nkind: Mesh\nmetadata: {name: m}\nspec: {cidr: 10.9.0.0/24}\n"
    )
    (tmp_path / "f.yaml").write_text("".join(docs))
    return load_fleet([tmp_path])


def _relay_from_a_to_b(a, measured=None) -> str:
    peers, forwarders = mesh.peers(a.fleet, a.topology, a.addresses, measured)
    b_ip = f"{a.addresses['b']}/32"
    (via,) = [p["name"] for p in peers["a"] if b_ip in p["allowed_ips"]]
    assert via in forwarders
    return via


def test_declared_latency_sends_a_to_b_through_the_fast_relay_not_the_first_by_name(tmp_path):
    a = _analysis(tmp_path, {"s1": 10, "s2": 10, "slow": 80, "fast": 5})
    assert _relay_from_a_to_b(a) == "relay-b"


def test_a_measured_matrix_overrides_the_declared_latency(tmp_path):
    a = _analysis(tmp_path, {"s1": 10, "s2": 10, "slow": 5, "fast": 5})  # declared: a tie
    assert _relay_from_a_to_b(a) == "relay-a"  # tie: first by name
    measured = {("s1", "slow"): 200.0, ("slow", "s2"): 200.0, ("s1", "fast"): 30.0, ("fast", "s2"): 30.0}
    assert _relay_from_a_to_b(a, measured) == "relay-b"


def test_a_latency_matrix_document_steers_the_desired_state(tmp_path):
    from swarm_infra import desired_state

    _analysis(tmp_path, {"s1": 10, "s2": 10, "slow": 5, "fast": 5})
    pairs = [("s1", "slow", 200), ("slow", "s2", 200), ("s1", "fast", 30), ("s2", "fast", 30)]
    (tmp_path / "latency.yaml").write_text(
        "apiVersion: swarm.io/v1alpha1\nkind: LatencyMatrix\nmetadata: {name: measured}\nspec:\n  pairs:\n"
        + "".join(f"  - {{a: {a}, b: {b}, rtt_ms: {ms}}}\n" for a, b, ms in pairs)
    )
    a = load_fleet([tmp_path])
    assert a.fleet.latency is not None and a.fleet.latency.rtt_ms[("fast", "s2")] == 30.0
    nodes = desired_state(a)["nodes"]
    b_ip = nodes["b"]["mesh"]["address"].split("/")[0] + "/32"
    (via,) = [p["name"] for p in nodes["a"]["mesh"]["peers"] if b_ip in p["allowed_ips"]]
    assert via == "relay-b"
