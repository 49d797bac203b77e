"""``swarm converge``: validate, then run a layer playbook with live progress and a summary."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..engines.ansible.progress import Progress
from ..engines.ansible.runner import LAYERS, run_playbook
from .common import EXIT_FAILURE, EXIT_OK, fleet_inventory, inventory_args, simulated_nodes


def cmd_converge(args: argparse.Namespace) -> int:
    found = fleet_inventory(args, "converge")
    if isinstance(found, int):
        return found
    inventory, state = found
    simulated = simulated_nodes(state)
    mode = " ".join(m for m, on in (("check", args.check), ("diff", args.diff)) if on)
    print(
        f"converge: playbooks/{args.layer}.yml on {inventory} ({len(state['nodes'])} nodes"
        + (f", limit {args.limit}" if args.limit else "")
        + (f", {mode}" if mode else "")
        + ")"
    )
    if simulated:
        print(f"note: {len(simulated)} node(s) use the SIMULATED NVML backend (no real GPU is touched)")
    progress = Progress(sys.stdout, verbose=args.verbose, show_diff=args.diff)
    rc, tail = run_playbook(
        Path.cwd(),
        args.layer,
        inventory,
        check=args.check,
        diff=args.diff,
        limit=args.limit,
        progress=progress,
    )
    print(progress.summary(simulated))
    if args.check:
        print("check mode: nothing was changed; 'changed' counts what a real run would change")
    bad = sorted(h for h, t in progress.hosts.items() if t.failed or t.unreachable)
    if rc == 0:
        return EXIT_OK
    if not progress.hosts:
        print(tail.strip(), file=sys.stderr)
    print(
        f"swarm converge: ansible-playbook exited {rc}"
        + (f"; failed or unreachable: {', '.join(bad)}" if bad else ""),
        file=sys.stderr,
    )
    return EXIT_FAILURE


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "converge",
        help="bring nodes to their declared state (ansible-playbook through ansible-runner)",
        description="Validate the fleet, then run playbooks/LAYER.yml against the swarm "
        "inventory, in the rolling batches of the fleet's Rollout policy. Prints each "
        "changed, failed or unreachable task result as it happens (a live status line on "
        "a terminal) and a per-host summary. Run from the repository root.",
        epilog="Examples: swarm converge --check --diff | swarm converge --layer mesh --limit "
        "site_lab_a | swarm converge --fleet example -i inventory/example. Exit codes: 0 "
        "every host ok, 1 a host failed or was unreachable (the others were converged), "
        "2 invalid fleet or arguments (nothing run).",
    )
    inventory_args(p)
    p.add_argument("--layer", choices=LAYERS, default="site", help="playbook (default: site)")
    p.add_argument("--check", action="store_true", help="report what would change, change nothing")
    p.add_argument("--diff", action="store_true", help="show file and setting differences")
    p.add_argument("--limit", metavar="PATTERN", help="Ansible host pattern: hosts or groups (site_X, gpu)")
    p.add_argument("-v", "--verbose", action="store_true", help="print every task result")
    p.set_defaults(func=cmd_converge)
