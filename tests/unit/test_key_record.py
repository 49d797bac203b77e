"""The controller's record of the WireGuard keys nodes reported (issue #22): the file's
format and its errors, what a run adds and removes, and ``swarm converge`` refusing a broken
record or an ``--accept-key-change`` outside the mesh before anything runs."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from swarm_infra.engines import keyrecord
from swarm_infra.resolve.keys import key_change_problem
from tests.unit.test_node_files import POISONED, key

ROOT = Path(__file__).resolve().parents[2]


def test_the_record_lives_per_fleet_name_under_the_state_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SWARM_STATE_DIR", str(tmp_path))
    assert keyrecord.record_path(Path("inventory/lab")) == tmp_path / "lab" / "wireguard-keys.json"
    assert keyrecord.record_path(Path("/x/prod.swarm.yml")) == tmp_path / "prod" / "wireguard-keys.json"
    monkeypatch.delenv("SWARM_STATE_DIR")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert (
        keyrecord.record_path(Path("inventory/lab"))
        == tmp_path / "xdg" / "swarm" / "lab" / "wireguard-keys.json"
    )


def test_save_load_and_forget(tmp_path: Path) -> None:
    path = tmp_path / "lab" / "wireguard-keys.json"
    assert keyrecord.load(path) == {}
    record = {"b": key("lab-gpu-2"), "a": key("lab-gpu-1")}
    keyrecord.save(path, record)
    assert keyrecord.load(path) == record
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert list(json.loads(path.read_text())) == ["a", "b"]
    assert keyrecord.forget(path, ["b", "c"]) == ["b"]
    assert keyrecord.load(path) == {"a": key("lab-gpu-1")}
    assert os.listdir(path.parent) == ["wireguard-keys.json"]  # no temporary file left


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{\n  'a': 1", ":2: not JSON"),
        ("[]", "expected a JSON object"),
        (json.dumps({"lab-gpu-1": POISONED}), '$["lab-gpu-1"]: expected a WireGuard public key'),
        (json.dumps({"lab-gpu-1": 7}), "got int"),
    ],
)
def test_a_broken_record_is_refused(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "wireguard-keys.json"
    path.write_text(text)
    with pytest.raises(keyrecord.KeyRecordInvalid) as exc:
        keyrecord.load(path)
    assert expected in str(exc.value) and str(path) in str(exc.value)


def test_a_run_adds_what_passed_and_drops_undeclared_nodes() -> None:
    recorded = {"a": key("lab-gpu-1"), "gone": key("lab-head-1"), "outside-limit": key("lab-gpu-3")}
    published = {"a": key("lab-gpu-1"), "new": key("lab-gpu-2")}
    assert keyrecord.updated(recorded, published, ["a", "new", "outside-limit"]) == {
        "a": key("lab-gpu-1"),
        "new": key("lab-gpu-2"),
        "outside-limit": key("lab-gpu-3"),
    }


def test_key_change_problem() -> None:
    old, new = key("lab-gpu-1"), key("lab-gpu-2")
    assert key_change_problem(new, None, False) is None  # first seen
    assert key_change_problem(old, old, False) is None
    assert key_change_problem("", old, False) is None  # check mode on a fresh node
    assert key_change_problem(new, old, True) is None
    problem = key_change_problem(new, old, False)
    assert problem and new in problem and old in problem and "--accept-key-change" in problem


def _converge(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SWARM_STATE_DIR": str(tmp_path)}
    return subprocess.run(
        [sys.executable, "-m", "swarm_infra.cli", "converge", "--fleet", "example", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip


def test_converge_refuses_a_broken_record_before_running_anything(tmp_path: Path) -> None:
    path = tmp_path / "example" / "wireguard-keys.json"
    path.parent.mkdir()
    path.write_text("{")
    proc = _converge(tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "the WireGuard key record is broken" in proc.stderr and str(path) in proc.stderr
    assert "Traceback" not in proc.stderr and "PLAY" not in proc.stdout


def test_converge_refuses_accepting_a_node_outside_the_mesh(tmp_path: Path) -> None:
    proc = _converge(tmp_path, "--accept-key-change", "no-such-node")
    assert proc.returncode == 2, proc.stderr
    assert "--accept-key-change no-such-node: not a node of the mesh" in proc.stderr
    assert "Traceback" not in proc.stderr
