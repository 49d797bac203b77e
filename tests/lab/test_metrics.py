"""`swarm metrics run` and `swarm metrics accept` on the real lab (root; CI runs them): real
ping, iperf3 and fio on the nodes over SSH, their real JSON through the parsers, Ray Train
data-parallel training over the mesh (gloo on wg0) with its all-reduce sweep, its data
streamed through Ray Data, its workers placed by the run's measured latency, and the model
split over two workers (stages on two nodes), open-loop
inference through Ray Serve (and a run whose injected request failures fail it), the
history, plots, textfile-collector files on each node, and a node that fails admission
because its site is slow on purpose (lab-b's declared WAN latency).

Expected values come from the lab fleet: its nodes, sites, mesh, scratch, the WAN latency
the lab emulates, and the pairs the schedule picks.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from swarm_infra.fleet.sources import fleet_paths
from swarm_infra.metrics import fleetrun
from swarm_infra.metrics.prometheus import textfile_path
from swarm_infra.metrics.schedule import admission_pairs, representative_pairs
from swarm_infra.metrics.targets import fleet_targets
from swarm_infra.resolve import load_fleet
from tests.labkit import LAB_STATE, ROOT, edit, fleet_copy, on_node, swarm
from tests.unit.accept_table import cells

pytestmark = [pytest.mark.root, pytest.mark.lab]
LAB_ORDER = 36
LAB_NEEDS = LAB_LEAVES = "converged"  # measuring changes no declared state

FLEET = load_fleet(fleet_paths(ROOT / "inventory/lab")).fleet
TARGETS = {t.name: t for t in fleet_targets(FLEET, LAB_STATE)}
HEAD = next(n for n, t in TARGETS.items() if t.head)
SLOW_SITE = max(FLEET.sites.values(), key=lambda s: s.wan["latency_ms"])
SLOW = sorted(n for n, t in TARGETS.items() if t.site == SLOW_SITE.name)
# Open-loop inference rates (requests/s): below what the lab's shared two cores serve.
RATES = ("30", "40", "50")
# Requests per rate: enough for p90 (10 / (1 - 0.9) = 100 answers), too few for p99 (1,000),
# which the run must then leave out rather than report from a handful of samples. CI time: the
# 1,000 of the default take about 80 s at these rates; the figures in docs/benchmarks.md do.
REQUESTS = 150
# The all-reduce sweep up to 4 MiB only (the default, 64 MiB, takes half a minute over the
# emulated WAN): 1 KiB .. 4 MiB by 4.
SWEEP_MAX_MIB = 4
# The Ray GPU workers; the training runs placed over all of them by this run's mesh pings
# (--training-workers), rank 0 the one nearest the head.
GPU_WORKERS = sorted(n for n, s in LAB_STATE["nodes"].items() if s["ray"] and s["ray"]["num_gpus"] > 0)
# fleet_training.py's defaults (--batch, the hidden width of its 64-256-256-10 MLP) and the
# run's steps per timed window and windows (--training-steps, --training-repeats): one short
# window, not the default three of 20 steps (CI time: each step of the split model crosses
# the emulated WAN; the figures in docs/benchmarks.md use the defaults).
BATCH, HIDDEN, STEPS, REPEATS = 128, 256, 10, 1


@pytest.fixture(scope="module")
def run(lab, tmp_path_factory) -> dict:
    """One measured run of the whole lab: {"json": the report, "dir": its files, "stderr": progress}."""
    out = tmp_path_factory.mktemp("metrics")
    proc = swarm(
        "metrics", "run", "--fleet", "lab", "--db", str(out / "m.db"), "--plots", str(out / "plots"),
        "--write-latency-matrix", str(out / "latency.yaml"), "--format", "json",
        "--duration", "1", "--repeats", "1", "--ping-count", "10", "--inference-rates", ",".join(RATES),
        "--inference-requests", str(REQUESTS), "--allreduce-max-mib", str(SWEEP_MAX_MIB),
        "--training-workers", str(len(GPU_WORKERS)), "--training-data", "stream", "--training-pipeline",
        "--training-steps", str(STEPS), "--training-repeats", str(REPEATS),
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {"json": json.loads(proc.stdout), "dir": out, "stderr": proc.stderr}


def values(report: dict, tool: str, field: str, **labels: str) -> list[float]:
    return [
        m["value"]
        for m in report["measurements"]
        if m["tool"] == tool
        and m["field"] == field
        and all(m["labels"].get(k) == v for k, v in labels.items())
    ]


def test_every_node_pings_every_other_over_the_mesh_and_the_reachable_underlay(run) -> None:
    report = run["json"]
    for src in TARGETS.values():
        for dst in TARGETS.values():
            if src.name == dst.name:
                continue
            mesh = values(report, "ping", "packet_loss", src=src.name, dst=dst.name, path="mesh")
            assert mesh == [0.0], (src.name, dst.name)
            underlay = values(report, "ping", "rtt.p50", src=src.name, dst=dst.name, path="underlay")
            assert len(underlay) == (1 if dst.underlay_reachable_from(src) else 0), (src.name, dst.name)
    # The emulated WAN shows: across to the slow site, at least both directions' declared latency.
    floor = 2 * SLOW_SITE.wan["latency_ms"]
    for node in SLOW:
        (rtt,) = values(report, "ping", "rtt.p50", src=node, dst=HEAD, path="mesh")
        assert rtt >= floor, (node, rtt)
    fast = [n for n, t in TARGETS.items() if t.site == TARGETS[HEAD].site and n != HEAD]
    for node in fast:
        assert values(report, "ping", "rtt.p50", src=node, dst=HEAD, path="mesh")[0] < floor


def test_bandwidth_runs_on_the_scheduled_pairs_over_both_paths_with_one_and_four_streams(run) -> None:
    sites = {n: t.site for n, t in TARGETS.items()}
    hubs = {t.site: n for n, t in TARGETS.items() if t.hub}
    pairs = representative_pairs(sites, hubs)
    pairs += admission_pairs(sites, pairs, hubs)
    measured = {
        (m["labels"]["src"], m["labels"]["dst"], m["labels"]["path"], m["labels"]["streams"])
        for m in run["json"]["measurements"]
        if m["field"] == "end.sum_received.bits_per_second" and m["value"] > 0
    }
    assert measured == {
        (p.src, p.dst, path, streams)
        for p in pairs
        for path in ("mesh", "underlay")
        for streams in ("1", "4")
    }
    overhead = {
        (m["labels"]["src"], m["labels"]["dst"]) for m in run["json"]["measurements"] if m["tool"] == "swarm"
    }
    assert overhead == {(p.src, p.dst) for p in pairs}


def test_fio_measures_every_scratch_and_simulated_gpus_are_not_numbers(run) -> None:
    report = run["json"]
    with_scratch = sorted(n for n, t in TARGETS.items() if t.scratch)
    assert with_scratch  # the lab declares scratch on its GPU nodes
    for node in with_scratch:
        (iops,) = values(report, "fio", "read.iops", node=node, jobname="randread-4k-qd32", rw="randread")
        assert iops > 0
        assert values(report, "fio", "write.bw_bytes", node=node, jobname="seqwrite-1m")
    simulated = sorted(n for n, t in TARGETS.items() if t.gpu_backend == "simulated")
    assert (
        sorted(
            n["node"]
            for n in report["not_measured"]
            if n["part"] == "gpu" and n["why"] == "not measured (simulated)"
        )
        == simulated
    )
    assert not any(
        m["tool"] == "nvidia-smi" and m["labels"].get("node") in simulated for m in report["measurements"]
    )
    assert "SIMULATED" in run["stderr"]


def test_outputs_history_plots_latency_matrix_and_textfiles_on_each_node(run) -> None:
    out: Path = run["dir"]
    with sqlite3.connect(out / "m.db") as db:
        assert db.execute("SELECT COUNT(*) FROM runs WHERE fleet = 'lab'").fetchone() == (1,)
        stored = db.execute("SELECT COUNT(*) FROM measurements").fetchone()[0]
    assert stored == len(run["json"]["measurements"])
    for png in ("latency.png", "bandwidth.png", "training.png", "inference.png"):
        assert (out / "plots" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    matrix = yaml.safe_load((out / "latency.yaml").read_text())
    pairs = {(p["a"], p["b"]) for p in matrix["spec"]["pairs"]}
    assert tuple(sorted((TARGETS[HEAD].site, SLOW_SITE.name))) in pairs
    for node in TARGETS:
        parts = {}
        for part in ("network", "storage", "gpu"):  # one file per part measured
            text = on_node(node, f"cat {textfile_path(part)}").stdout
            parts[part] = {f.name: f for f in text_string_to_metric_families(text)}
            (ok,) = parts[part]["swarm_metrics_last_run_success"].samples
            assert ok.labels == {"part": part} and ok.value == 1.0, (node, part)
            assert "swarm_metrics_last_run_timestamp_seconds" in parts[part]
        network = parts["network"]
        assert "swarm_ping_rtt_seconds" in network, node  # base units: seconds, not ms
        samples = [s for s in network["swarm_ping_rtt_seconds"].samples if s.labels["quantile"] == "0.5"]
        assert {s.labels["src"] for s in samples} == {node}  # each node holds its own figures
        assert all(s.value < 1.0 for s in samples)  # seconds: the lab's RTTs are tens of ms
        assert ("swarm_fio_read_operations_per_second" in parts["storage"]) == bool(TARGETS[node].scratch)
        assert not any("job" in s.labels for f in parts["storage"].values() for s in f.samples)
    # Training and inference ran on the Ray cluster: their figures are in the head's files.
    for part in ("training", "inference"):
        text = on_node(HEAD, f"cat {textfile_path(part)}").stdout
        families = {f.name: f for f in text_string_to_metric_families(text)}
        (ok,) = families["swarm_metrics_last_run_success"].samples
        assert ok.value == 1.0 and len(families) > 2, (part, sorted(families))


def test_accept_fails_the_nodes_of_the_slow_site_naming_metric_value_and_threshold(run, tmp_path) -> None:
    inventory = fleet_copy(tmp_path)
    policies = inventory.parents[1] / "policies"
    threshold = SLOW_SITE.wan["latency_ms"]  # below the slow site's RTT (twice it), above the fast site's
    accept = policies / "lab" / "acceptance.yaml"
    doc = yaml.safe_load(accept.read_text())
    doc["spec"]["rules"] = [{"max_rtt_to_head_ms": threshold}]
    accept.write_text(yaml.safe_dump(doc))
    paths = [str(inventory), str(policies / "lab"), str(policies / "shared")]
    proc = swarm("metrics", "accept", *paths, "--fleet", "lab", "--db", str(run["dir"] / "m.db"), check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    # The table of nodes x thresholds: the slow site's nodes fail with their measured RTT,
    # the others pass, under the declared limit.
    table = cells(proc.stdout)
    assert table["limit"]["max_rtt_to_head_ms"] == f"<= {threshold:g}", proc.stdout
    verdicts = {node: table[node]["max_rtt_to_head_ms"].split()[0] for node in TARGETS}
    assert sorted(n for n, v in verdicts.items() if v == "FAIL") == SLOW, proc.stdout
    assert all(v == "pass" for n, v in verdicts.items() if n not in SLOW), proc.stdout
    for node in SLOW:
        assert float(table[node]["max_rtt_to_head_ms"].split()[1]) > threshold, proc.stdout
    assert f"{len(TARGETS) - len(SLOW)} of {len(TARGETS)} nodes accepted" in proc.stdout
    # Loosen it past the slow site's RTT: every node is accepted.
    edit(accept, f"max_rtt_to_head_ms: {threshold}", f"max_rtt_to_head_ms: {threshold * 10}")
    ok = swarm("metrics", "accept", *paths, "--fleet", "lab", "--db", str(run["dir"] / "m.db"), check=False)
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_training_streams_through_ray_data_placed_by_measured_latency_and_splits_the_model(run) -> None:
    """Ray Data streams every worker exactly its batches (rows, 64 float32 features and an
    int64 label each); the workers are the GPU workers chosen by this run's mesh pings, the
    one-worker run on the worker nearest the head (the fleet's declared WAN: the head's own
    site); the model split over two workers on two nodes matches the whole model's loss."""
    report = run["json"]
    mesh = {n: TARGETS[n].mesh for n in GPU_WORKERS}
    head_site = TARGETS[HEAD].site
    nearest = min(GPU_WORKERS, key=lambda n: (FLEET.sites[TARGETS[n].site].wan["latency_ms"], n))
    assert TARGETS[nearest].site == head_site
    rows = [m for m in report["measurements"] if m["tool"] == "ray-data" and m["field"] == "rows"]
    assert rows, "no ray-data figures"
    for m in rows:
        workers, scaling = int(m["labels"]["workers"]), m["labels"]["scaling"]
        per_worker = BATCH if scaling == "weak" else BATCH // workers
        assert m["value"] == per_worker * STEPS * REPEATS, m
        (size,) = values(
            report, "ray-data", "bytes", **{k: m["labels"][k] for k in ("workers", "scaling", "rank")}
        )
        assert size == m["value"] * (64 * 4 + 8), m
    by_run = {}
    for m in rows:
        by_run.setdefault(int(m["labels"]["workers"]), {})[int(m["labels"]["rank"])] = m["labels"]["address"]
    assert by_run[1] == {0: mesh[nearest]}, by_run
    assert set(by_run[len(GPU_WORKERS)].values()) == set(mesh.values()), by_run  # one rank per node
    (diff,) = values(report, "ray", "pipeline.max_loss_diff")
    (sent,) = values(report, "ray", "pipeline.activation_bytes")
    (rate,) = values(report, "ray", "pipeline.samples_per_s")
    assert 0 <= diff <= 1e-4 and rate > 0, (diff, rate)  # the job's --tolerance
    assert sent == BATCH * HIDDEN * 4  # stage 0's float32 activations, one batch a step


def test_training_weak_and_strong_scaling_and_the_all_reduce_sweep_over_the_mesh(run) -> None:
    workers = GPU_WORKERS
    report = run["json"]
    for scaling in ("weak", "strong"):
        rates = {
            int(m["labels"]["workers"]): m["value"]
            for m in report["measurements"]
            if m["field"] == "training.samples_per_s" and m["labels"]["scaling"] == scaling
        }
        assert sorted(rates) == list(range(1, len(workers) + 1)), scaling
        for n, rate in rates.items():
            (low,) = values(report, "ray", "training.samples_per_s.min", workers=str(n), scaling=scaling)
            (high,) = values(report, "ray", "training.samples_per_s.max", workers=str(n), scaling=scaling)
            assert 0 < low <= rate <= high, (scaling, n, low, rate, high)
        (one,) = values(report, "ray", "training.scaling_efficiency", workers="1", scaling=scaling)
        assert one == 1.0
    # The sweep: 1 KiB .. SWEEP_MAX_MIB by 4 between the two GPU workers; two ranks: busbw = algbw.
    sizes = sorted(
        int(m["labels"]["bytes"]) for m in report["measurements"] if m["field"] == "allreduce.busbw"
    )
    assert sizes == [1024 * 4**i for i in range(7)] and sizes[-1] == SWEEP_MAX_MIB << 20, sizes
    for size in sizes:
        (algbw,) = values(report, "ray", "allreduce.algbw", bytes=str(size))
        (busbw,) = values(report, "ray", "allreduce.busbw", bytes=str(size), workers=str(len(workers)))
        assert algbw > 0 and busbw == algbw * 2 * (len(workers) - 1) / len(workers)
    print("training:", json.dumps([m for m in report["measurements"] if m["tool"] == "ray"], indent=None))


def test_inference_open_loop_latency_at_each_rate(run) -> None:
    report = run["json"]
    for rate in RATES:
        (p50,) = values(report, "ray-serve", "latency.p50", rate=rate)
        (p90,) = values(report, "ray-serve", "latency.p90", rate=rate)
        (count,) = values(report, "ray-serve", "requests", rate=rate)
        (errors,) = values(report, "ray-serve", "errors", rate=rate)
        assert 0 < p50 <= p90 and count == REQUESTS and errors == 0, (rate, p50, p90, count, errors)
        assert values(report, "ray-serve", "latency.p99", rate=rate) == []  # 200 answers: no p99
        assert values(report, "ray-serve", "requests_per_s", rate=rate)[0] > 0
    # The load comes from the far site's GPU worker, so every request crosses the WAN twice.
    (one,) = values(report, "ray-serve", "latency.p50", rate=RATES[0])
    assert one >= 2 * SLOW_SITE.wan["latency_ms"]
    print("inference:", json.dumps([m for m in report["measurements"] if m["tool"] == "ray-serve"]))


def test_injected_request_failures_above_the_threshold_fail_the_run_and_serve_is_removed(
    lab, tmp_path
) -> None:
    """A third of the packets to Serve's port on the head are answered with a TCP reset (an
    nftables rule on the head's mesh input): requests fail, the error rate passes the
    threshold, and `swarm metrics run` exits 1 naming it. Serve is gone after the run."""
    port = fleetrun.Options.inference_port
    iface = LAB_STATE["nodes"][HEAD]["mesh"]["interface"]
    rule = (
        "table inet inject_failures {\n  chain input {\n"
        "    type filter hook input priority -20; policy accept;\n"
        f'    iifname "{iface}" tcp dport {port} numgen random mod 3 == 0 reject with tcp reset\n'
        "  }\n}\n"
    )
    on_node(HEAD, f"nft -f - <<'EOF'\n{rule}\nEOF")
    try:
        proc = swarm(
            "metrics", "run", "--fleet", "lab", "--only", "inference", "--db", str(tmp_path / "m.db"),
            "--format", "json", "--inference-rates", "20", "--inference-requests", "100", check=False,
        )  # fmt: skip
    finally:
        on_node(HEAD, "nft delete table inet inject_failures")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    (rate,) = values(report, "ray-serve", "error_rate", rate="20")
    assert rate > fleetrun.Options.max_error_rate
    failed = [n for n in report["not_measured"] if n["failed"]]
    assert [n["what"] for n in failed] == ["Ray Serve error rate"], failed
    assert "above 0.01" in failed[0]["why"]
    # serve.shutdown() at the end of the job: nothing listens on Serve's port any more.
    assert f":{port} " not in on_node(HEAD, "ss -ltnH").stdout
