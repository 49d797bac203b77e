"""``swarm validate`` and ``swarm plan``: the declared fleet checked, and what it resolves to."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..resolve import desired_state
from ..resolve.keys import ssh_host_key_fingerprint
from ..resolve.types import ClusterState, GpuSettings, NodeState
from ..tables import table_lines
from .common import (
    EXIT_INVALID,
    EXIT_OK,
    FLEET_HELP,
    LIMIT_HELP,
    emit,
    fleet_args,
    limit_arg,
    limited,
    load,
    simulated_nodes,
    validation,
)


def cmd_validate(args: argparse.Namespace) -> int:
    report = validation(args).report  # the report is the output, also of an unknown --fleet
    emit(report.json() if args.format == "json" else report.text())
    return EXIT_OK if report.ok else EXIT_INVALID


def _fmt_settings(settings: GpuSettings) -> str:
    parts = []
    for key, value in settings.items():
        if isinstance(value, dict):
            value = ",".join(f"{k}={v}" for k, v in value.items())
        parts.append(f"{key}={value}")
    return " ".join(parts) or "(none: left as the driver has them)"


def render_node(state: NodeState) -> str:
    """A NodeState as readable text (what `swarm plan` prints per node)."""
    ssh = state["ssh"]
    keys = ", ".join(ssh_host_key_fingerprint(k) for k in ssh["host_keys"])
    lines = [
        f"node {state['name']}  site={state['site']} roles={','.join(state['roles'])}",
        f"  ssh      {ssh['user']}@{ssh['host']}:{ssh['port']}"
        + (" (over the mesh)" if ssh.get("via_mesh") else "")
        + "  "
        + (f"host keys {keys}" if keys else "host key: the operator's known_hosts"),
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
        for key, value in h["sysctl_text"].items():
            lines.append(f"    sysctl {key} = {value}")
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


def render_cluster(cluster: ClusterState) -> str:
    """ClusterState as readable text: capacity per flavor, queues, tenants, Ray clusters,
    priorities, storage."""
    capacity: list[list[object]] = [["flavor", "GPUs", "nominal", "unallocated"]]
    capacity += [
        [name, c["gpus"], c["nominal_quota"], c["unallocated"]] for name, c in cluster["capacity"].items()
    ]
    lines = ["cluster", *table_lines(capacity, right=(1, 2, 3), indent="  ")]
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
    for r in cluster["ray_clusters"]:
        head = r["head"]
        workers = "; ".join(
            f"{w['name']} x{w['min_replicas']}..{w['max_replicas']} "
            f"({w['gpus']} GPUs, {w['cpus']} CPUs, {w['memory_gib']} GiB)"
            for w in r["workers"]
        )
        lines.append(
            f"  ray {r['namespace']}/{r['name']} {r['ray_version']} priority={r['priority'] or '-'} "
            f"head {head['cpus']} CPUs {head['memory_gib']} GiB; {workers}"
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


class _OldNode(argparse.Action):
    """``plan --node NAME``, repeatable: the old spelling of ``--limit`` (one warning, then
    the names are appended)."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: Any = None
    ) -> None:
        if getattr(namespace, self.dest) is None:
            print(f"{parser.prog}: warning: {option} is now --limit (one pattern: NAME,NAME); {option} is "
                  "taken until the next release", file=sys.stderr)  # fmt: skip
        setattr(namespace, self.dest, [*(getattr(namespace, self.dest) or []), values])


def cmd_plan(args: argparse.Namespace) -> int:
    checked = validation(args)
    if not checked.report.ok or checked.analysis is None:
        load(args, "plan", None)  # exits 2 with the report, as every command does
    assert checked.analysis is not None
    # A plan is what a reviewer reads: the fleet's warnings (another provider's relay, say)
    # go with it, on stderr so that --format json stays one document.
    for warning in checked.report.warnings:
        print(warning.text(), file=sys.stderr)
    # Narrowed to the nodes asked for below.
    state: dict[str, Any] = dict(desired_state(checked.analysis))
    # --node NAME (repeatable) is the old spelling of --limit NAME,NAME.
    pattern = (
        args.limit if args.node is None else ",".join([*([args.limit] if args.limit else []), *args.node])
    )
    chosen = limited(pattern, state["nodes"], "plan")
    if chosen is not None:
        state = {"nodes": {n: state["nodes"][n] for n in chosen}}
    if args.format == "json":
        emit(json.dumps(state, indent=2, sort_keys=True))
        return EXIT_OK
    blocks = [render_node(s) for s in state["nodes"].values()]
    if "cluster" in state:
        blocks.append(render_cluster(state["cluster"]))
    simulated = simulated_nodes(state["nodes"])
    if simulated:
        n = len(simulated)
        blocks.append(f"note: {n} node(s) use the SIMULATED NVML backend (no real GPU is touched)")
    emit("\n\n".join(blocks))
    return EXIT_OK


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "validate",
        help="check declarations against the schemas and the semantic rules",
        description="Check every document against its JSON Schema and the semantic rules "
        "(references, mesh addressing and topology, quotas vs capacity, GPU limits "
        "from the catalog, sysctls). Reports all problems at once as "
        "file:line:col: severity[rule]: $.json.path: message. " + FLEET_HELP,
        epilog="Example: swarm validate inventory/example policies/example policies/shared",
    )
    fleet_args(p, "text", "json")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser(
        "plan",
        help="print the resolved desired state (per node and for the cluster)",
        description="Validate, then print what every node and the cluster should look like: "
        "GPU settings per GPU, sysctls, mesh address and peers with AllowedIPs, "
        "queues and quotas. JSON output is stable (sorted) for diffing. " + FLEET_HELP,
        epilog="Example: swarm plan --fleet example --limit fra1-gpu-01 --format json",
    )
    fleet_args(p, "text", "json")
    limit_arg(p, "only these nodes (the nodes' state, no cluster): " + LIMIT_HELP)
    p.add_argument("--node", action=_OldNode, help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_plan)
