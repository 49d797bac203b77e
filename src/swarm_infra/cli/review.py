"""``swarm review``: a pull request's change to the fleet, as a reviewer reads it.

Compares ``--head`` with its merge base with ``--base`` (``--exact-base``: with ``--base``
itself; ``--merge``: the merge result of ``--head`` into ``--base`` with ``--base``),
loads every fleet the change touches at both commits from Git (the working tree
is not read; uncommitted fleet or rule files are warned about, or with ``--worktree`` the
working tree is the head, as a commit of it made on top of ``HEAD``), validates the head, lists
the rule files the change touches, and prints the plan diff, capacity and risk
flags as a GitHub comment (Markdown, at most 65,536 characters) or as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..cluster import build
from ..fleet.diagnostics import FleetInvalid
from ..fleet.sources import FLEET_NAME
from ..resolve import desired_state, load_fleet
from ..review import GitError, review, summarize
from ..review.claim import ClaimInvalid, claim_document, read_claim
from ..review.git import (
    fleet_dirs,
    fleet_names,
    resolve_ref,
    toplevel,
    tree_files,
    tree_of,
    uncommitted,
    worktree_commit,
)
from ..review.markdown import GITHUB_LIMIT, render
from .common import EXIT_INVALID, EXIT_OK, at_least, emit, format_arg, output_problem


def _fail(args: argparse.Namespace, message: str) -> int:
    """Report an error that stopped the review: stderr, and in JSON mode a JSON document
    on stdout (or in ``--out``) too, so that a bot always reads one. Exit 2."""
    print(f"swarm review: {message}", file=sys.stderr)
    if args.format == "json":
        doc = json.dumps(
            {"error": message, "exit_code": EXIT_INVALID, "fleets": []}, indent=2, sort_keys=True
        )
        if args.out:
            Path(args.out).write_text(doc + "\n", encoding="utf-8")
        else:
            emit(doc)
    return EXIT_INVALID


def cmd_review(args: argparse.Namespace) -> int:
    # The files are written last: one that cannot be is said before the review, not after it.
    for option in ("out", "full"):
        path = getattr(args, option)
        problem = output_problem(f"--{option}", path, directory=False) if path else None
        if problem:
            if option == "out":
                args.out = None  # the error's JSON document goes to stdout instead
            return _fail(args, problem)
    fleets = args.fleet or None
    claim: dict[str, Any] | None = None
    claim_problem = None
    if args.claim:
        try:
            claim = read_claim(Path(args.claim))
        except ClaimInvalid as exc:  # the head's data: said, never fatal
            claim_problem = f"the head's claim ({args.claim}) was not read: {exc}"
    try:
        repo = toplevel(Path.cwd())
        # --worktree: the working tree as `git add -A` would commit it, as an unreferenced
        # commit on top of HEAD, reviewed like any other head.
        head = worktree_commit(repo) if args.worktree else args.head or "HEAD"
        if fleets:
            known: set[str] = set()
            for ref in (args.base, head):
                known.update(fleet_names(tree_files(repo, resolve_ref(repo, ref))))
            unknown = [f for f in fleets if not FLEET_NAME.fullmatch(f) or f not in known]
            if unknown:
                return _fail(
                    args,
                    f"no fleet named {', '.join(repr(f) for f in unknown)} at either ref "
                    f"(fleets: {', '.join(sorted(known)) or 'none'})",
                )
        result = review(
            repo,
            args.base,
            head,
            fleets,
            args.repo_url,
            exact_base=args.exact_base,
            merge=args.merge,
            claim=claim,
        )
    except GitError as exc:
        return _fail(args, str(exc))
    if claim_problem:
        result.notes.append(claim_problem)
    if args.worktree:
        result.notes.append(
            "the head is the working tree (uncommitted edits included, as `git add -A` would commit "
            f"them on top of HEAD; `{result.head[:12]}` is that commit, made only for this review): "
            "commit and push it for the pull request's own review"
        )
    else:
        try:
            at_head = resolve_ref(repo, "HEAD") == result.head
        except GitError:  # a repository with no commit yet
            at_head = False
        dirty = uncommitted(repo) if at_head else []
        if dirty:
            shown = ", ".join(dirty[:5]) + (f" and {len(dirty) - 5} more" if len(dirty) > 5 else "")
            note = (
                f"NOT REVIEWED: uncommitted changes to fleet or rule files in the working tree ({shown}); "
                "this review reads commits only: commit them, or run swarm review --worktree to "
                "review the working tree as it is"
            )
            result.notes.append(note)
            result.uncommitted = dirty
            summarize(result)
            print(f"swarm review: warning: {note}", file=sys.stderr)
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


def cmd_claim(args: argparse.Namespace) -> int:
    """Write the head's claim (:mod:`swarm_infra.review.claim`) of the checked-out commit:
    every fleet's desired state and cluster objects as this checkout's code resolves them."""
    problem = output_problem("--out", args.out, directory=False)
    if problem:
        print(f"swarm claim: {problem}", file=sys.stderr)
        return EXIT_INVALID
    try:
        repo = toplevel(Path.cwd())
        tree = tree_of(repo, "HEAD")
        names = fleet_names(tree_files(repo, resolve_ref(repo, "HEAD")))
    except GitError as exc:
        print(f"swarm claim: {exc}", file=sys.stderr)
        return EXIT_INVALID
    dirty = uncommitted(repo)
    if dirty:  # the claim is of HEAD's tree: uncommitted files would make it another's
        print(
            f"swarm claim: {len(dirty)} uncommitted fleet or rule file(s): commit them first", file=sys.stderr
        )
        return EXIT_INVALID
    fleets: dict[str, dict[str, Any]] = {}
    for name in names:
        try:
            state = desired_state(load_fleet([repo / d for d in fleet_dirs(name) if (repo / d).is_dir()]))
            objects = list(build(state).all())
        except FleetInvalid as exc:
            fleets[name] = {"error": f"invalid ({len(exc.report.errors)} error(s))"}
            continue
        except ValueError as exc:  # a scope or topology the cluster layer refuses
            fleets[name] = {"error": str(exc)[:300]}
            continue
        fleets[name] = {"nodes": state["nodes"], "objects": objects, "error": None}
    Path(args.out).write_text(
        json.dumps(claim_document(tree, fleets), sort_keys=True) + "\n", encoding="utf-8"
    )
    print(f"swarm claim: {len(fleets)} fleet(s) of tree {tree[:12]} written to {args.out}", file=sys.stderr)
    return EXIT_OK


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
        "the end, a hidden <!-- swarm-review --> marker to find it by. The base is the merge base of "
        "--base and --head (what a pull request itself changes), unless --exact-base, or with --merge "
        "the head is the merge result of --head into --base (what the base will hold). Changes to the "
        "rules (schemas/, src/, roles/, playbooks/, plugins/, deploys/, stacks/, .github/, ...) are "
        "listed and make every fleet reviewed; with schemas/ changed the head is also checked against "
        "its own schemas. Run it anywhere in the repository; uncommitted fleet or rule files are not "
        "reviewed (a warning says so) unless --worktree.",
        epilog="Exit codes: 0 no blocking flag (warnings allowed); 1 blocking flags; 2 an invalid head "
        "(the validator's file:line diagnostics are the report), an unknown ref or fleet, a head that "
        "conflicts with the base under --merge, not a Git "
        "repository, an --out or --full that cannot be written (with --format json, stdout is then a "
        "JSON document with an error key). "
        "Example: swarm review --base origin/main --head HEAD --out review.md --full review-full.md",
    )
    p.add_argument(
        "--base", required=True, metavar="REF", help="the ref the change starts from (e.g. origin/main)"
    )
    bases = p.add_mutually_exclusive_group()
    bases.add_argument(
        "--exact-base",
        action="store_true",
        help="compare with the commit --base names, not with the merge base of --base and --head "
        "(which shows only the head's own change when --base moved since the head branched)",
    )
    bases.add_argument(
        "--merge",
        action="store_true",
        help="review what merging will make: compare --base's tip with the merge result of --head "
        "into it (git merge-tree), so changes merged to the base since the head branched are judged "
        "together with the head's; a head that conflicts with the base has no merge result (exit 2)",
    )
    heads = p.add_mutually_exclusive_group()
    heads.add_argument("--head", metavar="REF", help="the ref with the change (default: HEAD)")
    heads.add_argument(
        "--worktree",
        action="store_true",
        help="review the working tree as it is, uncommitted edits included (what `git add -A` would "
        "commit, on top of HEAD), instead of a commit; without it, uncommitted fleet or rule files "
        "are not reviewed and a warning names them",
    )
    p.add_argument(
        "--fleet",
        action="append",
        metavar="NAME",
        help="review this fleet (a directory name in inventory/; repeatable; "
        "default: every fleet the change touches)",
    )
    format_arg(p, "markdown", "json", default="markdown")
    p.add_argument(
        "--out", metavar="FILE", help="write the report to FILE (the summary line still goes to stderr)"
    )
    p.add_argument(
        "--full", metavar="FILE", help="also write the whole Markdown report, with no length limit, to FILE"
    )
    p.add_argument(
        "--max-chars",
        type=at_least(0),
        default=GITHUB_LIMIT,
        metavar="N",
        help="cut the Markdown report to N characters (default %(default)s, GitHub's comment limit; "
        "0: no limit)",
    )
    p.add_argument(
        "--repo-url",
        metavar="URL",
        help="make locations links to lines at their commit: https://github.com/OWNER/REPO",
    )
    p.add_argument(
        "--claim",
        metavar="FILE",
        help="the head's claim (what `swarm claim` wrote in head-plan.yml, with the head's own code): "
        "read as data and shown beside the review, never judged; when the change touches code, "
        "without it the comment says the code's effect is unknown",
    )
    p.set_defaults(func=cmd_review, host_tools=("review",))
    c = sub.add_parser(
        "claim",
        help="write what this checkout's code resolves every fleet to (the head's claim, for swarm review)",
        description="Resolve every fleet of the checked-out commit with this checkout's code and write "
        "their desired states and cluster objects, with the commit's tree id, as one JSON file: the "
        "head's claim that `swarm review --claim` shows beside the base's verdict. head-plan.yml runs it "
        "on a pull request's merge commit, with no secrets. Refuses uncommitted fleet or rule files "
        "(the claim must be of the commit).",
        epilog="Exit codes: 0 written (a fleet that does not resolve is recorded as such); 2 not a Git "
        "repository, uncommitted files, or an --out that cannot be written. "
        "Example: swarm claim --out claim.json",
    )
    c.add_argument("--out", required=True, metavar="FILE", help="where to write the claim (JSON)")
    c.set_defaults(func=cmd_claim, host_tools=("review",))
