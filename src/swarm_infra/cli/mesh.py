"""``swarm mesh``: the mesh's address record, and the controller's own mesh interface.

``allocate`` records every unpinned node's mesh address (MeshAddresses). The record is the
fleet's lock file for mesh addresses (resolve/mesh.py, Addressing): run the command after
adding or removing nodes, review the change, commit it. Entries already recorded never
change, so no running node's address moves.

``controller-key``, ``controller-up``, ``controller-down``: the operator's controller as a
mesh member (Mesh ``spec.controller``; engines/controller.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from ..engines import controller, keyrecord
from ..fleet.diagnostics import Report
from ..fleet.sources import fleet_paths as inventory_fleet_paths
from ..nodeside.atomic import write_atomic
from ..resolve import load_fleet
from ..resolve.analysis import Analysis
from ..resolve.controller import controller_peer_keys, controller_state
from ..resolve.files import UnsafeValue
from ..resolve.mesh import allocate, record_yaml
from .common import (
    EXIT_FAILURE,
    EXIT_INVALID,
    EXIT_OK,
    FLEET_HELP,
    emit,
    fleet_args,
    invalid_fleet_exits,
    inventory_args,
    output_problem,
    validation,
)

RECORD_FILE = "mesh-addresses.yaml"
# What allocate exists to repair; any other error stops it (a Node document that failed its
# schema would otherwise lose its entry as if the node were gone).
_REPAIRS = frozenset({"mesh.address-unrecorded", "mesh.address-record-stale", "mesh.address-collision"})
_REPAIRS_IN_RECORD = frozenset({"mesh.address-duplicate", "mesh.address-outside-cidr"})


def cmd_allocate(args: argparse.Namespace) -> int:
    problem = output_problem("--output", args.output, directory=False) if args.output else None
    if problem:
        emit(f"swarm mesh allocate: {problem}", sys.stderr)
        return EXIT_INVALID
    result = validation(args)  # an unknown --fleet: its report, below
    analysis = result.analysis
    fleet = analysis.fleet if analysis else None
    if fleet is None or fleet.mesh is None:
        emit(
            result.report.text() if not result.report.ok else "swarm mesh allocate: the fleet has no Mesh",
            sys.stderr,
        )
        return EXIT_INVALID
    record = fleet.mesh_addresses
    record_file = record.source.file if record and record.source else None
    blocking = [
        d
        for d in result.report.errors
        if d.rule not in _REPAIRS and not (d.rule in _REPAIRS_IN_RECORD and d.file == record_file)
    ]
    if blocking:
        emit(Report(blocking).text(), sys.stderr)
        emit("swarm mesh allocate: fix these errors first (nothing was written)", sys.stderr)
        return EXIT_INVALID
    if args.output:
        out = Path(args.output)
    elif record_file:
        out = Path(record_file)
    elif not args.paths:
        out = Path("inventory") / args.fleet / RECORD_FILE
    else:
        emit("swarm mesh allocate: the fleet has no MeshAddresses yet; say where with --output", sys.stderr)
        return EXIT_INVALID
    if out.exists():
        try:
            docs = [d for d in yaml.safe_load_all(out.read_text(encoding="utf-8")) if d is not None]
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            # A file the fleet did not load (--output names it): the fleet's own were validated.
            if isinstance(exc, OSError):
                why = exc.strerror
            else:
                why = "not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else "not valid YAML"
            emit(f"swarm mesh allocate: {out}: {why}; expected a MeshAddresses record or a new file",
                 sys.stderr)  # fmt: skip
            return EXIT_INVALID
        if len(docs) != 1 or not isinstance(docs[0], dict) or docs[0].get("kind") != "MeshAddresses":
            emit(f"swarm mesh allocate: {out} holds other documents than one MeshAddresses; "
                 "the record must have a file of its own", sys.stderr)  # fmt: skip
            return EXIT_INVALID
    try:
        addresses, changes = allocate(fleet.mesh, fleet.nodes, record.addresses if record else None)
    except ValueError as exc:
        emit(f"swarm mesh allocate: {exc}", sys.stderr)
        return EXIT_FAILURE
    name = record.name if record else fleet.mesh.name
    text = record_yaml(name, addresses)
    if out.exists() and out.read_text() == text:
        emit(f"{out}: {len(addresses)} address(es), unchanged")
        return EXIT_OK
    try:
        write_atomic(out, text, 0o644)
    except OSError as exc:  # the record is as it was (the new one goes in by rename, or not at all)
        emit(f"swarm mesh allocate: {exc.filename}: {exc.strerror}; {out} was not changed", sys.stderr)
        return EXIT_INVALID
    for line in changes:
        emit(f"  {line}")
    emit(f"{out}: {len(addresses)} address(es) recorded; review and commit it")
    return EXIT_OK


def cmd_controller_key(args: argparse.Namespace) -> int:
    path = Path(args.key) if args.key else controller.default_key_path()
    # A path that cannot hold the key file is the operator's input: said as such, nothing made.
    # (Its directory is made where absent, 0700.)
    above = next((a for a in path.parents if a.exists()), None)
    problem = None
    if path.is_dir():
        problem = f"--key {path}: a directory; expected the key file (or a new file's name)"
    elif above is not None and not above.is_dir():
        problem = f"--key {path}: {above} is a file; expected a directory there"
    if problem:
        emit(f"swarm mesh controller-key: {problem}", sys.stderr)
        return EXIT_INVALID
    try:
        key, made = controller.ensure_key(path)
    except controller.ControllerError as exc:
        emit(f"swarm mesh controller-key: {exc}", sys.stderr)
        return EXIT_FAILURE
    except OSError as exc:
        emit(f"swarm mesh controller-key: {exc.filename}: {exc.strerror}; no key was made", sys.stderr)
        return EXIT_INVALID
    emit(f"{path}: {'made now (0600)' if made else 'kept'}; its public key, for the fleet's Mesh:")
    emit(f"  controller:\n    public_key: {key}")
    return EXIT_OK


def _controller_fleet(args: argparse.Namespace, command: str) -> tuple[Path, Analysis] | int:
    """(inventory source, checked fleet) of ``-i``/``--fleet``, or an exit code after saying why."""
    inventory = Path(args.inventory or Path("inventory") / args.fleet)
    try:
        paths = inventory_fleet_paths(inventory) if inventory.exists() else []
        if not paths:
            why = "is not a fleet inventory (inventory/NAME, or a *.swarm.yml)"
            emit(f"swarm mesh {command}: {inventory} {why}", sys.stderr)
            return EXIT_INVALID
        with invalid_fleet_exits(f"mesh {command}", "nothing was changed"):
            return inventory, load_fleet(paths)
    except (OSError, ValueError) as exc:
        emit(f"swarm mesh {command}: {exc}", sys.stderr)
        return EXIT_INVALID


def cmd_controller_up(args: argparse.Namespace) -> int:
    found = _controller_fleet(args, "controller-up")
    if isinstance(found, int):
        return found
    inventory, analysis = found
    state = controller_state(analysis)
    if state is None:
        emit(
            "swarm mesh controller-up: the fleet's Mesh declares no controller (spec.controller)", sys.stderr
        )
        return EXIT_INVALID
    path = Path(args.key) if args.key else controller.default_key_path()
    try:
        # Keys the fleet does not record: what the nodes reported at `swarm converge`.
        keys = controller_peer_keys(state, keyrecord.load(keyrecord.record_path(inventory)))
        out = controller.up(state, path, keys, check=args.check)
    except (controller.ControllerError, UnsafeValue, OSError, keyrecord.KeyRecordInvalid) as exc:
        emit(f"swarm mesh controller-up: {exc}", sys.stderr)
        return EXIT_FAILURE
    if args.diff and out.diff:
        emit(out.diff.rstrip("\n"))
    verb = "would" if args.check else "did"
    for step in out.steps:
        emit(f"  {verb}: {step}")
    unknown = sorted({p["name"] for p in state["peers"]} - set(keys))
    if unknown:
        emit(f"  note: no public key known for {', '.join(unknown)} (record it, or converge it first)")
    emit(
        f"{state['interface']} {state['address']}: {len(keys)} of {len(state['peers'])} peer(s), "
        + ("changed" if out.changed else "unchanged")
        + (" (check mode: nothing was changed)" if args.check else "")
    )
    return EXIT_OK


def cmd_controller_down(args: argparse.Namespace) -> int:
    found = _controller_fleet(args, "controller-down")
    if isinstance(found, int):
        return found
    fleet = found[1].fleet
    ctl = fleet.mesh.controller if fleet.mesh is not None else None
    if ctl is None:
        emit(
            "swarm mesh controller-down: the fleet's Mesh declares no controller (spec.controller)",
            sys.stderr,
        )
        return EXIT_INVALID
    try:
        removed = controller.down(ctl.interface)
    except controller.ControllerError as exc:
        emit(f"swarm mesh controller-down: {exc}", sys.stderr)
        return EXIT_FAILURE
    emit(f"{ctl.interface}: {'removed' if removed else 'not there'}")
    return EXIT_OK


def _controller_args(p: argparse.ArgumentParser, key: bool = True) -> None:
    inventory_args(p)
    if key:
        p.add_argument(
            "--key",
            metavar="FILE",
            help="the controller's private key file (default: $SWARM_STATE_DIR/controller/wireguard.key, "
            "state directory $XDG_STATE_HOME/swarm or ~/.local/state/swarm)",
        )


def add_parsers(sub: argparse._SubParsersAction) -> None:
    mesh = sub.add_parser(
        "mesh",
        help="the mesh's address record; the controller's mesh interface",
        description="The fleet's WireGuard mesh: record each node's mesh address (allocate), and "
        "make this controller a mesh member (controller-key, controller-up, controller-down).",
    ).add_subparsers(dest="mesh_command", required=True, metavar="SUBCOMMAND")
    p = mesh.add_parser(
        "allocate",
        help="record each unpinned node's mesh address (MeshAddresses), keeping every recorded one",
        description="Write the fleet's MeshAddresses record: every recorded entry is kept as it "
        "is; a node without one gets its derived address (SHA-256 of its name into the mesh CIDR), "
        "or the next free address after it when that is held; entries of nodes no longer declared "
        "(or now pinned) are dropped. Writes the record's file, or inventory/NAME/"
        f"{RECORD_FILE} for a fleet without one. Refuses (exit 2) while the fleet has other "
        "errors. " + FLEET_HELP,
        epilog="Example: swarm mesh allocate --fleet example && git diff inventory/example",
    )
    fleet_args(p)
    p.add_argument("--output", metavar="FILE", help="where to write the record (default: see above)")
    p.set_defaults(func=cmd_allocate)
    p = mesh.add_parser(
        "controller-key",
        help="make (once) the controller's WireGuard key; print its public key for the fleet",
        description="Make the controller's private key with wg genkey where there is none "
        "(mode 0600, its directory 0700; never printed, never in Git) and print the public key "
        "to record in the fleet's Mesh as spec.controller.public_key.",
    )
    p.add_argument("--key", metavar="FILE", help="the private key file (default: see controller-up)")
    p.set_defaults(func=cmd_controller_key, host_tools=("mesh-key",))
    p = mesh.add_parser(
        "controller-up",
        help="bring this controller's mesh interface to the fleet's declaration (root)",
        description="Set this host's WireGuard interface as the fleet's Mesh spec.controller "
        "declares it: the link (kernel WireGuard, else wireguard-go), wg setconf with every node "
        "as a peer (the private key spliced in from its file through a pipe; the configuration "
        "without it kept 0600 beside the key), the mesh address and the route to the mesh CIDR. "
        "Refuses a key whose public key the fleet does not record. A node's public key is the "
        "one the fleet records, else the one it reported at swarm converge (the controller's "
        "key record). Nodes must have been converged with the controller declared before it "
        "reaches them.",
        epilog="Example: sudo swarm mesh controller-up --fleet lab --check --diff",
    )
    _controller_args(p)
    p.add_argument("--check", action="store_true", help="report what would change, change nothing")
    p.add_argument("--diff", action="store_true", help="show the configuration's differences")
    p.set_defaults(func=cmd_controller_up, host_tools=("mesh",))
    p = mesh.add_parser(
        "controller-down",
        help="remove this controller's mesh interface (root)",
        description="Delete the interface the fleet's Mesh spec.controller names (a wireguard-go "
        "process exits with it). The key and the configuration file stay.",
    )
    _controller_args(p, key=False)
    p.set_defaults(func=cmd_controller_down, host_tools=("mesh",))
