"""Inference latency and concurrency over the fleet's Ray cluster (`swarm metrics run --only inference`).

    ray job submit --address http://<head mesh address>:8265 --working-dir DIR -- \
        python fleet_inference.py --host <head mesh address> --load-from <a worker's mesh address> \
        [--port 8000] [--clients 1,8,32]

Serves a small model with Ray Serve: a scikit-learn logistic regression on the digits data,
one replica on each GPU worker (a tenth of a logical GPU each), behind Serve's HTTP proxy on
the head, bound to the head's mesh address only. A load generator runs as a Ray task on the
GPU worker at ``--load-from`` (`swarm metrics run` picks one outside the head's site where
there is one), so every request crosses the mesh. For each client count C it runs C
threads, each sending requests one after another until ``--requests`` in all or
``--seconds`` have passed (bounded in count and time), and prints one line

    INFERENCE {"clients": C, "requests": N, "errors": E, "seconds": T, "requests_per_s": N / T,
               "p50_ms": ..., "p99_ms": ...}

The last line is ``RESULT {"runs": [...]}``; the application is deleted at the end. The load
generator refuses any URL that is not the cluster head's own address.
"""

from __future__ import annotations

import argparse
import json
import math
import threading
import time
import urllib.parse
import urllib.request

import ray
from ray import serve
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

APP = "swarm-metrics-digits"


@serve.deployment(
    ray_actor_options={"num_cpus": 0.25, "num_gpus": 0.1},
    max_ongoing_requests=64,
    logging_config={"enable_access_log": False},  # one log line per request would flood the job log
)
class Digits:
    def __init__(self) -> None:
        from sklearn.datasets import load_digits
        from sklearn.linear_model import LogisticRegression

        x, y = load_digits(return_X_y=True)
        self.model = LogisticRegression(max_iter=2000).fit(x, y)

    async def __call__(self, request) -> dict:
        pixels = (await request.json())["pixels"]
        return {"digit": int(self.model.predict([pixels])[0])}


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(pct / 100 * len(ordered))) - 1]


@ray.remote(num_cpus=0.5)
def load(url: str, allowed_host: str, clients: int, total: int, seconds: float) -> dict:
    """C client threads against ``url`` until ``total`` requests or ``seconds`` have passed."""
    if urllib.parse.urlsplit(url).hostname != allowed_host:
        raise ValueError(f"refusing to load {url}: not the cluster head {allowed_host}")
    from sklearn.datasets import load_digits

    sample = json.dumps({"pixels": load_digits().data[0].tolist()}).encode()
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    deadline = time.monotonic() + seconds
    issued = [0]

    def client() -> None:
        while True:
            with lock:
                if issued[0] >= total or time.monotonic() > deadline:
                    return
                issued[0] += 1
            request = urllib.request.Request(url, data=sample, headers={"Content-Type": "application/json"})
            started = time.monotonic()
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    response.read()
                elapsed = (time.monotonic() - started) * 1000
                with lock:
                    latencies.append(elapsed)
            except OSError:
                with lock:
                    errors[0] += 1

    threads = [threading.Thread(target=client) for _ in range(clients)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - started
    return {
        "clients": clients,
        "requests": len(latencies),
        "errors": errors[0],
        "seconds": round(took, 3),
        "requests_per_s": len(latencies) / took,
        "p50_ms": percentile(latencies, 50) if latencies else None,
        "p99_ms": percentile(latencies, 99) if latencies else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", required=True, help="the head's mesh address (Serve's proxy binds to it)")
    parser.add_argument("--load-from", required=True, help="the mesh address of the node that sends the load")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--clients", default="1,8,32")
    parser.add_argument("--requests", type=int, default=400, help="most requests per client count")
    parser.add_argument("--seconds", type=float, default=15.0, help="most seconds per client count")
    args = parser.parse_args()
    ray.init()
    workers = sorted(
        (n for n in ray.nodes() if n["Alive"] and n["Resources"].get("GPU", 0) > 0),
        key=lambda n: tuple(int(p) for p in n["NodeManagerAddress"].split(".")),
    )
    if not workers:
        raise SystemExit("no alive node with GPUs in the cluster")
    serve.start(proxy_location="HeadOnly", http_options={"host": args.host, "port": args.port})
    app = Digits.options(num_replicas=len(workers), max_replicas_per_node=1).bind()
    serve.run(app, name=APP, route_prefix="/digits")
    url = f"http://{args.host}:{args.port}/digits"
    sender = next((n for n in workers if n["NodeManagerAddress"] == args.load_from), None)
    if sender is None:
        raise SystemExit(f"no alive GPU worker at {args.load_from}")
    where = NodeAffinitySchedulingStrategy(sender["NodeID"], soft=False)
    runs = []
    try:
        ray.get(load.options(scheduling_strategy=where).remote(url, args.host, 1, 5, 10.0))  # warm-up
        for clients in (int(c) for c in args.clients.split(",")):
            run = ray.get(
                load.options(scheduling_strategy=where).remote(
                    url, args.host, clients, args.requests, args.seconds
                )
            )
            run["load_from"] = args.load_from
            print(f"INFERENCE {json.dumps(run, sort_keys=True)}", flush=True)
            runs.append(run)
    finally:
        serve.delete(APP)
    print(f"RESULT {json.dumps({'runs': runs}, sort_keys=True)}", flush=True)


if __name__ == "__main__":
    main()
