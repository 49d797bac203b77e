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

LAYERS = ("host", "drivers", "gpu", "mesh")
# WireGuard re-keys every 2 minutes while traffic flows (REKEY_AFTER_TIME, 120 s): a
# handshake older than 3 minutes means the peer is not talking.
HANDSHAKE_MAX_AGE_S = 180
SYSCTL_FILE = "/etc/sysctl.d/90-swarm.conf"
TMPFILES_FILE = "/etc/tmpfiles.d/swarm-host-tuning.conf"
GPU_UNIT = "swarm-gpu-apply.service"
WIREGUARD_DIR = "/etc/wireguard"


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
    """A sysctl value as a list of fields: ``sysctl -n`` separates multi-value keys with
    tabs, sysctl.d files with spaces, the NodeState with a list. Compare these lists."""
    if isinstance(value, list):
        return [str(v) for v in value]
    return str(value).split()


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


def _mesh_checks(name: str, node: dict[str, Any], state: dict[str, Any]) -> tuple[list[Check], list[Check]]:
    """(local checks, checks that need peers too) for one node's mesh slice."""
    m = node["mesh"]
    iface = m["interface"]
    service = Check(name, "mesh", f"service wg-quick@{iface}", "service", "enabled, running",
                    {"unit": f"wg-quick@{iface}"})  # fmt: skip
    local = [
        service,
        Check(name, "mesh", f"file {WIREGUARD_DIR}/{iface}.key", "file", "root:root 0600",
              {"path": f"{WIREGUARD_DIR}/{iface}.key"}),
        Check(name, "mesh", f"file {WIREGUARD_DIR}/{iface}.conf", "file", "root:root 0600",
              {"path": f"{WIREGUARD_DIR}/{iface}.conf"}),
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
        peer_mesh = state["nodes"].get(peer, {}).get("mesh")
        if not peer_mesh:
            continue
        # Both ends' services and both ends' entries for each other.
        needs = (
            service.id,
            f"{peer}/mesh/service wg-quick@{peer_mesh['interface']}",
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


def checks_for(state: dict[str, Any], nodes: list[str] | None = None) -> list[Check]:
    """Every check for ``nodes`` (default all) of ``desired_state()``'s result, in run order:
    each node's own state first, then pings (from nodes behind NAT first: their traffic
    re-opens the tunnels that peers without an endpoint wait for), then handshakes."""
    local: list[Check] = []
    remote: list[Check] = []
    for name, node in state["nodes"].items():
        if nodes is not None and name not in nodes:
            continue
        h = node["host"]
        if h:
            local.append(
                Check(name, "host", f"file {SYSCTL_FILE}", "file", "root:root 0644", {"path": SYSCTL_FILE})
            )
            keys = list(h["sysctls"])
            for key, value in h["sysctls"].items():
                local.append(
                    Check(name, "host", f"sysctl {key}", "sysctl", value, {"key": key, "all_keys": keys})
                )
            for item in h["sysfs"]:
                local.append(Check(name, "host", item["name"], "sysfs", item["value"], item))
        g = node["gpu"]
        if g and g["backend"] == "nvml" and g["driver"]:
            d = g["driver"]
            local.append(
                Check(
                    name,
                    "drivers",
                    "package nvidia-driver",
                    "package",
                    d["version"] or f"{d['branch']}.*",
                    {"package": "nvidia-driver"},
                )
            )
            local.append(Check(name, "drivers", "service nvidia-persistenced", "service", "enabled, running",
                               {"unit": "nvidia-persistenced"}))  # fmt: skip
        if g:
            local.append(Check(name, "gpu", f"service {GPU_UNIT}", "service", "enabled", {"unit": GPU_UNIT}))
            for dev in g["devices"]:
                for key, value in sorted(dev["settings"].items()):
                    if key == "mig":
                        value = {"enabled": value["enabled"]}
                    local.append(Check(name, "gpu", f"gpu{dev['index']} {key}", "gpu", value,
                                       {"index": dev["index"], "setting": key}))  # fmt: skip
        if node["mesh"]:
            mine, theirs = _mesh_checks(name, node, state)
            local += mine
            remote += theirs
    # Pings first: their traffic is what makes peers without keepalive handshake at all.
    pings = sorted((c for c in remote if c.kind == "ping"), key=lambda c: not c.args["behind_nat"])
    handshakes = [c for c in remote if c.kind == "handshake"]
    return local + pings + handshakes
