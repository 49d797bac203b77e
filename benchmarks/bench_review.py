"""``swarm review`` of the 10,000-node synthetic fleet, and how it grows with the change.

    python benchmarks/bench_review.py [--nodes 10000] [--runs 3] [--sizes 2500,5000,10000]
                                      [--compare REF] [--only-sizes] [--merge]

A temporary Git repository holds ``gen_fleet.py``'s fleet as ``inventory/bench`` (one
commit), and one branch per change on top of it, each changing the GPU power limit of
more nodes:

- ``H100, 1 site`` and ``H100, 10 sites``: a new GpuProfile (power 80%) assigned to the H100
  nodes of the first 1 or 10 sites, at a higher precedence;
- ``1 GpuProfile (H100)``: the H100 profile's power 90% -> 80%, a quarter of the nodes
  (the issue's case: target <= 5 s and <= 1 GiB peak);
- ``2 GpuProfiles``, ``4 GpuProfiles``: the same on half and on every GPU node;
- ``no fleet change``: a commit that touches nothing the fleet reads (the fixed cost).

Then, side by side at 2,500, 5,000 and 10,000 nodes (``--sizes``), so that growth with the
fleet shows, three changes of every node (targets at 10,000: <= 3 s for one policy and
folded, <= 5 s distinct, <= 1 GiB):

- ``policy``: one policy changes, the HostProfile every node has (``swappiness`` 10 -> 20):
  one change folded over all nodes, the node files untouched;
- ``folded``: a label added to every node file, the same value everywhere (one change folded
  over all nodes, and every node file and Node object changes);
- ``distinct``: a label of its own on every node (nothing folds).

``--compare REF``: each of those also with the library as it is at git ``REF`` (``git archive
REF src schemas``), the two run alternately, so that both see the same load.

Each run is a fresh ``swarm review --base main --head BRANCH --out FILE`` process, timed
from outside (wall, CPU, peak RSS from ``wait4``); the figure is the median of ``--runs``.
The machine and its load are printed: other work on a 2-core machine moves wall-clock
times.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import statistics
import subprocess
import sys
import tarfile
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


MODE: list[str] = []  # swarm review's extra options: ["--merge"] with --merge (what CI runs)


def run_once(repo: Path, head: str, out: Path, library: Path | None = None) -> dict[str, float]:
    """One fresh ``swarm review`` process (with the package under ``library`` first on the
    path when given): wall, CPU and peak RSS of it and its workers."""
    cmd = [sys.executable, "-m", "swarm_infra.cli", "review", "--base", "main", "--head", head, *MODE]
    env = dict(os.environ)
    if library is not None:
        env["PYTHONPATH"] = f"{library}{os.pathsep}{env.get('PYTHONPATH', '')}"
    t0 = time.perf_counter()
    proc = subprocess.Popen([*cmd, "--out", str(out)], cwd=repo, stderr=subprocess.PIPE, text=True, env=env)
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
    ap.add_argument("--sizes", default="2500,5000,10000", help="fleet sizes of the every-node cases")
    ap.add_argument("--compare", metavar="REF", help="also run the every-node cases with the library at REF")
    ap.add_argument("--only-sizes", action="store_true", help="only the every-node cases at --sizes")
    ap.add_argument(
        "--merge", action="store_true", help="review the merge result, as CI does (swarm review --merge)"
    )
    args = ap.parse_args()
    MODE[:] = ["--merge"] if args.merge else []
    sizes = [int(x) for x in args.sizes.split(",") if x]
    if args.only_sizes:
        scaling(sizes, args.runs, args.compare)
        return
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
    scaling(sizes, args.runs, args.compare)


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


def swappiness(policies: Path) -> None:
    """The HostProfile every node has (``tuned``, assigned to all): swappiness 10 -> 20."""
    text = policies.read_text()
    assert text.count("  swappiness: 10\n") == 1
    policies.write_text(text.replace("  swappiness: 10\n", "  swappiness: 20\n"))


CASES = ("policy", "folded", "distinct")


def scaling(sizes: list[int], runs: int, compare: str | None = None) -> None:
    """Every node changed, three ways (:data:`CASES`), at each size: one line per size and
    library (this tree, and with ``compare`` the library at that ref, run alternately)."""
    if not sizes:
        return
    with tempfile.TemporaryDirectory(prefix="bench-review-lib-") as lib:
        libraries: list[tuple[str, Path | None]] = [("this tree", None)]
        if compare:
            archive = subprocess.run(
                ["git", "-C", str(HERE.parent), "archive", compare, "src", "schemas"],
                capture_output=True,
                check=True,
            ).stdout
            with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
                tar.extractall(lib, filter="data")
            libraries.append((compare, Path(lib) / "src"))
        print(
            f"\nEvery node changed (median of {runs}; load average {os.getloadavg()[0]:.2f} at the start):\n"
        )
        header = " | ".join(f"{c + ' wall':>13} {'cpu':>6} {'MiB':>5}" for c in CASES)
        print(f"{'nodes':>6} {'library':<12} | {header}")
        print("-" * (22 + 29 * len(CASES)))
        for n in sizes:
            with tempfile.TemporaryDirectory(prefix="bench-review-") as tmp:
                repo = Path(tmp) / "repo"
                fleet = repo / "inventory" / "bench"
                generate(fleet, n, 200)
                git(repo, "init", "-q", "-b", "main")
                git(repo, "add", "-A")
                git(repo, "commit", "-qm", "fleet")
                branch(repo, "policy", lambda f=fleet: swappiness(f / "policies.yaml"))
                branch(repo, "folded", lambda f=fleet: label_every_node(f, False))
                branch(repo, "distinct", lambda f=fleet: label_every_node(f, True))
                results: dict[tuple[str, str], list[dict[str, float]]] = {}
                for head in CASES:
                    for _ in range(runs):
                        for label, library in libraries:  # alternately: the same load for both
                            r = run_once(repo, head, Path(tmp) / f"{head}.md", library)
                            assert f"{n} nodes change" in str(r["summary"]), r["summary"]
                            results.setdefault((label, head), []).append(r)
                for label, _ in libraries:
                    cells = []
                    for head in CASES:
                        rs = results[(label, head)]
                        wall = statistics.median(r["wall"] for r in rs)
                        cpu = statistics.median(r["cpu"] for r in rs)
                        cells.append(f"{wall:>12.2f}s {cpu:>5.2f}s {max(r['peak_mib'] for r in rs):>5.0f}")
                    print(f"{n:>6} {label[:12]:<12} | " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
