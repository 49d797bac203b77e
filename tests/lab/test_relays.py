"""Latency-aware relays on the real lab (root; CI runs it): a measured LatencyMatrix moves a
NAT-to-NAT pair off a slow relay, and the pair's ping RTT over the mesh drops by what the
sites' WAN latencies predict.

A copy of the lab fleet gains two sites behind the WAN delay line: lab-c (5 ms each way) with
a NAT'd node, and lab-far (60 ms) with a public relay whose name sorts before lab-head-1
(lab-a's relay, 0 ms). The NAT'd pair is lab-gpu-2 (lab-b, 20 ms) and lab-nat-3 (lab-c). A
LatencyMatrix that claims lab-far is near sends the pair through lab-far-relay; then
`swarm metrics run --only network --repeats 0 --write-latency-matrix` pings (no iperf3) the
real RTTs into the same file, the resolver picks lab-head-1, and a converge of the mesh layer applies it.
Only the mesh layer is converged; the lab's own shape and mesh are restored at the end.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from swarm_infra.fleet.sources import fleet_paths
from swarm_infra.metrics.ping import parse_ping
from swarm_infra.resolve import desired_state, load_fleet
from tests.labkit import fleet_copy, on_node, swarm

pytestmark = [pytest.mark.root, pytest.mark.lab]
LAB_ORDER = 38
LAB_NEEDS = LAB_LEAVES = "converged"  # it restores the lab's shape and mesh at the end

SRC, DST, FAR, NEAR = "lab-gpu-2", "lab-nat-3", "lab-far-relay", "lab-head-1"
EXTRA = """---
apiVersion: swarm.io/v1alpha1
kind: Site
metadata: {name: lab-c}
spec:
  region: local
  provider: lab
  underlay: {cidr: 10.77.3.0/24, gateway: 10.77.3.1}
  wan: {latency_ms: 5}
---
apiVersion: swarm.io/v1alpha1
kind: Site
metadata: {name: lab-far}
spec:
  region: local
  provider: lab
  underlay: {cidr: 10.77.4.0/24, gateway: 10.77.4.1}
  wan: {latency_ms: 60}
---
apiVersion: swarm.io/v1alpha1
kind: Node
metadata: {name: lab-nat-3}
spec:
  site: lab-c
  address: 10.77.3.11
  roles: [cpu-worker]
  hardware: {cpus: 2, memory_gib: 2}
  mesh: {nat: true}
---
apiVersion: swarm.io/v1alpha1
kind: Node
metadata: {name: lab-far-relay}
spec:
  site: lab-far
  address: 10.77.4.10
  roles: [relay]
  hardware: {cpus: 2, memory_gib: 2}
"""
# Claims lab-far is next to lab-b and lab-c, measured from both ends (a leg one end measured
# does not count, #38): the resolver then relays through lab-far-relay.
WRONG = {
    "apiVersion": "swarm.io/v1alpha1",
    "kind": "LatencyMatrix",
    "metadata": {"name": "measured"},
    "spec": {
        "pairs": [
            {"a": site, "b": "lab-far", "rtt_ms": 1, "a_to_b_ms": 1, "b_to_a_ms": 1}
            for site in ("lab-b", "lab-c")
        ]
    },
}


def relay_of(paths: list[str]) -> str:
    """The peer through which the resolver sends SRC's traffic to DST's mesh address."""
    state = desired_state(load_fleet(paths))
    dst = state["nodes"][DST]["mesh"]["address"].split("/")[0] + "/32"
    (peer,) = [p["name"] for p in state["nodes"][SRC]["mesh"]["peers"] if dst in p["allowed_ips"]]
    return peer


def mesh_rtt_ms(paths: list[str]) -> float:
    state = desired_state(load_fleet(paths))
    address = state["nodes"][DST]["mesh"]["address"].split("/")[0]
    out = on_node(SRC, f"ping -n -c 10 -i 0.2 -W 2 {address}").stdout
    return next(m.value for m in parse_ping(out) if m.field == "rtt.p50")


def test_a_measured_matrix_moves_the_nat_pair_to_the_fast_relay_and_its_rtt_drops(
    lab, tmp_path: Path
) -> None:
    inventory = fleet_copy(tmp_path)
    (inventory / "relay-test.yaml").write_text(EXTRA)
    matrix = inventory.parents[1] / "policies" / "lab" / "latency.yaml"
    matrix.write_text(yaml.safe_dump(WRONG))
    paths = fleet_paths(inventory)
    fleet = load_fleet(paths).fleet
    one_way = {name: site.wan["latency_ms"] for name, site in fleet.sites.items()}

    def path_rtt(relay: str) -> float:  # SRC -> relay -> DST and back, through the delay lines
        via = fleet.nodes[relay].site
        src, dst = fleet.nodes[SRC].site, fleet.nodes[DST].site
        return 2 * (one_way[src] + one_way[via] + one_way[via] + one_way[dst])

    assert relay_of(paths) == FAR
    try:
        swarm("lab", "up", *paths)
        swarm("converge", "--engine", "pyinfra", "--layer", "mesh", "-i", str(inventory))
        before = mesh_rtt_ms(paths)
        measured = swarm(
            "metrics", "run", *paths, "--fleet", "lab", "--only", "network", "--db", str(tmp_path / "m.db"),
            "--repeats", "0", "--ping-count", "10", "--write-latency-matrix", str(matrix),
            check=False,
        )  # fmt: skip
        assert measured.returncode == 0, measured.stdout[-2000:] + measured.stderr[-2000:]
        assert relay_of(paths) == NEAR  # the resolver reads the measured matrix
        swarm("converge", "--engine", "pyinfra", "--layer", "mesh", "-i", str(inventory))
        after = mesh_rtt_ms(paths)
    finally:
        swarm("lab", "up", "--fleet", "lab")  # the lab's own shape and mesh again
        swarm("converge", "--engine", "pyinfra", "--layer", "mesh", check=False)
    print(
        f"NAT pair mesh RTT p50: via {FAR} {before:.1f} ms (predicted {path_rtt(FAR):g}), "
        f"via {NEAR} {after:.1f} ms (predicted {path_rtt(NEAR):g})"
    )
    assert path_rtt(FAR) <= before <= 1.2 * path_rtt(FAR) + 5, before
    assert path_rtt(NEAR) <= after <= 1.2 * path_rtt(NEAR) + 5, after
    expected_drop = path_rtt(FAR) - path_rtt(NEAR)
    assert before - after >= 0.8 * expected_drop, (before, after, expected_drop)
