"""``swarm stacks``: the repository's Pulumi stacks and the fleet (and sites) each one is
(:mod:`swarm_infra.cluster.stacks`), so that an apply updates every stack of a fleet, the
regional ones too, not only the stack named after it."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from ..cluster.stacks import StackFileError, read_stacks, stacks_of
from .common import EXIT_INVALID, EXIT_OK, emit, format_arg


def cmd_stacks(args: argparse.Namespace) -> int:
    try:
        stacks = read_stacks(Path(args.root))
    except StackFileError as exc:
        emit(f"swarm stacks: {exc}", sys.stderr)
        return EXIT_INVALID
    chosen = stacks_of(stacks, args.fleet) if args.fleet else [s for _, s in sorted(stacks.items())]
    if args.format == "json":
        emit(json.dumps([asdict(s) for s in chosen], indent=2, sort_keys=True))
    else:
        for s in chosen:
            emit(s.name)
    return EXIT_OK


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "stacks",
        help="list the Pulumi stacks (Pulumi.<stack>.yaml) and the fleet and sites of each",
        description="List the stacks of the Pulumi project in --root: each Pulumi.<stack>.yaml, with "
        "its swarm:fleet (default: Pulumi.yaml's), swarm:sites (a regional cluster; none: every site) "
        "and kubernetes:context. Text: one stack name per line (what apply.yml runs `pulumi up` on).",
        epilog="Exit codes: 0 listed (none is not an error); 2 a stack file that is not YAML or has "
        "keys of the wrong type. Example: swarm stacks --fleet example",
    )
    p.add_argument("--fleet", metavar="NAME", help="only the stacks of this fleet")
    p.add_argument("--root", default=".", metavar="DIR", help="the project's directory (default: .)")
    format_arg(p, "text", "json")
    p.set_defaults(func=cmd_stacks)
