"""A newcomer's first hour with ``swarm`` (#36): wrong inputs get one line and exit 2, never a
traceback; ``--version``; a description for every command; one table of exit codes."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path

import pytest

from swarm_infra import cli, hosttools
from swarm_infra.metrics.history import History

from .conftest import ROOT, fleet_dirs

DATA = ROOT / "tests" / "data" / "metrics"
DIAGNOSTIC = re.compile(r"\S+:\d+:\d+: (?:error|warning)\[|\d+ error\(s\), \d+ warning\(s\)$")
"""A line of the validator's report (fleet/diagnostics.py, Report.text)."""
PING = str(DATA / "ping-loopback.txt")


def swarm(argv: list[str]) -> int:
    """``swarm ARGV``'s exit code; argparse's usage errors (SystemExit) included."""
    try:
        return cli.main(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1


@pytest.fixture
def where(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory outside the repository, the current one, holding what a newcomer points
    commands at by mistake: a text file, a directory, broken YAML, binary junk, a database
    with no run."""
    (tmp_path / "afile.txt").write_text("hello\n")
    (tmp_path / "adir").mkdir()
    (tmp_path / "bad.yaml").write_text("a: [1, 2\n  b: {\n")
    (tmp_path / "junk.bin").write_bytes(b"\xff\xfe\x00\x01junk")
    History(tmp_path / "empty.db").close()
    monkeypatch.chdir(tmp_path)
    # Every case is about its input and stops before any host program runs; a machine without
    # a command's host tools would stop it earlier (exit 2 too), for another reason.
    monkeypatch.setattr(hosttools, "missing", lambda areas: [])
    return tmp_path


LAB = [str(d) for d in fleet_dirs("lab")]

# (argv, the words stderr must have: the thing named and what was expected; None: a
# command whose report is its output, e.g. validate's diagnostics on stdout). Never a
# command that would act on a valid input (lab up, mesh controller-up/down, converge, verify
# run from this directory stop at the fleet or the repository root).
CASES: list[tuple[list[str], str | None]] = [
    (["validate", "nope"], None),
    (["validate", "bad.yaml"], None),
    (["validate", "junk.bin"], None),
    (["plan", "--fleet", "nope"], "nope"),
    (["render", *LAB, "--out", "afile.txt"], "--out afile.txt: not a directory"),
    (["render", *LAB, "--out", "afile.txt/sub"], "afile.txt is a file"),
    (["render", *LAB, "--check", "afile.txt"], "--check afile.txt: not a directory"),
    (["render", *LAB, "--check", "nope"], "--check nope: no such directory"),
    (["render", "--fleet", "nope"], "nope"),
    (["review", "--base", "HEAD", "--out", "adir"], "--out adir: a directory"),
    (["review", "--base", "HEAD", "--full", "nodir/full.md"], "--full nodir/full.md: its directory nodir"),
    (["converge", "--fleet", "nope"], "repository root"),
    (["verify", "-i", "bad.yaml"], "repository root"),
    (["mesh", "allocate", "bad.yaml"], None),
    (["mesh", "allocate", *LAB, "--output", "adir"], "--output adir: a directory"),
    (["mesh", "allocate", *LAB, "--output", "nodir/x.yaml"], "its directory nodir does not exist"),
    (["mesh", "allocate", *LAB, "--output", "bad.yaml"], "bad.yaml: not valid YAML"),
    (["mesh", "allocate", *LAB, "--output", "junk.bin"], "junk.bin: not UTF-8 text"),
    (["mesh", "controller-key", "--key", "adir"], "--key adir: a directory"),
    (["mesh", "controller-key", "--key", "afile.txt/k"], "afile.txt is a file"),
    (["mesh", "controller-up", "-i", "nope"], "nope is not a fleet inventory"),
    (["mesh", "controller-down", "-i", "bad.yaml"], "bad.yaml"),
    (["metrics", "import", "nope"], "nope: No such file"),
    (["metrics", "import", "adir"], "adir"),
    (["metrics", "import", "--db", "afile.txt", PING], "afile.txt: not a usable metrics database"),
    (
        ["metrics", "import", "--db", "m.db", "--plots", "afile.txt", PING],
        "--plots afile.txt: not a directory",
    ),
    (
        ["metrics", "import", "--db", "m.db", "--write-latency-matrix", "adir", PING],
        "--write-latency-matrix adir: a directory",
    ),
    (["metrics", "import", "--db", "m.db", "--started-at", "yesterday", PING], "expected an ISO 8601 time"),
    (["metrics", "run", "--fleet", "nope", "--plots", "afile.txt"], "--plots afile.txt: not a directory"),
    (["metrics", "run", "--fleet", "nope", "--db", "afile.txt"], "afile.txt: not a usable metrics database"),
    (["metrics", "accept", *LAB, "--db", "afile.txt"], "afile.txt: not a usable metrics database"),
    (["metrics", "accept", *LAB, "--db", "junk.bin"], "junk.bin: not a usable metrics database"),
    (["metrics", "accept", *LAB, "--db", "empty.db"], "no run of fleet lab recorded in empty.db"),
    (["metrics", "accept", *LAB, "--db", "nope.db"], "no run of fleet lab recorded in nope.db"),
    (["metrics", "accept", *LAB, "--db", "empty.db", "--limit", "nope"], "--limit: no node named nope"),
    (["metrics", "accept", "--fleet", "nope"], "nope"),
    (["status", "bad.yaml"], "bad.yaml"),
    (["agent", "run", "--config", "adir"], "adir"),
    (["agent", "run", "--config", "bad.yaml"], "bad.yaml"),
    (["lab", "fleet", "--nodes", "3"], "no lab fleet (inventory/lab) here"),
    (["validate", "--no-such-option"], None),  # argparse's usage error: exit 2, its own message
]


@pytest.mark.parametrize(("argv", "said"), CASES, ids=[" ".join(a).replace(str(ROOT), "R") for a, _ in CASES])
def test_a_wrong_input_gets_one_line_and_exit_2_never_a_traceback(
    where: Path, capsys: pytest.CaptureFixture[str], argv: list[str], said: str | None
) -> None:
    code = swarm(argv)  # an exception escaping fails the test
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert "Traceback" not in out + err and "Error:" not in err, err
    if said is not None:
        assert said in err, err
        # One line naming the thing, beside the validator's report where a fleet is the why.
        said_lines = [line for line in err.splitlines() if not DIAGNOSTIC.match(line)]
        assert len(said_lines) <= 1 and err.endswith("\n"), err
    if argv[:3] == ["metrics", "accept", *LAB[:1]] and "nope.db" in argv:
        assert not (where / "nope.db").exists()  # judging makes no database


def test_version_is_the_installed_distributions(capsys: pytest.CaptureFixture[str]) -> None:
    assert swarm(["--version"]) == 0
    assert capsys.readouterr().out == f"swarm {metadata.version('swarm-infra')}\n"


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], str | None, argparse.ArgumentParser]]:
    """(command words, its line in its group's help, its parser) for every subcommand."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield (*path, name), helps.get(name), sub
                yield from _commands(sub, (*path, name))


def test_every_command_has_a_help_line_and_a_description() -> None:
    commands = list(_commands(cli.build_parser()))
    assert {"metrics import", "metrics accept", "lab status"} <= {" ".join(c) for c, _, _ in commands}
    missing = [" ".join(c) for c, help, sub in commands if not (help and help.strip() and sub.description)]
    assert missing == []


def _parsers() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    parser = cli.build_parser()
    yield "swarm", parser
    for words, _, sub in _commands(parser):
        yield " ".join(words), sub


def test_exit_codes_are_said_once_and_every_command_keeps_to_them() -> None:
    from swarm_infra.cli.common import EXIT_CODES

    assert cli.build_parser().epilog == EXIT_CODES
    assert re.findall(r"(?:: |; )([0-9]) ", EXIT_CODES) == ["0", "1", "2"]
    for name, parser in _parsers():
        text = " ".join(filter(None, (parser.description, parser.epilog)))
        # A restatement says what 0, 1 and 2 are for the command, each once; 1 is never
        # "invalid input" nor 2 an "unexpected failure": what they are is EXIT_CODES'.
        for said in re.findall(r"Exit codes?: (.*?)(?:\. [A-Z]|$)", text):
            codes = re.findall(r"(?:^|; |, )([0-9]) ", said)
            assert len(codes) == len(set(codes)) and set(codes) <= {"0", "1", "2"}, (name, said)
        if parser.epilog != EXIT_CODES:
            assert "unexpected failure" not in text, name
            assert not re.search(r"\b1 (?:an? )?invalid", text), name


@pytest.mark.parametrize(
    "make",
    [
        lambda d: ["render", *LAB, "--out", str(d / "afile.txt")],
        lambda d: ["mesh", "allocate", *LAB, "--output", str(d / "adir")],
        lambda d: ["metrics", "import", "--db", str(d / "m.db"), "--plots", str(d / "afile.txt"), PING],
    ],
)
def test_an_output_refused_leaves_everything_as_it_was(
    where: Path, capsys: pytest.CaptureFixture[str], make: Callable[[Path], list[str]]
) -> None:
    """Refused before any work: no database made, no file written."""
    before = sorted(p.name for p in where.iterdir())
    assert swarm(make(where)) == 2
    assert sorted(p.name for p in where.iterdir()) == before
    assert (where / "afile.txt").read_text() == "hello\n"
