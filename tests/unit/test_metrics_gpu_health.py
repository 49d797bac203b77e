"""GPU acceptance: identity against the declared model, memory health, XID errors, clock
event reasons and PCIe link state under load, DCGM diagnostics.

No GPU, driver or DCGM exists on this machine, so every fixture below restates what NVIDIA
documents, with its source:

- nvidia-smi CSV (``--format=csv,noheader,nounits``): one line per GPU, the fields in the
  order asked, ``, ``-separated; field names and value words from ``nvidia-smi
  --help-query-gpu`` (R550 driver's list: ``name``, ``uuid``, ``memory.total`` "Total
  installed GPU memory", ``pci.bus_id`` "domain:bus:device.function, in hex",
  ``retired_pages.pending``, ``pcie.link.{gen,width}.{current,max}``,
  ``clocks_event_reasons.*`` or ``clocks_throttle_reasons.*`` with values "Active" / "Not
  Active"); ``[N/A]`` and ``[Not Supported]`` as nvidia-smi prints unavailable values.
- Remapped rows: NVIDIA GPU Memory Error Management, "User Visible Statistics" (correctable
  and uncorrectable counts, pending and failure booleans), ``--query-remapped-rows``.
- XID lines: NVIDIA "Xid Errors", "Viewing Xid Messages" (``NVRM: Xid (0000:03:00): 14,
  Channel 00000001``, GPU UUID ``GPU-b850f46d-d5ea-c752-ddf3-c4453e44d3f7``) and GPU Memory
  Error Management, Table 3 (``NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194,
  Contained: CE User Channel (0x9). RST: No, D-RST: No``); Xid 79's text "GPU has fallen off
  the bus" is the Xid catalog's entry.
- ``dcgmi diag -j``: the JSON that NVIDIA/DCGM v4.5.3 ``dcgmi/Diag.cpp``
  ``HelperJsonBuildOutput`` / ``HelperJsonAddResult`` writes (keys from
  ``nvvs/include/NvvsJsonStrings.h``; statuses from ``HelperDisplayDiagResult``), and the
  v3.3.9 shape (top key ``DCGM GPU Diagnostic``, ``gpu_id``).

Expected values come from the GPU catalog (``product_name``, ``memory_mib``) and the
fixtures, never from the code under test.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from swarm_infra.cli import main
from swarm_infra.metrics import fleetrun, gpu_health, probes
from swarm_infra.metrics.acceptance import NOT_SIMULATED, NodeFacts, evaluate
from swarm_infra.metrics.history import History, RunInfo
from swarm_infra.metrics.measurement import Measurement, MeasurementParseError
from swarm_infra.metrics.targets import NodeTarget
from swarm_infra.resolve.catalog import gpu_catalog

from .conftest import fleet_dirs

H100 = gpu_catalog()["H100-SXM5-80GB"]
A100 = gpu_catalog()["A100-SXM4-80GB"]
# The Xid document's example UUID, and seven more of the same form.
UUIDS = ["GPU-b850f46d-d5ea-c752-ddf3-c4453e44d3f7"] + [
    f"GPU-b850f46d-d5ea-c752-ddf3-c4453e44d3f{i}" for i in range(7)
]


def identity_csv(name: str, memory_mib: int, count: int = 8, uuids: list[str] = UUIDS) -> str:
    """``nvidia-smi --query-gpu=index,uuid,name,memory.total,pci.bus_id,retired_pages.pending``;
    retired pages are [N/A] on row-remapping GPUs (Ampere and later)."""
    return "".join(
        f"{i}, {uuids[i]}, {name}, {memory_mib}, 00000000:{0x18 + i:02X}:00.0, [N/A]\n" for i in range(count)
    )


def node_ms(node: str, csv: str) -> list[Measurement]:
    return gpu_health.parse_identity(csv, node=node)


def judge(declared: tuple[tuple[str, int], ...], ms: list[Measurement], node: str = "g1", **rule: float):
    facts = NodeFacts(node, "fra1", ("gpu-worker",), tuple(m for m, _ in declared), False, gpus=declared)
    return evaluate((({}, rule),), [facts], ms)


# ------------------------------------------------------------------ identity


def test_the_declared_gpus_pass_identity():
    ms = node_ms("g1", identity_csv(H100["product_name"], H100["memory_mib"]))
    (v,) = judge((("H100-SXM5-80GB", 8),), ms)
    assert (v.threshold_name, v.value, v.passed, v.note) == ("gpu_identity", 0.0, True, "")


@pytest.mark.parametrize(
    ("csv", "expected"),
    [
        # A provider declares H100s and the node has A100s (same memory size, other product).
        (identity_csv(A100["product_name"], A100["memory_mib"]), A100["product_name"]),
        # The right name but less memory than the catalog's H100 (a 40 GB board).
        (identity_csv(H100["product_name"], 40960), "has 40960 MiB"),
        # Fewer GPUs than declared.
        (identity_csv(H100["product_name"], H100["memory_mib"], count=4), f"4 x {H100['product_name']}"),
    ],
    ids=["other-model", "less-memory", "fewer-gpus"],
)
def test_a_gpu_identity_mismatch_fails_admission_with_a_clear_verdict(csv, expected):
    ms = node_ms("g1", csv)
    (v,) = judge((("H100-SXM5-80GB", 8),), ms)
    assert v.threshold_name == "gpu_identity" and not v.passed and v.value and v.value >= 1
    assert expected in v.note


def test_a_gpu_reported_by_two_nodes_or_a_malformed_uuid_fails_both():
    csv = identity_csv(H100["product_name"], H100["memory_mib"], count=1)
    ms = node_ms("g1", csv) + node_ms("g2", csv)
    facts = [
        NodeFacts(n, "fra1", ("gpu-worker",), ("H100-SXM5-80GB",), False, gpus=(("H100-SXM5-80GB", 1),))
        for n in ("g1", "g2")
    ]
    verdicts = evaluate((({}, {}),), facts, ms)
    assert [(v.node, v.passed) for v in verdicts] == [("g1", False), ("g2", False)]
    assert f"{UUIDS[0]} is also reported by g2" in verdicts[0].note
    bad = node_ms(
        "g3", identity_csv(H100["product_name"], H100["memory_mib"], count=1, uuids=["GPU-nonsense"])
    )
    (v,) = judge((("H100-SXM5-80GB", 1),), bad, node="g3")
    assert not v.passed and "'GPU-nonsense' is not a GPU UUID" in v.note


def test_identity_without_a_gpu_run_fails_as_not_measured_and_simulated_nodes_have_none():
    (v,) = judge((("H100-SXM5-80GB", 8),), [])
    assert (v.threshold_name, v.value, v.passed, v.note) == ("gpu_identity", None, False, "not measured")
    sim = NodeFacts("s1", "fra1", ("gpu-worker",), ("H100-SXM5-80GB",), True, gpus=(("H100-SXM5-80GB", 1),))
    verdicts = evaluate((({}, {"max_gpu_xid_errors": 0.0}),), [sim], [])
    assert [(v.threshold_name, v.note) for v in verdicts] == [("max_gpu_xid_errors", NOT_SIMULATED)]


# ------------------------------------------------------------------ memory health and XIDs


def test_remapped_rows_and_pending_repairs_are_read_and_judged():
    ms = node_ms("g1", identity_csv(H100["product_name"], H100["memory_mib"], count=3))
    by_uuid = {str(m.label("uuid")): str(m.label("gpu")) for m in ms}
    # --query-remapped-rows=gpu_uuid,remapped_rows.correctable,.uncorrectable,.pending,.failure
    rows = (
        f"{UUIDS[0]}, 0, 0, No, No\n"
        f"{UUIDS[1]}, 0, 2, Yes, No\n"  # two rows remapped, pending until the GPU is reset
        f"{UUIDS[2]}, [N/A], [N/A], [N/A], Yes\n"  # a failed remapping; counts unavailable
    )
    ms += gpu_health.parse_remapped_rows(rows, by_uuid, node="g1")
    got = {(m.field, m.label("gpu")): m.value for m in ms if m.field.startswith("remapped_rows")}
    assert got[("remapped_rows.uncorrectable", "1")] == 2 and got[("remapped_rows.pending", "1")] == 1
    assert ("remapped_rows.correctable", "2") not in got and got[("remapped_rows.failure", "2")] == 1
    verdicts = judge(
        (("H100-SXM5-80GB", 3),), ms, max_gpus_memory_repair_pending=0.0, max_gpus_row_remap_failure=0.0
    )
    assert [(v.threshold_name, v.value, v.passed) for v in verdicts] == [
        ("gpu_identity", 0.0, True),
        ("max_gpus_memory_repair_pending", 1.0, False),
        ("max_gpus_row_remap_failure", 1.0, False),
    ]


def test_xid_lines_in_nvidias_documented_forms_are_counted_per_gpu():
    ident = node_ms(
        "g1",
        f"0, {UUIDS[0]}, {H100['product_name']}, {H100['memory_mib']}, 00000000:01:00.0, [N/A]\n"
        f"1, {UUIDS[1]}, {H100['product_name']}, {H100['memory_mib']}, 00000000:03:00.0, [N/A]\n"
        f"2, {UUIDS[2]}, {H100['product_name']}, {H100['memory_mib']}, 00000000:05:00.0, [N/A]\n",
    )
    by_pci = {
        gpu_health.pci_key(str(m.label("pci_bus_id"))): (str(m.label("gpu")), str(m.label("uuid")))
        for m in ident
    }
    log = (
        "[ 1234.5] NVRM: GPU at 0000:03:00: GPU-b850f46d-d5ea-c752-ddf3-c4453e44d3f7\n"
        "[ 1234.6] NVRM: Xid (0000:03:00): 14, Channel 00000001\n"
        "Nov 26 10:00:00 g1 kernel: NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, "
        "Contained: CE User Channel (0x9). RST: No, D-RST: No\n"
        "Nov 26 10:00:01 g1 kernel: NVRM: Xid (PCI:0000:01:00): 94, pid=7194, "
        "Contained: CE User Channel (0x9). RST: No, D-RST: No\n"
        "Nov 26 10:00:02 g1 kernel: NVRM: Xid (PCI:0000:41:00): 79, pid=0, GPU has fallen off the bus.\n"
    )
    xids = {m.label("pci_bus_id"): m for m in gpu_health.parse_xid(log, by_pci, node="g1")}
    assert xids["00000000:01:00.0"].value == 2
    assert xids["00000000:01:00.0"].label("xids") == "94" and xids["00000000:01:00.0"].label("gpu") == "0"
    assert xids["00000000:03:00.0"].value == 1 and xids["00000000:03:00.0"].label("xids") == "14"
    assert xids["00000000:05:00.0"].value == 0 and xids["00000000:05:00.0"].label("xids") is None
    # The GPU that fell off the bus is not in nvidia-smi's list any more; its Xid still counts.
    assert xids["00000000:41:00.0"].value == 1 and xids["00000000:41:00.0"].label("gpu") is None
    ms = ident + list(xids.values())
    (_, v) = judge((("H100-SXM5-80GB", 3),), ms, max_gpu_xid_errors=0.0)
    assert (v.value, v.passed) == (4.0, False)


def fake_tools(tmp_path: Path, tools: dict[str, str]) -> dict[str, str]:
    """Executables on a PATH of their own that print the given text (the documented formats)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, script in tools.items():
        path = bin_dir / name
        path.write_text("#!/bin/sh\n" + script)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}


def test_the_inventory_script_runs_its_three_sections_and_says_which_failed(tmp_path):
    identity = identity_csv(H100["product_name"], H100["memory_mib"], count=2)
    env = fake_tools(
        tmp_path,
        {
            "nvidia-smi": (
                # A warning on stderr beside a good answer (exit 0) is not part of the CSV.
                'case "$1" in --query-gpu=*) echo "WARNING: a warning" >&2; cat <<"E"\n'
                + identity
                + "E\n;;\n"
                '--query-remapped-rows=*) printf "%s, 0, 0, No, No\\n%s, 1, 0, No, No\\n" '
                f'"{UUIDS[0]}" "{UUIDS[1]}";;\nesac\n'
            ),
            "journalctl": 'echo "NVRM: Xid (PCI:0000:19:00): 13, pid=42, Graphics Exception"\n',
        },
    )
    run = subprocess.run(
        ["sh", "-c", gpu_health.inventory_command()], env=env, capture_output=True, text=True
    )
    ms, problems = gpu_health.parse_inventory(run.stdout, node="g1")
    assert problems == {}
    assert {
        (m.field, m.label("gpu"), m.value)
        for m in ms
        if m.field in ("xid.errors", "remapped_rows.correctable")
    } == {
        ("xid.errors", "0", 0.0),
        ("xid.errors", "1", 1.0),  # 0000:19:00 is GPU 1 (00000000:19:00.0)
        ("remapped_rows.correctable", "0", 0.0),
        ("remapped_rows.correctable", "1", 1.0),
    }
    # No driver: every section says why; no kernel log readable: the xid section says so.
    env = fake_tools(
        tmp_path / "b",
        {
            "nvidia-smi": "echo 'NVIDIA-SMI has failed because it could not communicate with the "
            "NVIDIA driver.'; exit 9\n"
        },
    )
    run = subprocess.run(
        ["sh", "-c", gpu_health.inventory_command()], env=env, capture_output=True, text=True
    )
    ms, problems = gpu_health.parse_inventory(run.stdout, node="g1")
    assert ms == [] and set(problems) == {"identity", "remapped-rows", "xid"}
    assert "exit status 9" in problems["identity"] and "NVIDIA driver" in problems["identity"]
    env = fake_tools(
        tmp_path / "c",
        {
            "nvidia-smi": 'case "$1" in --query-gpu=*) cat <<"E"\n'
            + identity
            + "E\n;;\n*) echo '[N/A], [N/A]';; esac\n",
            # journalctl without the right to read the journal: nothing, exit 0.
            "journalctl": "exit 0\n",
            "dmesg": "echo 'dmesg: read kernel buffer failed: Operation not permitted' >&2; exit 1\n",
        },
    )
    run = subprocess.run(
        ["sh", "-c", gpu_health.inventory_command()], env=env, capture_output=True, text=True
    )
    ms, problems = gpu_health.parse_inventory(run.stdout, node="g1")
    assert {m.field for m in ms} == {"memory.total"}
    assert "neither journalctl -k nor dmesg" in problems["xid"]
    assert "expected 5 fields" in problems["remapped-rows"]


def test_values_nvidia_smi_reports_as_errors_are_not_taken_as_absent():
    with pytest.raises(MeasurementParseError, match=r"memory.total is \[Unknown Error\]"):
        gpu_health.parse_identity(
            f"0, {UUIDS[0]}, {H100['product_name']}, [Unknown Error], 00000000:18:00.0, No\n"
        )
    with pytest.raises(MeasurementParseError, match="neither Yes nor No"):
        gpu_health.parse_remapped_rows(f"{UUIDS[0]}, 0, 0, Maybe, No\n")


# ------------------------------------------------------------------ under load


def sample(gpu: int, values: list[str], fields: tuple[str, ...] = gpu_health.LOAD_FIELDS) -> str:
    """One ``MATMUL-SAMPLE`` line as the matmul probe prints it: the nvidia-smi CSV of
    ``fields`` (pcie gen current, gen max, width current, width max, then the reasons
    hw_slowdown, hw_thermal_slowdown, hw_power_brake_slowdown, sw_thermal_slowdown, sw_power_cap)."""
    return (
        "MATMUL-SAMPLE "
        + json.dumps({"gpu": gpu, "fields": ",".join(fields), "csv": ", ".join(values)})
        + "\n"
    )


NA = "Not Active"


def test_throttle_reasons_and_pcie_downgrade_under_load_are_measured_and_judged():
    text = (
        # GPU 0: Gen5 x16 at full speed; power-capped (sw_power_cap) but never slowed down.
        sample(0, ["5", "5", "16", "16", NA, NA, NA, NA, "Active"])
        + sample(0, ["5", "5", "16", "16", NA, NA, NA, NA, "Active"])
        # GPU 1: trained at Gen3 x8 on a Gen5 x16 link; thermal slowdown in one of two samples.
        + sample(1, ["3", "5", "8", "16", NA, "Active", NA, NA, NA])
        + sample(1, ["4", "5", "8", "16", NA, NA, NA, NA, NA])
        # GPU 2: an older driver's names; the power-brake reason [Not Supported] on the board.
        + sample(
            2, ["4", "4", "16", "16", "Active", NA, "[Not Supported]", NA, NA], gpu_health.LOAD_FIELDS_LEGACY
        )
    )
    ms = gpu_health.parse_load_samples(text, node="g1")
    got = {(m.field, m.label("gpu")): m.value for m in ms}
    assert got[("clocks_event_reasons.sw_power_cap", "0")] == 1.0
    assert got[("clocks_event_reasons.slowdown", "0")] == 0.0
    assert got[("clocks_event_reasons.hw_thermal_slowdown", "1")] == 0.5
    assert got[("clocks_event_reasons.slowdown", "1")] == 0.5
    assert (
        got[("clocks_event_reasons.slowdown", "2")] == 1.0
        and ("clocks_event_reasons.hw_power_brake_slowdown", "2") not in got
    )
    assert (got[("pcie.link.gen.current", "1")], got[("pcie.link.gen.downgrade", "1")]) == (3.0, 2.0)
    assert got[("pcie.link.width.downgrade", "1")] == 8.0 and got[("pcie.link.width.downgrade", "0")] == 0.0
    verdicts = evaluate(
        (
            (
                {},
                {
                    "max_gpu_slowdown_ratio": 0.6,
                    "max_gpu_pcie_link_gen_downgrade": 0.0,
                    "max_gpu_pcie_link_width_downgrade": 0.0,
                },
            ),
        ),
        [NodeFacts("g1", "fra1", ("gpu-worker",), (), False)],
        ms,
    )
    assert [(v.threshold_name, v.value, v.passed) for v in verdicts] == [
        ("max_gpu_slowdown_ratio", 1.0, False),  # the worst GPU (2) counts
        ("max_gpu_pcie_link_gen_downgrade", 2.0, False),
        ("max_gpu_pcie_link_width_downgrade", 8.0, False),
    ]


def test_a_sample_that_failed_or_has_other_fields_is_an_error():
    with pytest.raises(MeasurementParseError, match="is not a valid field"):
        gpu_health.parse_load_samples(
            'MATMUL-SAMPLE {"gpu": 0, "error": "Field \\"x\\" is not a valid field to query."}\n'
        )
    with pytest.raises(MeasurementParseError, match="unexpected fields"):
        gpu_health.parse_load_samples(sample(0, ["5"], ("pcie.link.gen.current",)))


def test_min_tflops_reads_the_probe_in_flop_per_second():
    line = (
        'MATMUL {"gpu": 0, "n": 8192, "iters": 1, "seconds": 60.0, "flops": 4.0e14, '
        '"first_window_flops": 4.1e14, "last_window_flops": 3.9e14}\n'
    )
    ms = probes.parse_matmul(line, node="g1")
    (v,) = evaluate((({}, {"min_tflops": 500.0}),), [NodeFacts("g1", "fra1", (), (), False)], ms)
    assert (v.value, v.passed) == (pytest.approx(400.0), False)


# ------------------------------------------------------------------ DCGM


def dcgm_v4(statuses: dict[str, list[str]], warning: str = "") -> str:
    """``dcgmi diag -r 1 -j`` as DCGM 4.5.3 writes it (Diag.cpp HelperJsonBuildOutput): per
    test its results per GPU entity, with the test summary; a failing result carries
    ``warnings`` [{warning, error_id, error_category, error_severity}]."""

    def result(gpu: int, status: str) -> dict:
        entry: dict = {"entity_group": "GPU", "entity_group_id": 1, "entity_id": gpu, "status": status}
        if status == "Fail":
            entry["warnings"] = [
                {"warning": warning, "error_id": 95, "error_category": 1, "error_severity": 2}
            ]
        return entry

    tests = [
        {
            "name": name,
            "results": [result(i, s) for i, s in enumerate(sts)],
            "test_summary": {"status": "Fail" if "Fail" in sts else "Pass"},
        }
        for name, sts in statuses.items()
    ]
    doc = {
        "DCGM Diagnostic": {"test_categories": [{"category": "Deployment", "tests": tests}]},
        "entity_groups": [
            {"entity_group": "GPU", "entity_group_id": 1, "entities": [{"entity_id": 0, "device_id": "2330"}]}
        ],
        "metadata": {"version": "4.5.3", "Driver Version Detected": "570.172.08"},
    }
    return json.dumps(doc, indent=3) + "\n@@swarm-gpu-rc dcgmi 0\n"


def test_dcgm_diag_json_pass_and_fail_and_the_threshold():
    passed = gpu_health.parse_dcgm_diag(
        dcgm_v4({"software": ["Pass", "Pass"], "pcie": ["Pass", "Skip"]}), 1, node="g1"
    )
    assert {(m.field, m.label("test")): m.value for m in passed} == {
        ("diag.failures", "software"): 0.0,
        ("diag.failures", "pcie"): 0.0,
        ("diag.passed_level", None): 1.0,
    }
    failed = gpu_health.parse_dcgm_diag(
        dcgm_v4({"software": ["Pass", "Pass"], "pcie": ["Pass", "Fail"]}, "GPU 1 PCIe link degraded"),
        1,
        node="g2",
    )
    assert {(m.field, m.label("test")): m.value for m in failed}[("diag.passed_level", None)] == 0.0
    facts = [NodeFacts(n, "fra1", (), (), False) for n in ("g1", "g2")]
    verdicts = evaluate((({}, {"min_dcgm_diag_level": 1.0}),), facts, passed + failed)
    assert [(v.node, v.value, v.passed) for v in verdicts] == [("g1", 1.0, True), ("g2", 0.0, False)]
    assert verdicts[1].note == "pcie (level 1): GPU 1 PCIe link degraded"


def test_dcgm_3x_json_a_runtime_error_and_an_absent_dcgmi():
    v3 = {
        "DCGM GPU Diagnostic": {
            "test_categories": [
                {
                    "category": "Integration",
                    "tests": [
                        {
                            "name": "PCIe",
                            "results": [
                                {
                                    "gpu_id": "0",
                                    "status": "Fail",
                                    "warnings": [{"warning": "x", "error_id": 1}],
                                }
                            ],
                        }
                    ],
                }
            ]
        }
    }
    ms = gpu_health.parse_dcgm_diag(json.dumps(v3), 2, node="g1")
    assert {(m.field, m.label("level")): m.value for m in ms} == {
        ("diag.failures", "2"): 1.0,
        ("diag.passed_level", "2"): 0.0,
    }
    # Diag.cpp HelperDisplayFailureMessage: {"DCGM Diagnostic": {"version": ..., "runtime_error": msg}}
    err = {"DCGM Diagnostic": {"version": "4.5.3", "runtime_error": "Unable to connect to the host engine"}}
    with pytest.raises(MeasurementParseError, match="host engine"):
        gpu_health.parse_dcgm_diag(json.dumps(err), 1)
    with pytest.raises(MeasurementParseError, match="no JSON report"):
        gpu_health.parse_dcgm_diag("Error: unable to establish a connection\n@@swarm-gpu-rc dcgmi 1\n", 1)
    out = subprocess.run(
        ["sh", "-c", gpu_health.dcgm_diag_command(1)],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    with pytest.raises(gpu_health.DcgmUnavailable, match="not installed"):
        gpu_health.parse_dcgm_diag(out.stdout, 1)
    with pytest.raises(ValueError):
        gpu_health.dcgm_diag_command(5)


def test_a_run_on_a_node_without_dcgm_reports_it_not_measured_not_failed(tmp_path):
    identity = identity_csv(H100["product_name"], H100["memory_mib"], count=1)
    env = fake_tools(
        tmp_path,
        {
            "nvidia-smi": (
                'case "$1" in --query-gpu=index,uuid*) cat <<"E"\n' + identity + "E\n;;\n"
                "--query-gpu=*) echo '0, 1980, 2619, 312.45, 41, 0';;\n"
                f'--query-remapped-rows=*) echo "{UUIDS[0]}, 0, 0, No, No";;\nesac\n'
            ),
            "journalctl": "echo 'Linux version 6.1.0-28-amd64'\n",
        },
    )

    def shell(node: str, command: str, timeout_s: float, stdin: str | None = None) -> fleetrun.Result:
        proc = subprocess.run(
            ["sh", "-c", command], env=env, capture_output=True, text=True, timeout=timeout_s
        )
        return fleetrun.Result(proc.returncode, proc.stdout, proc.stderr)

    node = NodeTarget("g1", "a", "127.0.0.1", None, False, None, "nvml", False)
    out = fleetrun.measure([node], shell, parts=["gpu"], options=fleetrun.Options(matmul_seconds=1))
    fields = {m.field for m in out.measurements}
    assert {"memory.total", "remapped_rows.pending", "xid.errors", "clocks.sm"} <= fields
    misses = {(n.what, n.failed) for n in out.not_measured}
    assert ("dcgmi diag -r 1", False) in misses  # no DCGM here: not applicable, not a failure
    assert ("matmul FLOP/s under load", True) in misses  # no PyTorch here: the probe says why


STUB_TORCH = '''
"""A stand-in for PyTorch with two CUDA devices whose matmul does nothing: it runs the
probe's own control flow (threads, timed windows, samples) on a machine without a GPU."""
bfloat16 = "bf16"
class device:
    def __init__(self, kind, index):
        self.index = index
class _M:
    def __matmul__(self, other):
        return self
def randn(*shape, dtype=None, device=None):
    return _M()
class _Props:
    def __init__(self, uuid):
        if uuid:
            self.uuid = uuid
class cuda:
    @staticmethod
    def get_device_properties(index):
        # Device 0 as a PyTorch that reports the UUID, device 1 as one that does not.
        return _Props("b850f46d-d5ea-c752-ddf3-c4453e44d3f7" if index == 0 else None)
    @staticmethod
    def is_available():
        return True
    @staticmethod
    def device_count():
        return 2
    @staticmethod
    def synchronize(device=None):
        pass
'''


def test_the_matmul_script_loads_every_gpu_for_its_duration_and_samples_under_load(tmp_path):
    """The probe's script itself, run with a stand-in torch module and an nvidia-smi that
    knows only the pre-R535 ``clocks_throttle_reasons`` names (so the script must fall back)."""
    (tmp_path / "torch.py").write_text(STUB_TORCH)
    legacy_row = "4, 4, 16, 16, Not Active, Not Active, Not Active, Not Active, Active"
    env = fake_tools(
        tmp_path,
        {
            "nvidia-smi": (
                # An nvidia-smi that knows no such UUID (exit 6, as for an unknown -i): the
                # probe falls back to the index.
                'case "$2" in GPU-*) echo "No devices were found"; exit 6;; esac\n'
                'case "$3" in *clocks_event_reasons*) '
                "echo 'Field \"clocks_event_reasons.hw_slowdown\" is not a valid field to query.'; "
                "exit 2;; esac\n"
                f"echo '{legacy_row}'\n"
            )
        },
    )
    env["PYTHONPATH"] = str(tmp_path)
    run = subprocess.run(
        ["sh", "-c", probes.matmul_command("python3", 64, 2.5)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    flops = {m.label("gpu"): m for m in probes.parse_matmul(run.stdout) if m.field == "matmul.seconds"}
    assert set(flops) == {"0", "1"} and all(m.value >= 2.5 for m in flops.values())
    samples = [
        json.loads(x.partition(" ")[2]) for x in run.stdout.splitlines() if x.startswith("MATMUL-SAMPLE")
    ]
    assert samples and {s["fields"] for s in samples} == {",".join(gpu_health.LOAD_FIELDS_LEGACY)}
    got = {(m.field, m.label("gpu")): m.value for m in gpu_health.parse_load_samples(run.stdout)}
    assert got[("clocks_event_reasons.sw_power_cap", "0")] == 1.0
    assert got[("clocks_event_reasons.slowdown", "1")] == 0.0 and got[("pcie.link.gen.downgrade", "1")] == 0.0
    uuids = {m.label("gpu"): m.label("uuid") for m in gpu_health.parse_load_samples(run.stdout)}
    assert uuids == {"0": UUIDS[0], "1": None}


def test_accept_on_the_example_fleet_fails_a_node_whose_gpus_are_not_the_declared_model(tmp_path, capsys):
    """`swarm metrics accept` end to end: fra1-gpu-01 declares 8 x H100-SXM5-80GB (nvml) in
    inventory/example; the recorded run says nvidia-smi saw 8 A100s there."""
    history = History(tmp_path / "m.db")
    history.record(
        "example",
        # Now: accept refuses a run older than the NodeAcceptance's max_run_age_hours.
        datetime.now(UTC).replace(microsecond=0).isoformat(),
        node_ms("fra1-gpu-01", identity_csv(A100["product_name"], A100["memory_mib"])),
        # Every part, and no node list (as an imported run): the network thresholds the example's
        # rules give this node are then judged "not measured", beside the identity verdict.
        RunInfo(parts=tuple(fleetrun.PARTS), nodes=None),
    )
    history.close()
    paths = [str(d) for d in fleet_dirs("example")]
    args = [
        "metrics",
        "accept",
        *paths,
        "--fleet",
        "example",
        "--db",
        str(tmp_path / "m.db"),
        "--limit",
        "fra1-gpu-01",
    ]
    assert main(args) == 1
    out = capsys.readouterr().out
    assert (
        "fra1-gpu-01: gpu_identity = 1, threshold 0 "
        f"(declared 8 x H100-SXM5-80GB (8 x {H100['product_name']}); "
        f"nvidia-smi reports 8 x {A100['product_name']})"
    ) in out
