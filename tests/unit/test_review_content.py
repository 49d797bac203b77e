"""What `swarm review` shows of a change, and the flags it raises: realistic pull requests
made as Git commits on a copy of the example fleet (the helpers of ``test_review``).

Expected values come from the fleet's desired state before and after (``state``), from
the fleet files themselves, or from the upstream rule (Kueue's preemption, the device
plugin's units), never from the review's own output.
"""

from __future__ import annotations

import ipaddress
import json
import re
from pathlib import Path

from swarm_infra.resolve.mesh import derived_address
from swarm_infra.resolve.rollout import rollout_batches as batches
from swarm_infra.resolve.types import DesiredState
from swarm_infra.review.markdown import render
from swarm_infra.review.model import ABSENT

from . import test_review
from .test_review import ALLOC, change, commit, document, flags, line_of, models_of, replace, state, step

# base_repo and repo: tests/unit/conftest.py's (the example fleet committed, a copy per test).

PROFILES = "policies/shared/gpu-profiles.yaml"
ASSIGNMENTS = "policies/example/assignments.yaml"


def _l40s_driver(repo: Path, driver: str) -> None:
    text = (repo / PROFILES).read_text()
    at = text.index('driver: {branch: "570"}', text.index("name: l40s-inference"))
    (repo / PROFILES).write_text(text[:at] + driver + text[at + len('driver: {branch: "570"}') :])


def _l40s_canary(repo: Path, node: str, driver: str) -> None:
    """A copy of the L40S profile with ``driver``, assigned to ``node`` alone at a higher
    precedence: what the driver flag advises."""
    text = (repo / PROFILES).read_text()
    doc = text[text.index("kind: GpuProfile\nmetadata:\n  name: l40s-inference") :]
    doc = doc[: doc.index("\n---")] if "\n---" in doc else doc
    canary = doc.replace("name: l40s-inference", "name: l40s-canary").replace(
        'driver: {branch: "570"}', driver
    )
    (repo / PROFILES).write_text(text.rstrip("\n") + "\n---\napiVersion: swarm.io/v1alpha1\n" + canary + "\n")
    with (repo / ASSIGNMENTS).open("a") as f:
        f.write(
            "---\napiVersion: swarm.io/v1alpha1\nkind: Assignment\nmetadata:\n  name: l40s-canary\n"
            f"spec:\n  selector: {{nodes: [{node}]}}\n  gpu_profile: l40s-canary\n  precedence: 100\n"
        )


NEW_DRIVER = 'driver: {branch: "570", version: "570.124.06"}'


def test_a_driver_canary_on_one_node_of_another_group_passes(repo: Path) -> None:
    base = state(repo)
    l40s = sorted(n for n in base["nodes"] if "L40S" in models_of(base, n))
    plan = batches([n for n, s in base["nodes"].items() if s["gpu"]], base["rollout"])
    assert not set(plan[0]) & set(l40s)  # the fleet's canary batch holds no L40S node
    _, after, r = change(repo, lambda: _l40s_canary(repo, l40s[0], NEW_DRIVER))
    (c,) = [c for c in r.fleets[0].nodes if c.layer == "driver" and c.field == "version"]
    assert (c.nodes, c.before, c.after) == ([l40s[0]], None, "570.124.06")
    assert after["nodes"][l40s[0]]["gpu"]["driver"]["version"] == "570.124.06"
    assert "driver-without-canary" not in flags(r) and r.exit_code == 0


def test_a_driver_bump_after_its_group_canary_passes_and_without_it_blocks(repo: Path) -> None:
    base = state(repo)
    l40s = sorted(n for n in base["nodes"] if "L40S" in models_of(base, n))
    _l40s_canary(repo, l40s[0], NEW_DRIVER)
    commit(repo, "canary")
    # The rest of the group follows the canary: the profile gets the canary's driver.
    _, after, r = change(repo, lambda: _l40s_driver(repo, NEW_DRIVER))
    changed = [n for n in l40s if n != l40s[0]]
    (c,) = [c for c in r.fleets[0].nodes if c.layer == "driver" and c.field == "version"]
    assert c.nodes == changed and c.after == after["nodes"][changed[0]]["gpu"]["driver"]["version"]
    assert "driver-without-canary" not in flags(r)
    # Another driver on the whole group at once has had no canary: blocked, per group.
    _, _, r = change(repo, lambda: replace(repo, PROFILES, NEW_DRIVER, 'driver: {branch: "575"}'))
    (flag,) = flags(r)["driver-without-canary"]
    assert flag.action == "block" and f"{len(changed)} L40S node(s)" in flag.reason
    assert r.exit_code == 1


def test_a_quota_change_shows_the_exact_nominal_quota(repo: Path) -> None:
    line = "        - {flavor: h100-sxm5-80gb, nominal_quota: 48, borrowing_limit: 16, lending_limit: 8}"
    before, after, r = change(
        repo, lambda: replace(repo, ALLOC, line, line.replace("nominal_quota: 48", "nominal_quota: 56"))
    )
    units = {f["name"]: f["units_per_gpu"] for f in after["cluster"]["flavors"]}["h100-sxm5-80gb"]
    (cq,) = [o for o in r.fleets[0].objects if o.kind == "ClusterQueue" and o.name == "acme-ai"]
    path = "spec.resourceGroups[0].flavors[h100-sxm5-80gb].resources[nvidia.com/gpu].nominalQuota"
    assert [(f.path, f.before, f.after) for f in cq.fields if f.path == path] == [
        (path, 48 * units, 56 * units)
    ]
    md = render(r)
    escaped = re.sub(r"([.\[\]])", r"\\\1", path)  # as the renderer escapes Markdown
    assert f"<code>{escaped}</code>: <code>48</code> → <code>56</code>" in md
    assert {r_.flavor: r_.nominal_quota for r_ in r.fleets[0].capacity if r_.cohort is None}[
        "h100-sxm5-80gb"
    ] == [
        before["cluster"]["capacity"]["h100-sxm5-80gb"]["nominal_quota"],
        after["cluster"]["capacity"]["h100-sxm5-80gb"]["nominal_quota"],
    ]


def test_a_priority_raised_across_tenants_is_a_risk_flag(repo: Path) -> None:
    # batch (1000) raised above production (100000). acme-ai and helix-labs both hold batch
    # and production, in cohort swarm. helix-labs' queue reclaims by LowerPriority: before,
    # its best (production) only reached acme-ai's batch; now its batch outranks acme-ai's
    # production, so it may evict acme-ai's production work. (acme-ai reclaims with Any:
    # it could already reach every priority, so it gains nothing.) Only the pair was
    # compared before, and the pair could already preempt: nothing was raised.
    _, after, r = change(repo, lambda: replace(repo, ALLOC, "  value: 1000\n", "  value: 200000\n"))
    prios = {p["name"]: p["value"] for p in after["cluster"]["priorities"]}
    assert prios["batch"] > prios["production"]
    queues = {q["name"]: q for q in after["cluster"]["cluster_queues"]}
    assert queues["helix-labs"]["preemption"]["reclaim_within_cohort"] == "LowerPriority"
    assert queues["acme-ai"]["preemption"]["reclaim_within_cohort"] == "Any"
    (flag,) = flags(r)["preemption-gained"]
    assert flag.reason.startswith(
        "helix-labs can now preempt acme-ai: its batch workloads may evict acme-ai's production ones"
    )
    assert flag.action == "warn" and r.exit_code == 0  # the base's ReviewPolicy: warn
    (prio,) = [o for o in r.fleets[0].objects if o.kind == "WorkloadPriorityClass" and o.name == "batch"]
    assert [(f.path, f.before, f.after) for f in prio.fields] == [("value", 1000, 200000)]


def test_a_renamed_node_shows_its_new_mesh_address(repo: Path) -> None:
    path = "inventory/example/nodes/fra1.yaml"
    before, after, r = change(repo, lambda: replace(repo, path, "name: fra1-gpu-10", "name: fra1-gpu-99"))
    cidr = before["cluster"]["mesh"]["cidr"]

    old = before["nodes"]["fra1-gpu-10"]["mesh"]["address"]
    new = after["nodes"]["fra1-gpu-99"]["mesh"]["address"]
    assert new.split("/")[0] == str(derived_address(ipaddress.IPv4Network(cidr), "fra1-gpu-99"))
    changes = {(c.layer, c.field): c for c in r.fleets[0].nodes}
    assert (changes["node", "name"].before, changes["node", "name"].after) == ("fra1-gpu-10", "fra1-gpu-99")
    addr = changes["mesh", "address"]
    assert (addr.before, addr.after, addr.nodes) == (old, new, ["fra1-gpu-99"])
    esc = [x.replace(".", "\\.").replace("/", "/") for x in (old, new)]
    assert f"<code>{esc[0]}</code> → <code>{esc[1]}</code>" in render(r)
    # The Kubernetes Node is removed and another added: pods on the old one lose their node,
    # which the H100 quota counts on (a warning, exit 0).
    assert list(flags(r)) == ["node-removed-backing-quota"] and r.exit_code == 0
    assert "fra1-gpu-10 (8 x H100-SXM5-80GB) is removed" in flags(r)["node-removed-backing-quota"][0].reason


def test_enabling_mig_multiplies_the_units_kueue_counts(repo: Path) -> None:
    def edit() -> None:
        replace(
            repo,
            PROFILES,
            "  ecc: true\n  mig: {enabled: false}\n---",
            "  ecc: true\n  mig: {enabled: true, profiles: [3g.40gb, 3g.40gb]}\n---",
        )

    before, after, r = change(repo, edit)
    flavor = next(f for f in after["cluster"]["flavors"] if f["gpu_model"] == "H100-SXM5-80GB")
    old = next(f for f in before["cluster"]["flavors"] if f["gpu_model"] == "H100-SXM5-80GB")
    assert (old["units_per_gpu"], flavor["units_per_gpu"]) == (1, 2)  # two MIG instances per GPU
    (row,) = [x for x in r.fleets[0].capacity if x.flavor == flavor["name"] and x.cohort is None]
    assert row.units_per_gpu == [1, 2]
    assert row.device_units == [old["gpus"], 2 * flavor["gpus"]]
    assert f"{old['gpus']} → **{2 * flavor['gpus']}**" in render(r)
    # acme-ai's Ray workers ask for the same GPUs in the new units, shown leaf by leaf in
    # the RayCluster's worker group (by its groupName), not as the whole list.
    (ray,) = [o for o in r.fleets[0].objects if o.kind == "RayCluster" and o.name == "acme-ai"]
    container = f"spec.workerGroupSpecs[{flavor['name']}].template.spec.containers[ray-worker].resources"
    gpu = {f.path: (f.before, f.after) for f in ray.fields}
    old_req = gpu[f"{container}.requests.nvidia.com/gpu"]
    assert old_req == gpu[f"{container}.limits.nvidia.com/gpu"] and len(gpu) == 2
    assert int(old_req[1]) == int(old_req[0]) * flavor["units_per_gpu"] // old["units_per_gpu"]
    escaped = re.sub(r"([.\[\]])", r"\\\1", f"{container}.requests.nvidia.com/gpu")
    assert f"<code>{escaped}</code>: <code>{old_req[0]}</code> → <code>{old_req[1]}</code>" in render(r)
    h100 = sorted(n for n in after["nodes"] if "H100-SXM5-80GB" in models_of(after, n))
    assert r.fleets[0].nodes_changed == len(h100)
    assert list(flags(r)) == (["rollout-step-exceeded"] if len(h100) > step(after) else [])
    assert r.exit_code == 0


def test_a_loosened_rollout_is_shown_and_flagged(repo: Path) -> None:
    def edit() -> None:
        replace(repo, "policies/example/rollout.yaml", "canary_hosts: 1", "canary_hosts: 100000")
        replace(repo, "policies/example/rollout.yaml", "batch_percent: 10", "batch_percent: 100")

    _, _, r = change(repo, edit)
    assert [(c.path, c.before, c.after) for c in r.fleets[0].rollout] == [
        ("canary_hosts", 1, 100000),
        ("batch_percent", 10, 100),
    ]
    (flag,) = flags(r)["rollout-loosened"]
    assert "canary_hosts 1 -> 100000" in flag.reason and "batch_percent 10 -> 100" in flag.reason
    md = render(r)
    assert "### Rollout" in md and md.index("### Risk flags") < md.index("### Rollout")


def test_an_added_peer_shows_its_entry_in_json(repo: Path) -> None:
    path = "inventory/example/nodes/tyo1.yaml"
    new = (
        document(repo, path, "tyo1-gpu-08")
        .replace("tyo1-gpu-08", "tyo1-gpu-09")
        .replace("192.168.50.28", "192.168.50.29")
    )
    _, after, r = change(repo, lambda: (repo / path).write_text((repo / path).read_text() + new))
    data = r.as_json()["fleets"][0]["mesh"]["peers"]
    added = [p for p in data if p["what"] == "added" and p["peer"] == "tyo1-gpu-09"]
    # What each node gains: the entry its head peer list holds for the new node.
    entries = {
        json.dumps({k: v for k, v in p.items() if k != "name"}, sort_keys=True)
        for s in after["nodes"].values()
        if s["mesh"]
        for p in s["mesh"]["peers"]
        if p["name"] == "tyo1-gpu-09"
    }
    assert entries and {json.dumps(p["after"], sort_keys=True) for p in added} == entries
    assert all(p["after"]["allowed_ips"] for p in added)  # the CIDRs, not {"absent": true}


def test_flags_come_first_and_are_never_cut(repo: Path) -> None:
    def edit() -> None:
        replace(repo, "policies/example/rollout.yaml", "canary_hosts: 1", "canary_hosts: 50")
        replace(repo, PROFILES, "power_limit_w: 650", "power_limit_w: 600")

    _, _, r = change(repo, edit)
    comment = render(r, 1500)
    assert len(comment) <= 1500
    assert "rollout\\-loosened" in comment or "rollout-loosened" in comment
    assert "Left out to fit a comment" in comment and "swarm-review" in comment
    full = render(r, None)
    assert full.index("### Risk flags") < full.index("### Nodes")
    assert re.search(r"power\\_limit\\_w|power_limit_w", full)


# ---------------------------------------------- more kinds of pull request (issue #25)

HOSTS = "policies/shared/host-profiles.yaml"
MESH = "policies/example/mesh.yaml"


def _shown(field: str, old: object, new: object) -> str:
    """How the comment shows a leaf's change (the escaping of ``markdown.text``)."""
    esc = "".join("\\" + ch if ch in "._" else ch for ch in field)
    return f"<code>{esc}</code> <code>{old}</code> → <code>{new}</code>"


def test_a_power_limit_capped_at_one_site(repo: Path) -> None:
    """A copy of the H100 profile at 600 W, assigned by a site selector to the H100 nodes
    of that site: only they change, their power limit and the profile's name."""
    base = state(repo)
    h100 = sorted(n for n in base["nodes"] if "H100-SXM5-80GB" in models_of(base, n))
    site = base["nodes"][h100[0]]["site"]
    capped = [n for n in h100 if base["nodes"][n]["site"] == site]

    def limits(s: DesiredState, nodes: list[str]) -> set[int]:
        return {d["settings"]["power_limit_w"] for n in nodes for d in s["nodes"][n]["gpu"]["devices"]}

    (old,) = limits(base, capped)
    profile = document(repo, PROFILES, "h100-training").replace("h100-training", "h100-capped")
    profile = profile.replace(f"power_limit_w: {old}", "power_limit_w: 600")

    def edit() -> None:
        with (repo / PROFILES).open("a") as f:
            f.write(profile.removeprefix("\n"))
        with (repo / ASSIGNMENTS).open("a") as f:
            f.write(
                "---\napiVersion: swarm.io/v1alpha1\nkind: Assignment\nmetadata:\n  name: h100-capped\n"
                f"spec:\n  selector: {{sites: [{site}], gpu_models: [H100-SXM5-80GB]}}\n"
                "  gpu_profile: h100-capped\n  precedence: 50\n"
            )

    _, after, r = change(repo, edit)
    fr = r.fleets[0]
    assert limits(after, capped) == {600}
    (c,) = [c for c in fr.nodes if c.field == "power_limit_w"]
    assert (c.layer, c.before, c.after, c.nodes, c.sites) == ("gpu", old, 600, capped, {site: len(capped)})
    (p,) = [c for c in fr.nodes if c.field == "profile"]
    assert (p.before, p.after, p.nodes) == ("h100-training", "h100-capped", capped)
    assert fr.nodes_changed == len(capped) and fr.layers == ["gpu"]
    assert {n for c in fr.nodes for n in c.nodes} == set(capped)
    # More nodes than a Rollout batch is a warning (the base's ReviewPolicy), never a block.
    assert list(flags(r)) == (["rollout-step-exceeded"] if len(capped) > step(after) else [])
    assert r.exit_code == 0
    # Both documents are new: each is named by the line of its name.
    assert [(w.file, w.line, w.ref) for w in c.where] == [
        (ASSIGNMENTS, line_of(repo, ASSIGNMENTS, "name: h100-capped"), "head"),
        (PROFILES, line_of(repo, PROFILES, "name: h100-capped"), "head"),
    ]
    assert _shown("power_limit_w", old, 600) in render(r)


def test_a_sysctl_added_to_a_host_profile(repo: Path) -> None:
    """``net.ipv4.tcp_fastopen: 3`` added to the base HostProfile: every node that
    includes it gains the sysctl (its value and its sysctl.d text)."""
    base = state(repo)
    assert all(
        "net.ipv4.tcp_fastopen" not in s["host"]["sysctls"] for s in base["nodes"].values() if s["host"]
    )
    _, after, r = change(
        repo,
        lambda: replace(
            repo,
            HOSTS,
            "    fs.inotify.max_user_instances: 8192\n",
            "    fs.inotify.max_user_instances: 8192\n    net.ipv4.tcp_fastopen: 3\n",
        ),
    )
    gained = sorted(
        n for n, s in after["nodes"].items() if s["host"] and "net.ipv4.tcp_fastopen" in s["host"]["sysctls"]
    )
    assert gained == sorted(after["nodes"])  # base is every node's profile, or included by it
    fr = r.fleets[0]
    changes = {(c.layer, c.field, c.change): c for c in fr.nodes}
    c = changes["host", "sysctls.net.ipv4.tcp_fastopen", "added"]
    assert (c.before, c.after, c.nodes) == (
        ABSENT,
        after["nodes"][gained[0]]["host"]["sysctls"]["net.ipv4.tcp_fastopen"],
        gained,
    )
    assert fr.nodes_changed == len(gained) and fr.layers == ["host"]
    line = line_of(repo, HOSTS, "net.ipv4.tcp_fastopen")
    assert [(w.file, w.line) for w in c.where] == [(HOSTS, line)]
    assert "<code>sysctls\\.net\\.ipv4\\.tcp\\_fastopen</code> = <code>3</code> (added)" in render(r)
    assert list(flags(r)) == (["rollout-step-exceeded"] if len(gained) > step(after) else [])
    assert r.exit_code == 0


def test_reformatting_only_changes_nothing(repo: Path) -> None:
    """The same documents written another way (flow style, comments dropped, keys
    reordered): files change, no desired state does; nothing reported, exit 0."""
    before = state(repo)
    text = (repo / MESH).read_text()
    flow = (
        "---\napiVersion: swarm.io/v1alpha1\nkind: Mesh\nmetadata: {name: swarm}\n"
        "spec: {topology: full-mesh, persistent_keepalive_s: 25, mtu: 1380, listen_port: 51820, "
        "cidr: 10.200.0.0/16, sites: {tyo1: {topology: hub-and-spoke}, "
        "ams2: {hub: ams2-relay-01, topology: hub-and-spoke}}}\n"
    )
    assert "mtu: 1380" in text and "hub: ams2-relay-01" in text
    _, after, r = change(repo, lambda: (repo / MESH).write_text(flow))
    assert after == before
    assert git_changed(repo) == [MESH]
    fr = r.fleets[0]
    assert (fr.nodes, fr.nodes_changed, fr.objects, fr.mesh.peerings_changed, fr.flags) == ([], 0, [], 0, [])
    assert r.exit_code == 0
    assert (
        r.summary
        == "✅ example: 0 nodes change, 0 mesh peers change, 0 cluster objects change; no risk flags"
    )


def git_changed(repo: Path) -> list[str]:
    return test_review.git(repo, "diff", "--name-only", "HEAD~1", "HEAD").split()


def test_an_mtu_change_is_set_live_on_every_mesh_node(repo: Path) -> None:
    """The Mesh's MTU 1380 -> 1360: every mesh node sets it on the running interface (no
    tunnel drops, no peer changes); the old and new values come from the Mesh document."""
    base = state(repo)
    old = int(re.search(r"^  mtu: (\d+)", (repo / MESH).read_text(), re.M)[1])  # type: ignore[index]
    new = old - 20
    _, after, r = change(repo, lambda: replace(repo, MESH, f"mtu: {old}", f"mtu: {new}"))
    meshed = sorted(n for n, s in base["nodes"].items() if s["mesh"])
    assert {after["nodes"][n]["mesh"]["mtu"] for n in meshed} == {new}
    fr = r.fleets[0]
    assert (fr.mesh.mtu, fr.mesh.restart, fr.mesh.syncconf, fr.mesh.peers) == (meshed, [], [], [])
    (c,) = fr.nodes
    assert (c.layer, c.field, c.before, c.after, c.nodes) == ("mesh", "mtu", old, new, meshed)
    assert [(w.file, w.line) for w in c.where] == [(MESH, line_of(repo, MESH, f"mtu: {new}"))]
    assert "mesh-restart-on-relay-or-hub" not in flags(r) and r.exit_code == 0
    md = render(r)
    assert _shown("mtu", old, new) in md
    assert f"| MTU set on the running interface (no drop) | {len(meshed)} |" in md


def test_a_new_relay_is_a_relay_gained(repo: Path) -> None:
    """A GPU node of a full-mesh site also takes the relay role: the mesh gains that relay,
    its own roles change, and no tunnel of a hub or relay drops."""
    base = state(repo)
    site = base["nodes"]["fra1-head-01"]["site"]
    node = sorted(n for n, s in base["nodes"].items() if s["site"] == site and n != "fra1-head-01")[0]
    assert node not in base["cluster"]["mesh"]["relays"]
    path = f"inventory/example/nodes/{site}.yaml"
    doc = document(repo, path, node)
    assert "roles: [gpu-worker]" in doc
    _, after, r = change(
        repo,
        lambda: replace(repo, path, doc, doc.replace("roles: [gpu-worker]", "roles: [gpu-worker, relay]")),
    )
    gained = sorted(set(after["cluster"]["mesh"]["relays"]) - set(base["cluster"]["mesh"]["relays"]))
    assert gained == [node]
    fr = r.fleets[0]
    assert (fr.mesh.relays_gained, fr.mesh.relays_lost) == ([node], [])
    roles = [c for c in fr.nodes if c.field == "roles"]
    assert [(c.layer, c.before, c.after, c.nodes) for c in roles] == [
        ("node", base["nodes"][node]["roles"], after["nodes"][node]["roles"], [node])
    ]
    assert flags(r) == {} and r.exit_code == 0  # no tunnel drops: nothing to flag
    assert node in r.as_json()["fleets"][0]["mesh"]["relays_gained"]
    # The comment shows it too (it said "No WireGuard change" when no peer changed).
    md = render(r)
    assert f"relays gained: {node}" in re.sub(r"</?code>|`", "", md) and "No WireGuard change" not in md
