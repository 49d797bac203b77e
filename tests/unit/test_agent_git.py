"""The pull agent's run against REAL git and REAL SSH signatures, in temporary repositories.

Signing is OpenSSH's: ``ssh-keygen`` makes the keys, git signs with ``gpg.format=ssh`` and
``user.signingkey`` (git-config(1), Git 2.39) and verifies against an allowed signers file
(ssh-keygen(1), ALLOWED SIGNERS, OpenSSH 9.2: ``principals [options] keytype base64``).
The fleet is the lab fleet, copied into the repository, with lab-gpu-2 converging by pull
(tests/unit/pullfleet.py).
Only the engine's process is replaced (:func:`swarm_infra.agent.engine.spawn`): its argv
is asserted and it answers as ``ansible.posix.json`` would.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from swarm_infra.agent import engine
from swarm_infra.agent.config import AgentConfig, Paths
from swarm_infra.agent.run import run_once
from swarm_infra.resolve.pull import allowed_signers_problems

from .pullfleet import copy_lab, declare_pull

NODE = "lab-gpu-2"
ISOLATED = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "HOME": "/nonexistent"}

pytestmark = pytest.mark.skipif(
    shutil.which("git") is None or shutil.which("ssh-keygen") is None, reason="needs git and ssh-keygen"
)


def sh(*argv: str, cwd: Path | None = None) -> str:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")} | ISOLATED
    return subprocess.run(argv, cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def keypair(path: Path) -> str:
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path))
    kind, data, _ = path.with_suffix(".pub").read_text().split(" ", 2)
    return f"{kind} {data}"


class Fleet:
    """A fleet repository (work tree ``src``) pushed to a bare ``remote``."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.src, self.remote = tmp, tmp / "src", tmp / "remote.git"
        self.known, self.stranger = tmp / "operator", tmp / "stranger"
        known_pub = keypair(self.known)
        keypair(self.stranger)
        self.signers = f'operator@example.org namespaces="git" {known_pub}\n'
        sh("git", "init", "-q", "--bare", "-b", "main", str(self.remote))
        sh("git", "init", "-q", "-b", "main", str(self.src))
        declare_pull(copy_lab(self.src), [NODE], remote=f"file://{self.remote}", signers=self.signers)

    def commit(self, message: str, key: Path | None) -> str:
        (self.src / "CHANGES").open("a").write(message + "\n")
        sh("git", "add", "-A", cwd=self.src)
        sign = ["-c", "gpg.format=ssh", "-c", f"user.signingkey={key}"] if key else []
        who = ["-c", "user.name=Operator", "-c", "user.email=operator@example.org"]
        sh("git", *who, *sign, "commit", "-q", *(["-S"] if key else []), "-m", message, cwd=self.src)
        return sh("git", "rev-parse", "HEAD", cwd=self.src).strip()

    def push(self, force: str | None = None) -> None:
        sh(
            "git",
            "push",
            "-q",
            "--force",
            str(self.remote),
            f"{force or 'HEAD'}:refs/heads/main",
            cwd=self.src,
        )


@pytest.fixture
def fleet(tmp_path: Path) -> Fleet:
    return Fleet(tmp_path)


@pytest.fixture
def node(tmp_path: Path, fleet: Fleet) -> Paths:
    """The node's files under a temporary root, as swarm node bootstrap leaves them."""
    paths = Paths.node(tmp_path / "node")
    paths.allowed_signers.parent.mkdir(parents=True)
    paths.allowed_signers.write_text(fleet.signers)
    return paths


class Engine:
    """Stands in for ansible-playbook's process: records argv, answers with stats."""

    def __init__(
        self, monkeypatch: pytest.MonkeyPatch, rc: int = 0, changed: int = 2, failures: int = 0
    ) -> None:
        self.calls: list[dict[str, Any]] = []
        self.rc, self.changed, self.failures = rc, changed, failures
        monkeypatch.setattr(engine, "spawn", self)

    def __call__(self, argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append({"argv": argv, **kw})
        stats = {NODE: {"ok": 10, "changed": self.changed, "failures": self.failures, "unreachable": 0}}
        return subprocess.CompletedProcess(argv, self.rc, json.dumps({"plays": [], "stats": stats}), "")


def config_of(remote: str) -> AgentConfig:
    return AgentConfig(node=NODE, fleet="lab", remote=remote, ref="main", engine="ansible", status_port=9100)


def config(fleet: Fleet) -> AgentConfig:
    return config_of(f"file://{fleet.remote}")


def test_a_commit_signed_by_an_allowed_signer_is_applied_with_ansible_locally(
    fleet: Fleet, node: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    c1 = fleet.commit("first", fleet.known)
    fleet.push()
    eng = Engine(monkeypatch, changed=3)
    status = run_once(config(fleet), node)
    assert (status.result, status.commit, status.applied_commit) == ("applied", c1, c1)
    assert (status.changed, status.failed) == (3, 0)
    tree = node.trees / c1
    # The same playbook as push mode, on this machine only, from the verified commit's tree.
    assert [c["argv"] for c in eng.calls] == [
        ["ansible-playbook", "-i", str(tree / "inventory/lab"), "-c", "local", "--limit", NODE,
         str(tree / "playbooks/site.yml")]
    ]  # fmt: skip
    env = eng.calls[0]["env"]
    assert eng.calls[0]["cwd"] == tree and env["ANSIBLE_CONFIG"] == str(tree / "ansible.cfg")
    assert env["PYTHONPATH"].split(":")[0] == str(tree / "src")  # the commit's own library
    assert (tree / "policies/lab/rollout.yaml").is_file()
    assert json.loads(node.status.read_text())["applied_commit"] == c1
    assert f'swarm_agent_report_info{{applied_commit="{c1}",commit="{c1}",result="applied"}} 1.0' in (
        node.textfile.read_text()
    )


def test_an_unsigned_commit_is_refused_and_never_checked_out(
    fleet: Fleet, node: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    c1 = fleet.commit("good", fleet.known)
    fleet.push()
    eng = Engine(monkeypatch)
    assert run_once(config(fleet), node).result == "applied"
    c2 = fleet.commit("unsigned", None)
    fleet.push()
    status = run_once(config(fleet), node)
    assert (status.result, status.commit, status.applied_commit) == ("refused", c2, c1)
    assert "no signature" in status.reason
    assert len(eng.calls) == 1  # nothing applied after the first
    assert not (node.trees / c2).exists()


def test_a_commit_signed_by_an_unknown_key_is_refused(
    fleet: Fleet, node: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    c1 = fleet.commit("good", fleet.known)
    fleet.push()
    eng = Engine(monkeypatch)
    run_once(config(fleet), node)
    # The stranger also adds its own key to the fleet's allowed signers in the same commit:
    # the node verifies with the signers it already trusts, not the new commit's.
    stranger_pub = " ".join(fleet.stranger.with_suffix(".pub").read_text().split()[:2])
    (fleet.src / "policies/lab/allowed_signers").write_text(
        fleet.signers + f"mallory@example.org {stranger_pub}\n"
    )
    c2 = fleet.commit("by a stranger", fleet.stranger)
    fleet.push()
    status = run_once(config(fleet), node)
    assert (status.result, status.commit, status.applied_commit) == ("refused", c2, c1)
    assert "not in the allowed signers file" in status.reason
    assert len(eng.calls) == 1 and not (node.trees / c2).exists()
    assert f'applied_commit="{c1}",commit="{c2}",result="refused"' in node.textfile.read_text()


def test_a_commit_signed_by_a_revoked_key_is_refused(
    fleet: Fleet, node: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue #38: a key listed in the node's revoked signers file (Rollout
    spec.pull.revoked_signers, git's gpg.ssh.revocationFile) signs nothing, even while the
    allowed signers file the node holds still names it."""
    c1 = fleet.commit("good", fleet.known)
    fleet.push()
    eng = Engine(monkeypatch)
    assert run_once(config(fleet), node).result == "applied"
    known_pub = " ".join(fleet.known.with_suffix(".pub").read_text().split()[:2])
    node.revoked_signers.write_text(f"# Managed by swarm\n{known_pub}\n")
    c2 = fleet.commit("by the retired key", fleet.known)
    fleet.push()
    status = run_once(config(fleet), node)
    assert (status.result, status.commit, status.applied_commit) == ("refused", c2, c1)
    assert len(eng.calls) == 1 and not (node.trees / c2).exists()
    # The same commit, the key no longer revoked: applied (the revocation refused it).
    node.revoked_signers.write_text("# Managed by swarm\n")
    assert run_once(config(fleet), node).result == "applied"


def test_a_retired_key_backdating_its_commit_is_refused_by_validation(fleet: Fleet, tmp_path: Path) -> None:
    """Issue #38: ``valid-before`` in an allowed signers file is judged by git at the
    signature's creation time, which the signer writes (git-config(1),
    gpg.ssh.allowedSignersFile): a commit made today by the retired key with a 2019 committer
    date verifies. So the fleet's validation refuses the option, at its line."""
    retired = " ".join(fleet.known.with_suffix(".pub").read_text().split()[:2])
    signers = tmp_path / "allowed_signers"
    signers.write_text(
        f'# retired\noperator@example.org namespaces="git",valid-before="20200101" {retired}\n'
    )
    (fleet.src / "CHANGES").open("a").write("backdated\n")
    sh("git", "add", "-A", cwd=fleet.src)
    dated = ["-c", "user.name=Operator", "-c", "user.email=operator@example.org"]
    sign = ["-c", "gpg.format=ssh", "-c", f"user.signingkey={fleet.known}"]
    env = {"GIT_COMMITTER_DATE": "2019-06-01T12:00:00Z", "GIT_AUTHOR_DATE": "2019-06-01T12:00:00Z"}
    subprocess.run(
        ["git", *dated, *sign, "commit", "-q", "-S", "-m", "backdated"],
        cwd=fleet.src, env={**ISOLATED, "PATH": "/usr/bin:/bin", **env}, check=True,
    )  # fmt: skip
    verify = ["git", "-c", f"gpg.ssh.allowedSignersFile={signers}", "verify-commit", "HEAD"]
    assert subprocess.run(verify, cwd=fleet.src, env={**ISOLATED, "PATH": "/usr/bin:/bin"}).returncode == 0
    problems = allowed_signers_problems(signers.read_text())
    assert [line for line, _ in problems] == [2]
    assert "valid-before" in problems[0][1] and "revoked_signers" in problems[0][1]


def test_a_first_run_with_no_good_commit_refuses_and_holds_nothing(
    fleet: Fleet, node: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    fleet.commit("unsigned", None)
    fleet.push()
    eng = Engine(monkeypatch)
    status = run_once(config(fleet), node)
    assert (status.result, status.applied_commit) == ("refused", None)
    assert not eng.calls


def test_an_older_signed_commit_is_refused(
    fleet: Fleet, node: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    c1 = fleet.commit("one", fleet.known)
    c2 = fleet.commit("two", fleet.known)
    fleet.push()
    Engine(monkeypatch)
    assert run_once(config(fleet), node).applied_commit == c2
    fleet.push(force=c1)  # the branch moved back to a signed, older commit
    status = run_once(config(fleet), node)
    assert (status.result, status.commit, status.applied_commit) == ("refused", c1, c2)
    assert "does not descend" in status.reason


def test_a_failed_apply_keeps_the_last_good_commit_and_says_so(
    fleet: Fleet, node: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    c1 = fleet.commit("good", fleet.known)
    fleet.push()
    Engine(monkeypatch)
    run_once(config(fleet), node)
    c2 = fleet.commit("breaks", fleet.known)
    fleet.push()
    Engine(monkeypatch, rc=2, changed=1, failures=1)
    status = run_once(config(fleet), node)
    assert (status.result, status.commit, status.applied_commit) == ("failed", c2, c1)
    assert (status.changed, status.failed) == (1, 1)
    assert c1[:12] in status.reason and "failed" in status.reason


def test_a_paused_node_does_nothing(fleet: Fleet, node: Paths, monkeypatch: pytest.MonkeyPatch) -> None:
    fleet.commit("good", fleet.known)
    fleet.push()
    eng = Engine(monkeypatch)
    node.pause.write_text("")
    status = run_once(config(fleet), node)
    assert (status.result, status.commit, status.paused) == ("paused", "", True)
    assert not eng.calls and not node.clone.exists()  # not even fetched


def test_a_node_the_fleet_does_not_declare_for_pull_waits(
    fleet: Fleet, node: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    fleet.commit("good", fleet.known)
    fleet.push()
    eng = Engine(monkeypatch)
    status = run_once(AgentConfig(**{**config(fleet).__dict__, "node": "lab-new-7"}), node)
    assert status.result == "waiting" and "swarm node bootstrap" in status.reason
    assert not eng.calls


def test_an_unreachable_remote_is_a_fetch_failure(
    node: Paths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    eng = Engine(monkeypatch)
    cfg = config_of(f"file://{tmp_path}/none.git")
    status = run_once(cfg, node)
    assert status.result == "fetch-failed" and not eng.calls


def test_a_later_batch_waits_for_the_canarys_report_and_a_failed_canary_halts_it(
    fleet: Fleet, node: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    """lab-gpu-1 pulls too: the lab Rollout's canary batch (1 host, name order) is lab-gpu-1,
    lab-gpu-2 is in the next. The canary's report is read where its node_exporter serves it,
    on its mesh address (the reader itself runs against a real HTTP server in test_agent.py;
    here it answers from the fixture)."""
    from swarm_infra.agent.decide import PeerReport
    from swarm_infra.agent.plan import status_url
    from swarm_infra.resolve import desired_state, load_fleet

    nodes = fleet.src / "inventory/lab/nodes.yaml"
    text = nodes.read_text().replace(
        "  gpu_backend: simulated\n", "  gpu_backend: simulated\n  convergence: pull\n", 1
    )
    nodes.write_text(text)
    c1 = fleet.commit("two pull nodes", fleet.known)
    fleet.push()
    state = desired_state(
        load_fleet([fleet.src / d for d in ("inventory/lab", "policies/lab", "policies/shared")])
    )
    assert [n for n, s in state["nodes"].items() if s["pull"]] == ["lab-gpu-1", NODE]
    canary_url = status_url(state["nodes"]["lab-gpu-1"], 9100)
    asked: list[str] = []
    eng = Engine(monkeypatch)

    def answer(report: PeerReport | None):
        def read(url: str) -> PeerReport | None:
            asked.append(url)
            return report

        return read

    status = run_once(config(fleet), node, read=answer(None))
    assert (status.result, status.applied_commit) == ("waiting", None) and "lab-gpu-1" in status.reason
    assert asked == [canary_url] and not eng.calls
    status = run_once(config(fleet), node, read=answer(PeerReport(c1, "failed")))
    assert status.result == "halted" and not eng.calls
    status = run_once(config(fleet), node, read=answer(PeerReport(c1, "applied")))
    assert (status.result, status.applied_commit) == ("applied", c1) and len(eng.calls) == 1
    # Once applied, the commit is re-applied every run without asking anyone.
    asked.clear()
    assert run_once(config(fleet), node, read=answer(None)).result == "applied" and asked == []
