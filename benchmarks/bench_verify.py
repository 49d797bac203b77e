"""``swarm verify`` at 3 and 16 nodes (and more), before and after the linear mesh checks.

    python benchmarks/bench_verify.py [--sizes 3 16 160] [--baseline REF]          # no lab
    sudo .venv/bin/python benchmarks/bench_verify.py --lab [--sizes 3 16] [--baseline REF] [--runs 2]

Without ``--lab`` (no nodes, no root): for each size, the lab fleet ``lab-N`` (``swarm lab
fleet --nodes N --no-ray``: the head and N-1 workers in two sites, lab-b behind NAT) is
written to a temporary directory and its checks are built (``checks_for``) in a fresh
child process by the library at git REF (``git archive REF src schemas``) and by this
tree's, side by side. Reported per side: the checks by kind, the commands they run on nodes
(each check reads its value with one command, except the reads ``verify/readers.py`` caches
per node: sysctls (the sysctl.d file and one script for the live values: 2), the GPU diff
(1), the interface's address and MTU (1), the WireGuard dump for ``peer`` checks (1); a
``handshake`` check reads the dump and the clock (2), a ``wg_peers`` check both at once (1);
every node's public key is read once, for its peers' checks)
and the controller's CPU time to build the checks. The wall time is then *estimated*, not
measured: the lab's measured ``swarm verify`` time of the baseline (docs/benchmarks.md: 6.5 s
at 3 nodes, 82.2 s at 16, bench_converge.py on the lab) divided by the baseline's node
commands at that size gives seconds per command, which times this tree's commands. The
estimate ignores that a ping of a NAT'd node may wait up to 20 s (ping -w 20) and that a
dump read has more lines at 16 nodes; the lab mode measures.

This tree's ``swarm verify`` reads nodes in parallel (verify/runner.py: waves, each node's
checks of a wave in order on one thread, at most ``--forks`` nodes at once). The estimate
then simulates the runner with every command taking the same time, under two bounds: a
command's time is *waiting* (SSH round trips; the nodes are separate machines), so only
the longest node's chain of commands per wave counts; or it is *CPU* on the lab's
``--cores`` (2): the lab's nodes are containers on the controller's own two cores, so no
wave runs faster than its commands / 2. The lab sits between the two; on two cores the
CPU bound cannot improve the 16 / 3 ratio (3 nodes already keep both cores busy).

``--lab`` (root, no lab up; the coordinator's mode: this session could not run the lab):
for each size, ``swarm lab fleet --nodes N --no-ray``, ``swarm lab up --fleet lab-N``,
``swarm converge --engine pyinfra --fleet lab-N``, then ``swarm verify --fleet lab-N``
timed ``--runs`` times with REF's checkout (a temporary ``git worktree`` of REF, the fleet
copied in) and with this tree's, alternately; then ``swarm lab down``. Target (issue #27):
verify at 16 nodes <= 3x its time at 3 nodes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The lab's measured verify times (s) of the all-pairs checks (docs/benchmarks.md, the
# bench_converge.py table): the estimate's calibration.
MEASURED_BEFORE_S = {3: 6.5, 8: 24.0, 16: 82.2}
# Node commands per check, where not one (see the module doc); kinds read once per node.
COMMANDS = {"handshake": 2}
PER_NODE = {"sysctl": ("sysctl", 2), "gpu": ("gpu", 1), "interface_address": ("addr", 1),
            "interface_mtu": ("addr", 1), "peer": ("dump", 1)}  # fmt: skip


def one(nodes: int) -> dict:
    """In a child: the checks of lab-``nodes`` with the library on sys.path."""
    import swarm_infra
    from swarm_infra.lab.fleet import write_lab_fleet
    from swarm_infra.resolve import desired_state, load_fleet
    from swarm_infra.verify.checks import checks_for

    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        for part in ("inventory/lab", "policies/lab", "policies/shared"):
            shutil.copytree(ROOT / part, base / part)
        dirs = write_lab_fleet(base, nodes, ray=False)
        state = desired_state(load_fleet([*dirs, base / "policies" / "shared"]))
    t0 = time.process_time()
    checks = checks_for(state)
    cpu = time.process_time() - t0
    try:  # the parallel runner's waves (this tree); a baseline without them runs serially
        from swarm_infra.verify.checks import check_waves
        from swarm_infra.verify.runner import where
    except ImportError:
        waves = None
    else:
        waves = group_commands(check_waves(state), where)
    kinds = Counter(c.kind for c in checks)
    commands = sum(COMMANDS.get(c.kind, 1) for c in checks if c.kind not in PER_NODE)
    cached = {(c.node, *PER_NODE[c.kind]) for c in checks if c.kind in PER_NODE}
    commands += sum(n for _, _, n in cached)
    commands += len({p["name"] for s in state["nodes"].values() if s["mesh"] for p in s["mesh"]["peers"]})
    return {
        "library": str(Path(swarm_infra.__file__).parent),
        "nodes": nodes,
        "checks": len(checks),
        "kinds": {k: kinds[k] for k in ("ping", "handshake", "peer", "wg_peers") if kinds[k]},
        "node_commands": commands,
        "checks_for_cpu_s": cpu,
        "waves": waves,
    }


def group_commands(waves: list, where) -> list[list[int]]:
    """Per wave, the node commands of each group the runner runs on one thread (the checks
    read on one node), in the runner's order; the counting rules of :func:`one`, and a
    ``wg_peers`` check reads its node's public key first (1)."""
    seen: set[tuple] = set()
    out = []
    for wave in waves:
        groups: dict[str, int] = {}
        for c in wave:
            on = where(c)
            if c.kind in PER_NODE:
                tag, n = PER_NODE[c.kind]
                cost = 0 if (on, tag) in seen else n
                seen.add((on, tag))
            else:
                cost = COMMANDS.get(c.kind, 1) + (c.kind == "wg_peers")
            groups[on] = groups.get(on, 0) + cost
        out.append(list(groups.values()))
    return out


def parallel_commands(waves: list[list[int]], forks: int, cores: int | None) -> float:
    """The run's length in node commands with ``forks`` threads: per wave, the groups taken
    in order by the first free thread (concurrent.futures' pool), the wave ending with its
    last group; with ``cores``, no wave shorter than its commands / ``cores`` (every
    command's time is CPU on the controller's cores: the lab's nodes are containers on the
    same cores)."""
    total = 0.0
    for groups in waves:
        free = [0] * min(forks, max(1, len(groups)))
        for g in groups:
            i = free.index(min(free))
            free[i] += g
        length = float(max(free, default=0))
        if cores:
            length = max(length, sum(groups) / cores)
        total += length
    return total


def child(nodes: int, library: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(library)}
    out = subprocess.run(
        [sys.executable, __file__, "--one", str(nodes)], capture_output=True, text=True, check=True, env=env
    ).stdout
    return json.loads(out.splitlines()[-1])


def model(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", args.baseline, "src", "schemas"],
            capture_output=True,
            check=True,
        ).stdout
        with tarfile.open(fileobj=BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        sides = {f"before ({args.baseline})": Path(tmp) / "src", "after (this tree)": ROOT / "src"}
        rows = {(n, name): child(n, lib) for n in args.sizes for name, lib in sides.items()}
    before_name, after_name = sides
    print("No lab: checks and node commands counted; wall time estimated (see the module doc).")
    print(f"{'nodes':>5} {'side':<24} {'checks':>6} {'node cmds':>9} {'build CPU':>9}  kinds")
    for (n, name), r in rows.items():
        kinds = ", ".join(f"{k} {v}" for k, v in r["kinds"].items())
        cpu = r["checks_for_cpu_s"]
        print(f"{n:>5} {name:<24} {r['checks']:>6} {r['node_commands']:>9} {cpu:>8.3f}s  {kinds}")
    print()
    estimates = {}
    for n in args.sizes:
        before, after = rows[(n, before_name)], rows[(n, after_name)]
        if n in MEASURED_BEFORE_S:
            per_command = MEASURED_BEFORE_S[n] / before["node_commands"]
            estimates[n] = after["node_commands"] * per_command
            print(f"{n:>3} nodes: before {MEASURED_BEFORE_S[n]:.1f} s measured "
                  f"({per_command * 1000:.0f} ms per node command); after ~{estimates[n]:.1f} s "
                  f"estimated ({after['node_commands']} commands)")  # fmt: skip
        print(f"{n:>3} nodes: pings {before['kinds'].get('ping', 0)} -> {after['kinds'].get('ping', 0)}, "
              f"node commands {before['node_commands']} -> {after['node_commands']}")  # fmt: skip
    if 3 in estimates and 16 in estimates:
        print(f"after, serial, 16 / 3 nodes: x{estimates[16] / estimates[3]:.2f} estimated (target <= 3x; "
              f"before x{MEASURED_BEFORE_S[16] / MEASURED_BEFORE_S[3]:.2f} measured)")  # fmt: skip
    # In parallel (--forks): two bounds, per command time from the baseline as above.
    print(f"\nafter, {args.forks} forks (the runner's waves; each node's checks in order):")
    ratios: dict[str, dict[int, float]] = {"latency": {}, "cpu": {}}
    for n in args.sizes:
        after = rows[(n, after_name)]
        if not after["waves"] or n not in MEASURED_BEFORE_S:
            continue
        per_command = MEASURED_BEFORE_S[n] / rows[(n, before_name)]["node_commands"]
        latency = parallel_commands(after["waves"], args.forks, None) * per_command
        cpu = parallel_commands(after["waves"], args.forks, args.cores) * per_command
        ratios["latency"][n], ratios["cpu"][n] = latency, cpu
        print(f"{n:>3} nodes: ~{latency:.1f} s if a command's time is waiting (a fleet of real "
              f"machines); ~{cpu:.1f} s if it is CPU on {args.cores} cores (the lab)")  # fmt: skip
    for bound, est in ratios.items():
        if 3 in est and 16 in est:
            print(f"after, parallel, 16 / 3 nodes, {bound}-bound: x{est[16] / est[3]:.2f} (target <= 3x)")


def swarm(args: list[str], cwd: Path = ROOT) -> float:
    """``swarm ARGS`` from checkout ``cwd`` (its src first): seconds; exits on failure but
    for verify, whose exit code says whether there was drift (reported, not fatal)."""
    env = {**os.environ, "PYTHONPATH": str(cwd / "src")}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "swarm_infra.cli", *args], cwd=cwd, env=env, text=True,
                          capture_output=True)  # fmt: skip
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-2000:]
        if args[0] != "verify":
            sys.exit(f"swarm {' '.join(args)} failed ({proc.returncode}):\n{tail}")
        print(f"  (swarm verify in {cwd} exited {proc.returncode}: drift or errors)\n{tail}", flush=True)
    return took


def lab(args: argparse.Namespace) -> None:
    if os.geteuid() != 0:
        sys.exit("--lab needs root (the lab's nodes are systemd-nspawn containers)")
    with tempfile.TemporaryDirectory() as tmp:
        # The nodes' key records (swarm converge) in a state directory of this run's own: a
        # new lab's nodes have new keys, which an older record of lab-N would refuse.
        os.environ["SWARM_STATE_DIR"] = str(Path(tmp) / "state")
        old = Path(tmp) / "baseline"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(old), args.baseline],
                       check=True, capture_output=True)  # fmt: skip
        times: dict[tuple[int, str], list[float]] = {}
        try:
            for n in args.sizes:
                fleet = f"lab-{n}"
                swarm(["lab", "fleet", "--nodes", str(n), "--no-ray"])
                # The baseline's own lab-N, by its own generator: its schema cannot read this
                # tree's (Cluster spec.ray_version, a tenant's ray.version). The same nodes,
                # sites and addresses; what the two library versions declare differently is
                # reported as drift by the baseline's verify, and timed all the same.
                swarm(["lab", "fleet", "--nodes", str(n), "--no-ray"], old)
                swarm(["lab", "up", "--fleet", fleet])
                swarm(["converge", "--engine", "pyinfra", "--fleet", fleet])
                for _ in range(args.runs):
                    for side, checkout in (("before", old), ("after", ROOT)):
                        t = swarm(["verify", "--fleet", fleet, "--junit-xml", os.devnull], checkout)
                        times.setdefault((n, side), []).append(t)
                        print(f"{fleet:<8} {side:<7} verify {t:6.1f} s", flush=True)
                swarm(["lab", "down"])
        finally:
            subprocess.run([sys.executable, "-m", "swarm_infra.cli", "lab", "down"], cwd=ROOT, check=False)
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)], check=False)
    print(f"\n{'nodes':>5} {'before s':>9} {'after s':>8}  (median of {args.runs})")
    med = {k: statistics.median(v) for k, v in times.items()}
    for n in args.sizes:
        print(f"{n:>5} {med[(n, 'before')]:>9.1f} {med[(n, 'after')]:>8.1f}")
    if 3 in args.sizes and 16 in args.sizes:
        for side in ("before", "after"):
            print(f"{side}: 16 / 3 nodes x{med[(16, side)] / med[(3, side)]:.2f} (target after: <= 3x)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--sizes", type=int, nargs="+", default=None, help="fleet sizes (default 3 16 160; --lab 3 16)"
    )
    p.add_argument("--baseline", default="main", help="git ref of the all-pairs checks (default: main)")
    p.add_argument("--lab", action="store_true", help="measure swarm verify on the lab (root)")
    p.add_argument("--runs", type=int, default=2, help="verify runs per side and size with --lab (default 2)")
    p.add_argument("--forks", type=int, default=16, help="swarm verify --forks for the estimate (default 16)")
    p.add_argument(
        "--cores", type=int, default=2, help="the lab's CPU cores, the CPU-bound estimate's (default 2)"
    )
    p.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        print(json.dumps(one(args.one)))
        return
    if args.lab:
        args.sizes = args.sizes or [3, 16]
        lab(args)
    else:
        args.sizes = args.sizes or [3, 16, 160]
        model(args)


if __name__ == "__main__":
    main()
