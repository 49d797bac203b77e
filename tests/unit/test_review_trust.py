"""`swarm review` on changes of who and what the fleet trusts (issue #39, item 3), and on a
quota cut below what a tenant's RayCluster holds (item 8).

Each test commits the example fleet made a pull fleet (one NAT'd node converging by pull,
the Rollout's ``spec.pull`` with an allowed signers file, the Mesh's controller with its key
and endpoint recorded) as the base, then one change on top, and reviews HEAD~1..HEAD as a
pull request is reviewed. SSH keys are made by the real ``ssh-keygen`` and their expected
fingerprints are what ``ssh-keygen -lf`` prints; other expected values come from the
documents and the desired state before and after the change.
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from swarm_infra.review import Review
from swarm_infra.review.markdown import VALUE_CHARS, render

from .conftest import committed, git
from .test_review import ALLOC, change, flags, line_of, replace, state

ROLLOUT = "policies/example/rollout.yaml"
MESH = "policies/example/mesh.yaml"
SIGNERS = "policies/example/allowed_signers"
REMOTE = "https://git.example.org/swarm/fleet.git"
CONTROLLER_KEY = "GK9rBwkn3vUFr6s2PZXxJbVvjGy5h8wAS6FaA3Bq8nA="  # a test WireGuard key, not a secret
PULL_NODE = "tyo1-gpu-01"
PEER = "fra1-gpu-01"  # a node the controller peers with directly (not a spoke: those go through their hub)


def keygen(tmp: Path, name: str, kind: str, comment: str) -> tuple[str, str]:
    """A new key pair made by ssh-keygen: (the public key line, ``SHA256:...`` as
    ``ssh-keygen -lf`` prints its fingerprint)."""
    path = tmp / name
    bits = ["-b", "3072"] if kind == "rsa" else []
    subprocess.run(
        ["ssh-keygen", "-q", "-t", kind, *bits, "-N", "", "-C", comment, "-f", str(path)], check=True
    )
    listed = subprocess.run(
        ["ssh-keygen", "-lf", f"{path}.pub"], check=True, capture_output=True, text=True
    ).stdout.split()
    assert listed[2] == comment  # "BITS SHA256:... COMMENT (TYPE)"
    return (tmp / f"{name}.pub").read_text().strip(), listed[1]


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, str]]:
    tmp = tmp_path_factory.mktemp("keys")
    return {
        "ops": keygen(tmp, "ops", "ed25519", "ops@laptop"),
        # RSA: its public key line is far longer than a cell's VALUE_CHARS.
        "new": keygen(tmp, "new", "rsa", "mallory@example.net"),
    }


@pytest.fixture(scope="module")
def pull_base(tmp_path_factory: pytest.TempPathFactory, keys: dict[str, tuple[str, str]]) -> Path:
    """The example fleet, then a commit that makes it a pull fleet (see the module doc)."""
    repo = committed(tmp_path_factory.mktemp("trust") / "repo")
    replace(
        repo,
        ROLLOUT,
        "  kubernetes_context: swarm-example\n",
        "  kubernetes_context: swarm-example\n  pull:\n"
        f"    remote: {REMOTE}\n    ref: main\n    fleet: example\n"
        "    allowed_signers_file: allowed_signers\n",
    )
    (repo / SIGNERS).write_text(f'ops@example.org namespaces="git" {keys["ops"][0]}\n')
    replace(
        repo,
        MESH,
        "  topology: full-mesh\n",
        "  topology: full-mesh\n  controller:\n"
        f"    public_key: {CONTROLLER_KEY}\n    endpoint: controller.example.org\n",
    )
    nodes = repo / "inventory/example/nodes/tyo1.yaml"
    text = nodes.read_text()
    at = text.index("  mesh: {nat: true}", text.index(f"name: {PULL_NODE}"))
    nodes.write_text(text[:at] + "  convergence: pull\n" + text[at:])
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "pull mode for tyo1-gpu-01")
    assert state(repo)["nodes"][PULL_NODE]["pull"] is not None
    return repo


@pytest.fixture
def repo(pull_base: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "repo"
    shutil.copytree(pull_base, dest, symlinks=True)
    return dest


def shown(r: Review) -> str:
    """The comment as a reader sees it: rendered by markdown-it (CommonMark, HTML, tables),
    tags dropped, entities and escapes resolved."""
    md = MarkdownIt("commonmark", {"html": True}).enable("table")
    return html.unescape(re.sub(r"<[^>]+>", "", md.render(render(r))))


def commit_of(repo: Path) -> str:
    return git(repo, "rev-parse", "HEAD").strip()


def test_a_signer_added_to_the_allowed_signers_blocks_shown_as_its_fingerprint(
    repo: Path, keys: dict[str, tuple[str, str]]
) -> None:
    new_key, new_fp = keys["new"]
    _, after, r = change(
        repo,
        lambda: (repo / SIGNERS).write_text(
            (repo / SIGNERS).read_text() + f"release@example.org {new_key}\n"
        ),
    )
    assert new_key in after["nodes"][PULL_NODE]["pull"]["allowed_signers"]
    (flag,) = flags(r)["pull-signers-changed"]
    assert flag.action == "block" and r.exit_code == 1
    assert [(w.file, w.line, w.ref, w.commit) for w in flag.where] == [(SIGNERS, 2, "head", commit_of(repo))]
    kind = new_key.split()[0]
    assert f"{kind} {new_fp}" in flag.reason and "mallory@example.net" in flag.reason
    assert "release@example.org" in flag.reason and PULL_NODE in flag.reason
    assert r.summary.startswith("❌ ")
    text = shown(r)
    # The flag, whole, in the comment: the fingerprint and the comment of the new key.
    assert flag.reason in text
    # The pull node's allowed signers change in the Host layer's table: its keys as
    # fingerprints with their comments, never a key cut after VALUE_CHARS.
    ops_fp = keys["ops"][1]
    assert f"{kind} {new_fp} mallory@example.net" in text
    assert f"ssh-ed25519 {ops_fp} ops@laptop" in text
    assert new_key.split()[1][:VALUE_CHARS] not in text
    # The full report keeps the values as they are, whole.
    assert new_key in render(r, None).replace("\\", "")


def test_a_signer_removed_and_a_revocation_lifted_block(repo: Path, keys: dict[str, tuple[str, str]]) -> None:
    ops_key, ops_fp = keys["ops"]
    new_key, new_fp = keys["new"]
    # The base revokes the new key; the change lifts that and swaps the ops key for it.
    replace(repo, ROLLOUT, "    allowed_signers_file: allowed_signers\n",
            "    allowed_signers_file: allowed_signers\n    revoked_signers:\n"
            f"      - {' '.join(new_key.split()[:2])}\n")  # fmt: skip
    git(repo, "commit", "-qam", "revoke a key")

    def edit() -> None:
        replace(repo, ROLLOUT, f"    revoked_signers:\n      - {' '.join(new_key.split()[:2])}\n", "")
        (repo / SIGNERS).write_text(f"ops@example.org {new_key}\n")

    _, _, r = change(repo, edit)
    got = flags(r)["pull-signers-changed"]
    assert [f.action for f in got] == ["block"] * 3
    reasons = " | ".join(f.reason for f in got)
    assert f"lose ssh-ed25519 {ops_fp}" in reasons and "ops@laptop" in reasons
    assert f"gain {new_key.split()[0]} {new_fp}" in reasons
    assert f"{new_key.split()[0]} {new_fp} is no longer revoked" in reasons
    removed = next(f for f in got if "lose" in f.reason)
    base = git(repo, "rev-parse", "HEAD~1").strip()
    assert [(w.file, w.line, w.ref, w.commit) for w in removed.where] == [(SIGNERS, 1, "base", base)]
    text = shown(r)
    assert all(f.reason in text for f in got)
    assert ops_key.split()[1] not in text  # as its fingerprint only


def test_a_moved_pull_remote_blocks(repo: Path) -> None:
    # A long remote (the schema allows 500 characters): the reason is shown whole all the same.
    moved = "https://git.example.net/someone-else/" + "mirror/" * 60 + "fleet.git"
    _, after, r = change(repo, lambda: replace(repo, ROLLOUT, REMOTE, moved))
    assert after["nodes"][PULL_NODE]["pull"]["remote"] == moved
    (flag,) = flags(r)["pull-source-changed"]
    assert flag.action == "block" and r.exit_code == 1
    assert f"remote {REMOTE} -> {moved}" in flag.reason and PULL_NODE in flag.reason
    assert [(w.file, w.line) for w in flag.where] == [(ROLLOUT, line_of(repo, ROLLOUT, moved))]
    assert len(flag.reason) > 600 and flag.reason in shown(r)


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        (
            CONTROLLER_KEY,
            "0hwUNHc7wsZV1AXf0tPkAPJ2mP3lUhiXSvtE2Q6Y2Ws=",
            f"its public key {CONTROLLER_KEY} -> 0hwUNHc7wsZV1AXf0tPkAPJ2mP3lUhiXSvtE2Q6Y2Ws=",
        ),
        (
            "endpoint: controller.example.org",
            "endpoint: 203.0.113.66:51999",
            "its endpoint controller.example.org:51820 -> 203.0.113.66:51999",
        ),
    ],
    ids=["key", "endpoint"],
)
def test_a_replaced_mesh_controller_blocks(repo: Path, old: str, new: str, said: str) -> None:
    before, after, r = change(repo, lambda: replace(repo, MESH, old, new))
    peer = next(p for p in after["nodes"][PEER]["mesh"]["peers"] if p["name"] == "controller")
    was = next(p for p in before["nodes"][PEER]["mesh"]["peers"] if p["name"] == "controller")
    assert (was["public_key"], was["endpoint"]) != (peer["public_key"], peer["endpoint"])
    (flag,) = flags(r)["mesh-controller-changed"]
    assert flag.action == "block" and r.exit_code == 1
    assert said in flag.reason and f"{len(after['nodes'])} node(s)" in flag.reason
    assert [(w.file, w.line) for w in flag.where] == [(MESH, line_of(repo, MESH, new))]
    assert flag.reason in shown(r)


def test_drain_grace_lowered_to_nothing_blocks(repo: Path) -> None:
    before, after, r = change(repo, lambda: replace(repo, ROLLOUT, "drain_grace_s: 900", "drain_grace_s: 0"))
    assert (before["rollout"]["drain_grace_s"], after["rollout"]["drain_grace_s"]) == (900, 0)
    (flag,) = flags(r)["drain-grace-lowered"]
    assert flag.action == "block" and r.exit_code == 1
    assert "drain_grace_s 900 -> 0" in flag.reason
    assert [(w.file, w.line) for w in flag.where] == [(ROLLOUT, line_of(repo, ROLLOUT, "drain_grace_s: 0"))]
    assert flag.reason in shown(r)
    # Raised, it is not lowered: nothing to flag.
    _, _, r = change(repo, lambda: replace(repo, ROLLOUT, "drain_grace_s: 0", "drain_grace_s: 1200"))
    assert "drain-grace-lowered" not in flags(r)


def test_a_removed_kubernetes_context_blocks(repo: Path) -> None:
    was = line_of(repo, ROLLOUT, "kubernetes_context: swarm-example")
    before, after, r = change(
        repo, lambda: replace(repo, ROLLOUT, "  kubernetes_context: swarm-example\n", "")
    )
    assert (before["rollout"]["kubernetes_context"], after["rollout"]["kubernetes_context"]) == (
        "swarm-example",
        None,
    )
    (flag,) = flags(r)["kubernetes-context-changed"]
    assert flag.action == "block" and r.exit_code == 1
    assert "kubernetes_context swarm-example is removed" in flag.reason
    # Where it was (at the base), and the Rollout's spec that lost it (at the head).
    assert {(w.file, w.line, w.ref) for w in flag.where} == {
        (ROLLOUT, was, "base"),
        (ROLLOUT, line_of(repo, ROLLOUT, "spec:"), "head"),
    }
    assert flag.reason in shown(r)


@pytest.mark.parametrize(
    ("borrowing", "then"),
    [
        (16, "the excess counts as borrowed from cohort swarm"),
        # What it holds is more than its quota and all it may borrow: never admitted again.
        (2, "not admitted again until the quota is raised"),
    ],
    ids=["borrowed", "never-again"],
)
def test_a_quota_cut_below_the_tenants_ray_cluster_warns(repo: Path, borrowing: int, then: str) -> None:
    flavor = "h100-sxm5-80gb"
    ray = next(c for c in state(repo)["cluster"]["ray_clusters"] if c["tenant"] == "acme-ai")
    (group,) = [w for w in ray["workers"] if w["flavor"] == flavor]
    held = group["replicas"] * group["gpus"]  # device units: whole GPUs on this flavor
    acme = f"{{flavor: {flavor}, nominal_quota: %d, borrowing_limit: %d%s}}"
    helix = f"{{flavor: {flavor}, nominal_quota: %d, borrowing_limit: 24}}"

    def move(old: int, new: int, limits: tuple[int, int], lending: str = "") -> None:
        """acme-ai's H100 quota ``old`` -> ``new`` (borrowing limit ``limits`` before and
        after), the difference given to helix-labs."""
        had = next(x for x in state(repo)["cluster"]["cluster_queues"] if x["name"] == "helix-labs")
        has = next(x["nominal_quota"] for x in had["quotas"] if x["flavor"] == flavor)
        replace(repo, ALLOC, acme % (old, limits[0], lending), acme % (new, limits[1], ""))
        replace(repo, ALLOC, helix % has, helix % (has + old - new))

    # A cut that still holds the RayCluster: nothing to say.
    _, _, r = change(repo, lambda: move(48, held, (16, 16), ", lending_limit: 8"))
    assert "quota-below-ray-cluster" not in flags(r) and r.exit_code == 0
    # One below it.
    _, after, r = change(repo, lambda: move(held, held - 4, (16, borrowing)))
    queue = next(q for q in after["cluster"]["cluster_queues"] if q["name"] == "acme-ai")
    quota = next(x for x in queue["quotas"] if x["flavor"] == flavor)
    gpus = next(x["nominal_quota"] for x in quota["resources"] if x["name"] == "nvidia.com/gpu")
    assert gpus == held - 4  # what the change does, from the desired state
    assert (quota["borrowing_limit"], held > gpus + borrowing) == (borrowing, borrowing < 4)
    (flag,) = flags(r)["quota-below-ray-cluster"]
    assert flag.action == "warn" and r.exit_code == 0
    assert f"nvidia.com/gpu {held} -> {gpus}, below the {held} they hold" in flag.reason
    assert f"RayCluster(s) {ray['name']} hold" in flag.reason and then in flag.reason
    line = line_of(repo, ALLOC, f"nominal_quota: {gpus},")
    assert [(w.file, w.line) for w in flag.where] == [(ALLOC, line)]
    assert "⚠️ warn" in render(r) and flag.reason in shown(r)
