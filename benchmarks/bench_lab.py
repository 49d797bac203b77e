"""Lab timings and footprint, two node runtimes side by side: ``swarm lab up`` for 3 and 16
nodes, ``down``, memory; and what the userspace WAN link costs against a plain bridge.

    sudo .venv/bin/python benchmarks/bench_lab.py [--nodes 16] [--mib 64] [--baseline REV]

Needs root and no lab up. In one run:
  * image: cached or built (the first run builds it with debootstrap, about a minute);
  * for the baseline runtime (the hand-written system containers of commit REV, run from a
    temporary git worktree of it) and for this checkout's (systemd-nspawn), one after the
    other on the same cached image: up 3 nodes (target, issue #10: <= 5 s), a second up (no
    change), an N-node lab (the baseline's ``up --nodes N`` added N-3 synthetic nodes; this
    checkout's ``swarm lab fleet --nodes N`` writes the fleet lab-N, and ``up --fleet lab-N``
    adds its N-3 nodes), the memory the lab uses (host
    MemAvailable before and after, so it includes the nodes' page cache), then down;
  * throughput of one TCP stream of --mib MiB (plain sockets), node to node on one bridge vs
    host to node across the site's WAN link (the userspace delay line of wanlink.py; lab-a
    emulates no delay, so this is its forwarding cost alone), and
    ping RTT across lab-b's link (declared 20 ms one-way).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The last commit whose lab nodes were the hand-written system containers (node-init.sh).
BASELINE = "275be04"


def swarm(*args: str, checkout: Path = ROOT) -> tuple[float, str]:
    """Run ``swarm`` from ``checkout`` (its own src/ first on the path); (seconds, stdout)."""
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(checkout / "src")}
    proc = subprocess.run(
        [sys.executable, "-m", "swarm_infra.cli", *args],
        cwd=checkout,
        capture_output=True,
        text=True,
        env=env,
    )
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"swarm {' '.join(args)} failed:\n{proc.stdout}{proc.stderr}")
    return took, proc.stdout


def mem_available_mib() -> float:
    text = Path("/proc/meminfo").read_text()
    return int(re.search(r"MemAvailable:\s+(\d+)", text).group(1)) / 1024


def ssh_argv(node: str, command: str) -> list[str]:
    from tests.labkit import node_ssh

    return node_ssh(node, command)


SINK = "import socket; s = socket.create_server(('', 5201)); c, _ = s.accept()\nwhile c.recv(1 << 20): pass"
SOURCE = (
    "import socket, sys, time; n = int(sys.argv[2]) << 20; b = bytes(1 << 20)\n"
    "c = socket.create_connection((sys.argv[1], 5201)); t = time.perf_counter()\n"
    "for _ in range(n >> 20): c.sendall(b)\n"
    "c.shutdown(socket.SHUT_WR); c.recv(1); print(n / (1 << 20) / (time.perf_counter() - t))"
)


def tcp_throughput(source_node: str | None, sink_node: str, sink_ip: str, mib: int) -> float:
    """MiB/s of one TCP stream of ``mib`` MiB into a sink on ``sink_node``, sent from
    ``source_node`` (over its bridge) or from the host (None: across the sink site's WAN link).
    Plain sockets on both ends, so the network path is what is measured, not SSH's cipher."""
    sink = subprocess.Popen(ssh_argv(sink_node, f'python3 -c "{SINK}"'))
    probe = ssh_argv(sink_node, "until ss -ltn | grep -q :5201; do sleep 0.05; done")
    subprocess.run(probe, check=True, timeout=30)
    argv = [sys.executable, "-c", SOURCE, sink_ip, str(mib)]
    if source_node:
        argv = ssh_argv(source_node, f"python3 -c '{SOURCE}' {sink_ip} {mib}")
    rate = float(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
    sink.wait(timeout=30)
    return rate


def runtime_figures(checkout: Path, nodes: int, baseline: bool) -> dict[str, float]:
    """Up 3, up again, up ``nodes``, memory, down, with the lab code of ``checkout``."""
    free0 = mem_available_mib()
    t3, _ = swarm("lab", "up", "--fleet", "lab", checkout=checkout)
    t3again, out = swarm("lab", "up", "--fleet", "lab", checkout=checkout)
    assert "3 unchanged" in out, out
    if baseline:
        tn, _ = swarm("lab", "up", "--fleet", "lab", "--nodes", str(nodes), checkout=checkout)
    else:
        swarm("lab", "fleet", "--nodes", str(nodes), "--no-ray", checkout=checkout)
        tn, _ = swarm("lab", "up", "--fleet", f"lab-{nodes}", checkout=checkout)
    used = free0 - mem_available_mib()
    td, _ = swarm("lab", "down", checkout=checkout)
    return {"up3": t3, "again": t3again, "upn": tn, "mib": used, "down": td}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--baseline", default=BASELINE, help="commit of the hand-written runtime")
    args = parser.parse_args()

    t_image, out = swarm("lab", "up", "--fleet", "lab")
    cached = "cached" in out.splitlines()[0]
    swarm("lab", "down")
    print(f"image: {'cached' if cached else f'built in {t_image:.1f} s (debootstrap)'}")

    with tempfile.TemporaryDirectory(prefix="swarm-bench-baseline-") as tmp:
        old_tree = Path(tmp) / "tree"
        git = ["git", "-C", str(ROOT), "worktree"]
        subprocess.run([*git, "add", "-q", "--detach", str(old_tree), args.baseline], check=True)
        try:
            old = runtime_figures(old_tree, args.nodes, baseline=True)
        finally:
            subprocess.run([*git, "remove", "--force", str(old_tree)], check=False)
    new = runtime_figures(ROOT, args.nodes, baseline=False)
    n = args.nodes
    rows = [
        ("up 3 nodes (cached image), s", "up3"),
        ("up again, nothing to change, s", "again"),
        (f"up {n} nodes (+{n - 3} nodes), s", "upn"),
        (f"memory with {n} nodes, MiB", "mib"),
        (f"down {n} nodes, s", "down"),
    ]
    print(f"{'':34} {'hand-written (' + args.baseline + ')':>24} {'systemd-nspawn':>16} {'new/old':>8}")
    for label, key in rows:
        print(f"{label:34} {old[key]:24.2f} {new[key]:16.2f} {new[key] / old[key]:8.2f}")
    print(f"target: 3 nodes up in <= 5 s (systemd-nspawn: {new['up3']:.2f} s)")

    swarm("lab", "up", "--fleet", "lab")
    bridge = tcp_throughput("lab-head-1", "lab-gpu-1", "10.77.1.11", args.mib)
    wan = tcp_throughput(None, "lab-gpu-1", "10.77.1.11", args.mib)
    ping = subprocess.run(
        ["ping", "-c", "10", "-i", "0.2", "10.77.2.11"], capture_output=True, text=True
    ).stdout
    rtt = re.search(r"= ([\d.]+)/([\d.]+)/([\d.]+)/", ping)
    print(f"TCP {args.mib} MiB node->node, same bridge: {bridge:7.1f} MiB/s")
    print(f"TCP {args.mib} MiB host->node, WAN link:    {wan:7.1f} MiB/s  (bridge/WAN {bridge / wan:.1f}x)")
    print(f"ping host->lab-b (20 ms one-way):  min/avg/max {rtt.group(1)}/{rtt.group(2)}/{rtt.group(3)} ms")

    swarm("lab", "down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
