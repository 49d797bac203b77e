"""Every file in tests/data/invalid/ breaks one rule; the validator must report exactly that
error at the line its ``# <- RULE PATH`` marker is on (and nothing else)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from swarm_infra import cli, validate

DATA = Path(__file__).resolve().parents[1] / "data"
CORPUS = sorted((DATA / "invalid").glob("*.yaml"))
MARKER = re.compile(r"#\s*<-\s*(?P<rule>\S+)\s+(?P<path>\S+)\s*$")


def expectation(path: Path) -> tuple[int, str, str, bool]:
    """The marked line, rule and path, and whether the file stands alone. A file whose error
    is in a file it names (a RayCluster's lock, ``<stem>.lock``) has the marker there."""
    text = path.read_text()
    for number, line in enumerate(text.splitlines(), start=1):
        m = MARKER.search(line)
        if m:
            return number, m["rule"], m["path"], text.startswith("# standalone")
    named = path.with_suffix(".lock")
    if named.exists():
        number, rule, json_path, _ = expectation(named)
        return number, rule, json_path, text.startswith("# standalone")
    raise AssertionError(f"{path} has no '# <- rule path' marker")


def marked_file(path: Path) -> Path:
    """The file the marker is in: ``path``, or the lock file it names."""
    return path if any(MARKER.search(x) for x in path.read_text().splitlines()) else path.with_suffix(".lock")


def inputs(path: Path, standalone: bool) -> list[str]:
    return [str(path)] if standalone else [str(DATA / "base"), str(path)]


def test_corpus_covers_every_rule_family() -> None:
    rules = {expectation(p)[1] for p in CORPUS}
    assert len(CORPUS) >= 45
    for family in (
        "yaml.",
        "schema.",
        "reference.",
        "mesh.",
        "allocation.",
        "gpu.",
        "sysctl.",
        "host.",
        "priority.",
        "network.",
        "assignment.",
        "name.",
        "kind.",
        "ray.",
        "cluster.",
    ):
        assert any(r.startswith(family) for r in rules), family


def test_base_fleet_is_valid() -> None:
    assert validate([DATA / "base"]).report.errors == []


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_reports_exactly_the_marked_error(path: Path) -> None:
    line, rule, json_path, standalone = expectation(path)
    errors = validate(inputs(path, standalone)).report.errors
    assert [(e.file, e.line, e.path, e.rule) for e in errors] == [
        (str(marked_file(path)), line, json_path, rule)
    ]
    assert errors[0].col >= 1 and errors[0].message


@pytest.mark.parametrize("path", CORPUS[:3] + CORPUS[-3:], ids=lambda p: p.stem)
def test_cli_exits_2_and_prints_the_location(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line, _, _, standalone = expectation(path)
    assert cli.main(["validate", *inputs(path, standalone)]) == 2
    assert f"{marked_file(path)}:{line}:" in capsys.readouterr().out
