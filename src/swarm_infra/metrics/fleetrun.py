"""Measure a fleet: run the probes on its nodes through a shell, and collect Measurements.

The shell is given by the caller (``swarm metrics run`` passes one over SSH), so this module
decides what runs where and in what order, and never how a node is reached. Parts:

- ``network``: ping from every node to every other node over the mesh (wg0) and over the
  underlay (where the destination is reachable: in its own site, or not behind NAT), all of a
  node's pings at once; iperf3 single stream and ``-P 4`` over both paths for one pair per site
  pair, one pair inside each site, and every node not yet in a pair to its site's
  representative, in rounds that never put two tests on one node or link
  (:mod:`swarm_infra.metrics.schedule`); the mesh result against the underlay result on the
  same pair (``wireguard.overhead``).
- ``storage``: fio on each node's scratch mount.
- ``gpu``: NVML telemetry (``nvidia-smi --query-gpu``) and a short bf16 matmul probe
  (PyTorch, TFLOP/s) on nodes with the nvml backend; nodes with simulated GPUs are reported
  as not measured (simulated), never as a number.
- ``training``: Ray Train data-parallel training (``jobs/fleet_training.py``, submitted on
  the head) over 1..N GPU workers of the fleet's Ray cluster, its collectives bound to the
  mesh interface (gloo where the GPU workers' GPUs are simulated, NCCL on real ones): weak
  and strong scaling with their spread, and an all-reduce sweep (algbw, busbw) over the mesh
  (:mod:`swarm_infra.metrics.jobs`).
- ``inference``: a small model served with Ray Serve on the GPU workers, behind the head's
  proxy on its mesh address; open-loop load at fixed request rates from a GPU worker
  (``jobs/fleet_inference.py``): latency p50/p90/p99 from the intended send times, failures
  counted; an error rate above ``Options.max_error_rate`` fails the run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from swarm_infra.metrics import jobs, probes
from swarm_infra.metrics.acceptance import NOT_SIMULATED
from swarm_infra.metrics.fio import parse_fio
from swarm_infra.metrics.iperf3 import parse_iperf3
from swarm_infra.metrics.measurement import Measurement, MeasurementParseError, make_labels
from swarm_infra.metrics.ping import parse_ping
from swarm_infra.metrics.schedule import PairTest, admission_pairs, representative_pairs, schedule_rounds
from swarm_infra.metrics.targets import NodeTarget, RayTarget

PARTS = ("network", "storage", "gpu", "training", "inference")
"""What ``--only`` chooses from, in the order a run measures them."""

JOBS = Path(__file__).resolve().parents[3] / "jobs"
"""The Ray job scripts (the repository's ``jobs/``), uploaded to the head for each run."""


class Shell(Protocol):
    def __call__(self, node: str, command: str, timeout_s: float, stdin: str | None = None) -> Result: ...


@dataclass(frozen=True)
class Result:
    """What a command on a node gave: exit status (255: SSH could not reach the node), output."""

    rc: int
    stdout: str
    stderr: str


@dataclass(frozen=True)
class NotMeasured:
    """A measurement that has no number: ``failed`` when something went wrong (the node was
    unreachable, the tool failed), else not applicable (simulated GPUs, no scratch, NAT)."""

    node: str
    part: str
    what: str
    why: str
    failed: bool


@dataclass(frozen=True)
class Options:
    """The run's knobs: ping count and interval (s), iperf3 seconds per test and stream
    counts, fio file size (MiB) and seconds per job, tests at once per round."""

    ping_count: int = 20
    ping_interval_s: float = 0.2
    iperf3_duration_s: int = 5
    iperf3_streams: tuple[int, ...] = (1, 4)
    fio_size_mib: int = 256
    fio_runtime_s: int = 5
    max_parallel: int = 4
    training_steps: int = 20
    training_repeats: int = 3
    allreduce_max_mib: int = 64
    inference_rates: tuple[float, ...] = (10.0, 20.0, 40.0)
    inference_requests: int = 1000
    max_error_rate: float = jobs.DEFAULT_MAX_ERROR_RATE
    inference_port: int = 8000
    matmul_python: str = "python3"


@dataclass
class Outcome:
    measurements: list[Measurement] = field(default_factory=list)
    not_measured: list[NotMeasured] = field(default_factory=list)

    @property
    def failed(self) -> list[NotMeasured]:
        return [n for n in self.not_measured if n.failed]


def why(result: Result) -> str:
    text = (result.stderr or result.stdout).strip().splitlines()
    return (text[-1] if text else f"exit status {result.rc}")[:200]


class _Run:
    def __init__(
        self,
        targets: list[NodeTarget],
        shell: Shell,
        options: Options,
        progress: Callable[[str], None],
        ray: RayTarget | None = None,
    ):
        self.ray = ray
        self.targets = {t.name: t for t in targets}
        self.shell = shell
        self.options = options
        self.progress = progress
        self.outcome = Outcome()

    def _miss(self, node: str, part: str, what: str, why: str, failed: bool = True) -> None:
        self.outcome.not_measured.append(NotMeasured(node, part, what, why, failed))

    # ---------------------------------------------------------------- network
    def ping_from(self, src: NodeTarget) -> list[Measurement]:
        dests: list[tuple[NodeTarget, str, str]] = []
        for dst in self.targets.values():
            if dst.name == src.name:
                continue
            if src.mesh and dst.mesh:
                dests.append((dst, "mesh", dst.mesh))
            if dst.underlay_reachable_from(src):
                dests.append((dst, "underlay", dst.underlay))
            else:
                self._miss(src.name, "network", f"ping {dst.name} underlay", "behind NAT", failed=False)
        if not dests:
            return []
        o = self.options
        timeout = o.ping_count * o.ping_interval_s + 30
        result = self.shell(
            src.name, probes.ping_batch([d[2] for d in dests], o.ping_count, o.ping_interval_s), timeout
        )
        if result.rc != 0:
            self._miss(src.name, "network", "ping", why(result))
            return []
        out: list[Measurement] = []
        for (dst, path, _), text in zip(dests, probes.split_batch(result.stdout, len(dests)), strict=True):
            try:
                out += parse_ping(
                    text, src=src.name, dst=dst.name, path=path, src_site=src.site, dst_site=dst.site
                )
            except MeasurementParseError as exc:
                self._miss(src.name, "network", f"ping {dst.name} {path}", str(exc))
        return out

    def iperf3_pair(self, test: PairTest) -> list[Measurement]:
        """Both paths, each stream count, data flowing src -> dst; the server side is the end
        the other can reach (``-R`` when only the sender is reachable)."""
        src, dst = self.targets[test.src], self.targets[test.dst]
        o = self.options
        out: list[Measurement] = []
        for path in ("underlay", "mesh"):
            if path == "mesh":
                if not (src.mesh and dst.mesh):
                    continue
                server, client, address, reverse = dst, src, dst.mesh, False
            elif dst.underlay_reachable_from(src):
                server, client, address, reverse = dst, src, dst.underlay, False
            elif src.underlay_reachable_from(dst):
                server, client, address, reverse = src, dst, src.underlay, True
            else:
                self._miss(
                    src.name, "network", f"iperf3 {src.name}->{dst.name} underlay", "both behind NAT", False
                )
                continue
            for streams in o.iperf3_streams:
                what = f"iperf3 {src.name}->{dst.name} {path} P{streams}"
                started = self.shell(server.name, probes.iperf3_server(address, o.iperf3_duration_s + 30), 30)
                if started.rc != 0:
                    self._miss(src.name, "network", what, why(started))
                    continue
                client_cmd = probes.iperf3_client(address, o.iperf3_duration_s, streams, reverse)
                result = self.shell(client.name, client_cmd, o.iperf3_duration_s + 30)
                try:
                    out += parse_iperf3(
                        result.stdout,
                        src=src.name,
                        dst=dst.name,
                        path=path,
                        src_site=src.site,
                        dst_site=dst.site,
                    )
                except MeasurementParseError as exc:
                    self._miss(src.name, "network", what, str(exc) if result.stdout else why(result))
        return out

    def network(self) -> None:
        nodes = list(self.targets.values())
        self.progress(f"network: ping from {len(nodes)} node(s) to every other node, mesh and underlay")
        for ms in self._parallel(self.ping_from, nodes, len(nodes)):
            self.outcome.measurements += ms
        sites = {t.name: t.site for t in nodes}
        hubs = {t.site: t.name for t in nodes if t.hub}
        tests = representative_pairs(sites, hubs)
        tests += admission_pairs(sites, tests, hubs)
        rounds = schedule_rounds(tests, self.options.max_parallel)
        self.progress(
            f"network: iperf3 on {len(tests)} pair(s) in {len(rounds)} round(s), no link shared in a round"
        )
        for i, tests_in_round in enumerate(rounds, 1):
            names = ", ".join(f"{t.src}->{t.dst}" for t in tests_in_round)
            self.progress(f"network: round {i}/{len(rounds)}: {names}")
            for ms in self._parallel(self.iperf3_pair, tests_in_round, len(tests_in_round)):
                self.outcome.measurements += ms
                self.outcome.measurements += overhead(ms)

    # ---------------------------------------------------------------- storage
    def fio_on(self, node: NodeTarget) -> list[Measurement]:
        assert node.scratch is not None
        o = self.options
        cmd = probes.fio_command(node.scratch, o.fio_size_mib, o.fio_runtime_s)
        result = self.shell(node.name, cmd, 3 * o.fio_runtime_s + 120)
        try:
            return parse_fio(result.stdout, node=node.name, site=node.site, path=node.scratch)
        except MeasurementParseError as exc:
            self._miss(node.name, "storage", "fio", str(exc) if result.stdout.strip() else why(result))
            return []

    def storage(self) -> None:
        with_scratch = [t for t in self.targets.values() if t.scratch]
        for t in self.targets.values():
            if not t.scratch:
                self._miss(t.name, "storage", "fio", "no scratch declared", failed=False)
        self.progress(f"storage: fio on the scratch of {len(with_scratch)} node(s)")
        for ms in self._parallel(self.fio_on, with_scratch, self.options.max_parallel):
            self.outcome.measurements += ms

    # ---------------------------------------------------------------- gpu
    def telemetry(self, node: NodeTarget) -> list[Measurement]:
        """NVML telemetry, then the matmul probe (PyTorch, where the node has it)."""
        out: list[Measurement] = []
        result = self.shell(node.name, probes.nvidia_smi_command(), 60)
        try:
            if result.rc != 0:
                raise MeasurementParseError(f"nvidia-smi: {why(result)}")
            out += probes.parse_nvidia_smi(result.stdout, node=node.name, site=node.site)
        except MeasurementParseError as exc:
            self._miss(node.name, "gpu", "NVML telemetry", str(exc))
        result = self.shell(node.name, probes.matmul_command(self.options.matmul_python), 300)
        try:
            out += probes.parse_matmul(result.stdout, node=node.name, site=node.site)
        except MeasurementParseError as exc:
            self._miss(node.name, "gpu", "matmul TFLOP/s", str(exc) if result.rc == 0 else why(result))
        return out

    def gpu(self) -> None:
        real = [t for t in self.targets.values() if t.gpu_backend == "nvml"]
        for t in self.targets.values():
            if t.gpu_backend == "simulated":
                self._miss(t.name, "gpu", "NVML telemetry, matmul TFLOP/s", NOT_SIMULATED, failed=False)
        self.progress(f"gpu: NVML telemetry on {len(real)} node(s) with real GPUs")
        for ms in self._parallel(self.telemetry, real, self.options.max_parallel):
            self.outcome.measurements += ms

    # ---------------------------------------------------------------- training
    def _ray_job(
        self, part: str, what: str, script: str, args: list[str], parse: Callable
    ) -> list[Measurement]:
        """Submit ``script`` on the head and parse its log, also when the job failed (what it
        measured before failing is kept, and the failure recorded)."""
        ray = self.ray
        if ray is None:
            self._miss("-", part, what, "the fleet declares no RayCluster", False)
            return []
        command = probes.ray_job(ray.venv, ray.dashboard, script, args, ray.token)
        result = self.shell(ray.head, command, 1800, (JOBS / script).read_text())
        got: list[Measurement] = []
        try:
            got = parse(result.stdout, cluster=ray.cluster)
        except MeasurementParseError as exc:
            if result.rc == 0:
                self._miss(ray.head, part, what, str(exc))
        if result.rc != 0:
            self._miss(ray.head, part, what, f"the job failed: {why(result)}")
        self.outcome.measurements += got
        return got

    def training(self) -> None:
        o = self.options
        workers = [t for t in self.targets.values() if t.ray_gpu_worker]
        # NCCL needs a GPU on every rank; simulated GPUs have none, so their ranks use gloo.
        backend = "nccl" if workers and all(t.gpu_backend == "nvml" for t in workers) else "gloo"
        # The mesh's interface and MTU (one per fleet: the Mesh policy), as the node state has them.
        meshed = [t for t in workers if t.mesh_interface and t.mesh_mtu]
        if self.ray and not meshed:
            self._miss(self.ray.head, "training", "Ray training throughput", "no GPU worker on the mesh")
            return
        ifname, mtu = (meshed[0].mesh_interface or "", meshed[0].mesh_mtu or 0) if meshed else ("", 0)
        if self.ray:
            self.progress(
                f"training: Ray Train over 1..{len(workers)} GPU worker(s) of {self.ray.cluster}, "
                f"{backend} on {ifname} (MTU {mtu})"
            )
        args = [
            "--ifname", ifname, "--mtu", str(mtu), "--backend", backend,
            "--steps", str(o.training_steps), "--repeats", str(o.training_repeats),
            "--sweep-max-mib", str(o.allreduce_max_mib),
        ]  # fmt: skip
        self._ray_job("training", "Ray training throughput", "fleet_training.py", args, jobs.parse_training)

    # ---------------------------------------------------------------- inference
    def load_sender(self) -> NodeTarget | None:
        """The GPU worker that sends the inference load: the first by name outside the head's
        site (requests then cross the WAN, as a remote client's would), else the first."""
        workers = [t for t in self.targets.values() if t.ray_gpu_worker and t.mesh]
        head = self.targets.get(self.ray.head) if self.ray else None
        away = [t for t in workers if head is None or t.site != head.site]
        candidates = away or workers
        return candidates[0] if candidates else None

    def inference(self) -> None:
        o = self.options
        rates = ",".join(f"{r:g}" for r in o.inference_rates)
        sender = self.load_sender()
        if self.ray and sender is None:
            self._miss(
                self.ray.head, "inference", "Ray Serve latency", "no GPU worker to send the load", False
            )
            return
        if self.ray and sender:
            self.progress(
                f"inference: Ray Serve on the GPU workers, open-loop {rates} requests/s "
                f"({o.inference_requests} each) from {sender.name}"
            )
        args = ["--host", self.ray.head_ip if self.ray else "", "--port", str(o.inference_port)]
        args += ["--load-from", (sender.mesh or "") if sender else ""]
        args += ["--rates", rates, "--requests", str(o.inference_requests)]
        got = self._ray_job(
            "inference", "Ray Serve latency", "fleet_inference.py", args, jobs.parse_inference
        )
        for failure in jobs.error_rate_failures(got, o.max_error_rate):
            self._miss(self.ray.head if self.ray else "-", "inference", "Ray Serve error rate", failure)

    @staticmethod
    def _parallel(fn: Callable, items: list, workers: int) -> Iterable[list[Measurement]]:
        if not items:
            return []
        with ThreadPoolExecutor(max_workers=max(1, min(workers, 16))) as pool:
            return list(pool.map(fn, items))


def overhead(ms: list[Measurement]) -> list[Measurement]:
    """``wireguard.overhead`` (%): 100 * (1 - mesh / underlay) of ``end.sum_received.bits_per_second``
    for each (src, dst, streams) measured over both paths; labels src, dst, streams."""
    received: dict[tuple[str | None, str | None, str | None], dict[str, float]] = {}
    for m in ms:
        if m.tool == "iperf3" and m.field == "end.sum_received.bits_per_second":
            key = (m.label("src"), m.label("dst"), m.label("streams"))
            received.setdefault(key, {})[str(m.label("path"))] = m.value
    out = []
    for (src, dst, streams), by_path in received.items():
        if by_path.get("underlay") and "mesh" in by_path:
            pct = 100.0 * (1.0 - by_path["mesh"] / by_path["underlay"])
            out.append(
                Measurement(
                    "swarm", "wireguard.overhead", pct, "%", make_labels(src=src, dst=dst, streams=streams)
                )
            )
    return out


def measure(
    targets: list[NodeTarget],
    shell: Shell,
    parts: Iterable[str] = PARTS,
    options: Options | None = None,
    progress: Callable[[str], None] = lambda line: None,
    ray: RayTarget | None = None,
) -> Outcome:
    """Measure ``parts`` (a subset of :data:`PARTS`) on ``targets`` (and the Ray cluster
    ``ray`` for ``training``); never raises for a node or tool failure (each is a NotMeasured
    with ``failed``). Raises ValueError for an unknown part."""
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise ValueError(f"unknown part(s) {', '.join(sorted(unknown))}; choose from {', '.join(PARTS)}")
    run = _Run(targets, shell, options or Options(), progress, ray)
    for part in PARTS:
        if part in parts:
            started = time.monotonic()
            getattr(run, part)()
            progress(f"{part}: done in {time.monotonic() - started:.1f} s")
    return run.outcome
