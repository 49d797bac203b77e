"""What verification checks on each node, derived from the resolved NodeState.

``checks_for(state)`` turns ``desired_state()`` into a flat, ordered list of ``Check``s.
``tests/verify`` (testinfra) reads the actual value of each one on its node and compares
it here (``matches``); ``swarm verify`` turns failures into the drift report. The expected
values are never written down a second time: they are the NodeState's.

Layers: ``host`` (sysctls, sysfs tuning, the sysctl.d file), ``drivers`` (NVIDIA packages
and nvidia-persistenced, only where the GPU backend is real NVML), ``gpu`` (each GPU
setting, read back through the node-side GPU code, and the boot-time re-apply unit),
``mesh`` (wg-quick service, key and configuration modes, interface address and MTU; per
node one ``peers on wg0`` check that judges every peer from one read of ``wg show wg0
dump``: AllowedIPs, handshake age, transfer counters (:func:`judge_peers`); and pings of a
sample of mesh paths only, :func:`swarm_infra.resolve.mesh.ping_sample`: each node to its
site's representative, representatives across sites). The number of checks, and of
commands run on nodes, grows linearly with the fleet (with the number of sites squared
for the pings between representatives).

Checks that depend on others (``requires``: check ids) are reported as blocked, not as
drift, when one of those failed: a stopped ``wg-quick@wg0`` is one drifted item, not
twenty failed pings, and a removed peer is one line of the node's peers check.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..nodeside.facts import sysctl_fields
from ..resolve.host import sysctl_text
from ..resolve.layers import NAMES, removed_files
from ..resolve.mesh import ping_sample
from ..resolve.packages import packages
from ..resolve.types import DesiredState, ManagedPath, MeshState, NodeState, PeerState

LAYERS = NAMES  # the registry's order (resolve/layers.py)
# WireGuard's timers (wireguard-go device/constants.go RejectAfterTime, RekeyTimeout; the
# kernel's drivers/net/wireguard/messages.h has the same values): a session's keys expire
# 180 s after its handshake, and a packet sent after that starts a new handshake, retried
# every 5 s.
HANDSHAKE_MAX_AGE_S = 180
REKEY_TIMEOUT_S = 5
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
    if check.kind == "wg_peers":  # what judge_peers found wrong, by peer: nothing
        return actual == {}
    if check.kind == "package":  # a Debian version against the pin's glob (570.86.15-*, or * for any)
        return actual != "absent" and fnmatch.fnmatchcase(str(actual), check.desired)
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
            # A node's resources reach the raylet without those of quantity 0 (Ray 2.60.0,
            # python/ray/_private/resource_and_label_spec.py, to_resource_dict): the head's
            # GPU 0 is no GPU entry.
            and all(actual["resources"].get(k, 0.0) == v for k, v in want["resources"].items())
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
    """Ray: the units (and, on a head serving pull workers, the token socket); every port a
    Ray process listens on kept off the underlay; one port closed from another node's
    underlay yet open over the mesh; and, read from the head, the node alive in the cluster
    with its resources and labels. Outside the Ray cluster: none of the layer's units."""
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
    exposed = Check(name, "ray", "ports off the underlay", "ray_exposed", [],
                    {"firewall": r["firewall"], "node_ip": r["node_ip"]},
                    (service.id, firewall.id))  # fmt: skip
    local = [firewall, service, exposed]
    if r["firewall"]["token_port"] is not None:
        # A head serving pull workers: the socket they read the cluster's token from (after
        # the firewall that admits only them). Not probed: a connection is handed the token.
        sock = units["ray_token_socket"]
        local.append(Check(name, "ray", f"socket {sock}", "service", "enabled, running", {"unit": sock},
                           (firewall.id,)))  # fmt: skip
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
              tuple(dict.fromkeys((service.id, f"{head}/ray/service {head_unit}",
                                   *_mesh_path(state, name, head))))),  # the head: its own once
    ]  # fmt: skip
    # From another node of the cluster, the next one by name round the cluster (each node
    # runs one node's two probes; the first node by name ran them all, one by one): the
    # underlay address answers nothing on Ray's port, the mesh address does. The underlay
    # probe waits on this node's firewall checks (a stopped or leaky firewall is their drift
    # line), the mesh probe on the mesh path.
    cluster = sorted(n for n, s in state["nodes"].items() if s["ray"])
    other = cluster[(cluster.index(name) + 1) % len(cluster)]
    if other != name:
        port = r["ports"]["node_manager"]
        # The prober's Ray service too: a lost prober is its own drift, not this node's.
        other_ray = state["nodes"][other]["ray"]
        assert other_ray is not None  # in the cluster
        prober = f"{other}/ray/service {units['ray_' + other_ray['role']]}"
        underlay = (service.id, firewall.id, exposed.id, prober)
        for path, address, want, needs in (
            ("underlay", node["address"], "closed", underlay),
            ("mesh", r["node_ip"], "open", (service.id, prober, *_mesh_path(state, other, name))),
        ):
            remote.append(Check(name, "ray", f"port {port} from {other} over the {path}", "tcp_port", want,
                                {"on": other, "address": address, "port": port}, needs))  # fmt: skip
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


def kept_alive_max_age_s(keepalive_s: int) -> int:
    """The oldest a link's latest handshake gets (s) while PersistentKeepalive sends every
    ``keepalive_s`` seconds without other traffic: the keepalive that first finds the
    session's keys expired (wireguard-go device/constants.go RejectAfterTime, 180 s; send.go
    starts a handshake when no current keypair is valid) starts a new handshake, which
    completes within a retry (RekeyTimeout, 5 s). The initiator re-keys earlier
    (receive.go keepKeyFreshReceiving: after RejectAfterTime - KeepaliveTimeout -
    RekeyTimeout on receiving; send.go keepKeyFreshSending: after RekeyAfterTime, 120 s)."""
    return HANDSHAKE_MAX_AGE_S + keepalive_s + REKEY_TIMEOUT_S


def _service_id(state: DesiredState, node: str) -> str:
    """The id of ``node``'s WireGuard service check."""
    return f"{node}/mesh/service {state['nodes'][node]['layout']['units']['wireguard']}"


def _mesh_path(state: DesiredState, *ends: str) -> tuple[str, ...]:
    """The check ids a path over the mesh between ``ends`` needs: each meshed end's tunnel
    service and peers check (a drifted peer is its one drift line, not a ping's or a Ray
    probe's too)."""
    needs: list[str] = []
    for n in dict.fromkeys(ends):
        mesh = state["nodes"][n]["mesh"]
        if mesh:
            needs += [_service_id(state, n), f"{n}/mesh/peers on {mesh['interface']}"]
    return tuple(needs)


def _mesh_address(node: NodeState) -> str:
    assert node["mesh"] is not None
    return node["mesh"]["address"].split("/")[0]


def judge_peers(
    declared: Mapping[str, Mapping[str, Any]],
    dump: Mapping[str, Mapping[str, Any]],
    now: int,
    key_of: Callable[[str], str | None],
    skip: Collection[str] = (),
    own: tuple[str | None, str | None] = (None, None),
) -> dict[str, str]:
    """What is wrong with each peer of one interface, from one read of its ``wg show dump``.

    ``declared``: peer name -> ``{"allowed_ips": [CIDR], "max_age_s": int | None, ...}``
    (the ``wg_peers`` check's ``args["peers"]``; ``"public_key"``: the peer's key as the
    fleet records it, its Node ``spec.mesh.public_key``, or None); ``dump``:
    :func:`nodeside.facts.wg_dump` of the node's interface; ``now``: the node's clock (s since
    the epoch) read with the dump; ``key_of``: the key a peer holds, read from the peer
    itself (None: unreadable), asked only for peers whose key the fleet does not record;
    ``skip``: peers not to judge (their own tunnel's check drifted: that is their one drift
    line); ``own``: (the node's own key as the fleet records it, the key its interface
    presents in the dump), either None when unknown. Returns ``{peer name: problem}``, only
    for peers with a problem (and ``"undeclared <key>"`` for a peer the interface has that
    the fleet does not declare, when every declared peer's key is known; ``"own key"`` when
    the interface presents another key than the fleet records for the node); ``{}`` when
    all is well.

    Where the fleet records a key it is the authority (DESIGN.md, trust model: a node is
    trusted with itself only): a peer is judged by its recorded key, never by what the
    peer node says it holds, so a node that presents another key is drift (on that node,
    ``own``; on its peers, the recorded key is not the one that answers) and not silently
    learnt.

    A peer declared with ``"controller": True`` (Mesh ``spec.controller``) is judged on its
    presence and AllowedIPs only: the operator's controller comes and goes.

    Problems: not a peer of the interface; AllowedIPs other than declared; where a recent
    handshake is expected (``max_age_s``: PersistentKeepalive keeps the link talking) none
    yet, or one older than ``max_age_s``; on any other link (it may be idle: WireGuard
    handshakes only when there is traffic) bytes sent and none ever received (the peer
    never answered: a wrong key or endpoint, a firewall, a node that is down).
    """
    problems: dict[str, str] = {}
    known: set[str] = set()
    unknown = False  # a declared peer's key is unknown: no dump entry can be called undeclared
    recorded, presented = own
    if recorded is not None and presented != recorded:
        problems["own key"] = (
            f"the interface presents public key {presented or '(unreadable)'}, the fleet records {recorded}"
        )
    for name, want in sorted(declared.items()):
        key = want.get("public_key") or key_of(name)
        if key is None:
            unknown = True
            if name not in skip:
                problems[name] = "its public key could not be read on the node"
            continue
        known.add(key)
        if name in skip:
            continue
        entry = dump.get(key)
        if entry is None:
            problems[name] = "not a peer of the interface"
            continue
        allowed, wanted = sorted(entry["allowed_ips"]), sorted(want["allowed_ips"])
        if allowed != wanted:
            problems[name] = f"AllowedIPs {','.join(allowed) or '(none)'}, declared {','.join(wanted)}"
            continue
        if want.get("controller"):
            continue  # the fleet does not converge the controller: it may be down, not drift
        shake, rx, tx = entry["latest_handshake"], entry["rx_bytes"] or 0, entry["tx_bytes"] or 0
        max_age = want["max_age_s"]
        if max_age is not None:
            if not shake:
                problems[name] = f"no handshake yet (sent {tx} B, received {rx} B)"
            elif now - shake > max_age:
                problems[name] = f"latest handshake {now - shake} s ago (at most {max_age} s expected)"
        elif tx and not rx:
            problems[name] = f"sent {tx} B, received nothing: the peer never answered"
    for key in [] if unknown else sorted(set(dump) - known):
        problems[f"undeclared {key}"] = "a peer of the interface that the fleet does not declare"
    return problems


def _mesh_checks(
    name: str, node: NodeState, fresh: Mapping[str, int], state: DesiredState
) -> tuple[list[Check], Check]:
    """(local checks, the ``wg_peers`` check) for one node's mesh slice. ``fresh``: peer ->
    the most seconds its latest handshake may be old (links kept alive)."""
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
    # Each peer with its own tunnel's check: a peer whose tunnel is down is not judged.
    declared = {
        p["name"]: {
            "allowed_ips": p["allowed_ips"],
            "max_age_s": fresh.get(p["name"]),
            "public_key": p["public_key"],
            "service": _service_id(state, p["name"]) if p["name"] in state["nodes"] else None,
            # The one peer that is not a node: the controller (resolve.mesh.controller_peer).
            "controller": p["name"] not in state["nodes"],
        }
        for p in m["peers"]
    }
    peers = Check(name, "mesh", f"peers on {iface}", "wg_peers",
                  f"{len(declared)} peer(s) with the declared AllowedIPs; a recent handshake where the "
                  "link is kept alive; no peer that sends and never hears back",
                  {"interface": iface, "peers": declared, "public_key": m["public_key"]},
                  (service.id,))  # fmt: skip
    return local, peers


def _mesh_sample(
    state: DesiredState, nodes: list[str] | None
) -> tuple[list[Check], dict[str, dict[str, int]]]:
    """The pings of :func:`ping_sample` whose source is in ``nodes`` (all when None), and for
    every node, the peers whose latest handshake must be recent and how recent (s): those
    of links kept alive (:func:`kept_alive_max_age_s`). A link the sample pings needs no
    such rule (its ping's reply says more); any other may be idle."""
    meshes: dict[str, MeshState] = {n: s["mesh"] for n, s in state["nodes"].items() if s["mesh"]}
    # A spoke's only peer is its hub, routing the whole mesh CIDR: that hub represents the site.
    hubs = {
        state["nodes"][n]["site"]: m["peers"][0]["name"] for n, m in meshes.items() if _is_spoke(m["peers"])
    }
    natted = {n for n, m in meshes.items() if any(p["persistent_keepalive_s"] for p in m["peers"])}
    keepalive = {(n, p["name"]): p["persistent_keepalive_s"] for n, m in meshes.items() for p in m["peers"]}
    fresh: dict[str, dict[str, int]] = {n: {} for n in meshes}
    for (n, peer), seconds in keepalive.items():
        # Either end's keepalive keeps the link's handshakes coming, for both ends.
        seconds = max(seconds, keepalive.get((peer, n), 0))
        if seconds and peer in meshes:
            fresh[n][peer] = kept_alive_max_age_s(seconds)
    pings: list[Check] = []
    for src, dst in ping_sample({n: state["nodes"][n]["site"] for n in meshes}, hubs, natted):
        if nodes is not None and src not in nodes:
            continue
        # Both ends' tunnels and peers: a removed peer is one drift, not a failed ping too.
        needs = _mesh_path(state, src, dst)
        address = _mesh_address(state["nodes"][dst])
        args = {"interface": meshes[src]["interface"], "address": address, "behind_nat": src in natted}
        pings.append(Check(src, "mesh", f"ping {dst} {address}", "ping", "reply", args, needs))
    return pings, fresh


def _is_spoke(peers: list[PeerState]) -> bool:
    """A node whose only peer routes more than one address (its hub: the whole mesh CIDR)."""
    return len(peers) == 1 and any(not c.endswith("/32") for c in peers[0]["allowed_ips"])


def check_waves(state: DesiredState, nodes: list[str] | None = None) -> list[list[Check]]:
    """Every check for ``nodes`` (default all) of ``desired_state()``'s result, in waves: a
    check needs only checks of earlier waves, or earlier checks of its own wave read on the
    same node (``args["on"]``, else its node), so each node's checks of a wave may run
    one after another while the nodes run at once (verify/runner.py).

    1. each node's own state, layer by layer in the registry's order (host, drivers, gpu,
       storage, mesh, ray);
    2. each node's peers, judged from its ``wg show dump`` (after every node's ``wg-quick``
       check: a peer whose tunnel is down is not judged, :func:`judge_peers`);
    3. the sample's pings (from nodes behind NAT first), each blocked when either end's
       service or peers drifted: a removed peer is one drift, not a failed ping too; then
       Ray's checks from other nodes (alive in the head's state API, a port closed over the
       underlay and open over the mesh), blocked likewise by the node's own Ray checks and
       the mesh path they cross.
    """
    local: list[Check] = []
    remote: list[Check] = []
    wg_peers: list[Check] = []
    pings, fresh = _mesh_sample(state, nodes)
    for name, node in state["nodes"].items():
        if nodes is not None and name not in nodes:
            continue
        local += _host_checks(name, node)
        local += _driver_checks(name, node)
        local += _gpu_checks(name, node)
        local += _storage_checks(name, node)
        if node["mesh"]:
            mine, peers = _mesh_checks(name, node, fresh[name], state)
            local += mine
            wg_peers.append(peers)
        # After the mesh: Ray's checks are blocked by a mesh that drifted.
        ray_local, ray_remote = _ray_checks(name, node, state)
        local += ray_local
        remote += ray_remote
    # From nodes behind NAT first: their traffic re-opens the tunnels that peers without an
    # endpoint wait for.
    pings.sort(key=lambda c: not c.args["behind_nat"])
    return [local, wg_peers, pings + remote]


def _host_checks(name: str, node: NodeState) -> list[Check]:
    """The host layer on ``node``: the site's package cache (its detect script's file, and
    apt asking the cache through it), the HostProfile's sysctl.d file with exactly the
    declared keys, each sysctl and each sysfs item; without a profile or a cache, none of
    their files."""
    h, files = node["host"], node["layout"]["files"]
    # No HostProfile: none of its files, so no value the project set; no package cache:
    # none of its files.
    out = _removed(name, node, "host")
    cache = node["package_cache"]
    if cache:
        detect = files["apt_cache_detect"]
        out.append(_file_check(name, "host", detect))
        # What apt asks before each http fetch: the site's cache while it answers.
        needs = (f"{name}/host/file {detect['path']}",)
        out.append(Check(name, "host", "apt uses the site's package cache", "apt_proxy",
                         cache["apt_proxy"], {"detect": detect["path"]}, needs))  # fmt: skip
    if h:
        sysctl_conf = files["sysctl_conf"]
        out.append(_file_check(name, "host", sysctl_conf))
        keys = list(h["sysctls"])
        # Exactly the declared keys: one removed from the profile is gone from the file too.
        out.append(Check(name, "host", f"keys of {sysctl_conf['path']}", "conf_keys", sorted(keys),
                         {"path": sysctl_conf["path"]}))  # fmt: skip
        value: Any  # a sysctl's value (JSON data)
        for key, value in h["sysctls"].items():
            args: dict[str, Any] = {"key": key, "all_keys": keys, "path": sysctl_conf["path"]}
            out.append(Check(name, "host", f"sysctl {key}", "sysctl", value, args))
        for item in h["sysfs"]:
            args = {**item, "tmpfiles": files["tmpfiles_conf"]["path"]}
            out.append(Check(name, "host", item["name"], "sysfs", item["value"], args))
    return out


def _driver_checks(name: str, node: NodeState) -> list[Check]:
    """The drivers layer on ``node``, where its GPUs are real (NVML) and a driver is
    declared: every package of the source's pinned set at the pin, nvidia-persistenced (and
    Fabric Manager where declared) enabled and running, and no pending reboot; else none."""
    g = node["gpu"]
    if not (g and g["backend"] == "nvml" and g["driver"]):
        return []
    units = node["layout"]["units"]
    out: list[Check] = []
    # The resolver's pin glob (570.86.15-*): Debian versions carry a revision. Every
    # package of the declared source's pinned set, Fabric Manager included.
    pin = g["driver"]["apt_version"]
    for package in g["driver"]["packages"]:
        out.append(Check(name, "drivers", f"package {package}", "package", pin, {"package": package}))
    for key in ("persistenced", *(("fabricmanager",) if g["driver"]["fabric_manager"] else ())):
        unit = units[key]
        out.append(Check(name, "drivers", f"service {unit.removesuffix('.service')}", "service",
                         "enabled, running", {"unit": unit}))  # fmt: skip
    # The drivers layer's pending-reboot marker: a driver installed but not running yet.
    marker = node["layout"]["files"]["reboot_required"]["path"]
    out.append(Check(name, "drivers", f"pending reboot ({marker})", "absent", "absent", {"path": marker}))
    return out


def _gpu_checks(name: str, node: NodeState) -> list[Check]:
    """The gpu layer on ``node``: its boot-time apply unit enabled and each device's settings,
    read back through the node-side GPU code (MIG: its mode, and with MIG on its geometry,
    the sorted profiles); without GPUs, none of the layer's files."""
    g = node["gpu"]
    if not g:  # no GPUs: none of the GPU layer's files
        return _removed(name, node, "gpu")
    files, unit = node["layout"]["files"], node["layout"]["units"]["gpu_apply"]
    out = [Check(name, "gpu", f"service {unit}", "service", "enabled", {"unit": unit})]
    value: Any  # a GPU setting's value (JSON data)
    for dev in g["devices"]:
        for key, value in sorted(dev["settings"].items()):
            args = {"index": dev["index"], "setting": key, "code": files["gpu_code"]["path"]}
            if key == "mig":
                out.append(Check(name, "gpu", f"gpu{dev['index']} mig", "gpu",
                                 {"enabled": value["enabled"]}, args))  # fmt: skip
                if value["enabled"]:
                    geometry = {**args, "setting": "mig_geometry"}
                    out.append(Check(name, "gpu", f"gpu{dev['index']} mig geometry", "gpu",
                                     sorted(value["profiles"]), geometry))  # fmt: skip
                continue
            out.append(Check(name, "gpu", f"gpu{dev['index']} {key}", "gpu", value, args))
    return out


def checks_for(state: DesiredState, nodes: list[str] | None = None) -> list[Check]:
    """Every check for ``nodes`` (default all), in run order: :func:`check_waves`, one wave
    after another."""
    return [c for wave in check_waves(state, nodes) for c in wave]
