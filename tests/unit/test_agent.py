"""The pull agent's pure decisions from fixtures, its report format, its settings, and the
fleet's pull declarations (schema, checks, rendered units)."""

from __future__ import annotations

import contextlib
import http.server
import json
import shutil
import subprocess
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from swarm_infra.agent import decide
from swarm_infra.agent.config import ConfigInvalid, parse_config
from swarm_infra.agent.decide import PeerReport
from swarm_infra.agent.engine import parse_stats
from swarm_infra.agent.report import Status, textfile
from swarm_infra.agent.run import run_once
from swarm_infra.resolve.pull import allowed_signers_problems, ref_name, remote_scheme

from .conftest import serve_http
from .pullfleet import copy_lab, declare_pull

A, B = "a" * 40, "b" * 40
ROLL = {"serial": [1, "50%"], "max_fail_percentage": 0}  # canary 1, then halves
NODES = ["n1", "n2", "n3", "n4", "n5"]  # batches: [n1], [n2, n3], [n4, n5]


# ---------------------------------------------------------------- decisions


def test_batches_are_push_modes_batches_over_the_pull_nodes_in_name_order() -> None:
    assert decide.batches(["n3", "n1", "n5", "n2", "n4"], ROLL) == [["n1"], ["n2", "n3"], ["n4", "n5"]]


def test_the_canary_never_waits() -> None:
    assert decide.gate("n1", B, A, NODES, ROLL, {}) == decide.PROCEED


def test_a_later_batch_waits_until_every_earlier_node_reports_the_commit_applied() -> None:
    reports = {"n1": PeerReport(B, "applied"), "n2": PeerReport(B, "applied"), "n3": PeerReport(A, "applied")}
    action = decide.gate("n4", B, A, NODES, ROLL, reports)
    assert (action.apply, action.result) == (False, "waiting") and "n3" in action.reason
    reports["n3"] = PeerReport(B, "applied")
    assert decide.gate("n4", B, A, NODES, ROLL, reports) == decide.PROCEED


@pytest.mark.parametrize(
    "seen", [None, PeerReport(B, "waiting"), PeerReport(B, "refused"), PeerReport(A, "applied")]
)
def test_an_unread_or_unfinished_report_is_not_success(seen: PeerReport | None) -> None:
    action = decide.gate("n2", B, A, NODES, ROLL, {"n1": seen})
    assert (action.apply, action.result) == (False, "waiting")


def test_a_failed_canary_halts_every_later_batch() -> None:
    action = decide.gate("n5", B, A, NODES, ROLL, {"n1": PeerReport(B, "failed")})
    assert (action.apply, action.result) == (False, "halted") and "n1" in action.reason


def test_a_failure_within_the_rollouts_tolerance_lets_the_next_batch_go() -> None:
    tolerant = {"serial": [1, "50%"], "max_fail_percentage": 50}
    reports = {"n1": PeerReport(B, "applied"), "n2": PeerReport(B, "failed"), "n3": PeerReport(B, "applied")}
    assert decide.gate("n4", B, A, NODES, tolerant, reports) == decide.PROCEED
    # With no tolerance the same reports halt the rollout.
    assert decide.gate("n4", B, A, NODES, ROLL, reports).result == "halted"


def test_reapplying_the_commit_a_node_holds_is_never_gated() -> None:
    assert decide.gate("n5", A, A, NODES, ROLL, {"n1": PeerReport(B, "failed")}) == decide.PROCEED


def test_gate_refuses_a_node_outside_the_pull_nodes() -> None:
    with pytest.raises(ValueError, match="n9"):
        decide.gate("n9", B, A, NODES, ROLL, {})


@pytest.mark.parametrize(
    "status, words",
    [("N", "no signature"), ("B", "bad signature"), ("U", "not in the allowed signers"),
     ("E", "cannot be checked"), ("R", "revoked"), ("X", "expired"), ("Y", "expired key"), ("?", "'?'")],
)  # fmt: skip
def test_only_a_good_signature_goes_on(status: str, words: str) -> None:
    assert decide.signature_action(B, "G") is None
    action = decide.signature_action(B, status, "SHA256:xyz")
    assert action is not None and (action.apply, action.result) == (False, "refused")
    assert (
        words in action.reason
        and "SHA256:xyz" in action.reason
        and "last good state is kept" in action.reason
    )


def test_a_commit_that_does_not_descend_from_the_last_good_one_is_refused() -> None:
    assert decide.ancestry_action(B, None, False) is None  # first run
    assert decide.ancestry_action(A, A, False) is None  # the same commit
    assert decide.ancestry_action(B, A, True) is None
    action = decide.ancestry_action(B, A, False)
    assert action is not None and action.result == "refused" and A[:12] in action.reason


def test_pause_and_last_good() -> None:
    assert decide.paused_action(False, "/p") is None
    stop = decide.paused_action(True, "/var/tmp/paused")
    assert stop is not None and stop.result == "paused" and "/var/tmp/paused" in stop.reason
    assert decide.after_apply(B, A, True) == (B, "applied")
    assert decide.after_apply(B, A, False) == (A, "failed")
    assert decide.after_apply(B, None, False) == (None, "failed")


# ------------------------------------------------------------------- engine output


def test_changed_and_failed_come_from_the_json_callbacks_stats() -> None:
    # ansible.posix.json (ansible/posix plugins/callback/json.py, v2_playbook_on_stats): one
    # document, "stats": {host: summarize(host)} with ok, changed, failures, unreachable, ...
    stats = '{"n1": {"ok": 9, "changed": 2, "failures": 1, "unreachable": 0}}'
    out = 'warning text\n{"plays": [], "stats": ' + stats + "}"
    assert parse_stats(out, "n1") == (2, 1)
    assert parse_stats(out, "n2") == (None, None)
    assert parse_stats("ERROR! no inventory", "n1") == (None, None)


# ----------------------------------------------------------------------- reports


def status(**kw: object) -> Status:
    base = dict(node="n1", ref="main", commit=B, result="applied", reason="applied", applied_commit=B,
                changed=2, failed=0, duration_s=12.5, finished_at=1_700_000_000.0,
                reboot_required=True, paused=False)  # fmt: skip
    return Status(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool")
def test_the_textfile_passes_promtool(tmp_path: Path) -> None:
    text = textfile(status(applied_commit=None, changed=None, failed=None, commit=""))
    done = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "job=" not in text and "_total" not in text


# What node_exporter serves beside the textfile collector's metrics.
NODE_EXPORTER = "# HELP node_load1 1m load average.\n# TYPE node_load1 gauge\nnode_load1 0.5\n"
HEALTHY = NODE_EXPORTER + textfile(status())  # commit B applied
INFO_LINE = next(line for line in HEALTHY.splitlines() if line.startswith("swarm_agent_report_info{"))
CLOSED = "http://127.0.0.1:1/metrics"  # nobody listens on port 1 (tcpmux)
Answer = Callable[[str], tuple[int, str, dict[str, str]]]


def gate_read(url: str) -> PeerReport | None:
    """A peer's report as the gate reads it: ``run_once``'s own reader (what ``swarm agent
    run`` reads the earlier batches with), whatever its name."""
    read = run_once.__kwdefaults__["read"]
    return read(url)


def waits(seen: PeerReport | None) -> bool:
    """Whether n2 (batch 2) waits for n1 (the canary) that reported ``seen`` for B."""
    action = decide.gate("n2", B, A, NODES, ROLL, {"n1": seen})
    return (action.apply, action.result) == (False, "waiting")


@contextlib.contextmanager
def serve(answer: Answer, asked: list[str]) -> Iterator[str]:
    """A real HTTP server on 127.0.0.1 whose every GET is ``answer(path)`` (status, body,
    headers); each request's path (a proxy's: the absolute URL) is appended to ``asked``."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            code, text, headers = answer(self.path)
            body = text.encode()
            self.send_response(code)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: object) -> None:
            pass

    with serve_http(Handler) as url:
        yield url


def metrics(page: str) -> Answer:
    """node_exporter serving ``page`` at /metrics, nothing elsewhere."""
    return lambda path: (200, page, {}) if path == "/metrics" else (404, "not found", {})


def test_the_gate_reads_a_peers_report_over_http(capsys: pytest.CaptureFixture[str]) -> None:
    page = NODE_EXPORTER + textfile(status(result="failed", applied_commit=A))
    with serve(metrics(page), []) as url:
        assert gate_read(f"{url}/metrics") == PeerReport(B, "failed")
        assert gate_read(f"{url}/nothing") is None  # 404
    assert gate_read(CLOSED) is None
    err = capsys.readouterr().err
    assert f"{url}/nothing: HTTP 404" in err and f"{CLOSED}: cannot be read" in err


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_the_gate_follows_no_redirect_to_a_healthy_peers_page(
    code: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """An earlier-batch node that answers "see that healthy peer's page" lends the later
    batch no success: the redirect is refused, the healthy page never asked for."""
    healthy_asked: list[str] = []
    with serve(metrics(HEALTHY), healthy_asked) as healthy:
        assert gate_read(f"{healthy}/metrics") == PeerReport(B, "applied")  # a success, read directly
        healthy_asked.clear()
        away = {"Location": f"{healthy}/metrics"}
        with serve(lambda path: (code, "", away), []) as hostile:
            seen = gate_read(f"{hostile}/metrics")
    assert seen is None and healthy_asked == []
    assert waits(seen)
    assert f"{hostile}/metrics: HTTP {code} redirect to {healthy}/metrics refused" in capsys.readouterr().err


def test_the_gate_uses_no_proxy_the_environment_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """With http_proxy naming a server that answers every request with a healthy report, a
    peer nobody answers for is still not done: its page comes from its address or not at
    all."""
    proxy_asked: list[str] = []
    with serve(lambda path: (200, HEALTHY, {}), proxy_asked) as proxy:
        for name in ("http_proxy", "HTTP_PROXY"):
            monkeypatch.setenv(name, proxy)
        for name in ("no_proxy", "NO_PROXY"):
            monkeypatch.delenv(name, raising=False)
        # urlopen builds its opener, reading the proxy environment, once per process; the
        # agent's process (one per run) is born with the environment set above.
        monkeypatch.setattr(urllib.request, "_opener", None)
        seen = gate_read(CLOSED)
    assert seen is None and proxy_asked == []
    assert waits(seen)


def _swap(old: str, new: str) -> str:
    assert old in HEALTHY, old  # the alteration applies to what the agent writes
    return HEALTHY.replace(old, new)


@pytest.mark.parametrize(
    "page, words",
    [
        (_swap(INFO_LINE, INFO_LINE + "\n" + INFO_LINE.replace(f'applied_commit="{B}"', 'applied_commit=""')),
         "swarm_agent_report_info: 2 samples"),
        (_swap('result="applied"', 'result="great"'), "result 'great' is not one of"),
        (_swap(f'commit="{B}",result', 'commit="nothex",result'), "commit 'nothex' is not a commit id"),
        (_swap(f'commit="{B}",result', f'commit="{B.upper()}",result'), "is not a commit id"),
        (NODE_EXPORTER, "swarm_agent_report_info: 0 samples"),
        ("\x1b]0;owned\x07" + HEALTHY, "not Prometheus text format"),
    ],
    ids=["two-report-infos", "unknown-result", "non-hex-commit", "upper-case-commit", "no-report", "garbage"],
)  # fmt: skip
def test_a_page_that_is_not_exactly_a_report_is_not_success(
    page: str, words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with serve(metrics(page), []) as url:
        seen = gate_read(f"{url}/metrics")
    assert seen is None and waits(seen)
    err = capsys.readouterr().err
    # Why, in the journal: one line, none of the node's control characters.
    assert f"{url}/metrics: " in err and words in err
    assert err.count("\n") == 1 and all(c.isprintable() for c in err.rstrip("\n"))


# ----------------------------------------------------------------- settings, inputs


def test_settings_are_checked_whole() -> None:
    good = (
        '{"node": "n1", "fleet": "lab", "remote": "https://git.example.org/f.git", "ref": "main", '
        '"engine": "ansible", "status_port": 9100}'
    )
    assert parse_config(good, "x").node == "n1"
    for bad, words in [
        (good.replace('"n1"', '"N 1"'), "$.node"),
        (good.replace('"lab"', '"../etc"'), "$.fleet"),
        (good.replace("https://git.example.org/f.git", "ext::sh -c touch% /tmp/x"), "Git remote"),
        (good.replace('"main"', '"--upload-pack=x"'), "branch"),
        (good.replace('"ansible"', '"pyinfra"'), "$.engine"),
        (good.replace("9100", "true"), "$.status_port"),
        (good.replace('"status_port": 9100', '"status_port": 9100, "extra": 1'), "exactly"),
        ("{", "not JSON"),
    ]:
        with pytest.raises(ConfigInvalid, match=r".*" + words.replace("$", r"\$").replace(".", r"\.")):
            parse_config(bad, "x")


@pytest.mark.parametrize(
    "remote",
    [
        "ext::sh -c id",
        "git://h/r",
        "h:repo.git",
        "-uhttps://x",
        "https://u:pw@h/r",
        "https://h/a b",
        "ssh:///r",
    ],
)
def test_remotes_the_agent_refuses(remote: str) -> None:
    with pytest.raises(ValueError):
        remote_scheme(remote)


def test_remotes_and_refs_the_agent_takes() -> None:
    assert [remote_scheme(r) for r in ("https://h/r.git", "ssh://git@h:22/r.git", "file:///srv/r.git")] == [
        "https",
        "ssh",
        "file",
    ]
    assert ref_name("release/2026-11") == "refs/heads/release/2026-11"
    for bad in ("-x", "a..b", "a.lock", "a/", "@{-1}", "a b", "HEAD^"):
        with pytest.raises(ValueError):
            ref_name(bad)


KEY = "AAAAC3NzaC1lZDI1NTE5AAAAIOQxQJhF2zz4pZl2bsm3C6i0u1FZSxiQwZ7Wc7d9Wn5R"


def test_allowed_signers_lines() -> None:
    # ssh-keygen(1) ALLOWED SIGNERS (OpenSSH 9.2): "principals [options] keytype base64 [comment]".
    good = f'# operators\nops@example.org,sre@example.org namespaces="git" ssh-ed25519 {KEY} laptop\n\n'
    assert allowed_signers_problems(good) == []
    assert allowed_signers_problems("# nobody\n") == [(0, "no signer: every commit would be refused")]
    problems = allowed_signers_problems(
        f"a@b cert-authority ssh-ed25519 {KEY}\na@b ssh-dss {KEY}\na@b ssh-rsa {KEY}\na@b ssh-ed25519 !!\n"
    )
    assert [line for line, _ in problems] == [1, 2, 3, 4]


# ------------------------------------------------------ the fleet and the real ansible

ROOT = Path(__file__).resolve().parents[2]


def pull_fleet(tmp_path: Path) -> Path:
    """A copy of the lab fleet whose lab-gpu-2 (a Ray worker) converges by pull
    (tests/unit/pullfleet.py)."""
    return declare_pull(copy_lab(tmp_path), ["lab-gpu-2"])


def test_a_pull_node_in_the_ray_cluster_that_peers_with_the_head_is_not_warned_about(tmp_path: Path) -> None:
    """lab-gpu-2 is a direct WireGuard peer of the Ray head: the head serves it the token over
    the mesh (tests/unit/test_ray_token.py has the relayed case, which is warned about)."""
    from swarm_infra.resolve import validate

    base = pull_fleet(tmp_path)
    report = validate([base / "inventory/lab", base / "policies/lab", base / "policies/shared"]).report
    assert report.ok
    assert [d.rule for d in report.diagnostics if d.rule.startswith("pull.")] == []


def test_the_agents_ansible_argv_runs_this_node_alone_with_the_local_connection(tmp_path: Path) -> None:
    """The real ansible-playbook takes the argv (``--list-hosts``: nothing runs) and the
    ``--limit`` leaves this node only in every play; the inventory plugin gives no
    ``ansible_connection`` that would outrank ``-c local`` (variable precedence)."""
    from swarm_infra.agent.engine import ansible_argv, ansible_env

    env = ansible_env(ROOT)
    listed = subprocess.run(
        [*ansible_argv(ROOT, "lab", "lab-gpu-2"), "--list-hosts"], cwd=ROOT, env=env,
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    hosts = {line.strip() for line in listed.splitlines() if line.startswith("      ")}
    assert hosts == {"lab-gpu-2"}
    shown = subprocess.run(
        ["ansible-inventory", "-i", str(ROOT / "inventory/lab"), "--host", "lab-gpu-2"], cwd=ROOT, env=env,
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "ansible_connection" not in json.loads(shown)


def test_an_ssh_fetch_names_the_deploy_key_file_never_its_content(tmp_path: Path) -> None:
    import shlex

    from swarm_infra.agent.git import fetch_argv

    key, known = tmp_path / "a dir" / "deploy_key", tmp_path / "known_hosts"
    key.parent.mkdir()
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nSECRET\n")
    argv = fetch_argv(tmp_path / "clone", "ssh://git@git.example.org/fleet.git", "main", key, known)
    assert "SECRET" not in " ".join(argv)
    # The remote and the refspec come after "--": never read as options.
    assert argv[argv.index("--") + 1 :] == [
        "ssh://git@git.example.org/fleet.git",
        "+refs/heads/main:refs/swarm/fetched",
    ]
    assert {"protocol.allow=never", "protocol.ssh.allow=always"} <= set(argv)
    # git runs core.sshCommand with a shell: the key's path survives a space, quoted.
    ssh = shlex.split(next(a for a in argv if a.startswith("core.sshCommand=")).split("=", 1)[1])
    assert ssh[ssh.index("-i") + 1] == str(key)
    assert {
        "BatchMode=yes",
        "StrictHostKeyChecking=yes",
        "IdentitiesOnly=yes",
        f"UserKnownHostsFile={known}",
    } <= set(ssh)
    https = fetch_argv(tmp_path / "clone", "https://git.example.org/fleet.git", "main")
    assert "protocol.https.allow=always" in https and not any(a.startswith("core.sshCommand") for a in https)
