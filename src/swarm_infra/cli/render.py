"""``swarm render``: the cluster layer's objects as YAML, for GitOps tools and kubectl.

The same objects the Pulumi stacks create (``swarm_infra.cluster.build``), one file per
kind in apply order (``00-namespace.yaml`` ... ``16-raycluster.yaml``). ``--check DIR``
exits 1 when DIR's rendered files differ from what the fleet renders, so CI catches a
pull request that changed policies without re-rendering.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..cluster import ScopeError, build
from ..cluster import render as yaml_files
from ..fleet.diagnostics import FleetInvalid
from ..resolve import desired_state, load_fleet
from .common import EXIT_FAILURE, EXIT_INVALID, EXIT_OK, FLEET_HELP, fleet_paths, output_problem


def cmd_render(args: argparse.Namespace) -> int:
    # DIR is a directory: a file there (or above it) is said before rendering, never a traceback.
    problem = output_problem("--out", args.out, directory=True) if args.out else None
    if args.check and not Path(args.check).is_dir():
        what = "not a directory (a file is there)" if Path(args.check).exists() else "no such directory"
        problem = f"--check {args.check}: {what}; expected the directory `swarm render --out` wrote"
    if problem:
        print(f"swarm render: {problem}", file=sys.stderr)
        return EXIT_INVALID
    try:
        state = desired_state(load_fleet(fleet_paths(args)))
        objects = build(state, args.sites.split(",") if args.sites else None)
    except FleetInvalid as exc:
        print(exc.report.text(), file=sys.stderr)
        print("swarm render: the fleet is invalid; nothing was rendered", file=sys.stderr)
        return EXIT_INVALID
    except (ScopeError, ValueError) as exc:
        print(f"swarm render: {exc}", file=sys.stderr)
        return EXIT_INVALID
    files = yaml_files.files(objects.all(), state["cluster"]["settings"]["fleet"])
    if args.check:
        diff = yaml_files.differences(files, Path(args.check))
        for line in diff:
            print(line)
        if diff:
            print(
                f"swarm render: {args.check} is not what the fleet renders; run "
                f"`swarm render --fleet {args.fleet} --out {args.check}` and commit the result",
                file=sys.stderr,
            )
            return EXIT_FAILURE
        print(f"{args.check}: {len(files)} files, {len(objects.all())} objects, up to date")
        return EXIT_OK
    if args.out:
        out = Path(args.out)
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # not ours to make (permissions): nothing written yet
            print(f"swarm render: --out {out}: {exc.strerror}; nothing was written", file=sys.stderr)
            return EXIT_INVALID
        try:
            for name, path in yaml_files.rendered_files(out).items():
                if name not in files:
                    path.unlink()  # a kind the fleet no longer has
            for name, text in files.items():
                (out / name).write_text(text, encoding="utf-8")
        except OSError as exc:  # some files may be written: the directory is not what the fleet renders
            print(f"swarm render: {exc.filename}: {exc.strerror}; {out} is incomplete", file=sys.stderr)
            return EXIT_FAILURE
        print(f"{out}: {len(files)} files, {len(objects.all())} objects")
        return EXIT_OK
    sys.stdout.write("".join(files.values()))
    return EXIT_OK


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "render",
        help="write the cluster's Kubernetes, Kueue and KubeRay objects as YAML",
        description="Validate, then render the objects the Pulumi stacks create (namespaces, "
        "PriorityClasses, Kueue queues and flavors, the allowed-priorities admission policy, "
        "quotas, node labels and taints, GPU sharing configs, storage, the mesh topology, "
        "RayClusters) as YAML, one file per kind, for GitOps tools and `kubectl apply "
        "--server-side -f DIR`. Without --out or --check, the YAML goes to stdout. " + FLEET_HELP,
        epilog="Exit codes: 0 ok (or, with --check, up to date); 1 --check found differences, or "
        "writing --out failed part way; 2 nothing was done: an invalid fleet or sites, or an --out or "
        "--check that is not a directory. Example: swarm render --fleet example --out deploy/example",
    )
    p.add_argument("paths", nargs="*", metavar="PATHS", help="fleet YAML files or directories")
    p.add_argument("--fleet", default="lab", help="fleet name used when no PATHS are given (default: lab)")
    p.add_argument("--sites", metavar="A,B", help="only the cluster of these sites (one regional cluster)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--out", metavar="DIR", help="write the files to DIR (stale rendered files removed)")
    where.add_argument("--check", metavar="DIR", help="exit 1 when DIR differs from what the fleet renders")
    p.set_defaults(func=cmd_render)
