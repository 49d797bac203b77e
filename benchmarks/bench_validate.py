"""Validate + resolve time and peak memory for synthetic fleets, against jsonschema.validate().

    python benchmarks/bench_validate.py [--sizes 1000 10000] [--tenants 200] [--baseline-docs 1000]

For each size, in a fresh child process (so peak memory is that run's): generate the
fleet (gen_fleet.py), then time, side by side in the same run:
  * ours: ``validate()`` (parse, schema, model, semantic checks) + ``desired_state()``;
  * ours, schema step only: jsonschema-rs over every document;
  * baseline: ``jsonschema.validate(doc, schema)`` per document, the usual way to call
    python-jsonschema (it re-checks the schema and builds a validator on each call).
    It costs ~10 ms a document here, so it runs on the first --baseline-docs documents
    and the per-document time is multiplied out to the whole fleet (each call is
    independent of the others, so the cost is linear).
Peak memory is ru_maxrss of the process (parse workers, when used, are reported apart).
Target (issue #2): 10,000 nodes in <= 3 s, peak <= 1 GiB, on a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def one(nodes: int, tenants: int, baseline_docs: int) -> dict:
    sys.path.insert(0, str(HERE))
    import jsonschema
    from gen_fleet import generate
    from referencing import Registry, Resource

    from swarm_infra import desired_state, validate
    from swarm_infra.fleet.loader import find_files, load_documents
    from swarm_infra.fleet.schemas import BASE_URI, KINDS, SHARED, check_document, load_schema

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "fleet"
        generate(out, nodes, tenants)
        size = sum(f.stat().st_size for f in out.rglob("*.yaml"))
        t0 = time.perf_counter()
        result = validate([out])
        t1 = time.perf_counter()
        assert result.report.ok, result.report.text()[:2000]
        state = desired_state(result.analysis)
        t2 = time.perf_counter()
        docs, _ = load_documents(find_files([out]))
        t3 = time.perf_counter()
        for doc in docs:
            for _ in check_document(doc):
                raise AssertionError("generated fleet must be schema-valid")
        t4 = time.perf_counter()
    registry = Registry().with_resources(
        (BASE_URI + f, Resource.from_contents(load_schema(f))) for f in SHARED
    )
    sample = docs[:baseline_docs]
    t5 = time.perf_counter()
    for doc in sample:
        jsonschema.validate(
            doc.data,
            load_schema(KINDS[doc.data["kind"]]),
            cls=jsonschema.Draft202012Validator,
            registry=registry,
        )
    t6 = time.perf_counter()
    per_doc = (t6 - t5) / len(sample)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rss_children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {
        "nodes": nodes,
        "documents": len(docs),
        "yaml_mib": size / 2**20,
        "peers": sum(len(s["mesh"]["peers"]) for s in state["nodes"].values()),
        "validate_s": t1 - t0,
        "resolve_s": t2 - t1,
        "total_s": t2 - t0,
        "parse_s": t3 - t2,
        "schema_rs_s": t4 - t3,
        "baseline_per_doc_ms": per_doc * 1000,
        "baseline_docs_measured": len(sample),
        "baseline_schema_s": per_doc * len(docs),
        "peak_rss_mib": rss,
        "peak_rss_workers_mib": rss_children,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--tenants", type=int, default=200)
    parser.add_argument("--baseline-docs", type=int, default=1000)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.tenants, args.baseline_docs)))
        return
    print(f"machine: {os.cpu_count()} CPUs, python {sys.version.split()[0]}; tenants={args.tenants}")
    header = (
        f"{'nodes':>6} {'docs':>6} {'MiB':>5} | {'validate':>8} {'resolve':>7} {'total':>6} "
        f"{'peakMiB':>7} | {'parse':>6} {'schema(rs)':>10} | {'jsonschema.validate':>19} "
        f"{'x schema':>8} {'x total':>7}"
    )
    print(header)
    print("-" * len(header))
    for n in args.sizes:
        child = subprocess.run(
            [
                sys.executable,
                __file__,
                "--one",
                str(n),
                "--tenants",
                str(args.tenants),
                "--baseline-docs",
                str(args.baseline_docs),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        r = json.loads(child.stdout)
        print(
            f"{r['nodes']:>6} {r['documents']:>6} {r['yaml_mib']:>5.1f} | {r['validate_s']:>7.2f}s "
            f"{r['resolve_s']:>6.2f}s {r['total_s']:>5.2f}s {r['peak_rss_mib']:>7.0f} | "
            f"{r['parse_s']:>5.2f}s {r['schema_rs_s']:>9.3f}s | {r['baseline_schema_s']:>9.1f}s "
            f"({r['baseline_per_doc_ms']:.1f} ms/doc) {r['baseline_schema_s'] / r['schema_rs_s']:>7.0f}x "
            f"{r['baseline_schema_s'] / r['total_s']:>6.1f}x"
        )
    print(
        "jsonschema.validate: measured on the first --baseline-docs documents, multiplied out "
        "to all documents; 'x schema' = baseline / our schema step, 'x total' = baseline "
        "schema step alone / our whole validate+resolve."
    )


if __name__ == "__main__":
    main()
