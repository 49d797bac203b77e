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
- ``gpu``: NVML telemetry (``nvidia-smi --query-gpu``) on nodes with the nvml backend; nodes
  with simulated GPUs are reported as not measured (simulated), never as a number.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

from swarm_infra.metrics import probes
from swarm_infra.metrics.acceptance import NOT_SIMULATED
from swarm_infra.metrics.fio import parse_fio
from swarm_infra.metrics.iperf3 import parse_iperf3
from swarm_infra.metrics.measurement import Measurement, MeasurementParseError, make_labels
from swarm_infra.metrics.ping import parse_ping
from swarm_infra.metrics.schedule import PairTest, admission_pairs, representative_pairs, schedule_rounds
from swarm_infra.metrics.targets import NodeTarget

PARTS = ("network", "storage", "gpu")
"""What ``--only`` chooses from, in the order a run measures them."""


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
        self, targets: list[NodeTarget], shell: Shell, options: Options, progress: Callable[[str], None]
    ):
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
        result = self.shell(node.name, probes.nvidia_smi_command(), 60)
        try:
            if result.rc != 0:
                raise MeasurementParseError(f"nvidia-smi: {why(result)}")
            return probes.parse_nvidia_smi(result.stdout, node=node.name, site=node.site)
        except MeasurementParseError as exc:
            self._miss(node.name, "gpu", "NVML telemetry", str(exc))
            return []

    def gpu(self) -> None:
        real = [t for t in self.targets.values() if t.gpu_backend == "nvml"]
        for t in self.targets.values():
            if t.gpu_backend == "simulated":
                self._miss(t.name, "gpu", "NVML telemetry, matmul TFLOP/s", NOT_SIMULATED, failed=False)
        self.progress(f"gpu: NVML telemetry on {len(real)} node(s) with real GPUs")
        for ms in self._parallel(self.telemetry, real, self.options.max_parallel):
            self.outcome.measurements += ms

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
) -> Outcome:
    """Measure ``parts`` (a subset of :data:`PARTS`) on ``targets``; never raises for a node
    or tool failure (each is a NotMeasured with ``failed``). Raises ValueError for an unknown part."""
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise ValueError(f"unknown part(s) {', '.join(sorted(unknown))}; choose from {', '.join(PARTS)}")
    run = _Run(targets, shell, options or Options(), progress)
    for part in PARTS:
        if part in parts:
            started = time.monotonic()
            getattr(run, part)()
            progress(f"{part}: done in {time.monotonic() - started:.1f} s")
    return run.outcome
