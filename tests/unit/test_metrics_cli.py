"""``swarm metrics import``: saved tool output into history, compared with the previous run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from swarm_infra.cli import main

from .conftest import fleet_dirs

DATA = Path(__file__).resolve().parents[1] / "data" / "metrics"


def test_import_records_runs_and_the_second_run_is_compared_with_the_first(tmp_path, capsys):
    db = tmp_path / "m.db"
    files = [str(DATA / n) for n in ("iperf3-p4.json", "fio-randread-4k-qd32.json", "ping-loopback.txt")]
    assert main(["metrics", "import", "--db", str(db), "--label", "src=a1", *files, "--format", "json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["regressions"] == 0 and all("previous" not in m for m in first["measurements"])
    assert {m["tool"] for m in first["measurements"]} == {"iperf3", "fio", "ping"}
    assert main(["metrics", "import", "--db", str(db), "--label", "src=a1", *files, "--format", "json"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["run"] == first["run"] + 1 and second["regressions"] == 0  # the same values again
    assert all(m["change"] == 0 for m in second["measurements"])


def test_import_table_flags_a_slower_run(tmp_path, capsys):
    db = tmp_path / "m.db"
    fast = DATA / "iperf3-single.json"
    slow = tmp_path / "slow.json"
    doc = json.loads(fast.read_text())
    doc["end"]["sum_received"]["bits_per_second"] *= 0.5
    slow.write_text(json.dumps(doc))
    assert main(["metrics", "import", "--db", str(db), str(fast)]) == 0
    capsys.readouterr()
    assert main(["metrics", "import", "--db", str(db), str(slow)]) == 0
    out = capsys.readouterr().out
    assert "-50.0%  REGRESSION" in out and "1 regression(s) beyond 10% vs run 1" in out


def test_prometheus_output(tmp_path, capsys):
    args = ["metrics", "import", "--db", str(tmp_path / "m.db"), "--format", "prometheus"]
    assert main([*args, str(DATA / "fio-seq-1m.json")]) == 0
    assert "# TYPE swarm_fio_write_bw_mebibytes_per_second gauge" in capsys.readouterr().out


def test_bad_input_exits_2_naming_the_file_without_a_traceback(tmp_path, capsys):
    junk = tmp_path / "junk.txt"
    junk.write_text("hello")
    refused = tmp_path / "refused.json"
    shutil.copy(DATA / "iperf3-refused.json", refused)
    db = tmp_path / "m.db"
    assert main(["metrics", "import", "--db", str(db), str(junk), str(refused), str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert f"{junk}: neither" in err and f"{refused}: iperf3: unable" in err and "nope: No such file" in err
    assert not db.exists()  # nothing recorded
    assert main(["metrics", "import", "--db", str(db), "--label", "bad", str(junk)]) == 2
    not_db = tmp_path / "not.db"
    not_db.write_text("x" * 200)
    assert main(["metrics", "import", "--db", str(not_db), str(DATA / "ping-loopback.txt")]) == 2
    assert "not a usable metrics database" in capsys.readouterr().err


def test_accept_names_failing_nodes_metrics_values_and_thresholds(tmp_path, capsys):
    db = tmp_path / "m.db"
    fio = str(DATA / "fio-randread-4k-qd32.json")
    assert main(["metrics", "import", "--db", str(db), "--label", "node=lab-head-1", fio]) == 0
    capsys.readouterr()
    iops = json.loads((DATA / "fio-randread-4k-qd32.json").read_text())["jobs"][0]["read"]["iops"]
    # The lab fleet with rules that reach every verdict: storage on the head (measured),
    # RTT with no run behind it, TFLOP/s on a simulated GPU.
    lab = []
    for d in fleet_dirs("lab"):
        lab.append(str(shutil.copytree(d, tmp_path / "fleet" / d.parent.name / d.name)))
    (tmp_path / "fleet/policies/lab/acceptance.yaml").write_text(
        "apiVersion: swarm.io/v1alpha1\nkind: NodeAcceptance\nmetadata: {name: t}\nspec:\n  rules:\n"
        "    - {min_mesh_bandwidth_to_hub_mbit: 100, max_rtt_to_head_ms: 200, min_scratch_iops: 1000}\n"
        "    - {match: {gpu_model: H100-SXM5-80GB}, min_tflops: 400}\n"
    )
    code = main(
        ["metrics", "accept", *lab, "--fleet", "lab", "--db", str(db), "--limit", "lab-head-1,lab-gpu-1"]
    )
    out = capsys.readouterr().out
    assert code == 1
    assert ("lab-head-1: min_scratch_iops" in out) == (iops < 1000)  # judged on the measured value
    assert "lab-gpu-1: max_rtt_to_head_ms = not measured, threshold 200" in out
    assert "lab-head-1: max_rtt_to_head_ms" not in out  # the head's RTT to itself is 0
    assert "lab-gpu-1: min_tflops = not measured (simulated), threshold 400" in out
    assert out.rstrip().endswith("0 of 2 nodes accepted (run 1); failing: lab-gpu-1, lab-head-1")


def test_accept_on_an_invalid_fleet_or_without_thresholds_exits_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: swarm.io/v1alpha1\nkind: NodeAcceptance\nmetadata: {name: x}\nspec: {rules: []}\n"
    )
    assert main(["metrics", "accept", str(bad), "--db", str(tmp_path / "m.db")]) == 2
    assert f"{bad}:4" in capsys.readouterr().err
    ok = tmp_path / "ok.yaml"
    ok.write_text(
        "apiVersion: swarm.io/v1alpha1\nkind: Mesh\nmetadata: {name: m}\nspec: {cidr: 10.9.0.0/24}\n"
    )
    assert main(["metrics", "accept", str(ok), "--db", str(tmp_path / "m.db")]) == 2
    assert "declares no NodeAcceptance" in capsys.readouterr().err


def test_import_writes_a_latency_matrix_the_loader_reads(tmp_path, monkeypatch, capsys):
    from swarm_infra.metrics.ping import parse_ping
    from swarm_infra.resolve import load_fleet

    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(root)  # --fleet lab: inventory/lab, policies/lab under the current directory
    sites = {n.name: n.site for n in load_fleet(fleet_dirs("lab")).fleet.nodes.values()}
    out = tmp_path / "latency.yaml"
    ping = str(DATA / "ping-loopback.txt")
    labels = ["--label", "src=lab-gpu-1", "--label", "dst=lab-gpu-2", "--label", "path=underlay"]
    args = ["metrics", "import", "--db", str(tmp_path / "m.db"), *labels, "--write-latency-matrix", str(out)]
    assert main([*args, ping]) == 0
    capsys.readouterr()
    p50 = next(m.value for m in parse_ping((DATA / "ping-loopback.txt").read_text()) if m.field == "rtt.p50")
    # Read with the lab fleet: the matrix's sites must be declared (validation says so).
    matrix = load_fleet([*fleet_dirs("lab"), out]).fleet.latency
    assert matrix is not None
    assert matrix.rtt_ms[(sites["lab-gpu-1"], sites["lab-gpu-2"])] == round(p50, 3)
