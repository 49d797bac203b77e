"""``swarm mesh allocate``: record every unpinned node's mesh address (MeshAddresses).

The record is the fleet's lock file for mesh addresses (resolve/mesh.py, Addressing): run
the command after adding or removing nodes, review the change, commit it. Entries already
recorded never change, so no running node's address moves.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import yaml

from ..fleet.diagnostics import FleetInvalid, Report
from ..resolve import validate
from ..resolve.mesh import allocate, record_yaml
from .common import EXIT_FAILURE, EXIT_INVALID, EXIT_OK, FLEET_HELP, emit, fleet_paths

RECORD_FILE = "mesh-addresses.yaml"
# What allocate exists to repair; any other error stops it (a Node document that failed its
# schema would otherwise lose its entry as if the node were gone).
_REPAIRS = frozenset({"mesh.address-unrecorded", "mesh.address-record-stale", "mesh.address-collision"})
_REPAIRS_IN_RECORD = frozenset({"mesh.address-duplicate", "mesh.address-outside-cidr"})


def cmd_allocate(args: argparse.Namespace) -> int:
    try:
        result = validate(fleet_paths(args))
    except FleetInvalid as exc:  # an unknown --fleet
        emit(exc.report.text(), sys.stderr)
        return EXIT_INVALID
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
        docs = [d for d in yaml.safe_load_all(out.read_text()) if d is not None]
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
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, out)
    for line in changes:
        emit(f"  {line}")
    emit(f"{out}: {len(addresses)} address(es) recorded; review and commit it")
    return EXIT_OK


def add_parsers(sub: argparse._SubParsersAction) -> None:
    mesh = sub.add_parser("mesh", help="the mesh's address record").add_subparsers(
        dest="mesh_command", required=True, metavar="SUBCOMMAND"
    )
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
    p.add_argument("paths", nargs="*", metavar="PATHS", help="fleet YAML files or directories")
    p.add_argument("--fleet", default="lab", help="fleet name used when no PATHS are given (default: lab)")
    p.add_argument("--output", metavar="FILE", help="where to write the record (default: see above)")
    p.set_defaults(func=cmd_allocate)
