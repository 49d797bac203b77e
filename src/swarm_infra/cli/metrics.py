"""``swarm metrics``: measurements into history, compared with the previous run.

Today: ``swarm metrics import`` reads iperf3 ``-J``, fio ``--output-format=json`` and ping
output saved from nodes; ``swarm metrics accept`` judges the fleet's latest run against its
NodeAcceptance. ``swarm metrics run`` (measuring the fleet over SSH) is not built yet.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from datetime import UTC, datetime
from pathlib import Path

from ..fleet.diagnostics import FleetInvalid
from ..metrics.acceptance import NodeFacts, evaluate
from ..metrics.compare import DEFAULT_THRESHOLD, compare
from ..metrics.fio import parse_fio
from ..metrics.history import DEFAULT_DB, History
from ..metrics.iperf3 import parse_iperf3
from ..metrics.latency import latency_matrix_yaml, site_rtt_ms
from ..metrics.measurement import Measurement, MeasurementParseError
from ..metrics.ping import parse_ping
from ..metrics.prometheus import render_textfile
from ..metrics.report import to_json, to_table
from ..resolve import load_fleet
from .common import EXIT_FAILURE, EXIT_INVALID, EXIT_OK, emit, fleet_paths


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


def _labels(pairs: list[str]) -> dict[str, str] | str:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.isidentifier():
            return f"--label {pair!r}: expected KEY=VALUE with KEY a name"
        out[key] = value
    return out


def cmd_import(args: argparse.Namespace) -> int:
    labels = _labels(args.label)
    if isinstance(labels, str):
        print(f"swarm metrics import: {labels}", file=sys.stderr)
        return EXIT_INVALID
    if not args.threshold >= 0:
        print("swarm metrics import: --threshold must not be negative", file=sys.stderr)
        return EXIT_INVALID
    measurements: list[Measurement] = []
    errors: list[str] = []
    for path in args.files:
        try:
            measurements += parse_output(Path(path).read_text(errors="replace"), **labels)
        except OSError as exc:
            errors.append(f"{path}: {exc.strerror or exc}")
        except MeasurementParseError as exc:
            errors.append(f"{path}: {exc}")
    if errors:
        for error in errors:
            print(error, file=sys.stderr)
        return EXIT_INVALID
    site_of: dict[str, str] = {}
    if args.write_latency_matrix:
        try:
            fleet = load_fleet(fleet_paths(argparse.Namespace(paths=[], fleet=args.fleet))).fleet
        except FleetInvalid as exc:
            print(exc.report.text(), file=sys.stderr)
            print("swarm metrics import: the fleet is invalid; nothing was recorded", file=sys.stderr)
            return EXIT_INVALID
        site_of = {n.name: n.site for n in fleet.nodes.values()}
    try:
        history = History(args.db)
        run_id = history.record(args.fleet, args.started_at or datetime.now(UTC).isoformat(), measurements)
        previous = history.previous(args.fleet, run_id)
        changes = compare(measurements, history.measurements(previous), args.threshold) if previous else []
        history.close()
    except (sqlite3.Error, OSError) as exc:
        print(f"{args.db}: not a usable metrics database ({exc})", file=sys.stderr)
        return EXIT_INVALID
    if args.write_latency_matrix:
        rtt = site_rtt_ms(measurements, site_of)
        Path(args.write_latency_matrix).write_text(latency_matrix_yaml(rtt), encoding="utf-8")
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


def cmd_accept(args: argparse.Namespace) -> int:
    try:
        fleet = load_fleet(fleet_paths(args)).fleet
    except FleetInvalid as exc:
        print(exc.report.text(), file=sys.stderr)
        print("swarm metrics accept: the fleet is invalid; nothing was judged", file=sys.stderr)
        return EXIT_INVALID
    if fleet.acceptance is None:
        print("swarm metrics accept: the fleet declares no NodeAcceptance", file=sys.stderr)
        return EXIT_INVALID
    try:
        history = History(args.db)
        runs = history.runs(args.fleet)
        measurements = history.measurements(runs[-1][0]) if runs else []
        history.close()
    except (sqlite3.Error, OSError) as exc:
        print(f"{args.db}: not a usable metrics database ({exc})", file=sys.stderr)
        return EXIT_INVALID
    nodes = [
        NodeFacts(n.name, n.site, n.roles, tuple(g.model for g in n.gpus), n.gpu_backend == "simulated")
        for n in fleet.nodes.values()
        if not args.limit or n.name in args.limit.split(",")
    ]
    verdicts = evaluate(fleet.acceptance.rules, nodes, measurements)
    failed = [v for v in verdicts if not v.passed]
    for v in failed:
        value = v.note if v.value is None else f"{v.value:.4g}"
        emit(f"{v.node}: {v.threshold_name} = {value}, threshold {v.threshold:g}")
    judged = sorted({v.node for v in verdicts})
    bad = sorted({v.node for v in failed})
    run = f"run {runs[-1][0]}" if runs else "no run recorded"
    failing = ", ".join(bad) or "none"
    emit(f"{len(judged) - len(bad)} of {len(judged)} nodes accepted ({run}); failing: {failing}")
    return EXIT_FAILURE if failed else EXIT_OK


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "metrics",
        help="fleet measurements: history, comparison, outputs",
        description="Fleet measurements (iperf3, fio, ping) kept in SQLite, compared with the previous run.",
    )
    msub = p.add_subparsers(dest="metrics_command", required=True, metavar="SUBCOMMAND")
    q = msub.add_parser(
        "import",
        help="record saved iperf3/fio/ping output as a run and compare it with the previous run",
        epilog="Exit codes: 0 ok (regressions are reported, not fatal), 2 invalid input.",
    )
    q.add_argument("files", nargs="+", metavar="FILE", help="iperf3 -J, fio JSON or ping output")
    q.add_argument("--fleet", default="lab", help="the fleet the run belongs to (default: lab)")
    q.add_argument("--db", default=str(DEFAULT_DB), help=f"history database (default: {DEFAULT_DB})")
    q.add_argument("--label", action="append", default=[], metavar="KEY=VALUE", help="label every record")
    q.add_argument(
        "--threshold",
        type=float,
        default=DEFAULT_THRESHOLD,
        help="regression threshold as a fraction (default: 0.10)",
    )
    q.add_argument("--format", choices=("table", "json", "prometheus"), default="table")
    q.add_argument("--plots", metavar="DIR", help="write bandwidth.png (mesh vs underlay) here")
    q.add_argument(
        "--write-latency-matrix",
        metavar="FILE",
        help="write a LatencyMatrix (site-to-site RTT from ping src/dst labels; the --fleet's sites)",
    )
    q.add_argument("--started-at", help="ISO 8601 time of the run (default: now, UTC)")
    q.set_defaults(func=cmd_import)
    a = msub.add_parser(
        "accept",
        help="judge the latest run against the fleet's NodeAcceptance thresholds",
        epilog="Exit codes: 0 every node accepted, 1 some node fails (each named with the metric, "
        "value and threshold), 2 invalid input.",
    )
    a.add_argument("paths", nargs="*", metavar="PATHS", help="fleet YAML files or directories")
    a.add_argument("--fleet", default="lab", help="fleet name (default: lab); also the history's run key")
    a.add_argument("--db", default=str(DEFAULT_DB), help=f"history database (default: {DEFAULT_DB})")
    a.add_argument("--limit", help="comma-separated node names to judge (default: all)")
    a.set_defaults(func=cmd_accept)
