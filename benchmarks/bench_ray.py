"""Ray over the mesh on the lab: time to a joined cluster, idle memory, and job throughput
with 1, 2 and 3 worker nodes, side by side in one run.

    sudo .venv/bin/python benchmarks/bench_ray.py [--trials 12] [--epochs 150]

Needs root and no lab up. Brings up a copy of the lab fleet with a third GPU worker
(lab-gpu-3, simulated H100s), then:
  * converge from fresh nodes (every layer, Ray installed from the lab's package index) and
    the time from the converge's end until every node is ALIVE in the head's state API;
  * idle memory of Ray's processes per node (RSS, head and workers);
  * the proof job's Tune stage (jobs/mesh_proof.py, trials on GPU nodes only) with 3, 2
    and 1 worker nodes (workers stopped one by one), in trials/s, and the scaling
    efficiency E(N) = throughput(N) / (N x throughput(1)) (= T1 / (N x TN) in time).
On 2 cores every node shares the same two CPUs: the efficiency says what the mesh and
Ray's scheduling leave of a node's work here, not what separate machines would do.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.labkit import on_node, swarm  # noqa: E402

from swarm_infra.fleet.sources import fleet_paths  # noqa: E402
from swarm_infra.resolve import desired_state, load_fleet  # noqa: E402

THIRD = """---
apiVersion: swarm.io/v1alpha1
kind: Node
metadata:
  name: lab-gpu-3
  labels: {tier: training}
spec:
  site: lab-a
  address: 10.77.1.12
  roles: [gpu-worker]
  gpu_backend: simulated
  hardware:
    cpus: 2
    memory_gib: 16
    gpus: [{model: H100-SXM5-80GB, count: 2}]
"""


def ray_alive(head: str, venv: str, dashboard: str) -> set[str]:
    out = on_node(
        head, f"{venv}/bin/ray list nodes --format json --limit 1000 --address {dashboard}", check=False
    )
    if out.returncode != 0:
        return set()
    return {n["node_ip"] for n in json.loads(out.stdout) if n["state"] == "ALIVE"}


def ray_rss_mib(node: str, venv: str) -> float:
    out = on_node(node, "ps -eo rss=,args=").stdout
    rss = sum(
        int(ln.split(None, 1)[0])
        for ln in out.splitlines()
        if venv in ln or "raylet" in ln or "gcs_server" in ln
    )
    return rss / 1024


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--epochs", type=int, default=150)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="swarm-bench-ray-") as tmp:
        repo = Path(tmp) / "repo"
        (repo / "inventory").mkdir(parents=True)
        shutil.copytree(ROOT / "inventory/lab", repo / "inventory/lab")
        shutil.copytree(ROOT / "policies", repo / "policies")
        (repo / "inventory/lab/nodes-3.yaml").write_text(THIRD)
        inventory = repo / "inventory/lab"
        state = desired_state(load_fleet(fleet_paths(inventory)))
        ray = {n: s["ray"] for n, s in state["nodes"].items() if s["ray"]}
        head = next(n for n, r in ray.items() if r["role"] == "head")
        workers = sorted(n for n, r in ray.items() if r["role"] == "worker")
        venv = state["nodes"][head]["layout"]["files"]["ray_venv"]["path"]
        dashboard = f"http://{ray[head]['dashboard']['host']}:{ray[head]['dashboard']['port']}"
        swarm("lab", "up", *fleet_paths(inventory))
        try:
            t0 = time.monotonic()
            proc = swarm("converge", "-i", str(inventory), check=False)
            converged = time.monotonic() - t0
            if proc.returncode != 0:
                sys.exit(proc.stdout[-3000:] + proc.stderr)
            want = {r["node_ip"] for r in ray.values()}
            while ray_alive(head, venv, dashboard) != want:  # workers register with the GCS
                if time.monotonic() - t0 > converged + 300:
                    sys.exit("the cluster did not join within 300 s of the converge")
            joined = time.monotonic() - t0 - converged
            print(f"converge, fresh nodes, every layer (Ray installed):  {converged:7.1f} s")
            print(f"after it, until all {len(want)} nodes are ALIVE:            {joined:7.1f} s")
            print(f"idle Ray RSS: head {ray_rss_mib(head, venv):.0f} MiB, workers "
                  + ", ".join(f"{w} {ray_rss_mib(w, venv):.0f} MiB" for w in workers))  # fmt: skip
            for script in ("mesh_proof.py", "fleet_training.py"):  # the Tune stage's checkpoint store
                job = (ROOT / "jobs" / script).read_text()
                on_node(head, f"mkdir -p /root/ray-jobs && cat > /root/ray-jobs/{script} <<'EOF'\n{job}\nEOF")
            rates = {}
            for n in (3, 2, 1):
                for stopped in workers[n:]:
                    swarm("lab", "stop", stopped, check=False)
                cmd = (
                    f"{venv}/bin/ray job submit --address {dashboard} --working-dir /root/ray-jobs -- "
                    "python mesh_proof.py --only tune --workers-only "
                    f"--trials {args.trials} --epochs {args.epochs}"
                )
                out = on_node(head, cmd).stdout
                result = json.loads(
                    next(ln for ln in reversed(out.splitlines()) if ln.startswith("RESULT ")).split(" ", 1)[1]
                )
                tuned = result["tune"]
                rates[n] = tuned["trials_per_s"]
                seconds, hosts = tuned["seconds"], tuned["hosts"]
                print(f"{n} worker(s): {rates[n]:.3f} trials/s ({seconds:.1f} s, {hosts})")
            print(f"{'workers':>8} {'trials/s':>9} {'efficiency':>11}")
            for n in (1, 2, 3):
                print(f"{n:>8} {rates[n]:>9.3f} {rates[n] / (n * rates[1]):>11.2f}")
        finally:
            subprocess.run([sys.executable, "-m", "swarm_infra.cli", "lab", "down"], cwd=ROOT, check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
