"""Protocol tuning on an emulated WAN: one TCP stream over the mesh between two sites at a
long RTT, with stock kernel settings and with the long-fat-network HostProfile, side by side
in one run.

    sudo .venv/bin/python benchmarks/bench_wan_tuning.py [--rtt-ms 400] [--seconds 20]

Needs root and no lab up. Brings up a copy of the lab fleet whose site lab-b sits behind a
WAN delay line of RTT/2 each way (lab/wanlink.py; no jitter, no loss), without Ray, and:
  1. converges the host and mesh layers with the GPU workers on HostProfile ``base`` (stock
     TCP settings) and measures, from lab-gpu-1 (lab-a) to lab-gpu-2 (lab-b) over wg0:
     the RTT (ping p50), then iperf3 single stream (``-O 3``: slow start left out);
  2. measures what bounds the tuned rate: the delay line itself (underlay, ``-P 8``) and
     WireGuard (wireguard-go on this host) on the mesh inside site lab-a, where no delay
     line sits;
  3. moves the workers to HostProfile ``long-fat-network``, converges the host layer
     again, and repeats the single stream.
It prints the figures, the ratio tuned/stock, the window/RTT bound the stock settings
predict, and each node's TCP settings as read back, including the keys a lab node cannot
set (host-global sysctls, read-only in its network namespace).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.labkit import on_node, swarm  # noqa: E402

from swarm_infra.fleet.sources import fleet_paths  # noqa: E402
from swarm_infra.metrics import probes  # noqa: E402
from swarm_infra.metrics.iperf3 import parse_iperf3  # noqa: E402
from swarm_infra.metrics.ping import parse_ping  # noqa: E402
from swarm_infra.resolve import desired_state, load_fleet  # noqa: E402

SENDER, RECEIVER, NEIGHBOUR = "lab-gpu-1", "lab-gpu-2", "lab-head-1"
KEYS = (
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
    "net.ipv4.tcp_congestion_control",
    "net.core.rmem_max",
    "net.core.default_qdisc",
)


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    if old not in text:
        sys.exit(f"{path}: {old!r} not found; the lab fleet changed, update this benchmark")
    path.write_text(text.replace(old, new))


def mbit(src: str, dst: str, address: str, seconds: int, streams: int, reverse: bool = False) -> float:
    """iperf3 from ``src`` to ``dst`` (server on ``dst`` at ``address``; with ``reverse`` the
    server is ``src`` and ``dst`` pulls), Mbit/s received."""
    server, client = (src, dst) if reverse else (dst, src)
    on_node(server, probes.iperf3_server(address, seconds + 60))
    out = on_node(
        client, probes.iperf3_client(address, seconds, streams, reverse) + " -O 3", timeout=seconds + 90
    )
    got = {m.field: m.value for m in parse_iperf3(out.stdout)}
    return got["end.sum_received.bits_per_second"] / 1e6


def settings(node: str) -> dict[str, str]:
    """Each of KEYS as the node reads it ("not in this namespace" where it cannot)."""
    out = {}
    for key in KEYS:
        read = on_node(node, f"sysctl -n {key}", check=False)
        out[key] = " ".join(read.stdout.split()) if read.returncode == 0 else "not in this namespace"
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--rtt-ms", type=int, default=400, help="emulated RTT between the sites (default: 400)"
    )
    parser.add_argument("--seconds", type=int, default=20, help="seconds per iperf3 test (default: 20)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-wan-") as tmp:
        repo = Path(tmp)
        (repo / "inventory").mkdir()
        shutil.copytree(ROOT / "inventory/lab", repo / "inventory/lab")
        shutil.copytree(ROOT / "policies", repo / "policies")
        (repo / "policies/lab/ray.yaml").unlink()  # Ray plays no part here
        edit(
            repo / "inventory/lab/sites.yaml",
            "wan: {latency_ms: 20, jitter_ms: 2, loss_percent: 0}",
            f"wan: {{latency_ms: {args.rtt_ms // 2}, jitter_ms: 0, loss_percent: 0}}",
        )
        assignments = repo / "policies/lab/assignments.yaml"
        edit(assignments, "host_profile: gpu-node", "host_profile: base")
        inventory = repo / "inventory/lab"
        paths = fleet_paths(inventory)
        state = desired_state(load_fleet(paths))
        mesh_ip = {n: s["mesh"]["address"].split("/")[0] for n, s in state["nodes"].items()}
        underlay = {n: s["address"] for n, s in state["nodes"].items()}
        swarm("lab", "up", *paths)
        try:
            for layer in ("host", "mesh"):
                swarm("converge", "--engine", "pyinfra", "-i", str(inventory), "--layer", layer)
            ping = on_node(SENDER, f"ping -n -c 20 -i 0.2 {mesh_ip[RECEIVER]}").stdout
            rtt = next(m.value for m in parse_ping(ping) if m.field == "rtt.p50")
            stock = settings(RECEIVER), settings(SENDER)
            stock_mbit = mbit(SENDER, RECEIVER, mesh_ip[RECEIVER], args.seconds, 1)
            # The receiver is behind NAT: the underlay test pulls from the sender (-R).
            line = mbit(SENDER, RECEIVER, underlay[SENDER], args.seconds, 8, reverse=True)
            wireguard = mbit(SENDER, NEIGHBOUR, mesh_ip[NEIGHBOUR], args.seconds, 1)
            edit(assignments, "host_profile: base", "host_profile: long-fat-network")
            swarm("converge", "--engine", "pyinfra", "-i", str(inventory), "--layer", "host")
            tuned = settings(RECEIVER), settings(SENDER)
            tuned_mbit = mbit(SENDER, RECEIVER, mesh_ip[RECEIVER], args.seconds, 1)
        finally:
            subprocess.run([sys.executable, "-m", "swarm_infra.cli", "lab", "down"], cwd=ROOT, check=False)
    # The window is bounded by the receiver's tcp_rmem max and the sender's tcp_wmem max.
    rmem_max = int(stock[0]["net.ipv4.tcp_rmem"].split()[2])
    wmem_max = int(stock[1]["net.ipv4.tcp_wmem"].split()[2])
    window = min(rmem_max, wmem_max)
    print(f"path: {SENDER} (lab-a) -> {RECEIVER} (lab-b, behind NAT) over wg0, RTT p50 {rtt:.1f} ms")
    print(
        f"stock: receiver's tcp_rmem max {rmem_max} B, sender's tcp_wmem max {wmem_max} B; "
        f"window/RTT bound {window * 8 / rtt / 1e3:.0f} Mbit/s"
    )
    print("  (the kernel keeps part of each buffer for overhead, so the window stays below it)")
    print(f"ceiling, the delay line (underlay, -P 8):        {line:8.1f} Mbit/s")
    print(f"ceiling, WireGuard on this host (mesh, no delay): {wireguard:8.1f} Mbit/s")
    print(f"single stream, stock (HostProfile base):          {stock_mbit:8.1f} Mbit/s")
    print(f"single stream, HostProfile long-fat-network:      {tuned_mbit:8.1f} Mbit/s")
    print(f"ratio tuned / stock: {tuned_mbit / stock_mbit:.2f}x (target >= 2.5x)")
    for label, (recv, send) in (("stock", stock), ("tuned", tuned)):
        print(f"{label}: receiver {recv}")
        print(f"{label}: sender   {send}")
    print("net.core.* keys are host-global: a lab node reads the host's values and cannot set them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
