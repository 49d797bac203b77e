"""The ``swarm lab`` subcommands (argument parsing and exit codes; the work is in manager)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ..engines import controller, keyrecord
from ..engines.inventory import InventorySourceError, fleet_state, inventory_hosts, ssh_argv
from ..lab import join, manager
from ..lab.state import LabState, connection_file, read_connections, ssh_command
from ..lab.system import LabError, require_root
from ..resolve import desired_state
from ..resolve.analysis import Analysis
from ..resolve.controller import controller_peer_keys, controller_state
from ..tables import table_lines
from .common import (
    EXIT_FAILURE,
    EXIT_INVALID,
    EXIT_OK,
    fleet_args,
    fleet_paths,
    format_arg,
    invalid_fleet_exits,
    load,
)

LAB_HELP = """\
A fleet of real Linux nodes on this machine, to converge and verify without a cloud.
Each node is systemd-nspawn booting one cached Debian 12 image (an overlay per node):
systemd as PID 1, sshd, its own namespaces, in a network namespace on its site's bridge.
Each Site is a router namespace with a bridge on its underlay subnet; its WAN link to the
host is a userspace delay line (the kernel has no netem) with the Site's `wan` latency,
jitter and loss. Nodes share the host's kernel: /proc/sys is read-only in them except
net.*, there are no GPUs (the fleet's GPU nodes use the simulated NVML backend), and
WireGuard runs in userspace (wireguard-go). Needs root.
"""


def cmd_up(args: argparse.Namespace) -> int:
    analysis = load(args, "lab up", "nothing was created")
    try:
        outcome = manager.up(analysis, log=_log, unseeded=args.unseeded)
    except ValueError as exc:
        print(f"swarm lab up: {exc}", file=sys.stderr)
        return EXIT_INVALID
    # A node made anew has a new WireGuard key: the controller's record of the old one goes
    # (keyrecord), or the next converge would refuse every new node.
    made = [name for name, what in outcome.items() if what in ("created", "replaced")]
    record = keyrecord.record_path(Path("inventory") / args.fleet)
    try:
        gone = keyrecord.forget(record, made)
    except keyrecord.KeyRecordInvalid as exc:
        print(f"swarm lab up: {exc}", file=sys.stderr)
        return EXIT_INVALID
    if gone:
        _log(f"keys   {len(gone)} new node(s) forgotten in {record}: {', '.join(gone)}")
    return _join_over_mesh(analysis, [Path(p) for p in fleet_paths(args)], record)


def _join_over_mesh(analysis: Analysis, paths: list[Path], record: Path) -> int:
    """The controller's way to the nodes it reaches over the mesh (Mesh ``spec.controller``
    ``ssh_over_mesh``), which the lab's real NAT keeps it from reaching otherwise: its key
    (made once per machine), each such node not joined since it was made joining by pull
    (lab/join.py: the provider's bootstrap at its console, the operator's signed merge in the
    lab's fleet repository, the node's own agent applying it), the keys they printed in the
    controller's record, the controller's interface up (``swarm mesh controller-up``), and
    every such node answering over the mesh. Exit code."""
    mesh = analysis.fleet.mesh
    cstate = controller_state(analysis)
    if mesh is None or mesh.controller is None or cstate is None:
        return EXIT_OK
    nodes = desired_state(analysis)["nodes"]
    over_mesh = sorted(n for n, s in nodes.items() if s["ssh"]["via_mesh"])
    if not over_mesh:
        return EXIT_OK
    key_path = controller.default_key_path()
    try:
        own, made = controller.ensure_key(key_path)
        if mesh.controller.public_key not in (None, own):
            raise LabError(
                f"the fleet records {mesh.controller.public_key} for the controller, but this host's key "
                f"({key_path}) is {own}: the lab's controller is this host"
            )
        if made:
            _log(f"mesh   the controller's key made: {key_path} (0600), public key {own}")
        recorded = keyrecord.load(record)
        todo = [n for n in over_mesh if not manager.joined(n)]
        if todo:
            _join(analysis, paths, todo, own, recorded, record)
        peer_keys = controller_peer_keys(cstate, keyrecord.load(record))
        out = controller.up(cstate, key_path, peer_keys)
        manager.set_controller_interface(cstate["interface"])
        _log(f"mesh   the controller's {cstate['interface']} at {cstate['address']}: "
             f"{'set' if out.changed else 'unchanged'}, {len(peer_keys)} peer(s) with keys")  # fmt: skip
        for n in over_mesh:
            address = nodes[n]["mesh"]["address"].split("/")[0]  # type: ignore[index]
            # Behind NAT the node opens the tunnel (PersistentKeepalive); a handshake it
            # tried before the controller was up is retried after REKEY_TIMEOUT (5 s).
            if not join.wait_reachable(address, 30):
                raise LabError(
                    f"node {n} does not answer at its mesh address {address} within 30 s\n"
                    + join.tunnel_report(LabState.load().nodes[n]["pid"], cstate["interface"])
                )
            _log(f"mesh   {n}: answers at {address} over the controller's {cstate['interface']}")
    except (LabError, controller.ControllerError, keyrecord.KeyRecordInvalid, OSError) as exc:
        print(f"swarm lab up: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK


def _join(
    analysis: Analysis, paths: list[Path], todo: list[str], own: str, recorded: dict[str, str], record: Path
) -> None:
    """``todo`` join by pull (lab/join.py): bootstrapped in parallel, then each applying its
    own commit in turn; their keys go into the controller's ``record``. Raises LabError."""
    from concurrent.futures import ThreadPoolExecutor

    started = time.monotonic()
    lab = LabState.load()
    name, _ = join.fleet_layout(paths)
    url = manager.serve_git(log=_log)
    remote = url + join.REPOSITORY
    signers = join.allowed_signers(join.operator_key())

    def provide(n: str) -> str:
        d = lab.nodes[n]
        site = analysis.fleet.sites.get(d["site"])
        proxy = site.apt_proxy if site is not None else None
        address = d["address"].split("/")[0]
        out = join.provide(d["pid"], n, d["site"], address, d["nat"], name, remote, signers, proxy)
        return join.bootstrap_key(out)

    with ThreadPoolExecutor(max_workers=8) as pool:
        keys = dict(zip(todo, pool.map(provide, todo), strict=True))
    known = dict(recorded)
    try:
        # One node per commit, one after another: with several pull nodes in one commit, all
        # but the Rollout's canary wait for the earlier batches' reports (the agent's gate),
        # which no node that has not joined yet serves. Each commit records the keys of the
        # nodes joined before it.
        for n in todo:
            commit = join.publish(
                paths, manager.git_root() / join.REPOSITORY, remote, {n: keys[n]}, known, own
            )
            _log(f"join   {n}: bootstrapped; the fleet repository's commit {commit[:12]}, signed")
            _, status = join.run_agent(lab.nodes[n]["pid"])
            # "failed" is the Ray layer of a pull worker whose head is not converged yet
            # (lab/join.py); whether its mesh came up is checked over the mesh afterwards.
            if status.get("commit") != commit or status.get("result") not in ("applied", "failed"):
                raise LabError(f"node {n} did not apply the fleet by pull: {status.get('result')}: "
                               f"{status.get('reason')} (its journal: swarm-agent.service)")  # fmt: skip
            if status.get("result") == "failed":
                join.acknowledge(lab.nodes[n]["pid"])
            manager.set_joined(n, commit)
            keyrecord.save(
                record, keyrecord.updated(keyrecord.load(record), {n: keys[n]}, analysis.fleet.nodes)
            )
            known[n] = keys[n]
            waits = "; its Ray layer waits for the head's token" if status.get("result") == "failed" else ""
            _log(f"join   {n}: {commit[:12]} applied by pull ({status.get('changed')} changed, "
                 f"{status.get('failed')} failed{waits}; {status.get('duration_s', 0):.0f} s)")  # fmt: skip
    finally:
        manager.stop_git()
    _log(f"join   {len(todo)} node(s) joined in {time.monotonic() - started:.1f} s; keys in {record}")


def cmd_fleet(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..lab.fleet import write_lab_fleet

    if not (Path.cwd() / "inventory" / "lab").is_dir():
        print("swarm lab fleet: no lab fleet (inventory/lab) here; run it from the repository root",
              file=sys.stderr)  # fmt: skip
        return EXIT_INVALID
    try:
        # The lab fleet it copies from may be invalid.
        with invalid_fleet_exits(
            "lab fleet", "nothing was written", "the lab fleet (inventory/lab, policies/lab)"
        ):
            written = write_lab_fleet(Path.cwd(), args.nodes, ray=not args.no_ray)
    except (ValueError, FileNotFoundError) as exc:
        print(f"swarm lab fleet: {exc} (run it from the repository root)", file=sys.stderr)
        return EXIT_INVALID
    for d in written:
        print(f"wrote  {d.relative_to(Path.cwd())}/")
    name = written[0].name
    print(
        f"fleet  {name}: swarm lab up --fleet {name}; swarm converge --fleet {name}; "
        f"swarm verify --fleet {name}"
    )
    return EXIT_OK


def cmd_down(args: argparse.Namespace) -> int:
    return EXIT_FAILURE if manager.down(log=_log) else EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    rows = manager.status()
    if args.format == "json":
        json.dump({"nodes": rows, "connection_file": str(connection_file())}, sys.stdout, indent=2)
        print()
    elif not rows:
        print("no lab is up (swarm lab up creates one)")
    else:
        table = [["NODE", "SITE", "ADDRESS", "NAT", "PID", "SYSTEMD", "SSH"]]
        table += [
            [
                r["name"],
                r["site"],
                r["address"],
                "yes" if r["nat"] else "no",
                r["pid"] or "-",
                r["state"],
                r["ssh"],
            ]
            for r in rows
        ]
        for line in table_lines(table, right=(4,)):
            print(line)
        print(f"connections: {connection_file()}")
    return EXIT_OK if all(r["state"] in ("running", "degraded") for r in rows) else EXIT_FAILURE


def cmd_stop(args: argparse.Namespace) -> int:
    print(f"node   {args.node}: {manager.stop_node(args.node, kill=args.kill)}")
    return EXIT_OK


def cmd_ssh(args: argparse.Namespace) -> int:
    require_root()
    conns = read_connections()
    if args.node not in conns:
        print(
            f"swarm lab ssh: no lab node {args.node!r} (nodes: {', '.join(conns) or 'none'})", file=sys.stderr
        )
        return EXIT_INVALID
    argv = ssh_command(conns[args.node], args.command)
    inventory = Path(args.inventory)
    if inventory.exists():
        # The fleet decides the SSH target (resolve.mesh.ssh_over_mesh): a node reached over
        # the controller's mesh interface is reached there, as converge and verify reach it.
        try:
            _, state = fleet_state(inventory)
        except InventorySourceError as exc:
            # A shell on a node must not wait for a fleet being edited: the underlay it is.
            print(f"{exc}\nswarm lab ssh: the lab's connection file alone decides", file=sys.stderr)
        else:
            host = {h.name: h for h in inventory_hosts(state, conns)}.get(args.node)
            if host is not None and host.state["ssh"].get("via_mesh"):
                argv = [*ssh_argv(host.connection, "")[:-1], *args.command]
    sys.stdout.flush()
    os.execvp(argv[0], argv)


def _log(line: str) -> None:
    print(line, flush=True)


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Register ``swarm lab`` and its subcommands on the main parser's subparsers."""
    lab = sub.add_parser(
        "lab",
        help="a local lab fleet of real nodes (systemd-nspawn) on this machine",
        description=LAB_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Example: sudo swarm lab up && swarm lab status && swarm lab ssh lab-gpu-1 -- wg show",
    )
    labsub = lab.add_subparsers(dest="lab_command", required=True, metavar="SUBCOMMAND")
    p = labsub.add_parser(
        "up",
        help="create or update the lab to match the fleet (idempotent)",
        description="Build (once) and cache the Debian 12 base image, then create a site router "
        "per Site and a node per Node, boot them and check SSH. A second `up` changes nothing; "
        "nodes no longer declared are removed. Writes the connection file read by the Ansible "
        "inventory. Exit 2 when the fleet is invalid (nothing created).",
        epilog="Examples: swarm lab up --fleet lab | swarm lab fleet --nodes 16 && "
        "swarm lab up --fleet lab-16",
    )
    fleet_args(p)
    p.add_argument(
        "--unseeded",
        action="append",
        default=[],
        metavar="NODE",
        help="a Ray node that gets no prebuilt Ray virtualenv and installs Ray with pip at its "
        "converge, as a real node does (repeatable; `all`: every node). By default the lab "
        "builds Ray's virtualenv once from its wheelhouse and lays it under each Ray node, "
        "read-only, so converges find Ray installed",
    )
    p.set_defaults(func=_guarded(cmd_up), host_tools=("lab",))
    p = labsub.add_parser(
        "fleet",
        help="write a lab fleet of N nodes (inventory/lab-N, policies/lab-N) from the lab fleet",
        description="A bigger lab is a bigger fleet: real Node documents that the lab, both engines "
        "and verify read alike. Writes inventory/lab-N (the lab's sites; its head and N-1 GPU "
        "workers with simulated GPUs and a scratch device, alternating between the sites, those "
        "in lab-b behind NAT) and policies/lab-N (the lab's policies), replacing them if they "
        "exist. Run from the repository root; needs no root.",
        epilog="Example: swarm lab fleet --nodes 16 --no-ray && swarm lab up --fleet lab-16 && "
        "swarm converge --fleet lab-16 --engine pyinfra",
    )
    p.add_argument("--nodes", type=int, required=True, metavar="N", help="nodes in the fleet, head included")
    p.add_argument(
        "--no-ray", action="store_true", help="leave the lab's Ray cluster out (a pip install per node)"
    )
    p.set_defaults(func=cmd_fleet)
    p = labsub.add_parser(
        "status",
        help="per node: running, systemd state, SSH reachability",
        description="One line per lab node: its site, underlay address, NAT, PID, systemd's state "
        "in it and whether SSH answers; then the connection file the inventory reads.",
        epilog="Exit codes: 0 every node is running or degraded (or no lab is up); 1 a node is not.",
    )
    format_arg(p, "text", "json")
    p.set_defaults(func=_guarded(cmd_status), host_tools=("lab-access",))
    p = labsub.add_parser(
        "ssh",
        help="open a shell (or run a command) on a lab node as its SSH user",
        description="SSH to a lab node as its declared user, as converge and verify reach it: over "
        "the underlay, or over the controller's mesh interface for a node the fleet reaches so.",
        epilog="Example: swarm lab ssh lab-gpu-2 -- ip -br addr",
    )
    p.add_argument("node", metavar="NODE")
    p.add_argument(
        "-i",
        "--inventory",
        default="inventory/lab",
        metavar="PATH",
        help="the fleet that decides the SSH target (default: %(default)s; a node it reaches over "
        "the controller's mesh interface, Mesh spec.controller.ssh_over_mesh, is reached at its mesh "
        "address; without the path, the lab's connection file alone)",
    )
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND")
    p.set_defaults(func=_guarded(cmd_ssh), host_tools=("lab-access",))
    p = labsub.add_parser(
        "stop",
        help="power one node off, as a failed node (`swarm lab up` starts it again)",
        description="Sends the node's systemd the poweroff signal and waits until it has exited "
        "(SIGKILL after 20 s); with --kill, the node is killed at once, as a machine that "
        "crashes or loses power: its services get no chance to stop. Its filesystem, links and "
        "place in the lab stay.",
        epilog="Example: swarm lab stop lab-head-1 && swarm converge  # reports it unreachable",
    )
    p.add_argument("node", metavar="NODE")
    p.add_argument("--kill", action="store_true", help="SIGKILL at once (a crash), not a poweroff")
    p.set_defaults(func=_guarded(cmd_stop), host_tools=("lab-access",))
    p = labsub.add_parser(
        "down",
        help="stop every node and remove everything the lab made (the image cache stays)",
        description="Powers off each node's systemd, then removes namespaces, bridges, veths, "
        "routes, NAT rules, cgroups and the lab's state and key. Exit 1 if anything is left.",
    )
    p.set_defaults(func=_guarded(cmd_down), host_tools=("lab",))


def _guarded(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """``func`` with :class:`LabError` and OS errors turned into a message and an exit code."""

    def run(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except LabError as exc:
            print(f"swarm lab {args.lab_command}: {exc}", file=sys.stderr)
            return EXIT_INVALID if "needs root" in str(exc) else EXIT_FAILURE
        except OSError as exc:
            print(
                f"swarm lab {args.lab_command}: {exc} (`swarm lab down` removes a half-made lab)",
                file=sys.stderr,
            )
            return EXIT_FAILURE

    return run
