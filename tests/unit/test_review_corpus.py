"""More of the realistic pull requests of issue #25's corpus, each a Git commit on a copy of
the example fleet (the helpers of ``test_review``): a new site behind NAT, a YAML syntax
error, a README-only change. The others are in ``test_review``, ``test_review_content``
and ``test_review_workflow`` (stale branch, ``export-ignore``, schema change).

Expected values come from the fleet files written here and the desired state before and
after (``state``), never from the review's own output.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from swarm_infra.review import review
from swarm_infra.review.markdown import MARKER, render

from .test_review import change, commit, flags, line_of, replace, state

# base_repo and repo: tests/unit/conftest.py's (the example fleet committed, a copy per test).

SITES = "inventory/example/sites.yaml"
MESH = "policies/example/mesh.yaml"
ASSIGNMENTS = "policies/example/assignments.yaml"
OSA1_SITE = """---
apiVersion: swarm.io/v1alpha1
kind: Site
metadata:
  name: osa1
spec:
  region: ap-northeast
  provider: Naniwa Home GPU
  underlay: {cidr: 192.168.60.0/24, gateway: 192.168.60.1}
  wan: {latency_ms: 110, loss_percent: 0.5, bandwidth_mbit: 1000}
"""
OSA1_NODES = """# osa1: a home provider behind NAT; a rented relay is the hub.
---
apiVersion: swarm.io/v1alpha1
kind: Node
metadata:
  name: osa1-relay-01
  labels: {provider: naniwa, tier: network}
spec:
  site: osa1
  address: 192.168.60.2
  ssh: {user: swarm}
  roles: [relay]
  hardware: {cpus: 4, memory_gib: 8, nic_speed_gbps: 1}
  mesh: {endpoint: 198.51.100.88}
---
apiVersion: swarm.io/v1alpha1
kind: Node
metadata:
  name: osa1-gpu-01
  labels: {provider: naniwa, tier: community}
spec:
  site: osa1
  address: 192.168.60.21
  ssh: {user: swarm}
  roles: [gpu-worker]
  hardware:
    cpus: 24
    memory_gib: 128
    gpus: [{model: RTX-4090, count: 2}]
    nvme:
      - {device: /dev/nvme0n1, size_gib: 3840}
    nic_speed_gbps: 1
  mesh: {nat: true}
"""


def test_a_new_site_behind_nat(repo: Path) -> None:
    """A provider's new site behind NAT: its relay (the hub, with a public endpoint) and a
    NAT'd GPU node, the site hub-and-spoke in the Mesh, and the RTX 4090 Assignment's
    sites widened to it. Both nodes join; the GPU node peers with its hub only; the other
    nodes gain the hub as a peer with its endpoint, applied with `wg syncconf`."""

    def edit() -> None:
        with (repo / SITES).open("a") as f:
            f.write(OSA1_SITE)
        (repo / "inventory/example/nodes/osa1.yaml").write_text(OSA1_NODES)
        replace(
            repo,
            MESH,
            "    tyo1: {topology: hub-and-spoke}",
            "    tyo1: {topology: hub-and-spoke}\n    osa1: {topology: hub-and-spoke}",
        )
        replace(
            repo,
            ASSIGNMENTS,
            "sites: [tyo1], gpu_models: [RTX-4090]",
            "sites: [tyo1, osa1], gpu_models: [RTX-4090]",
        )

    before, after, r = change(repo, edit)
    fr = r.fleets[0]
    new = ["osa1-gpu-01", "osa1-relay-01"]
    assert [(c.layer, c.change, c.nodes) for c in fr.nodes] == [("node", "added", new)]
    assert fr.nodes_changed == 2 and fr.layers == ["node"]
    mesh = after["cluster"]["mesh"]
    assert mesh["hubs"]["osa1"] == "osa1-relay-01" and "osa1-relay-01" in mesh["relays"]
    assert (fr.mesh.joining, fr.mesh.leaving, fr.mesh.restart) == (new, [], [])
    assert (fr.mesh.relays_gained, fr.mesh.hubs_gained) == (["osa1-relay-01"], ["osa1: osa1-relay-01"])
    # The NAT'd node talks to its hub only; the hub's entry on every other node carries the
    # endpoint declared in the node file and the Mesh's listen_port.
    assert [p["name"] for p in after["nodes"]["osa1-gpu-01"]["mesh"]["peers"]] == ["osa1-relay-01"]
    port = int(re.search(r"listen_port: (\d+)", (repo / MESH).read_text())[1])  # type: ignore[index]
    hub_added = [p for p in fr.mesh.peers if p.what == "added" and p.peer == "osa1-relay-01"]
    gained = sorted(
        n
        for n, s in after["nodes"].items()
        if n not in new and s["mesh"] and any(p["name"] == "osa1-relay-01" for p in s["mesh"]["peers"])
    )
    assert gained and sorted(n for p in hub_added for n in p.nodes) == gained
    assert {p.after["endpoint"] for p in hub_added} == {f"198.51.100.88:{port}"}
    changed = sorted(
        n
        for n in before["nodes"]
        if before["nodes"][n]["mesh"]["peers"] != after["nodes"][n]["mesh"]["peers"]
    )
    assert fr.mesh.syncconf == changed
    # Its GPUs: the capped RTX 4090 profile, two more GPUs in the rtx-4090 flavor.
    assert after["nodes"]["osa1-gpu-01"]["gpu"]["profile"] == "rtx4090-capped"
    cap = {(c.flavor, c.cohort): c for c in fr.capacity}
    b, a = before["cluster"]["capacity"]["rtx-4090"]["gpus"], after["cluster"]["capacity"]["rtx-4090"]["gpus"]
    assert a == b + 2 and cap[("rtx-4090", None)].gpus == [b, a]
    # No tunnel of a hub or relay drops, no relay route changes provider: nothing is flagged.
    assert before["cluster"]["mesh"]["relay_routes"] == mesh["relay_routes"]
    assert flags(r) == {} and r.exit_code == 0
    assert r.summary.startswith("✅ example: 2 nodes change (Node), ")
    node_where = fr.nodes[0].where
    assert (
        "inventory/example/nodes/osa1.yaml",
        line_of(repo, "inventory/example/nodes/osa1.yaml", "name: osa1-gpu-01"),
    ) in [(w.file, w.line) for w in node_where]
    md = re.sub(r"</?code>|\\", "", render(r))
    assert "hubs gained: osa1: osa1-relay-01" in md and "relays gained: osa1-relay-01" in md
    hub_address = after["nodes"]["osa1-relay-01"]["mesh"]["address"].split("/")[0]
    assert f"peer added: {{&quot;allowed_ips&quot;:[&quot;{hub_address}/32&quot;" in md


def test_a_yaml_syntax_error_is_the_whole_review(repo: Path) -> None:
    """A node file that no longer parses: the review is the validator's diagnostic at the
    line of the mistake, linked, exit 2; nothing else is compared."""
    path = "inventory/example/nodes/fra1.yaml"
    replace(repo, path, "  roles: [gpu-worker]\n", "  roles: gpu-worker: [\n")
    line = line_of(repo, path, "roles: gpu-worker: [")
    commit(repo)
    r = review(repo, "HEAD~1", "HEAD", repo_url="https://github.com/acme/fleet")
    fr = r.fleets[0]
    assert r.exit_code == 2 and fr.invalid and fr.nodes == [] and fr.flags == []
    errors = [p for p in fr.problems if p.severity == "error"]
    assert [(p.rule, p.location.file, p.location.line) for p in errors] == [("yaml.syntax", path, line)]
    assert r.summary == "❌ example: the head is invalid (1 error); nothing else was reviewed"
    md = render(r)
    assert md.splitlines()[1] == MARKER
    assert f"(https://github.com/acme/fleet/blob/{r.head}/{path}#L{line})" in md
    assert "<code>error\\[yaml\\.syntax\\]</code>" in md and "### Nodes" not in md


def test_a_readme_only_change_reviews_no_fleet(repo: Path) -> None:
    """Documentation only: no fleet, no rule file; ✅, exit 0, and the comment says so."""
    before = state(repo)
    (repo / "README.md").write_text("# The fleet\n\nHow to add a site.\n")
    commit(repo, "docs")
    r = review(repo, "HEAD~1", "HEAD")
    assert (r.fleets, r.rules_changed, r.exit_code) == ([], [], 0)
    assert r.summary == "✅ no fleet changes" and state(repo) == before
    assert render(r).startswith("✅ no fleet changes\n" + MARKER)


def test_the_worker_pool_gives_the_same_review(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A large fleet is parsed, and its changes located, in worker processes (the base's
    files and the line marks in one job, beside this process's own work); the example fleet
    is too small for that, so the threshold is lowered here: the same review either way."""
    from swarm_infra.review import load

    replace(repo, "policies/shared/gpu-profiles.yaml", "power_limit_w: 650", "power_limit_w: 600")
    with (repo / SITES).open("a") as f:
        f.write(OSA1_SITE)
    (repo / "inventory/example/nodes/osa1.yaml").write_text(OSA1_NODES)
    commit(repo)
    alone = review(repo, "HEAD~1", "HEAD")
    started: list[int] = []
    real = load.ProcessPoolExecutor

    def pool(workers: int) -> object:
        started.append(workers)
        return real(workers)

    monkeypatch.setattr(load, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(load, "ProcessPoolExecutor", pool)
    pooled = review(repo, "HEAD~1", "HEAD")
    assert started  # the pool did run
    assert pooled.as_json() == alone.as_json() and render(pooled) == render(alone)
    assert any(c.field == "power_limit_w" for c in pooled.fleets[0].nodes)
