"""Ray over the WireGuard mesh on the real lab (root; CI runs it): every node joins one Ray
cluster on its mesh address; a real job shows placement by GPU model, a Bayesian Tune search
across nodes, data crossing the mesh (never the underlay), and a worker lost mid-job whose
trial resumes from its checkpoint elsewhere; Ray Train's data-parallel training resumes from
its last checkpoint after a worker node is killed.

Needs the lab converged (LAB_NEEDS): the lab fleet declares the RayCluster, so the site
converge already started Ray. Jobs are submitted from the head, over its mesh address: the
controller (this host) is not in the mesh.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from swarm_infra.lab.state import read_connections, ssh_command
from swarm_infra.metrics.jobs import parse_resume
from tests.labkit import (
    CLIENT,
    DASHBOARD,
    FILES,
    HEAD,
    LAB_STATE,
    RAY,
    ROOT,
    VENV,
    alive,
    alive_within,
    on_node,
    swarm,
)

pytestmark = [pytest.mark.root, pytest.mark.lab]
LAB_ORDER = 35
# The Tune proof's lost worker is started again and converged (restart(): the operator's path,
# asserted once); the Train proof's killed node is left down: the next module's `swarm lab up`
# starts it and the session's converge (tests/conftest.py) converges it.
LAB_NEEDS, LAB_LEAVES = "converged", "dirty"
JOB_DIR = "/root/ray-jobs"
MIB = 64
# Tune trials of the proof job: one wave, a trial on each of the cluster's CPUs (2 per node),
# so the node the test crashes runs one and the job must retry it elsewhere.
TRIALS = 6
# Each trial lasts at least EPOCHS x EPOCH_S s (a trial of the digits set alone ends before
# its TRIAL-RUNNING line reaches the test), so the crash finds it running after some epochs
# (its line reaches the test within a few seconds: Ray's log monitor, then one ssh; the CI
# runs crashed trials at epochs 5 and 14 of 50, so 12 s leave a margin and save CI time).
EPOCHS, EPOCH_S = 30, 0.4
# Which node holds which GPU model (the lab fleet: H100s on lab-gpu-1, A100s on lab-gpu-2).
BY_MODEL = {
    accel: sorted(n for n, r in RAY.items() if r and f"accelerator_type:{accel}" in r["resources"])
    for accel in ("H100", "A100")
}
# Counted on each worker's input: Ray's ports over the underlay (must stay 0) and over wg0.
PROBE = """
table inet ray_probe {{
  chain input {{
    type filter hook input priority -10; policy accept;
    iifname "eth0" tcp dport {{ {ports}, {low}-{high} }} counter
    iifname "{iface}" tcp dport {{ {ports}, {low}-{high} }} counter
  }}
}}
"""


def verify(tmp_path: Path, *args: str) -> tuple[int, list[dict]]:
    junit = tmp_path / "verify.xml"
    proc = swarm("verify", "--junit-xml", str(junit), *args, check=False)
    drift = [
        json.loads(p.get("value"))
        for p in ET.parse(junit).getroot().iter("property")
        if p.get("name") == "drift"
    ]
    return proc.returncode, drift


def counters(node: str) -> list[int]:
    """Packets counted by the probe's rules: [underlay, mesh]."""
    text = on_node(node, "nft list table inet ray_probe").stdout
    return [int(p) for p in re.findall(r"counter packets (\d+)", text)]


def test_every_node_joins_on_its_mesh_address_with_its_resources_and_labels(lab) -> None:
    expected = {n for n, r in RAY.items() if r}
    members = alive_within(expected)
    assert set(members) == expected
    for name, node in members.items():
        want = RAY[name]
        assert node["node_ip"] == want["node_ip"]
        assert node["resources_total"].get("GPU", 0) == want["num_gpus"]
        for key, value in want["resources"].items():
            assert node["resources_total"][key] == value
        for key, value in want["labels"].items():
            assert node["labels"][key] == value
    # That a converge of the converged lab restarts no raylet is test_converge.py's (its
    # second converge): one Ansible no-op less here.


def test_rays_ports_answer_over_the_mesh_only(lab, tmp_path: Path) -> None:
    worker = BY_MODEL["A100"][0]
    port = RAY[worker]["ports"]["node_manager"]
    underlay = LAB_STATE["nodes"][worker]["address"]
    probe = "timeout 3 bash -c '</dev/tcp/{}/{}' && echo open || echo closed"
    assert on_node(HEAD, probe.format(underlay, port)).stdout.strip() == "closed"
    assert on_node(HEAD, probe.format(RAY[worker]["node_ip"], port)).stdout.strip() == "open"
    # Ray listens on every interface; the firewall is what keeps the underlay out.
    listening = on_node(worker, "ss -ltnH").stdout
    assert f"0.0.0.0:{port}" in listening or f"*:{port}" in listening
    rc, drift = verify(tmp_path)
    assert rc == 0 and drift == []


# A job with one task on each Ray node: who it runs as, and whether it can read root's
# WireGuard key there.
WHO_JOB = """
import json, os, socket, ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
ray.init()

@ray.remote(num_cpus=0)
def who(key):
    try:
        open(key).read()
        readable = True
    except PermissionError:
        readable = False
    return {"host": socket.gethostname(), "uid": os.getuid(), "key_readable": readable}

alive = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
pin = [NodeAffinitySchedulingStrategy(n, soft=False) for n in alive]
runs = [who.options(scheduling_strategy=p).remote(KEY) for p in pin]
print("WHO " + json.dumps(ray.get(runs)))
"""


def submit_job(node: str, script: str, with_token: bool) -> subprocess.CompletedProcess[str]:
    on_node(node, f"mkdir -p {JOB_DIR}/who && cat > {JOB_DIR}/who/who.py <<'EOF'\n{script}\nEOF")
    prefix = f"{CLIENT} " if with_token else ""
    return on_node(
        node,
        f"{prefix}timeout 300 {VENV}/bin/ray job submit --address {DASHBOARD} --working-dir {JOB_DIR}/who "
        "-- python who.py",
        check=False,
    )


def test_jobs_run_with_the_token_only_and_as_the_unprivileged_user(lab) -> None:
    """Issue #22 (ShadowRay, CVE-2023-48022): without the token the job API refuses a job,
    even from a member's root; with it, the job's tasks run as Ray's user on every node and
    cannot read the node's WireGuard key."""
    key = FILES["wireguard_key"]
    script = WHO_JOB.replace("KEY", repr(key))
    worker = BY_MODEL["A100"][0]
    refused = submit_job(worker, script, with_token=False)
    assert refused.returncode != 0 and "WHO " not in refused.stdout, refused.stdout[-2000:]
    listed = on_node(worker, f"{VENV}/bin/ray list nodes --address {DASHBOARD}", check=False)
    assert listed.returncode != 0, listed.stdout[-1000:]
    ran = submit_job(HEAD, script, with_token=True)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-1000:]
    line = next(ln for ln in ran.stdout.splitlines() if ln.startswith("WHO "))
    runs = json.loads(line.removeprefix("WHO "))
    user = RAY[HEAD]["user"]
    uids = {n: int(on_node(n, f"id -u {user}").stdout) for n, r in RAY.items() if r}
    assert {r["host"] for r in runs} == set(uids)  # a task on every Ray node
    assert all(r["uid"] == uids[r["host"]] != 0 and not r["key_readable"] for r in runs), runs


def test_a_mesh_peer_outside_the_members_reaches_no_ray_port(lab) -> None:
    """The head's firewall passes Ray's ports to the members' mesh addresses only: with one
    worker's address taken out of the head's member set (as a mesh peer that is not a
    member), its connections to the GCS and the job API are dropped; the declared rules,
    reloaded, let it in again."""
    worker = BY_MODEL["A100"][0]
    address = RAY[worker]["node_ip"]
    gcs, dashboard = RAY[HEAD]["ports"]["gcs"], RAY[HEAD]["dashboard"]["port"]
    probe = f"timeout 3 bash -c '</dev/tcp/{RAY[HEAD]['node_ip']}/{{}}' && echo open || echo closed"
    assert on_node(worker, probe.format(gcs)).stdout.strip() == "open"
    on_node(HEAD, f"nft delete element inet swarm_ray members {{ {address} }}")
    try:
        assert on_node(worker, probe.format(gcs)).stdout.strip() == "closed"
        assert on_node(worker, probe.format(dashboard)).stdout.strip() == "closed"
    finally:
        on_node(HEAD, f"systemctl reload {LAB_STATE['nodes'][HEAD]['layout']['units']['ray_firewall']}")
    assert on_node(worker, probe.format(gcs)).stdout.strip() == "open"


def test_a_job_places_by_gpu_model_tunes_across_nodes_moves_data_over_the_mesh_and_survives_a_lost_worker(
    lab, tmp_path: Path
) -> None:
    lost = BY_MODEL["H100"][0]
    consumer = BY_MODEL["A100"][0]
    iface = LAB_STATE["nodes"][consumer]["mesh"]["interface"]
    ports = RAY[consumer]["firewall"]["tcp_ports"]
    low, high = RAY[consumer]["firewall"]["tcp_ranges"][0]
    for node in (lost, consumer):
        rules = PROBE.format(ports=", ".join(map(str, ports)), low=low, high=high, iface=iface)
        on_node(node, f"nft -f - <<'EOF'\n{rules}\nEOF")
    wg_rx = int(on_node(consumer, f"cat /sys/class/net/{iface}/statistics/rx_bytes").stdout)
    for script in ("mesh_proof.py", "fleet_training.py"):  # the proof job keeps its trials' checkpoints
        job = (ROOT / "jobs" / script).read_text()  # with fleet_training.py's HeadStore
        on_node(HEAD, f"mkdir -p {JOB_DIR} && cat > {JOB_DIR}/{script} <<'EOF'\n{job}\nEOF")

    conn = read_connections()[HEAD]
    submit = (
        f"{CLIENT} {VENV}/bin/ray job submit --address {DASHBOARD} --working-dir {JOB_DIR} "
        # Ray's driver folds log lines that differ only in numbers ("TRIAL-RUNNING lab-gpu-1" and
        # "... lab-gpu-2" alike): the test reads every trial's line, so none is folded.
        f"-- RAY_DEDUP_LOGS=0 python mesh_proof.py --mib {MIB} --trials {TRIALS} --epochs {EPOCHS} "
        f"--epoch-seconds {EPOCH_S}"
    )
    proc = subprocess.Popen(
        ssh_command(conn, [submit]), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    stopped, lines, on_lost = False, [], set()
    assert proc.stdout is not None
    for line in proc.stdout:  # the job's log, as it runs: stop the H100 node once it runs a trial
        lines.append(line)
        running = re.search(r"TRIAL-RUNNING ([\w.-]+) alpha=([0-9.e+-]+)", line)
        if running and running.group(1).split(".")[0] == lost and not stopped:
            on_lost.add(running.group(2))  # the trial the crash takes down with the node
            crash = swarm("lab", "stop", "--kill", lost).stdout  # no trial on it ends cleanly
            assert "killed (crashed)" in crash
            stopped = True
    assert proc.wait(timeout=900) == 0, "".join(lines[-60:])
    assert stopped, "no trial ran on " + lost + "".join(lines[-60:])
    result = json.loads(next(ln for ln in reversed(lines) if ln.startswith("RESULT ")).split(" ", 1)[1])

    assert result["placement"] == {"A100": BY_MODEL["A100"], "H100": BY_MODEL["H100"]}
    data = result["data"]
    assert data["consumer"] == consumer and data["bytes"] == MIB << 20 and data["checksum_ok"]
    grown = int(on_node(consumer, f"cat /sys/class/net/{iface}/statistics/rx_bytes").stdout) - wg_rx
    assert grown >= MIB << 20, grown  # the array crossed the mesh
    underlay, mesh = counters(consumer)
    assert underlay == 0 and mesh > 0, (underlay, mesh)  # Ray's traffic never touched the underlay
    tuned = result["tune"]
    assert tuned["errors"] == 0 and tuned["trials"] == TRIALS
    assert tuned["search"].startswith("OptunaSearch")
    assert len(tuned["hosts"]) >= 2  # trials ran on several nodes at once
    # The crash took down a running trial: it ran again on another node (moved) and resumed
    # from a checkpoint it made there, not from epoch 0. Each trial reports with a checkpoint
    # after every epoch, and Tune records the two apart: the result first (the metrics the
    # test reads), then the checkpoint, by a separate save task on the trial's actor, before
    # its next step (Ray 2.60, ray/tune/execution/tune_controller.py: _process_trial_result,
    # then _schedule_trial_save and _process_trial_save). A crash between the two loses that
    # one checkpoint (CI saw it: reported epoch 5 on the lost node, resumed from 4), so the
    # trial resumes from its last report's checkpoint or the one before, never earlier.
    assert tuned["moved"] >= 1, tuned
    retried = {t["alpha"]: t["runs"] for t in tuned["retried"]}
    resumed = [
        (alpha, runs)
        for alpha, runs in retried.items()
        if runs[0]["host"].split(".")[0] == lost and runs[-1]["host"].split(".")[0] != lost
    ]
    # The trial seen running on the node when it was killed is among them.
    assert resumed and on_lost <= {a for a, _ in resumed}, (tuned["retried"], on_lost)
    for _, runs in resumed:
        before, after = runs[0], runs[1]
        assert before["resumed_from"] == 0 and after["resumed_from"] > 0, runs
        assert before["last_epoch"] - 1 <= after["resumed_from"] <= before["last_epoch"], runs
        assert after["first_epoch"] == after["resumed_from"] + 1, runs

    restart(lost, tmp_path)
    on_node(consumer, "nft delete table inet ray_probe")
    on_node(lost, "nft delete table inet ray_probe", check=False)  # gone if its netns was new


def restart(lost: str, tmp_path: Path) -> None:
    """Ray and swarm verify both see the killed node down; started again and converged, it
    rejoins and verify passes."""
    # A crashed raylet tells the GCS nothing: the head marks it dead after its health checks
    # fail (14 s with the lab's declared health check, policies/lab/ray.yaml; 62 s with Ray's).
    deadline = time.monotonic() + 90
    while lost in alive() and time.monotonic() < deadline:
        time.sleep(1)  # polling the head's state API
    assert lost not in alive()
    rc, drift = verify(tmp_path, "--limit", lost)
    assert rc == 1

    # Started again, the node rejoins (its worker unit is enabled) and verify passes. Only
    # the restarted node is converged (what an operator would do; the others never changed).
    swarm("lab", "up", "--fleet", "lab")
    proc = swarm("converge", "--engine", "pyinfra", "--limit", lost, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    assert lost in alive_within({n for n, r in RAY.items() if r})
    rc, drift = verify(tmp_path)
    assert rc == 0 and drift == [], drift


# Fault-tolerance run: two workers, a checkpoint every CKPT_EVERY steps, TOTAL_STEPS in all.
CKPT_EVERY, TOTAL_STEPS = 10, 100


def test_training_resumes_from_its_last_checkpoint_after_a_worker_node_is_killed(lab, tmp_path: Path) -> None:
    """Ray Train (TorchTrainer, gloo over wg0) with two workers on the two GPU nodes,
    checkpointing to the head; the node of rank 1 is killed once a checkpoint is registered.
    Ray Train starts a new worker group on the node left, which resumes at the step after
    the last checkpoint Ray Train registered before the crash (not at 0), and the run finishes."""
    worker = BY_MODEL["A100"][0]
    mesh = LAB_STATE["nodes"][worker]["mesh"]
    job = (ROOT / "jobs" / "fleet_training.py").read_text()
    on_node(HEAD, f"mkdir -p {JOB_DIR}/ft && cat > {JOB_DIR}/ft/fleet_training.py <<'EOF'\n{job}\nEOF")
    submit = (
        f"{CLIENT} {VENV}/bin/ray job submit --address {DASHBOARD} --working-dir {JOB_DIR}/ft "
        f"-- python fleet_training.py --ifname {mesh['interface']} --mtu {mesh['mtu']} --backend gloo "
        f"--max-workers 2 --checkpoint-every {CKPT_EVERY} --total-steps {TOTAL_STEPS} --max-failures 2"
    )
    ssh = ssh_command(read_connections()[HEAD], [submit])
    proc = subprocess.Popen(ssh, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    lines: list[str] = []
    rank0, killed = None, None
    for line in proc.stdout:  # the job's log as it runs
        lines.append(line)
        if rank0 is None and "START {" in line:
            rank0 = json.loads(line.split("START ", 1)[1])["host"].split(".")[0]
        if killed is None and rank0 and "CHECKPOINT {" in line:
            # The other GPU node holds rank 1; rank 0's log (the test's evidence) survives.
            killed = next(n for n in BY_MODEL["H100"] + BY_MODEL["A100"] if n != rank0)
            assert "killed (crashed)" in swarm("lab", "stop", "--kill", killed).stdout
    assert proc.wait(timeout=900) == 0, "".join(lines[-60:])
    assert killed, "no checkpoint was reported" + "".join(lines[-60:])
    run = parse_resume("".join(lines))
    assert run.starts[0] == (0, None)
    assert len(run.starts) >= 2, "".join(lines[-60:])  # a second worker group after the crash
    last = run.checkpoints[-1]  # the last checkpoint the controller registered before it
    assert run.starts[1] == (last + 1, last) and last + 1 > 0, (run, "".join(lines[-40:]))
    assert run.final_step == TOTAL_STEPS - 1
    # The killed node stays down (LAB_LEAVES): restart() proved the way back once, above.
