"""The typed, immutable fleet model built from schema-valid documents.

Every object keeps its ``source`` (file and document index) so that semantic checks can
point at the exact place. Defaults stated in ``schemas/`` (each field's description says
"default ...") are applied here, once: later layers read every field as present.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from .diagnostics import Finding, Source
from .loader import RawDocument

DEFAULT_LISTEN_PORT = 51820
DEFAULT_MTU = 1420  # 1500 - 80 bytes of WireGuard-over-IPv6 overhead (wg-quick's choice)
DEFAULT_KEEPALIVE_S = 25  # wg(8): "a sensible interval ... is 25"
# Defaults of nested policy objects, by what they belong to (as stated in schemas/).
HUGEPAGES_DEFAULTS = {"size_kib": 2048}
MIG_DEFAULTS = {"profiles": ()}
SCRATCH_DEFAULTS = {"filesystem": "xfs", "raid0": True, "storage_class": "swarm-scratch"}
STORAGE_CLASS_DEFAULTS = {
    "parameters": {},
    "reclaim_policy": "Delete",
    "volume_binding_mode": "WaitForFirstConsumer",
    "default": False,
}
VOLUME_DEFAULTS = {"purpose": "other", "access_modes": ("ReadWriteMany",)}
# Cluster layer (schemas/cluster.schema.json; allocation.schema.json tenants[].ray).
DEFAULT_FLEET_NAME = "swarm"  # swarm.io/fleet when no Cluster document names the fleet
RAY_HEAD_DEFAULTS = {"cpus": 4, "memory_gib": 16}
RAY_OBJECT_STORE_PERCENT = 30  # Ray's own default share of memory for the object store

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _frozen(d: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(d)) if d else _EMPTY


def _defaulted(d: Mapping[str, Any], defaults: Mapping[str, Any]) -> Mapping[str, Any]:
    """``d`` with the keys it leaves out taken from ``defaults``, read-only."""
    return MappingProxyType({**defaults, **d})


@dataclass(frozen=True, slots=True)
class Site:
    name: str
    source: Source
    region: str
    underlay: ipaddress.IPv4Network
    wan: Mapping[str, Any]
    gateway: ipaddress.IPv4Address | None = None
    management: ipaddress.IPv4Network | None = None  # where SSH may reach nodes besides the underlay
    apt_proxy: str | None = None  # the site's package cache (http://HOST:PORT), or none


@dataclass(frozen=True, slots=True)
class GpuSlot:
    model: str
    count: int


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    source: Source
    labels: Mapping[str, str]
    site: str
    address: ipaddress.IPv4Address
    ssh_host: str
    ssh_port: int
    ssh_user: str
    roles: tuple[str, ...]
    gpu_backend: Literal["nvml", "simulated"]
    cpus: int
    memory_gib: int
    gpus: tuple[GpuSlot, ...]
    nvme: tuple[tuple[str, int], ...]
    nic_speed_gbps: float | None
    nat: bool
    endpoint: str | None  # as declared; see public_endpoint
    listen_port: int | None  # None: the Mesh's default
    mesh_address: ipaddress.IPv4Address | None

    @property
    def public_endpoint(self) -> str | None:
        """Where other sites reach the node: None behind NAT, else the endpoint or the address."""
        return None if self.nat else (self.endpoint or str(self.address))

    @property
    def gpu_models(self) -> tuple[str, ...]:
        return tuple(slot.model for slot in self.gpus)


@dataclass(frozen=True, slots=True)
class GpuProfile:
    name: str
    source: Source
    spec: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class HostProfile:
    name: str
    source: Source
    include: tuple[str, ...]
    sysctls: Mapping[str, Any]
    hugepages: Mapping[str, int] | None
    transparent_hugepages: str | None
    swappiness: int | None
    cpu_governor: str | None
    # sysctl key -> why the operator allows a value that opens or endangers the node
    allow_unsafe: Mapping[str, str] = field(default_factory=lambda: _EMPTY)


@dataclass(frozen=True, slots=True)
class Selector:
    nodes: frozenset[str] | None = None
    sites: frozenset[str] | None = None
    roles: frozenset[str] | None = None
    gpu_models: frozenset[str] | None = None
    labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY)

    def matches(self, node: Node) -> bool:
        """True when every given criterion matches (AND); any entry of a list may match (OR)."""
        return (
            (self.nodes is None or node.name in self.nodes)
            and (self.sites is None or node.site in self.sites)
            and (self.roles is None or not self.roles.isdisjoint(node.roles))
            and (self.gpu_models is None or not self.gpu_models.isdisjoint(node.gpu_models))
            and all(node.labels.get(k) == v for k, v in self.labels.items())
        )


@dataclass(frozen=True, slots=True)
class Assignment:
    name: str
    source: Source
    selector: Selector
    gpu_profile: str | None
    host_profile: str | None
    precedence: int


@dataclass(frozen=True, slots=True)
class MeshSite:
    topology: str
    hub: str | None


@dataclass(frozen=True, slots=True)
class Mesh:
    name: str
    source: Source
    cidr: ipaddress.IPv4Network
    interface: str
    listen_port: int
    mtu: int
    persistent_keepalive_s: int
    topology: str
    sites: Mapping[str, MeshSite]

    def site(self, name: str) -> MeshSite:
        return self.sites.get(name) or MeshSite(self.topology, None)


@dataclass(frozen=True, slots=True)
class Priority:
    name: str
    source: Source
    value: int
    preemption_policy: str
    global_default: bool
    description: str


@dataclass(frozen=True, slots=True)
class Quota:
    flavor: str
    nominal_quota: int
    borrowing_limit: int | None
    lending_limit: int | None


@dataclass(frozen=True, slots=True)
class Queue:
    name: str
    cohort: str | None
    fair_sharing_weight: float
    within_cluster_queue: str
    reclaim_within_cohort: str
    borrow_within_cohort: str
    quotas: tuple[Quota, ...]


@dataclass(frozen=True, slots=True)
class RayWorkers:
    """One worker group of a tenant's RayCluster (sizes None: derived from the flavor's nodes)."""

    flavor: str
    min_replicas: int
    max_replicas: int
    gpus: int | None
    cpus: int | None
    memory_gib: int | None


@dataclass(frozen=True, slots=True)
class RayRequest:
    """A Ray cluster as a policy asks for it (``tenants[].ray``); decided by ``resolve.ray``."""

    version: str
    image: str | None  # None: rayproject/ray:<version>-gpu
    priority: str | None  # None: the global default Priority
    object_store_percent: int
    head_cpus: int
    head_memory_gib: int
    workers: tuple[RayWorkers, ...]


@dataclass(frozen=True, slots=True)
class Tenant:
    name: str
    namespace: str
    queue: str
    priorities: tuple[str, ...] | None  # None: all
    caps: Mapping[str, Any] | None = None  # as declared (schema: tenants[].caps); None: no caps
    ray: RayRequest | None = None


@dataclass(frozen=True, slots=True)
class Cohort:
    """A Kueue Cohort that needs an object (a parent or a weight)."""

    name: str
    parent: str | None
    fair_sharing_weight: float


@dataclass(frozen=True, slots=True)
class Allocation:
    name: str
    source: Source
    queues: tuple[Queue, ...]
    tenants: tuple[Tenant, ...]
    cohorts: tuple[Cohort, ...] = ()


@dataclass(frozen=True, slots=True)
class Rollout:
    """Rolling batches for node convergence (Ansible ``serial``/``max_fail_percentage``)."""

    name: str
    source: Source | None  # None: the defaults, no document
    canary_hosts: int = 1
    batch_percent: int = 25
    max_fail_percentage: int = 0


# Risk flags of `swarm review` and what each does when the fleet's ReviewPolicy does not say
# (schemas/reviewpolicy.schema.json describes each).
REVIEW_FLAG_DEFAULTS: Mapping[str, str] = MappingProxyType(
    {
        "rollout-step-exceeded": "warn",
        "driver-without-canary": "block",
        "preemption-gained": "warn",
        "quota-over-capacity": "block",
        "node-removed-backing-quota": "warn",
        "mesh-restart-on-relay-or-hub": "block",
        "ssh-target-changed": "warn",
    }
)


@dataclass(frozen=True, slots=True)
class ReviewPolicy:
    """What `swarm review` does with each risk flag (kind ReviewPolicy): flag id -> block |
    warn | off, every flag present (the defaults filled in)."""

    name: str
    source: Source | None
    flags: Mapping[str, str] = field(default_factory=lambda: REVIEW_FLAG_DEFAULTS)


@dataclass(frozen=True, slots=True)
class Storage:
    name: str
    source: Source
    scratch: Mapping[str, Any] | None
    classes: tuple[Mapping[str, Any], ...]
    volumes: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    """How the fleet appears in Kubernetes (kind Cluster); defaults when no document declares it."""

    name: str  # the fleet's name: label swarm.io/fleet
    source: Source | None
    system_namespace: str = "swarm-system"
    gpu_namespace: str = "gpu-operator"
    labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    gpu_taint: bool = True


# Ray's ports, fixed so that a firewall can keep every one off the underlay (ray start flags).
RAY_PORTS = {
    "gcs": 6379,
    "node_manager": 6380,
    "object_manager": 6381,
    "runtime_env_agent": 6382,
    "dashboard_agent_grpc": 6383,
    "dashboard_agent_http": 6384,
    "metrics_export": 6385,
    "client_server": 10001,
    "min_worker": 10002,
    "max_worker": 10100,
}
RAY_DASHBOARD_PORT = 8265
# What workers run on when no selector is given.
RAY_DEFAULT_WORKERS = {"roles": ["gpu-worker"]}


@dataclass(frozen=True, slots=True)
class RayCluster:
    """One Ray cluster on the fleet's own nodes over the mesh (kind RayCluster); defaults applied."""

    name: str
    source: Source
    ray_version: str
    head: Selector
    workers: Selector
    object_store_percent: int | None  # exactly one of these two is set
    object_store_memory_mib: int | None
    dashboard_enabled: bool
    dashboard_port: int
    ports: Mapping[str, int]
    package_index: str
    packages: tuple[str, ...]
    declared_keys: frozenset[str] = frozenset()  # spec keys the document gave (the rest defaulted)


@dataclass(frozen=True)
class LatencyMatrix:
    """Measured site-to-site RTT (kind LatencyMatrix): ``rtt_ms[(a, b)]`` in ms, both orders present."""

    name: str
    source: Source | None
    rtt_ms: Mapping[tuple[str, str], float]


@dataclass(frozen=True)
class NodeAcceptance:
    """Admission thresholds (kind NodeAcceptance): each rule is ``(match, thresholds)``.

    ``match`` maps site / role / gpu_model to a value (empty: every node); ``thresholds``
    maps a threshold name (``min_scratch_iops``, ...; units in the name) to its number.
    """

    name: str
    source: Source | None
    rules: tuple[tuple[Mapping[str, str], Mapping[str, float]], ...]


@dataclass(frozen=True)
class Fleet:
    """Everything declared, by kind and name, in name order. Singletons may be None."""

    sites: Mapping[str, Site]
    nodes: Mapping[str, Node]
    gpu_profiles: Mapping[str, GpuProfile]
    host_profiles: Mapping[str, HostProfile]
    assignments: Mapping[str, Assignment]
    priorities: Mapping[str, Priority]
    mesh: Mesh | None
    allocation: Allocation | None
    storage: Storage | None
    rollout: Rollout | None = None
    ray: RayCluster | None = None
    cluster: ClusterSettings = field(default_factory=lambda: ClusterSettings(DEFAULT_FLEET_NAME, None))
    review: ReviewPolicy = field(default_factory=lambda: ReviewPolicy(DEFAULT_FLEET_NAME, None))
    latency: LatencyMatrix | None = None
    acceptance: NodeAcceptance | None = None
    # Names of documents that failed schema validation, by kind: references to them are
    # not reported again as unresolved.
    invalid_names: Mapping[str, frozenset[str]] = field(default_factory=lambda: _EMPTY)
    # Kinds of documents that failed (UNKNOWN_KIND for one whose kind is not known, or a
    # file that could not be read at all), and those of which a failed one had no name.
    invalid_kinds: frozenset[str] = frozenset()
    unnamed_kinds: frozenset[str] = frozenset()

    def complete(self, kind: str) -> bool:
        """Every document of ``kind`` is in the model: none failed its schema, and none
        failed without a known kind. Checks over the whole set of a kind (a selector that
        matches no node, capacity, a flavor no node has) are left out when it is not:
        their finding would repeat another, not add one."""
        return kind not in self.invalid_kinds and UNKNOWN_KIND not in self.invalid_kinds

    def may_declare(self, kind: str, name: str) -> bool:
        """``name`` may be declared as ``kind`` by a document that failed: one of that name,
        or one whose name (or kind, or whole file) could not be read."""
        return (
            name in self.invalid_names.get(kind, ())
            or kind in self.unnamed_kinds
            or UNKNOWN_KIND in self.unnamed_kinds
        )


def _ray_request(r: Mapping[str, Any]) -> RayRequest:
    head = {**RAY_HEAD_DEFAULTS, **r.get("head", {})}
    return RayRequest(
        version=r["version"],
        image=r.get("image"),
        priority=r.get("priority"),
        object_store_percent=r.get("object_store_percent", RAY_OBJECT_STORE_PERCENT),
        head_cpus=head["cpus"],
        head_memory_gib=head["memory_gib"],
        workers=tuple(
            RayWorkers(
                w["flavor"],
                w.get("min_replicas", 0),
                w["max_replicas"],
                w.get("gpus"),
                w.get("cpus"),
                w.get("memory_gib"),
            )
            for w in r["workers"]
        ),
    )


def _selector(sel: Mapping[str, Any]) -> Selector:
    """A selector document (common.schema.json#/$defs/selector) as a Selector."""

    def opt(key: str) -> frozenset[str] | None:
        return frozenset(sel[key]) if key in sel else None

    return Selector(opt("nodes"), opt("sites"), opt("roles"), opt("gpu_models"), _frozen(sel.get("labels")))


def _build(
    kind: str, name: str, src: Source, spec: dict[str, Any], meta: dict[str, Any], findings: list[Finding]
) -> Any:
    def net(path: tuple[Any, ...], text: str) -> ipaddress.IPv4Network | None:
        try:
            return ipaddress.IPv4Network(text, strict=True)
        except ValueError as exc:
            findings.append(
                Finding(src, path, "network.invalid", f"{text!r} is not a valid IPv4 network: {exc}")
            )
            return None

    if kind == "Site":
        underlay = net(("spec", "underlay", "cidr"), spec["underlay"]["cidr"])
        if underlay is None:
            return None
        gateway = spec["underlay"].get("gateway")
        management = None
        if "management" in spec:
            management = net(("spec", "management", "cidr"), spec["management"]["cidr"])
            if management is None:
                return None
        return Site(
            name,
            src,
            spec["region"],
            underlay,
            _frozen(spec.get("wan")),
            ipaddress.IPv4Address(gateway) if gateway else None,
            management,
            spec.get("package_cache", {}).get("apt_proxy"),
        )
    if kind == "Node":
        ssh, hw, mesh = spec.get("ssh", {}), spec["hardware"], spec.get("mesh", {})
        nat = mesh.get("nat", False)
        return Node(
            name=name,
            source=src,
            labels=_frozen(meta.get("labels")),
            site=spec["site"],
            address=ipaddress.IPv4Address(spec["address"]),
            ssh_host=ssh.get("host", spec["address"]),
            ssh_port=ssh.get("port", 22),
            ssh_user=ssh.get("user", "root"),
            roles=tuple(sorted(spec["roles"])),
            gpu_backend=spec.get("gpu_backend", "nvml"),
            cpus=hw["cpus"],
            memory_gib=hw["memory_gib"],
            gpus=tuple(GpuSlot(g["model"], g["count"]) for g in hw.get("gpus", ())),
            nvme=tuple((d["device"], d["size_gib"]) for d in hw.get("nvme", ())),
            nic_speed_gbps=hw.get("nic_speed_gbps"),
            nat=nat,
            endpoint=mesh.get("endpoint"),
            listen_port=mesh.get("listen_port"),
            mesh_address=ipaddress.IPv4Address(mesh["address"]) if "address" in mesh else None,
        )
    if kind == "GpuProfile":
        if "mig" in spec:
            spec = {**spec, "mig": _defaulted(spec["mig"], MIG_DEFAULTS)}
        return GpuProfile(name, src, _frozen(spec))
    if kind == "HostProfile":
        return HostProfile(
            name,
            src,
            tuple(spec.get("include", ())),
            _frozen(spec.get("sysctls")),
            _defaulted(spec["hugepages"], HUGEPAGES_DEFAULTS) if "hugepages" in spec else None,
            spec.get("transparent_hugepages"),
            spec.get("swappiness"),
            spec.get("cpu_governor"),
            _frozen(spec.get("allow_unsafe_sysctls")),
        )
    if kind == "Assignment":
        return Assignment(
            name,
            src,
            _selector(spec["selector"]),
            spec.get("gpu_profile"),
            spec.get("host_profile"),
            spec.get("precedence", 0),
        )
    if kind == "RayCluster":
        store = spec.get("object_store_memory_mib")
        dashboard = spec.get("dashboard", {})
        return RayCluster(
            name=name,
            source=src,
            ray_version=spec["ray_version"],
            head=_selector(spec["head"]["selector"]),
            workers=_selector(spec.get("workers", {}).get("selector", RAY_DEFAULT_WORKERS)),
            object_store_percent=None
            if store
            else spec.get("object_store_percent", RAY_OBJECT_STORE_PERCENT),
            object_store_memory_mib=store,
            dashboard_enabled=dashboard.get("enabled", True),
            dashboard_port=dashboard.get("port", RAY_DASHBOARD_PORT),
            ports=MappingProxyType({**RAY_PORTS, **spec.get("ports", {})}),
            package_index=spec["package_index"]["url"],
            packages=tuple(spec.get("packages", ())),
            declared_keys=frozenset(spec),
        )
    if kind == "Mesh":
        cidr = net(("spec", "cidr"), spec["cidr"])
        if cidr is None:
            return None
        sites = {
            site: MeshSite(o.get("topology", spec.get("topology", "full-mesh")), o.get("hub"))
            for site, o in spec.get("sites", {}).items()
        }
        return Mesh(
            name,
            src,
            cidr,
            spec.get("interface", "wg0"),
            spec.get("listen_port", DEFAULT_LISTEN_PORT),
            spec.get("mtu", DEFAULT_MTU),
            spec.get("persistent_keepalive_s", DEFAULT_KEEPALIVE_S),
            spec.get("topology", "full-mesh"),
            MappingProxyType(sites),
        )
    if kind == "Priority":
        return Priority(
            name,
            src,
            spec["value"],
            spec.get("preemption_policy", "PreemptLowerPriority"),
            spec.get("global_default", False),
            spec.get("description", ""),
        )
    if kind == "Allocation":
        queues = tuple(
            Queue(
                q["name"],
                q.get("cohort"),
                q.get("fair_sharing_weight", 1),
                q.get("preemption", {}).get("within_cluster_queue", "Never"),
                q.get("preemption", {}).get("reclaim_within_cohort", "Never"),
                q.get("preemption", {}).get("borrow_within_cohort", "Never"),
                tuple(
                    Quota(x["flavor"], x["nominal_quota"], x.get("borrowing_limit"), x.get("lending_limit"))
                    for x in q["quotas"]
                ),
            )
            for q in spec["queues"]
        )
        tenants = tuple(
            Tenant(
                t["name"],
                t.get("namespace", t["name"]),
                t["queue"],
                tuple(t["priorities"]) if "priorities" in t else None,
                _frozen(t["caps"]) if "caps" in t else None,
                _ray_request(t["ray"]) if "ray" in t else None,
            )
            for t in spec.get("tenants", ())
        )
        cohorts = tuple(
            Cohort(c["name"], c.get("parent"), c.get("fair_sharing_weight", 1))
            for c in spec.get("cohorts", ())
        )
        return Allocation(name, src, queues, tenants, cohorts)
    if kind == "Storage":
        return Storage(
            name,
            src,
            _defaulted(spec["scratch"], SCRATCH_DEFAULTS) if "scratch" in spec else None,
            tuple(_defaulted(c, STORAGE_CLASS_DEFAULTS) for c in spec.get("classes", ())),
            tuple(_defaulted(v, VOLUME_DEFAULTS) for v in spec.get("volumes", ())),
        )
    if kind == "Rollout":
        return Rollout(name, src, **spec)  # the schema admits only the dataclass's fields
    if kind == "ReviewPolicy":
        return ReviewPolicy(name, src, _defaulted(spec.get("flags", {}), REVIEW_FLAG_DEFAULTS))
    if kind == "LatencyMatrix":
        rtt: dict[tuple[str, str], float] = {}
        for p in spec["pairs"]:
            rtt[(p["a"], p["b"])] = rtt[(p["b"], p["a"])] = float(p["rtt_ms"])
        return LatencyMatrix(name, src, MappingProxyType(rtt))
    if kind == "NodeAcceptance":
        rules = tuple(
            (
                _frozen(r.get("match", {})),
                MappingProxyType({k: float(v) for k, v in r.items() if k != "match"}),
            )
            for r in spec["rules"]
        )
        return NodeAcceptance(name, src, rules)
    if kind == "Cluster":
        # The schema admits only the dataclass's fields.
        return ClusterSettings(name, src, **{**spec, "labels": _frozen(spec.get("labels"))})
    raise ValueError(f"unknown kind {kind}")  # unreachable: schemas admit only known kinds


SINGLETONS = (
    "Mesh",
    "Allocation",
    "Storage",
    "Rollout",
    "Cluster",
    "RayCluster",
    "ReviewPolicy",
    "LatencyMatrix",
    "NodeAcceptance",
)
UNKNOWN_KIND = "?"
_FIELD = {
    "Site": "sites",
    "Node": "nodes",
    "GpuProfile": "gpu_profiles",
    "HostProfile": "host_profiles",
    "Assignment": "assignments",
    "Priority": "priorities",
}


_KNOWN_KINDS = frozenset((*SINGLETONS, "Site", "Node", "GpuProfile", "HostProfile", "Assignment", "Priority"))


def build_fleet(
    valid: list[RawDocument], invalid: list[RawDocument], unread: bool = False
) -> tuple[Fleet, list[Finding]]:
    """Build the model from schema-valid documents. ``unread``: a fleet file could not be
    read (or parsed) at all, so any kind may miss documents.

    Returns the fleet and findings for what only the whole set can show: duplicate names
    (``name.duplicate``), more than one Mesh/Allocation/Storage/Rollout/Cluster (``kind.singleton``) and
    networks that are malformed (``network.invalid``). The first of duplicates is kept.
    """
    findings: list[Finding] = []
    by_kind: dict[str, dict[str, Any]] = {k: {} for k in (*_FIELD, *SINGLETONS)}
    for doc in valid:
        kind, meta = doc.data["kind"], doc.data["metadata"]
        name = meta["name"]
        seen = by_kind[kind]
        if name in seen:
            earlier = seen[name].source
            findings.append(
                Finding(
                    doc.source,
                    ("metadata", "name"),
                    "name.duplicate",
                    f"{kind} {name!r} is already declared at {earlier.file} (document {earlier.index + 1})",
                )
            )
            continue
        if kind in SINGLETONS and seen:
            other = next(iter(seen.values()))
            findings.append(
                Finding(
                    doc.source,
                    ("kind",),
                    "kind.singleton",
                    f"a fleet has one {kind}; {other.name!r} is already declared at {other.source.file}",
                )
            )
            continue
        obj = _build(kind, name, doc.source, doc.data.get("spec", {}), meta, findings)
        if obj is not None:
            seen[name] = obj
    invalid_names: dict[str, set[str]] = {}
    invalid_kinds: set[str] = {UNKNOWN_KIND} if unread else set()
    unnamed_kinds: set[str] = {UNKNOWN_KIND} if unread else set()
    for doc in invalid:
        data = doc.data
        kind = data.get("kind") if isinstance(data, dict) else None
        kind = kind if isinstance(kind, str) and kind in _KNOWN_KINDS else UNKNOWN_KIND
        invalid_kinds.add(kind)
        name = (
            data["metadata"].get("name")
            if isinstance(data, dict) and isinstance(data.get("metadata"), dict)
            else None
        )
        if kind != UNKNOWN_KIND and isinstance(name, str):
            invalid_names.setdefault(kind, set()).add(name)
        else:
            unnamed_kinds.add(kind)

    def first(kind: str) -> Any:
        return next(iter(by_kind[kind].values()), None)

    fleet = Fleet(
        **{attr: MappingProxyType(dict(sorted(by_kind[k].items()))) for k, attr in _FIELD.items()},
        mesh=first("Mesh"),
        allocation=first("Allocation"),
        storage=first("Storage"),
        rollout=first("Rollout"),
        ray=first("RayCluster"),
        cluster=first("Cluster") or ClusterSettings(DEFAULT_FLEET_NAME, None),
        review=first("ReviewPolicy") or ReviewPolicy(DEFAULT_FLEET_NAME, None),
        latency=first("LatencyMatrix"),
        acceptance=first("NodeAcceptance"),
        invalid_names=MappingProxyType({k: frozenset(v) for k, v in invalid_names.items()}),
        invalid_kinds=frozenset(invalid_kinds),
        unnamed_kinds=frozenset(unnamed_kinds),
    )
    return fleet, findings
