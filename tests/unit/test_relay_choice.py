"""Relays for NAT-to-NAT site pairs come from measurements, never from what a site declares
(issue #22): a measured path beats an unmeasured one, an unmeasured choice prefers the
pair's own sites and providers, hysteresis keeps a recorded relay unless a measured path is
clearly faster, and a relay carries at most ``max_site_pairs`` pairs. And (issue #38, item
9) a leg counts as measured only when both of its sites measured it, at the higher of the
two figures; a pair's relay is one of its own providers' (or an allowed provider's) whenever
one exists, and another provider's relay is a warning.

Each test writes a small fleet, loads it with the real loader and reads the relay from the
desired state (the peer whose AllowedIPs hold the other node's mesh address), so it holds
the whole path: schema, model, resolver, peers. Expected relays follow from the figures the
test declares (the margin from the Mesh model's own defaults), not from the resolver's output.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import pytest
import yaml

from swarm_infra import desired_state, validate
from swarm_infra.fleet.model import Mesh
from swarm_infra.resolve import load_fleet


@dataclass
class Fleet:
    """A test fleet: sites (name -> provider, declared one-way latency), NAT'd cpu-workers
    (name -> site) and public relays (name -> site), and optionally a LatencyMatrix
    (measured pairs, recorded relays) and the Mesh's ``relays`` settings."""

    sites: dict[str, tuple[str | None, float]]
    natted: dict[str, str]
    relays: dict[str, str]
    measured: dict[tuple[str, str], float] = field(default_factory=dict)  # by both sites
    one_sided: dict[tuple[str, str], float] = field(default_factory=dict)  # by the first site only
    directed: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)  # a->b, b->a
    recorded: dict[tuple[str, str], str] = field(default_factory=dict)
    mesh_relays: dict[str, Any] = field(default_factory=dict)

    def write(self, directory: Path) -> list[Path]:
        docs: list[dict[str, Any]] = []
        index = {s: i for i, s in enumerate(self.sites, start=1)}
        for s, (provider, latency) in self.sites.items():
            spec: dict[str, Any] = {
                "region": "r",
                "underlay": {"cidr": f"10.{index[s]}.0.0/24"},
                "wan": {"latency_ms": latency},
            }
            if provider is not None:
                spec["provider"] = provider
            docs.append(_doc("Site", s, spec))
        host = dict.fromkeys(self.sites, 4)
        for name, site in {**self.natted, **self.relays}.items():
            host[site] += 1
            spec = {
                "site": site,
                "address": f"10.{index[site]}.0.{host[site]}",
                "roles": ["relay"] if name in self.relays else ["cpu-worker"],
                "hardware": {"cpus": 1, "memory_gib": 1},
            }
            if name in self.natted:
                spec["mesh"] = {"nat": True}
            docs.append(_doc("Node", name, spec))
        mesh: dict[str, Any] = {"cidr": "10.99.0.0/24"}
        if self.mesh_relays:
            mesh["relays"] = self.mesh_relays
        docs.append(_doc("Mesh", "m", mesh))
        if self.measured or self.one_sided or self.directed or self.recorded:
            # What `swarm metrics` measures: each site's nodes ping the other's (a_to_b_ms,
            # b_to_a_ms); behind NAT, only the NAT'd side reaches the other.
            pairs = [_pair(a, b, ms, ms) for (a, b), ms in self.measured.items()]
            pairs += [_pair(a, b, ms, None) for (a, b), ms in self.one_sided.items()]
            pairs += [_pair(a, b, ab, ba) for (a, b), (ab, ba) in self.directed.items()]
            matrix: dict[str, Any] = {"pairs": pairs}
            if self.recorded:
                matrix["relays"] = [{"a": a, "b": b, "relay": r} for (a, b), r in self.recorded.items()]
            docs.append(_doc("LatencyMatrix", "measured", matrix))
        (directory / "fleet.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
        return [directory]


def _pair(a: str, b: str, a_to_b: float, b_to_a: float | None) -> dict[str, Any]:
    """A LatencyMatrix pair; ``b_to_a`` None: b's nodes did not measure a's (the figure is
    a's alone); inside one site, the site's LAN figure."""
    entry: dict[str, Any] = {"a": a, "b": b, "rtt_ms": max(a_to_b, b_to_a or 0)}
    if a != b:
        entry["a_to_b_ms"] = a_to_b
        if b_to_a is not None:
            entry["b_to_a_ms"] = b_to_a
    return entry


def _doc(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "swarm.io/v1alpha1", "kind": kind, "metadata": {"name": name}, "spec": spec}


def relay_between(state: dict[str, Any], src: str, dst: str) -> str:
    """The peer through which ``src`` sends to ``dst``'s mesh address (and it forwards)."""
    nodes = state["nodes"]
    ip = nodes[dst]["mesh"]["address"].split("/")[0] + "/32"
    (via,) = [p["name"] for p in nodes[src]["mesh"]["peers"] if ip in p["allowed_ips"]]
    assert nodes[via]["mesh"]["forwarding"] is True
    return via


def resolve(fleet: Fleet, tmp_path: Path) -> dict[str, Any]:
    return dict(desired_state(load_fleet(fleet.write(tmp_path))))


# -------------------------------------------------------------- declared latency has no say


def test_a_site_declaring_0_ms_and_a_relay_does_not_capture_a_pair_with_its_own_relay(tmp_path: Path):
    """The issue's attack: a new site declares ``latency_ms: 0`` and a relay named to sort
    first. By declared RTT (through the core) its path ties every other, and the name won;
    now the pair stays on the relay in one of its own sites."""
    fleet = Fleet(
        sites={"s1": ("P1", 10), "s2": ("P2", 10), "cheap": ("Cheap", 0)},
        natted={"a": "s1", "b": "s2"},
        relays={"s1-relay": "s1", "aaa-relay": "cheap"},
    )
    state = resolve(fleet, tmp_path)
    assert relay_between(state, "a", "b") == "s1-relay"
    assert relay_between(state, "b", "a") == "s1-relay"  # one relay for both directions


def test_a_site_declaring_0_ms_cannot_beat_a_measured_path(tmp_path: Path):
    """Only the honest relay's legs are measured: the declared 0 ms site has no measured path
    and ranks after it, however near it claims to be (by declared RTT it was 40 ms against 60)."""
    fleet = Fleet(
        sites={"s1": ("P1", 10), "s2": ("P2", 10), "core": ("Core", 5), "cheap": ("Cheap", 0)},
        natted={"a": "s1", "b": "s2"},
        relays={"core-relay": "core", "aaa-relay": "cheap"},
        measured={("s1", "core"): 30.0, ("core", "s2"): 30.0},
    )
    state = resolve(fleet, tmp_path)
    assert relay_between(state, "a", "b") == "core-relay"
    (route,) = state["cluster"]["mesh"]["relay_routes"]
    assert route["relay"] == "core-relay" and route["path_rtt_ms"] == 30.0 + 30.0
    assert route["basis"] == "measured"


def test_unmeasured_pairs_are_not_all_drawn_to_one_third_party_relay(tmp_path: Path):
    """Six NAT'd sites of six providers (15 pairs), two third-party relays, nothing measured:
    by declared RTT the 0 ms site took every pair; a per-pair hash spreads them instead, so
    neither a 0 ms claim nor a name that sorts first draws them all."""
    sites: dict[str, tuple[str | None, float]] = {f"n{i}": (f"P{i}", 10) for i in range(6)}
    fleet = Fleet(
        sites={**sites, "core": ("Core", 5), "cheap": ("Cheap", 0)},
        natted={f"x{i}": f"n{i}" for i in range(6)},
        relays={"core-relay": "core", "aaa-relay": "cheap"},
    )
    state = resolve(fleet, tmp_path)
    pairs = [(f"x{i}", f"x{j}") for i in range(6) for j in range(i + 1, 6)]
    via = [relay_between(state, a, b) for a, b in pairs]
    assert 0 < via.count("aaa-relay") < len(pairs), via
    routes = state["cluster"]["mesh"]["relay_routes"]
    assert len(routes) == len(pairs)
    assert all(x["basis"] == "unmeasured" and x["path_rtt_ms"] is None for x in routes)


def test_without_measurements_a_relay_of_the_pairs_provider_comes_before_a_third_party(tmp_path: Path):
    """s1 and s2 belong to provider P (s2 declares it; s1 is P by name, the default), and
    P runs a relay in a third site; another provider's relay sorts first by name."""
    fleet = Fleet(
        sites={"s1": ("P", 10), "s2": ("P", 10), "p-dc": ("P", 50), "other": ("Other", 0)},
        natted={"a": "s1", "b": "s2"},
        relays={"zz-p-relay": "p-dc", "aa-other-relay": "other"},
    )
    state = resolve(fleet, tmp_path)
    assert relay_between(state, "a", "b") == "zz-p-relay"
    (route,) = state["cluster"]["mesh"]["relay_routes"]
    assert route["providers"] == ["P", "P"] and route["relay_provider"] == "P"


def test_a_site_without_provider_is_its_own_provider(tmp_path: Path):
    fleet = Fleet(sites={"s1": (None, 0), "s2": ("P2", 0)}, natted={}, relays={})
    sites = load_fleet(fleet.write(tmp_path)).fleet.sites
    assert sites["s1"].provider == "s1" and sites["s2"].provider == "P2"


def test_the_fastest_measured_path_wins_and_an_unmeasured_leg_disqualifies(tmp_path: Path):
    fleet = Fleet(
        sites={"s1": ("P1", 0), "s2": ("P2", 0), "slow": ("S", 0), "fast": ("F", 0), "half": ("H", 0)},
        natted={"a": "s1", "b": "s2"},
        relays={"relay-a": "slow", "relay-b": "fast", "relay-0": "half"},
        # half: s1 -> half measured at 1 ms, half -> s2 not measured at all
        measured={
            ("s1", "slow"): 150,
            ("slow", "s2"): 150,
            ("s1", "fast"): 10,
            ("s2", "fast"): 12,
            ("s1", "half"): 1,
        },
    )
    assert relay_between(resolve(fleet, tmp_path), "a", "b") == "relay-b"


# --------------------------------------------------------------------------- hysteresis


def _hysteresis_fleet(near_ms: float, far_ms: float, **mesh_relays: float) -> Fleet:
    """s1 and s2 NAT'd; ``far`` (recorded as the pair's relay) and ``near`` relay sites,
    each leg measured at half the path's RTT."""
    return Fleet(
        sites={"s1": ("P1", 0), "s2": ("P2", 0), "near": ("N", 0), "far": ("F", 0)},
        natted={"a": "s1", "b": "s2"},
        relays={"near-relay": "near", "far-relay": "far"},
        measured={
            ("s1", "near"): near_ms / 2,
            ("near", "s2"): near_ms / 2,
            ("s1", "far"): far_ms / 2,
            ("far", "s2"): far_ms / 2,
        },
        recorded={("s1", "s2"): "far-relay"},
        mesh_relays=dict(mesh_relays),
    )


def _default_margin(path_ms: float) -> float:
    """The margin the Mesh model's defaults give (not the resolver's function)."""
    default = {f.name: f.default for f in fields(Mesh)}
    return max(default["relay_hysteresis_ms"], path_ms * default["relay_hysteresis_percent"] / 100)


def test_a_path_1_ms_faster_does_not_move_the_pair(tmp_path: Path):
    state = resolve(_hysteresis_fleet(near_ms=59.0, far_ms=60.0), tmp_path)
    assert relay_between(state, "a", "b") == "far-relay"
    (route,) = state["cluster"]["mesh"]["relay_routes"]
    assert route["basis"] == "held" and route["path_rtt_ms"] == 60.0


def test_a_path_faster_by_exactly_the_margin_does_not_move_it_but_by_more_does(tmp_path: Path):
    far = 60.0
    margin = _default_margin(far)
    assert margin > 1  # else the 1 ms test above proves nothing
    (tmp_path / "at").mkdir()
    (tmp_path / "past").mkdir()
    at = resolve(_hysteresis_fleet(near_ms=far - margin, far_ms=far), tmp_path / "at")
    past = resolve(_hysteresis_fleet(near_ms=far - margin - 0.5, far_ms=far), tmp_path / "past")
    assert relay_between(at, "a", "b") == "far-relay"
    assert relay_between(past, "a", "b") == "near-relay"


def test_a_clearly_faster_path_moves_the_pair(tmp_path: Path):
    state = resolve(_hysteresis_fleet(near_ms=20.0, far_ms=200.0), tmp_path)
    assert relay_between(state, "a", "b") == "near-relay"
    (route,) = state["cluster"]["mesh"]["relay_routes"]
    assert route["basis"] == "measured" and route["path_rtt_ms"] == 20.0


def test_the_margin_is_the_larger_of_the_ms_and_the_percent(tmp_path: Path):
    """On a 400 ms path 10 % is 40 ms: 30 ms faster does not move it, with 5 ms or 0 ms set."""
    (tmp_path / "pct").mkdir()
    (tmp_path / "zero").mkdir()
    pct = resolve(_hysteresis_fleet(370.0, 400.0, hysteresis_ms=5, hysteresis_percent=10), tmp_path / "pct")
    assert relay_between(pct, "a", "b") == "far-relay"
    zero = resolve(_hysteresis_fleet(399.0, 400.0, hysteresis_ms=0, hysteresis_percent=0), tmp_path / "zero")
    assert relay_between(zero, "a", "b") == "near-relay"  # no margin: the faster path, even by 1 ms


def test_a_recorded_relay_without_a_measured_path_has_no_claim(tmp_path: Path):
    """A record alone does not route: the recorded relay's legs are not measured, so the
    pair goes to the measured one (and a record naming a node that is not a relay is ignored)."""
    fleet = _hysteresis_fleet(near_ms=59.0, far_ms=60.0)
    fleet.measured = {k: v for k, v in fleet.measured.items() if "far" not in k}
    assert relay_between(resolve(fleet, tmp_path), "a", "b") == "near-relay"
    (tmp_path / "gone").mkdir()
    fleet = _hysteresis_fleet(near_ms=59.0, far_ms=60.0)
    fleet.recorded = {("s1", "s2"): "a"}  # a cpu-worker, not a relay
    assert relay_between(resolve(fleet, tmp_path / "gone"), "a", "b") == "near-relay"


# ---------------------------------------------------------------------------------- cap


def _three_sites(**kw: Any) -> Fleet:
    """Three NAT'd sites (three pairs) and two relays; ``best`` is measured faster for all."""
    measured = {(s, r): ms for s in ("s1", "s2", "s3") for r, ms in (("best", 10.0), ("next", 30.0))}
    return Fleet(
        sites={"s1": ("P1", 0), "s2": ("P2", 0), "s3": ("P3", 0), "best": ("B", 0), "next": ("N", 0)},
        natted={"a": "s1", "b": "s2", "c": "s3"},
        relays={"best-relay": "best", "next-relay": "next"},
        measured=measured,
        **kw,
    )


def test_pairs_beyond_a_relays_cap_go_to_the_next_best_relay(tmp_path: Path):
    state = resolve(_three_sites(mesh_relays={"max_site_pairs": 2}), tmp_path)
    routes = {tuple(r["sites"]): r["relay"] for r in state["cluster"]["mesh"]["relay_routes"]}
    pairs = sorted(routes)
    assert pairs == [("s1", "s2"), ("s1", "s3"), ("s2", "s3")]
    # in pair order, the first two fill the best relay; the third takes the next
    assert [routes[p] for p in pairs] == ["best-relay", "best-relay", "next-relay"]
    assert relay_between(state, "b", "c") == relay_between(state, "c", "b") == "next-relay"


def test_a_held_pair_keeps_its_room_before_new_pairs_take_it(tmp_path: Path):
    fleet = _three_sites(mesh_relays={"max_site_pairs": 2}, recorded={("s2", "s3"): "best-relay"})
    routes = {tuple(r["sites"]): r for r in resolve(fleet, tmp_path)["cluster"]["mesh"]["relay_routes"]}
    assert routes[("s2", "s3")]["relay"] == "best-relay"
    assert [routes[p]["relay"] for p in (("s1", "s2"), ("s1", "s3"))] == ["best-relay", "next-relay"]


def test_pairs_no_relay_has_room_for_are_a_validation_error(tmp_path: Path):
    fleet = _three_sites(mesh_relays={"max_site_pairs": 1})
    report = validate(fleet.write(tmp_path)).report
    (error,) = report.errors
    assert error.rule == "mesh.relay-capacity"
    assert error.path == "$.spec.relays.max_site_pairs"
    text = (tmp_path / "fleet.yaml").read_text().splitlines()
    assert "max_site_pairs: 1" in text[error.line - 1]
    assert "s2-s3" in error.message  # the third pair, in pair order, finds no room


# ------------------------------------------------------------------------- the matrix


@pytest.mark.parametrize(
    "pairs, rule, path",
    [
        ([("s1", "s2", 5), ("s2", "s1", 7)], "latency.pair-duplicate", "$.spec.pairs[1]"),
        ([("s1", "s2", 0)], "latency.rtt-implausible", "$.spec.pairs[0].rtt_ms"),
    ],
)
def test_a_matrix_with_a_pair_twice_or_0_ms_across_sites_is_invalid(tmp_path: Path, pairs, rule, path):
    fleet = Fleet(sites={"s1": ("P1", 0), "s2": ("P2", 0)}, natted={}, relays={})
    fleet.measured = {(a, b): ms for a, b, ms in pairs[:1]}
    fleet.write(tmp_path)
    text = (tmp_path / "fleet.yaml").read_text()
    if len(pairs) > 1:  # a dict cannot hold the pair twice: append it to the document
        a, b, ms = pairs[1]
        text = text.rstrip("\n") + f"\n  - {{a: {a}, b: {b}, rtt_ms: {ms}}}\n"
        (tmp_path / "fleet.yaml").write_text(text)
    (error,) = validate([tmp_path]).report.errors
    assert (error.rule, error.path) == (rule, path)
    # 0 ms inside one site is the LAN, not a claim
    (tmp_path / "lan").mkdir()
    lan = Fleet(sites={"s1": ("P1", 0), "s2": ("P2", 0)}, natted={}, relays={}, measured={("s1", "s1"): 0})
    assert validate(lan.write(tmp_path / "lan")).report.errors == []


# ------------------------------------------------ both ends measure; the pair's own provider


def test_a_leg_only_one_end_measured_counts_as_unmeasured(tmp_path: Path):
    """The NAT'd sites alone measured their legs to ``fake`` (1 ms: a relay's root shapes
    the replies the victims time, and no one else checked); ``honest``'s legs both ends
    measured at 30 ms. By one-sided figures ``fake`` won (2 ms against 60)."""
    fleet = Fleet(
        sites={"s1": ("P1", 0), "s2": ("P2", 0), "fake": ("F", 0), "honest": ("H", 0)},
        natted={"a": "s1", "b": "s2"},
        relays={"fake-relay": "fake", "honest-relay": "honest"},
        measured={("s1", "honest"): 30.0, ("s2", "honest"): 30.0},
        one_sided={("s1", "fake"): 1.0, ("s2", "fake"): 1.0},
    )
    state = resolve(fleet, tmp_path)
    assert relay_between(state, "a", "b") == "honest-relay"
    (route,) = state["cluster"]["mesh"]["relay_routes"]
    assert route["basis"] == "measured" and route["path_rtt_ms"] == 60.0


def test_a_leg_counts_at_the_higher_of_its_two_directions(tmp_path: Path):
    """``quick``'s legs: 5 ms from the NAT'd sites, 40 ms from the relay's site; ``even``'s
    20 ms both ways. At the higher figure ``quick``'s path is 80 ms, ``even``'s 40."""
    fleet = Fleet(
        sites={"s1": ("P1", 0), "s2": ("P2", 0), "quick": ("Q", 0), "even": ("E", 0)},
        natted={"a": "s1", "b": "s2"},
        relays={"quick-relay": "quick", "even-relay": "even"},
        directed={
            ("s1", "quick"): (5.0, 40.0),
            ("s2", "quick"): (5.0, 40.0),
            ("s1", "even"): (20.0, 20.0),
            ("even", "s2"): (20.0, 20.0),
        },
    )
    state = resolve(fleet, tmp_path)
    assert relay_between(state, "a", "b") == "even-relay"
    (route,) = state["cluster"]["mesh"]["relay_routes"]
    assert route["path_rtt_ms"] == 40.0


def _two_providers(**kw: Any) -> Fleet:
    """s1 (provider P) and s2 (Q) NAT'd; P runs a relay in p-dc, measured 100 ms a leg; a
    third provider O's relay is measured 5 ms a leg (and sorts first by name)."""
    return Fleet(
        sites={"s1": ("P", 0), "s2": ("Q", 0), "p-dc": ("P", 0), "o-dc": ("O", 0)},
        natted={"a": "s1", "b": "s2"},
        relays={"p-relay": "p-dc", "a-o-relay": "o-dc"},
        measured={("s1", "p-dc"): 100.0, ("s2", "p-dc"): 100.0, ("s1", "o-dc"): 5.0, ("s2", "o-dc"): 5.0},
        **kw,
    )


def test_a_relay_of_the_pairs_provider_comes_before_a_faster_one_of_another(tmp_path: Path):
    state = resolve(_two_providers(), tmp_path)
    assert relay_between(state, "a", "b") == "p-relay"
    (route,) = state["cluster"]["mesh"]["relay_routes"]
    assert route["relay_provider"] in route["providers"]
    assert not validate(_two_providers().write(tmp_path)).report.warnings
    # A pair recorded on the other provider's relay is not held there.
    (tmp_path / "held").mkdir()
    held = resolve(_two_providers(recorded={("s1", "s2"): "a-o-relay"}), tmp_path / "held")
    assert relay_between(held, "a", "b") == "p-relay"


def test_an_allowed_provider_relay_competes_as_the_pairs_own(tmp_path: Path):
    fleet = _two_providers(mesh_relays={"allowed_providers": ["O"]})
    assert relay_between(resolve(fleet, tmp_path), "a", "b") == "a-o-relay"  # the faster
    assert not validate(fleet.write(tmp_path)).report.warnings


def test_another_providers_relay_only_when_the_pair_has_none_and_it_warns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    fleet = Fleet(
        sites={"s1": ("P1", 0), "s2": ("P2", 0), "core": ("Core", 0)},
        natted={"a": "s1", "b": "s2"},
        relays={"core-relay": "core"},
    )
    assert relay_between(resolve(fleet, tmp_path), "a", "b") == "core-relay"
    report = validate(fleet.write(tmp_path)).report
    assert report.ok  # a risk to see, not an error
    (warning,) = report.warnings
    assert warning.rule == "mesh.relay-other-provider" and warning.path == "$.spec.roles"
    assert "'core-relay'" in warning.message and "s1-s2" in warning.message
    text = (tmp_path / "fleet.yaml").read_text().splitlines()
    assert text[warning.line - 1].strip() == "roles:" and "- relay" in text[warning.line]  # the relay's
    from swarm_infra import cli

    assert cli.main(["validate", str(tmp_path)]) == 0
    assert "warning[mesh.relay-other-provider]" in capsys.readouterr().out
    # `swarm plan` shows it too (on stderr: its JSON stays one document).
    assert cli.main(["plan", "--format", "json", str(tmp_path)]) == 0
    out = capsys.readouterr()
    assert "warning[mesh.relay-other-provider]" in out.err and json.loads(out.out)["nodes"]
