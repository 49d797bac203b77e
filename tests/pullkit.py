"""What the pull-mode lab tests and benchmarks share (issue #27): the fleet repository
(a work tree the operator commits in, signed with an SSH key, and the bare repository the
lab's Git server serves), a provider's bootstrap at a node's console, one agent run, the
agent's report, and Debian's node_exporter serving a node's report over the mesh.

Used by tests/lab/test_pull.py (the lab fleet, ``lab``) and benchmarks/bench_pull.py (lab
fleets of N nodes, ``lab-N``). Root and a lab up: every function acts on the lab.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

from swarm_infra.fleet.sources import fleet_paths
from swarm_infra.lab import join, manager, node
from swarm_infra.lab.mirror import SERVICE_ADDRESS
from swarm_infra.resolve import desired_state, load_fleet
from swarm_infra.resolve.layout import AGENT_LOCAL
from tests.labkit import FILES, ROOT, on_node

VENV = AGENT_LOCAL["agent_venv"]["path"]
STATUS = AGENT_LOCAL["agent_status"]["path"]
TEXTFILE = AGENT_LOCAL["agent_textfile"]["path"]
TREES = f"{AGENT_LOCAL['agent_state_dir']['path']}/trees"
SIGNER = "operator@swarm.example"


def sh(*argv: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, f"{argv}: {done.stderr}"
    return done.stdout


def console(pid: int, command: str, input: bytes | None = None, timeout: float = 600) -> str:
    """``command`` (sh) at the node's console; its stdout. Fails the test when it fails."""
    done = node.console(pid, ["sh", "-c", command], input=input, timeout=timeout)
    assert done.returncode == 0, f"{command!r} exited {done.returncode}: {done.stderr.decode()[-2000:]}"
    return done.stdout.decode()


@dataclass
class Fleet:
    """The fleet repository: a work tree the operator commits in, the bare repository the
    lab's Git server serves, the operator's and a stranger's signing keys; ``name``: the
    fleet (``inventory/<name>``, ``policies/<name>``)."""

    work: Path
    bare: Path
    operator: Path
    stranger: Path
    remote: str
    name: str = "lab"

    def git(self, *args: str) -> str:
        env = {
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(self.work.parent),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "GIT_AUTHOR_NAME": "Operator",
            "GIT_AUTHOR_EMAIL": SIGNER,
            "GIT_COMMITTER_NAME": "Operator",
            "GIT_COMMITTER_EMAIL": SIGNER,
        }
        return sh("git", *args, cwd=self.work, env=env)

    def commit(self, message: str, key: Path | None) -> str:
        """Commit everything (signed by ``key`` through ssh-keygen -Y sign, or unsigned)
        and publish it on the served repository's main; returns the commit id."""
        sign = ["-c", "gpg.format=ssh", "-c", f"user.signingkey={key}", "commit", "-S"] if key else ["commit"]
        self.git("add", "-A")
        self.git(*sign, "-q", "--allow-empty", "-m", message)
        self.git("push", "-q", str(self.bare), "HEAD:refs/heads/main")
        return self.git("rev-parse", "HEAD").strip()

    @property
    def inventory(self) -> Path:
        return self.work / "inventory" / self.name

    @property
    def policies(self) -> Path:
        return self.work / "policies" / self.name


def node_pubkey(name: str) -> str:
    """Node ``name``'s WireGuard public key, read over SSH (the controller must reach it)."""
    return on_node(name, f"wg pubkey < {FILES['wireguard_key']}").stdout.strip()


def operator_pub(fleet: Fleet) -> str:
    return " ".join(Path(f"{fleet.operator}.pub").read_text().split()[:2])


def make_fleet(
    tmp: Path,
    remote: str,
    controller_key: str,
    name: str = "lab",
    unrecorded: tuple[str, ...] = (),
    interval_s: int = 86400,
    randomized_delay_s: int = 0,
    pubkey=node_pubkey,
) -> Fleet:
    """The fleet repository's first commit (not yet signed nor published): this checkout's
    code, fleet ``name`` (``inventory/<name>`` and ``policies/<name>`` from this checkout's
    disk: a generated ``lab-N`` fleet is not tracked) with spec.pull naming the lab's Git
    server (every ``interval_s``, plus up to ``randomized_delay_s``), the operator's key as
    the allowed signer, the keys of every node but ``unrecorded`` recorded (read by
    ``pubkey(node name)``), the controller a mesh member (``controller_key``, its endpoint
    the lab's service address, which every site reaches; SSH over the mesh to the NAT'd
    nodes); the fleet's Ray cluster as declared (a pull worker reads the cluster's token from
    the head over the mesh once the head, converged with that commit, serves it)."""
    work, bare = tmp / "fleet", manager.git_root() / "fleet.git"
    shutil.rmtree(bare, ignore_errors=True)
    sh("git", "init", "-q", "--bare", "-b", "main", str(bare))
    join.copy_code(ROOT, work, ("inventory/lab", "policies") if name == "lab" else ("policies/shared",))
    if name != "lab":
        for part in ("inventory", "policies"):
            shutil.copytree(ROOT / part / name, work / part / name)
    keys = {}
    for who in ("operator", "stranger"):
        keys[who] = tmp / "keys" / who
        keys[who].parent.mkdir(exist_ok=True)
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", who, "-f", str(keys[who]))
    fleet = Fleet(work, bare, keys["operator"], keys["stranger"], remote, name)
    fleet.git("init", "-q", "-b", "main")
    policies = fleet.policies
    (policies / "allowed_signers").write_text(f'{SIGNER} namespaces="git" {operator_pub(fleet)}\n')
    with open(policies / "rollout.yaml", "a") as fh:
        fh.write(
            f"  pull: {{remote: {json.dumps(remote)}, ref: main, fleet: {name}, "
            f"allowed_signers_file: allowed_signers, interval_s: {interval_s}, "
            f"randomized_delay_s: {randomized_delay_s}}}\n"
        )
    mesh = policies / "mesh.yaml"
    doc = yaml.safe_load(mesh.read_text())
    doc["spec"]["controller"] = {
        "public_key": controller_key,
        "endpoint": str(SERVICE_ADDRESS),
        "ssh_over_mesh": "nat",
    }
    mesh.write_text(yaml.safe_dump(doc, sort_keys=False))
    nodes = fleet.inventory / "nodes.yaml"
    docs = list(yaml.safe_load_all(nodes.read_text()))
    for doc in docs:
        if doc and doc["metadata"]["name"] not in unrecorded:
            doc["spec"].setdefault("mesh", {})["public_key"] = pubkey(doc["metadata"]["name"])
    nodes.write_text(yaml.safe_dump_all([d for d in docs if d], sort_keys=False))
    return fleet


def provide(pid: int, fleet: Fleet, name: str, site: str, address: str, nat: bool) -> str:
    """The provider's steps at node ``pid``'s console for ``fleet`` (lab/join.py
    :func:`~swarm_infra.lab.join.provide`, the operator's key the allowed signer); returns
    what bootstrap printed."""
    signers = f'{SIGNER} namespaces="git" {operator_pub(fleet)}\n'
    return join.provide(pid, name, site, address, nat, fleet.name, fleet.remote, signers)


def run_agent(pid: int) -> tuple[int, dict, str]:
    """One agent run on the node of ``pid`` (:func:`swarm_infra.lab.join.run_agent`):
    (systemctl's exit code, the status file, the textfile)."""
    rc, status = join.run_agent(pid)
    return rc, status, console(pid, f"cat {TEXTFILE}")


def report_info(textfile: str) -> dict[str, str]:
    """The ``swarm_agent_report_info`` sample's labels of an agent's textfile."""
    # Labels in name order, the value as a float: as prometheus_client writes them.
    info = r'^swarm_agent_report_info\{applied_commit="(\w*)",commit="(\w*)",result="([\w-]+)"\} 1\.0$'
    m = re.search(info, textfile, re.M)
    assert m, textfile
    return {"commit": m[2], "result": m[3], "applied_commit": m[1]}


def mesh_address(inventory: Path, name: str) -> str:
    return desired_state(load_fleet(fleet_paths(inventory)))["nodes"][name]["mesh"]["address"].split("/")[0]


# node_exporter is the provider's to install (docs/node-layer.md): Debian's own package,
# its textfile collector reading the agent's directory, listening on the node's mesh
# address, where peers' agents (rollout gating) and `swarm status` read the report. The
# real one, so that the agent's textfile passes node_exporter's own parser (it refuses a
# malformed file and says so in node_textfile_scrape_error) and the readers parse a real
# node_exporter page.
METRICS_UNIT = "prometheus-node-exporter.service"
NODE_EXPORTER_ARGS = (
    "--web.listen-address={mesh}:9100 --collector.disable-defaults --collector.textfile "
    f"--collector.textfile.directory={Path(TEXTFILE).parent}"
)

# Connects until the server has bound its socket (a started unit is running
# when its process is, not when it listens; nothing else to wait on), 20 s at most.
_LISTENING = """
import socket, sys, time
deadline = time.monotonic() + 20
while True:
    try:
        socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1).close()
        break
    except OSError:
        if time.monotonic() > deadline:
            sys.exit(f"nothing listens on {sys.argv[1]}:{sys.argv[2]}")
        time.sleep(0.1)
"""


def wait_listening(pid: int, address: str, port: int) -> None:
    done = node.console(pid, ["python3", "-c", _LISTENING, address, str(port)], timeout=60)
    unit = node.console(pid, ["systemctl", "status", "--no-pager", "-n", "20", METRICS_UNIT])
    assert done.returncode == 0, done.stderr.decode()[-500:] + unit.stdout.decode()[-2000:]


def serve_report(pid: int, mesh: str) -> None:
    """node_exporter on the node of ``pid``, as a provider sets it up: Debian's
    prometheus-node-exporter installed, its arguments in the package's
    /etc/default/prometheus-node-exporter (its unit's EnvironmentFile), restarted; returns
    once it listens on ``http://<mesh>:9100/metrics``."""
    console(
        pid,
        "DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "
        "prometheus-node-exporter >/dev/null",
        timeout=300,
    )
    args = NODE_EXPORTER_ARGS.format(mesh=mesh)
    console(pid, "cat > /etc/default/prometheus-node-exporter", f'ARGS="{args}"\n'.encode())
    console(pid, f"systemctl restart {METRICS_UNIT}")
    wait_listening(pid, mesh, 9100)
