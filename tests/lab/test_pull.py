"""Pull convergence on the real lab (root; issue #27), behind lab-b's real NAT (nothing from
outside opens a connection to lab-gpu-2, the controller included): lab-gpu-2 is
bootstrapped at its console, its Node document goes into the fleet as a signed commit on the
lab's Git server, and its own agent fetches, verifies, applies and joins the mesh, and the
controller (a mesh member the fleet declares) then reaches it over SSH at its mesh address;
unsigned and unknown-signer commits are refused; a later rollout batch waits for the
canary's report and halts when the canary fails. (``swarm lab up`` joins lab-gpu-2 by pull
too, lab/join.py, with the lab's own fleet repository; this module's steps are the
provider's and the operator's one by one, on a lab converged since.)

What each step stands for:

- the Git server is the lab's (lab/gitserver.py: git http-backend over https on the
  service address 192.0.2.1, the lab CA's certificate), reached by the node out through
  its NAT as a provider's node reaches a forge;
- the operator's merge is a commit signed with ``gpg.format=ssh`` (real ``ssh-keygen -Y
  sign``) by a key of the allowed signers file, pushed into the served bare repository on
  the host's disk;
- the provider's steps run at the node's console (lab/node.py ``console``: nsenter from
  the host, no network path): install git, trust the lab CA system-wide, make the agent's
  virtualenv with the node's own Python (its files laid out from the controller's
  environment, lab/agentpkg.py: the node has no index for them), ``swarm node bootstrap``
  with the allowed signers handed over out of band;
- lab-gpu-2 keeps its WireGuard key (a node bootstrapped again keeps its identity; the lab
  converged it by push before): its mesh is taken down first (wg-quick stopped, its
  configuration removed), so only the pull apply can bring it back, and the key bootstrap
  prints is the one recorded in the fleet. Its Ray token is removed too: the fleet copy keeps
  the lab's Ray cluster, and lab-gpu-2, a pull worker and a direct WireGuard peer of the head,
  must read the token from the head's token port over the mesh (docs/node-layer.md, "The Ray
  token for pull workers"); the head serves it once converged (by push, from the controller)
  with the commit that makes lab-gpu-2 a pull node, and serves nobody else;
- the rollout test makes lab-gpu-1 (lab-a) a pull node too, the canary: the pull nodes in
  name order are [lab-gpu-1], [lab-gpu-2] with the lab's Rollout (canary 1, then 100 %).
  node_exporter is the provider's to install: the canary's provider installs Debian's
  prometheus-node-exporter, its textfile collector on the agent's directory, listening on
  ``http://<mesh address>:9100/metrics``, where lab-gpu-2's agent reads it over the mesh.

Needs the lab converged; leaves it running (lab-gpu-1 and lab-gpu-2 converged from the
fleet copy, their agents' timers stopped, lab-gpu-1's scratch device emptied, the
controller's interface set from the fleet copy: the same nodes and keys): the next module's
converge makes them push nodes again, lab-gpu-2 reached over the mesh. About 75 s of its own
(the lab machine, 2 cores), most of it the three applies.
"""

from __future__ import annotations

import json
import re
import shlex
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import yaml

from swarm_infra.agent.report import NodeReport, parse_node_report
from swarm_infra.engines.controller import own_public_key
from swarm_infra.fleet.sources import fleet_paths
from swarm_infra.lab import manager, node
from swarm_infra.lab.plan import LabNode
from swarm_infra.lab.state import LabState
from swarm_infra.resolve import load_fleet
from swarm_infra.resolve.ray import client_env_prefix
from tests.labkit import FILES, LAB_STATE, UNITS, on_node, swarm
from tests.pullkit import (
    METRICS_UNIT,
    STATUS,
    TREES,
    Fleet,
    console,
    make_fleet,
    mesh_address,
    provide,
    report_info,
    run_agent,
    serve_report,
)

pytestmark = [pytest.mark.root, pytest.mark.lab]
# Right after the relay test, which leaves the lab converged (no converge first). It leaves two
# nodes converged from the fleet copy (pull nodes, their agents' files, lab-gpu-1's scratch
# emptied, the head serving the token): the hostile converge's copy makes them push nodes again.
LAB_ORDER = 39
LAB_NEEDS = "converged"
LAB_LEAVES = "running"

NODE = "lab-gpu-2"
SITE = "lab-b"


@dataclass
class Lab:
    pid: int  # lab-gpu-2's systemd-nspawn
    lab_node: LabNode
    fleet: Fleet
    bootstrap_output: str


def ssh_port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=3):
            return True
    except OSError:
        return False


# What a node gets from the head's token port (its mesh address): "nothing: <why>", or the
# SHA-256 of what it read (never the bytes: a token is a secret), 3 s at most.
_READ_TOKEN_PORT = """
import hashlib, socket, sys
try:
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3) as c:
        data = c.recv(2048)
    print("sha256:" + hashlib.sha256(data).hexdigest() if data else "nothing: closed")
except OSError as exc:
    print(f"nothing: {type(exc).__name__}")
"""


def token_port_read(name: str, pid: int | None, host: str, port: int) -> str:
    """:data:`_READ_TOKEN_PORT` run on ``name`` (at its console when ``pid`` is given, else
    over SSH), with the node's own Python."""
    if pid is not None:
        done = node.console(pid, ["python3", "-c", _READ_TOKEN_PORT, host, str(port)])
        assert done.returncode == 0, done.stderr.decode()[-500:]
        return done.stdout.decode().strip()
    return on_node(name, f"python3 -c {shlex.quote(_READ_TOKEN_PORT)} {host} {port}").stdout.strip()


def token_digest_and_mode(name: str, pid: int | None = None) -> str:
    """``<sha256> <mode> <owner>`` of the node's Ray token file (the digest only: never the token)."""
    path = FILES["ray_auth_token"]
    command = f"sha256sum {path} | cut -d' ' -f1; stat -c '%a %U' {path}"
    out = console(pid, command) if pid is not None else on_node(name, command).stdout
    return " ".join(out.split())


def why_failed(pid: int) -> str:
    """What a failed apply left to read: the tail of the agent's journal on the node (the
    engine's output; ``no_log`` tasks censored) and the head's token socket and service
    (their stdout is the connection: the token never reaches a journal)."""
    agent = node.console(
        pid, ["journalctl", "-u", UNITS["agent_service"], "--no-pager", "-o", "cat", "-n", "60"]
    )
    head = on_node(
        "lab-head-1",
        f"systemctl status --no-pager {UNITS['ray_token_socket']}; "
        "journalctl --no-pager -o cat -n 30 -u 'swarm-ray-token*'",
        check=False,
    )
    return f"agent:\n{agent.stdout.decode()[-3000:]}\nhead:\n{head.stdout[-1500:]}{head.stderr[-500:]}"


def converge_head(fleet: Fleet) -> None:
    """The operator's push converge of the head's Ray layer with the fleet copy's last commit
    (the head is not behind NAT): it serves the token to the pull workers that commit declares."""
    swarm("converge", "-i", str(fleet.inventory), "--layer", "ray", "--limit", "lab-head-1")


def ray_alive(head_mesh: str) -> set[str]:
    """The mesh addresses of the Ray cluster's ALIVE nodes, as the head's state API lists them."""
    ray = LAB_STATE["nodes"]["lab-head-1"]["ray"]
    dashboard = f"http://{head_mesh}:{ray['dashboard']['port']}"
    out = on_node(
        "lab-head-1",
        f"{client_env_prefix(FILES['ray_auth_token'])} {FILES['ray_venv']}/bin/ray list nodes "
        f"--format json --limit 1000 --address {dashboard}",
    ).stdout
    return {n["node_ip"] for n in json.loads(out) if n["state"] == "ALIVE"}


@pytest.fixture(scope="module")
def pulled(lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    state = LabState.load()
    d = state.nodes[NODE]
    lab_node, pid = LabNode.from_dict(d), d["pid"]
    host = str(lab_node.address.ip)
    started = time.monotonic()
    tmp = tmp_path_factory.mktemp("pull")
    # The lab's controller (swarm lab up made its key): the fleet copy records its public key,
    # as an operator's reviewed change would.
    controller_key = own_public_key()
    assert controller_key, "swarm lab up makes the controller's key"
    url = manager.serve_git()
    fleet = None
    try:
        fleet = make_fleet(tmp, url + "fleet.git", controller_key, "lab", (NODE,))
        fleet.commit("the lab fleet, pulled by lab-gpu-2 once it is declared", fleet.operator)
        # The provider, at the console: the mesh down (only the pull apply may bring it
        # back) and the Ray token gone (only the read over the mesh may bring it back),
        # then the agent and bootstrap.
        console(pid, f"systemctl stop {UNITS['wireguard']} && rm -f {FILES['wireguard_conf']} "
                     f"{FILES['ray_auth_token']}")  # fmt: skip
        out = provide(pid, fleet, NODE, SITE, host, nat=True)
        print(f"\ntest_pull: Git server, fleet repository and {NODE} bootstrapped in "
              f"{time.monotonic() - started:.1f} s")  # fmt: skip
        yield Lab(pid, lab_node, fleet, out)
    finally:
        node.console(pid, ["systemctl", "disable", "--now", UNITS["agent_timer"]])
        manager.stop_git()


def test_a_nat_node_is_bootstrapped_merged_signed_and_joins_the_mesh_by_pull(pulled: Lab) -> None:
    lab, host = pulled, str(pulled.lab_node.address.ip)
    # The lab's NAT is a real one: the controller cannot open a connection to the node.
    assert not ssh_port_open(host, lab.lab_node.ssh_port)

    # Bootstrap printed the node's real key and the document to propose.
    m = re.search(r"^WireGuard public key \((made now|kept)\): (\S+)$", lab.bootstrap_output, re.M)
    assert m, lab.bootstrap_output
    key = m[2]
    assert key == console(lab.pid, f"wg pubkey < {FILES['wireguard_key']}").strip()
    proposed = yaml.safe_load(lab.bootstrap_output[lab.bootstrap_output.index("---") :])
    assert proposed["metadata"]["name"] == NODE
    assert {k: proposed["spec"][k] for k in ("site", "address", "convergence", "mesh")} == {
        "site": SITE,
        "address": host,
        "convergence": "pull",
        "mesh": {"public_key": key, "nat": True},
    }

    # Until the change is merged the node only pulls: the commit does not declare it.
    first = lab.fleet.git("rev-parse", "HEAD").strip()
    rc, status, _ = run_agent(lab.pid)
    assert (rc, status["result"], status["commit"], status["applied_commit"]) == (0, "waiting", first, None)

    # The operator merges the proposed change (the fleet's own hardware kept), signed.
    nodes = lab.fleet.inventory / "nodes.yaml"
    docs = list(yaml.safe_load_all(nodes.read_text()))
    mine = next(d for d in docs if d["metadata"]["name"] == NODE)
    mine["spec"].update(convergence=proposed["spec"]["convergence"], mesh=proposed["spec"]["mesh"])
    nodes.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    check = swarm("validate", str(lab.fleet.inventory), str(lab.fleet.work / "policies/lab"),
                  str(lab.fleet.work / "policies/shared"), check=False)  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
    merged = lab.fleet.commit(f"add {NODE} (pull), its key from swarm node bootstrap", lab.fleet.operator)

    head_mesh, own_mesh = (
        mesh_address(lab.fleet.inventory, "lab-head-1"),
        mesh_address(lab.fleet.inventory, NODE),
    )
    assert (
        on_node("lab-head-1", f"ping -c 1 -W 2 {own_mesh}", check=False).returncode != 0
    )  # its mesh is down
    assert console(lab.pid, f"test -e {FILES['ray_auth_token']} && echo held || echo none").strip() == "none"
    # The operator converges the head with the merged commit: it now serves lab-gpu-2 the token.
    converge_head(lab.fleet)
    started = time.monotonic()
    rc, status, textfile = run_agent(lab.pid)
    took = time.monotonic() - started
    assert (status["result"], status["commit"], status["applied_commit"], status["failed"]) == (
        "applied",
        merged,
        merged,
        0,
    ), f"{status['reason']}\n{why_failed(lab.pid)}"
    assert rc == 0 and status["changed"] > 0  # wg0's configuration, the agent's own files
    assert report_info(textfile) == {"commit": merged, "result": "applied", "applied_commit": merged}
    assert 0 < status["duration_s"] <= took + 1
    # The fleet's signers replaced bootstrap's, and the timer is the fleet's.
    assert (
        console(lab.pid, f"cat {FILES['agent_allowed_signers']}")
        == (lab.fleet.work / "policies/lab/allowed_signers").read_text()
    )
    assert "OnUnitActiveSec=86400" in console(lab.pid, f"cat {FILES['agent_timer']}")

    # It joined the mesh: it reaches the head, and the head (a mesh member) reaches it
    # once its keepalive has opened the NAT's mapping, as behind a provider's NAT.
    console(lab.pid, f"ping -c 3 -i 0.3 -W 2 {head_mesh} >/dev/null")
    assert on_node("lab-head-1", f"ping -c 3 -i 0.3 -W 2 {own_mesh}", check=False).returncode == 0
    assert key in on_node("lab-head-1", "wg show wg0 peers").stdout.split()

    # Its Ray layer read the cluster's token from the head over the mesh: the head's token,
    # root's, 0600 (compared by digest), and its Ray worker joined the cluster on its mesh address.
    head_token = token_digest_and_mode("lab-head-1")
    assert head_token.endswith(" 600 root"), head_token
    assert token_digest_and_mode(NODE, lab.pid) == head_token
    assert console(lab.pid, f"systemctl is-active {UNITS['ray_worker']}").strip() == "active"
    # The unit is started once its raylet answers, and the raylet registers as it starts:
    # polled on the head's state API for 30 s at most.
    deadline = time.monotonic() + 30
    while own_mesh not in (alive := ray_alive(head_mesh)) and time.monotonic() < deadline:
        time.sleep(1)
    assert own_mesh in alive, alive

    # The head serves its token port to lab-gpu-2 alone: the same token over the mesh, and
    # nothing to lab-gpu-1 (a push member, a direct mesh peer) nor to the head itself.
    port = int(load_fleet(fleet_paths(lab.fleet.inventory)).fleet.ray.ports["token"])
    digest = head_token.split()[0]
    assert token_port_read(NODE, lab.pid, head_mesh, port) == f"sha256:{digest}"
    for name in ("lab-gpu-1", "lab-head-1"):
        got = token_port_read(name, None, head_mesh, port)
        assert got.startswith("nothing: "), f"{name} read the token port: {got[:7]}"


def test_the_controller_reaches_the_nat_node_over_the_mesh(pulled: Lab) -> None:
    """The controller, a mesh member the fleet declares (Mesh spec.controller), sets its own
    interface (the lab's, up since ``swarm lab up``) from the fleet copy; lab-gpu-2 (which
    applied a commit naming it as a peer) opens the tunnel from behind its NAT; the
    controller then reaches it over SSH at its mesh address, with the NAT closed to it
    (sshd's own SSH_CONNECTION names both mesh addresses)."""
    lab, host = pulled, str(pulled.lab_node.address.ip)
    inventory = str(lab.fleet.inventory)
    analysis = load_fleet(fleet_paths(lab.fleet.inventory))
    ctl, own = str(analysis.controller_address), str(analysis.addresses[NODE])
    assert not ssh_port_open(host, lab.lab_node.ssh_port)  # still no way in through the NAT
    up = swarm("mesh", "controller-up", "-i", inventory)
    assert f"{len(analysis.fleet.nodes)} of {len(analysis.fleet.nodes)} peer(s)" in up.stdout, up.stdout
    # The node's keepalive opens the NAT's mapping; its first packet to the controller, a
    # handshake, is what lets the controller's answer in. A handshake the node tried before
    # the controller was up is retried after WireGuard's REKEY_TIMEOUT (5 s): ping until the
    # first answer, for at most 20 s.
    console(lab.pid, f"ping -n -c 1 -w 20 {ctl} >/dev/null")
    shown = swarm("lab", "ssh", "-i", inventory, NODE, "--", "echo $SSH_CONNECTION").stdout.split()
    # sshd's record: client address, client port, server address, server port.
    assert (shown[0], shown[2], shown[3]) == (ctl, own, "22"), shown


def test_unsigned_and_unknown_signer_commits_are_refused_and_the_last_good_is_kept(pulled: Lab) -> None:
    lab = pulled
    before = json.loads(console(lab.pid, f"cat {STATUS}"))
    good = before["applied_commit"]
    assert good and before["result"] == "applied", before  # the test above merged it
    cases = (
        ("unsigned", None, "has no signature"),
        ("signed by a key no allowed signer has", lab.fleet.stranger, "not in the allowed signers file"),
    )
    for what, key, why in cases:
        with open(lab.fleet.work / "policies/lab/review.yaml", "a") as fh:
            fh.write(f"# a change {what}\n")
        bad = lab.fleet.commit(f"a change {what}", key)
        rc, status, textfile = run_agent(lab.pid)
        assert rc != 0, f"{what}: the unit reports the refusal as a failure"
        assert (status["result"], status["commit"], status["applied_commit"]) == ("refused", bad, good), what
        assert why in status["reason"], status["reason"]
        assert status["changed"] is None and status["failed"] is None  # nothing applied
        assert report_info(textfile) == {"commit": bad, "result": "refused", "applied_commit": good}
        # The refused commit's files never reached the node's disk as a work tree.
        assert node.console(lab.pid, ["test", "-e", f"{TREES}/{bad}"]).returncode != 0


CANARY, CANARY_SITE = "lab-gpu-1", "lab-a"
SCRATCH_DEVICE = "/dev/nvme0n1"


@pytest.fixture(scope="module")
def canary(pulled: Lab) -> Iterator[int]:
    """lab-gpu-1 bootstrapped for pull (not yet declared so), its agent's report served on
    its mesh address :9100/metrics; returns its systemd-nspawn pid."""
    d = LabState.load().nodes[CANARY]
    pid, address = d["pid"], d["address"].split("/")[0]
    mesh = mesh_address(pulled.fleet.inventory, CANARY)
    try:
        started = time.monotonic()
        provide(pid, pulled.fleet, CANARY, CANARY_SITE, address, nat=False)
        serve_report(pid, mesh)
        # Wait for the run bootstrap's timer started (or make one): none may be under way
        # when the test publishes the commit that declares the canary.
        node.console(pid, ["systemctl", "start", UNITS["agent_service"]], timeout=900)
        print(f"\ntest_pull: {CANARY} bootstrapped in {time.monotonic() - started:.1f} s")
        yield pid
    finally:
        node.console(pid, ["systemctl", "disable", "--now", UNITS["agent_timer"]])
        node.console(pid, ["systemctl", "stop", METRICS_UNIT])
        # The next converge makes the scratch filesystem again on the emptied device.
        node.console(pid, ["sh", "-c", f"umount /scratch; wipefs -qa {SCRATCH_DEVICE}"])


def peer_report(lab: Lab, url: str) -> NodeReport:
    """What lab-gpu-2 reads at ``url`` over the mesh (node_exporter's page, fetched with the
    node's own Python), parsed as the agents' gate and `swarm status` parse it. node_exporter
    read the agent's textfile without an error (its own parser: a malformed file is left out
    and counted in node_textfile_scrape_error)."""
    code = "import sys, urllib.request as u; print(u.urlopen(sys.argv[1], timeout=5).read().decode())"
    done = node.console(lab.pid, ["python3", "-c", code, url])
    assert done.returncode == 0, done.stderr.decode()[-1000:]
    page = done.stdout.decode()
    assert re.search(r"^node_textfile_scrape_error 0$", page, re.M), page[-3000:]
    return parse_node_report(page)


def test_a_later_batch_waits_for_the_canary_and_a_failed_canary_halts_it(pulled: Lab, canary: int) -> None:
    lab = pulled
    good = json.loads(console(lab.pid, f"cat {STATUS}"))["applied_commit"]
    url = f"http://{mesh_address(lab.fleet.inventory, CANARY)}:9100/metrics"
    nodes = lab.fleet.inventory / "nodes.yaml"
    docs = list(yaml.safe_load_all(nodes.read_text()))
    next(d for d in docs if d["metadata"]["name"] == CANARY)["spec"]["convergence"] = "pull"
    nodes.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    both = lab.fleet.commit(f"{CANARY} converges by pull too: the canary", lab.fleet.operator)
    # The head serves the canary the token too once converged with that commit (its Ray layer
    # reads it over the mesh as a pull worker from now on).
    converge_head(lab.fleet)

    # lab-gpu-2 (batch 2) reads the canary's report over the mesh: not this commit, so it waits.
    served = peer_report(lab, url)
    assert (served.result, served.applied_commit) != ("applied", both), served
    rc, status, _ = run_agent(lab.pid)
    assert (rc, status["result"], status["commit"], status["applied_commit"]) == (0, "waiting", both, good)
    assert CANARY in status["reason"], status["reason"]

    # The canary applies it; then lab-gpu-2 does.
    _, first, _ = run_agent(canary)
    assert (first["result"], first["applied_commit"], first["failed"]) == ("applied", both, 0), first[
        "reason"
    ]
    served = peer_report(lab, url)
    assert (served.result, served.applied_commit) == ("applied", both), served
    _, status, _ = run_agent(lab.pid)
    assert (status["result"], status["applied_commit"]) == ("applied", both), status["reason"]

    # A commit the canary fails to apply (its scratch device now holds a filesystem swarm
    # did not make: the storage layer refuses it) stops the rollout before lab-gpu-2.
    console(
        canary, f"umount /scratch && wipefs -qa {SCRATCH_DEVICE} && mkfs.ext4 -q -L data {SCRATCH_DEVICE}"
    )
    with open(lab.fleet.work / "policies/lab/review.yaml", "a") as fh:
        fh.write("# a change the canary fails\n")
    failing = lab.fleet.commit("a change the canary fails to apply", lab.fleet.operator)
    rc, first, _ = run_agent(canary)
    assert (rc, first["result"], first["commit"], first["applied_commit"]) == (1, "failed", failing, both)
    assert first["failed"] > 0
    rc, status, textfile = run_agent(lab.pid)
    assert (rc, status["result"], status["commit"], status["applied_commit"]) == (1, "halted", failing, both)
    assert f"batch 1 failed commit {failing[:12]} ({CANARY})" in status["reason"], status["reason"]
    assert report_info(textfile) == {"commit": failing, "result": "halted", "applied_commit": both}
