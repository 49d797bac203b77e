"""A Ray worker 250 ms from its head, on the lab: it joins and stays, with the settings the
library derives from the RTT and with Ray's defaults, side by side in one run.

    sudo .venv/bin/python benchmarks/bench_ray_wan.py [--one-way-ms 125] [--window-s 60]

Needs root and no lab up. A copy of the lab fleet declares lab-b (lab-gpu-2's site) at
``--one-way-ms`` from the fleet's core, without jitter: the lab's WAN delay line
(lab/wanlink.py) then holds every packet between lab-a (the head's site, 0 ms) and lab-b
that long each way, so the head and lab-gpu-2 are 2 x ``--one-way-ms`` apart (measured: the
mesh ping's p50 is printed). The lab fleet is brought up and converged (pyinfra), then the
copy's ``swarm lab up`` (the delay line) and ``swarm converge --layer ray`` (the Ray units'
settings for the new RTT), then two arms:

  * derived: the Ray units as converged, with ``Environment=RAY_<name>`` from
    ``resolve.ray.wan_config`` (the declared RTT: ``resolve.ray.wan_rtt_ms``);
  * defaults: the same units with those variables unset (a systemd drop-in with
    ``UnsetEnvironment=``, on the head and the worker, both restarted): Ray's own defaults
    (``resolve.ray.RAY_DEFAULTS``, Ray 2.60 ``ray_config_def.h``).

Each arm: the seconds from the worker's restart until the head's state API lists it ALIVE,
then ``--window-s`` seconds of observation (the state API read every 2 s): how many reads
found it not ALIVE and whether its node id changed (a node marked dead rejoins under a new
id). Ray's health check marks a node dead after ``health_check_failure_threshold`` failed
checks ``health_check_period_ms`` apart (15 s with the defaults): the default window is
four such spans. The drop-ins are removed and the lab taken down at the end.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.labkit import edit, fleet_copy, on_node, swarm  # noqa: E402

from swarm_infra.fleet.sources import fleet_paths  # noqa: E402
from swarm_infra.metrics.ping import parse_ping  # noqa: E402
from swarm_infra.resolve import desired_state, load_fleet  # noqa: E402
from swarm_infra.resolve.ray import RAY_DEFAULTS, client_env_prefix  # noqa: E402

WORKER = "lab-gpu-2"
DROP_IN = "/etc/systemd/system/{unit}.d/zz-bench-ray-defaults.conf"


def members(head: str, prefix: str, venv: str, dashboard: str) -> dict[str, dict]:
    """node_ip -> the head's state API record of each node (ALIVE or not)."""
    out = on_node(
        head,
        f"{prefix} {venv}/bin/ray list nodes --detail --format json --limit 1000 --address {dashboard}",
        check=False,
    )
    if out.returncode != 0:
        return {}
    records: dict[str, dict] = {}
    for node in json.loads(out.stdout):  # the newest record of an address wins
        if node["state"] == "ALIVE" or node["node_ip"] not in records:
            records[node["node_ip"]] = node
    return records


def arm(name: str, ctx: dict, window_s: float) -> dict:
    head, ip = ctx["head"], ctx["worker_ip"]
    read = lambda: members(head, ctx["prefix"], ctx["venv"], ctx["dashboard"]).get(ip)  # noqa: E731
    for node, unit in ((head, ctx["head_unit"]), (WORKER, ctx["worker_unit"])):
        on_node(node, f"systemctl restart {unit}")
    started = time.monotonic()
    record = read()
    while not (record and record["state"] == "ALIVE") and time.monotonic() - started < 180:
        time.sleep(1)  # polling the head's state API
        record = read()
    joined_s = time.monotonic() - started
    if not (record and record["state"] == "ALIVE"):
        return {"arm": name, "joined_s": None, "reads": 0, "not_alive": 0, "id_changed": None}
    node_id, reads, not_alive, changed = record["node_id"], 0, 0, False
    end = time.monotonic() + window_s
    while time.monotonic() < end:
        time.sleep(2)  # one read of the state API every 2 s: the observation itself
        now = read()
        reads += 1
        not_alive += not (now and now["state"] == "ALIVE")
        changed |= bool(now and now["node_id"] != node_id)
    return {"arm": name, "joined_s": round(joined_s, 1), "reads": reads, "not_alive": not_alive,
            "id_changed": changed}  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--one-way-ms", type=int, default=125, help="lab-b's declared and emulated one-way latency"
    )
    p.add_argument("--window-s", type=float, default=60, help="seconds each arm is observed once joined")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        inventory = fleet_copy(Path(tmp))
        edit(
            inventory / "sites.yaml",
            "wan: {latency_ms: 20, jitter_ms: 2, loss_percent: 0}",
            f"wan: {{latency_ms: {args.one_way_ms}, jitter_ms: 0, loss_percent: 0}}",
        )
        paths = fleet_paths(inventory)
        state = desired_state(load_fleet(paths))
        nodes = state["nodes"]
        head = next(n for n, s in nodes.items() if s.get("ray") and s["ray"]["role"] == "head")
        ray = nodes[head]["ray"]
        ctx = {
            "head": head,
            "worker_ip": nodes[WORKER]["ray"]["node_ip"],
            "venv": nodes[head]["layout"]["files"]["ray_venv"]["path"],
            "prefix": client_env_prefix(nodes[head]["layout"]["files"]["ray_auth_token"]["path"]),
            "dashboard": f"http://{ray['dashboard']['host']}:{ray['dashboard']['port']}",
            "head_unit": nodes[head]["layout"]["units"]["ray_head"],
            "worker_unit": nodes[WORKER]["layout"]["units"]["ray_worker"],
        }
        derived = ray["config"]
        try:
            # The lab fleet converged at its own latency, then the copy's delay line and Ray
            # layer (the copy changes lab-b's latency only, so only the Ray units change).
            swarm("lab", "up", "--fleet", "lab")
            for extra in ((), ("-i", str(inventory), "--layer", "ray")):
                if extra:
                    swarm("lab", "up", *paths)
                converge = swarm("converge", "--engine", "pyinfra", *extra, check=False)
                if converge.returncode != 0:
                    print(converge.stdout[-3000:], converge.stderr[-2000:], file=sys.stderr)
                    return 1
            address = nodes[WORKER]["mesh"]["address"].split("/")[0]
            ping = on_node(head, f"ping -n -c 10 -i 0.5 -W 5 {address}").stdout
            rtt = next(m.value for m in parse_ping(ping) if m.field == "rtt.p50")
            results = [arm("derived", ctx, args.window_s)]
            unset = " ".join(f"RAY_{k}" for k in sorted(derived))
            for node, unit in ((head, ctx["head_unit"]), (WORKER, ctx["worker_unit"])):
                path = DROP_IN.format(unit=unit)
                text = f"[Service]\nUnsetEnvironment={unset}\n"
                on_node(
                    node,
                    f"mkdir -p {Path(path).parent} && printf '{text}' > {path} && systemctl daemon-reload",
                )
            results.append(arm("defaults", ctx, args.window_s))
        finally:
            swarm("lab", "down", check=False)
    print(f"head {head} <-> {WORKER}: declared RTT {2 * args.one_way_ms} ms, mesh ping p50 {rtt:.1f} ms")
    print(f"{'setting':38} {'derived':>9} {'default':>9}")
    for key in sorted(derived):
        print(f"{key:38} {derived[key]:>9} {RAY_DEFAULTS[key]:>9}")
    print(f"\n{'arm':9} {'joined (s)':>10} {'reads':>6} {'not ALIVE':>10} {'new node id':>12}")
    for r in results:
        print(
            f"{r['arm']:9} {r['joined_s']!s:>10} {r['reads']:>6} {r['not_alive']:>10} {r['id_changed']!s:>12}"
        )
    print(f"window: {args.window_s:g} s per arm, read every 2 s")
    return 0 if results[0]["joined_s"] is not None and results[0]["not_alive"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
