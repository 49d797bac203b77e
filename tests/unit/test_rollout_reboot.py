"""Reboots as part of the rollout, and Ray version changes.

The order of a batch's steps is the library's (``swarm_infra.resolve.rollout``); both
engines are read without a node (the role's tasks walked with Ansible's own Templar and the
project's filters, ``role_reader``; the pyinfra deploy with its operations recorded) and
must run the same steps in that order. Ray's side is Ray 2.60.0 itself, installed here: its
protobuf messages and enum values, and its version check, which refuses mixed versions.
Nothing here reboots anything: the lab's nodes are containers (see the lab test's note).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from swarm_infra.engines import reboot as engine_reboot
from swarm_infra.engines.pyinfra import layers as L
from swarm_infra.engines.pyinfra.runner import Reporter, Step, roll
from swarm_infra.engines.report import HostTally, summary_table
from swarm_infra.nodeside import raydrain
from swarm_infra.resolve import notes
from swarm_infra.resolve import rollout as R
from swarm_infra.resolve.files import reboot_required
from tests.unit.role_reader import run_role
from tests.unit.test_engine_parity import DRIVER_PROBE
from tests.unit.test_pyinfra_engine import state_of

# --------------------------------------------------------------------------- fixtures


def _node(allow_reboot: bool, ray: bool = True) -> dict[str, Any]:
    """An example-fleet GPU node (real NVML backend, a declared driver) with, when ``ray``,
    the lab's Ray worker part (the example fleet declares no RayCluster; the layout is the
    same on every node)."""
    example, lab = state_of("example"), state_of("lab")
    name = next(
        n
        for n, s in example["nodes"].items()
        if s["gpu"] and s["gpu"]["driver"] and s["gpu"]["backend"] == "nvml"
    )
    node = copy.deepcopy(json.loads(json.dumps(example["nodes"][name])))
    node["gpu"]["driver"]["allow_reboot"] = allow_reboot
    worker = next(s for s in lab["nodes"].values() if s["ray"] and s["ray"]["role"] == "worker")
    node["ray"] = copy.deepcopy(worker["ray"]) if ray else None
    return node


def _rollout(context: str | None = "swarm-example", grace: int = 300) -> dict[str, Any]:
    return {
        "serial": [1, "25%"],
        "max_fail_percentage": 0,
        "drain_grace_s": grace,
        "kubernetes_context": context,
    }


def _steps(names: list[str]) -> list[str]:
    """The step of each task or operation name ("[step] what it does"), in order, once."""
    out: list[str] = []
    for name in names:
        if name.startswith("["):
            step = name[1 : name.index("]")]
            if not out or out[-1] != step:
                out.append(step)
    return out


# ------------------------------------------------------------------ the library's plan


def test_a_drained_reboot_drains_before_and_verifies_after() -> None:
    steps = R.reboot_steps(_node(allow_reboot=True), _rollout(), reboot_due=True)
    at = {s: steps.index(s) for s in steps}
    # The issue's order: drain (Ray, Kubernetes), stop Ray, reboot, wait for the new boot,
    # the GPU layer, verify, and only then does the node take work again.
    assert at["ray-drain"] < at["ray-stop"] < at["reboot"]
    assert at["kubernetes-drain"] < at["reboot"]
    assert at["boot-id"] < at["reboot"] < at["boot-id-changed"] < at["gpu-converge"] < at["verify"]
    assert at["verify"] < at["kubernetes-uncordon"]
    assert "mark-pending" not in steps


def test_without_allow_reboot_the_node_is_marked_pending_and_nothing_reboots() -> None:
    steps = R.reboot_steps(_node(allow_reboot=False), _rollout(), reboot_due=True)
    assert steps == ["mark-pending", "report-pending"]
    assert not set(steps) & set(R.REBOOT_STEPS)


def test_no_reboot_when_none_is_due_or_no_driver_is_managed() -> None:
    assert R.reboot_steps(_node(allow_reboot=True), _rollout(), reboot_due=False) == []
    simulated = _node(allow_reboot=True)
    simulated["gpu"]["backend"] = "simulated"
    assert R.reboot_steps(simulated, _rollout(), reboot_due=True) == []


def test_ray_and_kubernetes_steps_only_where_they_apply() -> None:
    outside = R.reboot_steps(_node(allow_reboot=True, ray=False), _rollout(context=None), reboot_due=True)
    assert not [s for s in outside if s.startswith(("ray-", "kubernetes-"))]
    assert {"reboot", "boot-id-changed", "gpu-converge", "verify"} <= set(outside)


def test_an_earlier_runs_marker_makes_the_reboot_due() -> None:
    node = _node(allow_reboot=True)
    # The marker the drivers layer writes (its real text) names the driver: due.
    assert R.reboot_due(False, reboot_required(node))
    # Debian's own marker for another package (update-notifier's text) is not ours.
    assert not R.reboot_due(False, "*** System restart required ***\n")
    assert not R.reboot_due(False, None)
    assert R.reboot_due(True, None)


# ----------------------------------------------------------- both engines, same steps

ANSIBLE_RESULTS = {
    "drivers_probe": {"stdout": DRIVER_PROBE},
    "drivers_pci": {"matched": 1},
    "drivers_install": {"changed": True},
    "drivers_marker": {"failed": True, "msg": "file not found"},
    "drivers_kube_member": {"rc": 0},
    "drivers_ray_drain": {"stdout": json.dumps({"node_id": "ab", "outcome": "idle", "waited_s": 1.0})},
    "drivers_boot_before": {"content": "YQo="},
    "drivers_boot_after": {"content": "Ygo="},
}


def _ansible(node: dict[str, Any], rollout: dict[str, Any], results: dict[str, Any]) -> list[str]:
    hostvars = {
        "swarm": node,
        "inventory_hostname": node["name"],
        "drivers_rollout": {
            "drain_grace_s": rollout["drain_grace_s"],
            "kubernetes_context": rollout["kubernetes_context"] or "",
        },
        "drivers_verify_argv": ["swarm", "verify", "-i", "inventory/example"],
    }
    run = run_role("drivers", hostvars, results)
    return [c.task for c in run.calls]


class _Recorder:
    """The pyinfra deploy's operations, recorded by name (their arguments too)."""

    def __init__(self, rollout: dict[str, Any], marker: str | None, marker_path: str = "") -> None:
        self.names: list[str] = []
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.rollout, self.marker, self.marker_path = rollout, marker, marker_path

    def snapshot(self) -> dict[str, Any]:
        return {"texts": {self.marker_path: self.marker}, "venvs": {}}

    def run_settings(self) -> dict[str, Any]:
        return {"rollout": self.rollout, "verify_argv": ["swarm", "verify"]}

    def __getattr__(self, op: str) -> Any:
        def call(*args: Any, **kw: Any) -> Any:
            if "name" in kw:
                self.names.append(kw["name"])
                self.calls.append((op, kw))
            return object()

        return call


def _pyinfra(
    node: dict[str, Any], rollout: dict[str, Any], monkeypatch: pytest.MonkeyPatch, marker: str | None = None
) -> _Recorder:
    recorder = _Recorder(rollout, marker, node["layout"]["files"]["reboot_required"]["path"])
    monkeypatch.setattr(L, "ops", recorder)
    monkeypatch.setattr(L, "server", recorder)
    L.reboot_batch(node, install=object())
    return recorder


@pytest.mark.parametrize("context", ["swarm-example", None])
@pytest.mark.parametrize("ray", [True, False])
def test_both_engines_run_the_reboot_steps_in_the_librarys_order(
    context: str | None, ray: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    node, rollout = _node(allow_reboot=True, ray=ray), _rollout(context)
    expected = R.reboot_steps(node, rollout, reboot_due=True)
    ansible = _steps(_ansible(node, rollout, ANSIBLE_RESULTS))
    pyinfra = _steps(_pyinfra(node, rollout, monkeypatch).names)
    assert ansible == expected
    assert pyinfra == expected


def test_with_a_pending_marker_both_engines_mark_and_report_and_do_not_reboot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    node, rollout = _node(allow_reboot=False), _rollout()
    ansible_names = _ansible(node, rollout, ANSIBLE_RESULTS)
    recorder = _pyinfra(node, rollout, monkeypatch)
    assert _steps(ansible_names) == ["mark-pending", "report-pending"]
    assert _steps(recorder.names) == ["mark-pending", "report-pending"]
    note = notes.drivers_reboot_pending(node)
    assert ("note_if", {"name": "[report-pending] Report the pending reboot", "text": note}) in [
        (op, {k: v for k, v in kw.items() if k in ("name", "text")}) for op, kw in recorder.calls
    ]


def test_a_marker_left_by_an_earlier_run_reboots_without_a_driver_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    node, rollout = _node(allow_reboot=True), _rollout()
    # Ansible: the driver did not change in this run, the marker names it.
    results = {
        **ANSIBLE_RESULTS,
        "drivers_install": {"changed": False},
        "drivers_marker": {
            "content": __import__("base64").b64encode(reboot_required(node).encode()).decode()
        },
    }
    assert "reboot" in _steps(_ansible(node, rollout, results))
    # pyinfra: the marker in the snapshot makes every step unconditional (no _if on install).
    recorder = _pyinfra(node, rollout, monkeypatch, marker=reboot_required(node))
    assert recorder.calls and all("_if" not in kw for _, kw in recorder.calls)
    # Without it, every step waits for this run's install to change something.
    recorder = _pyinfra(node, rollout, monkeypatch, marker=None)
    assert all("_if" in kw for _, kw in recorder.calls)


def test_nothing_is_due_in_ansible_when_the_driver_did_not_change_and_no_marker() -> None:
    node, rollout = _node(allow_reboot=True), _rollout()
    results = {**ANSIBLE_RESULTS, "drivers_install": {"changed": False}}
    assert _steps(_ansible(node, rollout, results)) == []


# ------------------------------------------------------------ batches stop on failure


def _run(steps: list[Step], rollout: dict[str, Any], fails: set[str]) -> tuple[int, list[list[str]]]:
    ran: list[list[str]] = []

    class H:
        def __init__(self, name: str) -> None:
            self.name = name

    prepared = [(s, [H(n) for n in s.hosts], {}) for s in steps]

    def run_batch(live: list[Any], ops_of: dict[Any, list[str]]) -> set[str]:
        ran.append([h.name for h in live])
        return {h.name for h in live} & fails

    import io

    rc = roll(prepared, rollout, set(), run_batch, Reporter(io.StringIO()))
    return rc, ran


def test_a_failed_verify_in_the_canary_stops_the_next_batch() -> None:
    hosts = tuple(f"gpu-{i}" for i in range(5))
    rollout = _rollout()
    step = Step((L.drivers_layer,), hosts, True)
    batches = R.rollout_batches(list(hosts), rollout)
    # The canary's reboot verified with drift: its host failed, the rollout stops there.
    rc, ran = _run([step], rollout, fails={batches[0][0]})
    assert rc == 1 and ran == [batches[0]]
    # Verified: every batch runs, in the Rollout's order.
    rc, ran = _run([step], rollout, fails=set())
    assert rc == 0 and ran == batches


# ------------------------------------------------------------------------ Ray's drain


def _ray_pb() -> tuple[Any, Any]:
    from ray.core.generated import autoscaler_pb2, gcs_pb2

    return autoscaler_pb2, gcs_pb2


class _Gcs:
    """Ray's GcsClient as far as the drain uses it, answering with Ray 2.60.0's own
    GcsNodeInfo messages: this node busy for ``busy_polls`` polls, then idle."""

    def __init__(self, node_ip: str, busy_polls: int, accept: bool = True) -> None:
        _, gcs_pb2 = _ray_pb()
        self.node_id = b"\x01" * 28
        self.info = gcs_pb2.GcsNodeInfo(
            node_id=self.node_id, node_manager_address=node_ip, state=gcs_pb2.GcsNodeInfo.ALIVE
        )
        other = gcs_pb2.GcsNodeInfo(
            node_id=b"\x02" * 28, node_manager_address="10.99.0.1", state=gcs_pb2.GcsNodeInfo.ALIVE
        )
        self.others = {b"\x02" * 28: other}
        self.busy_polls, self.accept = busy_polls, accept
        self.drained: list[tuple[Any, ...]] = []

    def get_all_node_info(self) -> dict[Any, Any]:
        if self.drained:
            if self.busy_polls > 0:
                self.info.state_snapshot.node_activity[:] = ["CPU: 1/4 in use"]
                self.busy_polls -= 1
            else:
                del self.info.state_snapshot.node_activity[:]
        return {self.node_id: self.info, **self.others}

    def drain_node(self, node_id: str, reason: int, message: str, deadline_ms: int) -> tuple[bool, str]:
        self.drained.append((node_id, reason, message, deadline_ms))
        return (self.accept, "" if self.accept else "refused for the test")


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_the_drain_is_a_preemption_with_the_grace_as_deadline_and_waits_for_idle() -> None:
    autoscaler_pb2, _ = _ray_pb()
    gcs, clock = _Gcs("10.60.1.5", busy_polls=2), _Clock()
    out = raydrain.drain(
        "10.60.0.1:6379", "10.60.1.5", 300, "swarm: x", client=gcs, clock=clock, sleep=clock.sleep
    )
    assert out["outcome"] == "idle" and out["node_id"] == gcs.node_id.hex()
    [(node_id, reason, message, deadline_ms)] = gcs.drained
    # Ray 2.60.0's enum value; not the idle-termination drain the raylet may refuse.
    assert reason == autoscaler_pb2.DrainNodeReason.Value(raydrain.PREEMPTION)
    assert (node_id, message, deadline_ms) == (gcs.node_id.hex(), "swarm: x", (1000 + 300) * 1000)
    assert 0 < out["waited_s"] < 300


def test_work_still_running_at_the_deadline_is_reported_and_a_stranger_is_not_drained() -> None:
    gcs, clock = _Gcs("10.60.1.5", busy_polls=10**6), _Clock()
    out = raydrain.drain("h:1", "10.60.1.5", 30, "m", client=gcs, clock=clock, sleep=clock.sleep)
    assert out["outcome"] == "grace-expired" and out["waited_s"] >= 30
    gone = _Gcs("10.60.1.9", busy_polls=0)
    out = raydrain.drain("h:1", "10.60.1.5", 30, "m", client=gone, clock=clock, sleep=clock.sleep)
    assert out == {"node_id": None, "outcome": "not-in-cluster", "waited_s": 0.0} and not gone.drained
    refused = _Gcs("10.60.1.5", busy_polls=0, accept=False)
    assert (
        "refused for the test"
        in raydrain.drain("h:1", "10.60.1.5", 30, "m", client=refused, reason=2)["error"]
    )


def test_the_drain_runs_the_clusters_ray_with_token_auth_and_data_on_stdin() -> None:
    node = _node(allow_reboot=True)
    call = engine_reboot.ray_drain_call(node, 300, "a reboot")
    assert call["argv"][0] == node["layout"]["files"]["ray_venv"]["path"] + "/bin/python"
    assert call["env"] == {
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": node["layout"]["files"]["ray_auth_token"]["path"],
    }
    payload = json.loads(call["stdin"])
    assert payload["call"] == "drain"
    assert payload["args"][:3] == [node["ray"]["gcs_address"], node["ray"]["node_ip"], 300]
    assert not any(node["ray"]["node_ip"] in a for a in call["argv"])  # fleet data never in argv


def test_kubectl_gets_the_node_name_as_one_argument() -> None:
    argv = R.kubectl_drain_argv("ctx", "a node; rm -rf /", 120)
    assert "a node; rm -rf /" in argv and "--timeout=120s" in argv and "--ignore-daemonsets" in argv


# ------------------------------------------------------------- Ray version changes


def test_ray_refuses_a_node_of_another_version() -> None:
    """Ray 2.60.0's own check (python/ray/_private/utils.py check_version_info, which
    Node.check_version_info runs before a worker node starts): a cluster started with
    another Ray is refused. Hence head and workers change together."""
    import platform

    import ray
    from ray._private.utils import check_version_info

    python = platform.python_version()
    check_version_info({"ray_version": ray.__version__, "python_version": python}, "node x")
    with pytest.raises(RuntimeError, match="Version mismatch"):
        check_version_info({"ray_version": "2.59.0", "python_version": python}, "node x")


def test_a_version_change_drains_and_stops_every_member_that_changes() -> None:
    lab = state_of("lab")["nodes"]
    members = sorted(n for n, s in lab.items() if s["ray"])
    declared = lab[members[0]]["ray"]["version"]
    assert R.ray_upgrade(lab, {n: declared for n in members}) is None
    assert R.ray_upgrade(lab, {}) is None  # nothing installed yet: a first install
    change = R.ray_upgrade(lab, {n: "2.59.0" for n in members})
    assert change is not None
    assert change["nodes"] == members and change["from"] == ["2.59.0"] and change["to"] == declared
    steps = change["steps"]
    assert steps.index("ray-drain") < steps.index("ray-stop-workers") < steps.index("ray-stop-head")
    assert steps.index("ray-stop-head") < steps.index("ray-install") < steps.index("ray-start-head")
    note = R.ray_upgrade_note(change, 300)
    assert "2.59.0 -> " + declared in note and "300 s" in note


@pytest.mark.parametrize("role", ["head", "worker"])
def test_both_engines_drain_then_stop_on_a_version_change(role: str, monkeypatch: pytest.MonkeyPatch) -> None:
    lab = state_of("lab")["nodes"]
    node = copy.deepcopy(next(s for s in lab.values() if s["ray"] and s["ray"]["role"] == role))
    installed = json.dumps({"ray": "2.59.0", "numpy": "2.1.0"})
    hostvars = {"swarm": node, "inventory_hostname": node["name"], "ray_drain_grace_s": 300}
    run = run_role("ray", hostvars, {"ray_upgrade_installed": {"stdout": installed}}, tasks_from="upgrade")
    ansible = _steps([c.task for c in run.calls])
    recorder = _Recorder(_rollout(), None)
    recorder.snapshot = lambda: {"venvs": {node["layout"]["files"]["ray_venv"]["path"]: {"ray": "2.59.0"}}}  # type: ignore[method-assign]
    monkeypatch.setattr(L, "ops", recorder)
    monkeypatch.setattr(L, "_node", lambda: node)
    L.ray_upgrade()
    stop = "ray-stop-head" if role == "head" else "ray-stop-workers"
    assert ansible == _steps(recorder.names) == ["ray-drain", stop]
    # ... and nothing when the member already runs the declared Ray.
    same = json.dumps({"ray": node["ray"]["version"]})
    run = run_role("ray", hostvars, {"ray_upgrade_installed": {"stdout": same}}, tasks_from="upgrade")
    assert _steps([c.task for c in run.calls]) == []


# ------------------------------------------------------------------------ reporting


def test_the_converge_summary_names_nodes_pending_a_reboot() -> None:
    node = _node(allow_reboot=False)
    pending, other = HostTally(ok=3), HostTally(ok=3)
    pending.note(notes.drivers_reboot_pending(node))
    other.note(notes.gpu_simulated(node))
    table = summary_table({"a": pending, "b": other}, simulated=())
    assert "(PENDING REBOOT)" in next(ln for ln in table.splitlines() if ln.startswith("a "))
    assert "(PENDING REBOOT)" not in next(ln for ln in table.splitlines() if ln.startswith("b "))
    assert table.splitlines()[-1].startswith("pending reboot: a:")
    # The GPU layer's own pending note (nothing set while the driver waits) marks it too.
    gpu = HostTally()
    gpu.note(notes.gpu_reset_required({"pending_reboot": "LIB_RM_VERSION_MISMATCH"}))
    assert gpu.pending_reboot and pending.status == "ok"


# ------------------------------------------------------- the pyinfra operations themselves


class _Shell:
    """A host whose ``cat /proc/sys/kernel/random/boot_id`` prints ``boot``."""

    def __init__(self, boot: str) -> None:
        self.name, self.boot = "node-1", boot

    def run_shell_command(self, command: Any) -> tuple[bool, Any]:
        from types import SimpleNamespace

        assert command.get_raw_value() == f"cat {engine_reboot.BOOT_ID}"
        return True, SimpleNamespace(stdout_lines=[self.boot])


def test_the_drain_operation_sends_code_and_data_on_stdin() -> None:
    from swarm_infra.engines.nodeside_call import BOOTSTRAP
    from swarm_infra.engines.pyinfra import operations as O
    from tests.unit.test_pyinfra_operations import Node

    call = engine_reboot.ray_drain_call(_node(allow_reboot=True), 60, "a test")
    (command,) = Node({})(O.ray_drain, argv=call["argv"], stdin=call["stdin"]).commands
    assert command.connector_arguments["_stdin"] == call["stdin"]
    assert command.get_raw_value().endswith("-c " + __import__("shlex").quote(BOOTSTRAP))


def test_the_boot_id_must_change_across_the_reboot() -> None:
    from swarm_infra.engines.pyinfra import operations as O
    from tests.unit.test_pyinfra_operations import Node

    node = Node({})
    (read,) = node(O.boot_id).commands
    (check,) = Node.__call__(node, O.boot_id_changed).commands[1:]
    assert read.function(node.state, _Shell("aaaa")) is True
    assert check.function(node.state, _Shell("aaaa")) is False  # same boot: not rebooted
    assert check.function(node.state, _Shell("bbbb")) is True


def test_verify_and_kubectl_run_on_the_controller(monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    from types import SimpleNamespace

    from swarm_infra.engines.pyinfra import operations as O
    from tests.unit.test_pyinfra_operations import Node

    ran: list[list[str]] = []
    codes = {"verify": 1, "get": 1}

    def run(argv: list[str], **kw: Any) -> Any:
        ran.append(argv)
        return SimpleNamespace(
            returncode=codes.get(argv[3] if argv[0] != "kubectl" else argv[2], 0), stdout="drift", stderr=""
        )

    monkeypatch.setattr(subprocess, "run", run)
    node = Node({})
    O.run_settings(node.state)["verify_argv"] = ["swarm", "x", "y", "verify"]
    (verify,) = node(O.verify_node, node="gpu-1", junit_dir="/tmp/j").commands
    assert verify.function(node.state, _Shell("b")) is False  # drift: the host fails, the batch stops
    assert ran[-1][-8:] == [
        "--limit",
        "gpu-1",
        "--layer",
        "drivers",
        "--layer",
        "gpu",
        "--junit-xml",
        "/tmp/j/verify-gpu-1.xml",
    ]
    (drain,) = node(
        O.controller_command,
        argv=R.kubectl_drain_argv("c", "gpu-1", 5),
        when_ok=R.kubectl_node_argv("c", "gpu-1"),
    ).commands[-1:]
    assert drain.function(node.state, _Shell("b")) is True  # not a node of the cluster: nothing drained
    assert ran[-1] == R.kubectl_node_argv("c", "gpu-1")
    codes["get"] = 0
    assert drain.function(node.state, _Shell("b")) is True and ran[-1] == R.kubectl_drain_argv(
        "c", "gpu-1", 5
    )


def test_swarm_verify_names_the_nodes_pending_a_reboot() -> None:
    from swarm_infra.cli.verify import pending_reboot
    from swarm_infra.verify.checks import checks_for
    from swarm_infra.verify.report import Result

    state = state_of("example")
    node = next(n for n, s in state["nodes"].items() if s["gpu"] and s["gpu"]["driver"])
    # The drivers layer's marker check, as verify generates it for the node.
    (marker,) = [
        c for c in checks_for(state, [node]) if c.layer == "drivers" and c.key.startswith("pending reboot")
    ]
    drifted = Result(node, "drivers", marker.key, "drift", {"node": node})
    passed = Result("other", "drivers", marker.key, "passed")
    assert pending_reboot([drifted, passed]) == [node]
