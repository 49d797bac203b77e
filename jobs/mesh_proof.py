"""A small distributed job that proves the fleet's Ray cluster works over the mesh.

    ray job submit --address http://<head mesh address>:8265 --working-dir jobs -- \
        python mesh_proof.py [--trials 12] [--epochs 40] [--mib 64]

Four stages, each printing one ``STAGE {json}`` line; the last line is ``RESULT {json}``:

1. placement: tasks that ask for ``accelerator_type:H100`` run only where H100s are, and
   likewise for A100 (the nodes' custom resources, from the GPU catalog);
2. tune: a Ray Tune grid search over a scikit-learn SGD classifier on the digits data set,
   trials spread over the nodes (one CPU each), lost trials retried (FailureConfig);
3. data: an array of ``--mib`` MiB made on an H100 node and read on an A100 node, so its
   bytes cross the mesh between them (Ray's object manager);
4. nodes: which nodes ran what.

Bounded: every stage has a fixed amount of work; nothing reaches outside the cluster.
"""

from __future__ import annotations

import argparse
import json
import socket
import time

import numpy as np
import ray
from ray import tune

TINY = 0.001  # of a custom resource: marks where a task may run without using it up


def stage(name: str, **data: object) -> None:
    print(f"STAGE {json.dumps({'stage': name, **data}, sort_keys=True)}", flush=True)


@ray.remote(num_cpus=0.1)
def where() -> str:
    return socket.gethostname()


def placement() -> dict[str, list[str]]:
    hosts: dict[str, list[str]] = {}
    for accel in ("H100", "A100"):
        pinned = where.options(resources={f"accelerator_type:{accel}": TINY})
        hosts[accel] = sorted(set(ray.get([pinned.remote() for _ in range(8)])))
    stage("placement", hosts=hosts)
    return hosts


def train(config: dict) -> None:
    """One trial: SGD epochs on the digits data, reporting accuracy after each."""
    from sklearn.datasets import load_digits
    from sklearn.linear_model import SGDClassifier
    from sklearn.model_selection import train_test_split

    # Seen in the job's log (Ray forwards trial output to the driver): a test stops a node
    # once a trial runs on it, and Tune must then run the trial again elsewhere.
    print(f"TRIAL-RUNNING {socket.gethostname()} alpha={config['alpha']:.2e}", flush=True)
    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x / 16.0, y, test_size=0.25, random_state=0)
    model = SGDClassifier(alpha=config["alpha"], random_state=0)
    classes = np.unique(y)
    for epoch in range(config["epochs"]):
        model.partial_fit(x_train, y_train, classes=classes)
        tune.report(
            {"accuracy": float(model.score(x_test, y_test)), "epoch": epoch + 1, "host": socket.gethostname()}
        )


def tuning(trials: int, epochs: int, workers_only: bool) -> dict:
    alphas = list(np.logspace(-5, -1, trials))
    started = time.monotonic()
    # workers_only: a sliver of a (logical) GPU keeps trials off the head, which has none.
    resources = {"cpu": 1, "gpu": 0.01} if workers_only else {"cpu": 1}
    tuner = tune.Tuner(
        tune.with_resources(train, resources),
        param_space={"alpha": tune.grid_search(alphas), "epochs": epochs},
        tune_config=tune.TuneConfig(metric="accuracy", mode="max"),
        run_config=tune.RunConfig(
            name="mesh-proof", failure_config=tune.FailureConfig(max_failures=3), verbose=0
        ),
    )
    results = tuner.fit()
    took = time.monotonic() - started
    hosts = sorted({r.metrics.get("host") for r in results if r.metrics})
    errors = sum(1 for r in results if r.error)
    # A trial whose reports came from more than one host lost its node and ran again.
    moved = sum(
        1 for r in results if r.metrics_dataframe is not None and r.metrics_dataframe["host"].nunique() > 1
    )
    summary = {
        "trials": len(results),
        "errors": errors,
        "moved": moved,
        # where each trial (by its alpha, as its TRIAL-RUNNING line prints it) last reported from
        "final_hosts": {f"{r.config['alpha']:.2e}": r.metrics.get("host") for r in results if r.metrics},
        "hosts": hosts,
        "best_accuracy": results.get_best_result().metrics["accuracy"],
        "seconds": round(took, 2),
        "trials_per_s": round(len(results) / took, 3),
    }
    stage("tune", **summary)
    return summary


@ray.remote(num_cpus=0.1)
def produce(mib: int) -> np.ndarray:
    return np.full(mib << 20, 7, dtype=np.uint8)


@ray.remote(num_cpus=0.1)
def consume(arr: np.ndarray) -> tuple[str, int, int]:
    return socket.gethostname(), int(arr.nbytes), int(arr[:: 1 << 20].sum())


def data(mib: int) -> dict:
    made = produce.options(resources={"accelerator_type:H100": TINY}).remote(mib)
    host, nbytes, check = ray.get(consume.options(resources={"accelerator_type:A100": TINY}).remote(made))
    summary = {"consumer": host, "bytes": nbytes, "checksum_ok": check == 7 * mib}  # one sample per MiB
    stage("data", **summary)
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--epochs", type=int, default=150)
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--only", choices=("placement", "tune", "data"), help="run one stage")
    parser.add_argument("--workers-only", action="store_true", help="run trials on GPU nodes only")
    args = parser.parse_args()
    ray.init()
    nodes = sorted(n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"])
    stage("nodes", alive=nodes)
    result: dict = {"nodes": nodes}
    if args.only in (None, "placement"):
        result["placement"] = placement()
    if args.only in (None, "data"):
        result["data"] = data(args.mib)
    if args.only in (None, "tune"):
        result["tune"] = tuning(args.trials, args.epochs, args.workers_only)
    print(f"RESULT {json.dumps(result, sort_keys=True)}", flush=True)


if __name__ == "__main__":
    main()
