"""The Ray decision: which nodes a Ray cluster's groups run on and how big each pod is.

:func:`ray_cluster` decides a KubeRay cluster from a request (the policy's
:class:`~swarm_infra.fleet.model.RayRequest`) and the shapes of the nodes of each GPU
flavor; KubeRay's RayCluster (``swarm_infra.cluster.kuberay``) is built from its result.
:func:`bare_node_ray` decides each node's part in the fleet's own Ray cluster (kind
RayCluster: ``ray start`` on the nodes, over the mesh). Both take the object store from
:func:`object_store_bytes`, the accelerator resources from :func:`accelerator_resources`
and the node labels from :func:`ray_node_labels`, so both Rays place work alike.

Rules:

- a worker group runs on the gpu-worker nodes of one GPU flavor (node label
  ``swarm.io/gpu-flavor``); the head needs no GPU: it runs in its workers' site (see
  ``resolve.flavors.head_placement``);
- a worker's GPUs default to all ``nvidia.com/gpu`` of the smallest node of the flavor
  (device units: a time-sliced or MIG-partitioned GPU counts as several). Its CPUs and
  memory default to the same share of each node's CPUs and memory, less
  :data:`RESERVE_PERCENT` left to the kubelet, system daemons and the device plugin,
  rounded down, and the smallest over the flavor's nodes (so a worker fits every node);
- the object store of every pod is ``object_store_percent`` of its memory, in bytes;
- the cluster autoscales when some group has ``min_replicas < max_replicas``; Kueue admits
  ``min_replicas`` workers at first.
"""

from __future__ import annotations

import ipaddress
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from ..fleet.model import Fleet, Node, RayCluster, RayRequest, Site
from ..nodeside.raytoken import token_problem as _token_problem
from .labels import FLAVOR_LABEL, REGION_LABEL, SITE_LABEL
from .paths import RAY_USER
from .types import (
    NodeState,
    PeerState,
    RayClusterState,
    RayFirewallState,
    RayGroupState,
    RayNodeState,
    RayTokenSourceState,
)

RESERVE_PERCENT = 10  # of a node's CPUs and memory, left to the kubelet and system daemons
GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class NodeShape:
    """What one gpu-worker node of a flavor offers a pod: ``gpus`` in device units."""

    name: str
    gpus: int
    cpus: int
    memory_gib: int


def default_image(version: str) -> str:
    """Ray's published GPU image for ``version`` (CUDA and the Python default of that release)."""
    return f"rayproject/ray:{version}-gpu"


def object_store_bytes(memory_gib: int, percent: int) -> int:
    """``percent`` of ``memory_gib`` GiB, in bytes (ray start --object-store-memory)."""
    return memory_gib * GIB * percent // 100


def worker_size(
    shapes: Sequence[NodeShape], gpus: int | None, cpus: int | None, memory_gib: int | None
) -> tuple[int, int, int]:
    """(gpus, cpus, memory_gib) of one worker on nodes ``shapes`` (see the module's rules).

    Values given are kept; ``shapes`` must not be empty (the validator checks that the
    flavor has gpu-worker nodes with GPUs).
    """
    if gpus is None:
        gpus = min(s.gpus for s in shapes)
    keep = 100 - RESERVE_PERCENT

    def share(total: int, node: NodeShape) -> int:
        return max(1, total * min(gpus, node.gpus) * keep // (node.gpus * 100)) if node.gpus else 1

    if cpus is None:
        cpus = min(share(s.cpus, s) for s in shapes)
    if memory_gib is None:
        memory_gib = min(share(s.memory_gib, s) for s in shapes)
    return gpus, cpus, memory_gib


def ray_cluster(
    name: str,
    namespace: str,
    request: RayRequest,
    flavor_nodes: Mapping[str, Sequence[NodeShape]],
    *,
    priority: str | None,
    local_queue: str | None,
    ray_version: str,
    tenant: str | None = None,
    head_node_labels: Mapping[str, str] | None = None,
) -> RayClusterState:
    """The Ray cluster ``name`` for ``request``, running Ray ``ray_version`` (the fleet's:
    :func:`fleet_ray_version`).

    ``flavor_nodes`` maps each GPU flavor to the shapes of its gpu-worker nodes (every
    flavor the request names must be present and non-empty: the validator's rules
    ``reference.unresolved`` and ``ray.pod-too-large`` guarantee it). ``priority`` is the
    resolved Priority name (the request's, else the global default), ``local_queue`` the
    Kueue LocalQueue that admits the cluster. Groups: the head, then workers by flavor.
    ``head_node_labels``: the head's node selector (its site's CPU flavor, or its workers'
    GPU flavor: :func:`swarm_infra.resolve.flavors.head_placement`); None: no constraint.
    """
    pct = request.object_store_percent
    head: RayGroupState = {
        "name": "head",
        "flavor": None,
        "node_labels": dict(head_node_labels or {}),
        "gpus": 0,
        "cpus": request.head_cpus,
        "memory_gib": request.head_memory_gib,
        "object_store_bytes": object_store_bytes(request.head_memory_gib, pct),
        "resources": {},
        "labels": {},
        "replicas": 1,
        "min_replicas": 1,
        "max_replicas": 1,
    }
    workers: list[RayGroupState] = []
    for w in sorted(request.workers, key=lambda w: w.flavor):
        gpus, cpus, memory_gib = worker_size(flavor_nodes[w.flavor], w.gpus, w.cpus, w.memory_gib)
        workers.append(
            {
                "name": w.flavor,
                "flavor": w.flavor,
                "node_labels": {FLAVOR_LABEL: w.flavor},
                "gpus": gpus,
                "cpus": cpus,
                "memory_gib": memory_gib,
                "object_store_bytes": object_store_bytes(memory_gib, pct),
                "resources": accelerator_resources(flavor_models(w.flavor)),
                "labels": ray_node_labels(None, None, w.flavor),
                "replicas": w.min_replicas,
                "min_replicas": w.min_replicas,
                "max_replicas": w.max_replicas,
            }
        )
    return {
        "name": name,
        "tenant": tenant,
        "namespace": namespace,
        "local_queue": local_queue,
        "priority": priority,
        "ray_version": ray_version,
        "image": request.image or default_image(ray_version),
        "autoscaling": any(g["min_replicas"] < g["max_replicas"] for g in workers),
        "head": head,
        "workers": workers,
    }


# ------------------------------------------------------------------ shared by both Rays


# Ray's token authentication, which every Ray of the fleet runs (the bare-node cluster's
# RAY_AUTH_MODE=token, KubeRay's ``authOptions.mode: token``), exists from Ray 2.52.0 (Ray
# docs, "Ray token authentication"; KubeRay v1.5.1 release notes: rayVersion 2.52.0 or newer).
TOKEN_AUTH_MIN_VERSION = (2, 52, 0)


def token_auth_supported(version: str) -> bool:
    """Whether Ray ``version`` (``X.Y.Z``) has token authentication
    (:data:`TOKEN_AUTH_MIN_VERSION` or later); False for a string that is not such a version."""
    parts = version.split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        return False
    return tuple(int(p) for p in parts) >= TOKEN_AUTH_MIN_VERSION


def fleet_ray_version(fleet: Fleet) -> str:
    """The fleet's one Ray release (kind Cluster, ``spec.ray_version``), which both the
    bare-node RayCluster and every tenant's KubeRay cluster run. ValueError when it is not
    declared: the validator's rule ``ray.version-missing`` refuses such a fleet when it
    declares any Ray, so a valid fleet never gets here without one."""
    if fleet.cluster.ray_version is None:
        raise ValueError("the fleet declares Ray but no Ray version (Cluster spec.ray_version)")
    return fleet.cluster.ray_version


# What every node installs: Ray with its dashboard and job API (default), Tune, Data, and
# Serve (`swarm metrics run --only inference` serves a model with it).
RAY_EXTRAS = "default,tune,data,serve"


def accelerator_resources(models: Sequence[str]) -> dict[str, int]:
    """Ray custom resources naming a node's GPU models, ``{"accelerator_type:A100": 1, ...}``
    (Ray's own convention, ray.util.accelerators; names from the GPU catalog): tasks that
    ask for ``accelerator_type:H100`` land only where H100s are."""
    from .catalog import gpu_catalog

    catalog = gpu_catalog()
    return {
        f"accelerator_type:{t}": 1 for m in sorted(set(models)) for t in catalog[m]["ray_accelerator_types"]
    }


def flavor_models(flavor: str) -> list[str]:
    """The catalog models whose Kueue flavor is ``flavor``."""
    from .catalog import gpu_catalog

    return sorted(m for m, entry in gpu_catalog().items() if entry["flavor"] == flavor)


def ray_node_labels(site: str | None, region: str | None, flavor: str | None) -> dict[str, str]:
    """Ray node labels (``ray start --labels``): the node's site, region and GPU flavor, for
    label selectors; keys in the project's prefix (Ray reserves ``ray.io/``)."""
    labels = {SITE_LABEL: site, REGION_LABEL: region, FLAVOR_LABEL: flavor}
    return {k: v for k, v in sorted(labels.items()) if v}


def resources_param(resources: Mapping[str, int]) -> str:
    """``ray start --resources`` of a bare node's unit: JSON, sorted. It holds a space, so it
    travels only as one whole argument (systemd quotes each of ``start_args``); KubeRay gets
    the resources as a group's ``resources`` field and builds its own quoted JSON."""
    return json.dumps(dict(resources), sort_keys=True)


def labels_param(labels: Mapping[str, str]) -> str:
    """``ray start --labels`` of a bare node's unit: ``k1=v1,k2=v2``, sorted (the format Ray
    2.60 parses first; JSON is deprecated there). KubeRay builds the same form from a group's
    ``labels`` field (it refuses ``rayStartParams.labels``)."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def pip_environment(node: NodeState) -> dict[str, str]:
    """The environment pip installs Ray's lock with, for both engines (pip reads each of its
    options from ``PIP_<OPTION>``, https://pip.pypa.io/en/stable/topics/configuration/):
    the declared index (``--index-url``), hash-checking mode (``--require-hashes``: every
    file must match a hash of the lock, given as ``-r``), wheels only (``--only-binary=:all:``:
    no build runs as root), the private CA (the layout's ``ray_index_ca``) when the node has
    one (``--cert``), no version check. Never a pip "trusted host": it turns certificate
    checks off. ``node``: a NodeState in the Ray cluster (KeyError/TypeError otherwise)."""
    ray = node["ray"]
    assert ray is not None
    env = {
        "PIP_INDEX_URL": ray["package_index"],
        "PIP_REQUIRE_HASHES": "1",
        "PIP_ONLY_BINARY": ":all:",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    if ray["index_ca"] is not None:
        env["PIP_CERT"] = node["layout"]["files"]["ray_index_ca"]["path"]
    return env


# ------------------------------------------------------------------ Ray on bare nodes


# Ray's health check and GCS connection settings (Ray 2.60.0's defaults: src/ray/common/
# ray_config_def.h, ray-project/ray; the four health_check_* read back from the 2.60.0
# wheel's ray._raylet.Config, the gcs_* from the header at commit 0006bd6c, names present in
# the 2.60.0 binary). Each is read by every Ray process from RAY_<name> in its environment
# (RayConfig::initialize; a --system-config entry would override it, and the fleet sets none).
RAY_DEFAULTS: dict[str, int] = {
    "health_check_initial_delay_ms": 5000,
    "health_check_period_ms": 3000,
    "health_check_timeout_ms": 10000,
    "health_check_failure_threshold": 5,
    "gcs_grpc_min_reconnect_backoff_ms": 1000,
    "gcs_grpc_max_reconnect_backoff_ms": 2000,
    "gcs_rpc_server_reconnect_timeout_s": 60,
}
# Ray's header on gcs_grpc_min_reconnect_backoff_ms: gRPC uses it as the connect timeout,
# "If your cluster has a high latency, make it to > 4x the latency". Twice that here: the
# latency is a p50 (or a declaration) and a connection attempt can meet jitter or a loss.
RECONNECT_RTTS = 8
# Round trips of one health check after its channel reconnected: the Check call itself and
# one more for a retransmitted segment.
CHECK_RTTS = 2


def tolerated_silence_ms(config: Mapping[str, int]) -> int:
    """How long the GCS keeps a node that answers no health check, by Ray's own rule
    (ray-project/ray, src/ray/gcs/gcs_health_check_manager.cc, HealthCheckContext::
    StartHealthCheck): each check waits ``health_check_timeout_ms`` for a SERVING reply;
    a failure decrements a counter that a success resets to ``health_check_failure_threshold``,
    the next check starts ``health_check_period_ms`` after the last one ended, and the node is
    marked dead when the counter reaches 0. So ``threshold`` failed checks and the
    ``threshold - 1`` periods between them: ms."""
    threshold = config["health_check_failure_threshold"]
    return threshold * config["health_check_timeout_ms"] + (threshold - 1) * config["health_check_period_ms"]


def declared_rtt_ms(a: Site, b: Site) -> float:
    """The RTT between sites ``a`` and ``b`` from their declarations: each site's ``wan``
    ``latency_ms`` (one-way, to the fleet's core) plus its ``jitter_ms``, both ways; 0 inside
    one site (its nodes share the underlay)."""
    if a.name == b.name:
        return 0.0

    def one_way(site: Site) -> float:
        return float(site.wan.get("latency_ms", 0)) + float(site.wan.get("jitter_ms", 0))

    return 2 * (one_way(a) + one_way(b))


def wan_rtt_ms(fleet: Fleet, head_site: str, member_sites: Sequence[str]) -> float:
    """The worst RTT in ms between the head's site and a member's site: for each pair the
    higher of the measured RTT (the LatencyMatrix, when it has the pair) and the declared one
    (:func:`declared_rtt_ms`). The higher, not the measured alone as for relays: here a figure
    can only lengthen the timeouts a node is judged by, and a site that understates its
    distance would have its own nodes marked dead."""
    measured = fleet.latency.rtt_ms if fleet.latency is not None else {}
    head = fleet.sites[head_site]
    worst = 0.0
    for site in sorted(set(member_sites)):
        rtt = declared_rtt_ms(head, fleet.sites[site])
        if site != head_site:
            rtt = max(rtt, measured.get((head_site, site), 0.0))
        worst = max(worst, rtt)
    return worst


def wan_config(rtt_ms: float, declared: Mapping[str, int] | None = None) -> dict[str, int]:
    """Ray's health check and GCS connection settings for members ``rtt_ms`` apart (ms),
    sorted by name, from Ray's defaults (:data:`RAY_DEFAULTS`) with the RayCluster's
    ``declared`` health check settings (``health_check_<name>``: ms, or a count) over them:

    - ``gcs_grpc_min_reconnect_backoff_ms`` (gRPC's connect timeout to the GCS):
      :data:`RECONNECT_RTTS` round trips, where Ray's header asks for more than 4;
      ``gcs_grpc_max_reconnect_backoff_ms`` at least that (gRPC's backoff cap);
    - ``health_check_timeout_ms``: at least what a check that meets a dropped channel needs
      (it reconnects, then makes its call, :data:`CHECK_RTTS` round trips), whatever was
      declared: a declaration can shorten how long a lost member is kept, never make the WAN
      drop a live one;
    - ``gcs_rpc_server_reconnect_timeout_s``: a raylet keeps trying to reach the GCS at least
      as long as the GCS keeps it (:func:`tolerated_silence_ms`), rounded up to seconds;
    - the initial delay stays Ray's; the period and failure threshold are the declared ones,
      else Ray's.
    """
    rtt = math.ceil(rtt_ms)
    config = {**RAY_DEFAULTS, **(declared or {})}
    backoff = max(config["gcs_grpc_min_reconnect_backoff_ms"], RECONNECT_RTTS * rtt)
    config["gcs_grpc_min_reconnect_backoff_ms"] = backoff
    config["gcs_grpc_max_reconnect_backoff_ms"] = max(config["gcs_grpc_max_reconnect_backoff_ms"], backoff)
    config["health_check_timeout_ms"] = max(config["health_check_timeout_ms"], backoff + CHECK_RTTS * rtt)
    config["gcs_rpc_server_reconnect_timeout_s"] = max(
        config["gcs_rpc_server_reconnect_timeout_s"], -(-tolerated_silence_ms(config) // 1000)
    )
    return dict(sorted(config.items()))


def config_env(config: Mapping[str, int]) -> dict[str, str]:
    """``RAY_<name>=<value>`` for each of ``config`` (Ray config names, as
    :func:`wan_config` gives them): how every Ray process reads them (RayConfig::initialize),
    the raylet's children (workers, agents) included, since they inherit the unit's
    environment; names sorted."""
    return {f"RAY_{k}": str(v) for k, v in sorted(config.items())}


def members(ray: RayCluster, fleet: Fleet) -> tuple[list[str], list[str]]:
    """(head candidates, workers) of the bare-node Ray cluster, by node name in name order;
    the head is never also a worker. Valid fleets have exactly one head candidate."""
    nodes = fleet.nodes.values()
    heads = [n.name for n in nodes if ray.head.matches(n)]
    workers = [n.name for n in nodes if ray.workers.matches(n) and n.name not in heads]
    return heads, workers


def firewall_rule(
    ray: RayCluster, interface: str, members: Sequence[str], head: bool, token_clients: Sequence[str] = ()
) -> RayFirewallState:
    """Who may connect to Ray's ports on a member (``members``: the cluster's members' mesh
    addresses; ``head``: the node is the head). Ray binds every interface even with
    --node-ip-address (measured with Ray 2.60) and, without the firewall, any mesh peer (a
    relay, a storage node, any new provider) could submit a job: so only loopback and the
    members over the mesh interface pass, and on the head the dashboard's declared clients
    (the job API); every other connection to a Ray port is dropped, on every interface.
    ``token_clients`` (the head's only): the mesh addresses its token port admits
    (:func:`token_admission`), over the mesh interface only, loopback not even; none: no
    token port on the node."""
    ports = dict(ray.ports)
    low, high = ports.pop("min_worker"), ports.pop("max_worker")
    token_port = ports.pop("token")
    if ray.dashboard_enabled:
        ports["dashboard"] = ray.dashboard_port
    dashboard = ray.dashboard_port if head and ray.dashboard_enabled else None
    clients = sorted(token_clients, key=_address_key) if head else []
    return {
        "mesh_interface": interface,
        "members": sorted(members, key=_address_key),
        "dashboard_port": dashboard,
        "dashboard_clients": list(ray.dashboard_clients) if dashboard else [],
        "tcp_ports": sorted(set(ports.values())),
        "tcp_ranges": [[low, high]],
        "token_port": token_port if clients else None,
        "token_clients": clients,
    }


def _address_key(address: str) -> tuple[int, ...]:
    return tuple(int(x) for x in address.split("."))


def token_admission(
    head_peers: Sequence[PeerState], pull_workers: Mapping[str, str]
) -> tuple[dict[str, str], list[str]]:
    """Which pull workers (``{name: mesh address}``) the head serves the cluster's token to
    over the mesh: ``(admitted {name: address}, relayed names)``, both in name order.

    A worker is admitted when the head's resolved peers (``head_peers``: its wg0 peers,
    :func:`swarm_infra.resolve.mesh.peers`) route its address through the worker's own peer
    entry and no other: WireGuard's cryptokey routing accepts a packet from a peer only when
    its source address lies in that peer's AllowedIPs (wireguard.com, "Cryptokey Routing"),
    so a direct peer's mesh address names it. A worker whose address the head routes through
    a relay (another peer whose AllowedIPs hold it), or not at all, is not admitted: the
    relay could send with that source address (rule ``pull.ray-token-unreachable``)."""
    nets = [(p["name"], ipaddress.IPv4Network(c)) for p in head_peers for c in p["allowed_ips"]]
    admitted: dict[str, str] = {}
    relayed: list[str] = []
    for name, address in sorted(pull_workers.items()):
        ip = ipaddress.IPv4Address(address)
        if {peer for peer, net in nets if ip in net} == {name}:
            admitted[name] = address
        else:
            relayed.append(name)
    return admitted, relayed


def client_env(token_path: str) -> dict[str, str]:
    """The environment every Ray client needs (``ray job submit``, ``ray list``, the units'
    own ``ray start``/``ray stop``): Ray's token authentication (Ray >= 2.52, docs
    "Ray token authentication": RAY_AUTH_MODE must be ``token`` on every node and client)
    with the token read from ``token_path``, never from the environment itself
    (RAY_AUTH_TOKEN would show in /proc/PID/environ of every Ray process)."""
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": token_path}


def token_command(path: str) -> str:
    """The shell command that makes the cluster's token on the head: 32 random bytes as hex,
    written under umask 077 (mode 0600 from the start), never printed, never in argv."""
    import shlex

    return "umask 077 && python3 -c 'import secrets; print(secrets.token_hex(32))' > " + shlex.quote(path)


# The token file's check is the node-side code's (a pull worker runs it on itself): one rule.
token_problem = _token_problem


def client_env_prefix(token_path: str) -> str:
    """:func:`client_env` as a shell command prefix (``env K=V ...``), values quoted."""
    import shlex

    return "env " + " ".join(f"{k}={shlex.quote(v)}" for k, v in client_env(token_path).items())


# ray start flag of each fixed port (RayCluster ports, Ray 2.60's `ray start --help`).
_PORT_FLAGS = {
    "node_manager": "--node-manager-port",
    "object_manager": "--object-manager-port",
    "runtime_env_agent": "--runtime-env-agent-port",
    "dashboard_agent_grpc": "--dashboard-agent-grpc-port",
    "dashboard_agent_http": "--dashboard-agent-listen-port",
    "metrics_export": "--metrics-export-port",
    "min_worker": "--min-worker-port",
    "max_worker": "--max-worker-port",
}


def start_args(state: RayNodeState) -> list[str]:
    """The ``ray start`` arguments (after ``ray``) of a bare node's unit, for both engines:
    in the foreground (``--block``, systemd supervises it), on the node's mesh address, with
    every port fixed (so the firewall covers them), the node's CPUs, logical GPUs, accelerator
    resources, labels and object store; the head also serves GCS, the Ray client and the
    dashboard on its mesh address, workers join the head's GCS."""
    ports = state["ports"]
    args = ["start", "--block", "--disable-usage-stats", f"--node-ip-address={state['node_ip']}"]
    if state["role"] == "head":
        args += ["--head", f"--port={ports['gcs']}", f"--ray-client-server-port={ports['client_server']}"]
        dashboard = state["dashboard"]
        if dashboard:
            args += [
                "--include-dashboard=true",
                f"--dashboard-host={dashboard['host']}",
                f"--dashboard-port={dashboard['port']}",
            ]
        else:
            args.append("--include-dashboard=false")
    else:
        args.append(f"--address={state['gcs_address']}")
    args += [f"{flag}={ports[name]}" for name, flag in _PORT_FLAGS.items()]
    args += [f"--num-cpus={state['num_cpus']}", f"--num-gpus={state['num_gpus']}"]
    if state["resources"]:
        args.append(f"--resources={resources_param(state['resources'])}")
    if state["labels"]:
        args.append(f"--labels={labels_param(state['labels'])}")
    args.append(f"--object-store-memory={state['object_store_bytes']}")
    return args


def token_source(head_ip: str, port: int) -> RayTokenSourceState:
    """Where a pull worker reads the cluster's token: the head's mesh address and token port."""
    return {"host": head_ip, "port": port}


@dataclass(frozen=True, slots=True)
class RayMember:
    """One node's place in the fleet's bare-node Ray cluster (kind RayCluster), decided by
    the node resolver from the cluster's members and the mesh; :func:`bare_node_ray` turns
    it with the node and the cluster into NodeState.ray.

    ``role``: head or worker; ``node_ip``/``head_ip``: the node's and the head's mesh
    addresses (dotted IPv4), which Ray advertises and joins on; ``region``: the node's
    site's region (a Ray node label); ``interface``: the mesh interface (``wg0``), the only
    one the firewall admits members on; ``head``: the head's node name; ``members``: every
    member's mesh address, for the firewall; ``ray_version``: the fleet's Ray release,
    :func:`fleet_ray_version`; ``wan_rtt``: the worst RTT between the head's site and a
    member's, in ms, :func:`wan_rtt_ms` (0 on a LAN); ``token_clients``: on the head, the
    mesh addresses of the pull workers it serves the token to, :func:`token_admission`
    (empty on a worker); ``token_by_pull``: on a worker, it reads the token from the head's
    token port over the mesh, not through the controller.
    """

    role: Literal["head", "worker"]
    node_ip: str
    head_ip: str
    region: str
    interface: str
    head: str
    members: tuple[str, ...]
    ray_version: str
    wan_rtt: float = 0.0
    token_clients: tuple[str, ...] = ()
    token_by_pull: bool = False


def bare_node_ray(ray: RayCluster, node: Node, member: RayMember) -> RayNodeState:
    """NodeState.ray of ``node`` in the bare-node Ray cluster ``ray``, in the place
    ``member`` gives it (:class:`RayMember`: its role, the mesh addresses, the WAN RTT from
    which with the cluster's declared health check the health check and GCS timeouts follow,
    :func:`wan_config`, and who reads the token how).

    GPUs are declared to Ray as logical GPUs (``--num-gpus``), simulated ones too (the
    state says so); the object store is the policy's size, else its percent of the node's
    declared memory (:func:`object_store_bytes`, as for KubeRay pods).
    """
    from .catalog import gpu_catalog

    flavor = gpu_catalog()[node.gpus[0].model]["flavor"] if node.gpus else None
    store = (
        ray.object_store_memory_mib * (1 << 20)
        if ray.object_store_memory_mib is not None
        else object_store_bytes(node.memory_gib, ray.object_store_percent or 0)
    )
    ports = dict(sorted(ray.ports.items()))
    state: RayNodeState = {
        "cluster": ray.name,
        "role": member.role,
        "head": member.head,
        "user": RAY_USER,
        "version": member.ray_version,
        "requirements": [p.requirement for p in ray.lock],
        "lock": [{"requirement": p.requirement, "hashes": list(p.hashes)} for p in ray.lock],
        "package_index": ray.package_index,
        "index_ca": ray.index_ca,
        "node_ip": member.node_ip,
        "head_ip": member.head_ip,
        "gcs_address": f"{member.head_ip}:{ports['gcs']}",
        "num_cpus": node.cpus,
        "num_gpus": sum(s.count for s in node.gpus),
        "simulated_gpus": bool(node.gpus) and node.gpu_backend == "simulated",
        "resources": accelerator_resources(node.gpu_models),
        "labels": ray_node_labels(node.site, member.region, flavor),
        "object_store_bytes": store,
        "ports": ports,
        "dashboard": {"host": member.head_ip, "port": ray.dashboard_port}
        if member.role == "head" and ray.dashboard_enabled
        else None,
        "firewall": firewall_rule(
            ray, member.interface, member.members, member.role == "head", member.token_clients
        ),
        "token_source": token_source(member.head_ip, ports["token"])
        if member.role == "worker" and member.token_by_pull
        else None,
        "wan_rtt_ms": round(member.wan_rtt, 3),
        "config": wan_config(member.wan_rtt, ray.health_check),
        "start_args": [],
    }
    state["start_args"] = start_args(state)
    return state
