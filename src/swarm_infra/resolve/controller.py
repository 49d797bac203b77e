"""The controller's own mesh interface (Mesh ``spec.controller``): what ``swarm mesh
controller-up`` sets on the host that runs ``swarm``.

The controller is a mesh member the fleet declares but does not converge: no NodeState,
no engine touches it. Its interface is plain WireGuard configured with ``wg setconf`` (the
wg(8) configuration format, not wg-quick's: no Address, no PostUp), its address and the
route to the mesh CIDR set with ``ip``. Its peers are computed here from the same topology
the nodes' are (:func:`swarm_infra.resolve.mesh.controller_peers`), and each node's peer
list holds the controller (:func:`swarm_infra.resolve.mesh.controller_peer`): the two
ends agree by construction.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypedDict

from .analysis import Analysis
from .files import UnsafeValue, line_value
from .keys import wireguard_key_problem
from .mesh import controller_peers
from .types import DesiredState, PeerState


class ControllerState(TypedDict):
    name: str  # its peer name on the nodes
    interface: str  # e.g. "swarm0"
    address: str  # its mesh address with the mesh prefix, e.g. "10.210.0.9/16": the route too
    cidr: str  # the mesh CIDR
    listen_port: int
    mtu: int
    # As recorded in the fleet; None: not recorded, the running controller's own key is used
    # (engines/controller.py own_public_key). The private key stays on the controller.
    public_key: str | None
    peers: list[PeerState]  # every node that is not a spoke, in name order


def controller_state(a: Analysis) -> ControllerState | None:
    """The controller's interface from a checked fleet (``load_fleet``), or None when the
    Mesh declares no controller."""
    mesh = a.fleet.mesh
    if mesh is None or mesh.controller is None or a.controller_address is None or a.topology is None:
        return None
    ctl = mesh.controller
    return {
        "name": ctl.name,
        "interface": ctl.interface,
        "address": f"{a.controller_address}/{mesh.cidr.prefixlen}",
        "cidr": str(mesh.cidr),
        "listen_port": ctl.listen_port or mesh.listen_port,
        "mtu": mesh.mtu,
        "public_key": ctl.public_key,
        "peers": controller_peers(a.fleet, a.topology, a.addresses),
    }


def _unkeyed_controller(state: DesiredState, peer: PeerState) -> bool:
    return peer["name"] not in state["nodes"] and peer["public_key"] is None


def controller_key_missing(state: DesiredState) -> bool:
    """True when a node's peer list holds the controller without a public key (Mesh
    ``spec.controller`` records none): push mode must supply it (:func:`with_controller_key`)."""
    return any(
        _unkeyed_controller(state, p)
        for node in state["nodes"].values()
        if node["mesh"] is not None
        for p in node["mesh"]["peers"]
    )


def with_controller_key(state: DesiredState, key: str) -> DesiredState:
    """``state`` with ``key`` as the controller's public key in every node's peer list where
    the fleet records none (Mesh ``spec.controller`` without ``public_key``): what push mode
    writes on the nodes, as it writes the keys nodes report. The controller is the one peer
    that is not a node (:func:`swarm_infra.resolve.mesh.controller_peer`). A recorded key is
    kept: the fleet decides where it records one. Returns a new state; ``state`` is not
    changed. ``key`` must be a WireGuard public key (checked: :class:`UnsafeValue`)."""
    problem = wireguard_key_problem(key)
    if problem:
        raise UnsafeValue(f"the controller's public key: {problem}")
    nodes = {}
    for name, node in state["nodes"].items():
        mesh = node["mesh"]
        if mesh is not None and any(_unkeyed_controller(state, p) for p in mesh["peers"]):
            peers = [{**p, "public_key": key} if _unkeyed_controller(state, p) else p for p in mesh["peers"]]
            node = {**node, "mesh": {**mesh, "peers": peers}}  # type: ignore[typeddict-item]
        nodes[name] = node
    return {**state, "nodes": nodes}


def controller_peer_keys(state: ControllerState, recorded: Mapping[str, str]) -> dict[str, str]:
    """The public key of each peer of the controller: the one the fleet records (Node
    ``spec.mesh.public_key``), else the one ``recorded`` holds (the controller's record of
    what each node reported at ``swarm converge``: engines/keyrecord.py, trust on first
    use). The first binding stands (issue #38): a key the fleet records binds before any
    the controller recorded, so a recorded key that is another peer's recorded one in the
    fleet, or the controller's own, is left out for the peer that copied it (that peer stays
    a comment) and the holder keeps its peer; two recorded keys alike (a record written
    before the controller's record kept its first bindings) leave both out, as neither is
    known to be first. A recorded key that is not a key is left out. ``{name: key}`` in name
    order."""
    in_fleet = {p["name"]: p["public_key"] for p in state["peers"] if p["public_key"]}
    learnt: dict[str, str] = {}
    for peer in state["peers"]:
        key = recorded.get(peer["name"])
        if peer["name"] not in in_fleet and key and not wireguard_key_problem(key):
            learnt[peer["name"]] = key
    taken = {state["public_key"], *in_fleet.values()}
    alike = list(learnt.values())
    learnt = {n: k for n, k in learnt.items() if k not in taken and alike.count(k) == 1}
    keys = {n: k for n, k in in_fleet.items() if k != state["public_key"]} | learnt
    return dict(sorted(keys.items()))


def controller_wg_conf(state: ControllerState, keys: Mapping[str, str] | None = None) -> str:
    """The wg(8) configuration (``wg setconf``) of the controller's interface, without the
    private key (it is spliced in from the key file only on the way to ``wg setconf``, never
    written here). ``keys``: the peers' public keys (:func:`controller_peer_keys`; default
    the fleet's records alone). A peer without one is a comment. Raises
    :class:`UnsafeValue` for a value that would change the file's structure (the schema
    refuses them first)."""
    if keys is None:
        keys = controller_peer_keys(state, {})
    v = line_value
    lines = [
        "# Managed by swarm (swarm mesh controller-up). Changes here are overwritten.",
        f"# Mesh interface of the controller {v(state['name'], 'controller name')}; its private key is",
        "# set from the controller's key file, never written here.",
        "[Interface]",
        f"ListenPort = {int(state['listen_port'])}",
    ]
    for peer in state["peers"]:
        name = v(peer["name"], "peer name")
        key = keys.get(peer["name"])
        lines.append("")
        if not key:
            lines.append(
                f"# {name}: public key not known (record it in the fleet, or converge the node first)"
            )
            continue
        problem = wireguard_key_problem(key)
        if problem:
            raise UnsafeValue(f"{name}: public key refused: {problem}")
        lines += ["[Peer]", f"# {name}", f"PublicKey = {key}"]
        lines.append("AllowedIPs = " + ", ".join(v(ip, f"{name} AllowedIPs") for ip in peer["allowed_ips"]))
        if peer["endpoint"]:
            lines.append(f"Endpoint = {v(peer['endpoint'], f'{name} endpoint')}")
        if peer["persistent_keepalive_s"]:
            lines.append(f"PersistentKeepalive = {int(peer['persistent_keepalive_s'])}")
    return "\n".join(lines) + "\n"


def with_private_key(conf: str, private_key: str) -> str:
    """``conf`` (:func:`controller_wg_conf`) with ``PrivateKey`` after ``[Interface]``: what
    ``wg setconf`` reads from a pipe. ``private_key`` must be a key (44 base64 characters,
    checked: a line break in it would add directives)."""
    problem = wireguard_key_problem(private_key)
    if problem:
        raise UnsafeValue(f"the controller's private key file: {problem}")
    return conf.replace("[Interface]\n", f"[Interface]\nPrivateKey = {private_key}\n", 1)
