"""Prometheus textfiles: the real `promtool check metrics` (Debian's prometheus package,
which scripts/install.sh installs) and prometheus_client's parser read what we write.

promtool's linter is client_golang's promlint: it refuses a ``_total`` gauge, non-base units
(``_milliseconds``), abbreviated units in a name (``_ns_``), and metrics without HELP. The
label rules (no ``job``/``instance``) are Prometheus's scrape semantics, which promtool does
not check: asserted here.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from swarm_infra.metrics import fleetrun, gpu_health, jobs, probes
from swarm_infra.metrics.fio import parse_fio
from swarm_infra.metrics.iperf3 import parse_iperf3
from swarm_infra.metrics.measurement import Measurement, make_labels
from swarm_infra.metrics.ping import parse_ping
from swarm_infra.metrics.prometheus import (
    metric_labels,
    metric_name,
    metric_value,
    node_textfiles,
    render_textfile,
    run_status,
    textfile_path,
)
from swarm_infra.resolve.catalog import gpu_catalog

from .test_metrics_gpu_health import NA, UUIDS, dcgm_v4, identity_csv, sample

DATA = Path(__file__).resolve().parents[1] / "data" / "metrics"
PROMTOOL = shutil.which("promtool") or str(Path(sys.executable).parent / "promtool")


def promtool(text: str) -> subprocess.CompletedProcess[str]:
    if not Path(PROMTOOL).exists():
        pytest.fail("promtool is missing: scripts/install.sh installs it (Debian package prometheus)")
    return subprocess.run(
        [PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )


def every_kind_of_measurement() -> list[Measurement]:
    """One of each figure a run produces, from the real tools' saved output where there is one."""
    return [
        *parse_fio((DATA / "fio-probe.json").read_text(), node="n1", site="a"),
        *parse_iperf3((DATA / "iperf3-p4.json").read_text(), src="n1", dst="n2", path="mesh", repeat=1),
        *parse_ping((DATA / "ping-loopback.txt").read_text(), src="n1", dst="n2", path="mesh"),
        *fleetrun.overhead(
            [
                Measurement(
                    "iperf3",
                    "end.sum_received.bits_per_second",
                    v,
                    "bits/s",
                    make_labels(src="n1", dst="n2", streams=4, path=p),
                )
                for v, p in ((8e8, "mesh"), (1e9, "underlay"))
            ]
        ),
        *probes.parse_nvidia_smi("0, 1980, 2619, 312.45, 41, 0\n", node="n1"),
        *probes.parse_matmul(
            'MATMUL {"gpu": 0, "n": 8192, "iters": 4200, "seconds": 60.2, "flops": 7.6e14, '
            '"first_window_flops": 7.9e14, "last_window_flops": 6.1e14}\n',
            node="n1",
        ),
        *jobs.parse_training(
            "\n".join(
                "TRAINING " + json.dumps({"scaling": kind, "workers": n, "samples_per_s": rates})
                for kind in ("weak", "strong")
                for n, rates in ((1, [10.0, 9.5, 10.5]), (2, [19.0, 18.0, 19.5]))
            )
            + '\nALLREDUCE {"workers": 2, "bytes": 1048576, "algbw_bytes_per_s": 5.0e6, "seconds": 0.2}\n'
        ),
        *jobs.parse_inference(
            'INFERENCE {"rate": 20, "achieved_per_s": 19.9, "requests": 1000, "errors": 0, '
            '"p50_ms": 6.9, "p90_ms": 9.0, "p99_ms": 13.5}\n'
        ),
        *run_status("network", 1_795_705_342, True),
    ]


def every_measurement_kind() -> list[Measurement]:
    """:func:`every_kind_of_measurement` and the rest of what the metrics package measures:
    the GPU's health (identity, remapped rows, XIDs, PCIe link and clock event reasons under
    load, DCGM's diagnostic, the NVIDIA fixtures of test_metrics_gpu_health.py), and the
    training part's streamed data and model pipeline (real Ray runs' logs)."""
    h100 = gpu_catalog()["H100-SXM5-80GB"]
    identity = gpu_health.parse_identity(identity_csv(h100["product_name"], h100["memory_mib"], 2), node="n1")
    by_uuid = {str(m.label("uuid")): str(m.label("gpu")) for m in identity}
    by_pci = {
        gpu_health.pci_key(str(m.label("pci_bus_id"))): (str(m.label("gpu")), str(m.label("uuid")))
        for m in identity
    }
    xid = "[ 1234.6] NVRM: Xid (0000:18:00): 14, Channel 00000001\n"
    load = sample(0, ["5", "5", "16", "16", NA, NA, NA, NA, "Active"])
    load += sample(1, ["3", "5", "8", "16", NA, "Active", NA, NA, NA])
    return [
        *every_kind_of_measurement(),
        *identity,
        *gpu_health.parse_remapped_rows(f"{UUIDS[0]}, 0, 0, No, No\n{UUIDS[1]}, 0, 2, Yes, No\n", by_uuid),
        *gpu_health.parse_xid(xid, by_pci, node="n1"),
        *gpu_health.parse_load_samples(load, node="n1"),
        *gpu_health.parse_dcgm_diag(dcgm_v4({"software": ["Pass"], "pcie": ["Pass", "Fail"]}), 1, node="n1"),
        *jobs.parse_training((DATA / "ray-train-stream.log").read_text()),
        *jobs.parse_pipeline((DATA / "ray-train-pipeline.log").read_text()),
    ]


# Unit words of Prometheus' base units and of our suffixes: a name says each at most once.
UNIT_WORDS = {"seconds", "second", "bytes", "bits", "per", "ratio", "hertz", "watts", "celsius", "flops",
              "iops", "samples", "requests", "operations", "nats", "percent"}  # fmt: skip


def test_promtool_finds_nothing_to_lint_in_every_kind_of_measurement_and_no_name_says_a_unit_twice():
    ms = every_measurement_kind()
    assert {m.tool for m in ms} >= {"fio", "iperf3", "ping", "nvidia-smi", "kernel-log", "dcgmi", "torch",
                                    "ray", "ray-data", "ray-serve", "swarm"}  # fmt: skip
    text = render_textfile(ms)
    proc = promtool(text)
    assert (proc.returncode, proc.stdout + proc.stderr) == (0, "")
    names = {metric_name(m) for m in ms}
    doubled = {n: w for n in names for w in UNIT_WORDS if n.split("_").count(w) > 1}
    assert doubled == {}
    # No tool's JSON path, no percentile, no field's unit left in a name; IOPS have a unit.
    assert not [n for n in names if "end_sum" in n or "percentile" in n or "_p50" in n or "_p99" in n]
    assert not [n for n in names if n.endswith("_iops")]
    families = {f.name: f for f in text_string_to_metric_families(text)}
    quantiles = {
        name: sorted({s.labels["quantile"] for s in f.samples})
        for name, f in families.items()
        if f.type == "summary"
    }
    assert quantiles == {
        "swarm_fio_read_clat_seconds": ["0.99"],
        "swarm_fio_write_clat_seconds": ["0.99"],
        "swarm_ping_rtt_seconds": ["0.5", "0.99"],
        "swarm_ray_serve_latency_seconds": ["0.5", "0.9", "0.99"],
        "swarm_ray_training_samples_per_second": ["0", "0.5", "1"],
        "swarm_ray_pipeline_samples_per_second": ["0", "0.5", "1"],
    }
    # Every other figure is a gauge; none is -1 for "unknown" (an unknown figure has no sample).
    assert {f.type for n, f in families.items() if n not in quantiles} == {"gauge"}
    assert not [s for f in families.values() for s in f.samples if s.value == -1]


def test_promtool_accepts_every_metric_a_run_writes():
    text = render_textfile(every_kind_of_measurement())
    proc = promtool(text)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # ... and refuses what the textfile used to hold (the linter is really looking).
    old = "# TYPE swarm_ping_rtt_p50_milliseconds gauge\nswarm_ping_rtt_p50_milliseconds 1\n"
    old += "# TYPE swarm_iperf3_retransmits_total gauge\nswarm_iperf3_retransmits_total 1\n"
    refused = promtool(old)
    assert refused.returncode != 0
    assert 'use base unit "seconds"' in refused.stdout + refused.stderr
    assert 'should not have "_total" suffix' in refused.stdout + refused.stderr


def test_names_use_base_units_and_values_are_converted_to_them():
    ms = {(m.tool, m.field, m.unit): m for m in every_kind_of_measurement()}
    rtt = ms[("ping", "rtt.p50", "ms")]
    p99 = ms[("fio", "read.clat_ns.percentile.99.000000", "ns")]
    bw = ms[("iperf3", "end.sum_received.bits_per_second", "bits/s")]
    loss = ms[("ping", "packet_loss", "%")]
    got = {(metric_name(m), metric_labels(m).get("quantile")): metric_value(m) for m in (rtt, p99, bw, loss)}
    assert got == {
        ("swarm_ping_rtt_seconds", "0.5"): rtt.value / 1e3,
        ("swarm_fio_read_clat_seconds", "0.99"): p99.value / 1e9,
        ("swarm_iperf3_received_bytes_per_second", None): bw.value / 8,
        ("swarm_ping_packet_loss_ratio", None): loss.value / 100,
    }
    names = {metric_name(m) for m in ms.values()}
    assert not [n for n in names if n.endswith(("_total", "_milliseconds", "_percent")) or "bibytes" in n]
    assert {"swarm_fio_read_bw_bytes_per_second", "swarm_wireguard_overhead_ratio"} <= names
    assert {"swarm_metrics_last_run_timestamp_seconds", "swarm_metrics_last_run_success"} <= names


def test_textfile_parses_with_prometheus_client_and_never_carries_a_scrape_label():
    ms = parse_fio((DATA / "fio-randread-4k-qd32.json").read_text(), node='n"1')
    # `swarm metrics import --label job=... --label instance=...` can put any label on a record.
    ms.append(Measurement("ping", "rtt.p50", 2.5, "ms", make_labels(job="x", instance="y", src="n1")))
    text = render_textfile(ms)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert set(families) == {metric_name(m) for m in ms}
    iops = families["swarm_fio_read_operations_per_second"].samples[0]
    expected = next(m for m in ms if m.field == "read.iops")
    assert iops.value == expected.value
    assert iops.labels == {
        "jobname": "randread-4k",
        "node": 'n"1',
        "rw": "randread",
        "bs": "4096",
        "iodepth": "32",
    }
    (rtt,) = families["swarm_ping_rtt_seconds"].samples
    assert rtt.labels == {"exported_job": "x", "exported_instance": "y", "src": "n1", "quantile": "0.5"}
    assert rtt.value == 0.0025
    assert not any({"job", "instance"} & set(s.labels) for f in families.values() for s in f.samples)
    assert promtool(text).returncode == 0
    assert render_textfile([]) == ""


def test_each_part_has_its_own_file_so_an_only_run_keeps_the_other_parts_series(tmp_path):
    fio = parse_fio((DATA / "fio-probe.json").read_text(), node="n1")
    rtt = parse_ping((DATA / "ping-loopback.txt").read_text(), src="n1", dst="n2", path="mesh")
    failed = fleetrun.NotMeasured("n2", "network", "ping", "ssh: connect refused", True)
    full = {
        "network": fleetrun.Outcome(rtt, [failed]),
        "storage": fleetrun.Outcome(fio, []),
        "training": fleetrun.Outcome(
            jobs.parse_training('TRAINING {"scaling": "weak", "workers": 1, "samples_per_s": [9.0]}\n'), []
        ),
    }

    def write(files: dict[tuple[str, str], str]) -> None:
        # Where `swarm metrics run` sends each (node, part) text: textfile_path(part) on the node.
        for (node, part), text in files.items():
            path = tmp_path / node / Path(textfile_path(part)).name
            path.parent.mkdir(exist_ok=True)
            assert (
                subprocess.run(
                    ["sh", "-c", probes.textfile_upload(str(path))], input=text, text=True
                ).returncode
                == 0
            )

    def series(node: str) -> dict[tuple[str, tuple], float]:
        out = {}
        for path in sorted((tmp_path / node).glob("*.prom")):  # what node_exporter's collector reads
            text = path.read_text()
            assert promtool(text).returncode == 0, path
            for family in text_string_to_metric_families(text):
                out.update({(s.name, tuple(sorted(s.labels.items()))): s.value for s in family.samples})
        return out

    write(node_textfiles(full, ["n1", "n2"], "n1", 1000.0))
    first = series("n1")
    assert (
        "swarm_fio_read_operations_per_second",
        (
            ("bs", "4096"),
            ("iodepth", "32"),
            ("jobname", "randread-4k-qd32"),
            ("node", "n1"),
            ("rw", "randread"),
        ),
    ) in first
    assert first[("swarm_metrics_last_run_success", (("part", "storage"),))] == 1.0
    training = (
        "swarm_ray_training_samples_per_second",
        (("quantile", "0.5"), ("repeats", "1"), ("scaling", "weak"), ("workers", "1")),
    )
    assert first[training] == 9.0  # the head's file
    assert series("n2")[("swarm_metrics_last_run_success", (("part", "network"),))] == 0.0  # its ping failed
    # `--only network` later: the network files change, the storage and training series stay.
    write(node_textfiles({"network": fleetrun.Outcome(rtt, [])}, ["n1", "n2"], "n1", 2000.0))
    second = series("n1")
    assert second[("swarm_metrics_last_run_timestamp_seconds", (("part", "network"),))] == 2000.0
    assert second[("swarm_metrics_last_run_timestamp_seconds", (("part", "storage"),))] == 1000.0
    assert {k for k in first if k[0].startswith("swarm_fio_")} <= set(second)
    assert series("n2")[("swarm_metrics_last_run_success", (("part", "network"),))] == 1.0
