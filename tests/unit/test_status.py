"""``swarm status``: the pull agents' reports read back, checked as untrusted, and judged
against the tracked ref (issue #27: the agent "reports what it did ... in a node_exporter
textfile and a status file that ``swarm status`` reads over the mesh").

Every page here is one the agent's own :func:`swarm_infra.agent.report.textfile` wrote
(optionally with node_exporter's metrics around it, or altered as a node could alter it),
and the real ``git`` answers ``ls-remote``."""

from __future__ import annotations

import dataclasses
import http.server
import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from swarm_infra.agent.decide import RESULTS
from swarm_infra.agent.git import GitError, remote_head
from swarm_infra.agent.report import (
    MAX_REPORT_BYTES,
    NodeReport,
    ReportInvalid,
    Status,
    parse_node_report,
    read_node_report,
    textfile,
)
from swarm_infra.agent.status import CONVERGED, judge, stale_after_s
from swarm_infra.cli import build_parser
from swarm_infra.cli.common import exit_code
from swarm_infra.cli.status import cmd_status
from swarm_infra.resolve import desired_state, load_fleet
from swarm_infra.resolve.files import AGENT_RUN_TIMEOUT_S

from .conftest import serve_http
from .test_agent import pull_fleet

A, B = "a" * 40, "b" * 40
NOW = 1_800_000_000.0
# node_exporter's own metrics, as it serves them beside the textfile collector's.
NODE_EXPORTER = (
    "# HELP node_load1 1m load average.\n# TYPE node_load1 gauge\nnode_load1 0.5\n"
    "# HELP node_textfile_scrape_error 1 if there was an error opening or reading a file.\n"
    "# TYPE node_textfile_scrape_error gauge\nnode_textfile_scrape_error 0\n"
)


def status(**kw: object) -> Status:
    base: dict[str, object] = dict(
        node="lab-gpu-2", ref="main", commit=B, result="applied", reason="applied", applied_commit=B,
        changed=3, failed=0, duration_s=42.5, finished_at=NOW - 60, reboot_required=False, paused=False,
    )  # fmt: skip
    return Status(**{**base, **kw})  # type: ignore[arg-type]


def expected(s: Status) -> NodeReport:
    """What the reader must give back for the agent's ``s``: its fields, by name."""
    fields = {f.name for f in dataclasses.fields(NodeReport)}
    return NodeReport(**{k: v for k, v in dataclasses.asdict(s).items() if k in fields})


# --------------------------------------------------------------- the page, parsed


@pytest.mark.parametrize(
    "s",
    [
        status(),
        status(result="failed", commit=B, applied_commit=A, changed=1, failed=2, reboot_required=True),
        status(result="fetch-failed", commit="", applied_commit=None, changed=None, failed=None),
        status(result="paused", commit="", paused=True, changed=None, failed=None),
        status(commit="c" * 64, applied_commit="c" * 64),  # SHA-256 repositories
    ],
)
def test_what_the_agent_wrote_is_read_back_field_by_field(s: Status) -> None:
    assert parse_node_report(textfile(s)) == expected(s)
    assert parse_node_report(
        NODE_EXPORTER + textfile(s) + NODE_EXPORTER.replace("load1", "load5")
    ) == expected(s)


def test_a_task_count_nothing_applied_has_no_sample_and_an_older_agents_minus_one_still_reads() -> None:
    unapplied = status(result="fetch-failed", commit="", applied_commit=None, changed=None, failed=None)
    page = textfile(unapplied)
    families = {f.name: f for f in text_string_to_metric_families(page)}
    assert "swarm_agent_changed_tasks" not in families and "swarm_agent_failed_tasks" not in families
    assert not [s for f in families.values() for s in f.samples if s.value == -1]
    # The page of an agent before #37: -1 for "nothing applied".
    older = page + "".join(
        f"# HELP {n} Tasks (-1: nothing applied).\n# TYPE {n} gauge\n{n} -1\n"
        for n in ("swarm_agent_changed_tasks", "swarm_agent_failed_tasks")
    )
    assert parse_node_report(older) == expected(unapplied)


def test_every_result_the_agent_can_report_is_read() -> None:
    assert [parse_node_report(textfile(status(result=r))).result for r in RESULTS] == list(RESULTS)


def _swap(old: str, new: str) -> Callable[[str], str]:
    def change(page: str) -> str:
        assert old in page, old  # the alteration applies to what the agent writes
        return page.replace(old, new)

    return change


GOOD = textfile(status())
INFO_LINE = next(line for line in GOOD.splitlines() if line.startswith("swarm_agent_report_info{"))


@pytest.mark.parametrize(
    "alter, words",
    [
        (_swap(INFO_LINE, INFO_LINE + "\n" + INFO_LINE.replace(B, A)), "swarm_agent_report_info: 2 samples"),
        (lambda p: p + INFO_LINE.replace(B, A) + "\n", "swarm_agent_report_info: of type unknown"),
        (_swap('result="applied"', 'result="owned"'), "result 'owned' is not one of"),
        (_swap(f'commit="{B}",result', 'commit="../../etc",result'), "commit '../../etc' is not a commit id"),
        (_swap(f'applied_commit="{B}"', 'applied_commit="HEAD"'), "applied_commit 'HEAD'"),
        (_swap('result="applied"}', 'result="applied",node="x"}'), "labels"),
        (_swap("} 1.0\n", "} 0.0\n"), "swarm_agent_report_info: value 0.0, expected 1"),
        (_swap("swarm_agent_last_run_duration_seconds 42.5\n", "swarm_agent_last_run_duration_seconds NaN\n"),
         "swarm_agent_last_run_duration_seconds: nan is not a finite number"),
        (_swap("swarm_agent_changed_tasks 3.0", "swarm_agent_changed_tasks 2.5"), "not a task count"),
        (_swap("swarm_agent_failed_tasks 0.0", "swarm_agent_failed_tasks -7"), "not a task count"),
        (_swap("swarm_agent_reboot_required 0.0", "swarm_agent_reboot_required 2"), "expected 0 or 1"),
        (_swap("# TYPE swarm_agent_paused gauge", "# TYPE swarm_agent_paused untyped"),
         "of type unknown, not gauge"),
        (_swap("# TYPE swarm_agent_paused gauge", "# TYPE swarm_agent_paused counter"),
         "of type counter, not gauge"),
        (lambda p: "\n".join(x for x in p.splitlines() if "swarm_agent_paused" not in x) + "\n",
         "swarm_agent_paused: 0 samples"),
        (lambda p: NODE_EXPORTER, "swarm_agent_report_info: 0 samples"),  # no textfile at all
        (lambda p: p + 'node_load1{a="\n', "not Prometheus text format"),
    ],
)  # fmt: skip
def test_a_page_that_is_not_exactly_the_agents_report_is_refused_with_a_reason(
    alter: Callable[[str], str], words: str
) -> None:
    with pytest.raises(ReportInvalid) as caught:
        parse_node_report(alter(GOOD))
    assert words in str(caught.value)
    assert "\n" not in str(caught.value)  # one line for the table


# ------------------------------------------------------------ the page, over HTTP


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    pages = {
        "/metrics": (200, NODE_EXPORTER + GOOD),
        "/huge": (200, "# " + "x" * MAX_REPORT_BYTES + "\n" + GOOD),
        "/latin1": (200, None),
        "/away": (302, None),
    }

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            code, text = pages.get(self.path, (404, "nothing here"))
            body = b"\xff\xfe caf\xe9" if self.path == "/latin1" else (text or "").encode()
            self.send_response(code)
            if code == 302:
                self.send_header("Location", "http://127.0.0.1:1/elsewhere")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: object) -> None:
            pass

    with serve_http(Handler) as url:
        yield url


def test_a_report_is_read_over_http(served: str) -> None:
    assert read_node_report(f"{served}/metrics") == expected(status())


@pytest.mark.parametrize(
    "path, words",
    [("/nothing", "HTTP 404"), ("/away", "redirect to http://127.0.0.1:1/elsewhere refused"),
     ("/huge", f"more than {MAX_REPORT_BYTES} bytes"), ("/latin1", "not UTF-8")],
)  # fmt: skip
def test_an_unreadable_page_is_said_so(served: str, path: str, words: str) -> None:
    with pytest.raises(ReportInvalid, match=words):
        read_node_report(f"{served}{path}")


@pytest.mark.parametrize("part", ["headers", "body"])
def test_a_node_that_trickles_its_page_is_cut_off_at_the_deadline(part: str) -> None:
    """Issue #38 item 6: the timeout bounded each socket read, so a node sending a byte
    every 0.8 s held a reader with ``timeout_s=1`` for 4.9 s, and a 1 MiB page for weeks.
    The whole exchange has one deadline (as Prometheus' scrape_timeout): a page trickled at
    a byte per 0.25 s, 12 s in all, is refused after about ``timeout_s``."""
    gone = threading.Event()
    page = (NODE_EXPORTER + GOOD)[:48].encode()

    class Trickle(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            head = b"HTTP/1.0 200 OK\r\nContent-Length: 48\r\n\r\n"
            if part == "body":
                self.wfile.write(head)
                self.wfile.flush()
            for byte in head + page if part == "headers" else page:
                # The hostile node's pace, not a synchronisation: the reader must not wait it out.
                if gone.wait(0.25):
                    return
                try:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                except OSError:
                    return

        def log_message(self, *a: object) -> None:
            pass

    with serve_http(Trickle) as url:
        began = time.monotonic()
        with pytest.raises(ReportInvalid, match="cannot be read") as caught:
            read_node_report(f"{url}/metrics", timeout_s=1)
        took = time.monotonic() - began
        gone.set()
    assert took < 3, took  # the old reader took the whole 12 s
    assert "within 1 s" in str(caught.value) or "timed out" in str(caught.value), caught.value


def test_a_node_nobody_answers_for_is_said_so() -> None:
    with pytest.raises(ReportInvalid, match="cannot be read"):
        read_node_report("http://127.0.0.1:1/metrics", timeout_s=1)


# ---------------------------------------------------------------- judged


STALE = stale_after_s(900, 60, AGENT_RUN_TIMEOUT_S)


@pytest.mark.parametrize(
    "s, current, now, words",
    [
        (status(), B, NOW, CONVERGED),
        (status(), A, NOW, f"holds {B[:12]}, the tracked ref is at {A[:12]}"),
        (status(), None, NOW, "commit is unknown"),
        (status(result="failed", applied_commit=B), B, NOW, "the last run failed"),
        (status(result="waiting", commit=A), A, NOW, "the last run waiting"),
        (status(result="paused", paused=True), B, NOW, "paused"),
        (status(), B, NOW - 60 + STALE + 1, "no report for"),
        (status(), B, NOW - 60 + STALE, CONVERGED),
        (status(finished_at=NOW + 3600), B, NOW, "ahead of this machine's clock"),
    ],
)
def test_a_node_is_converged_only_when_its_last_run_applied_the_tracked_commit_lately(
    s: Status, current: str | None, now: float, words: str
) -> None:
    assert words in judge(expected(s), current, now, STALE)


# ------------------------------------------------------------ the command


@pytest.fixture
def url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Where the lab-gpu-2 of :func:`pull_fleet` (the current directory now) serves its
    report: node_exporter on its mesh address, at the Rollout's status port."""
    base = pull_fleet(tmp_path)
    monkeypatch.chdir(base)
    state = desired_state(
        load_fleet([base / d for d in ("inventory/lab", "policies/lab", "policies/shared")])
    )
    node = state["nodes"]["lab-gpu-2"]
    assert node["mesh"] is not None and node["pull"] is not None
    return f"http://{node['mesh']['address'].split('/')[0]}:{node['pull']['status_port']}/metrics"


def _run(pages: dict[str, str], *argv: str) -> int:
    def read(where: str) -> NodeReport:
        if where not in pages:
            raise ReportInvalid(f"{where}: cannot be read (timed out)")
        return parse_node_report(pages[where])

    try:  # a refused argument or fleet exits 2 as `swarm` does (cli.main returns the code)
        args = build_parser().parse_args(["status", "--fleet", "lab", *argv])
        return cmd_status(args, read=read, clock=lambda: NOW)
    except SystemExit as exc:
        return exit_code(exc)


def test_status_shows_each_pull_node_and_exits_0_when_all_hold_the_tracked_commit(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    page = NODE_EXPORTER + textfile(status(reboot_required=True))
    code = _run({url: page}, "--commit", B, "--format", "json")
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert [r["node"] for r in out["nodes"]] == ["lab-gpu-2"]  # the pull nodes only
    row = out["nodes"][0]
    assert (row["state"], row["at_current"], row["url"]) == (CONVERGED, True, url)
    assert {k: row["report"][k] for k in ("applied_commit", "changed", "failed", "duration_s")} == {
        "applied_commit": B, "changed": 3, "failed": 0, "duration_s": 42.5,
    }  # fmt: skip
    assert row["report"]["reboot_required"] is True and row["report"]["age_s"] == 60
    assert (out["ref"], out["current"]) == ("main", B)


def test_status_exits_1_for_a_node_behind_and_names_an_unreadable_one(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    page = textfile(status())
    assert _run({url: page}, "--commit", A) == 1
    text = capsys.readouterr().out
    assert f"holds {B[:12]}, the tracked ref is at {A[:12]}" in text
    assert "0 of 1 pull node(s) converged" in text
    assert _run({}, "--commit", B) == 1
    assert "unreadable: " + url + ": cannot be read (timed out)" in capsys.readouterr().out
    # A node's own words (an HTTP reason phrase) reach the terminal without its escapes.
    assert _run({url: "\x1b[2J\x1b]0;owned\x07"}, "--commit", B) == 1
    assert "\x1b" not in capsys.readouterr().out
    lying = textfile(status()).replace('result="applied"', 'result="applied\\nNODE  ok"')
    assert _run({url: lying}, "--commit", B) == 1
    text = capsys.readouterr().out
    # The label's newline stays escaped in the row: the page cannot add a line to the table.
    assert "is not one of" in text and not any(line.startswith("NODE  ok") for line in text.splitlines())


def test_status_exits_1_when_the_tracked_commit_cannot_be_read(
    url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # pull_fleet's remote is https://git.example.org/f.git: nothing answers here.
    monkeypatch.setattr("swarm_infra.cli.status.git.remote_head", _no_remote)
    assert _run({url: textfile(status())}) == 1
    assert "tracked ref main: unknown (no answer)" in capsys.readouterr().out


def _no_remote(remote: str, ref: str) -> str:
    raise GitError("no answer")


@pytest.mark.parametrize("argv", [("--commit", "HEAD"), ("--forks", "0"), ("--fleet", "nosuch")])
def test_status_exits_2_for_invalid_arguments(url: str, argv: tuple[str, ...]) -> None:
    assert _run({}, *argv) == 2


def test_a_fleet_without_pull_nodes_has_nothing_to_read(monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
    monkeypatch.chdir(root)
    args = build_parser().parse_args(["status", "--fleet", "lab"])
    assert cmd_status(args, read=_never) == 0


def _never(url: str) -> NodeReport:
    raise AssertionError(f"read {url}")


# ------------------------------------------------------------ the tracked commit


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def test_the_tracked_commit_is_the_remotes_branch_by_the_real_git(tmp_path: Path) -> None:
    repo = tmp_path / "fleet"
    repo.mkdir()
    _git("init", "-q", "-b", "main", cwd=repo)
    _git("-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "--allow-empty", "-m", "one", cwd=repo)
    _git("branch", "main-old", cwd=repo)  # a branch whose name starts like the tracked one
    _git("-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "--allow-empty", "-m", "two", cwd=repo)
    assert remote_head(f"file://{repo}", "main") == _git("rev-parse", "main", cwd=repo)
    with pytest.raises(GitError, match="no branch nosuch"):
        remote_head(f"file://{repo}", "nosuch")
    with pytest.raises(ValueError):
        remote_head("ext::sh -c id", "main")
