"""Data-parallel training over the fleet's Ray cluster (`swarm metrics run --only training`).

    ray job submit --address http://<head mesh address>:8265 --working-dir DIR -- \
        python fleet_training.py --ifname wg0 --mtu 1420 [--backend gloo|nccl] [--steps 20] \
        [--repeats 3] [--sweep-max-mib 64] [--checkpoint-every 0 --total-steps N]

Ray Train (``TorchTrainer``, Ray Train V2) trains a small real model, a multilayer
perceptron (64-256-256-10) on scikit-learn's digits set (shipped in the scikit-learn wheel,
nothing downloaded), with ``DistributedDataParallel``: gradients are all-reduced between the
workers every step, over the process group's backend (``gloo`` on CPU nodes, ``nccl`` on GPU
nodes), whose sockets are bound to the mesh interface (``GLOO_SOCKET_IFNAME`` /
``NCCL_SOCKET_IFNAME`` = ``--ifname``, the node state's ``mesh.interface``). Each worker
checks that interface's MTU against ``--mtu`` (the node state's ``mesh.mtu``) and refuses to
run on a mismatch: TCP over it then segments at the mesh's MTU. Workers ask for one Ray GPU
each (the GPU workers; the head has none) and are spread over the nodes.

Modes (each prints ``TAG {json}`` lines; the last line is ``RESULT {json}``):

* scaling (default): for N = 1 .. ``--max-workers`` (default: the GPU nodes), one run of
  N workers. After ``--warmup-steps`` untimed steps (process group, first all-reduce, page
  faults), ``--repeats`` timed windows of ``--steps`` steps each, both

  - weak scaling: a fixed batch per worker (``--batch``), the global batch grows with N;
  - strong scaling: a fixed global batch (``--batch``), split over the N workers;

  one ``TRAINING`` line per (N, scaling) with the samples/s of each window and their
  min/median/max. Samples/s = global batch x steps / wall seconds of the window (barrier
  before and after, so every worker's steps are inside it).
* all-reduce sweep (N >= 2 in the same run): ``torch.distributed.all_reduce`` (sum, float32)
  of 1 KiB .. ``--sweep-max-mib`` MiB, times 4 (one untimed, ``--sweep-iters`` timed),
  ``ALLREDUCE`` lines with algbw = bytes / seconds and busbw = algbw x 2(n-1)/n, as nccl-tests defines them
  (NVIDIA/nccl-tests doc/PERFORMANCE.md, "AllReduce").
* fault tolerance (``--checkpoint-every K``): one run of ``--max-workers`` workers for
  ``--total-steps`` steps, a Ray Train checkpoint (model, optimizer, step) every K steps,
  ``FailureConfig(max_failures=--max-failures)``. Rank 0 prints ``REPORTED {"step": s}``
  once it has reported a checkpoint, the controller ``CHECKPOINT {"step": s}`` once it has
  registered it (every worker reported that step: the checkpoint a restart resumes from is
  the last registered, which may lag rank 0's), and every (re)started worker group prints
  ``START {"step": first step, "resumed_from": checkpoint step or null}``. A worker lost
  with its node ends the group; Ray Train starts a new one (on the nodes left: placement is
  best-effort spread) from the last checkpoint.

Checkpoints need storage every worker and the driver reach (Ray Train's persistent storage:
a local path is refused for multi-node runs). ``--storage-path`` names a shared mount (the
fleet's NFS class) or a URI; without it the checkpoints go to a directory on the head
through an actor pinned to the head (:class:`HeadStore`), reached over the mesh by Ray's
RPC: it survives the loss of any worker and is lost with the head.

Bounded: a fixed number of steps and sizes; nothing outside the cluster.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import socket
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow.fs
import ray

TRAINING = "swarm-fleet-training"
STORE = "swarm-checkpoint-store"


def emit(tag: str, data: dict) -> None:
    print(f"{tag} {json.dumps(data, sort_keys=True)}", flush=True)


# ------------------------------------------------------------------ checkpoint storage
@ray.remote(num_cpus=0)
class HeadStore:
    """Files under ``root`` on the node it runs on (the head)."""

    def __init__(self, root: str) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def _p(self, path: str) -> Path:
        full = (self.root / path.lstrip("/")).resolve()
        if full != self.root.resolve() and self.root.resolve() not in full.parents:
            raise PermissionError(path)
        return full

    def info(self, path: str) -> dict | None:
        p = self._p(path)
        if not p.exists():
            return None
        return {"name": path.rstrip("/") or "/", "size": p.stat().st_size if p.is_file() else 0,
                "type": "directory" if p.is_dir() else "file"}  # fmt: skip

    def ls(self, path: str) -> list[dict]:
        p = self._p(path)
        if not p.is_dir():
            raise FileNotFoundError(path)
        base = path.rstrip("/")
        return [self.info(f"{base}/{c.name}") for c in sorted(p.iterdir())]  # type: ignore[misc]

    def mkdir(self, path: str) -> None:
        self._p(path).mkdir(parents=True, exist_ok=True)

    def write(self, path: str, data: bytes) -> None:
        p = self._p(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f".{p.name}.tmp")
        tmp.write_bytes(data)
        tmp.replace(p)

    def read(self, path: str) -> bytes:
        return self._p(path).read_bytes()

    def rm(self, path: str) -> None:
        import shutil

        p = self._p(path)
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


class HeadStoreHandler(pyarrow.fs.FileSystemHandler):
    """A pyarrow filesystem handler (``pyarrow.fs.FileSystemHandler``'s methods) over the
    HeadStore actor: every call is a Ray RPC to the head, so every worker and the driver see
    the same files."""

    def __init__(self) -> None:
        self._store = None

    def __getstate__(self) -> dict:
        return {}  # the actor is looked up by name where the handler is unpickled

    def __setstate__(self, state: dict) -> None:
        self._store = None

    @property
    def store(self):
        if self._store is None:
            self._store = ray.get_actor(STORE, namespace=TRAINING)
        return self._store

    def _call(self, method: str, *args):
        return ray.get(getattr(self.store, method).remote(*args))

    def __eq__(self, other) -> bool:
        return isinstance(other, HeadStoreHandler)

    def equals(self, other) -> bool:
        return self == other

    def get_type_name(self) -> str:
        return "swarm-head-store"

    def normalize_path(self, path: str) -> str:
        return path

    def _info(self, path: str, found: dict | None):
        import pyarrow.fs as pafs

        if found is None:
            return pafs.FileInfo(path, pafs.FileType.NotFound)
        kind = pafs.FileType.Directory if found["type"] == "directory" else pafs.FileType.File
        return pafs.FileInfo(found["name"], kind, size=found["size"] if kind == pafs.FileType.File else None)

    def get_file_info(self, paths):
        return [self._info(p, self._call("info", p)) for p in paths]

    def get_file_info_selector(self, selector):
        out, todo = [], [selector.base_dir]
        while todo:
            base = todo.pop()
            try:
                entries = self._call("ls", base)
            except FileNotFoundError:
                if selector.allow_not_found:
                    return []
                raise
            for entry in entries:
                out.append(self._info(entry["name"], entry))
                if selector.recursive and entry["type"] == "directory":
                    todo.append(entry["name"])
        return out

    def create_dir(self, path, recursive):
        self._call("mkdir", path)

    def delete_dir(self, path):
        self._call("rm", path)

    def delete_dir_contents(self, path, missing_dir_ok=False):
        for entry in self._call("ls", path):
            self._call("rm", entry["name"])

    def delete_root_dir_contents(self):
        self.delete_dir_contents("/")

    def delete_file(self, path):
        self._call("rm", path)

    def move(self, src, dest):
        self.copy_file(src, dest)
        self._call("rm", src)

    def copy_file(self, src, dest):
        self._call("write", dest, self._call("read", src))

    def open_input_stream(self, path):
        import pyarrow as pa

        return pa.BufferReader(self._call("read", path))

    def open_input_file(self, path):
        return self.open_input_stream(path)

    def open_output_stream(self, path, metadata):
        import pyarrow as pa

        handler = self

        class Upload(io.BytesIO):
            def close(self) -> None:
                if not self.closed:
                    handler._call("write", path, self.getvalue())
                super().close()

        return pa.PythonFile(Upload(), mode="w")

    def open_append_stream(self, path, metadata):
        raise NotImplementedError("appending to the head store")


def head_filesystem():
    """A pyarrow filesystem over the HeadStore actor (Ray Train's ``storage_filesystem``)."""
    import pyarrow.fs

    return pyarrow.fs.PyFileSystem(HeadStoreHandler())


@contextlib.contextmanager
def checkpoint_storage(storage_path: str | None):
    """RunConfig's storage arguments: ``storage_path`` when given (shared storage), else a
    HeadStore on the driver's node (the head, where `ray job submit` runs the driver), its
    directory removed and the actor ended on exit."""
    if storage_path:
        yield {"storage_path": storage_path}
        return
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    store = HeadStore.options(name=STORE, namespace=TRAINING, scheduling_strategy=here).remote(
        tempfile.mkdtemp(prefix="swarm-checkpoints-")
    )
    ray.get(store.mkdir.remote("/runs"))
    try:
        yield {"storage_path": "/runs", "storage_filesystem": head_filesystem()}
    finally:
        ray.get(store.rm.remote("/"))
        ray.kill(store)


# ------------------------------------------------------------------ the training loop
def train_loop(config: dict) -> None:
    import ray.train
    import torch
    import torch.distributed as dist
    from sklearn.datasets import load_digits
    from torch import nn

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    ifname = config["ifname"]
    mtu = int(Path(f"/sys/class/net/{ifname}/mtu").read_text())
    if mtu != config["mtu"]:
        raise RuntimeError(f"{ifname} has MTU {mtu}, the mesh declares {config['mtu']}")
    device = torch.device("cuda" if config["backend"] == "nccl" else "cpu")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    model = nn.parallel.DistributedDataParallel(model.to(device))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    digits = load_digits()
    x_all = torch.tensor(digits.data / 16.0, dtype=torch.float32, device=device)
    y_all = torch.tensor(digits.target, dtype=torch.long, device=device)
    generator = torch.Generator().manual_seed(rank)

    def step(batch: int) -> float:
        idx = torch.randint(0, len(x_all), (batch,), generator=generator).to(device)
        optimizer.zero_grad()
        loss = loss_fn(model(x_all[idx]), y_all[idx])
        loss.backward()  # DDP all-reduces the gradients here
        optimizer.step()
        return loss.item()

    def barrier() -> None:
        dist.barrier()
        if device.type == "cuda":
            torch.cuda.synchronize()

    host = socket.gethostname()
    if config.get("checkpoint_every"):
        start = 0
        resumed = None
        checkpoint = ray.train.get_checkpoint()
        if checkpoint:
            with checkpoint.as_directory() as d:
                state = torch.load(Path(d) / "state.pt", weights_only=True)
            model.module.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            resumed = int(state["step"])
            start = resumed + 1
        if rank == 0:
            emit("START", {"step": start, "resumed_from": resumed, "workers": world, "host": host})
        every = config["checkpoint_every"]
        for s in range(start, config["total_steps"]):
            loss = step(config["batch"])
            if (s + 1) % every == 0 or s + 1 == config["total_steps"]:
                with tempfile.TemporaryDirectory() as d:
                    saved = None
                    if rank == 0:
                        state = {
                            "model": model.module.state_dict(),
                            "optimizer": optimizer.state_dict(),
                            "step": s,
                        }
                        torch.save(state, Path(d) / "state.pt")
                        saved = ray.train.Checkpoint.from_directory(d)
                    ray.train.report({"step": s, "loss": loss}, checkpoint=saved)
                if rank == 0:
                    emit("REPORTED", {"step": s, "loss": round(loss, 4)})
        return

    for _ in range(config["warmup_steps"]):
        step(config["batch"])
    barrier()
    for scaling in ("weak", "strong"):
        per_worker = config["batch"] if scaling == "weak" else max(1, config["batch"] // world)
        rates = []
        for _ in range(config["repeats"]):
            barrier()
            started = time.perf_counter()
            for _ in range(config["steps"]):
                step(per_worker)
            barrier()
            rates.append(per_worker * world * config["steps"] / (time.perf_counter() - started))
        if rank == 0:
            emit("TRAINING", {
                "workers": world, "scaling": scaling, "global_batch": per_worker * world,
                "steps": config["steps"], "samples_per_s": [round(r, 2) for r in rates],
                "min": round(min(rates), 2), "median": round(statistics.median(rates), 2),
                "max": round(max(rates), 2), "backend": config["backend"], "ifname": ifname,
            })  # fmt: skip
    if world >= 2 and config["sweep_max_mib"]:
        size = 1024
        while size <= config["sweep_max_mib"] << 20:
            tensor = torch.ones(size // 4, dtype=torch.float32, device=device)
            dist.all_reduce(tensor)  # warm-up, untimed
            iters = config["sweep_iters"]
            barrier()
            started = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(tensor)
            barrier()
            seconds = (time.perf_counter() - started) / iters
            algbw = size / seconds
            if rank == 0:
                emit("ALLREDUCE", {
                    "workers": world, "bytes": size, "seconds": seconds, "iterations": iters,
                    "algbw_bytes_per_s": algbw, "busbw_bytes_per_s": algbw * 2 * (world - 1) / world,
                    "backend": config["backend"], "ifname": ifname,
                })  # fmt: skip
            size *= 4


def registered():
    """A Ray Train callback, run by the controller, printing ``CHECKPOINT {"step": s}`` for each
    checkpoint it registers (once every worker has reported that step): the checkpoint a new
    worker group starts from is the last of these, which may lag what rank 0 has reported."""
    from ray.train import UserCallback

    class Registered(UserCallback):
        def after_report(self, run_context, metrics, checkpoint) -> None:
            if checkpoint is not None:
                emit("CHECKPOINT", {"step": metrics[0]["step"]})

    return Registered()


def fit(workers: int, config: dict, storage: dict, max_failures: int):
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    trainer = TorchTrainer(
        train_loop,
        train_loop_config=config,
        torch_config=TorchConfig(backend=config["backend"]),
        # One Ray GPU per worker keeps the workers on the GPU nodes (the head has none);
        # SPREAD puts them on distinct nodes while there are enough, best-effort after a loss.
        scaling_config=ScalingConfig(
            num_workers=workers,
            use_gpu=True,
            resources_per_worker={"CPU": 1, "GPU": 1},
            placement_strategy="SPREAD",
        ),
        run_config=RunConfig(
            name=f"fleet-training-{workers}w-{int(time.time())}",
            failure_config=FailureConfig(max_failures=max_failures),
            callbacks=[registered()],
            **storage,
        ),
    )
    return trainer.fit()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ifname", required=True, help="the mesh interface (node state mesh.interface)")
    p.add_argument("--mtu", type=int, required=True, help="its MTU (node state mesh.mtu)")
    p.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    p.add_argument("--max-workers", type=int, help="default: every node with a Ray GPU")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--warmup-steps", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--sweep-max-mib", type=int, default=64, help="0: no all-reduce sweep")
    p.add_argument("--sweep-iters", type=int, default=3)
    p.add_argument(
        "--checkpoint-every", type=int, default=0, help="fault-tolerance mode: checkpoint every K steps"
    )
    p.add_argument("--total-steps", type=int, default=400)
    p.add_argument("--max-failures", type=int, default=2)
    p.add_argument(
        "--storage-path", help="shared storage for checkpoints (default: the head, through an actor)"
    )
    args = p.parse_args()
    env = {
        "GLOO_SOCKET_IFNAME": args.ifname,
        "NCCL_SOCKET_IFNAME": args.ifname,
        # Ray Train's print patch would log each worker's line twice; the driver's log is enough.
        "RAY_TRAIN_ENABLE_PRINT_PATCH": "0",
    }
    ray.init(namespace=TRAINING, runtime_env={"env_vars": env})
    gpu_nodes = [n for n in ray.nodes() if n["Alive"] and n["Resources"].get("GPU", 0) > 0]
    if not gpu_nodes:
        raise SystemExit("no alive node with GPUs in the cluster")
    most = args.max_workers or len(gpu_nodes)
    config = {
        "ifname": args.ifname, "mtu": args.mtu, "backend": args.backend, "batch": args.batch,
        "warmup_steps": args.warmup_steps, "steps": args.steps, "repeats": args.repeats,
        "sweep_max_mib": args.sweep_max_mib, "sweep_iters": args.sweep_iters,
        "checkpoint_every": args.checkpoint_every, "total_steps": args.total_steps,
    }  # fmt: skip
    result: dict = {"workers": most, "backend": args.backend, "ifname": args.ifname, "mtu": args.mtu}
    with checkpoint_storage(args.storage_path) as storage:
        if args.checkpoint_every:
            outcome = fit(most, config, storage, args.max_failures)
            result["final_step"] = outcome.metrics.get("step") if outcome.metrics else None
            result["error"] = repr(outcome.error) if outcome.error else None
        else:
            for workers in range(1, most + 1):
                outcome = fit(workers, config, storage, 0)
                if outcome.error:
                    raise SystemExit(f"training with {workers} worker(s) failed: {outcome.error!r}")
    emit("RESULT", result)
    if result.get("error"):
        raise SystemExit(1)


if __name__ == "__main__":
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    main()
