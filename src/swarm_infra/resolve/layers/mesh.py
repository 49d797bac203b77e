"""The mesh layer: the WireGuard mesh, its keys made on the node, its peers; forwarding
on relays and hubs (the node-side tunables code, :func:`tunables`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..keys import checked_keys, wireguard_key_problem
from ..paths import STATE_DIR, UNIT_DIR, WIREGUARD_DIR
from ..text import UnsafeValue, header, json_text, line_value
from ..types import NodeState
from .base import File, Layer, item


def tunables(node: NodeState) -> dict[str, Any]:
    """What the node-side tunables code (:mod:`swarm_infra.nodeside.tunables` SPEC)
    converges for this layer: the forwarding sysctls of relays and hubs (its own sysctl.d
    file and record, so removing them never touches the host layer's keys)."""
    mesh, files = node["mesh"], node["layout"]["files"]
    return {
        "sysctls": dict(mesh["sysctls"]) if mesh else {},
        "sysfs": [],
        "sysctl_conf": files["mesh_sysctl_conf"]["path"],
        "tmpfiles_conf": None,
        "record": files["mesh_tunables_record"]["path"],
        "label": "mesh forwarding",
    }


def wireguard_peer_keys(
    node: NodeState, recorded: Mapping[str, str], fresh: Mapping[str, str]
) -> dict[str, str]:
    """The public key of every declared peer that is known, by peer name, sorted.

    A peer whose key the fleet records (PeerState ``public_key``, from its Node
    ``spec.mesh.public_key``: reviewed, validated well-formed and unique) has that key,
    whatever the nodes report: the repository alone decides it, so a pull node needs no
    controller and a node that reports another key changes no peer's file (the engines
    refuse that node, :func:`swarm_infra.resolve.keys.key_change_problem`).

    Any other peer's key is what nodes report: those read from the peers in this run
    (``fresh``, by node name) over those recorded on the node before (``recorded``, the
    peers file), keeping declared peers only, so that a run limited to some hosts keeps the
    others' keys and a removed peer's key leaves the file. One that is not a WireGuard
    public key, that two peers share, or that is a key the fleet records for another node,
    is left out (that peer stays a comment), never written; a fresh key recorded here for
    another peer stays that peer's (the first binding) and only the newcomer is left out."""
    mesh = node["mesh"]
    assert mesh is not None
    declared = {p["name"] for p in mesh["peers"]}
    # .get: a NodeState made before PeerState had public_key (a peers file, a fixture).
    in_fleet = {p["name"]: k for p in mesh["peers"] if (k := p.get("public_key"))}
    learnt = declared - set(in_fleet)
    # Each source checked on its own (:func:`.keys.checked_keys`: the format, and one key
    # per node): a malformed or duplicated fresh key never replaces a good recorded one.
    good_recorded, _ = checked_keys({k: v for k, v in recorded.items() if k in learnt})
    good_fresh, _ = checked_keys({k: v for k, v in fresh.items() if k in learnt})
    # The first binding stands (issue #38): a fresh key this node recorded for another peer
    # is that peer's; the newcomer that copied it is left out, the holder keeps its key.
    held = {v: k for k, v in good_recorded.items()}
    good_fresh = {k: v for k, v in good_fresh.items() if held.get(v, k) == k}
    keys, _ = checked_keys({**good_recorded, **good_fresh})
    taken = set(in_fleet.values())
    keys = {name: key for name, key in keys.items() if key not in taken}
    keys.update(in_fleet)
    return {name: keys[name] for name in sorted(declared & set(keys))}


def wireguard_peers(node: NodeState, peer_keys: Mapping[str, str]) -> str:
    """The peers file: public keys (not secret) by node name, for runs limited to other hosts."""
    return json_text(dict(peer_keys))


def wireguard_conf(node: NodeState, peer_keys: Mapping[str, str]) -> str:
    """wg-quick(8) configuration of the node's mesh interface, without the private key: it
    is generated on the node and set from its own file by ``PostUp``. ``peer_keys``: from
    :func:`wireguard_peer_keys` (the fleet's recorded keys first). A declared peer whose
    public key is not known yet is a comment until that peer is converged or its key is
    recorded in the fleet."""
    mesh, files = node["mesh"], node["layout"]["files"]
    assert mesh is not None
    v = line_value
    name = v(node["name"], "node name")
    lines = [
        header("mesh").rstrip("\n"),
        f"# Mesh interface of {name}, from the resolved topology. The private key is",
        "# generated on this node and set from its own file, so it never appears here.",
        "[Interface]",
        f"Address = {v(mesh['address'], 'mesh address')}",
        f"ListenPort = {int(mesh['listen_port'])}",
        f"MTU = {int(mesh['mtu'])}",
        f"PostUp = wg set %i private-key {v(files['wireguard_key']['path'], 'key path')}",
    ]
    for peer in mesh["peers"]:
        lines.append("")
        peer_name = v(peer["name"], "peer name")
        key = peer_keys.get(peer["name"])
        if key and wireguard_key_problem(key):
            raise UnsafeValue(f"{peer_name}: public key refused: {wireguard_key_problem(key)}")
        if not key:
            lines.append(
                f"# {peer_name}: public key not known yet (record it in the fleet, or converge it first)"
            )
            continue
        lines += ["[Peer]", f"# {peer_name}", f"PublicKey = {key}"]
        allowed = ", ".join(v(ip, f"{peer_name} AllowedIPs") for ip in peer["allowed_ips"])
        lines.append(f"AllowedIPs = {allowed}")
        if peer["endpoint"]:
            lines.append(f"Endpoint = {v(peer['endpoint'], f'{peer_name} endpoint')}")
        if peer["persistent_keepalive_s"]:
            lines.append(f"PersistentKeepalive = {int(peer['persistent_keepalive_s'])}")
    return "\n".join(lines) + "\n"


def wireguard_dropin(node: NodeState) -> str:
    """wg-quick@ drop-in selecting wireguard-go, where the kernel has no WireGuard module."""
    return (
        header("mesh")
        + "# No WireGuard kernel module here: wg-quick starts wireguard-go (userspace, /dev/net/tun).\n"
        "[Service]\n"
        "Environment=WG_QUICK_USERSPACE_IMPLEMENTATION=wireguard-go\n"
        "Environment=WG_I_PREFER_BUGGY_USERSPACE_TO_POLISHED_KMOD=1\n"
    )


def wireguard_running_differs(node: NodeState, peer_keys: Mapping[str, str], allowed_ips_output: str) -> bool:
    """Whether the running interface's peers differ from the configuration: ``wg show IFACE
    allowed-ips`` output (one line per peer: public key, then its CIDRs or ``(none)``)
    against the declared peers whose keys are known. A difference (``wg set`` at runtime, a
    drifted node) is repaired with ``wg syncconf``, which keeps tunnels up."""
    mesh = node["mesh"]
    assert mesh is not None  # asked of nodes in the mesh only
    running = {}
    for line in allowed_ips_output.splitlines():
        fields = line.split()
        if fields:
            running[fields[0]] = sorted(f for f in fields[1:] if f != "(none)")
    declared = {
        peer_keys[p["name"]]: sorted(p["allowed_ips"]) for p in mesh["peers"] if p["name"] in peer_keys
    }
    return running != declared


def wireguard_dropin_items(node: NodeState) -> list[dict[str, Any]]:
    """The wg-quick drop-in selecting wireguard-go, for nodes whose kernel has no WireGuard
    module: its directory and file."""
    f = node["layout"]["files"]
    return [
        item(f["wireguard_dropin_dir"], "directory"),
        item(f["wireguard_dropin"], "file", wireguard_dropin(node)),
    ]


_TUNABLES = "the node-side tunables code (swarm_tunables_spec, tunables_spec)"
# Only where the node's kernel has no WireGuard module (a fact of the node, not of
# NodeState): the role and the deploy converge these items (wireguard_dropin_items).
_DROPIN = (
    "the wireguard role's and the mesh deploy's wireguard_dropin_items, where the kernel lacks WireGuard"
)
_DROPIN_DIR = f"{UNIT_DIR}/wg-quick@{{interface}}.service.d"

LAYER = Layer(
    name="mesh",
    role="wireguard",
    hosts="all",
    state=("mesh",),
    title="Mesh",
    sources=("Mesh", "Site"),
    tunables=tunables,
    files={
        "wireguard_dir": File(path=WIREGUARD_DIR, mode="0700", directory=True),
        "wireguard_key": File(
            path=f"{WIREGUARD_DIR}/{{interface}}.key",
            mode="0600",
            made_on_node="the private key: generated on the node, never read back",
        ),
        "wireguard_peers": File(
            path=f"{WIREGUARD_DIR}/peers.json", keyed_text=wireguard_peers, read_back=True
        ),
        "wireguard_conf": File(
            path=f"{WIREGUARD_DIR}/{{interface}}.conf", mode="0600", keyed_text=wireguard_conf
        ),
        "wireguard_dropin_dir": File(path=_DROPIN_DIR, directory=True, task=_DROPIN),
        "wireguard_dropin": File(path=f"{_DROPIN_DIR}/userspace.conf", text=wireguard_dropin, task=_DROPIN),
        "mesh_sysctl_conf": File(path="/etc/sysctl.d/90-swarm-mesh.conf", task=_TUNABLES),
        "mesh_tunables_record": File(path=f"{STATE_DIR}/tunables-mesh.json", task=_TUNABLES),
    },
    units={"wireguard": "wg-quick@{interface}"},
    packages=("wireguard", "mesh_tools", "wireguard_userspace"),
)
