"""The text of every file the project writes on a node, decided once for both engines.

The Ansible roles write these strings (``swarm_file`` filter, ``plugins/filter/swarm.py``)
and the pyinfra deploys upload them (``swarm_infra.engines.pyinfra``), so a node converged
by either engine holds the same bytes and the other engine finds nothing to change. Each
function is pure: it takes NodeState (or a slice of it) and, where a file depends on what
only the nodes know (WireGuard public keys), that knowledge; it returns the file's whole
text, ending with a newline. Paths and modes are :mod:`.layout`'s.

Errors: a NodeState missing the slice a file needs raises ``KeyError``/``TypeError``; the
engines only ask for a layer's files where NodeState declares that layer.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast

from .keys import checked_keys, wireguard_key_problem
from .layers import AGENT_REMOVED, PACKAGE_CACHE_FILES, declared
from .layers import layer as registry
from .layout import AGENT_LOCAL
from .ray import client_env, config_env
from .types import LayoutState, ManagedPath, NodeState

# How long a Ray worker waits for the head's GCS port at start, before systemd retries (s).
RAY_HEAD_WAIT_S = 120
RAY_READY_WAIT_S = 120  # s: from ray start to its raylet listening
# Package-name globs (apt_preferences(5)) of everything that belongs to one NVIDIA driver
# version and must move with it: NVIDIA's Debian packages split the driver into these.
DRIVER_PINNED_PACKAGES = (
    "nvidia-* libnvidia-ml* libnvidia-cfg* libnvidia-gl* libnvidia-egl* libnvidia-encode* "
    "libnvidia-ptx* libnvidia-rtcore* libnvidia-nvvm* libnvidia-fbc* libnvidia-allocator* "
    "libnvidia-pkcs11* libcuda* cuda-drivers* firmware-nvidia-gsp xserver-xorg-video-nvidia "
    "libglx-nvidia* libegl-nvidia* libgles-nvidia* libgl1-nvidia*"
)


class UnsafeValue(ValueError):
    """A value that would change the structure of the file it is written into (a line
    break or another control character; in an INI-style file, a section header)."""


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def line_value(value: object, what: str) -> str:
    """``value`` as text for one line of a line-oriented file (wg-quick, systemd units,
    sysctl.d, tmpfiles.d, fstab, apt sources), checked here whatever the schema already
    refused: no line break or other control character can start a new line, section or
    directive. Raises :class:`UnsafeValue` naming ``what``."""
    text = str(value)
    bad = _CONTROL.search(text)
    if bad:
        shown = text[:60].encode("unicode_escape").decode("ascii")
        raise UnsafeValue(f"{what}: refusing to write {shown!r}: a control character ({bad.group()!r}) "
                          "would change the file's structure")  # fmt: skip
    return text


def _header(what: str) -> str:
    return f"# Managed by swarm ({what}). Changes here are overwritten.\n"


def _json(data: Any) -> str:
    return json.dumps(data, indent=4, sort_keys=True) + "\n"


# ---------------------------------------------------------------------------- tunables


def tunables_spec(node: NodeState, layer: str) -> dict[str, Any]:
    """What the node-side tunables code converges for ``layer`` (:mod:`swarm_infra.nodeside.
    tunables` SPEC): ``"host"``, the HostProfile's sysctls and sysfs values (none when the
    node has no profile: its files go and the recorded values come back); ``"mesh"``, the
    forwarding sysctls of relays and hubs. Each layer has its own sysctl.d file and record,
    so removing one never touches the other's keys.

    Raises ValueError for another ``layer``."""
    files = node["layout"]["files"]
    if layer == "host":
        host = node["host"]
        return {
            "sysctls": dict(host["sysctl_text"]) if host else {},
            "sysfs": [dict(i) for i in host["sysfs"]] if host else [],
            "sysctl_conf": files["sysctl_conf"]["path"],
            "tmpfiles_conf": files["tmpfiles_conf"]["path"],
            "record": files["host_tunables_record"]["path"],
            "label": f"HostProfile {host['profile'] if host else '(none)'}",
        }
    if layer == "mesh":
        mesh = node["mesh"]
        return {
            "sysctls": dict(mesh["sysctls"]) if mesh else {},
            "sysfs": [],
            "sysctl_conf": files["mesh_sysctl_conf"]["path"],
            "tmpfiles_conf": None,
            "record": files["mesh_tunables_record"]["path"],
            "label": "mesh forwarding",
        }
    raise ValueError(f"no tunables for layer {layer!r}")


# ----------------------------------------------------------------------- package cache


def apt_cache_detect(node: NodeState) -> str:
    """The program apt runs before each http fetch (apt.conf(5), ``Acquire::http::
    Proxy-Auto-Detect``, its argument the URI): it prints the site's package cache when the
    cache accepts a connection within 2 s, else ``DIRECT`` (the mirror itself), so a cache
    that is down costs a converge 2 s per fetch, not a failure."""
    cache = node["package_cache"]
    assert cache is not None
    host, port = line_value(cache["host"], "package cache host"), int(cache["port"])
    proxy = line_value(cache["apt_proxy"], "package cache")
    return (
        "#!/bin/bash\n"
        + _header("host layer, package cache")
        + "# apt asks which proxy to use for the URI in $1: the site's cache while it answers.\n"
        f"if timeout 2 bash -c 'exec 3<>/dev/tcp/{host}/{port}' 2>/dev/null; then\n"
        f"  echo {proxy}\n"
        "else\n"
        "  echo DIRECT\n"
        "fi\n"
    )


def apt_cache_conf(node: NodeState) -> str:
    """apt.conf(5) drop-in sending apt's http fetches through the detect program above."""
    detect = node["layout"]["files"]["apt_cache_detect"]["path"]
    return (
        _header("host layer, package cache")
        + "// The site's package cache while it answers, else the mirror itself.\n"
        f'Acquire::http::Proxy-Auto-Detect "{line_value(detect, "detect program")}";\n'
    )


# ---------------------------------------------------------------------------- drivers


def driver_preferences(node: NodeState) -> str:
    """apt_preferences(5) file pinning the NVIDIA driver packages to NodeState's
    ``gpu.driver.apt_version`` at priority 1001 (wins over newer and installed versions)."""
    gpu = node["gpu"]
    assert gpu is not None and gpu["driver"] is not None  # rendered for nodes with a driver only
    driver = gpu["driver"]
    version = line_value(driver["apt_version"], "driver apt_version")
    return (
        _header("NVIDIA driver pin")
        + "# The NVIDIA driver moves only when the GPU profile says so (apt_preferences(5)):\n"
        "# priority 1001 selects this version even when a newer one is published, or an older one\n"
        "# is installed.\n"
        f"Package: {DRIVER_PINNED_PACKAGES}\n"
        f"Pin: version {version}\n"
        "Pin-Priority: 1001\n"
    )


def nouveau_blacklist(node: NodeState) -> str:
    """modprobe.d(5) file keeping nouveau off the GPUs (NVIDIA driver installation guide)."""
    return (
        _header("NVIDIA driver") + "# nouveau must not bind the GPU before the NVIDIA driver does.\n"
        "blacklist nouveau\n"
        "options nouveau modeset=0\n"
    )


def reboot_required(node: NodeState) -> str:
    """Debian's pending-reboot marker (layout ``reboot_required``), naming the new driver."""
    gpu = node["gpu"]
    assert gpu is not None and gpu["driver"] is not None  # rendered for nodes with a driver only
    version = line_value(gpu["driver"]["apt_version"], "driver apt_version")
    return f"*** System restart required: NVIDIA driver {version} (swarm) ***\n"


# -------------------------------------------------------------------------------- gpu


def gpu_settings(node: NodeState) -> str:
    """The desired GPU settings the boot-time unit re-applies: NodeState.gpu as JSON."""
    gpu = node["gpu"]
    assert gpu is not None  # rendered for nodes with GPUs only
    return _json(gpu)


def gpu_unit(node: NodeState) -> str:
    """systemd unit re-applying the GPU settings at boot (power limits and clocks reset
    when a GPU resets or the node reboots)."""
    layout, gpu = node["layout"], node["gpu"]
    assert gpu is not None  # rendered for nodes with GPUs only
    files = layout["files"]
    return (
        _header("GPU layer")
        + "# Power limits and clocks reset when a GPU resets or the node reboots: set them again.\n"
        "[Unit]\n"
        f"Description=Apply Swarm GPU settings ({line_value(gpu['backend'], 'GPU backend')})\n"
        f"After={layout['units']['persistenced']}\n"
        f"ConditionPathExists={files['gpu_settings']['path']}\n"
        "\n"
        "[Service]\n"
        "Type=oneshot\n"
        "RemainAfterExit=yes\n"
        f"ExecStart=/usr/bin/python3 {files['gpu_code']['path']} apply {files['gpu_settings']['path']}\n"
        "\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


# ------------------------------------------------------------------------------- mesh


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
    return _json(dict(peer_keys))


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
        _header("mesh").rstrip("\n"),
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
        _header("mesh")
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


# -------------------------------------------------------------------------------- ray


def ray_firewall_rules(node: NodeState) -> str:
    """nftables rules letting only the Ray cluster's members (and, on the head, the
    dashboard's declared clients) open connections to Ray's ports: replies to connections
    already made pass first, then loopback, then the members over the mesh interface; every
    other new connection to a Ray port is dropped, on every interface (Ray binds every
    interface even with --node-ip-address). On a head serving pull workers the token port
    admits those workers' mesh addresses over the mesh interface and nothing else, ahead of
    loopback. The first two lines make a reload replace the table whole."""
    ray, units = node["ray"], node["layout"]["units"]
    assert ray is not None  # rendered for nodes in the Ray cluster only
    fw = ray["firewall"]
    iface = json.dumps(line_value(fw["mesh_interface"], "mesh interface"))
    ports = ", ".join(str(int(p)) for p in fw["tcp_ports"])
    ranges = [f"{int(first)}-{int(last)}" for first, last in fw["tcp_ranges"]]
    members = ", ".join(str(ipaddress.IPv4Address(a)) for a in fw["members"])
    # The head's token port (pull workers read the token there): its admitted clients over
    # the mesh interface, and nobody else, loopback included (before loopback's accept).
    token_rules = []
    if fw["token_port"] is not None and fw["token_clients"]:
        clients = ", ".join(str(ipaddress.IPv4Address(a)) for a in fw["token_clients"])
        token = int(fw["token_port"])
        token_rules = [
            f"    iifname {iface} ip saddr {{ {clients} }} tcp dport {token} accept",
            f"    tcp dport {token} drop",
        ]
    lines = [
        _header("Ray layer").rstrip("\n"),
        "# Only the Ray cluster's members (over the mesh) open connections to Ray's ports; every",
        f"# other host, on every interface, is dropped. Loaded by {units['ray_firewall']}.",
        "# The first two lines make a reload replace the table whole (create it if absent, drop it).",
        "table inet swarm_ray",
        "delete table inet swarm_ray",
        "table inet swarm_ray {",
        "  set members {",
        "    type ipv4_addr",
        *([f"    elements = {{ {members} }}"] if members else []),
        "  }",
        "  chain input {",
        "    type filter hook input priority filter; policy accept;",
        "    ct state established,related accept",
        *token_rules,
        '    iifname "lo" accept',
        f"    iifname {iface} ip saddr @members tcp dport {{ {ports} }} accept",
        *(f"    iifname {iface} ip saddr @members tcp dport {r} accept" for r in ranges),
    ]
    if fw["dashboard_port"] is not None and fw["dashboard_clients"]:
        clients = ", ".join(str(ipaddress.IPv4Network(c)) for c in fw["dashboard_clients"])
        lines.append(
            f"    iifname {iface} ip saddr {{ {clients} }} tcp dport {int(fw['dashboard_port'])} accept"
        )
    lines += [f"    tcp dport {{ {ports} }} drop", *(f"    tcp dport {r} drop" for r in ranges), "  }", "}"]
    return "\n".join(lines) + "\n"


def ray_sysusers(node: NodeState) -> str:
    """sysusers.d(5) file declaring Ray's unprivileged system user (no login shell, its home
    the units' state directory); ``systemd-sysusers`` makes it from this file."""
    ray = node["ray"]
    assert ray is not None
    user = line_value(ray["user"], "Ray user")
    return (
        _header("Ray layer")
        + "# Ray and its jobs run as this user: no job reads root's files (WireGuard's key, Ray's token).\n"
        f'u {user} - "Swarm Ray cluster" /var/lib/{user} /usr/sbin/nologin\n'
    )


def ray_lock(node: NodeState) -> str:
    """The pip lock Ray's virtualenv installs from (``pip install --require-hashes -r``):
    NodeState.ray.lock, one pin per line with its hashes, in the lock file's order. Only
    pins and hashes: the declared file's comments are not carried over."""
    ray = node["ray"]
    assert ray is not None
    cluster = line_value(ray["cluster"], "cluster")
    lines = [
        f"# Ray's environment on this node (cluster {cluster}): pip's hash-checking mode.",
        "# Written by swarm from the RayCluster's lock_file; do not edit.",
    ]
    for pin in ray["lock"]:
        hashes = [f"--hash=sha256:{line_value(h, 'hash')}" for h in pin["hashes"]]
        lines.append(" \\\n    ".join([line_value(pin["requirement"], "requirement"), *hashes]))
    return "\n".join(lines) + "\n"


def ray_index_ca(node: NodeState) -> str:
    """The package index's private CA (PEM certificates) pip trusts (``--cert``)."""
    ray = node["ray"]
    assert ray is not None and ray["index_ca"] is not None
    return ray["index_ca"]


def ray_firewall_unit(node: NodeState) -> str:
    """systemd unit loading the Ray firewall before Ray starts."""
    units, files = node["layout"]["units"], node["layout"]["files"]
    return (
        _header("Ray layer") + "[Unit]\n"
        "Description=Keep Ray's ports off every interface but the mesh (swarm)\n"
        f"Before={units['ray_head']} {units['ray_worker']}\n"
        "\n"
        "[Service]\n"
        "Type=oneshot\n"
        "RemainAfterExit=yes\n"
        f"ExecStart=/usr/sbin/nft -f {files['ray_firewall_rules']['path']}\n"
        "# The rules file replaces the table whole: a reload swaps the rules, atomically.\n"
        f"ExecReload=/usr/sbin/nft -f {files['ray_firewall_rules']['path']}\n"
        "ExecStop=/usr/sbin/nft delete table inet swarm_ray\n"
        "\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


def ray_token_socket(node: NodeState) -> str:
    """systemd socket unit on a head serving pull workers (systemd.socket(5)): the token
    port on the head's mesh address only (``FreeBind=yes``: it binds before wg0 holds the
    address), one service instance per connection (``Accept=yes``), a few connections at a
    time. The Ray firewall (loaded first) admits only the workers
    (:func:`ray_firewall_rules`)."""
    ray, units = node["ray"], node["layout"]["units"]
    assert ray is not None and ray["firewall"]["token_port"] is not None  # a head serving pull workers
    address = str(ipaddress.IPv4Address(ray["node_ip"]))
    port = int(ray["firewall"]["token_port"])
    return (
        _header("Ray layer") + "[Unit]\n"
        f"Description=Ray's token for the cluster's pull workers, on {address}:{port} over the mesh (swarm)\n"
        "# After the firewall that admits only the pull workers. Without the default dependencies:\n"
        "# they order a socket before sockets.target, which the firewall service (after\n"
        "# basic.target) cannot precede (systemd.socket(5), systemd.special(7)).\n"
        "DefaultDependencies=no\n"
        f"After=sysinit.target {units['ray_firewall']}\n"
        f"Requires={units['ray_firewall']}\n"
        "Conflicts=shutdown.target\n"
        "Before=shutdown.target\n"
        "\n"
        "[Socket]\n"
        f"ListenStream={address}:{port}\n"
        "# The mesh address exists once wg0 is up: bind it before.\n"
        "FreeBind=yes\n"
        "Accept=yes\n"
        "MaxConnections=16\n"
        "MaxConnectionsPerSource=4\n"
        "\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


def ray_token_service(node: NodeState) -> str:
    """The per-connection service of :func:`ray_token_socket` (systemd.service(5),
    ``Accept=yes`` makes it a template): writes the token file to the connection and ends.
    Root reads the 0600 file; nothing else: no capability, the file system read-only, no
    network of its own to open (the connection is handed over), a few seconds at most."""
    ray, files = node["ray"], node["layout"]["files"]
    assert ray is not None
    token = line_value(files["ray_auth_token"]["path"], "Ray token path")
    return (
        _header("Ray layer") + "[Unit]\n"
        "Description=Ray's token for one pull worker's connection (swarm)\n"
        "\n"
        "[Service]\n"
        f"ExecStart=/bin/cat {token}\n"
        "StandardInput=null\n"
        "StandardOutput=socket\n"
        "StandardError=journal\n"
        "RuntimeMaxSec=10\n"
        "UMask=0077\n"
        "CapabilityBoundingSet=\n"
        "NoNewPrivileges=yes\n"
        "ProtectSystem=strict\n"
        "ProtectHome=yes\n"
        "PrivateTmp=yes\n"
        "PrivateDevices=yes\n"
        "ProtectKernelTunables=yes\n"
        "ProtectKernelModules=yes\n"
        "ProtectKernelLogs=yes\n"
        "ProtectControlGroups=yes\n"
        "ProtectClock=yes\n"
        "ProtectHostname=yes\n"
        "RestrictAddressFamilies=AF_UNIX\n"
        "RestrictNamespaces=yes\n"
        "RestrictRealtime=yes\n"
        "RestrictSUIDSGID=yes\n"
        "LockPersonality=yes\n"
        "MemoryDenyWriteExecute=yes\n"
        "SystemCallArchitectures=native\n"
        "SystemCallFilter=@system-service\n"
    )


def _systemd_quote(arg: str) -> str:
    # systemd.service(5) command lines: single quotes group a word; "%" is a specifier.
    return "'" + arg.replace("\\", "\\\\").replace("'", "\\'").replace("%", "%%") + "'"


def _tcp_wait(target: str, seconds: int, failure: str) -> str:
    """A bash loop (for a unit's ExecStart*, ``$`` escaped for systemd) that waits up to
    ``seconds`` for ``target`` (``/dev/tcp/HOST/PORT``) to accept, else prints ``failure``."""
    return (
        f"for attempt in $$(seq {seconds}); do (exec 3<>{target}) 2>/dev/null && exit 0; "
        f'sleep 1; done; echo "{failure}" >&2; exit 1'
    )


def ray_unit(node: NodeState) -> str:
    """systemd unit running ``ray start --block`` with NodeState.ray.start_args, after the
    mesh and the firewall; a worker first waits for the head's GCS over the mesh."""
    ray, layout = node["ray"], node["layout"]
    assert ray is not None  # rendered for nodes in the Ray cluster only
    units, files = layout["units"], layout["files"]
    venv = files["ray_venv"]["path"]
    role = ray["role"]
    user = line_value(ray["user"], "Ray user")
    token = line_value(files["ray_auth_token"]["path"], "Ray token path")
    for what in ("cluster", "node_ip", "version"):
        line_value(cast(Mapping[str, Any], ray)[what], f"Ray {what}")
    for arg in ray["start_args"]:
        line_value(arg, "Ray start argument")
    lines = [
        _header("Ray layer").rstrip("\n"),
        f"# Ray {role} of cluster {ray['cluster']} on {ray['node_ip']} (the mesh address).",
        "[Unit]",
        f"Description=Ray {role} ({ray['cluster']}, Ray {ray['version']}) over the mesh",
        f"After=network-online.target {units['wireguard']}.service {units['ray_firewall']}",
        f"Requires={units['wireguard']}.service {units['ray_firewall']}",
        "",
        "[Service]",
        "Type=simple",
        "# Ray and every job it runs: an unprivileged user (ray_sysusers) with a /tmp of its own,",
        "# no new privileges, /usr and /etc read-only; no job reads WireGuard's key or the token file.",
        f"User={user}",
        f"Group={user}",
        f"StateDirectory={user}",
        f"Environment=HOME=/var/lib/{user}",
        "PrivateTmp=yes",
        "NoNewPrivileges=yes",
        "ProtectSystem=full",
        "ProtectHome=yes",
        "# Ray's token authentication (Ray >= 2.52): the token reaches Ray as a systemd credential,",
        "# readable by this unit's user only; the environment names its file, never the token.",
        f"LoadCredential=ray-auth-token:{token}",
        *(f"Environment={k}={v}" for k, v in client_env("%d/ray-auth-token").items()),
        "Environment=RAY_USAGE_STATS_ENABLED=0",
        f"# Health check and GCS reconnect timeouts for members {ray['wan_rtt_ms']:g} ms apart (RTT):",
        "# every Ray process reads RAY_<name> (NodeState.ray.config; resolve.ray.wan_config).",
        *(f"Environment={k}={v}" for k, v in config_env(ray["config"]).items()),
        # Job entrypoints (`ray job submit -- python job.py`) and tasks' subprocesses run with
        # Ray's environment: its virtualenv's python first, as an activated venv would be.
        f"Environment=PATH={venv}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    ]
    if role == "worker":
        head, port = ray["head_ip"], ray["ports"]["gcs"]
        probe = _tcp_wait(
            f"/dev/tcp/{head}/{port}", RAY_HEAD_WAIT_S, f"Ray head {ray['gcs_address']} unreachable"
        )
        # No single quote in the probe: systemd takes the quoted text as one argument.
        lines += [
            "# Start once the head's GCS answers over the mesh.",
            f"ExecStartPre=/bin/bash -c '{probe}'",
        ]
    args = " ".join(_systemd_quote(a) for a in ray["start_args"])
    raylet = f"/dev/tcp/{ray['node_ip']}/{ray['ports']['node_manager']}"
    ready = _tcp_wait(raylet, RAY_READY_WAIT_S, f"raylet not listening on {raylet}")
    lines += [
        "# The arguments are NodeState.ray.start_args, each quoted whole for systemd.",
        f"ExecStart={venv}/bin/ray {args}",
        "# Started means the raylet answers on its port (it registers with the GCS as it starts):",
        "# a converge that starts Ray ends with the node joining, not still booting Ray.",
        f"ExecStartPost=/bin/bash -c '{ready}'",
        f"ExecStop={venv}/bin/ray stop",
        f"TimeoutStartSec={RAY_HEAD_WAIT_S + RAY_READY_WAIT_S + 60}",
        "TimeoutStopSec=60",
        "KillMode=mixed",
        "Restart=on-failure",
        "RestartSec=5",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------- storage


# --------------------------------------------------------------------------- pull agent

# The agent's first run after boot (the timer's OnBootSec), before the jitter.
AGENT_BOOT_DELAY_S = 120
# The longest one agent run may take (fetch, verify, a whole site converge with a driver
# install); systemd stops it after that (TimeoutStartSec of a oneshot service).
AGENT_RUN_TIMEOUT_S = 3600


def agent_config(node: NodeState) -> str:
    """The agent's settings (layout ``agent_config``), JSON: the node's name and the
    ``pull`` slice without the signers' text (that is its own file). ``swarm node
    bootstrap`` writes the same file before the node is in the fleet
    (:func:`agent_config_text`)."""
    pull = node["pull"]
    assert pull is not None  # rendered for pull nodes only
    return agent_config_text(node["name"], pull["fleet"], pull["remote"], pull["ref"], pull["status_port"])


def agent_config_text(node: str, fleet: str, remote: str, ref: str, status_port: int) -> str:
    """The agent's settings file for ``node`` (see :func:`agent_config`)."""
    return _json(
        {
            "node": node,
            "fleet": fleet,
            "remote": remote,
            "ref": ref,
            "engine": "ansible",
            "status_port": status_port,
        }
    )


def agent_allowed_signers(node: NodeState) -> str:
    """The allowed signers file the agent verifies the next commit with: the fleet's, as
    reviewed (validated line by line: :func:`swarm_infra.resolve.pull.allowed_signers_problems`)."""
    pull = node["pull"]
    assert pull is not None
    text = pull["allowed_signers"]
    return text if text.endswith("\n") else text + "\n"


def agent_revoked_signers(node: NodeState) -> str:
    """The revoked signers file (git's ``gpg.ssh.revocationFile``, read by ``ssh-keygen -Y
    verify -r``: one public key per line): the fleet's ``spec.pull.revoked_signers``, a
    commit signed by one of them is refused whatever the allowed signers say."""
    pull = node["pull"]
    assert pull is not None
    lines = "".join(f"{key}\n" for key in pull["revoked_signers"])
    comment = "# Signers' keys revoked (Rollout spec.pull.revoked_signers).\n"
    return _header("host layer: pull agent") + comment + lines


def agent_service(node: NodeState) -> str:
    """systemd service (Type=oneshot) running one agent run (:func:`agent_service_text`)."""
    return agent_service_text(node["layout"])


def agent_service_text(layout: LayoutState) -> str:
    """The agent's service: ``swarm agent run`` of the package installed in layout
    ``agent_venv``, one run per start (the timer starts it)."""
    files = layout["files"]
    program = f"{AGENT_LOCAL['agent_venv']['path']}/bin/swarm"
    return (
        _header("host layer: pull agent")
        + "# One run: fetch the fleet's ref, verify its signature, apply this node's state.\n"
        "[Unit]\n"
        "Description=Swarm pull agent: converge this node from the fleet's signed commit\n"
        "Wants=network-online.target\n"
        "After=network-online.target\n"
        f"ConditionPathExists={files['agent_config']['path']}\n"
        "\n"
        "[Service]\n"
        "Type=oneshot\n"
        f"ExecStart={program} agent run --config {files['agent_config']['path']}\n"
        f"TimeoutStartSec={AGENT_RUN_TIMEOUT_S}\n"
        "UMask=0077\n"
    )


def agent_timer(node: NodeState) -> str:
    """systemd timer of the agent (:func:`agent_timer_text`) at the fleet's interval and jitter."""
    pull = node["pull"]
    assert pull is not None  # rendered for pull nodes only
    return agent_timer_text(node["layout"], pull["interval_s"], pull["randomized_delay_s"])


def agent_timer_text(layout: LayoutState, interval_s: int, randomized_delay_s: int) -> str:
    """systemd timer starting the agent's service every ``interval_s`` (OnUnitActiveSec),
    each start delayed by up to ``randomized_delay_s`` at random (RandomizedDelaySec), the
    first :data:`AGENT_BOOT_DELAY_S` after boot (systemd.timer(5)). ``AccuracySec=1s``:
    systemd's default (1 min) lets each start slip by up to a minute more, which the
    benchmark saw (benchmarks/bench_pull.py); the random delay already spreads the load."""
    units = layout["units"]
    return (
        _header("host layer: pull agent") + "[Unit]\n"
        f"Description=Run {units['agent_service']} on a jittered interval\n"
        "\n"
        "[Timer]\n"
        f"OnBootSec={AGENT_BOOT_DELAY_S}\n"
        f"OnUnitActiveSec={int(interval_s)}\n"
        f"RandomizedDelaySec={int(randomized_delay_s)}\n"
        "AccuracySec=1s\n"
        f"Unit={units['agent_service']}\n"
        "\n"
        "[Install]\n"
        "WantedBy=timers.target\n"
    )


def agent_items(node: NodeState) -> list[dict[str, Any]]:
    """The host layer's agent files: written on a pull node, absent on a push node."""
    f = node["layout"]["files"]
    if not node["pull"]:
        return [_item(f[n], "absent") for n in AGENT_REMOVED]
    return [
        _item(f["agent_dir"], "directory"),
        _item(f["agent_config"], "file", agent_config(node)),
        _item(f["agent_allowed_signers"], "file", agent_allowed_signers(node)),
        _item(f["agent_revoked_signers"], "file", agent_revoked_signers(node)),
        _item(f["agent_service"], "file", agent_service(node)),
        _item(f["agent_timer"], "file", agent_timer(node)),
    ]


def storage_record(node: NodeState) -> str:
    """What scratch the project made on the node (so that removing the declaration
    unmounts it): mount path, target device and label, as JSON."""
    storage = node["storage"]
    assert storage is not None  # rendered for nodes with scratch only
    scratch = storage["scratch"]
    return _json(
        {"mount_path": scratch["mount_path"], "target": scratch["target"], "label": scratch["label"]}
    )


# Files whose text depends on NodeState alone, by their layout name: what the engines and
# verification can compare byte for byte.
STATIC: dict[str, Callable[[NodeState], str]] = {
    "driver_preferences": driver_preferences,
    "nouveau_blacklist": nouveau_blacklist,
    "reboot_required": reboot_required,
    "gpu_settings": gpu_settings,
    "gpu_unit": gpu_unit,
    "wireguard_dropin": wireguard_dropin,
    "ray_firewall_rules": ray_firewall_rules,
    "ray_firewall_unit": ray_firewall_unit,
    "ray_unit": ray_unit,
    "ray_sysusers": ray_sysusers,
    "ray_lock": ray_lock,
    "storage_record": storage_record,
}


def static_file(node: NodeState, name: str) -> str:
    """The text of the file ``name`` (a key of :data:`STATIC`) for ``node``.

    Raises KeyError for a name that is not a static file."""
    return STATIC[name](node)


# ------------------------------------------------------------------- a layer's files


def _item(path: ManagedPath, state: str, content: str | None = None) -> dict[str, Any]:
    if state == "absent":
        return {"path": path["path"], "state": "absent"}
    return {
        "path": path["path"],
        "state": state,
        "content": content,
        "owner": path["owner"],
        "group": path["group"],
        "mode": path["mode"],
    }


def gpu_code() -> str:
    """The node-side GPU code's text (:mod:`swarm_infra.nodeside.gpu`), as it is installed."""
    from ..nodeside import gpu

    return Path(gpu.__file__).read_text()


def layer_files(
    node: NodeState, layer: str, peer_keys: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """Every file and directory ``layer`` manages on ``node``, as items for the node-side
    files code (:mod:`swarm_infra.nodeside.files`: path, state file/directory/absent,
    content, owner, group, mode), in the order to apply them: what the node must hold, and
    what a declaration no longer made must not (the declared state is the whole truth).

    ``layer``: ``host`` (the package cache's files and the pull agent's; the tunables code
    owns the rest),
    ``gpu``, ``storage``, ``ray``, or ``mesh`` (which needs ``peer_keys``: the
    peers' public keys known in this run, :func:`wireguard_peer_keys`). The WireGuard
    private key is an item without content (made on the node; its mode is managed); the
    wg-quick drop-in is the caller's (it depends on the node's kernel).

    Raises ValueError for another layer."""
    f = node["layout"]["files"]
    if layer == "host":
        if not node["package_cache"]:
            return [_item(f[n], "absent") for n in PACKAGE_CACHE_FILES] + agent_items(node)
        return [
            _item(f["lib_dir"], "directory"),
            _item(f["apt_cache_detect"], "file", apt_cache_detect(node)),
            _item(f["apt_cache_conf"], "file", apt_cache_conf(node)),
            *agent_items(node),
        ]
    if layer in ("gpu", "storage", "ray") and not declared(node, layer):
        return [_item(f[n], "absent") for n in registry(layer).removed]
    if layer == "gpu":
        return [
            _item(f["lib_dir"], "directory"),
            _item(f["etc_dir"], "directory"),
            _item(f["gpu_code"], "file", gpu_code()),
            _item(f["gpu_settings"], "file", gpu_settings(node)),
            _item(f["gpu_unit"], "file", gpu_unit(node)),
        ]
    if layer == "storage":
        return [_item(f["storage_record"], "file", storage_record(node))]
    if layer == "ray":
        ray = node["ray"]
        assert ray is not None
        other = "worker" if ray["role"] == "head" else "head"
        return [
            _item(f["etc_dir"], "directory"),
            _item(f["ray_auth_token"], "file"),
            _item(f["ray_sysusers"], "file", ray_sysusers(node)),
            _item(f["ray_lock"], "file", ray_lock(node)),
            _item(f["ray_index_ca"], "file", ray_index_ca(node))
            if ray["index_ca"] is not None
            else _item(f["ray_index_ca"], "absent"),
            _item(f["ray_firewall_rules"], "file", ray_firewall_rules(node)),
            _item(f["ray_firewall_unit"], "file", ray_firewall_unit(node)),
            _item(f[f"ray_{ray['role']}_unit"], "file", ray_unit(node)),
            _item(f[f"ray_{other}_unit"], "absent"),
            *(
                [
                    _item(f["ray_token_service"], "file", ray_token_service(node)),
                    _item(f["ray_token_socket"], "file", ray_token_socket(node)),
                ]
                if ray["firewall"]["token_port"] is not None
                else [_item(f["ray_token_socket"], "absent"), _item(f["ray_token_service"], "absent")]
            ),
        ]
    if layer == "mesh":
        keys = dict(peer_keys or {})
        return [
            _item(f["wireguard_dir"], "directory"),
            _item(f["wireguard_key"], "file"),
            _item(f["wireguard_peers"], "file", wireguard_peers(node, keys)),
            _item(f["wireguard_conf"], "file", wireguard_conf(node, keys)),
        ]
    raise ValueError(f"no managed files for layer {layer!r}")


def wireguard_dropin_items(node: NodeState) -> list[dict[str, Any]]:
    """The wg-quick drop-in selecting wireguard-go, for nodes whose kernel has no WireGuard
    module: its directory and file."""
    f = node["layout"]["files"]
    return [
        _item(f["wireguard_dropin_dir"], "directory"),
        _item(f["wireguard_dropin"], "file", wireguard_dropin(node)),
    ]
