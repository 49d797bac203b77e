"""A lab node behind NAT joins the fleet as a provider's node does (issue #27): by pull first,
then the controller reaches it over the mesh.

The lab's NAT is a real one (:func:`.network.ensure_site_nat`): nothing outside a site opens
a connection to a node behind its NAT, the controller included. Such a node can only be
converged first by its own agent, which fetches the fleet out through the NAT as a provider's
node reaches a forge; once its mesh is up with the controller as a peer (its keepalive opens
the NAT's mapping), push mode reaches it at its mesh address (Mesh ``spec.controller``
``ssh_over_mesh``). ``swarm lab up`` plays both parties for the nodes the controller reaches
over the mesh and that have not joined since they were made:

- the provider, at the node's console (:func:`.node.console`: nsenter from the host, no
  network path: the provider's own keyboard), :func:`provide`: git, the lab CA trusted,
  the agent's package (:mod:`.agentpkg`), the operator's allowed signers handed over out of
  band, ``swarm node bootstrap`` (the node's WireGuard key made on the node; the public key
  printed);
- the operator, :func:`publish`: the change bootstrap proposes merged into the lab's fleet
  repository (:data:`REPOSITORY`, served by the lab's Git server), a commit signed by the lab
  operator's key (:func:`operator_key`, made once per lab; the repository's allowed
  signers): the fleet ``lab up`` was given, the joining nodes declared ``convergence:
  pull`` with the keys they printed, the controller's key and every node key the controller
  knows recorded, the Ray cluster as declared;
- the node's agent then fetches, verifies and applies that commit (:func:`run_agent`): every
  layer, its mesh up with the controller as a peer, except its Ray layer's last steps: a pull
  worker reads the cluster's token from the head over the mesh, and on a lab just made the
  head is not converged, so that layer fails until push completes it over the mesh (the
  documented state of a pull worker without its token, docs/node-layer.md). The run then
  reports ``failed``; what the join needs is the mesh, which ``lab up`` checks by pinging
  the node's mesh address. (Left out of the commit, the Ray cluster would make the node
  remove Ray, the lab's prebuilt virtualenv with it, and the next converge reinstall it
  with pip: 85 s on the lab machine.)

The fleet ``lab up`` was given declares the node ``convergence: push``: the operator's next
``swarm converge`` reaches it over the mesh, stops its agent and removes the agent's files
(the host layer), and from then on it is a push node. The repository is the lab's stand-in
for the operator's: made anew for each join, its commits signed like any merge.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from ..resolve.keys import wireguard_key_problem
from ..resolve.layout import AGENT_LOCAL, node_layout
from . import agentpkg, node
from .state import cache_dir, state_dir
from .system import LabError

REPOSITORY = "lab-fleet.git"  # under the Git server's root (manager.git_root)
SIGNER = "operator@lab.swarm.example"
# What the fleet repository holds besides the fleet: what an agent needs from a commit
# (the library, the playbooks and roles, the schemas), as tracked in the checkout.
CODE_PATHS = ("ansible.cfg", "src", "playbooks", "roles", "plugins", "schemas")
VENV = AGENT_LOCAL["agent_venv"]["path"]
STATUS = AGENT_LOCAL["agent_status"]["path"]
# The agent's units: the same on every node, whatever its mesh interface.
AGENT_SERVICE, AGENT_TIMER = (node_layout()["units"][u] for u in ("agent_service", "agent_timer"))
_KEY_LINE = re.compile(r"^WireGuard public key \((?:made now|kept)\): (\S+)$", re.M)
_GIT_ENV = {
    "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_AUTHOR_NAME": "Lab operator",
    "GIT_AUTHOR_EMAIL": SIGNER,
    "GIT_COMMITTER_NAME": "Lab operator",
    "GIT_COMMITTER_EMAIL": SIGNER,
}


def project_root() -> Path:
    """The checkout this library runs from (``src/swarm_infra`` inside it): the code an agent
    gets from the fleet repository. Raises LabError when it is not a Git checkout with the
    playbooks (an installed package: the lab runs from a checkout)."""
    root = Path(__file__).resolve().parents[3]
    if not (root / "playbooks").is_dir() or not (root / ".git").exists():
        raise LabError(f"{root} is not the project's Git checkout: the lab runs from one")
    return root


def _run(argv: list[str], cwd: Path | None = None, env: Mapping[str, str] | None = None) -> str:
    done = subprocess.run(argv, cwd=cwd, env=dict(env) if env else None, capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    if done.returncode != 0:
        raise LabError(f"{' '.join(argv[:3])}: exit {done.returncode}: {done.stderr.strip()[-500:]}")
    return done.stdout


def _console(pid: int, command: str, input: bytes | None = None, timeout: float = 600) -> str:
    done = node.console(pid, ["sh", "-c", command], input=input, timeout=timeout)
    if done.returncode != 0:
        raise LabError(f"at the node's console, {command[:80]!r}: exit {done.returncode}: "
                       f"{done.stderr.decode(errors='replace').strip()[-800:]}")  # fmt: skip
    return done.stdout.decode(errors="replace")


def operator_key() -> Path:
    """The lab operator's SSH signing key (ed25519, no passphrase, 0600), made once per lab in
    its state directory (``down`` removes it); its public half is ``<path>.pub``."""
    path = state_dir() / "operator" / "signing-key"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.parent.chmod(0o700)
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", SIGNER, "-f", str(path)])
    return path


def allowed_signers(key: Path) -> str:
    """The allowed signers file (ssh-keygen(1) ALLOWED SIGNERS) naming ``key``'s public half
    for Git's signatures."""
    public = " ".join(Path(f"{key}.pub").read_text().split()[:2])
    return f'{SIGNER} namespaces="git" {public}\n'


def copy_code(root: Path, work: Path, extra: tuple[str, ...] = ()) -> None:
    """The files Git tracks in ``root`` under :data:`CODE_PATHS` (and ``extra``), copied into
    ``work`` at the same relative paths."""
    listed = _run(["git", "-C", str(root), "ls-files", "-z", "--", *CODE_PATHS, *extra]).split("\0")
    for rel in filter(None, listed):
        if (root / rel).is_file():
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / rel, work / rel)


def provide(pid: int, name: str, site: str, address: str, nat: bool, fleet: str, remote: str,
            signers: str, apt_proxy: str | None = None) -> str:  # fmt: skip
    """The provider's steps at the console of the node whose systemd-nspawn is ``pid``: git
    (through the site's package cache ``apt_proxy``, ``http://HOST:PORT``, when it has one),
    the lab CA trusted system-wide, the agent's package in a virtualenv of the node's own
    Python, the allowed signers ``signers`` handed over, ``swarm node bootstrap`` for fleet
    ``fleet`` at ``remote`` (ref main); returns what bootstrap printed. Raises LabError."""
    proxy = f"-o Acquire::http::Proxy={shlex.quote(apt_proxy)} " if apt_proxy else ""
    _console(pid, f"DEBIAN_FRONTEND=noninteractive apt-get {proxy}install -y -q --no-install-recommends "
                  "git >/dev/null", timeout=300)  # fmt: skip
    ca = (cache_dir() / "index-tls" / "ca.pem").read_bytes()
    _console(pid, "cat > /usr/local/share/ca-certificates/swarm-lab-ca.crt && update-ca-certificates "
                  ">/dev/null", ca)  # fmt: skip
    for argv in agentpkg.install_commands(VENV):
        done = node.console(pid, argv)
        if done.returncode != 0:
            raise LabError(f"at the node's console, {' '.join(argv)}: {done.stderr.decode()[-500:]}")
    _console(pid, f"tar -x -C {VENV} -f -", agentpkg.stage(project_root(), VENV))
    _console(pid, "umask 077 && cat > /root/allowed_signers", signers.encode())
    return _console(
        pid,
        f"{VENV}/bin/swarm node bootstrap --node {name} --site {site} --address {address}"
        f"{' --nat' if nat else ''} --fleet {fleet} --remote {remote} --ref main "
        "--allowed-signers /root/allowed_signers",
    )


def bootstrap_key(output: str) -> str:
    """The WireGuard public key ``swarm node bootstrap`` printed (what a node reports is
    untrusted: checked to be one key before it reaches the fleet repository or the
    controller's record). Raises LabError."""
    m = _KEY_LINE.search(output)
    if m is None:
        raise LabError(f"swarm node bootstrap printed no WireGuard public key:\n{output[-1000:]}")
    problem = wireguard_key_problem(m[1])
    if problem:
        raise LabError(f"swarm node bootstrap printed a public key that is not one: {problem}")
    return m[1]


def fleet_layout(paths: list[Path]) -> tuple[str, dict[Path, str]]:
    """(fleet name, {source directory: its place in the repository}) for fleet ``paths`` laid
    out by convention: ``inventory/NAME`` (its name is the fleet's), ``policies/NAME`` and
    ``policies/shared``, as ``swarm node bootstrap --fleet NAME`` finds them in a commit.
    Raises LabError for another layout (a ``*.swarm.yml`` config: its paths are its own)."""
    dirs = [p for p in paths if p.is_dir()]
    inventories = [p for p in dirs if p.resolve().parent.name == "inventory"]
    if len(dirs) != len(paths) or len(inventories) != 1:
        raise LabError(
            "a node joins by pull from a fleet laid out as inventory/NAME, policies/NAME and "
            f"policies/shared, not {', '.join(map(str, paths))}"
        )
    name = inventories[0].resolve().name
    places = {}
    for p in dirs:
        r = p.resolve()
        if r.parent.name == "inventory":
            places[p] = f"inventory/{name}"
        elif r.parent.name == "policies" and r.name in (name, "shared"):
            places[p] = f"policies/{r.name}"
        else:
            raise LabError(f"{p}: not inventory/{name}, policies/{name} nor policies/shared")
    return name, places


def publish(
    paths: list[Path],
    bare: Path,
    remote: str,
    joining: Mapping[str, str],
    known: Mapping[str, str],
    controller_key: str,
) -> str:
    """The operator's merge for the nodes ``joining`` ({name: public key bootstrap printed}):
    a commit of the fleet at ``paths`` (:func:`fleet_layout`) and the checkout's code into a
    new work tree, with those
    nodes declared ``convergence: pull`` and their keys, every other key the controller
    knows (``known``) and the controller's (``controller_key``) recorded, the Rollout's
    ``spec.pull`` naming ``remote`` (ref main, once a day), the lab operator's key the allowed
    signer; signed with the operator's key
    (``gpg.format=ssh``: ``ssh-keygen -Y sign``) and pushed as ``main`` of the new bare
    repository ``bare``. Returns the commit id. Raises LabError."""
    name, places = fleet_layout(paths)
    work = state_dir() / "operator" / "fleet"
    for d in (work, bare):
        shutil.rmtree(d, ignore_errors=True)
    copy_code(project_root(), work)
    for source, place in places.items():
        shutil.copytree(source, work / place)
    out_policies = work / "policies" / name
    key = operator_key()
    (out_policies / "allowed_signers").write_text(allowed_signers(key))
    rollout = out_policies / "rollout.yaml"
    with open(rollout, "a") as fh:
        fh.write(
            f"  pull: {{remote: {json.dumps(remote)}, ref: main, fleet: {name}, "
            "allowed_signers_file: allowed_signers, interval_s: 86400, randomized_delay_s: 0}\n"
        )
    mesh = out_policies / "mesh.yaml"
    docs = [d for d in yaml.safe_load_all(mesh.read_text()) if d]
    docs[0]["spec"]["controller"]["public_key"] = controller_key
    mesh.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    for path in sorted((work / "inventory" / name).glob("*.yaml")):
        nodes = list(yaml.safe_load_all(path.read_text()))
        if not any(d and d.get("kind") == "Node" for d in nodes):
            continue
        for d in nodes:
            if not d or d.get("kind") != "Node":
                continue
            n = d["metadata"]["name"]
            if n in joining:
                d["spec"]["convergence"] = "pull"
            pub = joining.get(n) or known.get(n)
            if pub:
                d["spec"].setdefault("mesh", {})["public_key"] = pub
        path.write_text(yaml.safe_dump_all([d for d in nodes if d], sort_keys=False))
    env = {**_GIT_ENV, "HOME": str(work.parent)}
    _run(["git", "init", "-q", "-b", "main"], work, env)
    _run(["git", "add", "-A"], work, env)
    _run(["git", "-c", "gpg.format=ssh", "-c", f"user.signingkey={key}", "commit", "-S", "-q", "-m",
          f"add {', '.join(sorted(joining))} (pull), keys from swarm node bootstrap"], work, env)  # fmt: skip
    _run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], None, env)
    _run(["git", "push", "-q", str(bare), "HEAD:refs/heads/main"], work, env)
    return _run(["git", "rev-parse", "HEAD"], work, env).strip()


def run_agent(pid: int, timeout: float = 900) -> tuple[int, dict[str, Any]]:
    """One agent run on the node of ``pid`` through its unit, after everything published: the
    timer stopped first (bootstrap's may fire at any time), a run it started waited for
    (``systemctl start`` of an active oneshot joins it), then ``systemctl start`` runs one and
    waits for it. (systemctl's exit code, the agent's status file as JSON)."""
    service, timer = AGENT_SERVICE, AGENT_TIMER
    node.console(pid, ["systemctl", "stop", timer])
    if node.console(pid, ["systemctl", "is-active", service]).stdout.decode().strip() == "activating":
        node.console(pid, ["systemctl", "start", service], timeout=timeout)
    done = node.console(pid, ["systemctl", "start", service], timeout=timeout)
    return done.returncode, json.loads(_console(pid, f"cat {STATUS}"))


def acknowledge(pid: int) -> None:
    """Clear the agent unit's failed state on the node of ``pid`` (``systemctl reset-failed``):
    a join's run fails for a known reason (its Ray layer waits for the head's token), said in
    ``lab up``'s output and kept in the agent's status file and journal; left failed, the
    node's systemd would say ``degraded`` until the unit is gone."""
    node.console(pid, ["systemctl", "reset-failed", AGENT_SERVICE])


def wait_reachable(address: str, timeout_s: float = 30) -> bool:
    """True once ``address`` answers a ping from this host (the controller) within
    ``timeout_s``: a node behind NAT answers over the mesh once its keepalive has opened its
    NAT's mapping (ping's own deadline, no polling here)."""
    started = time.monotonic()
    done = subprocess.run(["ping", "-n", "-q", "-c", "1", "-w", str(int(timeout_s)), address],
                          capture_output=True, check=False)  # fmt: skip
    return done.returncode == 0 and time.monotonic() - started <= timeout_s + 1


def tunnel_report(pid: int, interface: str) -> str:
    """What both ends of a node's tunnel to the controller say (``wg show``: public keys,
    endpoints, handshakes and counters; never a private key), for an error message: the
    controller's ``interface`` here, the node's at its console (``pid``: its systemd-nspawn)."""
    here = subprocess.run(["wg", "show", interface], capture_output=True, text=True, check=False)
    there = node.console(pid, ["sh", "-c", "wg show; systemctl is-active 'wg-quick@*'"])
    return (
        f"the controller's {interface}:\n{here.stdout or here.stderr}\n"
        f"the node:\n{there.stdout.decode(errors='replace')}{there.stderr.decode(errors='replace')}"
    )
