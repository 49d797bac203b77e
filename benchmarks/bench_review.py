"""``swarm review`` of the 10,000-node synthetic fleet, and how it grows with the change.

    python benchmarks/bench_review.py [--nodes 10000] [--runs 3]

A temporary Git repository holds ``gen_fleet.py``'s fleet as ``inventory/bench`` (one
commit), and one branch per change on top of it, each changing the GPU power limit of
more nodes:

- ``H100, 1 site`` and ``H100, 10 sites``: a new GpuProfile (power 80%) assigned to the H100
  nodes of the first 1 or 10 sites, at a higher precedence;
- ``1 GpuProfile (H100)``: the H100 profile's power 90% -> 80%, a quarter of the nodes
  (the issue's case: target <= 5 s and <= 1 GiB peak);
- ``2 GpuProfiles``, ``4 GpuProfiles``: the same on half and on every GPU node;
- ``no fleet change``: a commit that touches nothing the fleet reads (the fixed cost).

Then, side by side at 2,500, 5,000 and 10,000 nodes (``--sizes``), a label added to every
node: ``folded`` (the same value everywhere: one change folded over all nodes) and
``distinct`` (a value of its own per node: nothing folds, every Node object changes), so
that growth with the fleet shows (targets at 10,000: <= 3 s folded, <= 5 s distinct,
<= 1 GiB).

Each run is a fresh ``swarm review --base main --head BRANCH --out FILE`` process, timed
from outside (wall, CPU, peak RSS from ``wait4``); the figure is the median of ``--runs``.
The machine and its load are printed: other work on a 2-core machine moves wall-clock
times.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from gen_fleet import FLAVORS, MODELS, generate  # noqa: E402

GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@example.invalid",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@example.invalid",
}
PROFILE = (
    "kind: GpuProfile\nmetadata: {{name: {flavor}}}\nspec: {{persistence_mode: true, power_limit_percent: 90"
)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, env=GIT_ENV
    ).stdout


def branch(repo: Path, name: str, edit: object) -> None:
    git(repo, "checkout", "-q", "-B", name, "main")
    edit()  # type: ignore[operator]
    git(repo, "commit", "-q", "--allow-empty", "-am", name)
    git(repo, "checkout", "-q", "main")


def lower_power(policies: Path, models: list[str]) -> None:
    text = policies.read_text()
    for m in models:
        old = PROFILE.format(flavor=FLAVORS[m])
        assert old in text, old
        text = text.replace(old, old.replace("power_limit_percent: 90", "power_limit_percent: 80"))
    policies.write_text(text)


def capped_sites(policies: Path, sites: int) -> None:
    names = ", ".join(f"site-{s:03d}" for s in range(sites))
    policies.write_text(
        policies.read_text()
        + "---\napiVersion: swarm.io/v1alpha1\nkind: GpuProfile\nmetadata: {name: h100-capped}\n"
        "spec: {persistence_mode: true, power_limit_percent: 80, compute_mode: DEFAULT}\n"
        "---\napiVersion: swarm.io/v1alpha1\nkind: Assignment\nmetadata: {name: h100-capped}\n"
        f"spec: {{selector: {{gpu_models: [{MODELS[0]}], sites: [{names}]}}, gpu_profile: h100-capped, "
        "precedence: 10}\n"
    )


def run_once(repo: Path, head: str, out: Path) -> dict[str, float]:
    cmd = [sys.executable, "-m", "swarm_infra.cli", "review", "--base", "main", "--head", head]
    t0 = time.perf_counter()
    proc = subprocess.Popen([*cmd, "--out", str(out)], cwd=repo, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    summary = proc.stderr.read() if proc.stderr else ""
    proc.stderr and proc.stderr.close()  # type: ignore[func-returns-value]
    code = os.waitstatus_to_exitcode(status)
    assert code in (0, 1), summary
    return {
        "wall": wall,
        "cpu": usage.ru_utime + usage.ru_stime,
        "peak_mib": usage.ru_maxrss / 1024,
        "exit": code,
        "bytes": out.stat().st_size,
        "summary": summary.strip(),  # type: ignore[dict-item]
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--sizes", default="2500,5000,10000", help="fleet sizes of the label cases")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-review-") as tmp:
        repo = Path(tmp) / "repo"
        fleet = repo / "inventory" / "bench"
        generate(fleet, args.nodes, 200)
        git(repo, "init", "-q", "-b", "main")
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", "fleet")
        policies = fleet / "policies.yaml"
        readme = repo / "README.md"
        cases = [
            ("no fleet change", lambda: readme.write_text("not the fleet\n")),
            ("H100, 1 site", lambda: capped_sites(policies, 1)),
            ("H100, 10 sites", lambda: capped_sites(policies, 10)),
            ("1 GpuProfile (H100)", lambda: lower_power(policies, MODELS[:1])),
            ("2 GpuProfiles", lambda: lower_power(policies, MODELS[:2])),
            ("4 GpuProfiles", lambda: lower_power(policies, MODELS)),
        ]
        for i, (name, edit) in enumerate(cases):
            if name == "no fleet change":
                git(repo, "checkout", "-q", "-B", f"case{i}", "main")
                edit()
                git(repo, "add", "-A")
                git(repo, "commit", "-qm", name)
                git(repo, "checkout", "-q", "main")
            else:
                branch(repo, f"case{i}", edit)
        print(
            f"swarm review, {args.nodes} nodes, median of {args.runs} fresh processes; "
            f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the start\n"
        )
        print(
            f"{'change':<22} {'nodes':>6} {'share':>6} | {'wall':>6} {'cpu':>6} {'peakMiB':>8} {'KiB out':>8}"
        )
        print("-" * 72)
        for i, (name, _) in enumerate(cases):
            runs = [run_once(repo, f"case{i}", Path(tmp) / f"out{i}.md") for _ in range(args.runs)]
            summary = runs[0]["summary"]
            m = re.search(r"(\d+) nodes? change", str(summary))
            changed = int(m[1]) if m else 0
            wall = statistics.median(r["wall"] for r in runs)
            cpu = statistics.median(r["cpu"] for r in runs)
            peak = max(r["peak_mib"] for r in runs)
            print(
                f"{name:<22} {changed:>6} {100 * changed / args.nodes:>5.1f}% | {wall:>5.2f}s {cpu:>5.2f}s "
                f"{peak:>8.0f} {runs[0]['bytes'] / 1024:>8.1f}",
                flush=True,
            )
        print("\ntargets (1 GpuProfile, a quarter of the nodes): <= 5 s, <= 1024 MiB peak")
    scaling([int(x) for x in args.sizes.split(",") if x], args.runs)


def label_every_node(fleet: Path, distinct: bool) -> None:
    counter = iter(range(10**7))
    for f in sorted((fleet / "nodes").glob("*.yaml")):
        f.write_text(
            re.sub(
                r"labels: \{provider: ",
                lambda _: f"labels: {{rack: r{next(counter) if distinct else 0}, provider: ",
                f.read_text(),
            )
        )


def scaling(sizes: list[int], runs: int) -> None:
    """A label on every node, folded and distinct, at each size: one line per size."""
    if not sizes:
        return
    print(f"\nA label added to every node (median of {runs}):\n")
    print(
        f"{'nodes':>6} | {'folded wall':>11} {'cpu':>6} {'MiB':>5} "
        f"| {'distinct wall':>13} {'cpu':>6} {'MiB':>5}"
    )
    print("-" * 66)
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="bench-review-") as tmp:
            repo = Path(tmp) / "repo"
            fleet = repo / "inventory" / "bench"
            generate(fleet, n, 200)
            git(repo, "init", "-q", "-b", "main")
            git(repo, "add", "-A")
            git(repo, "commit", "-qm", "fleet")
            branch(repo, "folded", lambda f=fleet: label_every_node(f, False))
            branch(repo, "distinct", lambda f=fleet: label_every_node(f, True))
            cells = []
            for head in ("folded", "distinct"):
                rs = [run_once(repo, head, Path(tmp) / f"{head}.md") for _ in range(runs)]
                assert f"{n} nodes change" in str(rs[0]["summary"]), rs[0]["summary"]
                cells.append(
                    (
                        statistics.median(r["wall"] for r in rs),
                        statistics.median(r["cpu"] for r in rs),
                        max(r["peak_mib"] for r in rs),
                    )
                )
            (fw, fc, fm), (dw, dc, dm) = cells
            print(
                f"{n:>6} | {fw:>10.2f}s {fc:>5.2f}s {fm:>5.0f} | {dw:>12.2f}s {dc:>5.2f}s {dm:>5.0f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
