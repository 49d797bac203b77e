"""``swarm``: the project's own CLI, for what Ansible, pyinfra, Pulumi and pytest do not do.

Exit codes: 0 success (warnings allowed), 2 invalid input (nothing was applied),
1 unexpected failure.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from . import converge, verify_report
from .diagnostics import FleetInvalid
from .inventory_sources import convention_paths
from .inventory_sources import fleet_paths as inventory_fleet_paths
from .lab import commands as lab_commands
from .resolve import desired_state
from .validate import load_fleet, validate

EXIT_OK, EXIT_FAILURE, EXIT_INVALID = 0, 1, 2

FLEET_HELP = (
    "PATHS are YAML files or directories (searched recursively). Without PATHS, --fleet NAME "
    "reads inventory/NAME, policies/NAME and policies/shared under the current directory."
)


def fleet_paths(args: argparse.Namespace) -> list[str]:
    """The paths to read: PATHS if given, else the --fleet convention (existing dirs only)."""
    if args.paths:
        return args.paths
    candidates = convention_paths(Path(), args.fleet)
    found = [str(p) for p in candidates if p.is_dir()]
    return found or [str(candidates[0])]


def cmd_validate(args: argparse.Namespace) -> int:
    result = validate(fleet_paths(args))
    report = result.report
    print(report.json() if args.format == "json" else report.text())
    return EXIT_OK if report.ok else EXIT_INVALID


def _fmt_settings(settings: dict[str, Any]) -> str:
    parts = []
    for key, value in settings.items():
        if isinstance(value, dict):
            value = ",".join(f"{k}={v}" for k, v in value.items())
        parts.append(f"{key}={value}")
    return " ".join(parts) or "(none: left as the driver has them)"


def simulated_nodes(state: dict[str, Any]) -> list[str]:
    """Names of the nodes whose GPUs use the simulated NVML backend (said in every output)."""
    return [n for n, s in state["nodes"].items() if s["gpu"] and s["gpu"]["backend"] == "simulated"]


def render_node(state: dict[str, Any]) -> str:
    """A NodeState as readable text (what `swarm plan` prints per node)."""
    ssh = state["ssh"]
    lines = [
        f"node {state['name']}  site={state['site']} roles={','.join(state['roles'])}",
        f"  ssh      {ssh['user']}@{ssh['host']}:{ssh['port']}",
    ]
    g = state["gpu"]
    if g:
        simulated = "  [SIMULATED NVML]" if g["backend"] == "simulated" else ""
        models = ", ".join(f"{s['count']} x {s['model']}" for s in state["hardware"]["gpus"])
        lines.append(f"  gpus     {models}  profile={g['profile']} via {g['assignment']}{simulated}")
        if g["driver"]:
            d = g["driver"]
            lines.append(
                f"  driver   branch {d['branch']} version {d['version'] or 'latest'}"
                f"  reboot {'allowed' if d['allow_reboot'] else 'not allowed'}"
            )
        seen: set[str] = set()
        for dev in g["devices"]:
            text = _fmt_settings(dev["settings"])
            if text not in seen:
                seen.add(text)
                indices = [str(d["index"]) for d in g["devices"] if d["settings"] == dev["settings"]]
                lines.append(f"    gpu {','.join(indices)}: {text}")
    h = state["host"]
    if h:
        extras = [
            f"hugepages={h['hugepages']['count']}x{h['hugepages']['size_kib']}KiB"
            if h["hugepages"]
            else None,
            f"thp={h['transparent_hugepages']}" if h["transparent_hugepages"] else None,
            f"governor={h['cpu_governor']}" if h["cpu_governor"] else None,
        ]
        lines.append(
            f"  host     profile={h['profile']} via {h['assignment']} " + " ".join(e for e in extras if e)
        )
        for key, value in h["sysctls"].items():
            shown = "\t".join(map(str, value)) if isinstance(value, list) else value
            lines.append(f"    sysctl {key} = {shown}")
    m = state["mesh"]
    if m:
        lines.append(
            f"  mesh     {m['interface']} {m['address']} port={m['listen_port']} mtu={m['mtu']}"
            + ("  forwarding" if m["forwarding"] else "")
        )
        for p in m["peers"]:
            ips = p["allowed_ips"]
            shown = ", ".join(ips) if len(ips) <= 4 else f"{', '.join(ips[:3])} (+{len(ips) - 3} more)"
            keep = f" keepalive={p['persistent_keepalive_s']}s" if p["persistent_keepalive_s"] else ""
            lines.append(
                f"    peer {p['name']}  endpoint={p['endpoint'] or '(dynamic)'}{keep}  allowed_ips={shown}"
            )
    s = state["storage"]
    if s:
        sc = s["scratch"]
        lines.append(
            f"  scratch  {sc['mount_path']} {sc['filesystem']} on {', '.join(sc['devices'])}"
            f" ({sc['size_gib']} GiB{', raid0' if sc['raid0'] else ''})"
        )
    return "\n".join(lines)


def render_cluster(cluster: dict[str, Any]) -> str:
    """ClusterState as readable text: capacity per flavor, queues, tenants, priorities, storage."""
    lines = ["cluster", "  flavor                    GPUs  nominal  unallocated"]
    for name, cap in cluster["capacity"].items():
        lines.append(f"  {name:<24} {cap['gpus']:>5}  {cap['nominal_quota']:>7}  {cap['unallocated']:>11}")
    for q in cluster["cluster_queues"]:
        quotas = ", ".join(
            f"{x['flavor']}={x['nominal_quota']}"
            + (f" borrow<={x['borrowing_limit']}" if x["borrowing_limit"] is not None else "")
            + (f" lend<={x['lending_limit']}" if x["lending_limit"] is not None else "")
            for x in q["quotas"]
        )
        lines.append(
            f"  queue {q['name']} cohort={q['cohort'] or '-'} weight={q['fair_sharing_weight']}: {quotas}"
        )
    for t in cluster["tenants"]:
        lines.append(
            f"  tenant {t['name']} ns={t['namespace']} -> {t['cluster_queue']} "
            f"priorities={','.join(t['priorities'])}"
        )
    for p in cluster["priorities"]:
        lines.append(
            f"  priority {p['name']} value={p['value']} {p['preemption_policy']}"
            + (" (default)" if p["global_default"] else "")
        )
    if cluster["storage"]:
        for c in cluster["storage"]["classes"]:
            lines.append(
                f"  storageclass {c['name']} {c['provisioner']}" + (" (default)" if c["default"] else "")
            )
        for v in cluster["storage"]["volumes"]:
            lines.append(
                f"  volume {v['namespace']}/{v['name']} {v['size_gib']} GiB {v['class']} ({v['purpose']})"
            )
    return "\n".join(lines)


def cmd_plan(args: argparse.Namespace) -> int:
    try:
        analysis = load_fleet(fleet_paths(args))
    except FleetInvalid as exc:
        print(exc.report.text(), file=sys.stderr)
        return EXIT_INVALID
    state = desired_state(analysis)
    if args.node:
        unknown = [n for n in args.node if n not in state["nodes"]]
        if unknown:
            print(
                f"swarm plan: no node named {', '.join(unknown)} "
                f"(nodes: {', '.join(list(state['nodes'])[:20])}...)",
                file=sys.stderr,
            )
            return EXIT_INVALID
        state = {"nodes": {n: state["nodes"][n] for n in args.node}}
    if args.format == "json":
        json.dump(state, sys.stdout, indent=2, sort_keys=True)
        print()
        return EXIT_OK
    blocks = [render_node(s) for s in state["nodes"].values()]
    if "cluster" in state:
        blocks.append(render_cluster(state["cluster"]))
    simulated = simulated_nodes(state)
    if simulated:
        n = len(simulated)
        blocks.append(f"note: {n} node(s) use the SIMULATED NVML backend (no real GPU is touched)")
    print("\n\n".join(blocks))
    return EXIT_OK


def cmd_converge(args: argparse.Namespace) -> int:
    found = _fleet_inventory(args, "converge")
    if isinstance(found, int):
        return found
    inventory, state = found
    root = Path.cwd()
    simulated = simulated_nodes(state)
    mode = " ".join(m for m, on in (("check", args.check), ("diff", args.diff)) if on)
    print(
        f"converge: playbooks/{args.layer}.yml on {inventory} ({len(state['nodes'])} nodes"
        + (f", limit {args.limit}" if args.limit else "")
        + (f", {mode}" if mode else "")
        + f", engine {args.engine})"
    )
    if simulated:
        print(f"note: {len(simulated)} node(s) use the SIMULATED NVML backend (no real GPU is touched)")
    progress = converge.Progress(sys.stdout, verbose=args.verbose, show_diff=args.diff)
    rc, tail = converge.run_playbook(
        root, args.layer, inventory, check=args.check, diff=args.diff, limit=args.limit, progress=progress
    )
    print(progress.summary(simulated))
    if args.check:
        print("check mode: nothing was changed; 'changed' counts what a real run would change")
    bad = sorted(h for h, t in progress.hosts.items() if t.failed or t.unreachable)
    if rc == 0:
        return EXIT_OK
    if not progress.hosts:
        print(tail.strip(), file=sys.stderr)
    print(
        f"swarm converge: ansible-playbook exited {rc}"
        + (f"; failed or unreachable: {', '.join(bad)}" if bad else ""),
        file=sys.stderr,
    )
    return EXIT_FAILURE


def _fleet_inventory(args: argparse.Namespace, command: str) -> tuple[Path, dict[str, Any]] | int:
    """(inventory path, desired state) for converge/verify, or an exit code after saying why."""
    root = Path.cwd()
    if not (root / "ansible.cfg").is_file() or not (root / "playbooks").is_dir():
        print(f"swarm {command}: run it from the repository root (ansible.cfg, playbooks/)", file=sys.stderr)
        return EXIT_INVALID
    inventory = Path(args.inventory or f"inventory/{args.fleet}")
    paths = inventory_fleet_paths(inventory) if inventory.exists() else []
    if not paths:
        print(
            f"swarm {command}: {inventory} is not a fleet inventory (inventory/NAME, or a *.swarm.yml)",
            file=sys.stderr,
        )
        return EXIT_INVALID
    try:
        return inventory, desired_state(load_fleet(paths))
    except FleetInvalid as exc:
        print(exc.report.text(), file=sys.stderr)
        print(f"swarm {command}: the fleet is invalid; nothing was run", file=sys.stderr)
        return EXIT_INVALID


def cmd_verify(args: argparse.Namespace) -> int:
    found = _fleet_inventory(args, "verify")
    if isinstance(found, int):
        return found
    inventory, state = found
    nodes = [n for n in (args.limit or "").split(",") if n]
    unknown = [n for n in nodes if n not in state["nodes"]]
    if unknown:
        print(f"swarm verify: no node named {', '.join(unknown)}", file=sys.stderr)
        return EXIT_INVALID
    simulated = simulated_nodes(state)
    print(f"verify: {len(nodes) or len(state['nodes'])} node(s) of {inventory} against the declared state")
    if simulated:
        print(f"note: GPU checks on {', '.join(simulated)} read the SIMULATED NVML backend")
    collector = verify_report.run(Path.cwd(), inventory, nodes, Path(args.junit_xml))
    if not collector.results:
        print("swarm verify: no check ran (see the JUnit file for collection errors)", file=sys.stderr)
        return EXIT_FAILURE
    print(verify_report.report(collector))
    print(f"JUnit XML: {args.junit_xml}")
    bad = [r for r in collector.results if r.outcome in ("drift", "error")]
    return EXIT_FAILURE if bad else EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="swarm",
        description="Swarm infrastructure pipeline: validate the declared fleet and show the "
        "desired state it resolves to, run the local lab, converge nodes (Ansible) and "
        "verify them (testinfra).",
        epilog="Exit codes: 0 ok, 2 invalid input (nothing applied), 1 unexpected failure.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def fleet_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("paths", nargs="*", metavar="PATHS", help="fleet YAML files or directories")
        p.add_argument(
            "--fleet", default="lab", help="fleet name used when no PATHS are given (default: lab)"
        )
        p.add_argument(
            "--format", choices=("text", "json"), default="text", help="output format (default: text)"
        )

    p = sub.add_parser(
        "validate",
        help="check declarations against the schemas and the semantic rules",
        description="Check every document against its JSON Schema and the semantic rules "
        "(references, mesh addressing and topology, quotas vs capacity, GPU limits "
        "from the catalog, sysctls). Reports all problems at once as "
        "file:line:col: severity[rule]: $.json.path: message. " + FLEET_HELP,
        epilog="Example: swarm validate inventory/example policies/example policies/shared",
    )
    fleet_args(p)
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser(
        "plan",
        help="print the resolved desired state (per node and for the cluster)",
        description="Validate, then print what every node and the cluster should look like: "
        "GPU settings per GPU, sysctls, mesh address and peers with AllowedIPs, "
        "queues and quotas. JSON output is stable (sorted) for diffing. " + FLEET_HELP,
        epilog="Example: swarm plan --fleet example --node fra1-gpu-01 --format json",
    )
    fleet_args(p)
    p.add_argument("--node", action="append", metavar="NODE", help="only this node (repeatable)")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser(
        "converge",
        help="bring nodes to their declared state (ansible-playbook through ansible-runner)",
        description="Validate the fleet, then run playbooks/LAYER.yml against the swarm "
        "inventory, in the rolling batches of the fleet's Rollout policy. Prints each "
        "changed, failed or unreachable task result as it happens (a live status line on "
        "a terminal) and a per-host summary. Run from the repository root.",
        epilog="Examples: swarm converge --check --diff | swarm converge --layer mesh --limit "
        "site_lab_a | swarm converge --fleet example -i inventory/example. Exit codes: 0 "
        "every host ok, 1 a host failed or was unreachable (the others were converged), "
        "2 invalid fleet or arguments (nothing run).",
    )
    p.add_argument("--fleet", default="lab", help="fleet name: inventory/NAME (default: lab)")
    p.add_argument("-i", "--inventory", metavar="PATH", help="inventory source (default inventory/FLEET)")
    p.add_argument("--layer", choices=converge.LAYERS, default="site", help="playbook (default: site)")
    p.add_argument("--check", action="store_true", help="report what would change, change nothing")
    p.add_argument("--diff", action="store_true", help="show file and setting differences")
    p.add_argument("--limit", metavar="PATTERN", help="Ansible host pattern: hosts or groups (site_X, gpu)")
    p.add_argument("--engine", choices=("ansible",), default="ansible", help="converge engine")
    p.add_argument("-v", "--verbose", action="store_true", help="print every task result")
    p.set_defaults(func=cmd_converge)

    p = sub.add_parser(
        "verify",
        help="check every node against its declared state (testinfra); report drift",
        description="Run tests/verify (testinfra, one test per declared item, values from the "
        "resolved NodeState) against the fleet's nodes. Prints each drifted item as it is "
        "found, then a per-node table (pass/fail per layer: host, drivers, gpu, mesh) and the "
        "drift report: node, layer, key, desired, actual. Checks that depend on a drifted one "
        "(pings through a stopped tunnel) are counted as blocked, not as drift. Writes JUnit "
        "XML. Run from the repository root. Plain pytest works too: pytest tests/verify "
        "--ansible-inventory=inventory/lab.",
        epilog="Exit codes: 0 no drift, 1 drift or a check that could not be read, 2 invalid "
        "fleet or arguments.",
    )
    p.add_argument("--fleet", default="lab", help="fleet name: inventory/NAME (default: lab)")
    p.add_argument("-i", "--inventory", metavar="PATH", help="inventory source (default inventory/FLEET)")
    p.add_argument("--limit", metavar="NODES", help="comma-separated node names (default: every node)")
    p.add_argument(
        "--junit-xml", default="verify-junit.xml", metavar="PATH", help="JUnit XML (default: %(default)s)"
    )
    p.set_defaults(func=cmd_verify)

    lab_commands.add_parser(sub, fleet_args, fleet_paths)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "lab":
            return lab_commands.run_lab(args.func, args)
        return args.func(args)
    except BrokenPipeError:  # `swarm plan | head`
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
