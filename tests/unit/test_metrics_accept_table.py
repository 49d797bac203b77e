"""``swarm metrics accept``: no run is no verdict (exit 2), a node without a measurement is
never accepted, and the verdicts are one table of nodes x thresholds."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from swarm_infra.cli import main
from swarm_infra.metrics.fio import parse_fio
from swarm_infra.metrics.history import History, RunInfo
from swarm_infra.metrics.measurement import Measurement, make_labels

from .accept_table import cells
from .conftest import fleet_dirs

DATA = Path(__file__).resolve().parents[1] / "data" / "metrics"
DASH = "\u2014"  # a cell without a measurement
LAB_NODES = ("lab-gpu-1", "lab-gpu-2", "lab-head-1")


def _lab(tmp_path: Path, rules: str) -> list[str]:
    """A copy of the lab fleet whose NodeAcceptance has ``rules`` (YAML list items)."""
    lab = [str(shutil.copytree(d, tmp_path / "fleet" / d.parent.name / d.name)) for d in fleet_dirs("lab")]
    (tmp_path / "fleet/policies/lab/acceptance.yaml").write_text(
        "apiVersion: swarm.io/v1alpha1\nkind: NodeAcceptance\nmetadata: {name: t}\n"
        f"spec:\n  rules:\n{rules}"
    )
    return lab


def _record(db: Path, measurements: list[Measurement]) -> None:
    h = History(db)
    at = datetime.now(UTC).isoformat()
    h.record("lab", at, measurements, RunInfo(parts=("network", "storage", "gpu"), nodes=None))
    h.close()


def _rtt(src: str, dst: str, ms: float) -> Measurement:
    return Measurement("ping", "rtt.p50", ms, "ms", make_labels(src=src, dst=dst, path="mesh"))


def test_no_run_recorded_is_exit_2_in_one_line_and_no_database_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lab = [str(d) for d in fleet_dirs("lab")]
    db = tmp_path / "none" / "m.db"
    assert main(["metrics", "accept", *lab, "--fleet", "lab", "--db", str(db)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert f"no run of fleet lab recorded in {db}" in err and "swarm metrics run --fleet lab" in err
    assert not db.parent.exists()  # judging reads a history, never makes one
    # A history with runs of other fleets only: still none of this one.
    _record_other = History(db)
    _record_other.record("example", datetime.now(UTC).isoformat(), [], RunInfo(parts=("network",)))
    _record_other.close()
    assert main(["metrics", "accept", *lab, "--fleet", "lab", "--db", str(db)]) == 2
    assert "no run of fleet lab recorded" in capsys.readouterr().err


def test_a_node_without_a_measurement_is_not_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """lab-head-1 is the head and lab-a's hub: its RTT to the head (itself) and its bandwidth to
    the hub (itself) hold by its place. A run with no figure of it says nothing of it, though:
    not accepted. Once the run has it (a ping to it), the same thresholds pass."""
    lab = _lab(tmp_path, "    - {min_mesh_bandwidth_to_hub_mbit: 100, max_rtt_to_head_ms: 200}\n")
    accept = ["metrics", "accept", *lab, "--fleet", "lab", "--limit", "lab-head-1,lab-gpu-2"]
    unmeasured = tmp_path / "unmeasured.db"
    _record(unmeasured, [_rtt("lab-gpu-2", "lab-gpu-1", 2.0)])
    assert main([*accept, "--db", str(unmeasured)]) == 1
    out = capsys.readouterr().out
    head = cells(out)["lab-head-1"]
    assert head == {"min_mesh_bandwidth_to_hub_mbit": DASH, "max_rtt_to_head_ms": DASH}
    assert out.rstrip().endswith("failing: lab-gpu-2, lab-head-1")
    assert f"{DASH}: no measurement, so not accepted" in out
    measured = tmp_path / "measured.db"
    _record(measured, [_rtt("lab-gpu-2", "lab-head-1", 2.0)])
    assert main([*accept, "--db", str(measured)]) == 0
    table = cells(capsys.readouterr().out)
    assert table["lab-head-1"] == {
        "min_mesh_bandwidth_to_hub_mbit": "pass (hub)",
        "max_rtt_to_head_ms": "pass 0",
    }
    # lab-gpu-2 is lab-b's hub: measured (its ping), it passes its own bandwidth threshold too.
    assert table["lab-gpu-2"] == {
        "min_mesh_bandwidth_to_hub_mbit": "pass (hub)",
        "max_rtt_to_head_ms": "pass 2",
    }


def test_the_verdicts_are_one_table_of_nodes_by_thresholds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A row per node, a column per threshold, a cell per verdict (pass or FAIL with the value,
    the dash without one, blank where no rule applies), then the overall verdict: a few
    lines, not one per verdict."""
    rules = (
        "    - {max_rtt_to_head_ms: 200}\n"
        "    - {match: {role: gpu-worker}, min_scratch_iops: 1000, max_storage_p99_ms: 0.001}\n"
        "    - {match: {site: lab-b}, max_rtt_to_head_ms: 1}\n"  # a second limit for lab-b's nodes
    )
    lab = _lab(tmp_path, rules)
    fio = (DATA / "fio-randread-4k-qd32.json").read_text()
    db = tmp_path / "m.db"
    measurements = [
        *parse_fio(fio, node="lab-gpu-1"),
        _rtt("lab-gpu-1", "lab-head-1", 3.0),
        _rtt("lab-gpu-2", "lab-head-1", 30.0),
    ]
    _record(db, measurements)
    iops = next(m.value for m in measurements if m.field == "read.iops" and m.label("rw") == "randread")
    assert main(["metrics", "accept", *lab, "--fleet", "lab", "--db", str(db)]) == 1
    out = capsys.readouterr().out
    table = cells(out)
    assert list(table) == ["limit", *LAB_NODES]
    assert table["limit"] == {
        "max_rtt_to_head_ms": "<= 1 200",  # rules give nodes different limits: each cell says its own
        "min_scratch_iops": ">= 1000",
        "max_storage_p99_ms": "<= 0.001",
    }
    gpu1, gpu2, head = (table[n] for n in LAB_NODES)
    assert gpu1["min_scratch_iops"] == f"pass {iops:.4g}" and gpu1["max_storage_p99_ms"].startswith("FAIL ")
    assert gpu1["max_rtt_to_head_ms"] == "pass 3 (<= 200)"
    assert gpu2["max_rtt_to_head_ms"] == "FAIL 30 (<= 1)"  # lab-b: of its two limits, the one it fails
    assert gpu2["min_scratch_iops"] == gpu2["max_storage_p99_ms"] == DASH
    assert head == {"max_rtt_to_head_ms": "pass 0 (<= 200)", "min_scratch_iops": "", "max_storage_p99_ms": ""}
    lines = out.rstrip("\n").splitlines()
    # The header (names cut into lines), the limits, 3 nodes, the legend, the overall verdict.
    assert len(lines) == next(i for i, x in enumerate(lines) if x.startswith("limit ")) + 1 + 3 + 2
    assert lines[-1] == "1 of 3 nodes accepted (run 1); failing: lab-gpu-1, lab-gpu-2"
    assert all(len(x) < 110 for x in lines[:-1])
