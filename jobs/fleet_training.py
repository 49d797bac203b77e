"""Data-parallel training over the fleet's Ray cluster (`swarm metrics run --only training`).

    ray job submit --address http://<head mesh address>:8265 --working-dir DIR -- \
        python fleet_training.py --ifname wg0 --mtu 1420 [--backend gloo|nccl] [--steps 20] \
        [--repeats 3] [--sweep-max-mib 64] [--checkpoint-every 0 --total-steps N] \
        [--data memory|stream [--data-rows 65536]] [--pipeline [--micro-batches 4]] \
        [--nodes MESH_ADDRESS,...]

Ray Train (``TorchTrainer``, Ray Train V2) trains a small real model, a multilayer
perceptron (64-256-256-10) on scikit-learn's digits set (shipped in the scikit-learn wheel,
nothing downloaded), with ``DistributedDataParallel``: gradients are all-reduced between the
workers every step, over the process group's backend (``gloo`` on CPU nodes, ``nccl`` on GPU
nodes), whose sockets are bound to the mesh interface (``GLOO_SOCKET_IFNAME`` /
``NCCL_SOCKET_IFNAME`` = ``--ifname``, the node state's ``mesh.interface``). Each worker
checks that interface's MTU against ``--mtu`` (the node state's ``mesh.mtu``) and refuses to
run on a mismatch: TCP over it then segments at the mesh's MTU. Workers ask for one Ray GPU
each (the GPU workers; the head has none) and are spread over the nodes.

Modes (each prints ``TAG {json}`` lines; the last line is ``RESULT {json}``). The result
lines (``TRAINING``, ``DATA``, ``ALLREDUCE``, ``PIPELINE``) are the driver's: rank 0 measures
and sends them with ``ray.train.report``, the driver prints them (:func:`publish`), and the
parsers read only lines the driver printed, never a worker's (Ray forwards those prefixed with
the worker's name; ``swarm_infra.metrics.jobs.tagged``):

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

* pipeline (``--pipeline``): the model cut over two workers (stages), activations and their
  gradients sent between them per micro-batch (:func:`pipeline_loop`); one ``PIPELINE``
  line with the samples/s of each window, the unpartitioned model's on one worker, and the
  largest loss difference between the two at any step (the job fails above
  ``--tolerance``).

Data (``--data``, scaling and fault-tolerance modes): ``memory`` (default) samples the digits
set each worker holds; ``stream`` feeds the workers from a Ray Dataset (``--data-rows`` rows
made from the digits set by Ray Data tasks) through TorchTrainer's ``datasets=`` and
``ray.train.get_dataset_shard("train").iter_torch_batches``: Ray Data's streaming executor
makes the blocks while the workers consume them, through the object store. A streamed run
prints a ``DATA`` line per (N, scaling): the rows, bytes and seconds waiting of each rank in
the timed windows; its samples/s include the input pipeline.

Placement (``--nodes``): the mesh addresses of the nodes to use, worker i on the i-th (Ray
label selectors on ``ray.io/node-id``, per worker); ``swarm metrics run --training-workers
K`` passes the K GPU workers ``swarm_infra.resolve.placement.closest_group`` chooses from
the measured mesh RTT. Every TRAINING, DATA and PIPELINE line lists ``addresses``, each
rank's node.

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
def check_mtu(config: dict) -> None:
    ifname = config["ifname"]
    mtu = int(Path(f"/sys/class/net/{ifname}/mtu").read_text())
    if mtu != config["mtu"]:
        raise RuntimeError(f"{ifname} has MTU {mtu}, the mesh declares {config['mtu']}")


def mlp():
    """The model: a multilayer perceptron 64-256-256-10 (digits' 8x8 pixels to 10 classes)."""
    from torch import nn

    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))


def digit_rows(batch: dict) -> dict:
    """Ray Data ``map_batches`` function: row ids to the digits set's row ``id % 1797``
    (features scaled to 0..1, float32; label int64). Runs in Ray Data's tasks, anywhere in
    the cluster; the rows reach the workers through the object store."""
    import numpy as np
    from sklearn.datasets import load_digits

    digits = load_digits()
    at = np.asarray(batch["id"]) % len(digits.target)
    return {"x": (digits.data[at] / 16.0).astype(np.float32), "y": digits.target[at].astype(np.int64)}


def worker_addresses() -> list[str]:
    """Every rank's node address (the node's Ray address, its mesh address on the fleet), in
    rank order; a collective: every rank calls it."""
    import torch.distributed as dist

    out: list = [None] * dist.get_world_size()
    dist.all_gather_object(out, ray.util.get_node_ip_address())
    return out


class Batches:
    """The worker's training batches. ``memory``: random rows of the digits set held by the
    worker (a seeded generator per rank). ``stream``: the worker's shard of the ``train``
    Ray Dataset, streamed through the object store by ``iter_torch_batches`` (a new epoch
    when one ends), counting the rows and bytes received and the seconds spent waiting."""

    def __init__(self, config: dict, rank: int, device) -> None:
        import torch
        from sklearn.datasets import load_digits

        self.device, self.stream = device, config.get("data") == "stream"
        self.rows = self.bytes = self.batches = 0
        self.wait_s = 0.0
        self._size, self._it = 0, None
        if not self.stream:
            digits = load_digits()
            self.x = torch.tensor(digits.data / 16.0, dtype=torch.float32, device=device)
            self.y = torch.tensor(digits.target, dtype=torch.long, device=device)
            self.generator = torch.Generator().manual_seed(rank)

    def _epochs(self, size: int):
        import ray.train

        shard = ray.train.get_dataset_shard("train")
        while True:
            got = 0
            for batch in shard.iter_torch_batches(batch_size=size, drop_last=True, device=self.device):
                got += 1
                yield batch["x"], batch["y"]
            if not got:
                raise RuntimeError(f"the dataset shard holds fewer than {size} rows")

    def next(self, size: int):
        import torch

        if not self.stream:
            idx = torch.randint(0, len(self.x), (size,), generator=self.generator).to(self.device)
            return self.x[idx], self.y[idx]
        if size != self._size:  # every rank changes size at the same step (lockstep epochs)
            self._size, self._it = size, self._epochs(size)
        started = time.perf_counter()
        x, y = next(self._it)
        self.wait_s += time.perf_counter() - started
        self.rows += len(y)
        self.bytes += x.nbytes + y.nbytes
        self.batches += 1
        return x, y

    def counts(self) -> dict:
        return {
            "rows": self.rows, "bytes": self.bytes, "batches": self.batches,
            "wait_s": round(self.wait_s, 4),
        }  # fmt: skip


def send_records(records: list, rank: int) -> None:
    """Send rank 0's result records to the driver (:func:`publish`). Every rank calls it:
    Ray Train's report is collective. Rank 0's report carries a checkpoint (the records as
    JSON), because the driver's ``Result.metrics`` are those of the last checkpoint Ray
    Train registered, and the metrics registered with a checkpoint are the first reporting
    rank's (Ray 2.60: train/v2/_internal/execution/controller/controller.py ``_build_result``,
    checkpoint/report_handler.py); the other ranks report none."""
    import ray.train

    with tempfile.TemporaryDirectory() as d:
        saved = None
        if rank == 0:
            (Path(d) / "records.json").write_text(json.dumps(records))
            saved = ray.train.Checkpoint.from_directory(d)
        ray.train.report({"records": records if rank == 0 else []}, checkpoint=saved)


def train_loop(config: dict) -> None:
    import ray.train
    import torch
    import torch.distributed as dist
    from torch import nn

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    ifname = config["ifname"]
    check_mtu(config)
    device = torch.device("cuda" if config["backend"] == "nccl" else "cpu")
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(mlp().to(device))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    data = Batches(config, rank, device)

    def step(batch: int) -> float:
        x, y = data.next(batch)
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
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

    addresses = worker_addresses()
    records: list = []  # rank 0's results, sent to the driver with ray.train.report (publish)
    for _ in range(config["warmup_steps"]):
        step(config["batch"])
    barrier()
    for scaling in ("weak", "strong"):
        per_worker = config["batch"] if scaling == "weak" else max(1, config["batch"] // world)
        rates = []
        before = data.counts()
        for _ in range(config["repeats"]):
            barrier()
            started = time.perf_counter()
            for _ in range(config["steps"]):
                step(per_worker)
            barrier()
            rates.append(per_worker * world * config["steps"] / (time.perf_counter() - started))
        if rank == 0:
            records.append(("TRAINING", {
                "workers": world, "scaling": scaling, "global_batch": per_worker * world,
                "steps": config["steps"], "samples_per_s": [round(r, 2) for r in rates],
                "min": round(min(rates), 2), "median": round(statistics.median(rates), 2),
                "max": round(max(rates), 2), "backend": config["backend"], "ifname": ifname,
                "data": config["data"], "addresses": addresses,
            }))  # fmt: skip
        if data.stream:  # what each rank received from its shard during the timed windows
            after = data.counts()
            mine = {k: round(after[k] - before[k], 4) for k in after}
            per_rank: list = [None] * world
            dist.all_gather_object(per_rank, mine)
            if rank == 0:
                records.append(("DATA", {
                    "workers": world, "scaling": scaling, "steps": config["steps"] * config["repeats"],
                    "batch_per_worker": per_worker, "addresses": addresses,
                    **{k: [r[k] for r in per_rank] for k in mine},
                }))  # fmt: skip
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
                records.append(("ALLREDUCE", {
                    "workers": world, "bytes": size, "seconds": seconds, "iterations": iters,
                    "algbw_bytes_per_s": algbw, "busbw_bytes_per_s": algbw * 2 * (world - 1) / world,
                    "backend": config["backend"], "ifname": ifname,
                }))  # fmt: skip
            size *= 4
    send_records(records, rank)


# ------------------------------------------------------------------ the model split over two workers
SPLIT = 4
"""The pipeline's cut: stage 0 holds the MLP's modules [0, SPLIT) (64-256-256 and their
ReLUs), stage 1 the rest (256-10) and the loss."""


def pipeline_loop(config: dict) -> None:
    """Pipeline parallelism over exactly two workers (GPipe's schedule): each step's batch
    is cut into ``micro_batches``; stage 0 (rank 0) runs the first layers on every micro-batch
    and sends each activation to stage 1 (``torch.distributed.send``, over the process
    group's backend: gloo on CPU, NCCL on GPU); stage 1 finishes each forward and its loss
    (the micro-batch's mean over ``micro_batches``, so that the step's gradient is the whole
    batch's), then runs the backwards and sends each activation's gradient back; both stages
    then take an optimizer step. Neither worker holds the whole model.

    The oracle: rank 0 then trains the unpartitioned model (same initial weights, the same
    batches, whole batches) for as many steps and compares the two runs' loss at every step;
    the job fails when they differ by more than ``tolerance``."""
    import ray.train
    import torch
    import torch.distributed as dist
    from torch import nn

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    if world != 2:
        raise RuntimeError(f"the pipeline has two stages, one per worker; {world} workers were started")
    check_mtu(config)
    device = torch.device("cuda" if config["backend"] == "nccl" else "cpu")
    batch, micro = config["batch"], config["micro_batches"]
    if batch % micro:
        raise RuntimeError(f"--batch {batch} is not a multiple of --micro-batches {micro}")
    loss_fn = nn.CrossEntropyLoss()
    data = Batches({"data": "memory"}, 0, device)  # rank 0's rows on both stages: the same batches
    total = config["warmup_steps"] + config["repeats"] * config["steps"]
    torch.manual_seed(0)
    full = mlp().to(device)  # built whole on both ranks (the same seed: the same weights), then cut
    stage = full[:SPLIT] if rank == 0 else full[SPLIT:]
    optimizer = torch.optim.SGD(stage.parameters(), lr=0.05, momentum=0.9)
    width = full[SPLIT - 2].out_features
    sent = 0

    def step() -> float:
        nonlocal sent
        x, y = data.next(batch)
        optimizer.zero_grad()
        step_loss = torch.zeros(1, device=device)
        if rank == 0:
            activations = []
            for xm in x.chunk(micro):
                a = stage(xm)
                dist.send(a.detach().contiguous(), dst=1)
                sent += a.nbytes
                activations.append(a)
            for a in activations:
                grad = torch.empty_like(a)
                dist.recv(grad, src=1)
                a.backward(grad)
            dist.recv(step_loss, src=1)
        else:
            inputs, losses = [], []
            for ym in y.chunk(micro):
                a = torch.empty(len(ym), width, device=device)
                dist.recv(a, src=0)
                a.requires_grad_()
                inputs.append(a)
                losses.append(loss_fn(stage(a), ym) / micro)
            for a, loss in zip(inputs, losses, strict=True):
                loss.backward()
                dist.send(a.grad.contiguous(), dst=0)
                sent += a.grad.nbytes
            step_loss = torch.stack(losses).sum().detach().reshape(1)
            dist.send(step_loss, dst=0)
        optimizer.step()
        return float(step_loss)

    def sync(both: bool) -> None:
        if both:
            dist.barrier()
        if device.type == "cuda":
            torch.cuda.synchronize()

    def timed(run_step, both: bool) -> tuple[list[float], list[float]]:
        """Every step's loss (warm-up included) and the samples/s of each timed window."""
        losses, rates = [run_step() for _ in range(config["warmup_steps"])], []
        for _ in range(config["repeats"]):
            sync(both)
            started = time.perf_counter()
            losses += [run_step() for _ in range(config["steps"])]
            sync(both)
            rates.append(batch * config["steps"] / (time.perf_counter() - started))
        return losses, rates

    addresses = worker_addresses()
    losses, rates = timed(step, True)
    per_step = sent / total  # rank 0: activations sent; rank 1: their gradients, as many bytes
    dist.barrier()
    if rank != 0:
        send_records([], rank)  # collective: waits for rank 0's, below
        return
    # The unpartitioned model on rank 0: the same seed, weights, batches and optimizer.
    torch.manual_seed(0)
    whole = mlp().to(device)
    reference_optimizer = torch.optim.SGD(whole.parameters(), lr=0.05, momentum=0.9)
    reference_data = Batches({"data": "memory"}, 0, device)

    def reference_step() -> float:
        x, y = reference_data.next(batch)
        reference_optimizer.zero_grad()
        loss = loss_fn(whole(x), y)
        loss.backward()
        reference_optimizer.step()
        return loss.item()

    reference, reference_rates = timed(reference_step, False)
    diff = max(abs(a - b) for a, b in zip(losses, reference, strict=True))
    record = ("PIPELINE", {
        "stages": 2, "micro_batches": micro, "global_batch": batch, "steps": config["steps"],
        "total_steps": total, "samples_per_s": [round(r, 2) for r in rates],
        "median": round(statistics.median(rates), 2),
        "reference_samples_per_s": [round(r, 2) for r in reference_rates],
        "reference_median": round(statistics.median(reference_rates), 2),
        "loss_first": losses[0], "loss_last": losses[-1], "reference_loss_last": reference[-1],
        "max_loss_diff": diff, "tolerance": config["tolerance"], "match": diff <= config["tolerance"],
        "activation_bytes_per_step": per_step, "backend": config["backend"], "ifname": config["ifname"],
        "addresses": addresses,
    })  # fmt: skip
    send_records([record], rank)
    if diff > config["tolerance"]:
        raise RuntimeError(f"the partitioned model's loss differs from the whole model's by {diff:.3g}")


def registered():
    """A Ray Train callback, run by the controller, printing ``CHECKPOINT {"step": s}`` for each
    checkpoint it registers (once every worker has reported that step): the checkpoint a new
    worker group starts from is the last of these, which may lag what rank 0 has reported."""
    from ray.train import UserCallback

    class Registered(UserCallback):
        def after_report(self, run_context, metrics, checkpoint) -> None:
            if checkpoint is not None and "step" in metrics[0]:  # not send_records' own
                emit("CHECKPOINT", {"step": metrics[0]["step"]})

    return Registered()


def publish(outcome) -> None:
    """Print, as the driver, the result records rank 0 sent (:func:`send_records`: they
    reach the driver through Ray Train's controller as ``Result.metrics``). Only the
    driver's own lines are results (``metrics.jobs.tagged``): Ray forwards every worker's
    stdout to the driver prefixed with its process's name, so a line a worker prints,
    whatever it says, is never taken for one (issue #38)."""
    for tag, data in (outcome.metrics or {}).get("records", []):
        emit(tag, data)


def fit(
    workers: int, config: dict, storage: dict, max_failures: int, loop=None, datasets=None, node_ids=None
):
    """One TorchTrainer run of ``loop`` (default :func:`train_loop`) over ``workers`` workers.
    ``datasets``: TorchTrainer's ``datasets`` (each worker reads its shard with
    ``ray.train.get_dataset_shard``). ``node_ids``: the Ray node of each worker, in rank order
    (at least ``workers`` of them): a label selector per worker on Ray's ``ray.io/node-id``
    label, which Ray Train turns into the placement group's ``bundle_label_selector``."""
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    selectors = [{"ray.io/node-id": n} for n in node_ids[:workers]] if node_ids else None
    trainer = TorchTrainer(
        loop or train_loop,
        train_loop_config=config,
        torch_config=TorchConfig(backend=config["backend"]),
        # One Ray GPU per worker keeps the workers on the GPU nodes (the head has none);
        # SPREAD puts them on distinct nodes while there are enough, best-effort after a loss.
        scaling_config=ScalingConfig(
            num_workers=workers,
            use_gpu=True,
            resources_per_worker={"CPU": 1, "GPU": 1},
            placement_strategy="SPREAD",
            label_selector=selectors,
        ),
        run_config=RunConfig(
            name=f"fleet-training-{workers}w-{int(time.time())}",
            failure_config=FailureConfig(max_failures=max_failures),
            callbacks=[registered()],
            **storage,
        ),
        datasets=datasets,
    )
    return trainer.fit()


def train_dataset(rows: int):
    """The ``train`` Ray Dataset of ``stream`` mode: ``rows`` rows made from their ids by
    :func:`digit_rows` (nothing downloaded), read lazily: Ray Data's streaming executor
    makes the blocks while the workers consume them."""
    import ray.data

    return ray.data.range(rows).map_batches(digit_rows, batch_format="numpy")


def node_ids_of(addresses: list[str]) -> list[str]:
    """The Ray node ID of each address (a node's Ray address: its mesh address on the
    fleet), in order; SystemExit naming an address no alive node has."""
    alive = {n["NodeManagerAddress"]: n["NodeID"] for n in ray.nodes() if n["Alive"]}
    missing = [a for a in addresses if a not in alive]
    if missing:
        raise SystemExit(f"no alive Ray node at {', '.join(missing)} (alive: {', '.join(sorted(alive))})")
    return [alive[a] for a in addresses]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ifname", required=True, help="the mesh interface (node state mesh.interface)")
    p.add_argument("--mtu", type=int, required=True, help="its MTU (node state mesh.mtu)")
    p.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    p.add_argument("--max-workers", type=int, help="default: every node with a Ray GPU, or every --nodes")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--warmup-steps", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--sweep-max-mib", type=int, default=64, help="0: no all-reduce sweep")
    p.add_argument("--sweep-iters", type=int, default=3)
    p.add_argument(
        "--data", choices=("memory", "stream"), default="memory",
        help="memory: each worker samples the digits set it holds; stream: a Ray Dataset, streamed",
    )  # fmt: skip
    p.add_argument("--data-rows", type=int, default=65536, help="rows of the stream mode's dataset")
    p.add_argument("--pipeline", action="store_true", help="the model split over two workers (stages)")
    p.add_argument("--micro-batches", type=int, default=4, help="pipeline: micro-batches per step")
    p.add_argument(
        "--tolerance", type=float, default=1e-4, help="pipeline: largest loss difference from the whole model"
    )
    p.add_argument(
        "--nodes",
        help="mesh addresses, comma-separated: worker i runs on the i-th (swarm_infra.resolve.placement)",
    )
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
    addresses = [a for a in (args.nodes or "").split(",") if a]
    node_ids = node_ids_of(addresses) if addresses else None
    if addresses:
        emit("PLACEMENT", {"addresses": addresses, "node_ids": node_ids})
    most = args.max_workers or len(addresses) or len(gpu_nodes)
    if addresses and most > len(addresses):
        raise SystemExit(f"--max-workers {most} is more than the {len(addresses)} --nodes")
    config = {
        "ifname": args.ifname, "mtu": args.mtu, "backend": args.backend, "batch": args.batch,
        "warmup_steps": args.warmup_steps, "steps": args.steps, "repeats": args.repeats,
        "sweep_max_mib": args.sweep_max_mib, "sweep_iters": args.sweep_iters,
        "checkpoint_every": args.checkpoint_every, "total_steps": args.total_steps,
        "data": args.data, "micro_batches": args.micro_batches, "tolerance": args.tolerance,
    }  # fmt: skip
    datasets = {"train": train_dataset(args.data_rows)} if args.data == "stream" else None
    result: dict = {"workers": most, "backend": args.backend, "ifname": args.ifname, "mtu": args.mtu}
    with checkpoint_storage(args.storage_path) as storage:
        if args.pipeline:
            result["workers"] = 2
            outcome = fit(2, config, storage, 0, pipeline_loop, node_ids=node_ids)
            publish(outcome)  # also when the oracle failed it: what was measured is kept
            if outcome.error:
                raise SystemExit(f"the pipeline run failed: {outcome.error!r}")
        elif args.checkpoint_every:
            outcome = fit(most, config, storage, args.max_failures, datasets=datasets, node_ids=node_ids)
            result["final_step"] = outcome.metrics.get("step") if outcome.metrics else None
            result["error"] = repr(outcome.error) if outcome.error else None
        else:
            for workers in range(1, most + 1):
                outcome = fit(workers, config, storage, 0, datasets=datasets, node_ids=node_ids)
                publish(outcome)
                if outcome.error:
                    raise SystemExit(f"training with {workers} worker(s) failed: {outcome.error!r}")
    emit("RESULT", result)
    if result.get("error"):
        raise SystemExit(1)


if __name__ == "__main__":
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    main()
