"""One front for every ``swarm`` command (#37): one output path (a reader that leaves early
ends the output, not the command), one ``--limit`` grammar, one ``--format`` vocabulary,
renamed options that still work with a warning, help that reads its defaults from argparse."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from swarm_infra import cli
from swarm_infra.engines.inventory import node_groups
from swarm_infra.metrics.history import RunInfo
from swarm_infra.resolve import desired_state, hostpattern, load_fleet

from .conftest import ROOT, fleet_dirs
from .test_cli_front import _commands, swarm
from .test_metrics_cli import LAB_NODES
from .test_metrics_cli import _run as record_run

DATA = ROOT / "tests" / "data" / "metrics"
COMMIT = "0" * 40


def groups_of(fleet: str) -> dict[str, list[str]]:
    """``{node: its groups}`` as the engines' inventory gives them."""
    state = desired_state(load_fleet(fleet_dirs(fleet)))
    return {n: node_groups(s) for n, s in state["nodes"].items()}


# --- --limit: Ansible's host patterns (ansible-core inventory/manager.py) -----------------


def test_limit_takes_hosts_and_groups_with_globs() -> None:
    """Moved from test_pyinfra_engine.py (the pyinfra engine's own parser is gone: it gets
    the names this one selects)."""
    hosts = groups_of("lab")
    names = set(hosts)
    assert set(hostpattern.select("all", hosts)) == names
    assert hostpattern.select("lab-gpu-1", hosts) == ["lab-gpu-1"]
    by_group = {h for h, g in hosts.items() if "site_lab_a" in g}
    assert by_group and set(hostpattern.select("site_lab_a", hosts)) == by_group
    assert set(hostpattern.select("lab-gpu-*,lab-head-1", hosts)) == names & (
        {"lab-head-1"} | {n for n in names if n.startswith("lab-gpu-")}
    )
    with pytest.raises(ValueError, match="no node named nothing-like-this, nor a group"):
        hostpattern.select("nothing-like-this", hosts)


def test_limit_intersects_and_excludes_in_ansibles_order() -> None:
    hosts = groups_of("lab")
    gpu = {h for h, g in hosts.items() if "gpu" in g}
    site_a = {h for h, g in hosts.items() if "site_lab_a" in g}
    assert gpu - site_a and gpu & site_a  # the lab has GPU nodes in both sites
    assert set(hostpattern.select("gpu:&site_lab_a", hosts)) == gpu & site_a
    assert set(hostpattern.select("gpu,!site_lab_a", hosts)) == gpu - site_a
    # Ansible applies the plain terms first, then &, then !, whatever the order written.
    assert set(hostpattern.select("!site_lab_a,gpu", hosts)) == gpu - site_a
    # Only exclusions: from all.
    assert set(hostpattern.select("!gpu", hosts)) == set(hosts) - gpu
    assert hostpattern.select("site_*", hosts) == list(hosts)  # a glob over group names too
    assert hostpattern.select("lab-gpu-1, lab-gpu-1", hosts) == ["lab-gpu-1"]


@pytest.mark.parametrize(
    ("pattern", "said"),
    [
        ("lab-x-*", "'lab-x-*' matches no node or group"),
        ("lab-gpu-1,nope", "no node named nope, nor a group (groups: all, gpu, "),
        ("gpu:!gpu", "leaves no node"),
        (",", "names no node or group"),
        ("!", "is not a node, group or glob"),
        ("~lab.*", "regular expressions are not taken"),
    ],
)
def test_limit_refuses_what_selects_nothing(pattern: str, said: str) -> None:
    with pytest.raises(ValueError, match=re.escape(said)):
        hostpattern.select(pattern, groups_of("lab"))


@pytest.mark.parametrize(
    "argv",
    [
        ["metrics", "accept", "--fleet", "lab", "--limit", "lab-x-*"],
        ["metrics", "run", "--fleet", "lab", "--limit", "nope"],
        ["metrics", "run", "--fleet", "lab", "--limit", ","],
        ["verify", "--fleet", "lab", "--limit", "!"],
    ],
)
def test_every_limit_refuses_a_term_that_selects_nothing_in_one_line(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr("swarm_infra.hosttools.missing", lambda areas: [])
    record_run(tmp_path / "m.db")
    assert swarm([*argv, "--db", str(tmp_path / "m.db")] if argv[0] == "metrics" else argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "--limit" in err and "Traceback" not in err, err


def test_metrics_accept_judges_the_nodes_a_group_selects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "m.db"
    record_run(db, info=RunInfo(parts=("network", "storage", "gpu"), nodes=LAB_NODES))
    lab = [str(d) for d in fleet_dirs("lab")]
    swarm(["metrics", "accept", *lab, "--db", str(db), "--limit", "role_head"])
    judged = capsys.readouterr().out
    heads = [n for n, g in groups_of("lab").items() if "role_head" in g]
    assert f"of {len(heads)} nodes accepted" in judged, judged


# --- --format: one vocabulary; renamed spellings warn ------------------------------------


def _format_choices() -> Iterator[tuple[str, tuple[str, ...]]]:
    for words, _, parser in _commands(cli.build_parser()):
        for action in parser._actions:
            if "--format" in action.option_strings:
                yield " ".join(words), tuple(action.choices or ())


def test_every_format_is_one_of_the_vocabulary() -> None:
    from swarm_infra.cli.common import FORMATS

    found = dict(_format_choices())
    assert {"validate", "plan", "status", "review", "lab status", "metrics run", "metrics import"} <= set(
        found
    )
    assert all(set(c) <= set(FORMATS) for c in found.values()), found
    assert "table" not in {c for cs in found.values() for c in cs}


def test_the_old_format_table_is_text_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ping = str(DATA / "ping-loopback.txt")
    assert swarm(["metrics", "import", "--db", str(tmp_path / "a.db"), ping]) == 0
    text = capsys.readouterr()
    assert swarm(["metrics", "import", "--db", str(tmp_path / "b.db"), "--format", "table", ping]) == 0
    table = capsys.readouterr()
    assert table.out == text.out and text.err == ""
    assert "warning: --format table is now --format text" in table.err


# --- render --diff-against (was --check) -------------------------------------------------


def test_render_diff_against_and_the_old_check_spelling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(ROOT)
    assert swarm(["render", "--fleet", "example", "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    assert swarm(["render", "--fleet", "example", "--diff-against", str(tmp_path)]) == 0
    new = capsys.readouterr()
    assert "up to date" in new.out and new.err == ""
    assert swarm(["render", "--fleet", "example", "--check", str(tmp_path)]) == 0
    old = capsys.readouterr()
    assert old.out == new.out
    assert "warning: --check is now --diff-against" in old.err
    (tmp_path / "00-namespace.yaml").write_text("changed\n")
    assert swarm(["render", "--fleet", "example", "--diff-against", str(tmp_path)]) == 1


# --- argument checks beside their options; help reads its defaults -----------------------


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["status", "--forks", "0"], "swarm status: --forks must be at least 1, not 0"),
        (["status", "--commit", "HEAD"], "swarm status: --commit 'HEAD' is not a full commit id"),
        (["metrics", "run", "--only", "gpu,disk"], "--only 'gpu,disk': choose from network"),
        (["metrics", "run", "--max-error-rate", "2"], "--max-error-rate must be a fraction from 0 to 1"),
        (["metrics", "run", "--repeats", "-1"], "--repeats must be at least 0, not -1"),
        (["metrics", "run", "--duration", "x"], "--duration 'x': expected a whole number"),
        (["metrics", "import", "--label", "1=a", "f"], "--label '1=a': expected KEY=VALUE"),
        (["review", "--base", "HEAD", "--max-chars", "-1"], "--max-chars must be at least 0, not -1"),
        (["validate", "--format", "yaml"], "--format: invalid choice: 'yaml'"),
    ],
)
def test_an_argument_is_checked_as_it_is_parsed(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused by the parser, before any command runs: one line, the option first."""
    parser = cli.build_parser()
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [err.rstrip("\n")] and said in err, err


def test_no_help_writes_its_default_by_hand() -> None:
    """A default written into a help string goes stale when the default changes: argparse's
    ``%(default)s`` says it."""
    by_hand = []
    for words, _, parser in _commands(cli.build_parser()):
        for action in parser._actions:
            default, text = action.default, action.help or ""
            if default in (None, False, [], argparse.SUPPRESS) or text == argparse.SUPPRESS:
                continue
            shown = default if isinstance(default, str) else str(default)
            if re.search(rf"default:? {re.escape(shown)}\b", text):
                by_hand.append(f"{' '.join(words)} {action.option_strings}")
    assert by_hand == []


# --- one output path: `swarm X | head -1` ------------------------------------------------


def _pipe_cases() -> list[tuple[list[str], int]]:
    """(argv, the documented exit code) of every command that needs neither root nor a lab,
    with each --format it takes, against the lab and example fleets. ``{tmp}``: a directory
    of the test's own; ``{how}``: which of the two runs."""
    ping, iperf3 = str(DATA / "ping-loopback.txt"), str(DATA / "iperf3-single.json")
    cases: list[tuple[list[str], int]] = []
    for fleet in ("lab", "example"):
        f = ["--fleet", fleet]
        for fmt in ("text", "json"):
            cases += [(["validate", *f, "--format", fmt], 0), (["plan", *f, "--format", fmt], 0)]
            cases += [(["status", *f, "--commit", COMMIT, "--format", fmt], 0)]  # no pull node
        cases += [(["render", *f], 0), (["mesh", "allocate", *f, "--output", f"{{tmp}}/{fleet}.yaml"], 0)]
    for fmt in ("text", "json", "prometheus"):
        cases.append((["metrics", "import", "--db", "{tmp}/m.db", "--format", fmt, ping, iperf3], 0))
    # A run with lab-head-1's fio only: the lab's other nodes have no measurement (exit 1).
    cases.append((["metrics", "accept", "--fleet", "lab", "--db", "{tmp}/accept.db"], 1))
    cases += [(["review", "--base", "HEAD", "--format", fmt], 0) for fmt in ("markdown", "json")]
    cases += [(["lab", "status", "--format", fmt], 0) for fmt in ("text", "json")]  # no lab is up
    cases += [(["stacks", "--format", fmt], 0) for fmt in ("text", "json")]  # the repository's stacks
    cases.append((["init", "piped", "--dir", "{tmp}/{how}"], 0))  # a new ROOT for each run
    return cases


PIPE_CASES = _pipe_cases()


@pytest.mark.parametrize(("case", "expected"), PIPE_CASES, ids=[" ".join(c) for c, _ in PIPE_CASES])
def test_every_command_keeps_its_exit_code_when_its_reader_leaves(
    case: list[str], expected: int, tmp_path: Path
) -> None:
    """``swarm render | head -1`` exited 1 (a BrokenPipeError; ``swarm lab status`` said
    "[Errno 32] Broken pipe"): a reader that leaves ends the output, not the command. Twice:
    the reader gone before the first byte (every write fails), and ``| head -1`` (a real
    shell pipe, closed after one line). No traceback, no "Exception ignored" at exit."""
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(cli.__file__).resolve().parents[2]),
        "SWARM_LAB_DIR": str(tmp_path / "lab"),
        "SWARM_STATE_DIR": str(tmp_path / "state"),
    }
    record_run(tmp_path / "accept.db")
    said: dict[str, tuple[int, str]] = {}
    for how in ("closed", "head"):
        (tmp_path / how).mkdir()
        argv = [a.replace("{tmp}", str(tmp_path)).replace("{how}", how) for a in case]
        command = [sys.executable, "-m", "swarm_infra.cli", *argv]
        if how == "closed":
            read, write = os.pipe()
            os.close(read)  # the reader is gone before the first byte
            done = subprocess.run(
                command, stdout=write, stderr=subprocess.PIPE, env=env, cwd=ROOT, text=True, timeout=120
            )
            os.close(write)
            said[how] = done.returncode, done.stderr
        else:
            script = " ".join(map(shlex.quote, command)) + " | head -1; echo ${PIPESTATUS[0]}"
            done = subprocess.run(
                ["bash", "-c", script], capture_output=True, env=env, cwd=ROOT, text=True, timeout=120
            )
            first, _, code = done.stdout.rstrip("\n").rpartition("\n")
            said[how] = int(code), done.stderr
            assert first or expected != 0, "head -1 read no line"
    for how, (code, err) in said.items():
        assert code == expected, (how, err)
        assert not [w for w in ("Traceback", "Exception ignored", "BrokenPipe", "Broken pipe") if w in err], (
            how,
            err,
        )


def test_every_commands_help_into_a_closed_pipe_exits_0(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every command, those that need root or a lab too, through the one output path: its
    --help (the longest are longer than a pipe's buffer) to a reader that has gone."""
    commands = [list(words) for words, _, _ in _commands(cli.build_parser())]
    assert len(commands) > 20
    failed = []
    for words in [[], *commands]:
        read, write = os.pipe()
        os.close(read)
        with capsys.disabled(), open(write, "w", encoding="utf-8") as closed:
            monkeypatch.setattr(sys, "stdout", closed)
            code = cli.main([*words, "--help"])
            monkeypatch.undo()
        if code != 0:
            failed.append(f"{' '.join(words)} --help: exit {code}")
    assert failed == []
