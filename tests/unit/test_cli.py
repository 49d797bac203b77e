"""The swarm CLI: exit codes, formats, --node, --help."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from swarm_infra import cli

from .conftest import fleet_dirs


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "swarm_infra.cli", *args], capture_output=True, text=True, check=False
    )


def test_validate_example_exits_0() -> None:
    result = run("validate", *map(str, fleet_dirs("example")))
    assert result.returncode == 0, result.stdout
    assert "0 error(s)" in result.stdout


def test_validate_json_format(tmp_path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: swarm.io/v1alpha1\nkind: Site\nmetadata: {name: Bad_Name}\nspec: {}\n")
    result = run("validate", "--format", "json", str(bad))
    assert result.returncode == 2
    out = json.loads(result.stdout)
    assert out["ok"] is False
    assert {e["path"] for e in out["errors"]} == {"$.metadata.name", "$.spec"}
    assert all(e["file"] == str(bad) and e["line"] >= 1 for e in out["errors"])


def test_missing_path_exits_2(tmp_path) -> None:
    result = run("validate", str(tmp_path / "nope"))
    assert result.returncode == 2 and "file.missing" in result.stdout


def test_plan_limit_json_is_the_node_state(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["plan", *map(str, fleet_dirs("lab")), "--limit", "lab-gpu-1", "--format", "json"]) == 0
    state = json.loads(capsys.readouterr().out)
    assert list(state["nodes"]) == ["lab-gpu-1"]
    assert state["nodes"]["lab-gpu-1"]["gpu"]["backend"] == "simulated"
    # The one --limit grammar: groups and globs too (the inventory's ray_worker group).
    assert (
        cli.main(
            ["plan", *map(str, fleet_dirs("lab")), "--limit", "ray_worker:&lab-gpu-*", "--format", "json"]
        )
        == 0
    )
    assert sorted(json.loads(capsys.readouterr().out)["nodes"]) == ["lab-gpu-1", "lab-gpu-2"]


def test_plan_node_is_the_old_spelling_of_limit(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "plan",
        *map(str, fleet_dirs("lab")),
        "--node",
        "lab-gpu-1",
        "--node",
        "lab-head-1",
        "--format",
        "json",
    ]
    assert cli.main(argv) == 0
    out, err = capsys.readouterr()
    assert sorted(json.loads(out)["nodes"]) == ["lab-gpu-1", "lab-head-1"]
    assert err.count("--node is now --limit") == 1


def test_plan_text_says_simulated(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["plan", *map(str, fleet_dirs("lab"))]) == 0
    out = capsys.readouterr().out
    assert "SIMULATED NVML" in out and "peer lab-gpu-2" in out and "h100-sxm5-80gb" in out


def test_plan_unknown_node_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["plan", *map(str, fleet_dirs("lab")), "--limit", "nope"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("swarm plan: --limit: ") and "nope" in line


def test_plan_refuses_an_invalid_fleet(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "x.yaml").write_text(
        "apiVersion: swarm.io/v1alpha1\nkind: Mesh\nmetadata: {name: m}\nspec: {cidr: 10.0.0.1/8}\n"
    )
    assert cli.main(["plan", str(tmp_path)]) == 2
    assert "network.invalid" in capsys.readouterr().err


@pytest.mark.parametrize("command", [[], ["validate"], ["plan"]])
def test_help(command: list[str]) -> None:
    result = run(*command, "--help")
    assert result.returncode == 0 and "usage: swarm" in result.stdout
