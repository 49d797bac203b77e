"""``swarm verify``: every node against its declared state (testinfra), with the drift report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..engines.ansible.runner import path_with_ansible
from ..verify import report as verify_report
from ..verify.checks import LAYERS
from ..verify.runner import DEFAULT_FORKS
from .common import (
    EXIT_FAILURE,
    EXIT_OK,
    at_least,
    fleet_inventory,
    inventory_args,
    limit_arg,
    limited,
    simulated_nodes,
)


def cmd_verify(args: argparse.Namespace) -> int:
    found = fleet_inventory(args, "verify")
    if isinstance(found, int):
        return found
    inventory, state = found
    nodes = limited(args.limit, state["nodes"], "verify") or []
    simulated = simulated_nodes(state["nodes"])
    print(f"verify: {len(nodes) or len(state['nodes'])} node(s) of {inventory} against the declared state")
    if simulated:
        print(f"note: GPU checks on {', '.join(simulated)} read the SIMULATED NVML backend")
    collector = verify_report.run(
        Path.cwd(), inventory, nodes, Path(args.junit_xml), path=path_with_ansible(), forks=args.forks
    )
    if not collector.results:
        print("swarm verify: no check ran (see the JUnit file for collection errors)", file=sys.stderr)
        return EXIT_FAILURE
    print(verify_report.report(collector))
    print(f"JUnit XML: {args.junit_xml}")
    pending = pending_reboot(collector.results)
    if pending:
        print(
            f"pending reboot: {', '.join(pending)}: the new NVIDIA driver waits for a reboot "
            "(the drivers layer's marker is there); their GPU settings wait for it too"
        )
    judged = [r for r in collector.results if not args.layer or r.layer in args.layer]
    if args.layer:
        total = len(collector.results)
        print(f"judged: the {', '.join(args.layer)} layer(s) only ({len(judged)} of {total} checks)")
    bad = [r for r in judged if r.outcome in ("drift", "error")]
    return EXIT_FAILURE if bad else EXIT_OK


def pending_reboot(results: list[verify_report.Result]) -> list[str]:
    """The nodes whose drivers layer's pending-reboot marker is there (its check drifted:
    ``swarm_infra.verify.checks`` names it "pending reboot (PATH)")."""
    return sorted({r.node for r in results if r.outcome == "drift" and r.key.startswith("pending reboot")})


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "verify",
        help="check every node against its declared state (testinfra); report drift",
        description="Run tests/verify (testinfra, one test per declared item, values from the "
        "resolved NodeState) against the fleet's nodes, up to --forks nodes at once (each "
        "node's checks in order; every node's own checks, then each node's WireGuard peers, "
        "then the pings and Ray's checks from other nodes). Prints each drifted item, then a "
        "per-node table (pass/fail per layer: host, drivers, gpu, mesh) and the "
        "drift report: node, layer, key, desired, actual. Checks that depend on a drifted one "
        "(pings through a stopped tunnel) are counted as blocked, not as drift. Writes JUnit "
        "XML. Run from the repository root. Plain pytest works too: pytest tests/verify "
        "--ansible-inventory=inventory/lab.",
        epilog="Exit codes: 0 no drift, 1 drift or a check that could not be read, 2 invalid "
        "fleet or arguments.",
    )
    inventory_args(p)
    limit_arg(p)
    p.add_argument(
        "--layer",
        action="append",
        choices=LAYERS,
        help="judge only this layer's checks for the exit code (repeatable; every check still "
        "runs and is reported); a batch's reboot verifies drivers and gpu",
    )
    p.add_argument(
        "--forks",
        type=at_least(1),
        default=DEFAULT_FORKS,
        metavar="N",
        help="most nodes read at once (default: %(default)s, as ansible.cfg's forks)",
    )
    p.add_argument(
        "--junit-xml", default="verify-junit.xml", metavar="PATH", help="JUnit XML (default: %(default)s)"
    )
    p.set_defaults(func=cmd_verify, host_tools=("verify",))
