"""Training throughput and scaling over the fleet's Ray cluster (`swarm metrics run --only training`).

    ray job submit --address http://<head mesh address>:8265 --working-dir DIR -- \
        python fleet_training.py [--epochs 20] [--tasks-per-node 2]

Weak scaling on the GPU workers (nodes with Ray GPUs, ordered by mesh address): for N = 1, 2,
... workers, ``tasks-per-node`` x N training tasks (SGD epochs of a scikit-learn classifier on
the digits data, one CPU each) are pinned round-robin to the first N workers
(NodeAffinitySchedulingStrategy, hard). Each N prints one line

    TRAINING {"nodes": N, "samples": S, "seconds": T, "samples_per_s": S / T, "workers": [ip, ...]}

and the last line is ``RESULT {"runs": [...]}``. Every node first runs one warm-up task
(imports, data), outside the timing. Bounded: fixed work, nothing outside the cluster.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy


@ray.remote(num_cpus=1)
def train(epochs: int, seed: int) -> int:
    """``epochs`` passes of SGD over the digits data; returns the samples processed."""
    from sklearn.datasets import load_digits
    from sklearn.linear_model import SGDClassifier

    x, y = load_digits(return_X_y=True)
    model = SGDClassifier(random_state=seed)
    classes = np.unique(y)
    for _ in range(epochs):
        model.partial_fit(x, y, classes=classes)
    return epochs * len(x)


def pinned(node_id: str):
    return train.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--tasks-per-node", type=int, default=2)
    args = parser.parse_args()
    ray.init()
    workers = sorted(
        (n for n in ray.nodes() if n["Alive"] and n["Resources"].get("GPU", 0) > 0),
        key=lambda n: tuple(int(p) for p in n["NodeManagerAddress"].split(".")),
    )
    if not workers:
        raise SystemExit("no alive node with GPUs in the cluster")
    ray.get([pinned(n["NodeID"]).remote(1, 0) for n in workers])  # warm-up, untimed
    runs = []
    for count in range(1, len(workers) + 1):
        chosen = workers[:count]
        tasks = [
            pinned(chosen[i % count]["NodeID"]).remote(args.epochs, i)
            for i in range(args.tasks_per_node * count)
        ]
        started = time.monotonic()
        samples = sum(ray.get(tasks))
        seconds = time.monotonic() - started
        run = {
            "nodes": count,
            "samples": samples,
            "seconds": round(seconds, 3),
            "samples_per_s": samples / seconds,
            "workers": [n["NodeManagerAddress"] for n in chosen],
        }
        print(f"TRAINING {json.dumps(run, sort_keys=True)}", flush=True)
        runs.append(run)
    print(f"RESULT {json.dumps({'runs': runs}, sort_keys=True)}", flush=True)


if __name__ == "__main__":
    main()
