"""The ray layer: the fleet's Ray cluster over the mesh, its firewall, its unprivileged
user and virtualenv; on a head serving pull workers, the socket handing them the token."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping
from typing import Any, cast

from ..paths import ETC_DIR, LIB_DIR, RAY_USER, UNIT_DIR
from ..ray import client_env, config_env
from ..text import header, line_value
from ..types import NodeState
from .base import File, Layer

# How long a Ray worker waits for the head's GCS port at start, before systemd retries (s).
RAY_HEAD_WAIT_S = 120
RAY_READY_WAIT_S = 120  # s: from ray start to its raylet listening


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
        header("Ray layer").rstrip("\n"),
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
        header("Ray layer")
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
        header("Ray layer") + "[Unit]\n"
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
        header("Ray layer") + "[Unit]\n"
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
        header("Ray layer") + "[Unit]\n"
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
        header("Ray layer").rstrip("\n"),
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


# Each tests the slice for truth, not for None: the roles pass an undeclared slice as "".
def _head(node: NodeState) -> bool:
    ray = node["ray"]
    return ray["role"] == "head" if ray else False


def _worker(node: NodeState) -> bool:
    ray = node["ray"]
    return ray["role"] == "worker" if ray else False


def _index_ca(node: NodeState) -> bool:
    ray = node["ray"]
    return ray["index_ca"] is not None if ray else False


def _token_port(node: NodeState) -> bool:
    ray = node["ray"]
    return ray["firewall"]["token_port"] is not None if ray else False


LAYER = Layer(
    name="ray",
    role="ray",
    hosts="all",
    state=("ray",),
    title="Ray",
    sources=("RayCluster",),
    parents=("etc_dir",),
    files={
        # Ray's token (RAY_AUTH_MODE=token): made on the head, copied to the members,
        # root's only; the units read it as a systemd credential. Never read back.
        "ray_auth_token": File(
            path=f"{ETC_DIR}/ray-auth-token",
            mode="0600",
            made_on_node="the token: made on the head, copied to the members by the engines",
            removed=True,
        ),
        "ray_sysusers": File(path=f"/etc/sysusers.d/{RAY_USER}.conf", text=ray_sysusers, removed=True),
        # The pip lock Ray's virtualenv installs from (hashes), and the index's private CA.
        "ray_lock": File(path=f"{ETC_DIR}/ray-requirements.lock", text=ray_lock, removed=True),
        "ray_index_ca": File(
            path=f"{ETC_DIR}/ray-index-ca.pem", text=ray_index_ca, wanted=_index_ca, removed=True
        ),
        "ray_venv": File(
            path=f"{LIB_DIR}/ray-venv",
            directory=True,
            task="the ray role's and deploy's virtualenv task (pip install --require-hashes of ray_lock)",
            removed=True,
        ),
        "ray_firewall_rules": File(path=f"{ETC_DIR}/ray-firewall.nft", text=ray_firewall_rules, removed=True),
        "ray_firewall_unit": File(
            path=f"{UNIT_DIR}/swarm-ray-firewall.service", text=ray_firewall_unit, removed=True
        ),
        "ray_head_unit": File(path=f"{UNIT_DIR}/ray-head.service", text=ray_unit, wanted=_head, removed=True),
        "ray_worker_unit": File(
            path=f"{UNIT_DIR}/ray-worker.service", text=ray_unit, wanted=_worker, removed=True
        ),
        # The head's token for pull workers: socket (Accept=yes) and its service template.
        "ray_token_service": File(
            path=f"{UNIT_DIR}/swarm-ray-token@.service",
            text=ray_token_service,
            wanted=_token_port,
            removed=True,
        ),
        "ray_token_socket": File(
            path=f"{UNIT_DIR}/swarm-ray-token.socket", text=ray_token_socket, wanted=_token_port, removed=True
        ),
    },
    units={
        "ray_head": "ray-head.service",
        "ray_worker": "ray-worker.service",
        "ray_firewall": "swarm-ray-firewall.service",
        "ray_token_socket": "swarm-ray-token.socket",
    },
    packages=("ray",),
)
