"""A small distributed job that proves the fleet's Ray cluster works over the mesh.

    ray job submit --address http://<head mesh address>:8265 --working-dir jobs -- \
        python mesh_proof.py [--trials 12] [--epochs 150] [--epoch-seconds 0] [--mib 64]

Four stages, each printing one ``STAGE {json}`` line; the last line is ``RESULT {json}``:

1. placement: tasks that ask for ``accelerator_type:H100`` run only where H100s are, and
   likewise for A100 (the nodes' custom resources, from the GPU catalog);
2. tune: a Bayesian search (Optuna's TPE sampler through Ray Tune's ``OptunaSearch``) of the
   regularisation of a scikit-learn SGD classifier on the digits data set, trials spread over
   the nodes (one CPU each). Each trial checkpoints after every epoch (to the head through
   fleet_training.py's HeadStore: the lab has no shared storage); a trial lost with its node
   is retried (FailureConfig) and resumes from its last checkpoint, not from epoch 0 (its
   reports carry ``resumed_from``);
3. data: an array of ``--mib`` MiB made on an H100 node and read on an A100 node, so its
   bytes cross the mesh between them (Ray's object manager);
4. nodes: which nodes ran what.

The working directory must hold fleet_training.py too (the tune stage's checkpoint store).
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
    """One trial: SGD epochs on the digits data, reporting accuracy and a checkpoint (the
    model and its epoch) after each; a retried trial starts after its last checkpoint."""
    import pickle
    import tempfile
    from pathlib import Path

    from sklearn.datasets import load_digits
    from sklearn.linear_model import SGDClassifier
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x / 16.0, y, test_size=0.25, random_state=0)
    model = SGDClassifier(alpha=config["alpha"], random_state=0)
    start, resumed = 0, 0
    checkpoint = tune.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as d:
            model, resumed = pickle.loads((Path(d) / "model.pkl").read_bytes())
        start = resumed
    host = socket.gethostname()
    # Seen in the job's log (Ray forwards trial output to the driver): a test stops a node
    # once a trial runs on it, and Tune must then run the trial again elsewhere.
    print(f"TRIAL-RUNNING {host} alpha={config['alpha']:.2e} from={start}", flush=True)
    classes = np.unique(y)
    for epoch in range(start, config["epochs"]):
        began = time.monotonic()
        model.partial_fit(x_train, y_train, classes=classes)
        # An epoch of the digits set takes milliseconds; --epoch-seconds stands in for a
        # real model's longer epoch, so that a trial is still running when a test crashes
        # its node (the job's log reaches the test seconds late).
        time.sleep(max(0.0, config["epoch_seconds"] - (time.monotonic() - began)))
        with tempfile.TemporaryDirectory() as d:
            (Path(d) / "model.pkl").write_bytes(pickle.dumps((model, epoch + 1)))
            tune.report(
                {"accuracy": float(model.score(x_test, y_test)), "epoch": epoch + 1, "host": host,
                 "resumed_from": resumed},
                checkpoint=tune.Checkpoint.from_directory(d),
            )  # fmt: skip


def tuning(trials: int, epochs: int, epoch_seconds: float, workers_only: bool, storage: dict) -> dict:
    import optuna
    from ray.tune.search.optuna import OptunaSearch

    started = time.monotonic()
    # workers_only: a sliver of a (logical) GPU keeps trials off the head, which has none.
    resources = {"cpu": 1, "gpu": 0.01} if workers_only else {"cpu": 1}
    cpus = int(sum(n["Resources"].get("CPU", 0) for n in ray.nodes() if n["Alive"]))
    # TPE draws its first trials at random (n_startup_trials), then models the results so far;
    # all trials run at once when the cluster has a CPU for each, so the crash finds them running.
    search = OptunaSearch(
        metric="accuracy",
        mode="max",
        sampler=optuna.samplers.TPESampler(seed=0, n_startup_trials=min(trials, cpus)),
    )
    tuner = tune.Tuner(
        tune.with_resources(train, resources),
        param_space={"alpha": tune.loguniform(1e-5, 1e-1), "epochs": epochs, "epoch_seconds": epoch_seconds},
        tune_config=tune.TuneConfig(search_alg=search, num_samples=trials),
        run_config=tune.RunConfig(
            name="mesh-proof",
            failure_config=tune.FailureConfig(max_failures=3),
            # A checkpoint per epoch; the last two are enough to resume from.
            checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
            verbose=0,
            **storage,
        ),
    )
    results = tuner.fit()
    took = time.monotonic() - started
    hosts = sorted({r.metrics.get("host") for r in results if r.metrics})
    errors = sum(1 for r in results if r.error)
    # A trial whose reports came from more than one host lost its node and ran again.
    frames = [(r, r.metrics_dataframe) for r in results if r.metrics_dataframe is not None]
    # A trial whose reports came from more than one host lost its node and ran again there.
    moved = [r for r, frame in frames if frame["host"].nunique() > 1]
    retried = []  # each trial that ran again: the hosts in order, and where each run started
    for r, frame in frames:
        if frame[["host", "resumed_from"]].drop_duplicates().shape[0] < 2:
            continue
        runs = frame.groupby(["host", "resumed_from"], sort=False)["epoch"].agg(["min", "max"]).reset_index()
        retried.append(
            {"alpha": f"{r.config['alpha']:.2e}",
             "runs": [{"host": h, "resumed_from": int(f), "first_epoch": int(lo), "last_epoch": int(hi)}
                      for h, f, lo, hi in runs.itertuples(index=False)]}
        )  # fmt: skip
    summary = {
        "trials": len(results),
        "errors": errors,
        "moved": len(moved),
        "retried": retried,
        "search": "OptunaSearch(TPESampler)",
        # where each trial (by its alpha, as its TRIAL-RUNNING line prints it) last reported from
        "final_hosts": {f"{r.config['alpha']:.2e}": r.metrics.get("host") for r in results if r.metrics},
        "hosts": hosts,
        "best_accuracy": results.get_best_result(metric="accuracy", mode="max").metrics["accuracy"],
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
    parser.add_argument("--epoch-seconds", type=float, default=0.0, help="the least wall time of an epoch")
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--only", choices=("placement", "tune", "data"), help="run one stage")
    parser.add_argument("--workers-only", action="store_true", help="run trials on GPU nodes only")
    parser.add_argument(
        "--storage-path", help="shared storage for the trials' checkpoints (default: the head)"
    )
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
        # Trials' checkpoints on the head (fleet_training.py's HeadStore, uploaded beside this
        # file): the lab declares no shared storage, and Tune's storage must be shared.
        from fleet_training import checkpoint_storage

        with checkpoint_storage(args.storage_path) as storage:
            result["tune"] = tuning(args.trials, args.epochs, args.epoch_seconds, args.workers_only, storage)
    print(f"RESULT {json.dumps(result, sort_keys=True)}", flush=True)


if __name__ == "__main__":
    main()
