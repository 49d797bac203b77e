"""Measure a fleet: run the probes on its nodes through a shell, and collect Measurements.

The shell is given by the caller (``swarm metrics run`` passes one over SSH), so this module
decides what runs where and in what order, and never how a node is reached. Parts:

- ``network``: ping from every node to every other node over the mesh (wg0) and over the
  underlay (where the destination is reachable: in its own site, or not behind NAT), all of a
  node's pings at once; iperf3 single stream and ``-P 4`` over both paths for one pair per site
  pair, one pair inside each site, and every node not yet in a pair to its site's
  representative, in rounds that never put two tests on one node or link
  (:mod:`swarm_infra.metrics.schedule`); each test repeated, the paths alternating, after
  iperf3's omitted warm-up (``-O``); the mesh median against the underlay median on the same
  pair (``wireguard.overhead``).
- ``storage``: fio on each node's scratch mount (direct I/O, a ramp before the figures).
- ``gpu``: on nodes with the nvml backend, NVML telemetry (``nvidia-smi --query-gpu``), the
  GPUs' identity (name, UUID, memory), remapped rows and XID errors
  (:mod:`swarm_infra.metrics.gpu_health`), a bf16 matmul on every GPU for
  ``matmul_seconds`` (PyTorch, FLOP/s) sampling PCIe link state and clock event reasons
  under load, and ``dcgmi diag`` where DCGM is installed (not measured, not failed, where it
  is not); nodes with simulated GPUs are reported as not measured (simulated), never as a number.
- ``training``: Ray Train data-parallel training (``jobs/fleet_training.py``, submitted on
  the head) over 1..N GPU workers of the fleet's Ray cluster, its collectives bound to the
  mesh interface (gloo where the GPU workers' GPUs are simulated, NCCL on real ones): weak
  and strong scaling with their spread, and an all-reduce sweep (algbw, busbw) over the mesh
  (:mod:`swarm_infra.metrics.jobs`); optionally the batches streamed from a Ray Dataset,
  the model split over two workers (``--pipeline``), and the workers chosen by measured
  mesh RTT (:mod:`swarm_infra.resolve.placement`).
- ``inference``: a small model served with Ray Serve on the GPU workers, behind the head's
  proxy on its mesh address; open-loop load at fixed request rates from a GPU worker
  (``jobs/fleet_inference.py``): latency p50/p90/p99 from the intended send times, failures
  counted; an error rate above ``Options.max_error_rate`` fails the run.
"""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from swarm_infra.metrics import gpu_health, jobs, probes
from swarm_infra.metrics.acceptance import NOT_SIMULATED
from swarm_infra.metrics.fio import parse_fio
from swarm_infra.metrics.iperf3 import parse_iperf3
from swarm_infra.metrics.latency import node_rtt_ms
from swarm_infra.metrics.measurement import Measurement, MeasurementParseError, make_labels
from swarm_infra.metrics.ping import parse_ping
from swarm_infra.metrics.schedule import PairTest, admission_pairs, representative_pairs, schedule_rounds
from swarm_infra.metrics.targets import NodeTarget, RayTarget
from swarm_infra.resolve.placement import PlacementError, closest_group

GPU_PROBES = "NVML telemetry, GPU identity and health, matmul FLOP/s under load, DCGM diagnostics"
"""What the ``gpu`` part measures, as a not-measured record names it."""

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
    """The run's knobs: ping count and interval (s); iperf3 measured seconds per test, seconds
    left out before them (``-O``), stream counts and repeats (each test runs ``iperf3_repeats``
    times, underlay and mesh alternating); fio file size (MiB per job), measured seconds per
    job and unmeasured ramp before them; tests at once per round; the matmul probe's
    duration (s) and ``dcgmi diag`` run level (1-4; ``swarm metrics run`` takes the highest
    ``min_dcgm_diag_level`` of the fleet's NodeAcceptance, default 1); ``training_workers``:
    0 trains on every GPU worker where Ray places them, K on the K GPU workers with the
    lowest highest measured mesh RTT (to each other and the head), pinned;
    ``training_data``: ``memory`` or ``stream`` (the job's ``--data``: a Ray Dataset streamed
    to the workers); ``training_pipeline``: also run the job's ``--pipeline`` (the model
    split over two workers, checked against the whole model)."""

    ping_count: int = 20
    ping_interval_s: float = 0.2
    iperf3_duration_s: int = 10
    iperf3_omit_s: int = probes.IPERF3_OMIT_S
    iperf3_streams: tuple[int, ...] = (1, 4)
    iperf3_repeats: int = 3
    fio_size_mib: int = 1024
    fio_runtime_s: int = 10
    fio_ramp_s: int = probes.FIO_RAMP_S
    max_parallel: int = 4
    training_steps: int = 20
    training_workers: int = 0
    training_data: str = "memory"
    training_pipeline: bool = False
    training_repeats: int = 3
    allreduce_max_mib: int = 64
    inference_rates: tuple[float, ...] = (10.0, 20.0, 40.0)
    inference_requests: int = 1000
    max_error_rate: float = jobs.DEFAULT_MAX_ERROR_RATE
    inference_port: int = 8000
    matmul_python: str = "python3"
    matmul_seconds: float = probes.MATMUL_SECONDS
    dcgm_diag_level: int = 1


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


# A line the Ray CLI logs itself: "<date> <time>,<ms>\t<LEVEL> <file>:<line> -- <text>"
# (ray/autoscaler/_private/cli_logger.py and the logging format of `ray job submit`, Ray 2.60).
_RAY_CLI_LINE = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3}\s+[A-Z]+ \S+:\d+ -- (.*)$")


def job_why(result: Result) -> str:
    """Why a ``ray job submit`` (:func:`probes.ray_job`) failed, at most 200 characters: the
    job's own last line (its ``SystemExit`` message or its exception), not what the Ray CLI
    logs after it ("WebSocket closed for job ...", the "Job '...' failed" banner: Ray 2.60,
    ray/dashboard/modules/job/cli.py ``_log_job_status``). Without a line of the job's own:
    Ray's "Status message" (a job that never started), else :func:`why`."""
    own: list[str] = []
    status = ""
    for is_log, stream in ((True, result.stdout), (False, result.stderr)):
        for line in stream.splitlines():
            line = line.strip()
            logged = _RAY_CLI_LINE.match(line)
            if logged:
                if logged.group(1).startswith("Status message: "):
                    status = logged.group(1)[len("Status message: ") :]
            elif is_log and line and set(line) != {"-"}:
                own.append(line)
    return (own[-1] if own else status or why(result))[:200]


class _Run:
    def __init__(
        self,
        targets: list[NodeTarget],
        shell: Shell,
        options: Options,
        progress: Callable[[str], None],
        ray: RayTarget | None = None,
        rtt_ms: Mapping[tuple[str, str], float] | None = None,
    ):
        self.ray = ray
        self.rtt_ms = rtt_ms
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
        """Each stream count, ``iperf3_repeats`` times over both paths in turn (underlay, mesh,
        underlay, mesh...: a drift over the minutes of the test weighs on both paths alike),
        data flowing src -> dst; the server side is the end the other can reach (``-R`` when only
        the sender is reachable). Records carry ``repeat`` (1..N)."""
        src, dst = self.targets[test.src], self.targets[test.dst]
        o = self.options
        out: list[Measurement] = []
        ends: list[tuple[str, NodeTarget, NodeTarget, str, bool]] = []
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
            ends.append((path, server, client, address, reverse))
        seconds = o.iperf3_omit_s + o.iperf3_duration_s
        for streams in o.iperf3_streams:
            for repeat in range(1, o.iperf3_repeats + 1):
                for path, server, client, address, reverse in ends:
                    what = f"iperf3 {src.name}->{dst.name} {path} P{streams} #{repeat}"
                    started = self.shell(server.name, probes.iperf3_server(address, seconds + 30), 30)
                    if started.rc != 0:
                        self._miss(src.name, "network", what, why(started))
                        continue
                    client_cmd = probes.iperf3_client(
                        address, o.iperf3_duration_s, streams, reverse, omit_s=o.iperf3_omit_s
                    )
                    result = self.shell(client.name, client_cmd, seconds + 30)
                    try:
                        out += parse_iperf3(
                            result.stdout,
                            src=src.name,
                            dst=dst.name,
                            path=path,
                            src_site=src.site,
                            dst_site=dst.site,
                            repeat=repeat,
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
        if self.options.iperf3_repeats == 0:  # ping only (a latency matrix needs no bandwidth)
            self.progress(f"network: iperf3 skipped on {len(tests)} pair(s) (--repeats 0)")
            for t in tests:
                self._miss(t.src, "network", f"iperf3 {t.src}->{t.dst}", "skipped (--repeats 0)", False)
            return
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
        cmd = probes.fio_command(node.scratch, o.fio_size_mib, o.fio_runtime_s, o.fio_ramp_s)
        # Three jobs of ramp + runtime each, and the layout of two files (at 10 MB/s at worst).
        result = self.shell(node.name, cmd, 3 * (o.fio_ramp_s + o.fio_runtime_s) + o.fio_size_mib // 5 + 120)
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
        """NVML telemetry; GPU identity, remapped rows and XID errors; the matmul probe with its
        samples under load (PyTorch, where the node has it); DCGM diagnostics (where dcgmi is)."""
        out: list[Measurement] = []
        lab = {"node": node.name, "site": node.site}
        result = self.shell(node.name, probes.nvidia_smi_command(), 60)
        try:
            if result.rc != 0:
                raise MeasurementParseError(f"nvidia-smi: {why(result)}")
            out += probes.parse_nvidia_smi(result.stdout, **lab)
        except MeasurementParseError as exc:
            self._miss(node.name, "gpu", "NVML telemetry", str(exc))
        result = self.shell(node.name, gpu_health.inventory_command(), 120)
        found, problems = gpu_health.parse_inventory(result.stdout, **lab)
        out += found
        for section, reason in sorted(problems.items()):
            self._miss(node.name, "gpu", f"GPU {section}", reason)
        o = self.options
        result = self.shell(
            node.name,
            probes.matmul_command(o.matmul_python, seconds=o.matmul_seconds),
            o.matmul_seconds + 300,
        )
        try:
            out += probes.parse_matmul(result.stdout, **lab)
            out += gpu_health.parse_load_samples(result.stdout, **lab)
        except MeasurementParseError as exc:
            self._miss(
                node.name, "gpu", "matmul FLOP/s under load", str(exc) if result.rc == 0 else why(result)
            )
        level = o.dcgm_diag_level
        result = self.shell(
            node.name, gpu_health.dcgm_diag_command(level), gpu_health.DCGM_DIAG_TIMEOUT_S[level]
        )
        try:
            out += gpu_health.parse_dcgm_diag(result.stdout, level, **lab)
        except gpu_health.DcgmUnavailable as exc:
            self._miss(node.name, "gpu", f"dcgmi diag -r {level}", str(exc), failed=False)
        except MeasurementParseError as exc:
            self._miss(node.name, "gpu", f"dcgmi diag -r {level}", str(exc))
        return out

    def gpu(self) -> None:
        real = [t for t in self.targets.values() if t.gpu_backend == "nvml"]
        for t in self.targets.values():
            if t.gpu_backend == "simulated":
                self._miss(t.name, "gpu", GPU_PROBES, NOT_SIMULATED, failed=False)
        self.progress(
            f"gpu: identity, health, matmul and DCGM diagnostics on {len(real)} node(s) with real GPUs"
        )
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
            self._miss(ray.head, part, what, f"the job failed: {job_why(result)}")
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
        args = [
            "--ifname", ifname, "--mtu", str(mtu), "--backend", backend,
            "--steps", str(o.training_steps), "--repeats", str(o.training_repeats),
            "--sweep-max-mib", str(o.allreduce_max_mib),
        ]  # fmt: skip
        nodes: list[str] = []
        if self.ray and o.training_workers:
            placed = self._placed(meshed, o.training_workers)
            if placed is None:
                return
            workers = placed
            nodes = ["--nodes", ",".join(t.mesh or "" for t in placed)]
        if self.ray:
            self.progress(
                f"training: Ray Train over 1..{len(workers)} GPU worker(s) of {self.ray.cluster}, "
                f"{backend} on {ifname} (MTU {mtu}), data {o.training_data}"
            )
        scaling = (
            args
            + ["--data", o.training_data]
            + (["--max-workers", str(len(workers)), *nodes] if nodes else [])
        )
        self._ray_job(
            "training", "Ray training throughput", "fleet_training.py", scaling, jobs.parse_training
        )
        if not o.training_pipeline or self.ray is None:
            return
        if len(workers) < 2:
            self._miss(
                self.ray.head, "training", "Ray pipeline training", "the pipeline needs two GPU workers"
            )
            return
        self.progress("training: the model split over two workers (--pipeline)")
        # Placed: the first two of the chosen group (ranks 0 and 1, the stages).
        pipeline = [
            *args,
            "--pipeline",
            *(["--nodes", ",".join(t.mesh or "" for t in workers[:2])] if nodes else []),
        ]
        self._ray_job("training", "Ray pipeline training", "fleet_training.py", pipeline, jobs.parse_pipeline)

    def _placed(self, meshed: list[NodeTarget], k: int) -> list[NodeTarget] | None:
        """The ``k`` GPU workers with the lowest highest mesh RTT between them and to the head
        (:func:`resolve.placement.closest_group`), in rank order, from ``rtt_ms`` or this
        run's mesh pings; None, recorded as a failure, when no group can be chosen."""
        assert self.ray is not None
        rtt = self.rtt_ms if self.rtt_ms is not None else node_rtt_ms(self.outcome.measurements)
        try:
            group = closest_group(rtt, [t.name for t in meshed if t.mesh], k, anchor=self.ray.head)
        except PlacementError as exc:
            self._miss(self.ray.head, "training", "Ray training throughput", f"placement by RTT: {exc}")
            return None
        self.progress(
            f"training: placed by measured mesh RTT on {', '.join(group.members)} "
            f"(highest RTT {group.worst_rtt_ms:g} ms, the head {self.ray.head} included)"
        )
        return [self.targets[n] for n in group.members]

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
    """``wireguard.overhead`` (%): 100 * (1 - median(mesh) / median(underlay)) of
    ``end.sum_received.bits_per_second`` over the repeats of each (src, dst, streams) measured
    over both paths; labels src, dst, streams and ``repeats`` (how many runs each median has,
    the fewer of the two paths). The median, not the mean: one run disturbed by other traffic
    moves it least."""
    received: dict[tuple[str | None, str | None, str | None], dict[str, list[float]]] = {}
    for m in ms:
        if m.tool == "iperf3" and m.field == "end.sum_received.bits_per_second":
            key = (m.label("src"), m.label("dst"), m.label("streams"))
            received.setdefault(key, {}).setdefault(str(m.label("path")), []).append(m.value)
    out = []
    for (src, dst, streams), by_path in received.items():
        underlay, mesh = by_path.get("underlay"), by_path.get("mesh")
        if underlay and mesh and statistics.median(underlay) > 0:
            pct = 100.0 * (1.0 - statistics.median(mesh) / statistics.median(underlay))
            labels = make_labels(src=src, dst=dst, streams=streams, repeats=min(len(underlay), len(mesh)))
            out.append(Measurement("swarm", "wireguard.overhead", pct, "%", labels))
    return out


def measure(
    targets: list[NodeTarget],
    shell: Shell,
    parts: Iterable[str] = PARTS,
    options: Options | None = None,
    progress: Callable[[str], None] = lambda line: None,
    ray: RayTarget | None = None,
    rtt_ms: Mapping[tuple[str, str], float] | None = None,
) -> Outcome:
    """Measure ``parts`` (a subset of :data:`PARTS`) on ``targets`` (and the Ray cluster
    ``ray`` for ``training``); never raises for a node or tool failure (each is a NotMeasured
    with ``failed``). Raises ValueError for an unknown part. ``rtt_ms``: node-pair mesh RTT
    (ms, :func:`metrics.latency.node_rtt_ms`) that ``Options.training_workers`` places the
    training by; None: this run's own mesh pings (``network`` among ``parts``)."""
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise ValueError(f"unknown part(s) {', '.join(sorted(unknown))}; choose from {', '.join(PARTS)}")
    run = _Run(targets, shell, options or Options(), progress, ray, rtt_ms)
    for part in PARTS:
        if part in parts:
            started = time.monotonic()
            getattr(run, part)()
            progress(f"{part}: done in {time.monotonic() - started:.1f} s")
    return run.outcome
