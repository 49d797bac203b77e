"""The WireGuard mesh: the node's key (made on the node, only its public half read back),
the peers' and wg-quick files, and the running interface's peers, MTU and address."""

from __future__ import annotations

import json
import shlex
from collections.abc import Generator, Mapping
from typing import Any, cast

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, OperationError, QuoteString, StringCommand, operation

from ....resolve.files import layer_files, wireguard_peer_keys, wireguard_running_differs
from ....resolve.keys import key_change_problem, wireguard_key_problem
from ....resolve.types import NodeState
from .files import managed_file
from .run import changing, key_check, public_keys, snapshot
from .util import changed


@operation()
def wireguard_key(
    path: str, declared: str | None = None
) -> Generator[StringCommand | FunctionCommand, None, None]:
    """Make the node's WireGuard private key where there is none (``wg genkey`` on the node,
    written under umask 077: mode 0600 from the start, never printed, never in argv), and
    remember its public key for the peers' configuration. ``declared``: the key the fleet
    records for the node (NodeState ``mesh.public_key``); a node holding another fails.

    **Example:** ``wireguard_key(name="WireGuard key", path=files["wireguard_key"]["path"])``"""
    key = snapshot()["public_keys"].get(path)
    if key:
        _publish(host.state, host.name, key, declared)
        return
    changing()
    yield StringCommand("umask", "077", "&&", "wg", "genkey", ">", QuoteString(path))

    def read(state: Any, host: Any) -> bool:
        ok, out = host.run_shell_command(StringCommand("wg", "pubkey", "<", QuoteString(path)))
        if not ok:
            return False
        try:
            _publish(state, host.name, "\n".join(out.stdout_lines).rstrip(), declared)
        except OperationError as refused:
            logger.error(str(refused))  # the host fails here; its name and why are printed
            return False
        return True

    yield FunctionCommand(read, (), {})


def _publish(state: Any, name: str, reported: str, declared: str | None = None) -> None:
    """Keep the public key node ``name`` reported for its peers' files, once it is checked
    to be a WireGuard key (the node's root can make ``wg pubkey`` print anything) and to be
    the one the fleet records (``declared``), else the one the controller recorded or an
    accepted change (:func:`key_check`); else fail the host, naming it: it gets no peers and
    no peer's file changes because of it."""
    check = key_check(state)
    problem = wireguard_key_problem(reported) or key_change_problem(
        reported, check.recorded.get(name), name in check.accepted, declared
    )
    if problem:
        raise OperationError(f"{name}: WireGuard public key refused: {problem}")
    public_keys(state)[name] = reported


def peer_keys(node: Mapping[str, Any]) -> dict[str, str]:
    """The keys of ``node``'s declared peers: those of the hosts in this run over those in
    the node's peers file (read from the snapshot)."""
    text = snapshot()["texts"].get(node["layout"]["files"]["wireguard_peers"]["path"])
    try:
        recorded = json.loads(text) if text else {}
    except ValueError:
        recorded = {}
    fresh = {name: key for name, key in public_keys(host.state).items() if name != node["name"]}
    return wireguard_peer_keys(cast(NodeState, node), recorded if isinstance(recorded, dict) else {}, fresh)


@operation()
def wireguard_file(node: Mapping[str, Any], which: str) -> Generator[Any, None, None]:
    """Write the mesh file ``which`` (``"peers"``: the peers' public keys; ``"conf"``: the
    wg-quick configuration) of ``node``, with the keys of its declared peers known now: the
    hosts' in this run (:func:`wireguard_key`) over those recorded on the node. Computed
    when the operation runs, after every host made its key.

    **Example:** ``conf = wireguard_file(name="wg-quick configuration", node=node, which="conf")``"""
    path = node["layout"]["files"]["wireguard_peers" if which == "peers" else "wireguard_conf"]["path"]
    item = next(i for i in layer_files(cast(NodeState, node), "mesh", peer_keys(node)) if i["path"] == path)
    yield from managed_file._inner(
        path=path, text=item["content"], owner=item["owner"], group=item["group"], mode=item["mode"]
    )


@operation()
def wireguard_sync(node: Mapping[str, Any], when_config_changed: Any) -> Generator[StringCommand, None, None]:
    """Apply the configuration to the running interface with ``wg syncconf`` when it changed
    in this run (``when_config_changed``: that operation) or the running peers differ from
    it (``wg set`` at runtime, a drifted node): only what differs changes, so tunnels stay
    up. The stripped configuration has no private key (it is never in the file), so the key
    is spliced in on the node by awk reading the key file itself: it travels only through
    pipes, never a command line or the environment.

    **Example:** ``wireguard_sync(name="Sync peers", node=node, when_config_changed=conf)``"""
    interface = node["mesh"]["interface"]
    running = snapshot()["wireguard"].get(interface)
    if running is None:
        return  # not up: wg-quick reads the file when it starts
    if not changed(when_config_changed):
        if not wireguard_running_differs(cast(NodeState, node), peer_keys(node), running):
            return
        host.noop(f"running peers differ from {interface}.conf: syncing")
    layout = node["layout"]
    unit, key = layout["units"]["wireguard"], layout["files"]["wireguard_key"]["path"]
    script = (
        "set -o pipefail; "
        f"if systemctl is-active --quiet {shlex.quote(unit)}; then "
        f"wg syncconf {shlex.quote(interface)} <(wg-quick strip {shlex.quote(interface)} | "
        f"awk -v keyfile={shlex.quote(key)} "
        "'{ print } /^\\[Interface\\]/ { getline key < keyfile; print \"PrivateKey = \" key }'); fi"
    )
    changing()
    yield StringCommand("bash", "-c", QuoteString(script))


@operation()
def wireguard_mtu(mesh: Mapping[str, Any]) -> Generator[StringCommand, None, None]:
    """Set the declared MTU on the running interface (``ip link set``: no tunnel drops).

    **Example:** ``wireguard_mtu(name="MTU", mesh=node["mesh"])``"""
    link = snapshot()["interfaces"].get(mesh["interface"])
    if link and link.get("mtu") != mesh["mtu"]:
        changing()
        yield StringCommand(
            "ip", "link", "set", "dev", QuoteString(mesh["interface"]), "mtu", str(int(mesh["mtu"]))
        )


@operation()
def wireguard_address(mesh: Mapping[str, Any], unit: str) -> Generator[StringCommand, None, None]:
    """Restart the interface when its running address is not the declared one (peers
    address this node by it; the one mesh change that drops its tunnels).

    **Example:** ``wireguard_address(name="Address", mesh=node["mesh"], unit=units["wireguard"])``"""
    link = snapshot()["interfaces"].get(mesh["interface"])
    if link and mesh["address"] not in link.get("inet", []):
        changing()
        yield StringCommand("systemctl", "restart", QuoteString(unit))
