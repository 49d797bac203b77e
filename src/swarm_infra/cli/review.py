"""``swarm review``: a pull request's change to the fleet, as a reviewer reads it.

Loads every fleet the change touches at ``--base`` and ``--head`` from Git (the working
tree is not touched), validates the head, and prints the plan diff, capacity and risk
flags as a GitHub comment (Markdown, at most 65,536 characters) or as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..fleet.sources import FLEET_NAME
from ..review import GitError, review
from ..review.git import fleet_names, resolve_ref, tree_files
from ..review.markdown import GITHUB_LIMIT, render
from .common import EXIT_INVALID, emit


def cmd_review(args: argparse.Namespace) -> int:
    repo = Path.cwd()
    fleets = args.fleet or None
    try:
        if fleets:
            known: set[str] = set()
            for ref in (args.base, args.head):
                known.update(fleet_names(tree_files(repo, resolve_ref(repo, ref))))
            unknown = [f for f in fleets if not FLEET_NAME.fullmatch(f) or f not in known]
            if unknown:
                print(
                    f"swarm review: no fleet named {', '.join(repr(f) for f in unknown)} at either ref "
                    f"(fleets: {', '.join(sorted(known)) or 'none'})",
                    file=sys.stderr,
                )
                return EXIT_INVALID
        result = review(repo, args.base, args.head, fleets, args.repo_url)
    except GitError as exc:
        print(f"swarm review: {exc}", file=sys.stderr)
        return EXIT_INVALID
    if args.full:
        Path(args.full).write_text(render(result, None), encoding="utf-8")
    if args.format == "json":
        out = json.dumps(result.as_json(), indent=2, sort_keys=True, ensure_ascii=False)
    else:
        out = render(result, args.max_chars or None)
    if args.out:
        Path(args.out).write_text(out if out.endswith("\n") else out + "\n", encoding="utf-8")
        print(result.summary, file=sys.stderr)
    else:
        emit(out.rstrip("\n"))
    return result.exit_code


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "review",
        help="review a change of the fleet between two Git refs (a pull request's plan diff)",
        description="Load every fleet whose files differ between --base and --head (inventory/NAME, "
        "policies/NAME, policies/shared) at both refs from Git, without touching the working tree; "
        "validate the head; resolve both; and report, summary line first: node changes by layer "
        "(identical changes folded, with node, site and GPU-model counts), the mesh (peers, which "
        "nodes keep their tunnels with `wg syncconf` and which restart the interface, relays and "
        "hubs), cluster objects field by field, capacity per GPU flavor and cohort, and risk flags "
        "(the base's ReviewPolicy says which block). Every finding names the lines of the change. "
        "Markdown is a GitHub pull-request comment: at most --max-chars characters, details cut from "
        "the end, a hidden <!-- swarm-review --> marker to find it by. Run it in the repository.",
        epilog="Exit codes: 0 no blocking flag (warnings allowed); 1 blocking flags; 2 an invalid head "
        "(the validator's file:line diagnostics are the report), an unknown ref or fleet. "
        "Example: swarm review --base origin/main --head HEAD --out review.md --full review-full.md",
    )
    p.add_argument(
        "--base", required=True, metavar="REF", help="the ref the change starts from (e.g. origin/main)"
    )
    p.add_argument("--head", default="HEAD", metavar="REF", help="the ref with the change (default: HEAD)")
    p.add_argument(
        "--fleet",
        action="append",
        metavar="NAME",
        help="review this fleet (a directory name in inventory/; repeatable; "
        "default: every fleet the change touches)",
    )
    p.add_argument(
        "--format", choices=("markdown", "json"), default="markdown", help="output format (default: markdown)"
    )
    p.add_argument(
        "--out", metavar="FILE", help="write the report to FILE (the summary line still goes to stderr)"
    )
    p.add_argument(
        "--full", metavar="FILE", help="also write the whole Markdown report, with no length limit, to FILE"
    )
    p.add_argument(
        "--max-chars",
        type=int,
        default=GITHUB_LIMIT,
        metavar="N",
        help=f"cut the Markdown report to N characters (default {GITHUB_LIMIT}, GitHub's comment limit; "
        "0: no limit)",
    )
    p.add_argument(
        "--repo-url",
        metavar="URL",
        help="make locations links to lines at their commit: https://github.com/OWNER/REPO",
    )
    p.set_defaults(func=cmd_review)
