"""What the commands share: exit codes, fleet arguments and reading the fleet they name."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

from ..engines import controller
from ..fleet.diagnostics import Diagnostic, FleetInvalid, Report
from ..fleet.sources import FleetEscapes, UnknownFleet, named_fleet_paths
from ..fleet.sources import fleet_paths as inventory_fleet_paths
from ..resolve import desired_state, load_fleet
from ..resolve.controller import controller_key_missing
from ..resolve.types import DesiredState, NodeState

EXIT_OK, EXIT_FAILURE, EXIT_INVALID = 0, 1, 2

EXIT_CODES = (
    "Exit codes: 0 ok (warnings allowed); 1 the command ran and found or caused a failure "
    "(drift, a failed converge, a rejected node, a review that blocks, an unexpected failure); "
    "2 nothing was done: invalid input or usage, or a missing host tool (the install step named)."
)
"""The exit codes of every ``swarm`` command, said once (the top-level ``--help``):

====  ==============  ===============================================================
code  name            meaning
====  ==============  ===============================================================
0     EXIT_OK         ok; warnings allowed
1     EXIT_FAILURE    the command ran and found or caused a failure: drift, a failed
                      converge, a rejected node, a review that blocks, an unexpected
                      failure
2     EXIT_INVALID    nothing was done: invalid input or usage (a path that is not what
                      the option expects, an invalid fleet, an unknown name), or a
                      missing host tool (the install step named)
====  ==============  ===============================================================

A subcommand's epilog that restates its codes says what 1 and 2 are for it, never
something else.
"""

FLEET_HELP = (
    "PATHS are YAML files or directories (searched recursively). Without PATHS, --fleet NAME "
    "reads inventory/NAME, policies/NAME and policies/shared under the current directory; "
    "NAME is a directory name in inventory/, never a path."
)


def emit(text: str, stream: TextIO | None = None) -> None:
    """Write ``text`` and a newline to ``stream`` (stdout) and flush it.

    A reader that leaves early (``swarm validate | head``) ends the output, not the
    command: the exit code still says what the command found. The rest of the output is
    sent nowhere, so that Python's flush at exit does not fail either.
    """
    stream = stream or sys.stdout
    try:
        stream.write(text + "\n")
        stream.flush()
    except BrokenPipeError:
        silence(stream)


def silence(stream: TextIO) -> None:
    """Point ``stream``'s file descriptor at /dev/null (after its reader has gone)."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)


def output_problem(option: str, path: str, *, directory: bool) -> str | None:
    """Why ``path`` cannot be written as ``option``'s output, as one line naming both; None
    when it can (as far as can be told before writing).

    ``directory``: the output is a directory, made where absent (its parents too): refused
    when the path or the nearest existing one above it is not a directory. Otherwise a file
    in an existing directory: refused when the path is a directory or its parent is not
    one. Checked before any work, so that a command that would only fail at its end (after
    measuring, rendering or reviewing) says so at once and does nothing (exit 2).
    """
    p = Path(path)
    if directory:
        if p.exists() and not p.is_dir():
            return f"{option} {path}: not a directory (a file is there); expected a directory"
        above = next((a for a in p.parents if a.exists()), None)
        if above is not None and not above.is_dir():
            return f"{option} {path}: {above} is a file; expected a directory there"
        return None
    if p.is_dir():
        return f"{option} {path}: a directory; expected a file name"
    if not p.parent.is_dir():
        what = "is a file" if p.parent.exists() else "does not exist"
        return f"{option} {path}: its directory {p.parent} {what}; expected an existing directory"
    return None


def fleet_args(p: argparse.ArgumentParser) -> None:
    """PATHS, --fleet and --format, as validate, plan and lab up take them."""
    p.add_argument("paths", nargs="*", metavar="PATHS", help="fleet YAML files or directories")
    p.add_argument("--fleet", default="lab", help="fleet name used when no PATHS are given (default: lab)")
    p.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: text)")


def fleet_paths(args: argparse.Namespace) -> list[str]:
    """The paths to read: PATHS if given, else the --fleet convention (existing dirs only).

    Raises :class:`FleetInvalid` with one ``fleet.unknown`` diagnostic when --fleet is not
    the name of a directory in ``inventory/`` (the message lists those there are).
    """
    if args.paths:
        return args.paths
    try:
        return [str(p) for p in named_fleet_paths(Path(), args.fleet)]
    except UnknownFleet as exc:
        where = str(Path("inventory") / args.fleet) if "/" not in args.fleet else args.fleet
        raise FleetInvalid(Report([Diagnostic(where, 0, 0, "$", "fleet.unknown", str(exc))])) from None
    except FleetEscapes as exc:
        where = str(Path("inventory") / args.fleet)
        raise FleetInvalid(Report([Diagnostic(where, 0, 0, "$", "file.outside-fleet", str(exc))])) from None


def simulated_nodes(nodes: Mapping[str, NodeState]) -> list[str]:
    """Names of the nodes whose GPUs use the simulated NVML backend (said in every output)."""
    return [n for n, s in nodes.items() if s["gpu"] and s["gpu"]["backend"] == "simulated"]


def fleet_inventory(args: argparse.Namespace, command: str) -> tuple[Path, DesiredState] | int:
    """(inventory path, desired state) for converge/verify, or an exit code after saying why."""
    root = Path.cwd()
    if not (root / "ansible.cfg").is_file() or not (root / "playbooks").is_dir():
        print(f"swarm {command}: run it from the repository root (ansible.cfg, playbooks/)", file=sys.stderr)
        return EXIT_INVALID
    if not args.inventory:
        try:
            named_fleet_paths(root, args.fleet)
        except (UnknownFleet, FleetEscapes) as exc:
            print(f"swarm {command}: {exc}", file=sys.stderr)
            return EXIT_INVALID
    inventory = Path(args.inventory or f"inventory/{args.fleet}")
    try:
        paths = inventory_fleet_paths(inventory) if inventory.exists() else []
    except (OSError, ValueError) as exc:
        print(f"swarm {command}: {exc}", file=sys.stderr)
        return EXIT_INVALID
    if not paths:
        print(
            f"swarm {command}: {inventory} is not a fleet inventory (inventory/NAME, or a *.swarm.yml)",
            file=sys.stderr,
        )
        return EXIT_INVALID
    try:
        state = desired_state(load_fleet(paths))
    except FleetInvalid as exc:
        print(exc.report.text(), file=sys.stderr)
        print(f"swarm {command}: the fleet is invalid; nothing was run", file=sys.stderr)
        return EXIT_INVALID
    # A controller the fleet declares without its key: this controller's own (push mode).
    try:
        state = controller.with_own_key(state)
    except controller.ControllerError as exc:
        print(f"swarm {command}: the controller's key: {exc}; nothing was run", file=sys.stderr)
        return EXIT_INVALID
    if command == "converge" and controller_key_missing(state):
        # Written so, every node's peer list would lose the controller: a node behind NAT,
        # reached over the mesh, would be cut off by the very run that reached it.
        print(
            f"swarm {command}: the fleet's Mesh declares the controller without its public key "
            f"(spec.controller.public_key) and this controller has no key at "
            f"{controller.default_key_path()}: make it with `swarm mesh controller-key`, or record "
            "the controller's key in the fleet; nothing was run",
            file=sys.stderr,
        )
        return EXIT_INVALID
    return inventory, state


def inventory_args(p: argparse.ArgumentParser) -> None:
    """--fleet and -i, as converge and verify take them."""
    p.add_argument("--fleet", default="lab", help="fleet name: inventory/NAME (default: lab)")
    p.add_argument("-i", "--inventory", metavar="PATH", help="inventory source (default inventory/FLEET)")
