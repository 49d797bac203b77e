"""``swarm render``: the cluster layer's objects as YAML, for GitOps tools and kubectl.

The same objects the Pulumi stacks create (``swarm_infra.cluster.build``), one file per
kind in apply order (``00-namespace.yaml`` ... ``16-raycluster.yaml``). ``--diff-against
DIR`` (formerly ``--check DIR``, still taken with a warning: converge's ``--check`` is a dry
run, this one is not) prints DIR's differences from what the fleet renders and exits 1 when
there are any, so CI catches a pull request that changed policies without re-rendering.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..cluster import ScopeError, build
from ..cluster import render as yaml_files
from ..resolve import desired_state
from .common import (
    EXIT_FAILURE,
    EXIT_INVALID,
    EXIT_OK,
    FLEET_HELP,
    Renamed,
    emit,
    fleet_args,
    load,
    output_problem,
)


def _rendered_directory(text: str) -> str:
    """An argparse ``type``: ``--diff-against DIR``'s DIR, an existing directory."""
    if not Path(text).is_dir():
        what = "not a directory (a file is there)" if Path(text).exists() else "no such directory"
        raise argparse.ArgumentTypeError(f"{text}: {what}; expected the directory `swarm render --out` wrote")
    return text


_rendered_directory.__name__ = "directory"


def cmd_render(args: argparse.Namespace) -> int:
    # DIR is a directory: a file there (or above it) is said before rendering, never a traceback.
    problem = output_problem("--out", args.out, directory=True) if args.out else None
    if problem:
        print(f"swarm render: {problem}", file=sys.stderr)
        return EXIT_INVALID
    state = desired_state(load(args, "render", "nothing was rendered"))
    try:
        objects = build(state, args.sites.split(",") if args.sites else None)
    except (ScopeError, ValueError) as exc:
        print(f"swarm render: {exc}", file=sys.stderr)
        return EXIT_INVALID
    files = yaml_files.files(objects.all(), state["cluster"]["settings"]["fleet"])
    if args.diff_against:
        where = args.diff_against
        diff = yaml_files.differences(files, Path(where))
        for line in diff:
            emit(line)
        if diff:
            print(
                f"swarm render: {where} is not what the fleet renders; run "
                f"`swarm render --fleet {args.fleet} --out {where}` and commit the result",
                file=sys.stderr,
            )
            return EXIT_FAILURE
        emit(f"{where}: {len(files)} files, {len(objects.all())} objects, up to date")
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
        emit(f"{out}: {len(files)} files, {len(objects.all())} objects")
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
        "--server-side -f DIR`. Without --out or --diff-against, the YAML goes to stdout. " + FLEET_HELP,
        epilog="Exit codes: 0 ok (or, with --diff-against, up to date); 1 --diff-against found "
        "differences, or writing --out failed part way; 2 nothing was done: an invalid fleet or sites, "
        "or an --out or --diff-against that is not a directory. "
        "Example: swarm render --fleet example --out deploy/example",
    )
    fleet_args(p)
    p.add_argument("--sites", metavar="A,B", help="only the cluster of these sites (one regional cluster)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--out", metavar="DIR", help="write the files to DIR (stale rendered files removed)")
    where.add_argument(
        "--diff-against",
        metavar="DIR",
        type=_rendered_directory,
        help="print how DIR (what `swarm render --out DIR` wrote) differs from what the fleet renders; "
        "exit 1 when it does",
    )
    where.add_argument(
        "--check",
        dest="diff_against",
        metavar="DIR",
        type=_rendered_directory,
        action=Renamed,
        new="--diff-against",
        why=" (converge's --check is a dry run)",
        help=argparse.SUPPRESS,
    )
    p.set_defaults(func=cmd_render)
