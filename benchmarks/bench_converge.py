"""Convergence on the lab with 3, 8 and 16 nodes: Ansible as shipped, Ansible tuned, pyinfra.

    sudo .venv/bin/python benchmarks/bench_converge.py [--sizes 3,8,16] [--runs 3] [--scratch-runs 1]

Needs root and no lab up; brings labs up and takes them down. For each size N it writes the
fleet ``lab-N`` (``swarm lab fleet --nodes N --no-ray``: the lab's head and N-1 GPU workers
over the two sites, one behind NAT and 20 ms away; without the Ray cluster, whose pip
install of ~230 MB per node is measured by bench_ray.py), then for each engine:

  * from scratch: fresh nodes (``swarm lab down`` and ``up``), then ``swarm converge``;
  * no-op: ``swarm converge`` again, ``--runs`` times (every run must change nothing).

The engines, side by side in one run: ``ansible`` (as shipped: ansible.cfg's linear
strategy and pipelining), ``ansible-tuned`` (the same playbooks under mitogen's
``mitogen_linear`` strategy, ANSIBLE_STRATEGY; mitogen from the dev extras), ``pyinfra``
(``--engine pyinfra``). Also measured: ``swarm verify`` on each converged fleet, and with
``--profile`` Ansible's slowest tasks in a no-op of the smallest fleet. Prints medians,
the pyinfra/Ansible ratio, how the no-op grows from 3 to 16 nodes, and the controller's
peak memory (the RSS of the converge process and its children, summed, sampled every 50 ms),
and how busy the machine's CPUs were during the no-ops: every lab node shares this
machine's cores with the controller, so a saturated CPU, not a serial run, bounds how flat
the no-op can stay as nodes are added.
The lab fleet's Ray layer is measured by bench_ray.py.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENGINES = ("ansible", "ansible-tuned", "pyinfra")


def _tree_rss_kib(pid: int) -> int:
    """RSS of ``pid`` and its descendants, summed (KiB)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            status = (entry / "status").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
        m = re.search(r"^VmRSS:\s+(\d+)", status, re.M)
        rss[int(entry.name)] = int(m.group(1)) if m else 0
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo += children.get(p, [])
    return total


def cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine so far (/proc/stat): the controller and
    every lab node, which share this machine's cores."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def run(args: list[str], env: dict[str, str] | None = None) -> tuple[float, int, str]:
    """Run ``swarm ARGS``; returns (seconds, peak tree RSS in MiB, stdout). Exits on failure."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "swarm_infra.cli", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            peak[0] = max(peak[0], _tree_rss_kib(proc.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    done.set()
    sampler.join()
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"swarm {' '.join(args)} exited {proc.returncode}:\n{out[-3000:]}{err[-2000:]}")
    return took, peak[0] // 1024, out


def changed(output: str) -> int:
    return sum(int(m) for m in re.findall(r"^\S+\s+(?:ok|changed)\s+\d+\s+(\d+)", output, re.M))


def engine_args(engine: str, fleet: str) -> tuple[list[str], dict[str, str]]:
    args = ["converge", "--fleet", fleet]
    env = dict(os.environ)
    if engine == "pyinfra":
        args += ["--engine", "pyinfra"]
    elif engine == "ansible-tuned":
        import ansible_mitogen

        env["ANSIBLE_STRATEGY_PLUGINS"] = str(Path(ansible_mitogen.__file__).parent / "plugins" / "strategy")
        env["ANSIBLE_STRATEGY"] = "mitogen_linear"
    return args, env


def measure(fleet: str, engine: str, runs: int, scratch_runs: int) -> dict[str, list[float] | int]:
    args, env = engine_args(engine, fleet)
    scratch, noop, peak = [], [], 0
    for _ in range(scratch_runs):
        run(["lab", "down"])
        run(["lab", "up", "--fleet", fleet])
        took, mib, _ = run(args, env)
        scratch.append(took)
        peak = max(peak, mib)
    busy0, total0 = cpu_ticks()
    for _ in range(runs):
        took, mib, out = run(args, env)
        if changed(out):
            sys.exit(f"{engine} on {fleet}: a no-op run changed {changed(out)} thing(s):\n{out[-3000:]}")
        noop.append(took)
        peak = max(peak, mib)
    busy1, total1 = cpu_ticks()
    busy = (busy1 - busy0) / max(1, total1 - total0)
    return {"scratch": scratch, "noop": noop, "peak_mib": peak, "cpu_busy": busy}


def ansible_profile(fleet: str, top: int = 12) -> str:
    """The slowest tasks of one Ansible no-op on ``fleet`` (ansible.posix's profile_tasks
    callback, plain ansible-playbook) and the play's total, for where the time goes."""
    env = {**os.environ, "ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.profile_tasks",
           "PROFILE_TASKS_TASK_OUTPUT_LIMIT": str(top), "ANSIBLE_NOCOLOR": "1"}  # fmt: skip
    t0 = time.perf_counter()
    playbook = str(Path(sys.executable).parent / "ansible-playbook")
    argv = [playbook, "-i", f"inventory/{fleet}", "playbooks/site.yml"]
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    took = time.perf_counter() - t0
    lines = proc.stdout.splitlines()
    start = max((i for i, ln in enumerate(lines) if ln.startswith("=====")), default=len(lines))
    tasks = sum(1 for ln in lines if ln.startswith("TASK ["))
    head = f"ansible-playbook no-op on {fleet}: {took:.1f} s, {tasks} task headers"
    return "\n".join([head, *lines[start:]])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="3,8,16", help="fleet sizes (default 3,8,16)")
    p.add_argument("--runs", type=int, default=3, help="no-op runs per engine and size (default 3)")
    p.add_argument(
        "--scratch-runs", type=int, default=1, help="from-scratch runs per engine and size (default 1)"
    )
    p.add_argument("--engines", default=",".join(ENGINES), help=f"engines (default {','.join(ENGINES)})")
    p.add_argument("--profile", action="store_true", help="also print Ansible's slowest tasks (3-node no-op)")
    a = p.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    engines = a.engines.split(",")
    results: dict[tuple[int, str], dict] = {}
    verify: dict[int, float] = {}
    try:
        for n in sizes:
            fleet = f"lab-{n}"
            run(["lab", "fleet", "--nodes", str(n), "--no-ray"])
            for engine in engines:
                r = results[(n, engine)] = measure(fleet, engine, a.runs, a.scratch_runs)
                print(
                    f"{fleet:<8} {engine:<14} scratch {statistics.median(r['scratch']):6.1f} s  "
                    f"no-op {statistics.median(r['noop']):6.1f} s  peak {r['peak_mib']} MiB  "
                    f"CPU busy in no-ops {r['cpu_busy']:.0%}",
                    flush=True,
                )
            verify[n] = run(["verify", "--fleet", fleet, "--junit-xml", os.devnull])[0]
            if a.profile and n == sizes[0]:
                print(ansible_profile(fleet), flush=True)
            run(["lab", "down"])
    finally:
        subprocess.run([sys.executable, "-m", "swarm_infra.cli", "lab", "down"], cwd=ROOT, check=False)
    med = {k: {m: statistics.median(v[m]) for m in ("scratch", "noop")} for k, v in results.items()}
    print()
    print(f"{'nodes':>5} {'engine':<14} {'scratch s':>10} {'no-op s':>8} {'peak MiB':>9}  runs (no-op)")
    for (n, engine), r in results.items():
        runs = ", ".join(f"{t:.1f}" for t in r["noop"])
        print(f"{n:>5} {engine:<14} {med[(n, engine)]['scratch']:>10.1f} {med[(n, engine)]['noop']:>8.1f} "
              f"{r['peak_mib']:>9}  {runs}")  # fmt: skip
    print()
    for n in sizes:
        if (n, "pyinfra") in med and (n, "ansible") in med:
            ratio = med[(n, "pyinfra")]["noop"] / med[(n, "ansible")]["noop"]
            print(f"{n:>2} nodes: no-op pyinfra / ansible = {ratio:.2f}; verify {verify[n]:.1f} s")
    if len(sizes) > 1:
        first, last = sizes[0], sizes[-1]
        for engine in engines:
            growth = med[(last, engine)]["noop"] / med[(first, engine)]["noop"]
            print(f"no-op {first} -> {last} nodes, {engine}: x{growth:.2f}")


if __name__ == "__main__":
    main()
