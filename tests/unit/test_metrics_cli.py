"""``swarm metrics import``: saved tool output into history, compared with the previous run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from swarm_infra.cli import main

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
