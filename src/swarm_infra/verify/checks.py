"""What verification checks on each node, derived from the resolved NodeState.

``checks_for(state)`` turns ``desired_state()`` into a flat, ordered list of ``Check``s.
``tests/verify`` (testinfra) reads the actual value of each one on its node and compares
it here (``matches``); ``swarm verify`` turns failures into the drift report. The expected
values are never written down a second time: they are the NodeState's.

Layers: ``host`` (sysctls, sysfs tuning, the sysctl.d file), ``drivers`` (NVIDIA packages
and nvidia-persistenced, only where the GPU backend is real NVML), ``gpu`` (each GPU
setting, read back through the node-side GPU code, and the boot-time re-apply unit),
``mesh`` (wg-quick service, key and configuration modes, interface address and MTU, peers
and AllowedIPs, handshakes, ping of each peer's mesh address).

Checks that depend on others (``requires``: check ids) are reported as blocked, not as
drift, when one of those failed: a stopped ``wg-quick@wg0`` is one drifted item, not
twenty failed pings.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any

from ..nodeside.facts import sysctl_fields
from ..resolve.host import sysctl_text
from ..resolve.types import DesiredState, ManagedPath, NodeState

LAYERS = ("host", "drivers", "gpu", "mesh")
# WireGuard re-keys every 2 minutes while traffic flows (REKEY_AFTER_TIME, 120 s): a
# handshake older than 3 minutes means the peer is not talking.
HANDSHAKE_MAX_AGE_S = 180


@dataclass(frozen=True)
class Check:
    """One declared item on one node.

    ``kind`` selects how the actual value is read (tests/verify/readers.py); ``desired``
    is the NodeState value; ``args`` carries what the reader needs (path, peer, address);
    ``requires`` lists check ids that must pass for this one to be meaningful.
    """

    node: str
    layer: str
    key: str
    kind: str
    desired: Any
    args: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    requires: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return f"{self.node}/{self.layer}/{self.key}"


def sysctl_values(value: Any) -> list[str]:
    """A sysctl value as a list of fields, whether declared (typed: an int, a word, a list)
    or read (``sysctl -n`` separates multi-value keys with tabs, sysctl.d files with
    spaces). Compare these lists, never the strings."""
    return sysctl_fields(value if isinstance(value, str) else sysctl_text(value))


def _owned(path: ManagedPath) -> str:
    """A managed path's ownership and mode as the file reader reports it."""
    return f"{path['owner']}:{path['group']} {path['mode']}"


def _file_check(name: str, layer: str, path: ManagedPath, requires: tuple[str, ...] = ()) -> Check:
    return Check(name, layer, f"file {path['path']}", "file", _owned(path), {"path": path["path"]}, requires)


def matches(check: Check, actual: Any) -> bool:
    """Whether ``actual`` (as read by the check's reader) satisfies the check."""
    if check.kind in ("sysctl", "sysfs"):
        # Persisted always; live where this node can set it (a container's /proc/sys and
        # /sys are read-only, as roles/host_tuning reports).
        live, persisted = actual["live"], actual["persisted"]
        want = sysctl_values(check.desired)
        return persisted == want and (live is None or live == want)
    if check.kind == "handshake":
        return actual is not None and actual < HANDSHAKE_MAX_AGE_S
    if check.kind == "package":  # a Debian version against the pin's glob (570.86.15-*)
        return fnmatch.fnmatchcase(str(actual), check.desired)
    if check.kind == "peer":
        return actual is not None and sorted(actual) == sorted(check.desired)
    return actual == check.desired


def _mesh_checks(name: str, node: NodeState, state: DesiredState) -> tuple[list[Check], list[Check]]:
    """(local checks, checks that need peers too) for one node's mesh slice."""
    m = node["mesh"]
    assert m is not None
    iface, files, unit = m["interface"], node["layout"]["files"], node["layout"]["units"]["wireguard"]
    service = Check(name, "mesh", f"service {unit}", "service", "enabled, running", {"unit": unit})
    local = [
        service,
        _file_check(name, "mesh", files["wireguard_key"]),
        _file_check(name, "mesh", files["wireguard_conf"]),
        Check(name, "mesh", f"{iface} address", "interface_address", m["address"],
              {"interface": iface}, (service.id,)),
        Check(name, "mesh", f"{iface} mtu", "interface_mtu", m["mtu"], {"interface": iface}, (service.id,)),
    ]  # fmt: skip
    remote = []
    for p in m["peers"]:
        peer = p["name"]
        local.append(
            Check(name, "mesh", f"peer {peer}", "peer", p["allowed_ips"],
                  {"interface": iface, "peer": peer}, (service.id,))
        )  # fmt: skip
        peer_node = state["nodes"].get(peer)
        peer_mesh = peer_node["mesh"] if peer_node else None
        if not peer_node or not peer_mesh:
            continue
        # Both ends' services and both ends' entries for each other.
        needs = (
            service.id,
            f"{peer}/mesh/service {peer_node['layout']['units']['wireguard']}",
            f"{name}/mesh/peer {peer}",
            f"{peer}/mesh/peer {name}",
        )
        address = peer_mesh["address"].split("/")[0]
        remote.append(
            Check(name, "mesh", f"handshake {peer}", "handshake", f"< {HANDSHAKE_MAX_AGE_S} s",
                  {"interface": iface, "peer": peer}, needs)
        )  # fmt: skip
        remote.append(
            Check(name, "mesh", f"ping {peer} {address}", "ping", "reply",
                  {"interface": iface, "address": address, "behind_nat": bool(p["persistent_keepalive_s"])},
                  needs)
        )  # fmt: skip
    return local, remote


def checks_for(state: DesiredState, nodes: list[str] | None = None) -> list[Check]:
    """Every check for ``nodes`` (default all) of ``desired_state()``'s result, in run order:
    each node's own state first, then pings (from nodes behind NAT first: their traffic
    re-opens the tunnels that peers without an endpoint wait for), then handshakes."""
    local: list[Check] = []
    remote: list[Check] = []
    for name, node in state["nodes"].items():
        if nodes is not None and name not in nodes:
            continue
        h, files, units = node["host"], node["layout"]["files"], node["layout"]["units"]
        if h:
            sysctl_conf = files["sysctl_conf"]
            local.append(_file_check(name, "host", sysctl_conf))
            keys = list(h["sysctls"])
            for key, value in h["sysctls"].items():
                args = {"key": key, "all_keys": keys, "path": sysctl_conf["path"]}
                local.append(Check(name, "host", f"sysctl {key}", "sysctl", value, args))
            for item in h["sysfs"]:
                args = {**item, "tmpfiles": files["tmpfiles_conf"]["path"]}
                local.append(Check(name, "host", item["name"], "sysfs", item["value"], args))
        g = node["gpu"]
        if g and g["backend"] == "nvml" and g["driver"]:
            # The resolver's pin glob (570.86.15-*): Debian versions carry a revision.
            pin = g["driver"]["apt_version"]
            local.append(
                Check(name, "drivers", "package nvidia-driver", "package", pin, {"package": "nvidia-driver"})
            )
            unit = units["persistenced"]
            local.append(Check(name, "drivers", f"service {unit.removesuffix('.service')}", "service",
                               "enabled, running", {"unit": unit}))  # fmt: skip
        if g:
            unit = units["gpu_apply"]
            local.append(Check(name, "gpu", f"service {unit}", "service", "enabled", {"unit": unit}))
            for dev in g["devices"]:
                for key, value in sorted(dev["settings"].items()):
                    if key == "mig":
                        value = {"enabled": value["enabled"]}
                    local.append(Check(name, "gpu", f"gpu{dev['index']} {key}", "gpu", value,
                                       {"index": dev["index"], "setting": key,
                                        "code": files["gpu_code"]["path"]}))  # fmt: skip
        if node["mesh"]:
            mine, theirs = _mesh_checks(name, node, state)
            local += mine
            remote += theirs
    # Pings first: their traffic is what makes peers without keepalive handshake at all.
    pings = sorted((c for c in remote if c.kind == "ping"), key=lambda c: not c.args["behind_nat"])
    handshakes = [c for c in remote if c.kind == "handshake"]
    return local + pings + handshakes
