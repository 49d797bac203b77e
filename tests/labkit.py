"""What tests of the real lab share: the CLI, SSH to nodes, Ansible, output parsers, the lab
fleet's desired state, and the check that nothing is left behind. The lab itself is one per
pytest session: the ``lab`` fixture in ``tests/conftest.py``."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from swarm_infra.engines.inventory import inventory_hosts, ssh_argv
from swarm_infra.fleet.sources import fleet_paths
from swarm_infra.lab.node import NSPAWN_RUN_DIR
from swarm_infra.lab.state import cache_dir, read_connections, ssh_command, state_dir
from swarm_infra.resolve import desired_state, load_fleet
from swarm_infra.resolve.ray import client_env_prefix

ROOT = Path(__file__).resolve().parents[1]
IS_ROOT = os.geteuid() == 0
# The lab fleet's desired state: tests take node paths, units and addresses from it.
LAB_STATE = desired_state(load_fleet(fleet_paths(ROOT / "inventory/lab")))
# The node whose Ray comes from pip at test_converge's fresh converge, not from the lab's
# prebuilt virtualenv (its LAB_UNSEEDED). test_lab shares that fresh lab: its `swarm lab up`
# calls pass the same --unseeded, or they would seed the node again (a replaced node); the
# joined node's agent is stopped before test_converge's check mode (its timer would fire in it).
UNSEEDED = "lab-gpu-1"
LAYOUT = LAB_STATE["nodes"]["lab-gpu-1"]["layout"]
FILES = {name: f["path"] for name, f in LAYOUT["files"].items()}
UNITS = LAYOUT["units"]

# The lab fleet's Ray cluster: each node's Ray state (None outside it), the head, its
# dashboard (the state API), Ray's virtualenv; every Ray client names the cluster's token
# (Ray's token authentication).
RAY = {name: node["ray"] for name, node in LAB_STATE["nodes"].items()}
HEAD = next(n for n, r in RAY.items() if r and r["role"] == "head")
DASHBOARD = f"http://{RAY[HEAD]['dashboard']['host']}:{RAY[HEAD]['dashboard']['port']}"
VENV = FILES["ray_venv"]
CLIENT = client_env_prefix(FILES["ray_auth_token"])


def swarm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run the real CLI (``python -m swarm_infra.cli``) from the repository root."""
    # The system PATH only, as when `make demo` runs .venv/bin/swarm: the CLI must find the
    # venv's Ansible tools itself.
    env = {**os.environ, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    proc = subprocess.run(
        [sys.executable, "-m", "swarm_infra.cli", *args], cwd=ROOT, capture_output=True, text=True, env=env
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"swarm {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


def node_ssh(node: str, command: str) -> list[str]:
    """``ssh`` argv running ``command`` on lab node ``node`` where the lab fleet says the
    controller reaches it: at its mesh address for a node behind the lab's real NAT (Mesh
    spec.controller ssh_over_mesh), as ``swarm lab ssh`` and the engines reach it; else at
    its underlay address. The connection file's key and host keys, checked strictly."""
    conns = read_connections()
    host = {h.name: h for h in inventory_hosts(LAB_STATE, conns)}[node]
    if host.state["ssh"]["via_mesh"]:
        return [*ssh_argv(host.connection, "")[:-1], command]
    return ssh_command(conns[node], [command])


def on_node(
    node: str, command: str, check: bool = True, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` on a lab node over real SSH (:func:`node_ssh`); ``timeout`` in seconds."""
    proc = subprocess.run(node_ssh(node, command), capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{node}: {command!r} exited {proc.returncode}: {proc.stderr}")
    return proc


def ansible(tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run an Ansible CLI (``ansible-playbook``, ``ansible``) from this venv in the repo root."""
    bin_dir = Path(sys.executable).parent
    return subprocess.run(
        [str(bin_dir / tool), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"PATH": f"{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin", "ANSIBLE_FORCE_COLOR": "0"},
        timeout=900,
    )


def playbook(*args: str) -> subprocess.CompletedProcess[str]:
    return ansible("ansible-playbook", *args)


def recap(output: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP as {host: {"ok": n, "changed": n, "failed": n, ...}}."""
    out = {}
    for m in re.finditer(r"^(\S+)\s+: ((?:\w+=\d+\s*)+)$", output, re.M):
        out[m.group(1)] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(2))}
    return out


def converge_summary(output: str) -> dict[str, dict[str, int | str]]:
    """``swarm converge``'s closing table as {host: {"status", "ok", "changed", ...}}."""
    rows = re.findall(
        r"^(\S+)\s+(ok|changed|FAILED|UNREACHABLE)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)", output, re.M
    )
    keys = ("ok", "changed", "failed", "unreachable", "skipped")
    return {r[0]: {"status": r[1], **dict(zip(keys, map(int, r[2:]), strict=True))} for r in rows}


def host_facts() -> dict[str, object]:
    """What the lab may change on the host and must restore: ip_forward, and whether
    systemd-nspawn's run directory exists."""
    return {
        "ip_forward": Path("/proc/sys/net/ipv4/ip_forward").read_text().strip(),
        "nspawn_run_dir": NSPAWN_RUN_DIR.exists(),
    }


def assert_nothing_left(before: dict[str, object]) -> None:
    """After `swarm lab down`: no namespace, link, route, iptables chain, mount, process,
    cgroup, nspawn run directory or state of the lab is left, and the host is as
    :func:`host_facts` found it ``before``."""
    assert not [
        ns
        for ns in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
        if ns.startswith("swl-")
    ]
    assert "swl-" not in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert "10.77." not in subprocess.run(["ip", "route"], capture_output=True, text=True).stdout
    for table in ("filter", "nat"):
        rules = subprocess.run(["iptables", "-t", table, "-S"], capture_output=True, text=True).stdout
        assert "SWARM-LAB" not in rules
    # The controller's mesh filter (engines/controller.py apply_filter) goes with its interface.
    nft = subprocess.run(["nft", "list", "table", "inet", "swarm"], capture_output=True, text=True)
    assert nft.returncode != 0, nft.stdout
    mounts = Path("/proc/self/mountinfo").read_text()
    assert "swl-" not in mounts and "swarm-lab" not in mounts
    cmdlines = [p.read_bytes() for p in Path("/proc").glob("[0-9]*/cmdline") if p.exists()]
    assert not [c for c in cmdlines if b"systemd-nspawn" in c or b"swarm_infra.lab.wanlink" in c]
    assert not list(Path("/sys/fs/cgroup").rglob("swarm-lab"))
    assert not [p for p in (NSPAWN_RUN_DIR / "propagate").glob("*") if p.name in LAB_STATE["nodes"]]
    assert not state_dir().exists()  # state, lab SSH key, node layers
    assert host_facts() == before


# What the node itself writes whatever Ansible does: logins (wtmp, lastlog, journal), SSH's
# and Ansible's own scratch space, and apt's binary caches (pkgcache.bin, srcpkgcache.bin),
# which libapt rebuilds whenever anything reads the package database, as the apt module
# does in check mode too. Everything else under a node's overlay upper directory is what a
# run changed.
UPPER_NOISE = ("var/log/", "root/.ansible/", "var/lib/systemd/", "tmp/", "var/tmp/", "var/cache/apt/")


# Written once a converge of the lab fleet succeeded through the lab's package cache
# (lab/pkgcache.py): the cache then holds every package the lab fleet's nodes install.
PACKAGE_CACHE_WARM = cache_dir() / "apt-cacher-ng" / ".warmed-by-a-lab-converge"


def mark_package_cache_warm() -> None:
    PACKAGE_CACHE_WARM.parent.mkdir(parents=True, exist_ok=True)
    PACKAGE_CACHE_WARM.touch()


def upper_snapshot(node: str) -> dict[str, tuple]:
    """Every file, directory and link a node has changed from the image (its overlay upper
    directory on the host), with type, mode, owner, size and content hash, noise aside."""
    upper = state_dir() / "nodes" / node / "upper"
    out = {}
    for path in upper.rglob("*"):
        rel = str(path.relative_to(upper)) + ("/" if path.is_dir() and not path.is_symlink() else "")
        if rel.startswith(UPPER_NOISE) or any(noise.startswith(rel) for noise in UPPER_NOISE):
            continue  # a noisy path, or a directory on the way to one (copied up with it)
        st = path.lstat()
        digest = (
            hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() and not path.is_symlink() else ""
        )
        out[rel] = (
            stat.S_IFMT(st.st_mode),
            stat.S_IMODE(st.st_mode),
            st.st_uid,
            st.st_gid,
            st.st_size,
            digest,
        )
    return out


def fleet_copy(dest: Path) -> Path:
    """A copy of the lab fleet (inventory/lab, policies) under ``dest``; returns its inventory dir."""
    (dest / "inventory").mkdir(parents=True)
    shutil.copytree(ROOT / "inventory/lab", dest / "inventory/lab")
    shutil.copytree(ROOT / "policies", dest / "policies")
    return dest / "inventory/lab"


def edit(path: Path, old: str, new: str) -> None:
    """Replace ``old`` (which must be there) by ``new`` in a fleet file."""
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new))


def changed_paths(before: dict[str, tuple], after: dict[str, tuple]) -> list[str]:
    """Paths added, removed or changed between two :func:`upper_snapshot` results."""
    return sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))


# --- drift: what the e2e job and the pyinfra equivalence test inject and expect reported

LIB_DIR, GPU_SETTINGS = FILES["lib_dir"], FILES["gpu_settings"]
SET_GPU0_POWER = (
    f"python3 -c \"import sys, json; sys.path.insert(0, '{LIB_DIR}'); "
    f"import swarm_gpu_node as g; s = json.load(open('{GPU_SETTINGS}')); "
    "g.backend_for(s).set(0, 'power_limit_w', {w})\""
)
# (node, layer, key) of each injected drift, as the drift report must name it. lab-gpu-2's
# wg-quick is not the one stopped: behind the lab's real NAT the controller reaches it over
# the mesh only, and a node whose mesh is down can be repaired by its console or its own pull
# only (no push), as a provider's would.
INJECTED = {
    ("lab-gpu-1", "host", "sysctl net.ipv4.tcp_slow_start_after_idle"),
    ("lab-gpu-1", "mesh", f"file {FILES['wireguard_key']}"),
    ("lab-gpu-2", "mesh", "peers on wg0"),  # lab-head-1 removed from wg0: one line names it
    ("lab-gpu-1", "mesh", f"service {UNITS['wireguard']}"),
    ("lab-gpu-2", "gpu", "gpu0 power_limit_w"),
    # Beyond the five the issue names: an MTU changed at runtime, which `wg syncconf` alone
    # would not repair.
    ("lab-head-1", "mesh", "wg0 mtu"),
}


def verify(tmp_path: Path) -> tuple[int, str, list[dict]]:
    """Run `swarm verify`; returns (exit code, output, drift items from its JUnit XML)."""
    junit = tmp_path / "verify.xml"
    proc = swarm("verify", "--junit-xml", str(junit), check=False)
    drift = [
        json.loads(p.get("value"))
        for p in ET.parse(junit).getroot().iter("property")
        if p.get("name") == "drift"
    ]
    return proc.returncode, proc.stdout + proc.stderr, drift


def inject_drift() -> None:
    """Make every drift of :data:`INJECTED` on the converged lab."""
    head_key = on_node("lab-head-1", f"wg pubkey < {FILES['wireguard_key']}").stdout.strip()
    on_node("lab-gpu-1", "sysctl -qw net.ipv4.tcp_slow_start_after_idle=1")
    on_node("lab-gpu-1", f"chmod 0644 {FILES['wireguard_key']}")
    on_node("lab-gpu-2", f"wg set wg0 peer {head_key} remove")
    on_node("lab-gpu-1", f"systemctl stop {UNITS['wireguard']}")
    on_node("lab-gpu-2", SET_GPU0_POWER.format(w=500))
    on_node("lab-head-1", "ip link set dev wg0 mtu 1300")


def ray_nodes() -> list[dict]:
    out = on_node(
        HEAD, f"{CLIENT} {VENV}/bin/ray list nodes --detail --format json --limit 1000 --address {DASHBOARD}"
    )
    return json.loads(out.stdout)


def alive() -> dict[str, dict]:
    by_ip = {r["node_ip"]: n for n, r in RAY.items() if r}
    return {by_ip[n["node_ip"]]: n for n in ray_nodes() if n["state"] == "ALIVE" and n["node_ip"] in by_ip}


def alive_within(names: set[str], seconds: float = 30) -> dict[str, dict]:
    """The ALIVE members once they are ``names`` (the units return once each raylet answers,
    and it registers with the GCS as it starts), or what they are after ``seconds``."""
    deadline = time.monotonic() + seconds
    members = alive()
    while set(members) != names and time.monotonic() < deadline:
        time.sleep(1)  # polling the head's state API, not waiting blindly
        members = alive()
    return members


def verify_settled(tmp_path: Path, seconds: float = 120) -> tuple[int, str, list[dict]]:
    """:func:`verify` after a repair that cut nodes off the mesh for a while (a stopped
    wg-quick, a removed peer), once what heals by itself has healed, for at most ``seconds``:

    - the head's health checks mark a cut-off raylet dead (14 s with the lab's declared
      health check, policies/lab/ray.yaml); once the mesh is back it learns so and exits,
      and its unit (Restart=on-failure, still enabled) starts it again, which can end after
      the converge;
    - a tunnel to a NAT'd peer whose interface was made again waits for that peer's next
      handshake (WireGuard's own timers: only the NAT'd side can start it).

    Both are Ray's, systemd's and WireGuard's, not the converge's: verify again, each time
    once every Ray member is alive, while every drift left is one of those two; any other
    drift, or the deadline, ends it with that verify's result."""
    members = {n for n, r in RAY.items() if r}
    deadline = time.monotonic() + seconds
    while True:
        alive_within(members, max(1.0, deadline - time.monotonic()))
        rc, out, drift = verify(tmp_path)
        if rc != 1 or not drift or time.monotonic() > deadline or not all(map(_heals_by_itself, drift)):
            return rc, out, drift


def _heals_by_itself(d: dict) -> bool:
    """Whether verify's drift item ``d`` is one :func:`verify_settled` waits out."""
    text = json.dumps(d)
    if d["layer"] == "mesh" and d["key"].startswith("peers on"):
        return "no handshake yet" in text and "not a peer" not in text
    if d["layer"] == "ray" and ("not running" in text or "DEAD" in text):
        unit = UNITS["ray_" + RAY[d["node"]]["role"]]
        return on_node(d["node"], f"systemctl is-enabled {unit}", check=False).stdout.strip() == "enabled"
    return False
