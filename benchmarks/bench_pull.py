"""Pull convergence on the lab at 3 and 16 nodes (issue #27), push side by side.

    sudo .venv/bin/python benchmarks/bench_pull.py [--sizes 3 16] [--runs 2] [--interval 60] [--delay 5]
        [--node-interval 15] [--skip-push]

Measured (docs/benchmarks.md, "Pull convergence"): ``--runs 2 --node-interval 15 --delay 3``.
``--node-interval S`` shortens every node's agent timer for the benchmark below what the
fleet may declare (the schema's minimum is 60 s): a systemd drop-in in /run sets
``OnUnitActiveSec=S``, ``RandomizedDelaySec`` to ``--delay`` and ``AccuracySec=1s`` (the
agent's timer sets none, and systemd's default of 1 min adds up to a minute to each
interval). Without it the declared interval applies as the fleet states it.

Needs root and no lab up; brings labs up and takes them down. For each size N:

1. ``swarm lab fleet --nodes N --no-ray``, ``swarm lab up --fleet lab-N``, and a first
   push converge (Ansible, timed: the nodes' starting state, their WireGuard keys made).
2. **Push, fleet-wide no-op**: ``swarm converge --fleet lab-N`` with each engine,
   ``--runs`` times each (a warm-up run first where the engine's first run changed
   something after the other engine's converge); the controller's cost is its CPU
   seconds (user + sys of every process it waited for: ``getrusage(RUSAGE_CHILDREN)``
   deltas around the command) and the wall time. The lab's NAT is a real one: push reaches
   the NAT'd nodes (joined by pull at ``lab up``) at their mesh addresses, over the
   controller's interface.
3. **Pull**: the lab's Git server (lab/gitserver.py, https on the service address), the
   fleet repository (tests/pullkit.py ``make_fleet``: this checkout's code and fleet
   ``lab-N``, every node ``convergence: pull`` with its key recorded, the controller a mesh
   member, ``spec.pull`` every ``--interval`` s plus up to ``--delay`` s: 60 s is the
   schema's minimum, ``interval_s``), its first commit signed and published; every node
   bootstrapped at its console (``provide``: git, the lab CA, the agent's package,
   ``swarm node bootstrap``); Debian's node_exporter on every node serving the
   agent's textfile at ``http://<mesh address>:9100/metrics`` (peers read the canary's
   report there for rollout gating; ``swarm status`` reads every node's). The first apply
   (the initial converge, printed, not the merge figure): the canary (the Rollout's first
   batch) runs its agent, then every other node starts its own at once.
4. **Merge-to-converged**, ``--runs`` times: a signed commit that changes a real setting
   of every node (``net.ipv4.tcp_keepalive_time`` in HostProfile ``base``, which every
   node includes: a per-network-namespace sysctl each lab node sets live), published; the
   time until every node's status file (read from the host through the node's
   ``/proc/<init>/root``, polled every second: no process is started on the node) says it
   applied that commit successfully. The agents' own timers do the work; nothing is
   started by hand. The machine's CPU use (/proc/stat) over the window is printed: every
   node's ``ansible-playbook -c local`` runs on the same two cores as the controller.
5. **Pull, fleet-wide no-op**: the controller runs nothing per node. What it does instead:
   serves Git (the Git server's process and every ``git http-backend``/``upload-pack`` it
   waited for: utime + stime + cutime + cstime of /proc/<pid>/stat, over a window in which
   every node finished a run that started in it; per fetch = that CPU / the fetches the
   server logged, ``GET .../info/refs?service=git-upload-pack``; per round = per fetch x N)
   and reads status (``swarm status`` over the mesh, ``--runs`` times: CPU and wall).
6. the Git server stopped, ``swarm lab down`` (the controller's interface with it).

Targets (issue #27): the pull no-op's controller cost flat from 3 to 16 nodes (<= 1.2x);
merge-to-converged at 16 nodes within 2x of 3 nodes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from tests.labkit import FILES, UNITS  # noqa: E402
from tests.pullkit import STATUS, console, make_fleet, mesh_address, provide, run_agent, serve_report  # noqa: E402

from swarm_infra.engines.controller import own_public_key  # noqa: E402
from swarm_infra.lab import manager, node  # noqa: E402
from swarm_infra.lab.state import LabState, state_dir  # noqa: E402
from swarm_infra.resolve import desired_state, load_fleet  # noqa: E402
from swarm_infra.resolve.layout import AGENT_LOCAL  # noqa: E402
from swarm_infra.resolve.rollout import rollout_batches  # noqa: E402

SYSCTL = "net.ipv4.tcp_keepalive_time"
ANCHOR = "    vm.max_map_count: 262144\n"  # HostProfile base's first sysctl (policies/shared)
FETCH = re.compile(rb'"GET /fleet\.git/info/refs\?service=git-upload-pack')


def cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine so far (/proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def swarm(*args: str, cwd: Path = ROOT, check: bool = True) -> tuple[float, float, str]:
    """``swarm ARGS`` in ``cwd`` with this checkout's library: (wall s, CPU s of it and
    every process it waited for, stdout). Exits on failure when ``check``."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "swarm_infra.cli", *args], cwd=cwd, env=env, text=True,
                          capture_output=True)  # fmt: skip
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if check and proc.returncode != 0:
        sys.exit(
            f"swarm {' '.join(args)} exited {proc.returncode}:\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}"
        )
    return wall, cpu, proc.stdout


def changed(output: str) -> int:
    """Changed results in ``swarm converge``'s closing table."""
    return sum(int(m) for m in re.findall(r"^\S+\s+(?:ok|changed)\s+\d+\s+(\d+)", output, re.M))


def push_noop(fleet: str, runs: int) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for engine in ("ansible", "pyinfra"):
        argv = ("converge", "--engine", engine, "--fleet", fleet)
        wall, cpu, text = swarm(*argv)
        warm = []
        if changed(text):  # the other engine's converge left something this one redoes
            warm.append(changed(text))
            wall, cpu, text = swarm(*argv)
        rows = []
        for i in range(runs):
            if i:
                wall, cpu, text = swarm(*argv)
            if changed(text):
                sys.exit(
                    f"{engine} on {fleet}: a no-op run changed {changed(text)} thing(s):\n{text[-3000:]}"
                )
            rows.append((wall, cpu))
        out[engine] = {"wall": [r[0] for r in rows], "cpu": [r[1] for r in rows], "warm_up_changed": warm}
        print(f"{fleet:<7} push no-op {engine:<8} wall {statistics.median(out[engine]['wall']):6.1f} s  "
              f"controller CPU {statistics.median(out[engine]['cpu']):6.1f} s"
              + (f"  (warm-up run changed {warm[0]})" if warm else ""), flush=True)  # fmt: skip
    return out


def status_of(init: int) -> dict | None:
    """The node's agent status file, read from the host through its init's root."""
    try:
        return json.loads((Path(f"/proc/{init}/root") / STATUS.lstrip("/")).read_text())
    except (OSError, ValueError):
        return None


def wait_applied(inits: dict[str, int], commit: str, since: float, timeout_s: float) -> dict[str, dict]:
    """Poll every node's status file each second until every one says it applied ``commit``
    successfully. Per node: ``seen_s`` (seconds from ``since``, time.time(), to the poll
    that saw it), ``started_s`` (from ``since`` to the start of the run that applied it, by
    the node's clock: the lab's nodes share the host's) and ``duration_s`` (that run's).
    Exits past ``timeout_s``, naming the nodes not there and what they last said."""
    done: dict[str, dict] = {}
    while len(done) < len(inits):
        for name, init in inits.items():
            if name in done:
                continue
            s = status_of(init)
            if s and s.get("result") == "applied" and s.get("applied_commit") == commit:
                done[name] = {
                    "seen_s": time.time() - since,
                    "started_s": s["finished_at"] - s["duration_s"] - since,
                    "duration_s": s["duration_s"],
                }
        if time.time() - since > timeout_s:
            late = {n: (status_of(i) or {}).get("reason") for n, i in inits.items() if n not in done}
            sys.exit(f"not applied {commit[:12]} within {timeout_s:.0f} s: {late}")
        if len(done) < len(inits):
            time.sleep(1)  # a poll interval: the reports are the state polled
    return done


def initial_converge(pids: dict[str, int], inits: dict[str, int], names: list[str], commit: str,
                     timeout_s: float) -> None:  # fmt: skip
    """Start the agent of every node of ``names`` at once and again whenever one ended
    without applying ``commit`` (its timer is still bootstrap's: a run that waited for the
    canary's report would not come again for 15 minutes) until every one applied it."""
    t0, left = time.monotonic(), set(names)
    while left:
        for who in sorted(left):
            s = status_of(inits[who])
            if s and s.get("result") == "applied" and s.get("applied_commit") == commit:
                left.discard(who)
                continue
            active = node.console(pids[who], ["systemctl", "is-active", UNITS["agent_service"]])
            if active.stdout.decode().strip() not in ("active", "activating"):
                node.console(pids[who], ["systemctl", "start", "--no-block", UNITS["agent_service"]])
        if time.monotonic() - t0 > timeout_s:
            sys.exit(f"initial converge not done within {timeout_s:.0f} s: {sorted(left)}")
        if left:
            time.sleep(2)  # a poll interval


def git_cpu_s(pid: int) -> float:
    """The Git server's CPU seconds so far: its own (utime, stime) and every child's it
    waited for (cutime, cstime: each git http-backend and, through it, upload-pack)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def pull_noop_round(inits: dict[str, int], git_pid: int, log: Path, timeout_s: float) -> dict:
    """One no-op round of the agents' own timers: from now until every node finished a run
    that started after now. The Git server's CPU and logged fetches over the window."""
    start, cpu0, log0 = time.time(), git_cpu_s(git_pid), log.stat().st_size
    t0 = time.monotonic()
    runs: dict[str, set[float]] = {n: set() for n in inits}
    while not all(runs.values()):
        for name, init in inits.items():
            s = status_of(init)
            if s and s["finished_at"] - s["duration_s"] >= start:
                runs[name].add(s["finished_at"])
        if time.monotonic() - t0 > timeout_s:
            sys.exit(
                f"no-op round not done within {timeout_s:.0f} s: {[n for n, r in runs.items() if not r]}"
            )
        time.sleep(1)
    cpu = git_cpu_s(git_pid) - cpu0
    with open(log, "rb") as fh:
        fh.seek(log0)
        fetches = len(FETCH.findall(fh.read()))
    return {"window_s": time.monotonic() - t0, "git_cpu_s": cpu, "fetches": fetches}


def set_sysctl(fleet, value: int) -> None:
    path = fleet.work / "policies" / "shared" / "host-profiles.yaml"
    text = path.read_text()
    line = f"    {SYSCTL}: {value}\n"
    if SYSCTL in text:
        text = re.sub(rf"^    {re.escape(SYSCTL)}: \d+\n", line, text, flags=re.M)
    else:
        assert ANCHOR in text, f"{ANCHOR!r} not in {path}"
        text = text.replace(ANCHOR, ANCHOR + line, 1)
    path.write_text(text)


def pull(n: int, runs: int, interval: int, delay: int, tmp: Path, node_interval: int | None) -> dict:
    name = f"lab-{n}"
    state = LabState.load()
    nodes = {k: state.nodes[k] for k in sorted(state.nodes)}
    pids = {k: d["pid"] for k, d in nodes.items()}
    inits = {k: node.leader(p) for k, p in pids.items()}
    assert all(inits.values()), inits
    out: dict = {}
    # The lab's controller (`swarm lab up` made its key and joined the NAT'd nodes by pull).
    controller_key = own_public_key()
    assert controller_key, "swarm lab up makes the controller's key"
    url = manager.serve_git()
    git_pid = LabState.load().host["git"]["pid"]
    fleet = None
    try:

        def pubkey(who: str) -> str:
            return console(pids[who], f"wg pubkey < {FILES['wireguard_key']}").strip()

        fleet = make_fleet(tmp, url + "fleet.git", controller_key, name, (), interval, delay, pubkey)
        docs_path = fleet.inventory / "nodes.yaml"
        docs = list(yaml.safe_load_all(docs_path.read_text()))
        for doc in docs:
            doc["spec"]["convergence"] = "pull"
        docs_path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
        paths = [str(fleet.inventory), str(fleet.policies), str(fleet.work / "policies" / "shared")]
        swarm("validate", *paths)
        first = fleet.commit(f"{name}: every node converges by pull", fleet.operator)
        desired = desired_state(load_fleet(paths))
        pull_nodes = sorted(k for k, s in desired["nodes"].items() if s["pull"])
        assert pull_nodes == list(nodes), (pull_nodes, list(nodes))
        canary = rollout_batches(pull_nodes, desired["rollout"])[0]

        t0 = time.monotonic()

        def bootstrap(who: str) -> None:
            d = nodes[who]
            if manager.joined(who):
                # Joined at `lab up` (lab/join.py), its agent's last good commit is in the lab's
                # own fleet repository; this benchmark's is another history, which the agent
                # refuses (a commit that does not descend from its last good one). Provisioned
                # anew for the benchmark: its agent's state goes first.
                console(pids[who], f"rm -rf {AGENT_LOCAL['agent_state_dir']['path']}")
            provide(pids[who], fleet, who, d["site"], d["address"].split("/")[0], bool(d["nat"]))
            node.console(pids[who], ["systemctl", "stop", UNITS["agent_timer"]])
            if node_interval:  # the provider's override, below the schema's minimum
                timer = UNITS["agent_timer"]
                drop_in = f"/run/systemd/system/{timer}.d"
                text = (
                    f"[Timer]\nOnUnitActiveSec=\nOnUnitActiveSec={node_interval}\n"
                    f"RandomizedDelaySec={delay}\nAccuracySec=1s\n"
                )
                console(pids[who], f"mkdir -p {drop_in} && cat > {drop_in}/bench.conf", text.encode())
                console(pids[who], "systemctl daemon-reload")
            serve_report(pids[who], mesh_address(fleet.inventory, who))

        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(bootstrap, nodes))
        out["bootstrap_s"] = time.monotonic() - t0
        print(f"{name:<7} pull: {n} node(s) bootstrapped at their consoles in {out['bootstrap_s']:.1f} s",
              flush=True)  # fmt: skip

        # The initial converge: the canary's agent, then every other node's at once.
        t0 = time.monotonic()
        for who in canary:
            rc, status, _ = run_agent(pids[who])
            assert (rc, status["result"], status["applied_commit"]) == (0, "applied", first), status
        initial_converge(pids, inits, [w for w in nodes if w not in canary], first, 3600)
        out["initial_s"] = time.monotonic() - t0
        print(f"{name:<7} pull: initial converge (first apply, canary then the rest) "
              f"{out['initial_s']:.1f} s", flush=True)  # fmt: skip
        for who in nodes:  # every timer the fleet's now (each apply enabled and started it)
            timer = console(pids[who], f"cat {FILES['agent_timer']}")
            assert f"OnUnitActiveSec={interval}" in timer, (who, timer)

        # The controller joins the mesh, for swarm status (the NAT'd nodes open their side).
        swarm("mesh", "controller-up", "-i", str(fleet.inventory))
        ctl = str(load_fleet(paths).controller_address)
        for who, d in nodes.items():
            if d["nat"]:
                console(pids[who], f"ping -n -c 1 -w 20 {ctl} >/dev/null")

        merges, busy = [], []
        for i in range(runs):
            set_sysctl(fleet, 600 + i)
            b0 = cpu_ticks()
            t0 = time.time()
            commit = fleet.commit(f"{SYSCTL} {600 + i} on every node", fleet.operator)
            per_node = wait_applied(inits, commit, t0, 3600)
            b1 = cpu_ticks()
            merges.append(per_node)
            busy.append((b1[0] - b0[0]) / max(1, b1[1] - b0[1]))
            live = {console(pids[w], f"sysctl -n {SYSCTL}").strip() for w in nodes}
            assert live == {str(600 + i)}, live
            last = max(per_node, key=lambda w: per_node[w]["seen_s"])
            seen = [m["seen_s"] for m in per_node.values()]
            applies = [m["duration_s"] for m in per_node.values()]
            print(
                f"{name:<7} pull: merge-to-converged {per_node[last]['seen_s']:6.1f} s (median node "
                f"{statistics.median(seen):.1f} s, canary {per_node[canary[0]]['seen_s']:.1f} s); the last "
                f"node's applying run started {per_node[last]['started_s']:.1f} s after the merge and took "
                f"{per_node[last]['duration_s']:.1f} s; applying runs median "
                f"{statistics.median(applies):.1f} s, "
                f"max {max(applies):.1f} s; machine CPU busy {busy[-1]:.0%}",
                flush=True,
            )
        out["merge_s"] = [max(v["seen_s"] for v in m.values()) for m in merges]
        out["merge_apply_s"] = [statistics.median(v["duration_s"] for v in m.values()) for m in merges]
        out["merge_canary_s"] = [m[canary[0]]["seen_s"] for m in merges]
        out["merge_cpu_busy"] = busy

        # A no-op round of every node (their timers) and the Git server's CPU over it.
        r = pull_noop_round(inits, git_pid, state_dir() / "git.log", 3600)
        out["noop_round"] = r
        per_fetch = r["git_cpu_s"] / max(1, r["fetches"])
        print(f"{name:<7} pull no-op round: {r['window_s']:.1f} s, Git server CPU {r['git_cpu_s']:.2f} s "
              f"for {r['fetches']} fetch(es), {per_fetch * 1000:.0f} ms per fetch", flush=True)  # fmt: skip
        stat = []
        for _ in range(runs):
            # --commit: the host does not trust the lab CA (the nodes do), so it cannot
            # ls-remote the Git server; one request fewer than an operator's status.
            wall, cpu, text = swarm("status", *paths, "--commit", commit, check=False)
            if f"{n} of {n} pull node(s) converged" not in text:
                print(f"  (swarm status did not find every node converged)\n{text[-3000:]}", flush=True)
            stat.append((wall, cpu))
        out["status_wall"] = [s[0] for s in stat]
        out["status_cpu"] = [s[1] for s in stat]
        print(f"{name:<7} swarm status over the mesh: wall {statistics.median(out['status_wall']):.2f} s, "
              f"CPU {statistics.median(out['status_cpu']):.2f} s", flush=True)  # fmt: skip
    finally:
        manager.stop_git()  # the controller's interface is the lab's: `lab down` removes it
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[3, 16], help="fleet sizes (default 3 16)")
    p.add_argument("--runs", type=int, default=2, help="runs of each measurement (default 2)")
    p.add_argument("--interval", type=int, default=60, help="spec.pull.interval_s (default 60, the minimum)")
    p.add_argument("--delay", type=int, default=5, help="spec.pull.randomized_delay_s (default 5)")
    p.add_argument("--skip-push", action="store_true", help="no push no-op measurements")
    p.add_argument(
        "--node-interval",
        type=int,
        help="a shorter timer on every node (a systemd drop-in in /run, OnUnitActiveSec): "
        "below the 60 s the fleet may declare",
    )
    a = p.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (the lab's nodes are systemd-nspawn containers)")
    # timeout(1)'s SIGTERM ends the run through its finally clauses: the controller's mesh
    # interface, the Git server and the lab are taken down.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    results: dict[int, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        # Key records and the controller's key in a state directory of this run's own.
        os.environ["SWARM_STATE_DIR"] = str(Path(tmp) / "state")
        try:
            for n in a.sizes:
                fleet = f"lab-{n}"
                swarm("lab", "down")
                swarm("lab", "fleet", "--nodes", str(n), "--no-ray")
                swarm("lab", "up", "--fleet", fleet)
                wall, cpu, _ = swarm("converge", "--fleet", fleet)
                print(f"{fleet:<7} push: first converge (Ansible) {wall:.1f} s, controller CPU {cpu:.1f} s",
                      flush=True)  # fmt: skip
                r = results[n] = {"push": {} if a.skip_push else push_noop(fleet, a.runs)}
                (Path(tmp) / fleet).mkdir()
                r["pull"] = pull(n, a.runs, a.interval, a.delay, Path(tmp) / fleet, a.node_interval)
                swarm("lab", "down")
        finally:
            subprocess.run([sys.executable, "-m", "swarm_infra.cli", "lab", "down"], cwd=ROOT, check=False,
                           env={**os.environ, "PYTHONPATH": str(ROOT / "src")})  # fmt: skip
    report(results, a)


def report(results: dict[int, dict], a: argparse.Namespace) -> None:
    def med(values: list[float] | None) -> float:
        return statistics.median(values) if values else math.nan

    timer = f"; the nodes' timers overridden to {a.node_interval} s" if a.node_interval else ""
    print(f"\nspec.pull: interval_s {a.interval}, randomized_delay_s {a.delay}{timer}; "
          f"medians of {a.runs} run(s)")  # fmt: skip
    print(f"{'nodes':>5}  {'push ansible':>17}  {'push pyinfra':>17}  {'pull: Git/round':>15}  "
          f"{'swarm status':>17}  {'merge->converged':>16}  {'initial':>7}")  # fmt: skip
    print(f"{'':>5}  {'CPU s / wall s':>17}  {'CPU s / wall s':>17}  {'CPU s':>15}  {'CPU s / wall s':>17}  "
          f"{'s (all nodes)':>16}  {'s':>7}")  # fmt: skip
    rows = {}
    for n, r in results.items():
        pa, pp, pl = r["push"].get("ansible", {}), r["push"].get("pyinfra", {}), r["pull"]
        rnd = pl["noop_round"]
        git_round = rnd["git_cpu_s"] / max(1, rnd["fetches"]) * n
        rows[n] = {
            "ansible": med(pa.get("cpu")), "pyinfra": med(pp.get("cpu")), "git": git_round,
            "status": med(pl["status_cpu"]), "pull": git_round + med(pl["status_cpu"]),
            "merge": med(pl["merge_s"]),
        }  # fmt: skip
        print(f"{n:>5}  {med(pa.get('cpu')):>7.1f} / {med(pa.get('wall')):>6.1f}  "
              f"{med(pp.get('cpu')):>7.1f} / {med(pp.get('wall')):>6.1f}  {git_round:>15.2f}  "
              f"{med(pl['status_cpu']):>7.2f} / {med(pl['status_wall']):>6.2f}  "
              f"{med(pl['merge_s']):>16.1f}  {pl['initial_s']:>7.1f}")  # fmt: skip
        runs = ", ".join(f"{m:.1f}" for m in pl["merge_s"])
        applies = ", ".join(f"{m:.1f}" for m in pl["merge_apply_s"])
        busy = ", ".join(f"{b:.0%}" for b in pl["merge_cpu_busy"])
        print(f"{'':>5}  merge runs {runs} s (applying runs' median {applies} s; machine CPU busy {busy}); "
              f"no-op round {rnd['window_s']:.0f} s, {rnd['fetches']} fetches, Git CPU "
              f"{rnd['git_cpu_s']:.2f} s")  # fmt: skip
    if len(results) > 1:
        lo, hi = min(results), max(results)
        print()
        for key, what in (
            ("ansible", "push ansible, controller CPU"),
            ("pyinfra", "push pyinfra, controller CPU"),
            ("git", "pull, Git serving CPU per round"),
            ("status", "pull, swarm status CPU"),
            ("pull", "pull, Git + status CPU"),
            ("merge", "pull, merge-to-converged"),
        ):
            if not math.isnan(rows[hi][key] + rows[lo][key]):
                print(f"{lo} -> {hi} nodes, {what}: x{rows[hi][key] / max(1e-9, rows[lo][key]):.2f}")
        print("targets: pull no-op controller cost <= 1.2x; merge-to-converged <= 2x")


if __name__ == "__main__":
    main()
