"""The drain a batch's reboot and a Ray version change start with, on the real lab (root).

NOT RUN by the session that wrote it (helpers may not run the lab): written to the lab's
conventions, to be run with the other lab tests.

What the lab can show: the exact command both engines run (``engines.reboot.ray_drain_call``:
the node's Ray virtualenv Python, the node-side drain code on stdin, the cluster's token)
drains an idle worker out of the lab's real Ray 2.60.0 cluster over the mesh, finds the node
by its mesh address, and the worker rejoins once its unit is started again. What it cannot
show: the reboot itself. Lab nodes are systemd-nspawn containers started by the lab (not by
``systemd-nspawn@.service``, whose RestartForceExitStatus=133 restarts a container that
rebooted), so a ``reboot`` inside one ends the container instead of booting it again; and
their GPUs are simulated, so the drivers layer never has a driver to reboot into. A lab
that restarted a node whose nspawn exits 133 would give it a new boot id (nspawn sets a
fresh ``/proc/sys/kernel/random/boot_id`` per container boot) and could run the whole
``[ray-drain] ... [kubernetes-uncordon]`` sequence against an overridden nvml GPU slice, as
tests/lab/test_drivers.py does for the install.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time

import pytest

from swarm_infra.engines.reboot import ray_drain_call
from tests.labkit import LAB_STATE, node_ssh, on_node

pytestmark = [pytest.mark.root, pytest.mark.lab, pytest.mark.usefixtures("lab")]  # LAB_NEEDS applies
LAB_ORDER = 37  # after test_ray.py and test_metrics.py
LAB_NEEDS = LAB_LEAVES = "converged"  # the drained worker's Ray is started again

WORKER = next(n for n, s in sorted(LAB_STATE["nodes"].items()) if s["ray"] and s["ray"]["role"] == "worker")


def _drain(node: str, grace_s: int) -> dict:
    call = ray_drain_call(LAB_STATE["nodes"][node], grace_s, "a lab test")
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in call["env"].items())
    command = f"env {env} " + " ".join(shlex.quote(a) for a in call["argv"])
    proc = subprocess.run(
        node_ssh(node, command),
        input=call["stdin"],
        capture_output=True,
        text=True,
        timeout=grace_s + 60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def _alive_ips(head: str) -> set[str]:
    ray = LAB_STATE["nodes"][head]["ray"]
    script = (
        "import json; from ray._raylet import GcsClient; "
        f"print(json.dumps([i.node_manager_address for i in GcsClient(address={ray['gcs_address']!r})"
        ".get_all_node_info().values() if i.state == 0]))"
    )
    call = ray_drain_call(LAB_STATE["nodes"][head], 0, "")
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in call["env"].items())
    out = on_node(head, f"env {env} {shlex.quote(call['argv'][0])} -c {shlex.quote(script)}")
    return set(json.loads(out.stdout))


def test_an_idle_worker_is_drained_by_the_engines_command_and_rejoins() -> None:
    node = LAB_STATE["nodes"][WORKER]
    head = node["ray"]["head"]
    assert node["ray"]["node_ip"] in _alive_ips(head)
    out = _drain(WORKER, grace_s=60)
    # Idle (no job runs now): drained at once; the raylet may also leave on its own.
    assert out["outcome"] in ("idle", "dead"), out
    assert out["waited_s"] < 60
    unit = node["layout"]["units"]["ray_worker"]
    on_node(WORKER, f"systemctl restart {unit}")
    deadline = time.monotonic() + 60
    while node["ray"]["node_ip"] not in _alive_ips(head) and time.monotonic() < deadline:
        time.sleep(1)  # polling the GCS for the worker, not waiting blindly
    assert node["ray"]["node_ip"] in _alive_ips(head)


def test_a_node_outside_the_cluster_is_not_drained() -> None:
    """The drain looks the node up by its mesh address: a stopped worker is not there."""
    node = LAB_STATE["nodes"][WORKER]
    unit = node["layout"]["units"]["ray_worker"]
    on_node(WORKER, f"systemctl stop {unit}")
    try:
        deadline = time.monotonic() + 60
        while node["ray"]["node_ip"] in _alive_ips(node["ray"]["head"]) and time.monotonic() < deadline:
            time.sleep(1)
        # The drain runs with the worker's own Ray; the GCS is the head's.
        assert _drain(WORKER, grace_s=10)["outcome"] == "not-in-cluster"
    finally:
        on_node(WORKER, f"systemctl start {unit}")
