"""Every file in tests/data/invalid/ breaks one rule; the validator must report exactly that
error at the line its ``# <- RULE PATH`` marker is on (and nothing else).

A file that shows errors reported together (two at one path, or one in each of two
documents) has a marker for each: several on a line (``# <- RULE PATH <- RULE PATH``) or
on several lines; the validator must report exactly those."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from swarm_infra import cli, validate

DATA = Path(__file__).resolve().parents[1] / "data"
CORPUS = sorted((DATA / "invalid").glob("*.yaml"))
MARKER = re.compile(r"#\s*<-\s*(?P<rule>\S+)\s+(?P<path>\S+)(?P<more>(?:\s+<-\s*\S+\s+\S+)*)\s*$")
MORE = re.compile(r"<-\s*(\S+)\s+(\S+)")


def expectations(path: Path) -> tuple[list[tuple[int, str, str]], bool]:
    """Every marked (line, rule, path), in line order, and whether the file stands alone. A
    file whose error is in a file it names (a RayCluster's lock, ``<stem>.lock``) has the
    marker there."""
    text = path.read_text()
    found: list[tuple[int, str, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        m = MARKER.search(line)
        if m:
            found.append((number, m["rule"], m["path"]))
            found += [(number, rule, json_path) for rule, json_path in MORE.findall(m["more"])]
    if found:
        return found, text.startswith("# standalone")
    named = path.with_suffix(".lock")
    if named.exists():
        return expectations(named)[0], text.startswith("# standalone")
    raise AssertionError(f"{path} has no '# <- rule path' marker")


def expectation(path: Path) -> tuple[int, str, str, bool]:
    """The first marked line, rule and path, and whether the file stands alone."""
    found, standalone = expectations(path)
    return (*found[0], standalone)


def marked_file(path: Path) -> Path:
    """The file the marker is in: ``path``, or the lock file it names."""
    return path if any(MARKER.search(x) for x in path.read_text().splitlines()) else path.with_suffix(".lock")


def inputs(path: Path, standalone: bool) -> list[str]:
    return [str(path)] if standalone else [str(DATA / "base"), str(path)]


def test_corpus_covers_every_rule_family() -> None:
    rules = {rule for p in CORPUS for _, rule, _ in expectations(p)[0]}
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
    expected, standalone = expectations(path)
    errors = validate(inputs(path, standalone)).report.errors
    assert sorted((e.file, e.line, e.path, e.rule) for e in errors) == sorted(
        (str(marked_file(path)), line, json_path, rule) for line, rule, json_path in expected
    )
    assert all(e.col >= 1 and e.message for e in errors)


@pytest.mark.parametrize("path", CORPUS[:3] + CORPUS[-3:], ids=lambda p: p.stem)
def test_cli_exits_2_and_prints_the_location(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line, _, _, standalone = expectation(path)
    assert cli.main(["validate", *inputs(path, standalone)]) == 2
    assert f"{marked_file(path)}:{line}:" in capsys.readouterr().out
