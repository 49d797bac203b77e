"""``swarm metrics``: measure the fleet, keep the history, judge nodes for admission.

``swarm metrics run`` measures the fleet's nodes over SSH (ping, iperf3, fio, nvidia-smi);
``swarm metrics import`` reads iperf3 ``-J``, fio ``--output-format=json`` and ping output
saved elsewhere; both record a run in the history and compare it with the previous one.
``swarm metrics accept`` judges the fleet's latest run against its NodeAcceptance.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from ..engines.inventory import Connection, inventory_hosts, ssh_argv
from ..fleet.model import Fleet
from ..lab.state import read_connections
from ..metrics import fleetrun, probes
from ..metrics.acceptance import NO_MEASUREMENT, NodeFacts, evaluate, uncovered, verdict_table
from ..metrics.compare import DEFAULT_THRESHOLD, Change, compare
from ..metrics.fio import parse_fio
from ..metrics.history import DEFAULT_DB, History, RunInfo
from ..metrics.iperf3 import parse_iperf3
from ..metrics.latency import (
    current_relays,
    latency_matrix_yaml,
    node_rtt_ms,
    site_directed_rtt_ms,
    site_rtt_ms,
)
from ..metrics.measurement import Measurement, MeasurementParseError
from ..metrics.ping import parse_ping
from ..metrics.prometheus import LEGACY_TEXTFILE, TEXTFILE_DIR, node_textfiles, render_textfile, textfile_path
from ..metrics.report import to_json, to_table
from ..metrics.targets import NodeTarget, RayTarget, fleet_targets, ray_target
from ..resolve import desired_state
from ..resolve.analysis import Analysis
from ..resolve.mesh import site_representatives
from ..resolve.types import DesiredState
from .common import (
    EXIT_FAILURE,
    EXIT_INVALID,
    EXIT_OK,
    LIMIT_HELP,
    at_least,
    emit,
    fleet_args,
    format_arg,
    fraction,
    limit_arg,
    limited,
    load,
    output_problem,
    positive,
    simulated_nodes,
)


def parse_output(text: str, **labels: str) -> list[Measurement]:
    """Measurements from one tool's saved output, the tool told by the text itself.

    Raises MeasurementParseError when it is none of iperf3 JSON, fio JSON or ping output.
    """
    if '"fio version"' in text:
        return parse_fio(text, **labels)
    if '"start"' in text and '"end"' in text:
        return parse_iperf3(text, **labels)
    if "packets transmitted" in text:
        return parse_ping(text, **labels)
    raise MeasurementParseError("neither iperf3 -J, fio --output-format=json nor ping output")


_PART_OF_TOOL = {"iperf3": "network", "ping": "network", "fio": "storage"}
"""The part of a run each tool that ``swarm metrics import`` reads belongs to."""


def file_version(text: str) -> tuple[str, str] | None:
    """(tool, version as reported) from saved fio JSON (``"fio version"``) or iperf3 JSON
    (``start.version``); None for ping output (which prints no version) or anything else."""
    start = text.find("{")
    try:
        doc = json.loads(text[start:]) if start >= 0 else None
    except json.JSONDecodeError:
        return None
    if not isinstance(doc, dict):
        return None
    if isinstance(doc.get("fio version"), str):
        return "fio", doc["fio version"]
    version = doc.get("start", {}).get("version") if isinstance(doc.get("start"), dict) else None
    return ("iperf3", version) if isinstance(version, str) else None


def _label(pair: str) -> tuple[str, str]:
    """An argparse ``type``: ``KEY=VALUE`` with KEY a name."""
    key, sep, value = pair.partition("=")
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"{pair!r}: expected KEY=VALUE with KEY a name")
    return key, value


def _started_at(text: str) -> str:
    """An argparse ``type``: an ISO 8601 time (recorded as given, it would only be refused
    later, by ``swarm metrics accept``)."""
    if run_age_hours(text, datetime.now(UTC)) is None:
        raise argparse.ArgumentTypeError(f"{text!r}: expected an ISO 8601 time (2025-01-31T12:00:00+00:00)")
    return text


def _parts(text: str) -> str:
    """An argparse ``type``: comma-separated parts of a run (:data:`fleetrun.PARTS`)."""
    parts = [p for p in text.split(",") if p]
    if not parts or set(parts) - set(fleetrun.PARTS):
        raise argparse.ArgumentTypeError(f"{text!r}: choose from {', '.join(fleetrun.PARTS)}")
    return text


_label.__name__, _started_at.__name__, _parts.__name__ = "label", "time", "parts"


def _outputs_problem(args: argparse.Namespace) -> str | None:
    """Why --plots (a directory) or --write-latency-matrix (a file) cannot be written, or
    None: said before anything is measured or recorded, not after."""
    if args.plots and (problem := output_problem("--plots", args.plots, directory=True)):
        return problem
    if args.write_latency_matrix:
        return output_problem("--write-latency-matrix", args.write_latency_matrix, directory=False)
    return None


def _db_problem(db: str) -> str | None:
    """Why the history database ``db`` cannot take a run, or None. An existing file is opened
    (a file that is not a database is left as it is); an absent one is made when the run is
    recorded, so only the path to it is checked (the nearest existing path above it must be
    a directory), and nothing is made before."""
    path = Path(db)
    if not path.exists():
        above = next((a for a in path.parents if a.exists()), None)
        if above is not None and not above.is_dir():
            return f"--db {db}: {above} is a file; expected a directory there"
        return None
    try:
        History(path).close()
    except (sqlite3.Error, OSError) as exc:
        return f"{db}: not a usable metrics database ({exc})"
    return None


def cmd_import(args: argparse.Namespace) -> int:
    labels = dict(args.label)
    problem = _outputs_problem(args)
    if problem:
        print(f"swarm metrics import: {problem}", file=sys.stderr)
        return EXIT_INVALID
    measurements: list[Measurement] = []
    errors: list[str] = []
    versions: dict[str, dict[str, list[str]]] = {}
    for path in args.files:
        try:
            text = Path(path).read_text(errors="replace")
            measurements += parse_output(text, **labels)
            found = file_version(text)
            if found:
                versions.setdefault(found[0], {}).setdefault(found[1], []).append(str(path))
        except OSError as exc:
            errors.append(f"{path}: {exc.strerror or exc}")
        except MeasurementParseError as exc:
            errors.append(f"{path}: {exc}")
    if errors:
        for error in errors:
            print(error, file=sys.stderr)
        return EXIT_INVALID
    site_of: dict[str, str] = {}
    relays: dict[tuple[str, str], str] = {}
    if args.write_latency_matrix:
        analysis = load(
            argparse.Namespace(paths=[], fleet=args.fleet), "metrics import", "nothing was recorded"
        )
        site_of = {n.name: n.site for n in analysis.fleet.nodes.values()}
        relays = current_relays(analysis.topology)  # hysteresis holds on to them
    # An imported run covers the parts its files measured; the nodes are whatever they hold.
    info = RunInfo(
        parts=tuple(sorted({_PART_OF_TOOL[m.tool] for m in measurements if m.tool in _PART_OF_TOOL})),
        options={"import": [str(p) for p in args.files], "labels": labels},
        tool_versions=versions,
    )
    at = args.started_at or datetime.now(UTC).isoformat()
    recorded = _record(args.db, args.fleet, at, measurements, args.threshold, info)
    if isinstance(recorded, str):
        print(recorded, file=sys.stderr)
        return EXIT_INVALID
    run_id, previous, changes = recorded
    if args.write_latency_matrix:
        rtt = site_rtt_ms(measurements, site_of)
        directed = site_directed_rtt_ms(measurements, site_of)
        text = latency_matrix_yaml(rtt, relays=relays, directed=directed)
        Path(args.write_latency_matrix).write_text(text, encoding="utf-8")
    if args.plots:
        from ..metrics.plots import bandwidth_bars

        Path(args.plots).mkdir(parents=True, exist_ok=True)
        bandwidth_bars(measurements, Path(args.plots) / "bandwidth.png")
    if args.format == "json":
        emit(to_json(run_id, measurements, changes).rstrip("\n"))
    elif args.format == "prometheus":
        emit(render_textfile(measurements).rstrip("\n"))
    else:
        emit(to_table(measurements, changes).rstrip("\n"))
        flagged = sum(c.regression for c in changes)
        if flagged:
            emit(f"{flagged} regression(s) beyond {args.threshold:.0%} vs run {previous}")
    return EXIT_OK


def _record(
    db: str, fleet: str, started_at: str, measurements: list[Measurement], threshold: float, info: RunInfo
) -> tuple[int, int | None, list[Change]] | str:
    """Store a run and compare it with the fleet's previous one: (run id, previous id, changes),
    or the reason the database cannot be used."""
    try:
        history = History(db)
        run_id = history.record(fleet, started_at, measurements, info)
        previous = history.previous(fleet, run_id)
        changes = compare(measurements, history.measurements(previous), threshold) if previous else []
        history.close()
    except (sqlite3.Error, OSError) as exc:
        return f"{db}: not a usable metrics database ({exc})"
    return run_id, previous, changes


def _ssh_shell(connections: dict[str, Connection]) -> fleetrun.Shell:
    def shell(node: str, command: str, timeout_s: float, stdin: str | None = None) -> fleetrun.Result:
        argv = ssh_argv(connections[node], command)
        try:
            proc = subprocess.run(
                argv,
                input=stdin,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=timeout_s,
                stdin=None if stdin is not None else subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            return fleetrun.Result(124, "", f"no answer within {timeout_s:.0f} s")
        return fleetrun.Result(proc.returncode, proc.stdout, proc.stderr)

    return shell


def _tool_versions(targets: list[NodeTarget], shell: fleetrun.Shell) -> dict[str, dict[str, list[str]]]:
    """{tool: {version as reported: [nodes]}} for the measuring tools (probes.VERSIONED_TOOLS)
    on each target; a node that does not answer is left out."""

    def ask(t: NodeTarget) -> tuple[str, dict[str, str]]:
        result = shell(t.name, probes.tool_versions_command(), 30)
        return t.name, probes.parse_tool_versions(result.stdout) if result.rc == 0 else {}

    out: dict[str, dict[str, list[str]]] = {}
    with ThreadPoolExecutor(max_workers=max(1, min(len(targets), 16))) as pool:
        for node, versions in pool.map(ask, targets):
            for tool, version in versions.items():
                out.setdefault(tool, {}).setdefault(version, []).append(node)
    return out


def fleet_commit(paths: list[str]) -> str | None:
    """``git rev-parse HEAD`` of the repository holding the fleet's first path (the working
    directory when none is given); None outside a Git repository or without git."""
    first = Path(paths[0]) if paths else Path.cwd()
    where = first if first.is_dir() else first.parent
    try:
        proc = subprocess.run(
            ["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    commit = proc.stdout.strip()
    return commit if proc.returncode == 0 and len(commit) in (40, 64) else None


def _rates(text: str) -> tuple[float, ...]:
    """``20,40,80`` -> (20.0, 40.0, 80.0); each a positive number."""
    try:
        rates = tuple(float(r) for r in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated numbers (requests/s)") from None
    if not rates or min(rates) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: every rate must be positive")
    return rates


def _mesh_rtt(
    args: argparse.Namespace, network: fleetrun.Outcome | None, progress: Callable[[str], None]
) -> dict[tuple[str, str], float]:
    """Node-pair mesh RTT (ms) for ``--training-workers``: this run's network part's pings,
    else those of the fleet's latest recorded run that has any (empty: none recorded)."""
    if network is not None:
        return node_rtt_ms(network.measurements)
    history = History(args.db)
    try:
        for run_id, at in reversed(history.runs(args.fleet)):
            rtt = node_rtt_ms(history.measurements(run_id))
            if rtt:
                progress(f"training: placing by the mesh RTT of run {run_id} ({at})")
                return rtt
    finally:
        history.close()
    return {}


def _targets(args: argparse.Namespace, loaded: Analysis, state: DesiredState) -> list[NodeTarget]:
    """The nodes a run measures: the fleet's, narrowed by ``--limit`` (exit 2 for a term
    that selects none)."""
    targets = fleet_targets(loaded.fleet, state)
    chosen = limited(args.limit, {t.name: state["nodes"][t.name] for t in targets}, "metrics run")
    return targets if chosen is None else [t for t in targets if t.name in chosen]


def _options(args: argparse.Namespace, fleet: Fleet) -> fleetrun.Options:
    """The run's options, from the command line and the fleet's NodeAcceptance."""
    return fleetrun.Options(
        ping_count=args.ping_count,
        iperf3_duration_s=args.duration,
        iperf3_repeats=args.repeats,
        fio_runtime_s=args.duration,
        max_parallel=args.parallel,
        matmul_python=args.matmul_python,
        matmul_seconds=args.matmul_seconds,
        dcgm_diag_level=_dcgm_diag_level(fleet),
        allreduce_max_mib=args.allreduce_max_mib,
        inference_rates=args.inference_rates,
        inference_requests=args.inference_requests,
        max_error_rate=args.max_error_rate,
        training_workers=args.training_workers,
        training_data=args.training_data,
        training_pipeline=args.training_pipeline,
        training_steps=args.training_steps,
        training_repeats=args.training_repeats,
    )


def _measure(
    args: argparse.Namespace,
    parts: list[str],
    targets: list[NodeTarget],
    shell: fleetrun.Shell,
    options: fleetrun.Options,
    ray: RayTarget | None,
    progress: Callable[[str], None],
) -> dict[str, fleetrun.Outcome]:
    """Each part's outcome, measured one part at a time, so that each part's figures and
    failures are known apart (its textfiles)."""
    by_part: dict[str, fleetrun.Outcome] = {}
    for p in (p for p in fleetrun.PARTS if p in parts):
        rtt = None
        if p == "training" and options.training_workers:
            rtt = _mesh_rtt(args, by_part.get("network"), progress)
        by_part[p] = fleetrun.measure(targets, shell, [p], options, progress, ray, rtt)
    return by_part


def _write_textfiles(
    by_part: dict[str, fleetrun.Outcome],
    outcome: fleetrun.Outcome,
    targets: list[NodeTarget],
    shell: fleetrun.Shell,
    head: str | None,
    at: float,
) -> None:
    """node_exporter's textfile collector: a file per node and part, replacing only this
    run's parts; a node where one cannot be written is a failed ``output`` of the run."""
    files = node_textfiles(by_part, [t.name for t in targets], head, at)
    for (node, part), text in files.items():
        command = f"{probes.textfile_upload(textfile_path(part))} && rm -f {LEGACY_TEXTFILE}"
        written = shell(node, command, 30, text)
        if written.rc != 0:
            outcome.not_measured.append(
                fleetrun.NotMeasured(
                    node, "output", f"write {textfile_path(part)}", fleetrun.why(written), True
                )
            )


def _write_outputs(
    args: argparse.Namespace,
    outcome: fleetrun.Outcome,
    loaded: Analysis,
    site_of: dict[str, str],
    at: str,
    progress: Callable[[str], None],
) -> None:
    """``--write-latency-matrix`` and ``--plots`` (checked writable before the run)."""
    if args.write_latency_matrix:
        rtt = site_rtt_ms(outcome.measurements, site_of)
        # The routes the fleet had when measured (resolved before this run): hysteresis holds on to them.
        relays = current_relays(loaded.topology)
        directed = site_directed_rtt_ms(outcome.measurements, site_of)
        text = latency_matrix_yaml(rtt, measured_at=at, relays=relays, directed=directed)
        Path(args.write_latency_matrix).write_text(text, encoding="utf-8")
        progress(f"wrote a LatencyMatrix of {len(rtt)} site pair(s) to {args.write_latency_matrix}")
    if args.plots:
        from ..metrics.plots import bandwidth_bars, inference_latency, latency_heatmap, training_scaling

        out = Path(args.plots)
        out.mkdir(parents=True, exist_ok=True)
        drawn = [
            latency_heatmap(outcome.measurements, out / "latency.png", site_of),
            bandwidth_bars(outcome.measurements, out / "bandwidth.png"),
            training_scaling(outcome.measurements, out / "training.png"),
            inference_latency(outcome.measurements, out / "inference.png"),
        ]
        progress(f"plots: {', '.join(str(p) for p in drawn if p) or 'nothing to draw'}")


def _report_run(
    args: argparse.Namespace,
    run_id: int,
    previous: int | None,
    changes: list[Change],
    outcome: fleetrun.Outcome,
) -> None:
    """The run's report on stdout, in ``--format``."""
    if args.format == "json":
        emit(
            to_json(run_id, outcome.measurements, changes, [asdict(n) for n in outcome.not_measured]).rstrip()
        )
        return
    emit(to_table(outcome.measurements, changes).rstrip("\n"))
    for n in outcome.not_measured:
        emit(f"{'FAILED' if n.failed else 'not measured'}: {n.node}: {n.what}: {n.why}")
    flagged = sum(c.regression for c in changes)
    emit(
        f"run {run_id}: {len(outcome.measurements)} measurement(s), {len(outcome.failed)} failed, "
        f"{flagged} regression(s) beyond {args.threshold:.0%}"
        + (f" vs run {previous}" if previous else " (first run)")
        + f"; history {args.db}; textfiles {TEXTFILE_DIR}/swarm_metrics_<part>.prom"
    )


def cmd_run(args: argparse.Namespace) -> int:
    started = time.monotonic()

    def progress(line: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {line}", file=sys.stderr, flush=True)

    parts = [p for p in (args.only or ",".join(fleetrun.PARTS)).split(",") if p]
    # Where the run goes, checked before minutes of measuring: the history, the outputs.
    problem = _db_problem(args.db) or _outputs_problem(args)
    if problem:
        print(f"swarm metrics run: {problem}; nothing was measured", file=sys.stderr)
        return EXIT_INVALID
    loaded = load(args, "metrics run", "nothing was measured")
    state = desired_state(loaded)
    targets = _targets(args, loaded, state)
    try:
        connections = {h.name: h.connection for h in inventory_hosts(state, read_connections())}
    except (OSError, ValueError) as exc:
        print(f"swarm metrics run: cannot read the lab's connection file: {exc}", file=sys.stderr)
        return EXIT_INVALID
    simulated = [n for n in simulated_nodes(state["nodes"]) if n in {t.name for t in targets}]
    progress(f"measuring {', '.join(parts)} on {len(targets)} node(s) of fleet {args.fleet}")
    if simulated and "gpu" in parts:
        progress(f"note: {', '.join(simulated)} have SIMULATED GPUs: not measured (simulated)")
    options = _options(args, loaded.fleet)
    started_at = datetime.now(UTC).replace(microsecond=0)
    at = started_at.isoformat()
    ray = ray_target(state)
    shell = _ssh_shell(connections)
    versions = _tool_versions(targets, shell)
    by_part = _measure(args, parts, targets, shell, options, ray, progress)
    outcome = fleetrun.Outcome(
        [m for o in by_part.values() for m in o.measurements],
        [n for o in by_part.values() for n in o.not_measured],
    )
    info = RunInfo(
        parts=tuple(by_part),
        nodes=tuple(t.name for t in targets),
        options={**asdict(options), "limit": args.limit, "only": args.only},
        tool_versions=versions,
        fleet_commit=fleet_commit(args.paths),
        not_measured=tuple(asdict(n) for n in outcome.not_measured),
    )
    recorded = _record(args.db, args.fleet, at, outcome.measurements, args.threshold, info)
    if isinstance(recorded, str):
        print(recorded, file=sys.stderr)
        return EXIT_INVALID
    run_id, previous, changes = recorded
    _write_textfiles(by_part, outcome, targets, shell, ray.head if ray else None, started_at.timestamp())
    _write_outputs(args, outcome, loaded, {t.name: t.site for t in targets}, at, progress)
    _report_run(args, run_id, previous, changes, outcome)
    return EXIT_FAILURE if outcome.failed else EXIT_OK


def _dcgm_diag_level(fleet: Fleet) -> int:
    """The ``dcgmi diag`` level a run uses: the highest ``min_dcgm_diag_level`` of the fleet's
    NodeAcceptance rules, 1 (the quick check) when none asks for one."""
    rules = fleet.acceptance.rules if fleet.acceptance else ()
    return int(max([t["min_dcgm_diag_level"] for _, t in rules if "min_dcgm_diag_level" in t], default=1))


def run_age_hours(started_at: str, now: datetime) -> float | None:
    """Hours from a run's ``started_at`` (ISO 8601; UTC when it names no zone) to ``now``;
    None when the time cannot be read."""
    try:
        at = datetime.fromisoformat(started_at)
    except ValueError:
        return None
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return (now - at).total_seconds() / 3600


def cmd_accept(args: argparse.Namespace) -> int:
    loaded = load(args, "metrics accept", "nothing was judged")
    state = desired_state(loaded)
    fleet = loaded.fleet
    acceptance = fleet.acceptance
    if acceptance is None:
        print("swarm metrics accept: the fleet declares no NodeAcceptance", file=sys.stderr)
        return EXIT_INVALID
    limit = limited(args.limit, state["nodes"], "metrics accept")
    # Judging reads the history, never makes one (History() would make an empty database).
    runs: list[tuple[int, str]] = []
    measurements: list[Measurement] = []
    info: RunInfo | None = None
    try:
        if Path(args.db).exists():
            history = History(args.db)
            runs = history.runs(args.fleet)
            measurements = history.measurements(runs[-1][0]) if runs else []
            info = history.info(runs[-1][0]) if runs else None
            history.close()
    except (sqlite3.Error, OSError) as exc:
        print(f"{args.db}: not a usable metrics database ({exc})", file=sys.stderr)
        return EXIT_INVALID
    if not runs:
        print(
            f"swarm metrics accept: no run of fleet {args.fleet} recorded in {args.db}; nothing was "
            f"judged (measure first: swarm metrics run --fleet {args.fleet})",
            file=sys.stderr,
        )
        return EXIT_INVALID
    head = next((n.name for n in fleet.nodes.values() if "head" in n.roles), None)
    targets = fleet_targets(fleet, state)
    hub_of = site_representatives(
        {t.name: t.site for t in targets}, {t.site: t.name for t in targets if t.hub}
    )
    nodes = [
        NodeFacts(
            n.name,
            n.site,
            n.roles,
            tuple(g.model for g in n.gpus),
            n.gpu_backend == "simulated",
            head,
            hub_of.get(n.site),
            gpus=tuple((g.model, g.count) for g in n.gpus),
        )
        for n in fleet.nodes.values()
        if limit is None or n.name in limit
    ]
    run_id, started_at = runs[-1]
    age = run_age_hours(started_at, datetime.now(UTC))
    refusals = []
    if age is None:
        refusals.append(f"its start time {started_at!r} is not an ISO 8601 time")
    elif age > acceptance.max_run_age_hours:
        refusals.append(
            f"it started {age:.1f} h ago ({started_at}), more than max_run_age_hours "
            f"{acceptance.max_run_age_hours:g} of NodeAcceptance {acceptance.name}"
        )
    if info is None:
        refusals.append("the history does not say what it measured (recorded by an earlier version)")
    else:
        refusals += uncovered(acceptance.rules, nodes, info.parts, info.nodes)
    if refusals:
        print(f"swarm metrics accept: run {run_id} cannot be judged:", file=sys.stderr)
        for why in refusals:
            print(f"  - {why}", file=sys.stderr)
        print("measure again (swarm metrics run) covering them; nothing was judged", file=sys.stderr)
        return EXIT_INVALID
    verdicts = evaluate(acceptance.rules, nodes, measurements)
    failed = [v for v in verdicts if not v.passed]
    # One table (nodes x thresholds), not a line per verdict: a fleet's worth of lines hid
    # the few that matter.
    for line in verdict_table(verdicts):
        emit(line)
    if any(v.value is None and not v.passed for v in verdicts):
        emit(
            f"{NO_MEASUREMENT}: no measurement, so not accepted; blank: no rule gives the node the threshold"
        )
    judged = sorted({v.node for v in verdicts})
    bad = sorted({v.node for v in failed})
    failing = ", ".join(bad) or "none"
    emit(f"{len(judged) - len(bad)} of {len(judged)} nodes accepted (run {run_id}); failing: {failing}")
    return EXIT_FAILURE if failed else EXIT_OK


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "metrics",
        help="fleet measurements: history, comparison, outputs",
        description="Fleet measurements (iperf3, fio, ping) kept in SQLite, compared with the previous run.",
    )
    msub = p.add_subparsers(dest="metrics_command", required=True, metavar="SUBCOMMAND")
    _run_parser(msub)
    _import_parser(msub)
    _accept_parser(msub)


_HISTORY_KEY = "fleet name used when no PATHS are given (default: %(default)s); also the history's run key"


def _history_args(p: argparse.ArgumentParser, threshold: bool = True) -> None:
    """--db, and the regression --threshold of the commands that compare runs."""
    p.add_argument("--db", default=str(DEFAULT_DB), help="history database (default: %(default)s)")
    if threshold:
        p.add_argument(
            "--threshold",
            type=at_least(0, float, said="0 or more"),
            default=DEFAULT_THRESHOLD,
            help="regression threshold as a fraction (default: %(default)s)",
        )


_RUN_HELP = (
    "Measure the fleet's nodes over SSH with the tools the node layer installs. "
    "network: ping from every node to every other (mesh and underlay; p50, p99, loss), iperf3 "
    "single stream and -P 4 on one pair per site pair, one inside each site and one per node to "
    "its site's representative (rounds share no node or link; 3 s omitted, --repeats runs per "
    "test, the paths alternating), WireGuard overhead from the medians. storage: fio on the "
    "scratch mount (direct I/O, a 3 s ramp, then 4 KiB random read QD32, 1 MiB sequential read "
    "and write). gpu: NVML "
    "telemetry (nvidia-smi), the GPUs' identity, remapped rows and XID errors, a bf16 matmul "
    "on every GPU for --matmul-seconds sampling PCIe link state and clock event reasons under load, and "
    "dcgmi diag where DCGM is installed; simulated GPUs are "
    "'not measured (simulated)'. training: Ray Train data-parallel training (gloo or NCCL on the "
    "mesh interface), weak and strong scaling over 1..N GPU workers with their spread, and an "
    "all-reduce sweep (algbw, busbw). inference: Ray Serve under open-loop load at fixed rates, "
    "latency p50/p90/p99 from the intended send times; an error rate above --max-error-rate "
    "fails the run. The run is stored "
    "in the history (with its options, tool versions, the fleet's commit and what was not "
    "measured) and compared with the previous one; each node gets its figures as "
    f"{TEXTFILE_DIR}/swarm_metrics_<part>.prom, one file per part measured, with "
    "swarm_metrics_last_run_timestamp_seconds and swarm_metrics_last_run_success (node_exporter "
    "textfile collector)."
)


def _run_parser(msub: argparse._SubParsersAction) -> None:
    r = msub.add_parser(
        "run",
        help="measure the fleet over SSH: network, storage, GPU; record, compare, write outputs",
        description=_RUN_HELP,
        epilog="Examples: swarm metrics run --fleet lab --plots docs/img | swarm metrics run --only "
        "network --limit lab-head-1,lab-gpu-2 --format json | swarm metrics run --only network "
        "--write-latency-matrix policies/lab/latency.yaml (commit it through a pull request). "
        "--limit applies to network, storage and gpu; training and inference use the Ray cluster "
        "as it is. Exit codes: 0 everything measured, 1 a measurement failed (unreachable node, tool "
        "error; each named), 2 invalid input (nothing measured). Progress goes to stderr, the report "
        "to stdout.",
    )
    fleet_args(r, fleet_help=_HISTORY_KEY)
    r.set_defaults(func=cmd_run, host_tools=("metrics",))
    r.add_argument(
        "--only",
        metavar="PARTS",
        type=_parts,
        help=f"comma-separated, from {','.join(fleetrun.PARTS)} (default: all)",
    )
    limit_arg(r)
    _history_args(r)
    format_arg(r, "text", "json")
    r.add_argument(
        "--plots",
        metavar="DIR",
        help="write latency.png (RTT heatmap), bandwidth.png, training.png and inference.png here",
    )
    r.add_argument(
        "--write-latency-matrix", metavar="FILE", help="write the measured site RTT as a LatencyMatrix"
    )
    _network_args(r)
    _gpu_args(r)
    _training_args(r)
    _inference_args(r)


def _network_args(r: argparse.ArgumentParser) -> None:
    r.add_argument(
        "--duration",
        type=positive,
        default=10,
        help="measured seconds per iperf3 test and per fio job, after 3 s left out (default: %(default)s)",
    )
    r.add_argument(
        "--repeats",
        type=at_least(0),
        default=3,
        help="runs of each iperf3 test, paths alternating (default: %(default)s; 0: no iperf3, the network "
        "part pings only, enough for --write-latency-matrix)",
    )
    r.add_argument(
        "--ping-count", type=positive, default=20, help="pings per node pair and path (default: %(default)s)"
    )
    r.add_argument("--parallel", type=positive, default=4, help="most tests at once (default: %(default)s)")


def _gpu_args(r: argparse.ArgumentParser) -> None:
    r.add_argument(
        "--matmul-python",
        default="python3",
        metavar="PATH",
        help="the nodes' Python with PyTorch for the matmul FLOP/s probe (default: %(default)s)",
    )
    r.add_argument(
        "--matmul-seconds",
        type=positive,
        default=int(probes.MATMUL_SECONDS),
        help="seconds the matmul probe loads every GPU, to expose throttling (default: %(default)s)",
    )


def _training_args(r: argparse.ArgumentParser) -> None:
    r.add_argument(
        "--training-workers",
        type=at_least(0),
        default=0,
        metavar="K",
        help="train on the K GPU workers with the lowest highest mesh RTT between them and to the head "
        "(this run's pings, else the latest recorded run's), pinned; default %(default)s: every GPU worker",
    )
    r.add_argument(
        "--training-data",
        choices=("memory", "stream"),
        default=fleetrun.Options.training_data,
        help="memory: each worker samples the digits set it holds; stream: a Ray Dataset "
        "streamed to the workers through the object store (rows, bytes and waits per worker) "
        "(default: %(default)s)",
    )
    r.add_argument(
        "--training-pipeline",
        action="store_true",
        help="also train the model split over two GPU workers (pipeline stages), checked against "
        "the whole model's loss",
    )
    r.add_argument(
        "--training-steps",
        type=positive,
        default=fleetrun.Options.training_steps,
        help="training steps per timed window (default: %(default)s)",
    )
    r.add_argument(
        "--training-repeats",
        type=positive,
        default=fleetrun.Options.training_repeats,
        help="timed training windows per run, reported as min/median/max (default: %(default)s)",
    )
    r.add_argument(
        "--allreduce-max-mib",
        type=positive,
        default=fleetrun.Options.allreduce_max_mib,
        help="the all-reduce sweep's largest message, MiB (from 1 KiB by 4; default: %(default)s)",
    )


def _inference_args(r: argparse.ArgumentParser) -> None:
    r.add_argument(
        "--inference-rates",
        type=_rates,
        # A string default goes through type=, as a typed one would: the help shows it as typed.
        default=",".join(f"{rate:g}" for rate in fleetrun.Options.inference_rates),
        metavar="R,R,...",
        help="offered inference loads, requests/s, open loop (default: %(default)s)",
    )
    r.add_argument(
        "--inference-requests",
        type=positive,
        default=fleetrun.Options.inference_requests,
        help="requests per rate (default: %(default)s; p99 is reported from 1000 successes on)",
    )
    r.add_argument(
        "--max-error-rate",
        type=fraction,
        default=fleetrun.Options.max_error_rate,
        help="most failed inference requests per rate, a fraction, before the run fails "
        "(default: %(default)s)",
    )


def _import_parser(msub: argparse._SubParsersAction) -> None:
    q = msub.add_parser(
        "import",
        help="record saved iperf3/fio/ping output as a run and compare it with the previous run",
        description="Read iperf3 -J, fio --output-format=json and ping output saved elsewhere (the "
        "tool told by each file's text), record them as one run of --fleet in the history and "
        "compare it with the fleet's previous run.",
        epilog="Exit codes: 0 ok (regressions are reported, not fatal), 2 invalid input (nothing recorded).",
    )
    q.add_argument("files", nargs="+", metavar="FILE", help="iperf3 -J, fio JSON or ping output")
    q.add_argument("--fleet", default="lab", help="the fleet the run belongs to (default: %(default)s)")
    _history_args(q)
    q.add_argument(
        "--label", action="append", type=_label, default=[], metavar="KEY=VALUE", help="label every record"
    )
    format_arg(q, "text", "json", "prometheus")
    q.add_argument("--plots", metavar="DIR", help="write bandwidth.png (mesh vs underlay) here")
    q.add_argument(
        "--write-latency-matrix",
        metavar="FILE",
        help="write a LatencyMatrix (site-to-site RTT from ping src/dst labels; the --fleet's sites)",
    )
    q.add_argument("--started-at", type=_started_at, help="ISO 8601 time of the run (default: now, UTC)")
    q.set_defaults(func=cmd_import)


def _accept_parser(msub: argparse._SubParsersAction) -> None:
    a = msub.add_parser(
        "accept",
        help="judge the latest run against the fleet's NodeAcceptance thresholds",
        description="Judge each node against every NodeAcceptance threshold whose rule matches it, "
        "on the fleet's latest recorded run: one table, a row per node and a column per threshold "
        "(pass or FAIL with the value, in the threshold's unit; \u2014 where the run has no "
        "measurement, which is not accepted), then the overall verdict.",
        epilog="Exit codes: 0 every node accepted, 1 some node is not (a threshold failed or has no "
        "measurement), 2 nothing was judged: invalid input, no run recorded, or a latest run that "
        "cannot be judged: older than the NodeAcceptance's max_run_age_hours (default 24), or one "
        "that did not measure a part or a node a threshold needs (a --only or --limit run; each "
        "gap named).",
    )
    fleet_args(a, fleet_help=_HISTORY_KEY)
    _history_args(a, threshold=False)
    limit_arg(a, "the nodes to judge: " + LIMIT_HELP.removeprefix("the nodes to act on: "))
    a.set_defaults(func=cmd_accept)
