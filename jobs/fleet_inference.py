"""Inference latency under open-loop load over the fleet's Ray cluster (`swarm metrics run --only inference`).

    ray job submit --address http://<head mesh address>:8265 --working-dir DIR -- \
        python fleet_inference.py --host <head mesh address> --load-from <a worker's mesh address> \
        [--port 8000] [--rates 10,20,40] [--requests 1000] [--connections 64]

Serves a small model with Ray Serve: a PyTorch multilayer perceptron (64-64-10) trained on
scikit-learn's digits set when each replica starts (nothing downloaded), one replica on each
GPU worker (a tenth of a logical GPU each), behind Serve's HTTP proxy on the head, bound to
the head's mesh address only. A load generator runs as a Ray task on the GPU worker at
``--load-from`` (`swarm metrics run` picks one outside the head's site where there is one),
so every request crosses the mesh.

Open-loop load (no coordinated omission): for each rate R (requests/s) the generator fixes a
schedule of ``--requests`` arrivals, request i at t0 + i / R (constant rate, as wrk2 does),
and sends each at its time whatever the earlier ones are doing; a request's latency runs
from its *intended* send time to the end of its response, so a server that falls behind
shows it in the latency instead of slowing the load. The requests go through one HTTP
client session (aiohttp) that keeps its connections alive and reuses them, at most
``--connections`` at once (a request waiting for a free connection waits on the clock). A
request fails on a non-200 answer, a connection error or no answer within ``--timeout`` s;
failures are counted, never timed. Per rate one line

    INFERENCE {"rate": R, "requests": N, "ok": n, "errors": E, "error_rate": E / N,
               "seconds": T, "achieved_per_s": n / T, "p50_ms": ..., "p90_ms": ..., "p99_ms": ...}

Percentiles are nearest-rank over the successful requests; a percentile q is printed only
when there are at least 10 / (1 - q) successes (p99: 1,000; p90: 100), else null: fewer
samples leave fewer than ten above it. The last line is ``RESULT {"runs": [...]}``; the Serve
application is deleted and Serve shut down at the end, its proxy included. The load
generator refuses any URL that is not the cluster head's own address.
"""

from __future__ import annotations

import argparse
import json
import math

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
        import torch
        from sklearn.datasets import load_digits
        from torch import nn

        torch.manual_seed(0)
        digits = load_digits()
        x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
        y = torch.tensor(digits.target, dtype=torch.long)
        self.model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
        optimizer = torch.optim.Adam(self.model.parameters(), lr=0.01)
        for _ in range(100):  # full-batch epochs: well under a second on a CPU
            optimizer.zero_grad()
            nn.functional.cross_entropy(self.model(x), y).backward()
            optimizer.step()
        self.model.eval()
        self.torch = torch

    async def __call__(self, request) -> dict:
        pixels = (await request.json())["pixels"]
        with self.torch.no_grad():
            logits = self.model(self.torch.tensor([pixels], dtype=self.torch.float32) / 16.0)
        return {"digit": int(logits.argmax())}


def percentile(values: list[float], pct: float) -> float | None:
    """Nearest-rank percentile; None when fewer than 10 / (1 - pct/100) values."""
    if not values or len(values) < 10 / (1 - pct / 100) - 1e-9:
        return None
    ordered = sorted(values)
    return ordered[max(1, math.ceil(pct / 100 * len(ordered))) - 1]


@ray.remote(num_cpus=0.5)
def load(url: str, allowed_host: str, rate: float, total: int, connections: int, timeout_s: float) -> dict:
    """``total`` requests to ``url`` at ``rate`` per second on a fixed schedule (open loop)."""
    import asyncio
    import urllib.parse

    import aiohttp
    from sklearn.datasets import load_digits

    if urllib.parse.urlsplit(url).hostname != allowed_host:
        raise ValueError(f"refusing to load {url}: not the cluster head {allowed_host}")
    body = json.dumps({"pixels": load_digits().data[0].tolist()}).encode()

    async def run() -> dict:
        latencies: list[float] = []
        errors: dict[str, int] = {}
        loop = asyncio.get_running_loop()
        connector = aiohttp.TCPConnector(limit=connections, force_close=False)
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

            async def one(intended: float) -> None:
                try:
                    async with session.post(
                        url, data=body, headers={"Content-Type": "application/json"}
                    ) as r:
                        await r.read()
                        if r.status != 200:
                            raise RuntimeError(f"HTTP {r.status}")
                    latencies.append((loop.time() - intended) * 1000)
                except Exception as exc:  # every failure is counted by its kind
                    kind = str(exc) if isinstance(exc, RuntimeError) else type(exc).__name__
                    errors[kind] = errors.get(kind, 0) + 1

            start = loop.time() + 0.1
            tasks = []
            for i in range(total):
                intended = start + i / rate
                delay = intended - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.ensure_future(one(intended)))
            await asyncio.gather(*tasks)
            took = loop.time() - start
        failed = sum(errors.values())
        return {
            "rate": rate,
            "requests": total,
            "ok": len(latencies),
            "errors": failed,
            "error_kinds": errors,
            "error_rate": failed / total,
            "seconds": round(took, 3),
            "achieved_per_s": len(latencies) / took,
            "connections": connections,
            **{f"p{q}_ms": percentile(latencies, q) for q in (50, 90, 99)},
        }

    return asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", required=True, help="the head's mesh address (Serve's proxy binds to it)")
    parser.add_argument("--load-from", required=True, help="the mesh address of the node that sends the load")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--rates", default="10,20,40", help="requests per second, comma-separated")
    parser.add_argument("--requests", type=int, default=1000, help="requests per rate")
    parser.add_argument("--connections", type=int, default=64, help="most connections kept alive at once")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds before a request fails")
    args = parser.parse_args()
    ray.init()
    workers = sorted(
        (n for n in ray.nodes() if n["Alive"] and n["Resources"].get("GPU", 0) > 0),
        key=lambda n: tuple(int(p) for p in n["NodeManagerAddress"].split(".")),
    )
    if not workers:
        raise SystemExit("no alive node with GPUs in the cluster")
    sender = next((n for n in workers if n["NodeManagerAddress"] == args.load_from), None)
    if sender is None:
        raise SystemExit(f"no alive GPU worker at {args.load_from}")
    where = NodeAffinitySchedulingStrategy(sender["NodeID"], soft=False)
    runs = []
    serve.start(proxy_location="HeadOnly", http_options={"host": args.host, "port": args.port})
    try:
        app = Digits.options(num_replicas=len(workers), max_replicas_per_node=1).bind()
        serve.run(app, name=APP, route_prefix="/digits")
        url = f"http://{args.host}:{args.port}/digits"
        sent = load.options(scheduling_strategy=where)
        ray.get(sent.remote(url, args.host, 10.0, 20, args.connections, args.timeout))  # warm-up, untimed
        for rate in (float(r) for r in args.rates.split(",")):
            run = ray.get(sent.remote(url, args.host, rate, args.requests, args.connections, args.timeout))
            run["load_from"] = args.load_from
            print(f"INFERENCE {json.dumps(run, sort_keys=True)}", flush=True)
            runs.append(run)
    finally:
        serve.delete(APP)
        serve.shutdown()  # the proxy too: nothing listens on the port after the run
    print(f"RESULT {json.dumps({'runs': runs}, sort_keys=True)}", flush=True)


if __name__ == "__main__":
    main()
