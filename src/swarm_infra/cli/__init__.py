"""``swarm``: the project's own CLI, for what Ansible, pyinfra, Pulumi and pytest do not do.

One module per command group: ``init`` (a new fleet), ``fleet`` (validate, plan), ``mesh``
(allocate), ``render``, ``stacks`` (the Pulumi stacks of a fleet), ``review``, ``converge``,
``verify``, ``lab``, ``metrics``, ``pull`` (agent run, node bootstrap), ``status`` (the pull
agents' reports, read over the mesh).
Exit codes: :data:`.common.EXIT_CODES`, the same for every command. What every command
shares is in :mod:`.common`: the output path (:func:`.common.output`), the fleet loader
(:func:`.common.load`), ``--limit`` and ``--format``, argument types, and the parser whose
usage errors are one line (:class:`.common.Parser`).
"""

from __future__ import annotations

import argparse
import sys
from importlib import metadata

from .. import hosttools
from . import converge, fleet, init, lab, mesh, metrics, pull, render, review, stacks, status, verify
from .common import EXIT_CODES, EXIT_INVALID, Parser, exit_code, output


def _version() -> str:
    """The installed distribution's version (pyproject.toml's ``project.version``)."""
    try:
        return metadata.version("swarm-infra")
    except metadata.PackageNotFoundError:  # the source tree on sys.path, never installed
        return "(not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="swarm",
        description="Swarm infrastructure pipeline: validate the declared fleet and show the "
        "desired state it resolves to, render the cluster's Kubernetes objects, review a "
        "change between two Git refs, run the local lab, converge nodes (Ansible) and verify them "
        "(testinfra).",
        epilog=EXIT_CODES,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    init.add_parsers(sub)
    fleet.add_parsers(sub)
    mesh.add_parsers(sub)
    render.add_parsers(sub)
    stacks.add_parsers(sub)
    review.add_parsers(sub)
    converge.add_parsers(sub)
    verify.add_parsers(sub)
    lab.add_parsers(sub)
    metrics.add_parsers(sub)
    pull.add_parsers(sub)
    status.add_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run ``swarm ARGV`` (default: ``sys.argv[1:]``) and return its exit code (a usage
    error's, ``--help``'s and ``--version``'s included); everything written goes through
    :func:`.common.output`."""
    with output():
        try:
            args = build_parser().parse_args(argv)
            # A command that starts host programs names their areas (hosttools.AREAS): one
            # missing is said before any work, with its package and the install step, never
            # as a bare "[Errno 2]" minutes in.
            absent = hosttools.missing(getattr(args, "host_tools", ()))
            if absent:
                for line in hosttools.missing_message(absent).splitlines():
                    print(f"swarm {args.command}: {line}", file=sys.stderr)
                return EXIT_INVALID
            return int(args.func(args))
        except SystemExit as exc:  # argparse, and the loader's and --limit's refusals
            return exit_code(exc)
