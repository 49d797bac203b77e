"""`swarm review` on realistic changes: a temporary Git repository holds the example fleet
as the base commit, each test commits one change on top and reviews HEAD~1..HEAD.

Expected values come from the desired state of the fleet before and after the change
(``desired_state(load_fleet(...))`` of the working tree at each commit), not from the
review itself: which nodes have an H100, which peers a new node gets, what a batch is.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt

from swarm_infra import cli
from swarm_infra.resolve import desired_state, load_fleet
from swarm_infra.resolve.rollout import rollout_batches as batches
from swarm_infra.resolve.types import DesiredState
from swarm_infra.review import Review, review
from swarm_infra.review.markdown import GITHUB_LIMIT, MARKER, render

from .conftest import FLEET_DIRS, GIT_ENV, ROOT, git

__all__ = ["FLEET_DIRS", "GIT_ENV", "ROOT", "git"]  # what the other review tests import from here

ALLOC = "policies/example/scheduling.yaml"  # the Allocation


def state(repo: Path) -> DesiredState:
    """The desired state of the working tree's example fleet."""
    return desired_state(load_fleet([repo / d for d in FLEET_DIRS]))


def replace(repo: Path, path: str, old: str, new: str) -> None:
    f = repo / path
    text = f.read_text()
    assert old in text, f"{old!r} not in {path}"
    f.write_text(text.replace(old, new, 1))


def document(repo: Path, path: str, name: str) -> str:
    """The ``---`` document of ``path`` whose metadata name is ``name`` (with its separator)."""
    for doc in (repo / path).read_text().split("\n---\n"):
        if re.search(rf"^\s*name: {re.escape(name)}\s*$", doc, re.M):
            return "\n---\n" + doc.rstrip("\n") + "\n"
    raise AssertionError(f"no document {name} in {path}")


def commit(repo: Path, message: str = "change") -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)


def change(repo: Path, edit: Callable[[], None]) -> tuple[DesiredState, DesiredState, Review]:
    """Desired state before, after, and the review of a commit made by ``edit``."""
    before = state(repo)
    edit()
    after = state(repo)
    commit(repo)
    return before, after, review(repo, "HEAD~1", "HEAD")


def line_of(repo: Path, path: str, needle: str) -> int:
    for number, line in enumerate((repo / path).read_text().splitlines(), start=1):
        if needle in line:
            return number
    raise AssertionError(f"{needle!r} not in {path}")


def flags(r: Review) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for f in r.fleets[0].flags:
        out.setdefault(f.rule, []).append(f)
    return out


def summary_line(r: Review) -> str:
    text = render(r)
    first = text.splitlines()[0]
    assert text.splitlines()[1] == MARKER
    return first


def step(after: DesiredState) -> int:
    return max(len(b) for b in batches(list(after["nodes"]), after["rollout"]))


def models_of(s: DesiredState, node: str) -> set[str]:
    return {g["model"] for g in s["nodes"][node]["hardware"]["gpus"]}


# ------------------------------------------------------------------------ changes


def test_power_limit_change_on_one_gpu_model(repo: Path) -> None:
    _, after, r = change(
        repo,
        lambda: replace(
            repo, "policies/shared/gpu-profiles.yaml", "power_limit_w: 650", "power_limit_w: 600"
        ),
    )
    h100 = sorted(n for n in after["nodes"] if "H100-SXM5-80GB" in models_of(after, n))
    sites = sorted({after["nodes"][n]["site"] for n in h100})
    fr = r.fleets[0]
    assert [(c.layer, c.field, c.before, c.after, c.nodes) for c in fr.nodes] == [
        ("gpu", "power_limit_w", 650, 600, h100)
    ]
    assert fr.nodes[0].gpu_models == {"H100-SXM5-80GB": len(h100)}
    assert fr.nodes[0].sites == {s: sum(after["nodes"][n]["site"] == s for n in h100) for s in sites}
    line = line_of(repo, "policies/shared/gpu-profiles.yaml", "power_limit_w: 600")
    assert [(w.file, w.line, w.ref) for w in fr.nodes[0].where] == [
        ("policies/shared/gpu-profiles.yaml", line, "head")
    ]
    assert fr.mesh.peerings_changed == 0 and fr.objects == []
    # The Rollout's largest batch decides the only flag.
    assert len(h100) > step(after)
    assert list(flags(r)) == ["rollout-step-exceeded"] and fr.flags[0].action == "warn"
    assert r.exit_code == 0
    assert r.summary == (
        f"⚠️ example: {len(h100)} nodes change (GPU), 0 mesh peers change, 0 cluster objects change; "
        "1 warning: rollout-step-exceeded"
    )
    assert summary_line(r).startswith("⚠️ example\\: ")
    text = render(r)
    assert (
        f"power\\_limit\\_w</code> <code>650</code> → <code>600</code> | {len(h100)} H100-SXM5-80GB nodes in"
        in text
    )


def test_new_node_in_a_natted_site_gains_peers_through_the_hub(repo: Path) -> None:
    path = "inventory/example/nodes/tyo1.yaml"
    new = (
        document(repo, path, "tyo1-gpu-08")
        .replace("tyo1-gpu-08", "tyo1-gpu-09")
        .replace("192.168.50.28", "192.168.50.29")
    )
    before, after, r = change(repo, lambda: (repo / path).write_text((repo / path).read_text() + new))
    fr = r.fleets[0]
    hub = after["cluster"]["mesh"]["hubs"]["tyo1"]
    assert after["nodes"]["tyo1-gpu-09"]["mesh"]["peers"][0]["name"] == hub
    assert [(c.layer, c.change, c.nodes) for c in fr.nodes if c.layer == "node"] == [
        ("node", "added", ["tyo1-gpu-09"])
    ]
    assert fr.mesh.joining == ["tyo1-gpu-09"] and fr.mesh.restart == [] and fr.mesh.leaving == []
    # Who gains the new node as a peer: exactly the nodes whose head peer list names it.
    gained = sorted(
        n for n, s in after["nodes"].items() if any(p["name"] == "tyo1-gpu-09" for p in s["mesh"]["peers"])
    )
    added = [p for p in fr.mesh.peers if p.what == "added" and p.peer == "tyo1-gpu-09"]
    assert gained == [hub] and [p.nodes for p in added] == [gained]
    assert [p for p in fr.mesh.peers if p.what == "removed"] == []
    # The topology ConfigMap's JSON is compared inside: the new address is one field.
    topo = next(o for o in fr.objects if o.kind == "ConfigMap" and o.name == "swarm-mesh-topology")
    new_address = after["cluster"]["mesh"]["addresses"]["tyo1-gpu-09"]
    assert ("data.topology.json.addresses.tyo1-gpu-09", new_address) in [
        (f.path, f.after) for f in topo.fields
    ]
    # Nodes whose peer lists change keep their tunnels: wg syncconf, never a restart.
    changed_peers = sorted(
        n
        for n in before["nodes"]
        if before["nodes"][n]["mesh"]["peers"] != after["nodes"][n]["mesh"]["peers"]
    )
    assert fr.mesh.syncconf == changed_peers and hub in changed_peers
    # Routes to it go through the hub: every other site's node that routes via the hub
    # gains its /32 in the hub's AllowedIPs.
    address = after["cluster"]["mesh"]["addresses"]["tyo1-gpu-09"] + "/32"
    routed = [p for p in fr.mesh.peers if p.what == "allowed_ips" and p.peer == hub]
    assert routed and all(p.after == [address] and p.before == [] for p in routed)
    assert fr.mesh.peerings_changed == len(
        {tuple(sorted(e)) for e in after["cluster"]["mesh"]["edges"]}
    ) - len({tuple(sorted(e)) for e in before["cluster"]["mesh"]["edges"]}) + len(
        {n for p in routed for n in p.nodes} - {"tyo1-gpu-09"}
    )
    # Capacity: 2 more RTX 4090.
    cap = {(c.flavor, c.cohort): c for c in fr.capacity}
    assert cap[("rtx-4090", None)].gpus == [16, 18]
    # Cluster objects: its Node object, and the topology ConfigMap.
    kinds = {(o.change, o.kind, o.name) for o in fr.objects}
    assert ("added", "Node", "tyo1-gpu-09") in kinds and (
        "changed",
        "ConfigMap",
        "swarm-mesh-topology",
    ) in kinds
    node_where = next(c.where for c in fr.nodes if c.layer == "node")
    assert node_where[0].file == path and node_where[0].line == line_of(repo, path, "name: tyo1-gpu-09")
    assert r.exit_code == 0
    assert r.summary.startswith(
        f"✅ example: 1 node change (Node), {fr.mesh.peerings_changed} mesh peers change, "
    )


def test_removed_node_that_backs_quota(repo: Path) -> None:
    path = "inventory/example/nodes/fra1.yaml"
    doc = document(repo, path, "fra1-gpu-10")
    removed_line = line_of(repo, path, "name: fra1-gpu-10")
    before, after, r = change(
        repo, lambda: (repo / path).write_text((repo / path).read_text().replace(doc, "\n"))
    )
    fr = r.fleets[0]
    assert [(c.change, c.nodes) for c in fr.nodes if c.layer == "node"] == [("removed", ["fra1-gpu-10"])]
    assert fr.mesh.leaving == ["fra1-gpu-10"]
    lost = sorted(
        n for n, s in before["nodes"].items() if any(p["name"] == "fra1-gpu-10" for p in s["mesh"]["peers"])
    )
    assert [p.nodes for p in fr.mesh.peers if p.what == "removed" and p.peer == "fra1-gpu-10"] == [lost]
    (flag,) = flags(r)["node-removed-backing-quota"]
    cap_b, cap_a = (
        before["cluster"]["capacity"]["h100-sxm5-80gb"],
        after["cluster"]["capacity"]["h100-sxm5-80gb"],
    )
    assert cap_a["gpus"] == cap_b["gpus"] - 8
    assert flag.action == "warn" and "fra1-gpu-10 (8 x H100-SXM5-80GB) is removed" in flag.reason
    assert (
        f"{cap_a['nominal_quota']} GPUs of quota on {cap_a['gpus']} GPUs (was {cap_b['gpus']})" in flag.reason
    )
    holders = sorted(
        t["name"]
        for t in after["cluster"]["tenants"]
        for q in after["cluster"]["cluster_queues"]
        if q["name"] == t["cluster_queue"]
        and any(x["flavor"] == "h100-sxm5-80gb" and x["nominal_quota"] > 0 for x in q["quotas"])
    )
    assert f"backs the nominalQuota of {', '.join(holders)}:" in flag.reason
    assert [(w.file, w.line, w.ref) for w in flag.where] == [(path, removed_line, "base")]
    removed = {(o.kind, o.name) for o in fr.objects if o.change == "removed"}
    assert ("Node", "fra1-gpu-10") in removed
    assert r.exit_code == 0


def test_new_tenant_with_quotas(repo: Path) -> None:

    def edit() -> None:
        replace(
            repo,
            ALLOC,
            "  tenants:\n",
            "    - name: nova\n      cohort: swarm\n      quotas:\n"
            "        - {flavor: h100-sxm5-80gb, nominal_quota: 8}\n  tenants:\n"
            "    - name: nova\n      queue: nova\n      priorities: [batch]\n",
        )

    before, after, r = change(repo, edit)
    fr = r.fleets[0]
    assert fr.nodes == [] and fr.nodes_changed == 0 and fr.mesh.peerings_changed == 0
    added = {(o.kind, o.namespace, o.name) for o in fr.objects if o.change == "added"}
    assert {("Namespace", "", "nova"), ("ClusterQueue", "", "nova"), ("LocalQueue", "nova", "nova")} <= added
    cq = next(o for o in fr.objects if o.kind == "ClusterQueue" and o.name == "nova")
    first = line_of(repo, ALLOC, "- name: nova")
    assert cq.where and all(w.file == ALLOC and first <= w.line <= first + 3 for w in cq.where)
    cap = {(c.flavor, c.cohort): c for c in fr.capacity}
    b, a = before["cluster"]["capacity"]["h100-sxm5-80gb"], after["cluster"]["capacity"]["h100-sxm5-80gb"]
    assert cap[("h100-sxm5-80gb", None)].nominal_quota == [b["nominal_quota"], a["nominal_quota"]]
    assert cap[("h100-sxm5-80gb", None)].unallocated == [b["unallocated"], b["unallocated"] - 8]
    assert cap[("h100-sxm5-80gb", "swarm")].lendable[1] == cap[("h100-sxm5-80gb", "swarm")].lendable[0] + 8
    # nova is new: others gaining the power to preempt it is not a flag (it had nothing to lose).
    assert fr.flags == [] and r.exit_code == 0
    assert r.summary == (
        f"✅ example: 0 nodes change, 0 mesh peers change, {len(fr.objects)} cluster objects change; "
        "no risk flags"
    )


def test_quota_over_capacity_is_an_invalid_head(repo: Path) -> None:
    replace(
        repo,
        ALLOC,
        "{flavor: h100-sxm5-80gb, nominal_quota: 24, borrowing_limit: 24}",
        "{flavor: h100-sxm5-80gb, nominal_quota: 40, borrowing_limit: 24}",
    )
    commit(repo)
    r = review(repo, "HEAD~1", "HEAD")
    fr = r.fleets[0]
    assert fr.invalid and r.exit_code == 2
    errors = [p for p in fr.problems if p.severity == "error"]
    assert [(p.rule, p.location.file, p.location.line) for p in errors] == [
        ("allocation.quota-exceeds-capacity", ALLOC, line_of(repo, ALLOC, "nominal_quota: 40"))
    ]
    assert r.summary == "❌ example: the head is invalid (1 error); nothing else was reviewed"
    assert fr.nodes == [] and fr.objects == []


def test_quota_that_counts_on_nodes_this_change_adds(repo: Path) -> None:
    path = "inventory/example/nodes/fra1.yaml"

    def edit() -> None:
        extra = "".join(
            document(repo, path, "fra1-gpu-10")
            .replace("fra1-gpu-10", f"fra1-gpu-{i}")
            .replace("10.10.0.30", f"10.10.0.{i + 20}")
            .replace("203.0.113.30", f"203.0.113.{i + 20}")
            for i in (11, 12)
        )
        (repo / path).write_text((repo / path).read_text() + extra)
        replace(
            repo, ALLOC, "nominal_quota: 24, borrowing_limit: 24}", "nominal_quota: 40, borrowing_limit: 24}"
        )

    before, after, r = change(repo, edit)
    (flag,) = flags(r)["quota-over-capacity"]
    had = before["cluster"]["capacity"]["h100-sxm5-80gb"]["gpus"]
    now = after["cluster"]["capacity"]["h100-sxm5-80gb"]
    assert now["nominal_quota"] > had and now["nominal_quota"] <= now["gpus"]
    assert flag.action == "block"
    assert (
        f"adds up to {now['nominal_quota']} GPUs, above the {had} the fleet has before this change"
        in flag.reason
    )
    assert (ALLOC, line_of(repo, ALLOC, "nominal_quota: 40"), "head") in [
        (w.file, w.line, w.ref) for w in flag.where
    ]
    assert r.exit_code == 1
    assert (
        r.summary.startswith("❌ example: 2 nodes change (Node)")
        and "1 blocking: quota-over-capacity" in r.summary
    )


def test_full_mesh_to_hub_and_spoke(repo: Path) -> None:
    mesh = "policies/example/mesh.yaml"
    before, after, r = change(
        repo,
        lambda: replace(
            repo,
            mesh,
            "    ams2: {topology",
            "    fra1: {topology: hub-and-spoke, hub: fra1-head-01}\n    ams2: {topology",
        ),
    )
    fr = r.fleets[0]
    assert fr.mesh.hubs_gained == ["fra1: fra1-head-01"] and fr.mesh.hubs_lost == []
    spokes = sorted(n for n, s in after["nodes"].items() if s["site"] == "fra1" and n != "fra1-head-01")
    assert all([p["name"] for p in after["nodes"][n]["mesh"]["peers"]] == ["fra1-head-01"] for n in spokes)
    # Only peers change: wg syncconf everywhere it changes, no tunnel restart, no flag for it.
    changed = sorted(
        n
        for n in before["nodes"]
        if before["nodes"][n]["mesh"]["peers"] != after["nodes"][n]["mesh"]["peers"]
    )
    assert fr.mesh.syncconf == changed and fr.mesh.restart == [] and fr.mesh.mtu == []
    removed = {p.peer for p in fr.mesh.peers if p.what == "removed"}
    assert set(spokes) <= removed
    assert all(w.file == mesh for p in fr.mesh.peers for w in p.where)
    assert flags(r) == {} and r.exit_code == 0  # peers only: wg syncconf, no tunnel drops
    # The topology ConfigMap's edges: those lost and those gained, not the whole list.
    (topo,) = [o for o in fr.objects if o.kind == "ConfigMap" and o.name == "swarm-mesh-topology"]
    eb, ea = before["cluster"]["mesh"]["edges"], after["cluster"]["mesh"]["edges"]
    lost, gained = [e for e in eb if e not in ea], [e for e in ea if e not in eb]
    assert lost and not gained  # fra1's nodes keep only their hub, which keeps its edges
    edges = {f.path: (f.before, f.after) for f in topo.fields}["data.topology.json.edges"]
    assert edges == ({"removed": [list(e) for e in lost]}, {"added": [list(e) for e in gained]})


def test_mesh_address_change_on_a_relay_restarts_its_tunnels(repo: Path) -> None:
    path = "inventory/example/nodes/tyo1.yaml"
    before, _, r = change(
        repo,
        lambda: replace(
            repo,
            path,
            "mesh: {endpoint: 198.51.100.77}",
            "mesh: {endpoint: 198.51.100.77, address: 10.200.77.77}",
        ),
    )
    fr = r.fleets[0]
    assert fr.mesh.restart == ["tyo1-relay-01"]
    (flag,) = flags(r)["mesh-restart-on-relay-or-hub"]
    old = before["nodes"]["tyo1-relay-01"]["mesh"]["address"]
    assert flag.action == "block" and f"address {old} → 10.200.77.77/16" in flag.reason
    assert [(w.file, w.line) for w in flag.where] == [(path, line_of(repo, path, "address: 10.200.77.77"))]
    assert r.exit_code == 1


def test_driver_bump_without_canary(repo: Path) -> None:
    profiles = "policies/shared/gpu-profiles.yaml"

    def edit() -> None:
        text = (repo / profiles).read_text()
        start = text.index("name: l40s-inference")
        at = text.index('driver: {branch: "570"}', start)
        (repo / profiles).write_text(
            text[:at]
            + 'driver: {branch: "570", version: "570.124.06"}'
            + text[at + len('driver: {branch: "570"}') :]
        )

    _, after, r = change(repo, edit)
    fr = r.fleets[0]
    l40s = sorted(n for n in after["nodes"] if "L40S" in models_of(after, n))
    assert [c.nodes for c in fr.nodes if c.layer == "driver" and c.field == "version"] == [l40s]
    plan = batches([n for n, s in after["nodes"].items() if s["gpu"]], after["rollout"])
    assert not set(plan[0]) & set(l40s)  # the canary is another model's node
    (flag,) = flags(r)["driver-without-canary"]
    assert flag.action == "block" and f"canary batch ({', '.join(plan[0])})" in flag.reason
    line = line_of(repo, profiles, "570.124.06")
    assert [(w.file, w.line) for w in flag.where] == [(profiles, line)]
    assert r.exit_code == 1 and "1 blocking: driver-without-canary" in r.summary


def test_driver_bump_that_meets_the_canary_first(repo: Path) -> None:
    after_plan = state(repo)
    canary = batches([n for n, s in after_plan["nodes"].items() if s["gpu"]], after_plan["rollout"])[0][0]
    profile = after_plan["nodes"][canary]["gpu"]["profile"]
    profiles = "policies/shared/gpu-profiles.yaml"

    def edit() -> None:
        text = (repo / profiles).read_text()
        at = text.index('driver: {branch: "570"}', text.index(f"name: {profile}"))
        (repo / profiles).write_text(text[:at] + 'driver: {branch: "575"}' + text[at + 23 :])

    _, _, r = change(repo, edit)
    assert any(c.layer == "driver" for c in r.fleets[0].nodes)
    assert "driver-without-canary" not in flags(r)


def test_priority_change_that_lets_a_tenant_preempt_others(repo: Path) -> None:

    def edit() -> None:
        replace(
            repo,
            ALLOC,
            "      fair_sharing_weight: 0.5\n",
            "      fair_sharing_weight: 0.5\n      preemption: {reclaim_within_cohort: LowerPriority}\n",
        )
        replace(
            repo,
            ALLOC,
            "      queue: community\n      priorities: [spot]",
            "      queue: community\n      priorities: [production, spot]",
        )

    _, _, r = change(repo, edit)
    gained = flags(r)["preemption-gained"]
    # community's production (100000) now outranks acme-ai's batch and helix-labs' spot, in
    # the cohort both share; before, community only had spot, which never preempts.
    assert sorted(f.reason.split(":")[0] for f in gained) == [
        "community can now preempt acme-ai",
        "community can now preempt helix-labs",
    ]
    assert all("reclaimWithinCohort LowerPriority" in f.reason and f.action == "warn" for f in gained)
    lines = {w.line for f in gained for w in f.where}
    assert line_of(repo, ALLOC, "priorities: [production, spot]") in lines


def test_invalid_file_is_reported_with_links(repo: Path) -> None:
    path = "policies/shared/gpu-profiles.yaml"
    replace(repo, path, "power_limit_w: 650", "power_limit_w: lots")
    commit(repo)
    r = review(repo, "HEAD~1", "HEAD", repo_url="https://github.com/acme/fleet")
    fr = r.fleets[0]
    assert r.exit_code == 2 and fr.invalid
    (p,) = [p for p in fr.problems if p.severity == "error"]
    assert (p.rule, p.location.file, p.location.line) == ("schema.type", path, line_of(repo, path, "lots"))
    text = render(r)
    url = f"https://github.com/acme/fleet/blob/{r.head}/{path}#L{p.location.line}"
    assert f"]({url})" in text


# ------------------------------------------------------------------ output


def _html(text: str) -> tuple[str, list[Any]]:
    md = MarkdownIt("commonmark", {"html": True}).enable("table")
    return md.render(text), md.parse(text)


def test_markdown_renders_tables_and_details(repo: Path) -> None:
    path = "inventory/example/nodes/tyo1.yaml"
    new = (
        document(repo, path, "tyo1-gpu-08")
        .replace("tyo1-gpu-08", "tyo1-gpu-09")
        .replace("192.168.50.28", "192.168.50.29")
    )
    (repo / path).write_text((repo / path).read_text() + new)
    replace(repo, "policies/shared/gpu-profiles.yaml", "power_limit_w: 650", "power_limit_w: 600")
    commit(repo)
    r = review(repo, "HEAD~1", "HEAD")
    text = render(r)
    html, tokens = _html(text)
    tables = [t for t in tokens if t.type == "table_open"]
    assert len(tables) >= 5  # GPU and Node changes, mesh apply, peers, objects, capacity
    details = [t for t in tokens if t.type == "html_block" and "<details>" in t.content]
    assert details and html.count("<details>") == html.count("</details>") == len(details)
    assert html.startswith("<p>✅ example: ") or html.startswith("<p>⚠️ example: ")
    assert "<!-- swarm-review -->" in html
    # Every table row has as many cells as its header.
    for table in re.findall(r"<table>.*?</table>", html, re.S):
        head = len(re.findall(r"<th[ >]", table.split("</thead>")[0]))
        rows = re.findall(r"<tr>(.*?)</tr>", table.split("</thead>")[1], re.S)
        assert rows and all(row.count("<td") == head for row in rows)


def test_fleet_strings_cannot_inject_markdown_or_html(repo: Path) -> None:
    hostile = "x</code><script>alert(1)</script> | [a](javascript:alert(1)) @admin **b**"
    path = "policies/shared/gpu-profiles.yaml"
    replace(repo, path, "power_limit_w: 650", f"power_limit_w: {json.dumps(hostile)}")
    bad_name = "policies/shared/[evil](javascript:x) `|` <b>.yaml"
    (repo / bad_name).write_text("---\napiVersion: swarm.io/v1alpha1\nkind: Site\n")
    commit(repo)
    r = review(repo, "HEAD~1", "HEAD", repo_url="https://github.com/acme/fleet")
    assert r.exit_code == 2
    text = render(r)
    html, _ = _html(text)
    assert (
        "<script" not in html
        and 'href="javascript' not in html
        and "<b>" not in html
        and "<strong>" not in html
    )
    # The hostile text is shown, literally, in the message cell; each row keeps 4 cells.
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    for row in re.findall(r"<tr>(.*?)</tr>", html.split("</thead>")[1], re.S):
        assert row.count("<td") == 4


def test_output_is_deterministic_and_json_has_the_same_findings(repo: Path) -> None:
    replace(repo, "policies/shared/gpu-profiles.yaml", "power_limit_w: 650", "power_limit_w: 600")
    commit(repo)
    first, second = review(repo, "HEAD~1", "HEAD"), review(repo, "HEAD~1", "HEAD")
    assert render(first) == render(second)
    assert json.dumps(first.as_json(), sort_keys=True) == json.dumps(second.as_json(), sort_keys=True)
    data = first.as_json()
    assert data["summary"] == first.summary and data["exit_code"] == first.exit_code
    assert [f["rule"] for f in data["fleets"][0]["flags"]] == [f.rule for f in first.fleets[0].flags]
    assert data["fleets"][0]["nodes"][0]["field"] == "power_limit_w"


def test_cli_exit_codes_outputs_and_working_tree_untouched(
    repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    replace(
        repo,
        "policies/shared/gpu-profiles.yaml",
        'driver: {branch: "570"}\n  persistence_mode: true\n  power_limit_w: 300',
        'driver: {branch: "575"}\n  persistence_mode: true\n  power_limit_w: 300',
    )
    commit(repo)
    # An uncommitted, invalid edit in the working tree: the review reads Git, not it.
    (repo / "inventory/example/sites.yaml").write_text("not: [valid")
    status = git(repo, "status", "--porcelain")
    monkeypatch.chdir(repo)
    assert cli.main(["review", "--base", "HEAD~1", "--out", "c.md", "--full", "f.md"]) == 1
    err = capsys.readouterr().err
    # The uncommitted edit is not reviewed, and the review says so (issue #25).
    warning, summary = err.splitlines()
    assert "uncommitted" in warning and "inventory/example/sites.yaml" in warning
    assert summary.startswith("❌ example: ") and "driver-without-canary" in summary
    comment = (repo / "c.md").read_text()
    assert comment.splitlines()[1] == MARKER and len(comment) <= GITHUB_LIMIT
    assert (repo / "f.md").read_text() == comment  # small: nothing was cut
    assert cli.main(["review", "--base", "HEAD~1", "--format", "json"]) == 1
    assert json.loads(capsys.readouterr().out)["exit_code"] == 1
    assert cli.main(["review", "--base", "nope"]) == 2
    assert "no commit named 'nope'" in capsys.readouterr().err
    assert cli.main(["review", "--base", "HEAD~1", "--fleet", "lab"]) == 2
    assert "no fleet named 'lab'" in capsys.readouterr().err
    # Nothing committed changes, but the uncommitted edit was not reviewed: never ✅.
    assert cli.main(["review", "--base", "HEAD", "--head", "HEAD"]) == 0
    assert capsys.readouterr().out.startswith(
        "⚠️ no fleet changes; NOT reviewed\\: uncommitted edits to 1 fleet or rule file "
    )
    (repo / "c.md").unlink()
    (repo / "f.md").unlink()
    assert git(repo, "status", "--porcelain") == status
    assert (repo / "inventory/example/sites.yaml").read_text() == "not: [valid"


def test_the_base_policy_judges_and_a_change_cannot_relax_it(repo: Path) -> None:
    policy = "policies/example/review.yaml"
    profiles = "policies/shared/gpu-profiles.yaml"
    bump = (
        'driver: {branch: "570"}\n  persistence_mode: true\n  power_limit_w: 300',
        'driver: {branch: "575"}\n  persistence_mode: true\n  power_limit_w: 300',
    )
    # The same change relaxing the policy is still blocked: the base's policy applies.
    replace(repo, policy, "driver-without-canary: block", "driver-without-canary: warn")
    replace(repo, profiles, *bump)
    commit(repo)
    r = review(repo, "HEAD~1", "HEAD")
    assert flags(r)["driver-without-canary"][0].action == "block" and r.fleets[0].policy_changed
    assert r.exit_code == 1
    # Once the relaxed policy is in the base, the next driver bump only warns.
    replace(
        repo,
        profiles,
        'driver: {branch: "575"}\n  persistence_mode: true\n  power_limit_w: 300',
        'driver: {branch: "580"}\n  persistence_mode: true\n  power_limit_w: 300',
    )
    commit(repo)
    r = review(repo, "HEAD~1", "HEAD")
    assert flags(r)["driver-without-canary"][0].action == "warn" and r.exit_code == 0
    assert r.summary.startswith("⚠️ ")


def test_comment_stays_under_githubs_limit_with_a_huge_change(tmp_path: Path) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_fleet", ROOT / "benchmarks" / "gen_fleet.py")
    assert spec and spec.loader
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    repo = tmp_path / "repo"
    gen.generate(repo / "inventory" / "big", 1200, 20)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    # Every node gets its own label value: nothing folds, every Node object changes.
    counter = iter(range(10**6))
    for f in sorted((repo / "inventory" / "big" / "nodes").glob("*.yaml")):
        f.write_text(re.sub(r"tier: t\d", lambda _: f"tier: u{next(counter)}", f.read_text()))
    git(repo, "commit", "-qam", "relabel")
    r = review(repo, "HEAD~1", "HEAD")
    full, comment = render(r, None), render(r)
    assert len(full) > GITHUB_LIMIT >= len(comment)
    assert comment.splitlines()[0] == render(r, None).splitlines()[0] and comment.splitlines()[1] == MARKER
    # Long tables and listings are capped, and no section is dropped for an earlier long one:
    # the flags, the mesh, the objects and the capacity are all in the comment (issue #25, 5).
    for heading in ("### Risk flags", "### Nodes", "### Mesh", "### Cluster objects", "### Capacity"):
        assert heading in comment, heading
    assert "more changes in the full report" in comment
    html, _ = _html(comment)
    assert html.count("<details>") == html.count("</details>")
    assert r.fleets[0].nodes_changed == 1200


# ------------------------------------------------------------- decisions in resolve/


def test_mesh_apply_follows_the_wireguard_role() -> None:
    """The role restarts the interface only when its address differs (peers go through
    wg syncconf, the MTU through ip link): mesh_apply must say the same."""
    import yaml

    from swarm_infra.resolve.mesh import MeshApply, mesh_apply

    tasks = yaml.safe_load((ROOT / "roles/wireguard/tasks/main.yml").read_text())
    restarts = [
        t for t in tasks if (t.get("ansible.builtin.systemd_service") or {}).get("state") == "restarted"
    ]
    # one restart, conditioned on the running address alone (not on peers, port or MTU)
    assert len(restarts) == 1
    when = restarts[0]["when"]
    assert "wireguard_state.address not in" in when
    assert not any(word in when for word in ("peer", "mtu", "port", "changed"))
    mtu = next(t for t in tasks if t["name"].startswith("Set the declared MTU"))
    assert mtu["ansible.builtin.command"]["argv"][:3] == ["ip", "link", "set"]
    base = {
        "interface": "wg0",
        "address": "10.0.0.1/16",
        "listen_port": 51820,
        "mtu": 1420,
        "forwarding": False,
    }
    peers = [{"name": "b", "allowed_ips": ["10.0.0.2/32"], "endpoint": None, "persistent_keepalive_s": 0}]
    before = {**base, "peers": peers}
    moved = [{**peers[0], "allowed_ips": ["10.0.0.2/32", "10.0.0.3/32"]}]
    cases = {
        "mtu": (
            {**before, "mtu": 1380},
            MeshApply(restart=False, syncconf=False, mtu=True, forwarding=False),
        ),
        "peers": (
            {**before, "peers": moved},
            MeshApply(restart=False, syncconf=True, mtu=False, forwarding=False),
        ),
        "port": ({**before, "listen_port": 51821}, MeshApply(False, True, False, False)),
        "address": ({**before, "address": "10.0.0.9/16"}, MeshApply(True, False, False, False)),
        "forwarding": ({**before, "forwarding": True}, MeshApply(False, False, False, True)),
    }
    for name, (after, expected) in cases.items():
        assert mesh_apply(before, after) == expected, name


def test_batches_are_ansibles_serial_batches() -> None:
    """Canary first, then N% of all the play's hosts (Ansible's pct_to_int), the last size
    repeated."""
    from ansible.utils.helpers import pct_to_int

    for count in (1, 3, 9, 41, 250):
        hosts = [f"h{i:03d}" for i in range(count)]
        for serial in ([1, "10%"], [2, "25%"], [1, "100%"], [5, "1%"]):
            plan = batches(hosts, {"serial": serial, "max_fail_percentage": 0})
            sizes = [serial[0], pct_to_int(serial[1], count)]
            expected, start, i = [], 0, 0
            while start < count:
                size = max(sizes[min(i, 1)], 1)
                expected.append(hosts[start : start + size])
                start, i = start + size, i + 1
            assert plan == expected, (count, serial)


def test_an_ssh_target_change_is_a_risk_flag(repo: Path) -> None:
    """Issue #22: where the controller takes the operator's key is reviewed state."""
    path = "inventory/example/nodes/tyo1.yaml"
    before, after, r = change(
        repo, lambda: replace(repo, path, "ssh: {user: swarm}", "ssh: {user: swarm, port: 2222}")
    )
    changed = [n for n in after["nodes"] if after["nodes"][n]["ssh"] != before["nodes"][n]["ssh"]]
    assert len(changed) == 1
    (flag,) = flags(r)["ssh-target-changed"]
    old, new = before["nodes"][changed[0]]["ssh"], after["nodes"][changed[0]]["ssh"]
    assert flag.action == "warn"
    assert f"swarm@{old['host']}:22 to swarm@{new['host']}:2222" in flag.reason
    assert [w.file for w in flag.where] == [path]


# ------------------------------------------------------------- relays across providers

NEW_SITES = "inventory/example/nodes/nat-sites.yaml"
SITE = (
    "---\napiVersion: swarm.io/v1alpha1\nkind: Site\nmetadata: {{name: {name}}}\nspec:\n  region: r\n"
    "  provider: {provider}\n  underlay: {{cidr: {net}.0/24}}\n"
)
NAT_NODE = (
    "---\napiVersion: swarm.io/v1alpha1\nkind: Node\nmetadata: {{name: {name}}}\nspec:\n  site: {site}\n"
    "  address: {net}.10\n  roles: [cpu-worker]\n  hardware: {{cpus: 4, memory_gib: 16}}\n"
    "  mesh: {{nat: true}}\n"
)


def nat_sites(repo: Path, providers: dict[str, str]) -> None:
    """Two (or more) full-mesh sites, each with one NAT'd node: their pair needs a relay."""
    text = ""
    for i, (site, provider) in enumerate(providers.items()):
        net = f"10.{60 + 10 * i}.0"
        text += SITE.format(name=site, provider=provider, net=net)
        text += NAT_NODE.format(name=f"{site}-cpu-01", site=site, net=net)
    (repo / NEW_SITES).write_text(text)


def declared_providers(repo: Path) -> dict[str, str]:
    """Site -> provider as the fleet's YAML declares it (not as the resolver reports it)."""
    import yaml

    out = {}
    for path in sorted((repo / "inventory/example").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "Site":
                out[doc["metadata"]["name"]] = doc["spec"].get("provider", doc["metadata"]["name"])
    return out


def test_a_relay_carrying_other_providers_nat_pair_is_a_risk_flag(repo: Path) -> None:
    """Two new NAT'd sites of two new providers: whichever relay joins them is another
    provider's, and WireGuard decrypts there."""
    _, after, r = change(
        repo, lambda: nat_sites(repo, {"lon1": "Thames Compute Ltd", "sea1": "Cascade GPU Inc"})
    )
    (route,) = after["cluster"]["mesh"]["relay_routes"]
    relay = route["relay"]
    providers = declared_providers(repo)
    relay_provider = providers[after["nodes"][relay]["site"]]
    assert relay_provider not in ("Thames Compute Ltd", "Cascade GPU Inc")
    (flag,) = flags(r)["relay-crosses-provider"]
    assert flag.action == "warn" and r.exit_code == 0
    assert f"{relay} (site {after['nodes'][relay]['site']}, provider {relay_provider})" in flag.reason
    assert "lon1 (Thames Compute Ltd) and sea1 (Cascade GPU Inc)" in flag.reason
    assert "no measured path" in flag.reason
    assert {w.file for w in flag.where} == {NEW_SITES}
    # The next change leaves the route as it is: no flag again.
    _, _, r2 = change(repo, lambda: replace(repo, NEW_SITES, "cpus: 4", "cpus: 8"))
    assert "relay-crosses-provider" not in flags(r2)


def test_a_relay_of_the_pairs_own_provider_is_no_risk_flag(repo: Path) -> None:
    """Both new sites are Rheinwerk's, and so is fra1's relay: without measurements a relay
    of the pair's own provider is preferred, and it relays nobody else's traffic."""
    rheinwerk = declared_providers(repo)["fra1"]
    _, after, r = change(repo, lambda: nat_sites(repo, {"lon1": rheinwerk, "sea1": rheinwerk}))
    (route,) = after["cluster"]["mesh"]["relay_routes"]
    assert declared_providers(repo)[after["nodes"][route["relay"]]["site"]] == rheinwerk
    assert "relay-crosses-provider" not in flags(r)


def test_a_measurement_that_moves_a_pair_to_another_providers_relay_is_a_risk_flag(repo: Path) -> None:
    rheinwerk = declared_providers(repo)["fra1"]
    nat_sites(repo, {"lon1": rheinwerk, "sea1": rheinwerk})
    # A pair with a relay of its own provider leaves it only for a provider the Mesh allows
    # (#38): the operator allows Polder's relays, which the review still flags.
    polder = declared_providers(repo)["ams2"]
    allowed = f"  topology: full-mesh\n  relays: {{allowed_providers: [{polder}]}}\n"
    replace(repo, "policies/example/mesh.yaml", "  topology: full-mesh\n", allowed)
    commit(repo, "two NAT'd Rheinwerk sites")
    matrix = "policies/example/latency.yaml"
    figures = {("lon1", "fra1"): 50, ("fra1", "sea1"): 50, ("lon1", "ams2"): 10, ("ams2", "sea1"): 10}
    text = "apiVersion: swarm.io/v1alpha1\nkind: LatencyMatrix\nmetadata: {name: measured}\nspec:\n  pairs:\n"
    text += "".join(
        f"    - {{a: {a}, b: {b}, rtt_ms: {ms}, a_to_b_ms: {ms}, b_to_a_ms: {ms}}}\n"  # both ends measured
        for (a, b), ms in figures.items()
    )
    before, after, r = change(repo, lambda: (repo / matrix).write_text(text))
    (old,), (new,) = before["cluster"]["mesh"]["relay_routes"], after["cluster"]["mesh"]["relay_routes"]
    hub = after["cluster"]["mesh"]["hubs"]["ams2"]  # the only relay of ams2
    assert declared_providers(repo)[after["nodes"][old["relay"]]["site"]] == rheinwerk
    assert new["relay"] == hub and new["path_rtt_ms"] == 10 + 10
    (flag,) = flags(r)["relay-crosses-provider"]
    polder = declared_providers(repo)["ams2"]
    assert f"{hub} (site ams2, provider {polder})" in flag.reason and "measured path 20 ms" in flag.reason
    assert {w.file for w in flag.where} == {matrix}


# Host public keys made for these tests by ssh-keygen (the private parts are gone).
NEW_ED25519 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIP8tXWs4NV8u5F99npYOWr/9Zka7Ayo2aVSp26m04pop"
NEW_ED25519_SHA256 = "SHA256:jjbG+guMBdFnw93Hc1oOHkAQpwa+0y10JQM+vFNJDGc"  # ssh-keygen -lf


def openssh_fingerprint(key: str, tmp: Path) -> str:
    """The key's fingerprint as OpenSSH prints it (``ssh-keygen -l``)."""
    (tmp / "key.pub").write_text(key + "\n")
    out = subprocess.run(["ssh-keygen", "-l", "-f", str(tmp / "key.pub")], capture_output=True, text=True)
    return f"{key.split()[0]} {out.stdout.split()[1]}"


def host_key_flags(r: Review) -> list[Any]:
    return flags(r).get("ssh-host-key-changed", [])


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs OpenSSH's ssh-keygen")
def test_a_host_key_added_changed_or_removed_is_a_risk_flag(repo: Path, tmp_path: Path) -> None:
    """Issue #22: which machine the controller accepts as a node is reviewed state."""
    path = "inventory/example/nodes/fra1.yaml"
    head_key = state(repo)["nodes"]["fra1-head-01"]["ssh"]["host_keys"][0]
    gpu_keys = state(repo)["nodes"]["fra1-gpu-01"]["ssh"]["host_keys"]
    assert len(gpu_keys) == 2
    assert openssh_fingerprint(NEW_ED25519, tmp_path) == f"ssh-ed25519 {NEW_ED25519_SHA256}"

    # Changed: the head's key is replaced.
    _, _, r = change(repo, lambda: replace(repo, path, head_key, NEW_ED25519))
    (flag,) = host_key_flags(r)
    assert flag.action == "warn"
    assert flag.reason.startswith(
        f"fra1-head-01's SSH host keys change (added ssh-ed25519 {NEW_ED25519_SHA256}; removed "
        f"{openssh_fingerprint(head_key, tmp_path)})"
    )
    assert [(w.file, w.line) for w in flag.where] == [(path, line_of(repo, path, NEW_ED25519))]
    assert r.exit_code == 0  # warn, the default

    # Removed: the node falls back to the operator's known_hosts.
    _, after, r = change(repo, lambda: replace(repo, path, f"host_keys: [{NEW_ED25519}]", "host_keys: []"))
    assert after["nodes"]["fra1-head-01"]["ssh"]["host_keys"] == []
    (flag,) = host_key_flags(r)
    assert (
        f"fra1-head-01's declared SSH host key(s) are removed (ssh-ed25519 {NEW_ED25519_SHA256})"
        in flag.reason
    )
    assert "operator's own known_hosts" in flag.reason

    # Added to a node that declared none.
    _, _, r = change(repo, lambda: replace(repo, path, "host_keys: []", f"host_keys: [{NEW_ED25519}]"))
    (flag,) = host_key_flags(r)
    assert flag.reason.startswith(
        f"fra1-head-01 now declares its SSH host key(s) (ssh-ed25519 {NEW_ED25519_SHA256})"
    )

    # The same keys in another order accept the same machines: no flag.
    def swap() -> None:
        replace(repo, path, f"- {gpu_keys[0]}", "- KEY-A")
        replace(repo, path, f"- {gpu_keys[1]}", f"- {gpu_keys[0]}")
        replace(repo, path, "- KEY-A", f"- {gpu_keys[1]}")

    _, after, r = change(repo, swap)
    assert after["nodes"]["fra1-gpu-01"]["ssh"]["host_keys"] == gpu_keys[::-1]
    assert host_key_flags(r) == []

    # A change elsewhere: no flag, and no SSH target flag for a key change either.
    _, _, r = change(
        repo,
        lambda: replace(
            repo, "policies/shared/gpu-profiles.yaml", "power_limit_w: 650", "power_limit_w: 600"
        ),
    )
    assert host_key_flags(r) == [] and "ssh-target-changed" not in flags(r)


def test_a_node_added_with_its_host_key_is_shown_as_an_added_node_not_a_key_change(repo: Path) -> None:
    path = "inventory/example/nodes/fra1.yaml"

    def add() -> None:
        extra = (
            document(repo, path, "fra1-gpu-10")
            .replace("fra1-gpu-10", "fra1-gpu-11")
            .replace("10.10.0.30", "10.10.0.31")
            .replace("203.0.113.30", "203.0.113.31")
            .replace("ssh: {user: swarm}", f"ssh: {{user: swarm, host_keys: [{NEW_ED25519}]}}")
        )
        (repo / path).write_text((repo / path).read_text() + extra)

    _, after, r = change(repo, add)
    assert after["nodes"]["fra1-gpu-11"]["ssh"]["host_keys"] == [NEW_ED25519]
    assert host_key_flags(r) == []
    assert ("node", "added", ["fra1-gpu-11"]) in [(c.layer, c.change, c.nodes) for c in r.fleets[0].nodes]


# ------------------------------------------------------- supply chain (issue #22)

RAY_POLICY = "policies/example/ray.yaml"
RAY_LOCK = "policies/example/ray-requirements.lock"


def with_ray(repo: Path) -> None:
    """A RayCluster on the example fleet, installing the lab's lock, committed."""
    shutil.copy(ROOT / "policies" / "lab" / "ray-requirements.lock", repo / RAY_LOCK)
    (repo / RAY_POLICY).write_text(
        "apiVersion: swarm.io/v1alpha1\nkind: RayCluster\nmetadata: {name: example-ray}\nspec:\n"
        "  head: {selector: {nodes: [fra1-head-01]}}\n"
        "  workers: {selector: {nodes: [fra1-gpu-01]}}\n"
        '  package_index: {url: "https://pypi.example.net/simple/"}\n'
        "  lock_file: ray-requirements.lock\n  packages: [scikit-learn]\n"
    )
    commit(repo, "a Ray cluster")


def test_a_changed_lock_is_a_risk_flag_at_the_lock_file(repo: Path) -> None:
    """Issue #22: what every Ray node installs as root is reviewed state."""
    with_ray(repo)
    lock = (repo / RAY_LOCK).read_text()
    numpy = re.search(r"^numpy==(\S+) \\\n    --hash=sha256:([0-9a-f]{64})", lock, re.M)
    assert numpy
    new = f"numpy==9.9.9 \\\n    --hash=sha256:{'b' * 64}"
    _, _, r = change(repo, lambda: (repo / RAY_LOCK).write_text(lock.replace(numpy.group(0), new)))
    (flag,) = flags(r)["ray-packages-changed"]
    assert flag.action == "warn" and r.exit_code == 0
    assert f"changed numpy {numpy.group(1)} -> 9.9.9" in flag.reason
    assert [(w.file, w.line) for w in flag.where] == [(RAY_LOCK, 0)]
    assert "package-index-changed" not in flags(r)
    # Only a hash: still what the nodes install.
    _, _, r = change(repo, lambda: replace(repo, RAY_LOCK, "b" * 64, "c" * 64))
    (flag,) = flags(r)["ray-packages-changed"]
    assert "other hashes for numpy 9.9.9" in flag.reason


def test_another_package_index_is_a_risk_flag(repo: Path) -> None:
    with_ray(repo)
    _, _, r = change(repo, lambda: replace(repo, RAY_POLICY, "pypi.example.net", "mirror.example.org"))
    (flag,) = flags(r)["package-index-changed"]
    assert flag.action == "warn"
    assert "index https://pypi.example.net/simple/ -> https://mirror.example.org/simple/" in flag.reason
    assert [(w.file, w.line) for w in flag.where] == [
        (RAY_POLICY, line_of(repo, RAY_POLICY, "mirror.example"))
    ]
    assert "ray-packages-changed" not in flags(r)
    # Nothing of Ray changes: no flag.
    _, _, r = change(repo, lambda: replace(repo, "inventory/example/nodes/fra1.yaml", "cpus:", "cpus: "))
    assert not {"package-index-changed", "ray-packages-changed"} & set(flags(r))
