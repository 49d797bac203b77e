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
from ..resolve.layers import NAMES, removed_files
from ..resolve.packages import packages
from ..resolve.types import DesiredState, ManagedPath, NodeState

LAYERS = NAMES  # the registry's order (resolve/layers.py)
# WireGuard re-keys every 2 minutes while traffic flows (REKEY_AFTER_TIME, 120 s): a
# handshake older than 3 minutes means the peer is not talking.
HANDSHAKE_MAX_AGE_S = 180
# A scratch filesystem must offer at least this share of its devices' size (mkfs overhead:
# xfs's log and metadata take a few percent).
SCRATCH_MIN_FILL = 0.9


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
    if check.kind == "package":  # a Debian version against the pin's glob (570.86.15-*, or * for any)
        return actual != "absent" and fnmatch.fnmatchcase(str(actual), check.desired)
    if check.kind == "peer":
        return actual is not None and sorted(actual) == sorted(check.desired)
    if check.kind in ("conf_keys", "json_keys"):
        return actual == sorted(check.desired)
    if check.kind == "mount":  # the declared options, and discard exactly where TRIM works
        if not isinstance(actual, dict):
            return False
        want = check.desired
        return (
            actual["fstype"] == want["fstype"]
            and actual["label"] == want["label"]
            and set(want["options"]) <= set(actual["options"])
            and ("discard" in actual["options"]) == actual["discard_supported"]
        )
    if check.kind == "fstab":
        return (
            isinstance(actual, dict)
            and actual["spec"] == check.desired["spec"]
            and set(check.desired["options"]) <= set(actual["options"])
        )
    if check.kind == "ray_member":  # alive, with at least the declared resources and labels
        if not isinstance(actual, dict):
            return False
        want = check.desired
        return (
            actual["state"] == want["state"]
            and all(actual["resources"].get(k) == v for k, v in want["resources"].items())
            and all(actual["labels"].get(k) == v for k, v in want["labels"].items())
        )
    if check.kind == "space":  # the filesystem spans the devices (less its own overhead) and has room
        return (
            isinstance(actual, dict)
            and actual["size_bytes"] >= SCRATCH_MIN_FILL * check.args["size_gib"] * 2**30
            and actual["avail_bytes"] > 0
        )
    return actual == check.desired


def _absent(name: str, layer: str, path: ManagedPath) -> Check:
    """The project's file at ``path`` must not exist: nothing declared needs it."""
    return Check(name, layer, f"absent {path['path']}", "absent", "absent", {"path": path["path"]})


def _removed(name: str, node: NodeState, layer: str) -> list[Check]:
    """What ``layer`` removes on this node (the registry's :func:`removed_files`) is absent."""
    files = node["layout"]["files"]
    return [_absent(name, layer, files[f]) for f in removed_files(node, layer)]


def _ray_checks(name: str, node: NodeState, state: DesiredState) -> tuple[list[Check], list[Check]]:
    """Ray: the units; every port a Ray process listens on kept off the underlay; one port
    closed from another node's underlay yet open over the mesh; and, read from the head,
    the node alive in the cluster with its resources and labels. Outside the Ray cluster:
    none of the layer's units."""
    files, units = node["layout"]["files"], node["layout"]["units"]
    r = node["ray"]
    if not r:
        return _removed(name, node, "ray"), []
    unit = units[f"ray_{r['role']}"]
    # Ray's unit requires the mesh's (systemd stops it with wg-quick): a stopped mesh is one
    # fault, and Ray's service is then blocked by it, not a second drift.
    mesh = (f"{name}/mesh/service {units['wireguard']}",) if node["mesh"] else ()
    service = Check(name, "ray", f"service {unit}", "service", "enabled, running", {"unit": unit}, mesh)
    firewall = Check(name, "ray", f"service {units['ray_firewall']}", "service", "enabled, running",
                     {"unit": units["ray_firewall"]})  # fmt: skip
    local = [
        firewall,
        service,
        Check(name, "ray", "ports off the underlay", "ray_exposed", [],
              {"firewall": r["firewall"], "node_ip": r["node_ip"]}, (service.id, firewall.id)),
    ]  # fmt: skip
    head = next(n for n, s in state["nodes"].items() if s["ray"] and s["ray"]["role"] == "head")
    head_unit = units["ray_head"]
    resources = {"GPU": float(r["num_gpus"]), **{k: float(v) for k, v in r["resources"].items()}}
    head_ray = state["nodes"][head]["ray"]
    assert head_ray is not None  # the head is in the Ray cluster
    remote = [
        Check(name, "ray", "alive in the cluster", "ray_member",
              {"state": "ALIVE", "resources": resources, "labels": r["labels"]},
              {"on": head, "node_ip": r["node_ip"], "dashboard": head_ray["dashboard"],
               "venv": files["ray_venv"]["path"], "token": files["ray_auth_token"]["path"]},
              (service.id, f"{head}/ray/service {head_unit}")),
    ]  # fmt: skip
    # From another node of the cluster: the underlay address answers nothing on Ray's port,
    # the mesh address does.
    other = next((n for n, s in sorted(state["nodes"].items()) if n != name and s["ray"]), None)
    if other:
        port = r["ports"]["node_manager"]
        for path, address, want in (("underlay", node["address"], "closed"), ("mesh", r["node_ip"], "open")):
            remote.append(Check(name, "ray", f"port {port} from {other} over the {path}", "tcp_port", want,
                                {"on": other, "address": address, "port": port}, (service.id,)))  # fmt: skip
    return local, remote


def _storage_checks(name: str, node: NodeState) -> list[Check]:
    """Scratch: the array (RAID 0), the filesystem mounted by label with its options, the
    fstab line, size and free space; or, without scratch, no record of one."""
    if not node["storage"]:
        return _removed(name, node, "storage")
    s = node["storage"]["scratch"]
    path = s["mount_path"]
    mounted = Check(name, "storage", f"mount {path}", "mount",
                    {"fstype": s["filesystem"], "label": s["label"], "options": s["mount_options"],
                     "discard": "where the device supports TRIM"},
                    {"path": path, "target": s["target"]})  # fmt: skip
    checks = [
        mounted,
        Check(name, "storage", f"fstab {path}", "fstab",
              {"spec": f"LABEL={s['label']} {path} {s['filesystem']}", "options": s["mount_options"]},
              {"path": path}),
        Check(name, "storage", f"space {path}", "space",
              f">= {SCRATCH_MIN_FILL:.0%} of {s['size_gib']} GiB, not full",
              {"path": path, "size_gib": s["size_gib"]}, (mounted.id,)),
    ]  # fmt: skip
    if s["array"]:
        checks.insert(0, Check(name, "storage", f"array {s['array']}", "array", sorted(s["devices"]),
                               {"array": s["array"]}))  # fmt: skip
    return checks + _tool_checks(name, "storage", packages("storage_tools"))


def _tool_checks(name: str, layer: str, tools: list[str]) -> list[Check]:
    """The measurement tools a layer installs (`swarm metrics run` needs them): any version."""
    return [Check(name, layer, f"package {t}", "package", "*", {"package": t}) for t in tools]


def _mesh_checks(name: str, node: NodeState, state: DesiredState) -> tuple[list[Check], list[Check]]:
    """(local checks, checks that need peers too) for one node's mesh slice."""
    m = node["mesh"]
    assert m is not None
    iface, files, unit = m["interface"], node["layout"]["files"], node["layout"]["units"]["wireguard"]
    service = Check(name, "mesh", f"service {unit}", "service", "enabled, running", {"unit": unit})
    peers_file = files["wireguard_peers"]
    local = [
        service,
        _file_check(name, "mesh", files["wireguard_key"]),
        _file_check(name, "mesh", files["wireguard_conf"]),
        # Only declared peers' public keys are kept (a removed node's key goes too).
        Check(name, "mesh", f"peers in {peers_file['path']}", "json_keys",
              sorted(p["name"] for p in m["peers"]), {"path": peers_file["path"]}),
        Check(name, "mesh", f"{iface} address", "interface_address", m["address"],
              {"interface": iface}, (service.id,)),
        Check(name, "mesh", f"{iface} mtu", "interface_mtu", m["mtu"], {"interface": iface}, (service.id,)),
        *_tool_checks(name, "mesh", packages("mesh_tools")),
    ]  # fmt: skip
    # Forwarding on relays and hubs in use, and off (its file gone) everywhere else.
    mesh_conf = files["mesh_sysctl_conf"]
    if m["sysctls"]:
        keys = list(m["sysctls"])
        for key, value in m["sysctls"].items():
            args = {"key": key, "all_keys": keys, "path": mesh_conf["path"]}
            local.append(Check(name, "mesh", f"sysctl {key}", "sysctl", value, args))
    else:
        local.append(_absent(name, "mesh", mesh_conf))
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
        # No HostProfile: none of its files, so no value the project set; no package cache:
        # none of its files.
        local += _removed(name, node, "host")
        cache = node["package_cache"]
        if cache:
            detect = files["apt_cache_detect"]
            local.append(_file_check(name, "host", detect))
            # What apt asks before each http fetch: the site's cache while it answers.
            needs = (f"{name}/host/file {detect['path']}",)
            local.append(Check(name, "host", "apt uses the site's package cache", "apt_proxy",
                               cache["apt_proxy"], {"detect": detect["path"]}, needs))  # fmt: skip
        if h:
            sysctl_conf = files["sysctl_conf"]
            local.append(_file_check(name, "host", sysctl_conf))
            keys = list(h["sysctls"])
            # Exactly the declared keys: one removed from the profile is gone from the file too.
            local.append(Check(name, "host", f"keys of {sysctl_conf['path']}", "conf_keys", sorted(keys),
                               {"path": sysctl_conf["path"]}))  # fmt: skip
            value: Any  # a sysctl's value here, a GPU setting's below (JSON data)
            for key, value in h["sysctls"].items():
                args: dict[str, Any] = {"key": key, "all_keys": keys, "path": sysctl_conf["path"]}
                local.append(Check(name, "host", f"sysctl {key}", "sysctl", value, args))
            for item in h["sysfs"]:
                args = {**item, "tmpfiles": files["tmpfiles_conf"]["path"]}
                local.append(Check(name, "host", item["name"], "sysfs", item["value"], args))
        g = node["gpu"]
        if g and g["backend"] == "nvml" and g["driver"]:
            # The resolver's pin glob (570.86.15-*): Debian versions carry a revision. Every
            # package of the declared source's pinned set, Fabric Manager included.
            pin = g["driver"]["apt_version"]
            for package in g["driver"]["packages"]:
                local.append(
                    Check(name, "drivers", f"package {package}", "package", pin, {"package": package})
                )
            for key in ("persistenced", *(("fabricmanager",) if g["driver"]["fabric_manager"] else ())):
                unit = units[key]
                local.append(Check(name, "drivers", f"service {unit.removesuffix('.service')}", "service",
                                   "enabled, running", {"unit": unit}))  # fmt: skip
            # The drivers layer's pending-reboot marker: a driver installed but not running yet.
            marker = files["reboot_required"]["path"]
            local.append(
                Check(name, "drivers", f"pending reboot ({marker})", "absent", "absent", {"path": marker})
            )
        if not g:  # no GPUs: none of the GPU layer's files
            local += _removed(name, node, "gpu")
        if g:
            unit = units["gpu_apply"]
            local.append(Check(name, "gpu", f"service {unit}", "service", "enabled", {"unit": unit}))
            for dev in g["devices"]:
                for key, value in sorted(dev["settings"].items()):
                    args = {"index": dev["index"], "setting": key, "code": files["gpu_code"]["path"]}
                    if key == "mig":
                        local.append(Check(name, "gpu", f"gpu{dev['index']} mig", "gpu",
                                           {"enabled": value["enabled"]}, args))  # fmt: skip
                        if value["enabled"]:
                            geometry = {**args, "setting": "mig_geometry"}
                            local.append(Check(name, "gpu", f"gpu{dev['index']} mig geometry", "gpu",
                                               sorted(value["profiles"]), geometry))  # fmt: skip
                        continue
                    local.append(Check(name, "gpu", f"gpu{dev['index']} {key}", "gpu", value, args))
        local += _storage_checks(name, node)
        if node["mesh"]:
            mine, theirs = _mesh_checks(name, node, state)
            local += mine
            remote += theirs
        # After the mesh: Ray's checks are blocked by a mesh that drifted.
        ray_local, ray_remote = _ray_checks(name, node, state)
        local += ray_local
        remote += ray_remote
    # Pings first: their traffic is what makes peers without keepalive handshake at all.
    pings = sorted((c for c in remote if c.kind == "ping"), key=lambda c: not c.args["behind_nat"])
    handshakes = [c for c in remote if c.kind == "handshake"]
    return local + pings + handshakes
