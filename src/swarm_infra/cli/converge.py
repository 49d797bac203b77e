"""``swarm converge``: validate, then converge a layer with Ansible (a playbook through
ansible-runner) or pyinfra (the deploys through its Python API), with the same live
progress lines, summary table, check/diff modes and exit codes."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .. import hosttools
from ..engines import keyrecord
from ..engines.ansible.progress import Progress
from ..engines.ansible.runner import LAYERS, run_playbook
from ..resolve.types import DesiredState
from .common import (
    EXIT_FAILURE,
    EXIT_INVALID,
    EXIT_OK,
    fleet_inventory,
    inventory_args,
    limit_arg,
    limited,
    simulated_nodes,
)


def cmd_converge(args: argparse.Namespace) -> int:
    found = fleet_inventory(args, "converge")
    if isinstance(found, int):
        return found
    inventory, state = found
    # The one --limit grammar, resolved here: both engines get the names it selects.
    hosts = limited(args.limit, state["nodes"], "converge")
    if state["rollout"]["kubernetes_context"] and not args.check:
        # The drivers' reboot drains through kubectl on this host: without it, a node would
        # be taken for "not a Kubernetes node" and reboot undrained.
        absent = hosttools.missing(("kubernetes",))
        if absent:
            for line in hosttools.missing_message(absent).splitlines():
                print(
                    f"swarm converge: {line} (Rollout spec.kubernetes_context); nothing was run",
                    file=sys.stderr,
                )
            return EXIT_INVALID
    keys = _key_check(args, inventory, state)
    if isinstance(keys, int):
        return keys
    simulated = simulated_nodes(state["nodes"])
    mode = " ".join(m for m, on in (("check", args.check), ("diff", args.diff)) if on)
    what = f"playbooks/{args.layer}.yml" if args.engine == "ansible" else f"pyinfra deploys ({args.layer})"
    print(
        f"converge: {what} on {inventory} ({len(state['nodes'])} nodes"
        + (f", limit {args.limit}" if args.limit else "")
        + (f", {mode}" if mode else "")
        + ")"
    )
    if simulated:
        print(f"note: {len(simulated)} node(s) use the SIMULATED NVML backend (no real GPU is touched)")
    if args.engine == "pyinfra":
        rc = _converge_pyinfra(args, state, hosts, simulated, keys)
        _record_keys(args, inventory, state, keys)
        return rc
    progress = Progress(sys.stdout, verbose=args.verbose, show_diff=args.diff)
    rc, tail = run_playbook(
        Path.cwd(),
        args.layer,
        inventory,
        check=args.check,
        diff=args.diff,
        limit=",".join(hosts) if hosts is not None else None,
        extravars={
            "wireguard_key_record": dict(keys.recorded),
            "wireguard_key_change_accepted": sorted(keys.accepted),
            "swarm_verify_argv": verify_argv(inventory),
        },
        progress=progress,
    )
    keys.published.update(progress.public_keys)
    print(progress.summary(simulated))
    _record_keys(args, inventory, state, keys)
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


def verify_argv(inventory: Path) -> list[str]:
    """The ``swarm verify`` command (argv) a node rebooted in its batch is verified with,
    before the next batch, by either engine (it adds ``--limit NODE --layer drivers --layer
    gpu --junit-xml PATH``): this Python, this fleet's inventory."""
    return [sys.executable, "-m", "swarm_infra.cli", "verify", "-i", str(inventory.resolve())]


def _mesh_nodes(state: DesiredState) -> list[str]:
    return sorted(name for name, node in state["nodes"].items() if node["mesh"] is not None)


def _fleet_key(state: DesiredState, name: str) -> str | None:
    """The WireGuard public key the fleet records for node ``name`` (None: none recorded)."""
    mesh = state["nodes"][name]["mesh"]
    return mesh["public_key"] if mesh is not None else None


def _key_check(args: argparse.Namespace, inventory: Path, state: DesiredState) -> keyrecord.KeyCheck | int:
    """The controller's key record for the run and the accepted changes, or exit 2 when the
    record is broken or ``--accept-key-change`` names a node outside the mesh, or one whose
    key the fleet records (only a reviewed change of the fleet replaces that key)."""
    path = keyrecord.record_path(inventory)
    try:
        recorded = keyrecord.load(path)
    except keyrecord.KeyRecordInvalid as exc:
        print(f"swarm converge: the WireGuard key record is broken: {exc}; nothing was run", file=sys.stderr)
        return EXIT_INVALID
    accepted = frozenset(args.accept_key_change or ())
    unknown = sorted(accepted - set(_mesh_nodes(state)))
    if unknown:
        print(
            f"swarm converge: --accept-key-change {', '.join(unknown)}: not a node of the mesh; "
            "nothing was run",
            file=sys.stderr,
        )
        return EXIT_INVALID
    # A key the fleet records is reviewed: only a reviewed change replaces it.
    in_fleet = sorted(n for n in accepted if _fleet_key(state, n))
    if in_fleet:
        print(
            f"swarm converge: --accept-key-change {', '.join(in_fleet)}: the fleet records the node's "
            "WireGuard public key (spec.mesh.public_key); change it there by a reviewed commit; "
            "nothing was run",
            file=sys.stderr,
        )
        return EXIT_INVALID
    return keyrecord.KeyCheck(recorded=recorded, accepted=accepted)


def _record_keys(
    args: argparse.Namespace, inventory: Path, state: DesiredState, keys: keyrecord.KeyCheck
) -> None:
    """Save the keys the run's nodes reported and passed into the controller's record (not
    in check mode), and say what is new or changed."""
    new = sorted(n for n, k in keys.published.items() if n not in keys.recorded)
    changed = sorted(n for n, k in keys.published.items() if keys.recorded.get(n) not in (None, k))
    # A published key passed the fleet's check where the fleet records one (key_change_problem).
    in_fleet = [n for n in changed if _fleet_key(state, n) == keys.published[n]]
    changed = [n for n in changed if n not in in_fleet]
    record = keyrecord.updated(keys.recorded, keys.published, _mesh_nodes(state))
    if args.check or record == dict(keys.recorded):
        return
    path = keyrecord.record_path(inventory)
    keyrecord.save(path, record)
    print(
        f"keys: recorded in {path}"
        + (f"; first seen: {', '.join(new)}" if new else "")
        + (f"; changed (accepted): {', '.join(changed)}" if changed else "")
        + (f"; changed (as recorded in the fleet): {', '.join(in_fleet)}" if in_fleet else "")
    )


def _converge_pyinfra(
    args: argparse.Namespace,
    state: DesiredState,
    names: list[str] | None,
    simulated: list[str],
    keys: keyrecord.KeyCheck,
) -> int:
    """Converge the nodes ``names`` (None: every node) with pyinfra; the exit code."""
    from ..engines.inventory import inventory_hosts
    from ..engines.pyinfra.runner import Reporter, run
    from ..lab.state import read_connections

    inventory = Path(args.inventory or f"inventory/{args.fleet}")
    hosts = [h for h in inventory_hosts(state, read_connections()) if names is None or h.name in names]
    reporter = Reporter(sys.stdout, verbose=args.verbose, show_diff=args.diff)
    rc = run(
        args.layer,
        hosts,
        state["rollout"],
        reporter,
        check=args.check,
        diff=args.diff,
        keys=keys,
        verify_argv=verify_argv(inventory),
    )
    print(reporter.summary(simulated))
    if args.check:
        print("check mode: nothing was changed; 'changed' counts what a real run would change")
    if rc:
        bad = sorted(h for h, t in reporter.hosts.items() if t.failed or t.unreachable)
        print(f"swarm converge: failed or unreachable: {', '.join(bad)}", file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "converge",
        help="bring nodes to their declared state (Ansible or pyinfra)",
        description="Validate the fleet, then converge LAYER on the fleet's nodes, in the "
        "rolling batches of the fleet's Rollout policy: with Ansible (playbooks/LAYER.yml "
        "through ansible-runner, the default) or with pyinfra (the deploys in deploys/, "
        "through pyinfra's Python API). Both engines apply the same desired state and leave "
        "nodes in the same state. Prints each changed, failed or unreachable result as it "
        "happens and a per-host summary. Run from the repository root.",
        epilog="Examples: swarm converge --check --diff | swarm converge --engine pyinfra | "
        "swarm converge --layer mesh --limit site_lab_a | swarm converge --fleet example -i "
        "inventory/example. Exit codes: 0 every host ok, 1 a host failed or was unreachable "
        "(the others were converged; a node whose WireGuard key changed since the controller "
        "recorded it fails until --accept-key-change NODE; one whose key differs from its Node's "
        "spec.mesh.public_key fails until the fleet or the node changes), 2 invalid fleet or arguments "
        "(nothing run).",
    )
    inventory_args(p)
    p.add_argument(
        "--layer", choices=LAYERS, default="site", help="node layer, or site for all (default: %(default)s)"
    )
    p.add_argument(
        "--engine",
        choices=("ansible", "pyinfra"),
        default="ansible",
        help="ansible (ansible-playbook) or pyinfra (its Python API); the same result (default: %(default)s)",
    )
    p.add_argument("--check", action="store_true", help="report what would change, change nothing")
    p.add_argument("--diff", action="store_true", help="show file and setting differences")
    limit_arg(p)
    p.add_argument(
        "--accept-key-change",
        action="append",
        metavar="NODE",
        help="trust NODE's new WireGuard public key (it differs from the controller's record, "
        "e.g. a reinstalled node); repeatable. Not for a node whose key the fleet records "
        "(spec.mesh.public_key): change the fleet instead",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="print every task result")
    p.set_defaults(func=cmd_converge, host_tools=("converge",))
