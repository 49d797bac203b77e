"""``swarm render`` of a synthetic fleet, by phase, and the Pulumi program under mocks.

    python benchmarks/bench_render.py [--nodes 10000] [--tenants 200] [--runs 3]

Render (targets of issue #13): the synthetic fleet of ``gen_fleet.py`` (10,000 nodes, 200
tenants), once as generated and once with ``--cluster`` (NVMe scratch, so a local
PersistentVolume per node; caps on every tenant; a Ray cluster on every 10th). Each run is
a fresh child process that times: validate (parse, schema, checks), resolve
(``desired_state``), build (``swarm_infra.cluster.build``: the objects), YAML (the files
``swarm render`` writes) and writing them to disk. Target: render <= 3 s.

Pulumi (target <= 10 s): the program for the example fleet under ``pulumi.runtime.set_mocks``
in a fresh process: importing Pulumi and the program, loading the fleet, registering every
component, release and object, until the mocks have seen them all.

Each figure is the median of ``--runs`` runs; the machine and its load are printed, since
other work on a 2-core machine moves the wall-clock numbers (the render's CPU time, in
parentheses, moves less).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def render_once(fleet: str) -> dict[str, float]:
    from swarm_infra import desired_state, validate
    from swarm_infra.cluster import build
    from swarm_infra.cluster.render import files

    c0, t0 = time.process_time(), time.perf_counter()
    result = validate([fleet])
    t1 = time.perf_counter()
    assert result.report.ok, result.report.text()[:2000]
    state = desired_state(result.analysis)
    c2, t2 = time.process_time(), time.perf_counter()
    objects = build(state)
    t3 = time.perf_counter()
    out = files(objects.all(), state["cluster"]["settings"]["fleet"])
    t4 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in out.items():
            (Path(tmp) / name).write_text(text, encoding="utf-8")
    c5, t5 = time.process_time(), time.perf_counter()
    return {
        "validate_s": t1 - t0,
        "resolve_s": t2 - t1,
        "build_s": t3 - t2,
        "yaml_s": t4 - t3,
        "write_s": t5 - t4,
        "render_s": t5 - t2,
        "render_cpu_s": c5 - c2,
        "total_s": t5 - t0,
        "total_cpu_s": c5 - c0,  # this process only (parse workers, when used, not counted)
        "objects": len(objects.all()),
        "mib": sum(len(t) for t in out.values()) / 2**20,
    }


def pulumi_once(fleet: str) -> dict[str, float]:
    t0 = time.perf_counter()
    import pulumi

    from swarm_infra.engines.pulumi.config import StackConfig
    from swarm_infra.engines.pulumi.program import run

    class Count(pulumi.runtime.Mocks):
        n = 0

        def new_resource(self, args):  # type: ignore[no-untyped-def]
            Count.n += 1
            return f"{args.name}-id", args.inputs

        def call(self, args):  # type: ignore[no-untyped-def]
            return {}

    pulumi.runtime.set_mocks(Count(), project="swarm", stack="bench", preview=False)
    t1 = time.perf_counter()

    @pulumi.runtime.test
    def program():  # type: ignore[no-untyped-def]
        return run(StackConfig(fleet=fleet), ROOT).mesh.edges

    program()
    t2 = time.perf_counter()
    return {"import_s": t1 - t0, "program_s": t2 - t1, "total_s": t2 - t0, "resources": Count.n}


def child(args: list[str]) -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def median(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=10000)
    parser.add_argument("--tenants", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--render-one", help=argparse.SUPPRESS)
    parser.add_argument("--pulumi-one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.render_one:
        print(json.dumps(render_once(args.render_one)))
        return
    if args.pulumi_one:
        print(json.dumps(pulumi_once(args.pulumi_one)))
        return
    sys.path.insert(0, str(HERE))
    from gen_fleet import generate

    print(
        f"machine: {os.cpu_count()} CPUs, python {sys.version.split()[0]}, load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; median of {args.runs} runs"
    )
    header = (
        f"{'fleet':<34} {'objects':>7} {'MiB':>5} | {'validate':>8} {'resolve':>7} | {'build':>6} "
        f"{'yaml':>6} {'write':>6} {'render':>6} {'(cpu)':>6} | {'total':>6}"
    )
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory() as tmp:
        for cluster in (False, True):
            fleet = Path(tmp) / f"fleet-{int(cluster)}"
            generate(fleet, args.nodes, args.tenants, cluster)
            r = median([child(["--render-one", str(fleet)]) for _ in range(args.runs)])
            name = f"{args.nodes} nodes, {args.tenants} tenants" + (" +cluster" if cluster else "")
            print(
                f"{name:<34} {int(r['objects']):>7} {r['mib']:>5.1f} | {r['validate_s']:>7.2f}s "
                f"{r['resolve_s']:>6.2f}s | {r['build_s']:>5.2f}s {r['yaml_s']:>5.2f}s {r['write_s']:>5.2f}s "
                f"{r['render_s']:>5.2f}s {r['render_cpu_s']:>5.2f}s | {r['total_s']:>5.2f}s"
            )
    p = median([child(["--pulumi-one", "example"]) for _ in range(args.runs)])
    print(
        f"\npulumi program, example fleet, mocks: {int(p['resources'])} resources registered in "
        f"{p['program_s']:.2f} s (+{p['import_s']:.2f} s importing Pulumi and the program; total "
        f"{p['total_s']:.2f} s; target <= 10 s)"
    )


if __name__ == "__main__":
    main()
