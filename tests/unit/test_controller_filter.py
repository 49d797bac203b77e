"""The controller's mesh interface is filtered (issue #38, item 8): a mesh peer reaches only
the replies to what the controller starts; every connection a peer opens to the controller,
and every packet it asks the controller to forward, is dropped; other interfaces are not
touched.

Expected behaviour comes from the trust model (DESIGN.md: mesh membership grants the mesh,
nothing more) and from what the controller serves over the mesh: nothing
(resolve/meshfilter.py says why). The kernel is the oracle: the root tests load the
ruleset with the real ``nft`` into scratch network namespaces (never the host's own, where
a lab may be running) joined by veth links, one named as the fleet names the controller's
interface, and open real TCP connections and pings across them. Without the filter the
same connection succeeds (the first assertion of the drop test: the hole the filter
closes).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from swarm_infra import load_fleet
from swarm_infra.engines import controller as ctl_engine
from swarm_infra.resolve.controller import ControllerState, controller_state
from swarm_infra.resolve.files import UnsafeValue
from swarm_infra.resolve.meshfilter import TABLE, controller_mesh_ruleset

from .conftest import ROOT
from .test_mesh_controller import CTL_KEY, FakeHost, _key_file

LAB = [ROOT / "inventory" / "lab", ROOT / "policies" / "lab", ROOT / "policies" / "shared"]


@pytest.fixture(scope="module")
def state() -> ControllerState:
    found = controller_state(load_fleet(LAB))
    assert found is not None  # policies/lab/mesh.yaml declares the controller
    return found


def _keyed(state: ControllerState) -> ControllerState:
    return {**state, "public_key": CTL_KEY}


# ------------------------------------------------------------------ the engine's steps


def test_up_loads_the_filter_before_the_link_and_down_removes_it(
    state: ControllerState, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SWARM_STATE_DIR", str(tmp_path / "state"))
    ctl = _keyed(state)
    key = _key_file(tmp_path)
    host = FakeHost(CTL_KEY)
    out = ctl_engine.up(ctl, key, runner=host)
    argvs = [argv for argv, _ in host.calls]
    load = ["nft", "-f", "/dev/stdin"]
    assert load in argvs
    # One transaction with the whole table, on its standard input.
    assert [stdin for argv, stdin in host.calls if argv == load] == [controller_mesh_ruleset(ctl)]
    # Before the link exists: no packet of a peer arrives unfiltered.
    assert argvs.index(load) < argvs.index(["wireguard-go", ctl["interface"]])
    assert out.changed and any(f"inet {TABLE}" in step for step in out.steps)
    saved = ctl_engine.filter_path(ctl)
    assert saved.read_text() == controller_mesh_ruleset(ctl) and saved.stat().st_mode & 0o077 == 0

    # Check mode with the script changed (another interface): says so, runs no nft, writes nothing.
    moved: ControllerState = {**ctl, "interface": "swarm9"}
    saved_moved = ctl_engine.filter_path(moved)
    saved_moved.write_text(controller_mesh_ruleset(ctl))
    checking = FakeHost(CTL_KEY, link=True)
    out = ctl_engine.up(moved, key, check=True, runner=checking)
    assert out.changed and '+\t\tiifname "swarm9" jump mesh' in out.diff
    assert not [argv for argv, _ in checking.calls if argv[0] == "nft"]
    assert saved_moved.read_text() == controller_mesh_ruleset(ctl)

    # A changed filter alone is loaded again; the peers' sessions are left alone (no syncconf).
    saved.write_text("# an older script\n")
    running = FakeHost(CTL_KEY, link=True)
    out = ctl_engine.up(ctl, key, runner=running)
    argvs = [argv for argv, _ in running.calls]
    assert out.changed and load in argvs and not [a for a in argvs if a[:2] == ["wg", "syncconf"]]
    assert saved.read_text() == controller_mesh_ruleset(ctl)

    gone = FakeHost(CTL_KEY, link=True)
    assert ctl_engine.down(ctl["interface"], runner=gone)
    assert ["nft", "delete", "table", "inet", TABLE] in [argv for argv, _ in gone.calls]


def test_an_interface_name_cannot_add_rules(state: ControllerState) -> None:
    with pytest.raises(UnsafeValue, match="interface name"):
        controller_mesh_ruleset({**state, "interface": 'x" accept; flush ruleset; #'})


# ------------------------------------------------------------------ the real kernel (root)

root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("nft") is None or shutil.which("ip") is None,
    reason="needs root, nft and ip (scratch network namespaces)",
)

CTL_ADDR, PEER_ADDR = "10.210.0.1", "10.210.0.2"  # the mesh link
CTL_UPLINK, OPERATOR_ADDR = "192.168.77.1", "192.168.77.2"  # another interface: the operator's
PORT = 18022

LISTEN = """
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(8)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    c.sendall(b"hi")
    c.close()
"""

CONNECT = """
import socket, sys
try:
    c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1.5)
    print("connected:" + c.recv(2).decode())
except socket.timeout:
    print("timeout")
except OSError as exc:
    print(type(exc).__name__)
"""


def _in(ns: str, argv: Sequence[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", "netns", "exec", ns, *argv], input=stdin, capture_output=True, text=True)


class Namespaces:
    """Three scratch namespaces: ``ctl`` (the controller) with the mesh interface (a veth
    named as the fleet names the controller's) to ``peer``, and ``uplink0`` to ``operator``;
    a TCP listener on every address of ``ctl`` and of ``peer``."""

    def __init__(self, prefix: str, mesh_ifname: str) -> None:
        self.ctl, self.peer, self.operator = (f"{prefix}-{n}" for n in ("ctl", "peer", "op"))
        self.listeners: list[subprocess.Popen[str]] = []
        for ns in (self.ctl, self.peer, self.operator):
            subprocess.run(["ip", "netns", "add", ns], check=True)
            subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
        links = (
            (mesh_ifname, CTL_ADDR, self.peer, "peer0", PEER_ADDR),
            ("uplink0", CTL_UPLINK, self.operator, "op0", OPERATOR_ADDR),
        )
        for here, here_addr, ns, there, there_addr in links:
            veth = ["type", "veth", "peer", "name", there, "netns", ns]
            subprocess.run(["ip", "-n", self.ctl, "link", "add", here, *veth], check=True)
            subprocess.run(["ip", "-n", self.ctl, "addr", "add", f"{here_addr}/24", "dev", here], check=True)
            subprocess.run(["ip", "-n", self.ctl, "link", "set", here, "up"], check=True)
            subprocess.run(["ip", "-n", ns, "addr", "add", f"{there_addr}/24", "dev", there], check=True)
            subprocess.run(["ip", "-n", ns, "link", "set", there, "up"], check=True)
        for ns in (self.ctl, self.peer):
            proc = subprocess.Popen(
                ["ip", "netns", "exec", ns, sys.executable, "-c", LISTEN, str(PORT)],
                stdout=subprocess.PIPE,
                text=True,
            )
            self.listeners.append(proc)
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"

    def runner(self, argv: Sequence[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """The engine's runner, inside ``ctl``."""
        return _in(self.ctl, argv, stdin)

    def connect(self, ns: str, address: str) -> str:
        return _in(ns, [sys.executable, "-c", CONNECT, address, str(PORT)]).stdout.strip()

    def ping(self, ns: str, address: str) -> int:
        return _in(ns, ["ping", "-n", "-q", "-c", "1", "-W", "1", address]).returncode

    def listing(self) -> str:
        done = _in(self.ctl, ["nft", "list", "table", "inet", TABLE])
        assert done.returncode == 0, done.stderr
        return done.stdout

    def close(self) -> None:
        for proc in self.listeners:
            proc.kill()
            proc.wait()
        for ns in (self.ctl, self.peer, self.operator):
            subprocess.run(["ip", "netns", "del", ns], check=False)


@pytest.fixture
def netns(state: ControllerState) -> Iterator[Namespaces]:
    spaces = Namespaces(f"swarm-nft-{os.getpid()}", state["interface"])
    try:
        yield spaces
    finally:
        spaces.close()


@root
def test_nft_accepts_the_ruleset(netns: Namespaces, state: ControllerState) -> None:
    done = _in(netns.ctl, ["nft", "-c", "-f", "/dev/stdin"], controller_mesh_ruleset(state))
    assert done.returncode == 0, done.stderr


@root
def test_a_peer_cannot_open_a_connection_to_the_controller(netns: Namespaces, state: ControllerState) -> None:
    # Without the filter (the code before #38): the peer reaches the controller's listener.
    assert netns.connect(netns.peer, CTL_ADDR) == "connected:hi"
    assert netns.ping(netns.peer, CTL_ADDR) == 0
    ctl_engine.apply_filter(state, netns.runner)
    assert netns.connect(netns.peer, CTL_ADDR) == "timeout"  # dropped, not refused
    # A ping is answered: how a node (the NAT'd one, tests/lab/test_pull.py) checks its tunnel.
    assert netns.ping(netns.peer, CTL_ADDR) == 0
    # Nor through it: the controller forwards nothing a peer starts.
    assert _in(netns.ctl, ["sysctl", "-qw", "net.ipv4.ip_forward=1"]).returncode == 0
    assert _in(netns.peer, ["ip", "route", "add", f"{OPERATOR_ADDR}/32", "via", CTL_ADDR]).returncode == 0
    assert _in(netns.operator, ["ip", "route", "add", f"{PEER_ADDR}/32", "via", CTL_UPLINK]).returncode == 0
    assert netns.connect(netns.peer, OPERATOR_ADDR) == "timeout"
    assert netns.ping(netns.peer, OPERATOR_ADDR) != 0  # a ping is answered, never forwarded
    # What the controller starts over the mesh gets its replies (conntrack established).
    assert netns.connect(netns.ctl, PEER_ADDR) == "connected:hi"
    assert netns.ping(netns.ctl, PEER_ADDR) == 0
    # Other interfaces are not filtered: the operator still reaches the controller.
    assert netns.connect(netns.operator, CTL_UPLINK) == "connected:hi"
    # The peer's packets were counted where they were dropped.
    assert "counter packets 0 " not in netns.listing()


@root
def test_the_filter_is_idempotent_and_removed_whole(netns: Namespaces, state: ControllerState) -> None:
    ctl_engine.apply_filter(state, netns.runner)
    first = netns.listing()
    ctl_engine.apply_filter(state, netns.runner)
    assert netns.listing() == first
    # A rule added by hand goes with the next run: the table is replaced whole.
    added = _in(netns.ctl, ["nft", "add", "rule", "inet", TABLE, "mesh", "tcp", "dport", "22", "accept"])
    assert added.returncode == 0, added.stderr
    assert netns.listing() != first
    ctl_engine.apply_filter(state, netns.runner)
    assert netns.listing() == first
    assert ctl_engine.remove_filter(netns.runner)
    assert _in(netns.ctl, ["nft", "list", "table", "inet", TABLE]).returncode != 0
    assert not ctl_engine.remove_filter(netns.runner)
    assert netns.connect(netns.peer, CTL_ADDR) == "connected:hi"
