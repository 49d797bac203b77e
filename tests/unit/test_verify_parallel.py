"""``swarm verify`` reads nodes in parallel (verify/runner.py), and Ray's cross-node checks run
(issue #27, "Verification grows linearly": verify at 16 nodes <= 3x its time at 3 nodes).

No nodes: the runner is driven with fake reads. Concurrency is shown with barriers that only
open when the expected number of reads is under way at once (a serial runner would break
them: ``threading.Barrier`` raises ``BrokenBarrierError`` on its timeout, which is a
failure bound, not a synchronisation by sleeping).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Mapping
from typing import Any

import pytest

from swarm_infra.resolve import desired_state, load_fleet
from swarm_infra.verify.checks import Check, check_waves, checks_for, matches, sysctl_values
from swarm_infra.verify.runner import check_schedule, run_waves, where

from .conftest import ROOT, fleet_dirs

WAIT_S = 10  # a barrier's failure bound: how long a broken schedule takes to fail the test


def _check(node: str, key: str, requires: tuple[str, ...] = (), **args: Any) -> Check:
    return Check(node, "host", key, "fake", "ok", args, requires)


def _ok(check: Check, passed: Mapping[str, bool]) -> str:
    return "ok"


@pytest.fixture(scope="module")
def lab() -> dict:
    return desired_state(load_fleet(fleet_dirs("lab")))


def test_nodes_are_read_at_once_up_to_forks() -> None:
    nodes = [f"n{i}" for i in range(6)]
    together = threading.Barrier(len(nodes), timeout=WAIT_S)

    def read(check: Check, passed: Mapping[str, bool]) -> str:
        together.wait()  # opens only when every node's read is under way at once
        return "ok"

    waves = [[_check(n, "k") for n in nodes]]
    outcomes = run_waves(waves, read, forks=len(nodes))
    assert {o.outcome for o in outcomes.values()} == {"passed"}


def test_no_more_than_forks_nodes_at_once() -> None:
    nodes = [f"n{i}" for i in range(6)]
    lock, active, most = threading.Lock(), [0], [0]
    pairs = threading.Barrier(2, timeout=WAIT_S)  # two at a time: forks=2 fills every round

    def read(check: Check, passed: Mapping[str, bool]) -> str:
        with lock:
            active[0] += 1
            most[0] = max(most[0], active[0])
        pairs.wait()
        with lock:
            active[0] -= 1
        return "ok"

    outcomes = run_waves([[_check(n, "k") for n in nodes]], read, forks=2)
    assert {o.outcome for o in outcomes.values()} == {"passed"}
    assert most[0] == 2


def test_forks_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="forks must be at least 1"):
        run_waves([[_check("a", "k")]], _ok, forks=0)


def test_a_nodes_checks_run_in_order_on_one_thread_and_waves_one_after_another() -> None:
    waves = [
        [_check(n, f"own{i}") for n in ("a", "b", "c") for i in range(3)],
        [_check(n, "peers") for n in ("a", "b", "c")],
    ]
    seen: list[tuple[str, int]] = []
    lock = threading.Lock()

    def read(check: Check, passed: Mapping[str, bool]) -> str:
        with lock:
            seen.append((check.id, threading.get_ident()))
        return "ok"

    run_waves(waves, read, forks=3)
    order = [i for i, _ in seen]
    for n in ("a", "b", "c"):
        mine = [(i, t) for i, t in seen if i.startswith(f"{n}/") and "own" in i]
        assert [i for i, _ in mine] == [f"{n}/host/own{i}" for i in range(3)]
        assert len({t for _, t in mine}) == 1
    # No second-wave read before every first-wave read.
    assert max(order.index(c.id) for c in waves[0]) < min(order.index(c.id) for c in waves[1])


def test_outcomes_come_in_the_checks_order_whatever_finishes_first() -> None:
    # a's read waits until c's has finished: a finishes last, yet is reported first.
    c_done = threading.Event()

    def read(check: Check, passed: Mapping[str, bool]) -> str:
        if check.node == "a":
            assert c_done.wait(WAIT_S)
        if check.node == "c":
            c_done.set()
        return "ok" if check.node != "b" else "not ok"

    waves = [[_check(n, "k") for n in ("a", "b", "c")]]
    outcomes = run_waves(waves, read, forks=3)
    assert list(outcomes) == ["a/host/k", "b/host/k", "c/host/k"]
    assert [o.outcome for o in outcomes.values()] == ["passed", "drift", "passed"]
    assert outcomes["b/host/k"].actual == "not ok"


def test_a_check_whose_requirement_failed_is_blocked_and_not_read() -> None:
    waves = [
        [_check("a", "svc"), _check("a", "file", ("a/host/svc",)), _check("b", "svc")],
        [_check("b", "ping", ("a/host/file", "b/host/svc")), _check("c", "x", ("gone/host/limited",))],
    ]
    read_ids: list[str] = []

    def read(check: Check, passed: Mapping[str, bool]) -> str:
        read_ids.append(check.id)
        if check.id == "a/host/svc":
            raise ConnectionError("ssh: connect to host a: Connection refused")
        return "ok"

    outcomes = run_waves(waves, read, forks=2)
    assert outcomes["a/host/svc"].outcome == "error"
    assert isinstance(outcomes["a/host/svc"].error, ConnectionError)
    assert outcomes["a/host/file"].outcome == "blocked"
    assert outcomes["a/host/file"].blocked_by == ("a/host/svc",)
    # Blocked by a blocked check; a requirement outside the run (--limit) blocks nothing.
    assert outcomes["b/host/ping"].blocked_by == ("a/host/file",)
    assert outcomes["c/host/x"].outcome == "passed"
    assert set(read_ids) == {"a/host/svc", "b/host/svc", "c/host/x"}


def test_a_requirement_not_decided_before_its_check_is_refused() -> None:
    # Same wave, another node: the outcome would depend on the threads' timing.
    with pytest.raises(ValueError, match="b/host/y requires a/host/x"):
        check_schedule([[_check("a", "x"), _check("b", "y", ("a/host/x",))]])
    # A later wave.
    with pytest.raises(ValueError, match="a/host/x requires b/host/y"):
        check_schedule([[_check("a", "x", ("b/host/y",))], [_check("b", "y")]])
    # Read on the same node (``on``), earlier in the wave: fine.
    check_schedule([[_check("a", "x"), _check("b", "y", ("a/host/x",), on="a")]])


@pytest.mark.parametrize("fleet", ["lab", "example"])
def test_the_fleets_checks_are_scheduled_so_requirements_come_first(fleet: str) -> None:
    state = desired_state(load_fleet(fleet_dirs(fleet)))
    waves = check_waves(state)
    check_schedule(waves)  # raises if not
    assert [c for w in waves for c in w] == checks_for(state)


def test_rays_checks_from_other_nodes_are_returned(lab: dict) -> None:
    """Each Ray node is checked alive in the head's state API with its declared resources
    and labels, and its node manager's port probed from the next Ray node: closed over the
    underlay, open over the mesh (built and dropped, never run, until this fix)."""
    checks = {c.id: c for c in checks_for(lab)}
    ray = sorted(n for n, s in lab["nodes"].items() if s["ray"])
    head = next(n for n in ray if lab["nodes"][n]["ray"]["role"] == "head")
    assert len(ray) > 1
    for i, name in enumerate(ray):
        r = lab["nodes"][name]["ray"]
        alive = checks[f"{name}/ray/alive in the cluster"]
        assert where(alive) == head and alive.kind == "ray_member"
        assert alive.desired["resources"]["GPU"] == r["num_gpus"]
        assert alive.desired["labels"] == r["labels"]
        other = ray[(i + 1) % len(ray)]
        port = r["ports"]["node_manager"]
        underlay = checks[f"{name}/ray/port {port} from {other} over the underlay"]
        mesh = checks[f"{name}/ray/port {port} from {other} over the mesh"]
        assert (underlay.desired, underlay.args["address"]) == ("closed", lab["nodes"][name]["address"])
        assert (mesh.desired, mesh.args["address"]) == ("open", r["node_ip"])
        assert where(underlay) == where(mesh) == other
        # The mesh probe waits on the mesh path: both ends' tunnels and peers.
        iface = lab["nodes"][name]["mesh"]["interface"]
        assert {f"{n}/mesh/peers on {iface}" for n in (name, other)} <= set(mesh.requires)
        assert f"{name}/ray/ports off the underlay" in underlay.requires
        assert len(alive.requires) == len(set(alive.requires))
    # Each Ray node runs one node's probes: no node runs them all.
    runs = [where(c) for c in checks.values() if c.kind == "tcp_port"]
    assert sorted(runs) == sorted(ray * 2)


def _healthy(check: Check) -> Any:
    """What a node that is as declared answers for ``check`` (the shape ``matches`` reads)."""
    d = check.desired
    if check.kind in ("sysctl", "sysfs"):
        return {"live": sysctl_values(d), "persisted": sysctl_values(d)}
    if check.kind == "wg_peers":
        return {}
    if check.kind == "package":
        return d.replace("*", "1")
    if check.kind in ("conf_keys", "json_keys"):
        return sorted(d)
    if check.kind == "mount":
        return {**d, "discard_supported": False}
    if check.kind == "space":
        return {"size_bytes": check.args["size_gib"] * 2**30, "avail_bytes": 1}
    return d


def _drifted(outcomes: dict, checks: dict[str, Check]) -> list[str]:
    return [i for i, o in outcomes.items() if o.outcome in ("drift", "error")]


def _target(state: dict, check: Check) -> str | None:
    """The node a ping or port probe is sent to."""
    address = check.args.get("address")
    for name, node in state["nodes"].items():
        if address in (node["address"], node["mesh"]["address"].split("/")[0]):
            return name
    return None


def test_a_lost_node_gives_drift_for_it_only(lab: dict) -> None:
    """The lab's lost Ray worker (tests/lab/test_ray.py): nothing on it answers over SSH, the
    head lists it dead, its mesh address answers nothing. Its own checks fail; every check
    of another node about it is blocked, not a drift line for that other node."""
    lost = "lab-gpu-1"
    waves = check_waves(lab)
    checks = {c.id: c for w in waves for c in w}

    def read(check: Check, passed: Mapping[str, bool]) -> Any:
        if where(check) == lost:
            raise ConnectionError(f"ssh: connect to host {lost}: No route to host")
        if check.kind == "ray_member" and check.node == lost:
            return {"state": "DEAD", "resources": {}, "labels": {}}
        if check.kind == "tcp_port" and check.node == lost:
            return "closed"
        if check.kind == "ping" and lost in (check.node, _target(lab, check)):
            return "no reply"
        if check.kind == "wg_peers" and lost in check.args["peers"]:
            # What judge_peers says unless the lost peer's tunnel check drifted (then skipped).
            down = not passed.get(check.args["peers"][lost]["service"], True)
            return {} if down else {lost: "latest handshake 400 s ago"}
        return _healthy(check)

    outcomes = run_waves(waves, read, forks=3)
    bad = _drifted(outcomes, checks)
    assert bad and {checks[i].node for i in bad} == {lost}
    assert all(outcomes[i].outcome == "blocked" for i in checks if i.startswith(f"{lost}/ray/port"))
    # With every node as declared, nothing drifts: the healthy answers above pass.
    assert not _drifted(run_waves(waves, lambda c, p: _healthy(c), forks=3), checks)


def test_one_removed_peer_on_the_head_is_one_drift_line(lab: dict) -> None:
    """The head no longer has a worker as a peer: its peers check says so; the worker's
    Ray checks that cross that path (alive in the head's list, the mesh probe from the head)
    are blocked, not drift lines too."""
    head, worker = "lab-head-1", "lab-gpu-2"
    waves = check_waves(lab)
    checks = {c.id: c for w in waves for c in w}

    def read(check: Check, passed: Mapping[str, bool]) -> Any:
        if check.kind == "wg_peers" and check.node == head:
            return {worker: "not a peer of the interface"}
        crosses = {where(check), _target(lab, check)} == {head, worker}
        if check.kind == "ray_member" and check.node == worker:
            return "absent"
        if crosses and check.kind == "tcp_port" and check.desired == "open":
            return "closed"
        if check.kind == "ping" and crosses:
            return "no reply"
        return _healthy(check)

    outcomes = run_waves(waves, read, forks=3)
    assert _drifted(outcomes, checks) == [f"{head}/mesh/peers on wg0"]
    assert outcomes[f"{worker}/ray/alive in the cluster"].outcome == "blocked"


def test_a_resource_declared_zero_is_met_by_none_listed(lab: dict) -> None:
    """Ray drops resources of quantity 0 before starting the raylet (Ray 2.60.0, the lab's
    pinned release: python/ray/_private/resource_and_label_spec.py,
    ResourceAndLabelSpec.to_resource_dict keeps ``resource_quantity != 0``), so the state
    API lists a GPU-less head without a GPU entry. Before this rule the head's now-running
    ``alive in the cluster`` check would have drifted on a healthy cluster."""
    head = next(n for n, s in lab["nodes"].items() if s["ray"] and s["ray"]["role"] == "head")
    alive = next(c for c in checks_for(lab) if c.id == f"{head}/ray/alive in the cluster")
    assert alive.desired["resources"]["GPU"] == 0
    listed = {k: v for k, v in alive.desired["resources"].items() if v != 0}
    member = {"state": "ALIVE", "resources": {**listed, "CPU": 2.0}, "labels": dict(alive.desired["labels"])}
    assert matches(alive, member)
    assert not matches(alive, {**member, "state": "DEAD"})
    worker = next(c for c in checks_for(lab) if c.kind == "ray_member" and c.desired["resources"]["GPU"])
    gpus = {k: v for k, v in worker.desired["resources"].items() if k != "GPU"}
    assert not matches(worker, {"state": "ALIVE", "resources": gpus, "labels": worker.desired["labels"]})


def test_swarm_verify_refuses_fewer_than_one_fork() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "swarm_infra.cli", "verify", "--fleet", "lab", "--forks", "0"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2 and "--forks must be at least 1, not 0" in proc.stderr
    assert "Traceback" not in proc.stderr and "verify:" not in proc.stdout  # nothing was read
