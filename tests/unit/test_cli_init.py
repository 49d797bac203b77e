"""``swarm init NAME``: the fleet it writes validates and plans at once, with and without
policies/shared beside it; nothing is overwritten; bad input is one line and exit 2; the
same NAME gives the same bytes, and no NAME changes the YAML's structure."""

from __future__ import annotations

import argparse
import json
import re
import shutil
from importlib import resources
from pathlib import Path

import pytest
import yaml
from yamllint import linter
from yamllint.config import YamlLintConfig

from swarm_infra import cli
from swarm_infra.cli import init
from swarm_infra.fleet.sources import FLEET_NAME
from swarm_infra.resolve import desired_state, load_fleet, validate

from .conftest import ROOT

NAME = "my-fleet"


def run_init(*argv: str) -> int:
    """``swarm init ARGV`` through init's own parser (cli/__init__.py registers it)."""
    parser = argparse.ArgumentParser(prog="swarm")
    sub = parser.add_subparsers(dest="command", required=True)
    init.add_parsers(sub)
    args = parser.parse_args(["init", *argv])
    return args.func(args)


def tree(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root``: a file's bytes, None for a directory."""
    return {
        p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
    }


def fleet_files(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` and its bytes."""
    return {k: v for k, v in tree(root).items() if v is not None}


@pytest.mark.parametrize("shared", [False, True], ids=["alone", "beside-policies-shared"])
def test_the_written_fleet_validates_plans_and_renders_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], shared: bool
) -> None:
    if shared:  # --fleet NAME reads policies/shared too when it is there: no name may clash
        shutil.copytree(ROOT / "policies" / "shared", tmp_path / "policies" / "shared")
    monkeypatch.chdir(tmp_path)
    assert run_init(NAME) == 0  # ROOT: the current directory
    capsys.readouterr()

    assert cli.main(["validate", "--fleet", NAME]) == 0
    assert capsys.readouterr().out.strip() == "0 error(s), 0 warning(s)"
    report = validate([tmp_path / "inventory" / NAME, tmp_path / "policies" / NAME]).report
    assert report.diagnostics == []

    assert cli.main(["plan", "--fleet", NAME, "--format", "json"]) == 0
    state = json.loads(capsys.readouterr().out)
    node = state["nodes"]["gpu-1"]
    # The fleet's own profiles, never policies/shared's of the same purpose.
    assert node["gpu"]["profile"] == f"{NAME}-gpu" and node["gpu"]["backend"] == "nvml"
    assert node["host"]["profile"] == f"{NAME}-gpu-node"
    assert node["ssh"] == {**node["ssh"], "host": "10.20.0.11", "port": 22, "user": "root"}
    assert state["cluster"]["settings"]["fleet"] == NAME
    assert state["cluster"]["capacity"]["h100-sxm5-80gb"]["unallocated"] == 0

    assert cli.main(["plan", "--fleet", NAME]) == 0
    assert cli.main(["render", "--fleet", NAME]) == 0
    assert f"fleet '{NAME}'" in capsys.readouterr().out


def test_it_writes_the_listed_files_and_says_what_to_run_next(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_init(NAME, "--dir", str(tmp_path)) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert sorted(fleet_files(tmp_path)) == sorted(f"{d}/{NAME}/{f}" for d, f in init.TEMPLATES)
    for d, f in init.TEMPLATES:
        assert f"  {d}/{NAME}/{f}\n" in out
    assert f"  cd {tmp_path}\n" in out  # ROOT is not the current directory
    for command in ("validate", "plan", "converge"):
        assert re.search(rf"^  swarm {command} --fleet {NAME}\b", out, re.M), out
    assert f"swarm converge --fleet {NAME} --check" in out


def test_the_same_name_gives_the_same_bytes(tmp_path: Path) -> None:
    assert run_init(NAME, "--dir", str(tmp_path / "a")) == 2  # ROOT must exist
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert run_init(NAME, "--dir", str(tmp_path / "a")) == 0
    assert run_init(NAME, "--dir", str(tmp_path / "b")) == 0
    a, b = fleet_files(tmp_path / "a"), fleet_files(tmp_path / "b")
    assert a == b and len(a) == len(init.TEMPLATES)
    # The name is the only difference between two fleets: substituted, nothing else.
    (tmp_path / "c").mkdir()
    assert run_init("other", "--dir", str(tmp_path / "c")) == 0
    c = fleet_files(tmp_path / "c")
    assert {k.replace(NAME, "other"): v.replace(NAME.encode(), b"other") for k, v in a.items()} == c
    assert all(b"\r" not in v and v.endswith(b"\n") for v in a.values())


@pytest.mark.parametrize(
    "name",
    ["../x", "Bad Name", "", "x/y", "UPPER", "a_b", "a.b", "-x-", "x-", "a\nb", "\udcff", "shared", "a" * 55],
)
def test_a_bad_name_is_one_line_and_exit_2_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    # "-x-" after "--": argparse would take it for an option otherwise.
    assert run_init("--dir", str(tmp_path), "--", name) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("swarm init: ") and err.count("\n") == 1, err
    assert tree(tmp_path) == {}


def test_the_longest_name_still_validates(tmp_path: Path) -> None:
    longest = init.longest_name(init.template_texts())
    assert longest == 63 - len("-gpu-node")
    name = "a" * longest
    assert run_init(name, "--dir", str(tmp_path)) == 0
    assert validate([tmp_path / "inventory" / name, tmp_path / "policies" / name]).report.diagnostics == []


def test_every_accepted_name_is_a_fleet_name() -> None:
    # --fleet NAME must find what init wrote: its names are a subset of fleet/sources.py's.
    for name in ("a", "my-fleet", "0", "a-1-b", "x" * 54):
        assert init.NAME.fullmatch(name) and FLEET_NAME.fullmatch(name)


@pytest.mark.parametrize(
    "existing",
    [
        "policies/my-fleet/mesh.yaml",
        "inventory/my-fleet/notes.txt",
        "inventory/my-fleet",
        "policies/my-fleet",
    ],
)
def test_an_existing_target_is_exit_2_naming_it_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], existing: str
) -> None:
    target = tmp_path / existing
    target.parent.mkdir(parents=True)
    target.write_text("mine\n")  # a file where the fleet's directory or one of its files goes
    before = tree(tmp_path)
    assert run_init(NAME, "--dir", str(tmp_path)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(tmp_path / Path(existing).parts[0] / NAME) in err, err
    assert tree(tmp_path) == before


def test_a_link_or_a_file_in_the_way_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "inventory").mkdir()
    (tmp_path / "inventory" / NAME).symlink_to(tmp_path / "elsewhere")  # an empty directory, by a link
    assert run_init(NAME, "--dir", str(tmp_path)) == 2
    (tmp_path / "inventory" / NAME).unlink()
    (tmp_path / "inventory" / NAME).symlink_to(tmp_path / "gone")  # dangling
    assert run_init(NAME, "--dir", str(tmp_path)) == 2
    (tmp_path / "inventory" / NAME).unlink()
    (tmp_path / "policies").write_text("")  # policies/ is a file
    assert run_init(NAME, "--dir", str(tmp_path)) == 2
    assert all(line.startswith("swarm init: ") for line in capsys.readouterr().err.splitlines())
    assert tree(tmp_path) == {"elsewhere": None, "inventory": None, "policies": b""}


def test_empty_fleet_directories_are_taken(tmp_path: Path) -> None:
    (tmp_path / "inventory" / NAME).mkdir(parents=True)
    (tmp_path / "policies" / NAME).mkdir(parents=True)
    assert run_init(NAME, "--dir", str(tmp_path)) == 0
    assert len(fleet_files(tmp_path)) == len(init.TEMPLATES)


def test_a_failed_write_removes_what_it_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "inventory").mkdir()  # already there: kept
    real_open, opened = open, []

    def failing_open(path, *args, **kwargs):  # the third file cannot be written
        opened.append(path)
        if len(opened) == 3:
            raise OSError(28, "No space left on device")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(init, "open", failing_open, raising=False)
    assert run_init(NAME, "--dir", str(tmp_path)) == 2  # what it wrote is removed: nothing was done
    assert "No space left on device" in capsys.readouterr().err
    assert tree(tmp_path) == {"inventory": None}


def test_a_name_that_would_change_the_structure_is_caught() -> None:
    # The templates quote every placeholder in data; were one unquoted, a name that YAML
    # reads as another type (or, without the name check, as more YAML) changes the document.
    unquoted = {("policies", "x.yaml"): "---\nmetadata: {name: __FLEET__}\n"}
    with pytest.raises(RuntimeError, match="changes its YAML"):
        init.render(unquoted, "123")
    with pytest.raises(RuntimeError):
        init.render(unquoted, "a, extra: 1")
    with pytest.raises(RuntimeError):  # not even YAML any more
        init.render(unquoted, "a: b: c")
    assert init.render(unquoted, "abc") == {Path("policies/abc/x.yaml"): "---\nmetadata: {name: abc}\n"}


def test_every_placeholder_in_the_data_is_a_quoted_string() -> None:
    for (d, f), text in init.template_texts().items():
        for line in text.splitlines():
            data = line.split("#", 1)[0]
            for m in re.finditer(r"__FLEET__[-a-z0-9]*", data):
                assert data[m.start() - 1] == '"' == data[m.end()], f"{d}/{f}: {line}"


def test_the_template_list_is_the_template_directory() -> None:
    base = Path(str(resources.files("swarm_infra") / "data" / "init"))
    on_disk = sorted(p.relative_to(base).as_posix() for p in base.rglob("*") if p.is_file())
    assert on_disk == sorted(f"{d}/{f}" for d, f in init.TEMPLATES)


def test_the_written_files_pass_the_repository_yamllint(tmp_path: Path) -> None:
    # CI lints inventory/ and policies/ (.ci/run): a fleet written into this repository must pass.
    config = YamlLintConfig(file=str(ROOT / ".yamllint"))
    for path, text in init.render(init.template_texts(), NAME).items():
        problems = list(linter.run(text, config, str(path)))
        assert problems == [], f"{path}: {[str(p) for p in problems]}"


# What a newcomer must replace: each (file, key) has a CHANGE comment in the comment block
# right above it or on its own line.
MUST_CHANGE = [
    ("inventory/sites.yaml", "name"),
    ("inventory/sites.yaml", "region"),
    ("inventory/sites.yaml", "provider"),
    ("inventory/sites.yaml", "cidr"),
    ("inventory/nodes.yaml", "name"),
    ("inventory/nodes.yaml", "address"),
    ("inventory/nodes.yaml", "port"),
    ("inventory/nodes.yaml", "host_keys"),
    ("inventory/nodes.yaml", "cpus"),
    ("inventory/nodes.yaml", "memory_gib"),
    ("inventory/nodes.yaml", "- {model"),
    ("policies/scheduling.yaml", "- {flavor"),
    ("policies/scheduling.yaml", "- name: team-1"),
    ("policies/profiles.yaml", "driver"),
]


@pytest.mark.parametrize(("file", "key"), MUST_CHANGE)
def test_each_value_to_change_is_commented(file: str, key: str) -> None:
    lines = (resources.files("swarm_infra") / "data" / "init" / file).read_text("utf-8").splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith(key if "-" in key else f"{key}:"))
    block = []
    for line in reversed(lines[:at]):
        if not line.strip().startswith("#"):
            break
        block.append(line)
    assert any("CHANGE" in line for line in block), f"{file}: {key} has no CHANGE comment above it"


def test_the_written_fleet_is_what_the_library_loads(tmp_path: Path) -> None:
    assert run_init(NAME, "--dir", str(tmp_path)) == 0
    state = desired_state(load_fleet([tmp_path / "inventory" / NAME, tmp_path / "policies" / NAME]))
    assert list(state["nodes"]) == ["gpu-1"]
    # Every document parses to plain data: the files are YAML a person can also read with yaml.
    for text in fleet_files(tmp_path).values():
        assert all(isinstance(d, dict) for d in yaml.safe_load_all(text))
