"""Linear mesh verification: one read of ``wg show dump`` per node judges every peer, and
pings only a sample of mesh paths (issue #27, "Verification grows linearly").

The dumps in tests/data/wg are real (wireguard-go and wireguard-tools in two network
namespaces, tests/data/wg/README.md), read through the same on-node command verify runs.
The dump's format is wg(8)'s (wireguard-tools 1.0.20210914, ``show ... dump``): a first line
"private-key, public-key, listen-port, fwmark", then per peer "public-key, preshared-key,
endpoint, allowed-ips, latest-handshake, transfer-rx, transfer-tx, persistent-keepalive",
tab-separated.
"""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from swarm_infra.lab.fleet import write_lab_fleet
from swarm_infra.nodeside.facts import wg_dump_public_key
from swarm_infra.resolve import desired_state, load_fleet
from swarm_infra.resolve.mesh import ping_sample, site_representatives
from swarm_infra.verify.checks import (
    HANDSHAKE_MAX_AGE_S,
    Check,
    checks_for,
    judge_peers,
    kept_alive_max_age_s,
    matches,
)
from swarm_infra.verify.readers import parse_wg_read, wg_dump_command

from .conftest import ROOT, fleet_dirs

WG = ROOT / "tests" / "data" / "wg"
B = "0g+gP7UW07OSUeMfb9ddEtoQUJtVAvcZxRbigVmXEgs="  # answered two pings
C = "laHh2U1/lNdDS7YXSWCtiFAkEyR7NV6Cslk7iP7a4RM="  # idle, never heard from
D = "yRT1UmikNi+GDgslRJ0tL9+MlAifr0zkF1SplFDNhQU="  # sent to, never answered; keepalive 25
KEYS = {"b": B, "c": C, "d": D}
IPS = {"b": ["10.99.0.2/32"], "c": ["10.99.0.3/32", "10.99.1.0/24"], "d": ["10.99.0.4/32"]}
ANSWERLESS = "sent 148 B, received nothing: the peer never answered"  # d in node-a.txt


def _read(name: str) -> tuple[int, dict]:
    read = parse_wg_read((WG / name).read_text())
    assert not isinstance(read, str), read
    return read


def _declared(**max_age: int | None) -> dict:
    return {p: {"allowed_ips": IPS[p], "max_age_s": max_age.get(p)} for p in IPS}


def test_the_real_dump_parses_with_every_field() -> None:
    now, dump = _read("node-a.txt")
    assert set(dump) == {B, C, D}
    assert dump[B] == {
        "endpoint": "192.168.77.2:51821",
        "allowed_ips": ["10.99.0.2/32"],
        "latest_handshake": now - 2,
        "rx_bytes": 348,
        "tx_bytes": 404,
        "persistent_keepalive_s": 0,
    }
    assert dump[C]["endpoint"] is None and dump[C]["allowed_ips"] == IPS["c"]
    assert dump[C]["latest_handshake"] == 0 and dump[C]["rx_bytes"] == dump[C]["tx_bytes"] == 0
    assert dump[D]["persistent_keepalive_s"] == 25 and (dump[D]["rx_bytes"], dump[D]["tx_bytes"]) == (0, 148)
    # The other end of the same link counts the same bytes the other way round.
    _, other = _read("node-b.txt")
    (a_entry,) = other.values()
    assert (a_entry["rx_bytes"], a_entry["tx_bytes"]) == (dump[B]["tx_bytes"], dump[B]["rx_bytes"])


def test_the_on_node_command_hides_the_private_and_preshared_keys(tmp_path: Path) -> None:
    """The command runs a real shell and awk over a ``wg`` that prints a dump in wg(8)'s
    format with secrets in it: they never reach the output, every other field does."""
    private, psk = (
        "SECRETprivateKEYaaaaaaaaaaaaaaaaaaaaaaaaaaa=",
        "SECRETpresharedKEYbbbbbbbbbbbbbbbbbbbbbbbbb=",
    )
    peer = f"{B}\t{psk}\t192.168.77.2:51821\t10.99.0.2/32\t1795706189\t348\t404\toff"
    dump = f"{private}\tPUB=\t51820\toff\n{peer}\n"
    fake = tmp_path / "wg"
    fake.write_text(f"#!/bin/sh\nprintf '%s' '{dump}'\n")
    fake.chmod(0o755)
    out = subprocess.run(
        ["sh", "-c", wg_dump_command("wg0")],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": f"{tmp_path}:/usr/bin:/bin"},
    ).stdout
    assert "SECRET" not in out
    lines = out.splitlines()
    assert lines[0].isdigit()
    assert lines[1] == "(hidden)\tPUB=\t51820\toff"
    assert lines[2] == f"{B}\t(hidden)\t192.168.77.2:51821\t10.99.0.2/32\t1795706189\t348\t404\toff"


def test_an_unreadable_interface_is_said_so() -> None:
    read = parse_wg_read((WG / "no-interface.txt").read_text())
    assert isinstance(read, str) and "interface" in read
    assert not matches(Check("n", "mesh", "peers on wg0", "wg_peers", "..."), read)


def test_a_healthy_dump_has_no_problem() -> None:
    now, dump = _read("node-a.txt")
    # d is an idle link here (no keepalive declared): its one unanswered initiation is the
    # only thing wrong with it.
    problems = judge_peers(_declared(b=HANDSHAKE_MAX_AGE_S), dump, now, KEYS.get)
    assert problems == {"d": "sent 148 B, received nothing: the peer never answered"}
    assert judge_peers({p: v for p, v in _declared().items() if p != "d"}, dump, now, KEYS.get) == {
        f"undeclared {D}": "a peer of the interface that the fleet does not declare"
    }


def test_a_stale_handshake_is_reported_for_that_peer_only() -> None:
    now, dump = _read("node-a.txt")
    shake = dump[B]["latest_handshake"]
    limit = kept_alive_max_age_s(25)
    declared = _declared(b=limit)
    declared["d"]["max_age_s"] = None
    declared["d"]["allowed_ips"] = IPS["d"]
    fresh = judge_peers({p: v for p, v in declared.items() if p != "d"}, dump, shake + limit, KEYS.get)
    assert "b" not in fresh
    later = shake + limit + 1
    problems = judge_peers({p: v for p, v in declared.items() if p != "d"}, dump, later, KEYS.get)
    assert problems == {
        "b": f"latest handshake {limit + 1} s ago (at most {limit} s expected)",
        f"undeclared {D}": "a peer of the interface that the fleet does not declare",
    }
    assert now - shake < limit  # at the real read, b was fresh


def test_a_kept_alive_link_without_a_handshake_is_reported() -> None:
    now, dump = _read("node-a.txt")
    problems = judge_peers(_declared(d=kept_alive_max_age_s(25)), dump, now, KEYS.get)
    assert problems == {"d": "no handshake yet (sent 148 B, received 0 B)"}


def test_a_peer_whose_tunnel_is_down_is_not_judged() -> None:
    """Its stopped wg-quick is its one drift line (the harness skips peers whose service
    check failed): not a stale handshake on every node that peers with it."""
    now, dump = _read("node-a.txt")
    declared = _declared(d=kept_alive_max_age_s(25))
    assert "d" in judge_peers(declared, dump, now, KEYS.get)
    assert judge_peers(declared, dump, now, KEYS.get, skip={"d"}) == {}  # and its key is no stranger


def test_wrong_allowed_ips_missing_peer_and_unreadable_key() -> None:
    now, dump = _read("node-a.txt")
    declared = _declared()
    declared["c"] = {"allowed_ips": ["10.99.0.3/32"], "max_age_s": None}
    declared["e"] = {"allowed_ips": ["10.99.0.5/32"], "max_age_s": None}
    keys = {**KEYS, "e": "E" * 43 + "="}
    problems = judge_peers(declared, dump, now, keys.get)
    assert problems["c"] == "AllowedIPs 10.99.0.3/32,10.99.1.0/24, declared 10.99.0.3/32"
    assert problems["e"] == "not a peer of the interface"
    unreadable = judge_peers(_declared(), dump, now, lambda name: None if name == "b" else KEYS[name])
    # b's key unknown: its entry cannot be told from a stranger's, so none is called one.
    assert unreadable == {"b": "its public key could not be read on the node", "d": problems["d"]}
    assert judge_peers(
        _declared(), dump, now, lambda name: None if name == "b" else KEYS[name], skip={"b"}
    ) == {"d": problems["d"]}


X = "XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX="  # a key the fleet never recorded


def _recorded(**keys: str) -> dict:
    declared = _declared()
    for peer, key in keys.items():
        declared[peer]["public_key"] = key
    return declared


def test_a_peer_is_judged_by_its_recorded_key_not_by_the_key_it_presents() -> None:
    """Node b presents another key X than the fleet records (B), and the interface took X
    (a push converge learnt it from b): every byte flows, yet b is not who the reviewed
    fleet says. Judged by the record, that is drift; learnt from b, it was not."""
    now, dump = _read("node-a.txt")
    learnt = {X if k == B else k: v for k, v in dump.items()}
    presented = {**KEYS, "b": X}
    assert judge_peers(_declared(), learnt, now, presented.get) == {"d": ANSWERLESS}  # learning sees nothing
    problems = judge_peers(_recorded(b=B, c=C, d=D), learnt, now, presented.get)
    assert problems == {
        "b": "not a peer of the interface",
        f"undeclared {X}": "a peer of the interface that the fleet does not declare",
        "d": ANSWERLESS,
    }


def test_a_recorded_key_needs_no_read_of_the_peer() -> None:
    """A peer the verifier cannot reach (behind NAT, no inbound path) is still judged, by
    the key the fleet records: it is never asked for its key."""
    now, dump = _read("node-a.txt")
    asked: list[str] = []

    def key_of(name: str) -> str | None:
        asked.append(name)
        return None  # unreachable

    assert judge_peers(_recorded(b=B, c=C, d=D), dump, now, key_of) == {"d": ANSWERLESS}
    assert asked == []
    # Where the fleet records no key, the peer's own is still read (and its absence said).
    assert judge_peers(_recorded(b=B, d=D), dump, now, key_of) == {
        "c": "its public key could not be read on the node",
        "d": ANSWERLESS,
    }
    assert asked == ["c"]


def test_a_node_whose_interface_presents_another_key_than_its_record_drifts() -> None:
    """The node's own key, from the same dump's interface line (no other read)."""
    now, dump = _read("node-a.txt")
    text = (WG / "node-a.txt").read_text().split("\n", 1)[1]  # the dump after the clock
    own = wg_dump_public_key(text)
    assert own == text.split("\n")[0].split("\t")[1] and own not in (B, C, D)
    declared = _recorded(b=B, c=C, d=D)
    assert "own key" not in judge_peers(declared, dump, now, KEYS.get, own=(own, own))
    assert "own key" not in judge_peers(declared, dump, now, KEYS.get, own=(None, own))  # none recorded
    problems = judge_peers(declared, dump, now, KEYS.get, own=(X, own))
    assert problems["own key"] == f"the interface presents public key {own}, the fleet records {X}"
    assert wg_dump_public_key("") is None


def test_the_reader_judges_the_nodes_own_key_from_the_same_read() -> None:
    """readers.wg_peers with the real dump as the node's answer (one command, no other
    read): its interface's key against the check's recorded one."""
    from dataclasses import replace
    from types import SimpleNamespace

    from swarm_infra.verify.readers import wg_peers

    text = (WG / "node-a.txt").read_text()
    own = text.splitlines()[1].split("\t")[1]
    ran: list[str] = []

    def run(command: str) -> SimpleNamespace:
        ran.append(command)
        return SimpleNamespace(rc=0, stdout=text)

    host = SimpleNamespace(run=run)
    peers = {p: {**v, "max_age_s": None} for p, v in _recorded(b=B, c=C, d=D).items() if p != "d"}
    check = Check("a", "mesh", "peers on wg0", "wg_peers", "...", {"interface": "wg0", "peers": peers})
    assert wg_peers(host, replace(check, args={**check.args, "public_key": own}), {}, KEYS.get) == {
        f"undeclared {D}": "a peer of the interface that the fleet does not declare"
    }
    drifted = wg_peers(host, replace(check, args={**check.args, "public_key": X}), {}, KEYS.get)
    assert drifted["own key"] == f"the interface presents public key {own}, the fleet records {X}"
    assert ran == [wg_dump_command("wg0")] * 2


def test_the_peers_check_carries_the_keys_the_fleet_records(tmp_path: Path) -> None:
    from .test_mesh_recorded_keys import ALL, RECORDED, keyed_fleet

    root = keyed_fleet(tmp_path, RECORDED)  # every node's key and the controller's
    state = desired_state(
        load_fleet([root / d for d in ("inventory/lab", "policies/lab", "policies/shared")])
    )
    peers = [c for c in checks_for(state) if c.kind == "wg_peers"]
    assert peers and {c.node for c in peers} == set(ALL)
    for check in peers:
        assert check.args["public_key"] == ALL[check.node]
        assert {p: v["public_key"] for p, v in check.args["peers"].items()} == {
            p: RECORDED[p] for p in check.args["peers"]
        }
        assert "controller" in check.args["peers"]


def test_ping_sample_each_node_to_its_representative_and_representatives_across_sites() -> None:
    sites = {"a1": "a", "a2": "a", "a3": "a", "b1": "b", "b2": "b", "c1": "c", "hub": "c"}
    rep = site_representatives(sites, {"c": "hub"})
    assert rep == {"a": "a1", "b": "b1", "c": "hub"}
    pairs = ping_sample(sites, {"c": "hub"}, natted={"b1", "b2"})
    assert pairs == sorted(
        [("a2", "a1"), ("a3", "a1"), ("b2", "b1"), ("c1", "hub"), ("a1", "hub"), ("b1", "a1"), ("b1", "hub")]
    )
    # A preferred node that is not in its site is ignored.
    assert site_representatives({"x1": "x"}, {"x": "elsewhere"}) == {"x": "x1"}


def _lab(tmp_path: Path, count: int) -> dict:
    for d in fleet_dirs("lab"):
        shutil.copytree(d, tmp_path / d.parent.name / d.name, dirs_exist_ok=True)
    dirs = write_lab_fleet(tmp_path, count, ray=False)
    return desired_state(load_fleet([*dirs, tmp_path / "policies" / "shared"]))


@pytest.fixture(scope="module")
def labs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict]:
    return {n: _lab(tmp_path_factory.mktemp(f"lab{n}"), n) for n in (16, 160)}


@pytest.mark.parametrize("count", [16, 160])
def test_pings_grow_linearly(labs: dict[int, dict], count: int) -> None:
    """N - S + S(S-1)/2 pings for N nodes in S sites (the lab fleet has 2): 15 at 16 nodes,
    159 at 160, where a ping and a handshake check per peer pair were 2·Σ peers (hundreds,
    then tens of thousands)."""
    state = labs[count]
    checks = checks_for(state)
    sites = {n: s["site"] for n, s in state["nodes"].items()}
    s = len(set(sites.values()))
    pings = [c for c in checks if c.kind == "ping"]
    assert len(pings) == count - s + s * (s - 1) // 2
    peer_pairs = sum(len(n["mesh"]["peers"]) for n in state["nodes"].values())
    assert peer_pairs > count * (count // 2 - 1)  # the old checks' count, for scale
    # One peers check per node, each judging all of its peers.
    wg = [c for c in checks if c.kind == "wg_peers"]
    assert Counter(c.node for c in wg) == Counter(list(state["nodes"]))
    assert not [c for c in checks if c.kind in ("peer", "handshake")]
    # Every node but the representatives pings one node of its own site; one ping crosses sites.
    by_address = {n["mesh"]["address"].split("/")[0]: name for name, n in state["nodes"].items()}
    targets = [(c.node, by_address[c.args["address"]]) for c in pings]
    cross = [(a, b) for a, b in targets if sites[a] != sites[b]]
    assert len(cross) == 1
    reps = set(cross[0])
    assert {a for a, b in targets if (a, b) not in cross} == set(state["nodes"]) - reps
    assert all(b in reps for _, b in targets)


def test_checks_per_node_stay_flat_from_16_to_160_nodes(labs: dict[int, dict]) -> None:
    small, large = (len(checks_for(labs[n])) for n in (16, 160))
    assert large <= 10 * small * 1.05


def test_lab_checks_order_and_keepalive_limits() -> None:
    state = desired_state(load_fleet(fleet_dirs("lab")))
    checks = checks_for(state)
    ids = [c.id for c in checks]
    assert len(ids) == len(set(ids))
    assert all(r in set(ids) for c in checks for r in c.requires)
    kinds = [c.kind for c in checks]
    # Every node's own checks, then every node's peers check (each tunnel's state known by
    # then), then the pings, then Ray's checks from other nodes.
    first_peers, first_ping = kinds.index("wg_peers"), kinds.index("ping")
    first_ray = kinds.index("ray_member")
    assert set(kinds[first_peers:first_ping]) == {"wg_peers"}
    assert set(kinds[first_ping:first_ray]) == {"ping"}
    assert set(kinds[first_ray:]) == {"ray_member", "tcp_port"}
    assert all(c.kind != "service" for c in checks[first_peers:])
    for c in checks[first_peers:first_ping]:
        # A node peer's tunnel is its service's; the controller (policies/lab/mesh.yaml, not a
        # node: no service of the fleet's) has none.
        for peer, v in c.args["peers"].items():
            if peer in state["nodes"]:
                assert v["service"] in ids[:first_peers] and not v["controller"]
            else:
                assert (peer, v["service"], v["controller"]) == ("controller", None, True)
    pings = [c for c in checks if c.kind == "ping"]
    # lab-gpu-2 is behind NAT: its pings go first, re-opening tunnels to it.
    assert pings[0].node == "lab-gpu-2" and pings[0].args["behind_nat"]
    for c in pings:
        target = next(
            n for n, s in state["nodes"].items() if s["mesh"]["address"].startswith(c.args["address"] + "/")
        )
        assert set(c.requires) == {
            f"{n}/mesh/{what}" for n in (c.node, target) for what in ("service wg-quick@wg0", "peers on wg0")
        }
    peers = {c.node: c for c in checks if c.kind == "wg_peers"}
    for name, node in state["nodes"].items():
        declared = peers[name].args["peers"]
        assert {p: v["allowed_ips"] for p, v in declared.items()} == {
            p["name"]: p["allowed_ips"] for p in node["mesh"]["peers"]
        }
        assert peers[name].requires == (f"{name}/mesh/service wg-quick@wg0",)
    # The NAT'd node keeps its cross-site links alive (keepalive 25 s): both ends expect a
    # recent handshake; the same-site link of lab-a may be idle.
    keepalive = next(
        p["persistent_keepalive_s"]
        for p in state["nodes"]["lab-gpu-2"]["mesh"]["peers"]
        if p["name"] == "lab-head-1"
    )
    assert keepalive > 0
    assert peers["lab-gpu-2"].args["peers"]["lab-head-1"]["max_age_s"] == kept_alive_max_age_s(keepalive)
    assert peers["lab-head-1"].args["peers"]["lab-gpu-2"]["max_age_s"] == kept_alive_max_age_s(keepalive)
    assert peers["lab-head-1"].args["peers"]["lab-gpu-1"]["max_age_s"] is None
