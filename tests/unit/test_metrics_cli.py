"""``swarm metrics import``: saved tool output into history, compared with the previous run."""

from __future__ import annotations

import json
import re
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from swarm_infra.cli import main
from swarm_infra.metrics.fio import parse_fio
from swarm_infra.metrics.history import History, RunInfo

from .accept_table import cells
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
    # The history says what the run was: its parts and the versions the files report.
    info = History(db).info(second["run"])
    assert info is not None and info.parts == ("network", "storage") and info.nodes is None
    fio_version = json.loads((DATA / "fio-randread-4k-qd32.json").read_text())["fio version"]
    iperf3_version = json.loads((DATA / "iperf3-p4.json").read_text())["start"]["version"]
    assert info.tool_versions == {
        "fio": {fio_version: [files[1]]},
        "iperf3": {iperf3_version: [files[0]]},
    }


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
    out = capsys.readouterr().out
    assert "# TYPE swarm_fio_write_bw_bytes_per_second gauge" in out  # base units, one name per figure
    assert "bibytes" not in out and not re.search(r'[{,](job|instance)="', out)
    assert 'jobname="seqwrite-1m"' in out


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


LAB_NODES = ("lab-gpu-1", "lab-gpu-2", "lab-head-1")


def _lab_with_rules(tmp_path: Path, rules: str, extra: str = "") -> list[str]:
    """A copy of the lab fleet whose NodeAcceptance has ``rules`` (YAML list items)."""
    lab = [str(shutil.copytree(d, tmp_path / "fleet" / d.parent.name / d.name)) for d in fleet_dirs("lab")]
    (tmp_path / "fleet/policies/lab/acceptance.yaml").write_text(
        "apiVersion: swarm.io/v1alpha1\nkind: NodeAcceptance\nmetadata: {name: t}\n"
        f"spec:\n{extra}  rules:\n{rules}"
    )
    return lab


def _run(db: Path, hours_ago: float = 0.0, info: RunInfo | None = None) -> int:
    """A run recorded as `swarm metrics run` records it, ``hours_ago``, with fio of lab-head-1."""
    fio = parse_fio((DATA / "fio-randread-4k-qd32.json").read_text(), node="lab-head-1")
    at = (datetime.now(UTC) - timedelta(hours=hours_ago)).isoformat()
    h = History(db)
    run = h.record("lab", at, fio, info or RunInfo(parts=("network", "storage", "gpu"), nodes=LAB_NODES))
    h.close()
    return run


def test_accept_names_failing_nodes_metrics_values_and_thresholds(tmp_path, capsys):
    db = tmp_path / "m.db"
    _run(db)
    iops = json.loads((DATA / "fio-randread-4k-qd32.json").read_text())["jobs"][0]["read"]["iops"]
    # The lab fleet with rules that reach every verdict: storage on the head (measured),
    # RTT and bandwidth with no figure behind them, TFLOP/s on a simulated GPU.
    lab = _lab_with_rules(
        tmp_path,
        "    - {min_mesh_bandwidth_to_hub_mbit: 100, max_rtt_to_head_ms: 200, min_scratch_iops: 1000}\n"
        "    - {match: {gpu_model: H100-SXM5-80GB}, min_tflops: 400}\n",
    )
    code = main(
        ["metrics", "accept", *lab, "--fleet", "lab", "--db", str(db), "--limit", "lab-head-1,lab-gpu-1"]
    )
    out = capsys.readouterr().out
    assert code == 1
    table = cells(out)  # a row per node, a column per threshold
    assert table["limit"] == {
        "min_mesh_bandwidth_to_hub_mbit": ">= 100",
        "max_rtt_to_head_ms": "<= 200",
        "min_scratch_iops": ">= 1000",
        "min_tflops": ">= 400",
    }
    head, gpu = table["lab-head-1"], table["lab-gpu-1"]
    assert head["min_scratch_iops"] == f"{'FAIL' if iops < 1000 else 'pass'} {iops:.4g}"  # the measured value
    assert gpu["max_rtt_to_head_ms"] == "\u2014"  # not measured
    assert head["max_rtt_to_head_ms"] == "pass 0"  # the head's RTT to itself is 0
    # lab-head-1 is lab-a's hub: lab-gpu-1's bandwidth is its test to it, the hub has none.
    assert gpu["min_mesh_bandwidth_to_hub_mbit"] == "\u2014"
    assert head["min_mesh_bandwidth_to_hub_mbit"] == "pass (hub)"
    assert gpu["min_tflops"] == "\u2014 simulated" and head["min_tflops"] == ""  # no rule gives the head one
    failing = ["lab-gpu-1"] + (["lab-head-1"] if iops < 1000 else [])
    summary = f"{2 - len(failing)} of 2 nodes accepted (run 1); failing: {', '.join(failing)}"
    assert out.rstrip().endswith(summary)


def test_accept_refuses_a_run_older_than_the_declared_age_or_that_missed_a_part_or_node(tmp_path, capsys):
    rules = "    - {max_rtt_to_head_ms: 200}\n    - {match: {role: gpu-worker}, min_scratch_iops: 1}\n"
    lab = _lab_with_rules(tmp_path, rules)
    accept = ["metrics", "accept", *lab, "--fleet", "lab"]

    def judge(db: Path, *extra: str) -> tuple[int, str, str]:
        code = main([*accept, "--db", str(db), *extra])
        out, err = capsys.readouterr()
        return code, out, err

    fresh, stale = tmp_path / "fresh.db", tmp_path / "stale.db"
    _run(fresh, hours_ago=23)
    assert judge(fresh)[0] == 1  # judged: the workers' RTT and scratch have no figure
    _run(stale, hours_ago=25)
    code, out, err = judge(stale)
    assert (code, out) == (2, "")  # nothing judged
    assert "run 1 cannot be judged" in err and "more than max_run_age_hours 24 of NodeAcceptance t" in err
    # The age is the operator's: a NodeAcceptance that allows 48 h judges the same run.
    lab48 = _lab_with_rules(tmp_path / "48", rules, extra="  max_run_age_hours: 48\n")
    assert main(["metrics", "accept", *lab48, "--fleet", "lab", "--db", str(stale)]) == 1
    capsys.readouterr()
    # A --only storage run: the RTT threshold needs the network part.
    only = tmp_path / "only.db"
    _run(only, info=RunInfo(parts=("storage",), nodes=LAB_NODES))
    code, _, err = judge(only)
    assert code == 2 and "the run did not measure network, which max_rtt_to_head_ms needs" in err
    # A --limit lab-gpu-2 run: lab-gpu-2's RTT to the head needs the head in the run; judging
    # lab-gpu-1 needs lab-gpu-1.
    limited = tmp_path / "limited.db"
    _run(limited, info=RunInfo(parts=("network", "storage"), nodes=("lab-gpu-2",)))
    code, _, err = judge(limited, "--limit", "lab-gpu-1,lab-gpu-2")
    assert code == 2
    assert "the run did not measure lab-head-1, which max_rtt_to_head_ms of lab-gpu-2 needs" in err
    assert "the run did not measure lab-gpu-1, which min_scratch_iops of lab-gpu-1 needs" in err
    # A run recorded without saying what it covered (an earlier version's history).
    h = History(tmp_path / "old.db")
    h.record("lab", datetime.now(UTC).isoformat(), [])
    h.close()
    code, _, err = judge(tmp_path / "old.db")
    assert code == 2 and "does not say what it measured" in err


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


def test_training_workers_place_by_this_runs_mesh_pings_else_the_latest_recorded_runs(tmp_path):
    """``swarm metrics run --training-workers K`` (cli.metrics._mesh_rtt): the RTT the
    placement reads comes from this run's network part when it ran, else from the latest
    recorded run of the fleet that holds mesh pings (a later run without any is skipped)."""
    from types import SimpleNamespace

    from swarm_infra.cli.metrics import _mesh_rtt
    from swarm_infra.metrics import fleetrun
    from swarm_infra.metrics.measurement import Measurement, make_labels

    def ping(ms: float, src: str, dst: str) -> Measurement:
        return Measurement("ping", "rtt.p50", ms, "ms", make_labels(src=src, dst=dst, path="mesh"))

    db = tmp_path / "h.db"
    h = History(db)
    h.record("lab", "2026-11-26T10:00:00+00:00", [ping(7.0, "a", "b")])
    h.record("lab", "2026-11-26T11:00:00+00:00", [ping(9.0, "a", "b")])
    h.record("other", "2026-11-26T11:30:00+00:00", [ping(1.0, "a", "b")])  # another fleet's
    h.record("lab", "2026-11-26T12:00:00+00:00", parse_fio((DATA / "fio-probe.json").read_text(), node="a"))
    h.close()
    args = SimpleNamespace(db=db, fleet="lab")
    said: list[str] = []
    assert _mesh_rtt(args, None, said.append) == {("a", "b"): 9.0}
    assert said and "run 2 " in said[0]
    this_run = fleetrun.Outcome([ping(3.0, "b", "a")])
    assert _mesh_rtt(args, this_run, said.append) == {("a", "b"): 3.0}
    assert _mesh_rtt(SimpleNamespace(db=db, fleet="none"), None, said.append) == {}


@pytest.mark.parametrize("flag", ["--training-steps", "--training-repeats"])
def test_run_refuses_a_training_window_that_measures_nothing(flag, tmp_path, capsys):
    """Zero steps or windows would report a rate of nothing: exit 2 before any node is touched."""
    code = main(["metrics", "run", "--fleet", "lab", "--db", str(tmp_path / "m.db"), flag, "0"])
    assert code == 2
    assert f"{flag} must be positive" in capsys.readouterr().err
