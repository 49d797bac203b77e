"""The typed, immutable fleet model built from schema-valid documents.

Every object keeps its ``source`` (file and document index) so that semantic checks can
point at the exact place. Defaults stated in ``schemas/`` (each field's ``default`` and its
description) are applied here, once: a field the documents leave out takes the dataclass
field's default, and a nested policy mapping takes the ``*_DEFAULTS`` mapping below; later
layers read every field as present. tests/unit/test_model_defaults.py holds the schemas'
``default`` values to these.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Literal

from .diagnostics import Finding, Source, close_names
from .loader import RawDocument
from .lockfile import Pin

# Defaults of nested policy objects, by what they belong to (as stated in schemas/).
HUGEPAGES_DEFAULTS = {"size_kib": 2048}
MIG_DEFAULTS = {"profiles": ()}
SCRATCH_DEFAULTS = {
    "filesystem": "xfs",
    "raid0": True,
    "storage_class": "swarm-scratch",
    "tenant_quota_gib": 0,
}
STORAGE_CLASS_DEFAULTS = {
    "parameters": {},
    "reclaim_policy": "Delete",
    "volume_binding_mode": "WaitForFirstConsumer",
    "default": False,
}
VOLUME_DEFAULTS = {"purpose": "other", "access_modes": ("ReadWriteMany",)}
# Cluster layer (schemas/cluster.schema.json; allocation.schema.json tenants[].ray).
DEFAULT_FLEET_NAME = "swarm"  # swarm.io/fleet when no Cluster document names the fleet
RAY_OBJECT_STORE_PERCENT = 30  # Ray's own default share of memory for the object store

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _frozen(d: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(d)) if d else _EMPTY


def _defaulted(d: Mapping[str, Any], defaults: Mapping[str, Any]) -> Mapping[str, Any]:
    """``d`` with the keys it leaves out taken from ``defaults``, read-only."""
    return MappingProxyType({**defaults, **d})


@dataclass(frozen=True, slots=True, kw_only=True)
class Site:
    name: str
    source: Source
    region: str
    # Who runs the site (default: the site's own name, a provider of its own). Relays are
    # judged by it: a relay of one provider carrying another's traffic is a review flag.
    provider: str
    underlay: ipaddress.IPv4Network
    # As declared; an emulation input for the lab's WAN delay line and a hint for people,
    # never used to choose relays (those come from the measured LatencyMatrix).
    wan: Mapping[str, Any]
    gateway: ipaddress.IPv4Address | None = None
    management: ipaddress.IPv4Network | None = None  # where SSH may reach nodes besides the underlay
    apt_proxy: str | None = None  # the site's package cache (http://HOST:PORT), or none


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSlot:
    model: str
    count: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Node:
    name: str
    source: Source
    labels: Mapping[str, str]
    site: str
    address: ipaddress.IPv4Address
    ssh_host: str  # default: the address (set by the builder)
    ssh_port: int = 22
    ssh_user: str = "root"
    ssh_host_keys: tuple[str, ...] = ()  # "<type> <base64>"; none: the operator's known_hosts decides
    roles: tuple[str, ...]
    gpu_backend: Literal["nvml", "simulated"] = "nvml"
    cpus: int
    memory_gib: int
    gpus: tuple[GpuSlot, ...] = ()
    nvme: tuple[tuple[str, int], ...] = ()
    nic_speed_gbps: float | None = None
    nat: bool = False
    endpoint: str | None = None  # as declared; see public_endpoint
    listen_port: int | None = None  # None: the Mesh's default
    mesh_address: ipaddress.IPv4Address | None = None
    # Its WireGuard public key as recorded in the fleet (swarm node bootstrap prints the change).
    wireguard_public_key: str | None = None
    # How the node converges: "push" (the controller's swarm converge) or "pull" (its agent).
    convergence: Literal["push", "pull"] = "push"

    @property
    def public_endpoint(self) -> str | None:
        """Where other sites reach the node: None behind NAT, else the endpoint or the address."""
        return None if self.nat else (self.endpoint or str(self.address))

    @property
    def gpu_models(self) -> tuple[str, ...]:
        return tuple(slot.model for slot in self.gpus)


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuProfile:
    name: str
    source: Source
    spec: Mapping[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class HostProfile:
    name: str
    source: Source
    include: tuple[str, ...] = ()
    sysctls: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    hugepages: Mapping[str, int] | None = None  # HUGEPAGES_DEFAULTS filled in
    transparent_hugepages: str | None = None
    swappiness: int | None = None
    cpu_governor: str | None = None
    # sysctl key -> why the operator allows a value that opens or endangers the node
    allow_unsafe: Mapping[str, str] = field(default_factory=lambda: _EMPTY)


@dataclass(frozen=True, slots=True, kw_only=True)
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


@dataclass(frozen=True, slots=True, kw_only=True)
class Assignment:
    name: str
    source: Source
    selector: Selector
    gpu_profile: str | None = None
    host_profile: str | None = None
    precedence: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class MeshSite:
    topology: str  # default: the Mesh's topology
    hub: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MeshController:
    """The operator's controller as a mesh member (Mesh ``spec.controller``): a peer of every
    node, reaching the nodes ``ssh_over_mesh`` names at their mesh addresses. Not a Node: the
    fleet does not converge it. ``source`` is the Mesh document's."""

    name: str = "controller"
    source: Source
    # None: not recorded; push mode uses the running controller's own key (engines/controller.py)
    public_key: str | None = None
    mesh_address: ipaddress.IPv4Address | None = None  # None: derived from name (or recorded)
    endpoint: str | None = None  # host or host:port the nodes reach it at; None: none
    listen_port: int | None = None  # None: the Mesh's default
    interface: str = "swarm0"
    ssh_over_mesh: Literal["none", "nat", "all"] = "nat"


@dataclass(frozen=True, slots=True, kw_only=True)
class Mesh:
    name: str
    source: Source
    cidr: ipaddress.IPv4Network
    interface: str = "wg0"
    listen_port: int = 51820  # UDP
    mtu: int = 1420  # 1500 - 80 bytes of WireGuard-over-IPv6 overhead (wg-quick's choice)
    persistent_keepalive_s: int = 25  # wg(8): "a sensible interval ... is 25"
    topology: str = "full-mesh"
    sites: Mapping[str, MeshSite] = field(default_factory=lambda: _EMPTY)
    # Relays for NAT-to-NAT site pairs (schema spec.relays; resolve.mesh.plan_relays):
    relay_max_site_pairs: int = 64  # site pairs one relay carries at most
    relay_hysteresis_ms: float = 5  # a pair leaves its relay only for a path faster by more
    relay_hysteresis_percent: float = 10  # ... than this many ms and this share of its RTT
    # Providers whose relays may carry any pair, as the pair's own providers' do.
    relay_allowed_providers: tuple[str, ...] = ()
    controller: MeshController | None = None  # spec.controller

    def site(self, name: str) -> MeshSite:
        return self.sites.get(name) or MeshSite(topology=self.topology)


@dataclass(frozen=True, slots=True, kw_only=True)
class Priority:
    name: str
    source: Source
    value: int
    preemption_policy: str = "PreemptLowerPriority"
    global_default: bool = False
    description: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Quota:
    flavor: str
    nominal_quota: int
    borrowing_limit: int | None = None  # None: unlimited within the cohort
    lending_limit: int | None = None  # None: all of nominal_quota may be lent


@dataclass(frozen=True, slots=True, kw_only=True)
class Queue:
    name: str
    cohort: str | None = None
    fair_sharing_weight: float = 1
    within_cluster_queue: str = "Never"
    reclaim_within_cohort: str = "Never"
    borrow_within_cohort: str = "Never"
    quotas: tuple[Quota, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class RayWorkers:
    """One worker group of a tenant's RayCluster (sizes None: derived from the flavor's nodes)."""

    flavor: str
    min_replicas: int = 0
    max_replicas: int
    gpus: int | None = None
    cpus: int | None = None
    memory_gib: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RayRequest:
    """A Ray cluster as a policy asks for it (``tenants[].ray``); decided by ``resolve.ray``."""

    image: str | None = None  # None: rayproject/ray:<ray_version>-gpu (the fleet's Ray, ClusterSettings)
    priority: str | None = None  # None: the global default Priority
    object_store_percent: int = RAY_OBJECT_STORE_PERCENT
    head_cpus: int = 4
    head_memory_gib: int = 16
    workers: tuple[RayWorkers, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Tenant:
    name: str
    namespace: str  # default: the tenant's name (set by the builder)
    queue: str
    priorities: tuple[str, ...] | None = None  # None: all
    caps: Mapping[str, Any] | None = None  # as declared (schema: tenants[].caps); None: no caps
    ray: RayRequest | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Cohort:
    """A Kueue Cohort that needs an object (a parent or a weight)."""

    name: str
    parent: str | None = None
    fair_sharing_weight: float = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class Allocation:
    name: str
    source: Source
    queues: tuple[Queue, ...]
    tenants: tuple[Tenant, ...]
    cohorts: tuple[Cohort, ...] = ()
    fair_sharing: bool = False  # Kueue fair sharing (Configuration fairSharing) instead of classical
    reserved_gpus: Mapping[str, int] = field(default_factory=lambda: _EMPTY)  # flavor -> GPUs in no queue


@dataclass(frozen=True, slots=True, kw_only=True)
class Rollout:
    """Rolling batches for node convergence (Ansible ``serial``/``max_fail_percentage``);
    ``pull``: where pull-mode nodes fetch the fleet from (None: no node may pull)."""

    name: str
    source: Source | None  # None: the defaults, no Rollout declared
    canary_hosts: int = 1
    batch_percent: int = 25
    max_fail_percentage: int = 0
    # Seconds running work gets before a drained node's Ray is stopped (reboots, Ray upgrades).
    drain_grace_s: int = 600
    # The controller's kubeconfig context of the nodes' cluster; None: no Kubernetes drain.
    kubernetes_context: str | None = None
    pull: PullSpec | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PullSpec:
    """Rollout ``spec.pull`` (schemas/rollout.schema.json describes each field).
    ``allowed_signers``: the text of ``allowed_signers_file``, read by validation."""

    remote: str
    ref: str
    fleet: str
    allowed_signers_file: str
    allowed_signers: str = ""
    revoked_signers: tuple[str, ...] = ()  # "keytype base64": gpg.ssh.revocationFile on the nodes
    interval_s: int = 900
    randomized_delay_s: int = 300
    status_port: int = 9100


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
        "relay-crosses-provider": "warn",
        "ssh-host-key-changed": "warn",
        "package-index-changed": "warn",
        "ray-packages-changed": "warn",
        "rollout-loosened": "warn",
        "ray-version-changed": "warn",
        "driver-reboot": "warn",
        "mesh-key-changed": "warn",
        # Who and what the fleet trusts (issue #39, item 3): each blocks unless the base's
        # policy says otherwise.
        "pull-signers-changed": "block",
        "pull-source-changed": "block",
        "mesh-controller-changed": "block",
        "drain-grace-lowered": "block",
        "kubernetes-context-changed": "block",
        # A queue's quota cut below what its tenants' RayClusters hold: Kueue keeps an admitted
        # workload admitted when nominalQuota drops, so nothing stops at merge (as for
        # node-removed-backing-quota).
        "quota-below-ray-cluster": "warn",
        # A Pulumi stack of the fleet whose kubernetes:context changes or that moves to another
        # fleet: its next `pulumi up` updates another cluster (issue #39, item 2).
        "stack-target-changed": "block",
    }
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReviewPolicy:
    """What `swarm review` does with each risk flag (kind ReviewPolicy): flag id -> block |
    warn | off, every flag present (the defaults filled in)."""

    name: str
    source: Source | None
    flags: Mapping[str, str] = field(default_factory=lambda: REVIEW_FLAG_DEFAULTS)


@dataclass(frozen=True, slots=True, kw_only=True)
class Storage:
    name: str
    source: Source
    scratch: Mapping[str, Any] | None = None  # SCRATCH_DEFAULTS filled in
    classes: tuple[Mapping[str, Any], ...] = ()  # STORAGE_CLASS_DEFAULTS filled in
    volumes: tuple[Mapping[str, Any], ...] = ()  # VOLUME_DEFAULTS filled in


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSettings:
    """How the fleet appears in Kubernetes (kind Cluster); defaults when no document declares it."""

    name: str  # the fleet's name: label swarm.io/fleet
    source: Source | None
    system_namespace: str = "swarm-system"
    gpu_namespace: str = "gpu-operator"
    labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    gpu_taint: bool = True
    # The fleet's one Ray release (both the bare-node RayCluster and every KubeRay cluster);
    # None: not declared (ray.version-missing when the fleet declares any Ray).
    ray_version: str | None = None


# Ray's ports, fixed so that a firewall can keep every one off the underlay (ray start flags).
RAY_PORTS = {
    "gcs": 6379,
    "node_manager": 6380,
    "object_manager": 6381,
    "runtime_env_agent": 6382,
    "dashboard_agent_grpc": 6383,
    "dashboard_agent_http": 6384,
    "metrics_export": 6385,
    # The head's token port for pull workers (a systemd socket, not Ray's; resolve.ray.token_admission).
    "token": 6386,
    "client_server": 10001,
    "min_worker": 10002,
    "max_worker": 10100,
}
RAY_DASHBOARD_PORT = 8265
# What workers run on when no selector is given.
RAY_DEFAULT_WORKERS = {"roles": ["gpu-worker"]}


@dataclass(frozen=True, slots=True, kw_only=True)
class RayCluster:
    """One Ray cluster on the fleet's own nodes over the mesh (kind RayCluster); defaults applied."""

    name: str
    source: Source
    head: Selector
    workers: Selector  # default: _selector(RAY_DEFAULT_WORKERS)
    object_store_percent: int | None = RAY_OBJECT_STORE_PERCENT  # exactly one of these two is set
    object_store_memory_mib: int | None = None
    dashboard_enabled: bool = True
    dashboard_port: int = RAY_DASHBOARD_PORT
    dashboard_clients: tuple[str, ...] = ()  # CIDRs besides the members allowed to the dashboard
    # Ray's health_check_<name> settings the document declares (period_ms, timeout_ms,
    # failure_threshold, under their Ray names); the rest are Ray's (resolve.ray.wan_config).
    health_check: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    ports: Mapping[str, int] = field(default_factory=lambda: MappingProxyType(RAY_PORTS))
    package_index: str  # https:// only (the schema refuses http)
    packages: tuple[str, ...] = ()
    lock_file: str  # as declared: relative to the policy file's directory
    index_ca_file: str | None = None  # package_index.ca_file as declared; None: pip's trust store
    # Read by the validator (resolve.validate, fleet.lockfile) once the model is built: the
    # lock's pins in file order, and the CA's certificates re-encoded as PEM.
    lock: tuple[Pin, ...] = ()
    index_ca: str | None = None
    declared_keys: frozenset[str] = frozenset()  # spec keys the document gave (the rest defaulted)


@dataclass(frozen=True, kw_only=True)
class LatencyMatrix:
    """Measured site-to-site RTT (kind LatencyMatrix): ``rtt_ms[(a, b)]`` in ms, both orders
    present; ``directed_ms[(src, dst)]`` in ms what ``src``'s nodes measured to ``dst``'s
    (a pair's ``a_to_b_ms``, ``b_to_a_ms``: only those given); ``relays[(a, b)]`` (a <= b)
    the relay the NAT'd site pair went through when the matrix was written (what hysteresis
    holds on to; stale entries are ignored)."""

    name: str
    source: Source | None
    rtt_ms: Mapping[tuple[str, str], float]
    relays: Mapping[tuple[str, str], str] = field(default_factory=lambda: MappingProxyType({}))
    directed_ms: Mapping[tuple[str, str], float] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, kw_only=True)
class MeshAddresses:
    """The recorded mesh address of each unpinned node (kind MeshAddresses, written by
    ``swarm mesh allocate``; see :mod:`swarm_infra.resolve.mesh`). An entry whose text is
    not an IPv4 address is left out with a ``network.invalid`` finding."""

    name: str
    source: Source | None
    addresses: Mapping[str, ipaddress.IPv4Address]


@dataclass(frozen=True, kw_only=True)
class NodeAcceptance:
    """Admission thresholds (kind NodeAcceptance): each rule is ``(match, thresholds)``.

    ``match`` maps site / role / gpu_model to a value (empty: every node); ``thresholds``
    maps a threshold name (``min_scratch_iops``, ...; units in the name) to its number;
    ``max_run_age_hours``: the oldest run ``swarm metrics accept`` judges.
    """

    name: str
    source: Source | None
    rules: tuple[tuple[Mapping[str, str], Mapping[str, float]], ...]
    max_run_age_hours: float = 24.0


@dataclass(frozen=True, kw_only=True)
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
    cluster: ClusterSettings = field(
        default_factory=lambda: ClusterSettings(name=DEFAULT_FLEET_NAME, source=None)
    )
    review: ReviewPolicy = field(default_factory=lambda: ReviewPolicy(name=DEFAULT_FLEET_NAME, source=None))
    latency: LatencyMatrix | None = None
    acceptance: NodeAcceptance | None = None
    mesh_addresses: MeshAddresses | None = None
    # Names of documents that failed schema validation, by kind (UNKNOWN_KIND: of a kind
    # that is not known, so of any kind): references to them are not reported again as
    # unresolved.
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
        """``name`` may be declared as ``kind`` by a document that failed: one of that name
        (of that kind, or of a kind not known), or one whose name (or kind and name, or
        whole file) could not be read."""
        return (
            name in self.invalid_names.get(kind, ())
            or name in self.invalid_names.get(UNKNOWN_KIND, ())
            or kind in self.unnamed_kinds
            or UNKNOWN_KIND in self.unnamed_kinds
        )


# ---------------------------------------------------------------------------- builders
# One small builder per kind (the dispatch table _BUILDERS below). A builder passes on what
# the document declares; what it leaves out takes the dataclass field's default.


@dataclass(frozen=True, slots=True, kw_only=True)
class _Doc:
    """One schema-valid document as the builders read it."""

    name: str
    source: Source
    spec: Mapping[str, Any]
    meta: Mapping[str, Any]
    findings: list[Finding]  # where a builder reports what the schema cannot check

    def network(self, path: tuple[str, ...], text: str) -> ipaddress.IPv4Network | None:
        """``text`` as an IPv4 network, or None with a ``network.invalid`` finding."""
        try:
            return ipaddress.IPv4Network(text, strict=True)
        except ValueError as exc:
            self.findings.append(
                Finding(self.source, path, "network.invalid", f"{text!r} is not a valid IPv4 network: {exc}")
            )
            return None


def _given(d: Mapping[str, Any], **fields: str) -> dict[str, Any]:
    """``{field: d[key]}`` for each ``field=key`` that ``d`` declares: the keyword arguments
    that override the dataclass's defaults."""
    return {f: d[k] for f, k in fields.items() if k in d}


def _selector(sel: Mapping[str, Any]) -> Selector:
    """A selector document (common.schema.json#/$defs/selector) as a Selector."""

    def opt(key: str) -> frozenset[str] | None:
        return frozenset(sel[key]) if key in sel else None

    return Selector(
        nodes=opt("nodes"),
        sites=opt("sites"),
        roles=opt("roles"),
        gpu_models=opt("gpu_models"),
        labels=_frozen(sel.get("labels")),
    )


def _site(doc: _Doc) -> Site | None:
    spec = doc.spec
    underlay = doc.network(("spec", "underlay", "cidr"), spec["underlay"]["cidr"])
    if underlay is None:
        return None
    gateway = spec["underlay"].get("gateway")
    management = None
    if "management" in spec:
        management = doc.network(("spec", "management", "cidr"), spec["management"]["cidr"])
        if management is None:
            return None
    return Site(
        name=doc.name,
        source=doc.source,
        region=spec["region"],
        provider=spec.get("provider", doc.name),
        underlay=underlay,
        wan=_frozen(spec.get("wan")),
        gateway=ipaddress.IPv4Address(gateway) if gateway else None,
        management=management,
        apt_proxy=spec.get("package_cache", {}).get("apt_proxy"),
    )


def _node(doc: _Doc) -> Node:
    spec = doc.spec
    ssh, hw, mesh = spec.get("ssh", {}), spec["hardware"], spec.get("mesh", {})
    host_keys: dict[str, Any] = {"ssh_host_keys": tuple(ssh["host_keys"])} if "host_keys" in ssh else {}
    return Node(
        name=doc.name,
        source=doc.source,
        labels=_frozen(doc.meta.get("labels")),
        site=spec["site"],
        address=ipaddress.IPv4Address(spec["address"]),
        ssh_host=ssh.get("host", spec["address"]),
        roles=tuple(sorted(spec["roles"])),
        cpus=hw["cpus"],
        memory_gib=hw["memory_gib"],
        gpus=tuple(GpuSlot(model=g["model"], count=g["count"]) for g in hw.get("gpus", ())),
        nvme=tuple((d["device"], d["size_gib"]) for d in hw.get("nvme", ())),
        mesh_address=ipaddress.IPv4Address(mesh["address"]) if "address" in mesh else None,
        **_given(ssh, ssh_port="port", ssh_user="user"),
        **host_keys,
        **_given(spec, gpu_backend="gpu_backend"),
        **_given(hw, nic_speed_gbps="nic_speed_gbps"),
        **_given(mesh, nat="nat", endpoint="endpoint", listen_port="listen_port"),
        **_given(mesh, wireguard_public_key="public_key"),
        **_given(spec, convergence="convergence"),
    )


def _gpu_profile(doc: _Doc) -> GpuProfile:
    spec = doc.spec
    if "mig" in spec:
        spec = {**spec, "mig": _defaulted(spec["mig"], MIG_DEFAULTS)}
    return GpuProfile(name=doc.name, source=doc.source, spec=_frozen(spec))


def _host_profile(doc: _Doc) -> HostProfile:
    spec = doc.spec
    return HostProfile(
        name=doc.name,
        source=doc.source,
        include=tuple(spec.get("include", ())),
        sysctls=_frozen(spec.get("sysctls")),
        hugepages=_defaulted(spec["hugepages"], HUGEPAGES_DEFAULTS) if "hugepages" in spec else None,
        **_given(
            spec,
            transparent_hugepages="transparent_hugepages",
            swappiness="swappiness",
            cpu_governor="cpu_governor",
        ),
        allow_unsafe=_frozen(spec.get("allow_unsafe_sysctls")),
    )


def _assignment(doc: _Doc) -> Assignment:
    return Assignment(
        name=doc.name,
        source=doc.source,
        selector=_selector(doc.spec["selector"]),
        **_given(doc.spec, gpu_profile="gpu_profile", host_profile="host_profile", precedence="precedence"),
    )


def _ray_cluster(doc: _Doc) -> RayCluster:
    spec = doc.spec
    store = spec.get("object_store_memory_mib")
    return RayCluster(
        name=doc.name,
        source=doc.source,
        head=_selector(spec["head"]["selector"]),
        workers=_selector(spec.get("workers", {}).get("selector", RAY_DEFAULT_WORKERS)),
        object_store_memory_mib=store,
        ports=MappingProxyType({**RAY_PORTS, **spec.get("ports", {})}),
        package_index=spec["package_index"]["url"],
        packages=tuple(spec.get("packages", ())),
        lock_file=spec["lock_file"],
        index_ca_file=spec["package_index"].get("ca_file"),
        declared_keys=frozenset(spec),
        **(
            {"object_store_percent": None}
            if store
            else _given(spec, object_store_percent="object_store_percent")
        ),
        **_given(spec.get("dashboard", {}), dashboard_enabled="enabled", dashboard_port="port"),
        dashboard_clients=tuple(spec.get("dashboard", {}).get("clients", ())),
        health_check=MappingProxyType(
            {f"health_check_{k}": v for k, v in sorted(spec.get("health_check", {}).items())}
        ),
    )


def _mesh(doc: _Doc) -> Mesh | None:
    spec = doc.spec
    cidr = doc.network(("spec", "cidr"), spec["cidr"])
    if cidr is None:
        return None
    mesh = Mesh(
        name=doc.name,
        source=doc.source,
        cidr=cidr,
        **_given(
            spec,
            interface="interface",
            listen_port="listen_port",
            mtu="mtu",
            persistent_keepalive_s="persistent_keepalive_s",
            topology="topology",
        ),
        **_given(
            spec.get("relays", {}),
            relay_max_site_pairs="max_site_pairs",
            relay_hysteresis_ms="hysteresis_ms",
            relay_hysteresis_percent="hysteresis_percent",
        ),
        relay_allowed_providers=tuple(sorted(spec.get("relays", {}).get("allowed_providers", ()))),
    )
    ctl = spec.get("controller")
    if ctl is not None:
        controller = MeshController(
            source=doc.source,
            public_key=ctl.get("public_key"),
            mesh_address=ipaddress.IPv4Address(ctl["address"]) if "address" in ctl else None,
            **_given(
                ctl,
                name="name",
                endpoint="endpoint",
                listen_port="listen_port",
                interface="interface",
                ssh_over_mesh="ssh_over_mesh",
            ),
        )
        mesh = replace(mesh, controller=controller)
    sites = {
        site: MeshSite(topology=o.get("topology", mesh.topology), hub=o.get("hub"))
        for site, o in spec.get("sites", {}).items()
    }
    return replace(mesh, sites=MappingProxyType(sites))


def _priority(doc: _Doc) -> Priority:
    return Priority(
        name=doc.name,
        source=doc.source,
        value=doc.spec["value"],
        **_given(
            doc.spec,
            preemption_policy="preemption_policy",
            global_default="global_default",
            description="description",
        ),
    )


def _queue(q: Mapping[str, Any]) -> Queue:
    return Queue(
        name=q["name"],
        quotas=tuple(
            Quota(
                flavor=x["flavor"],
                nominal_quota=x["nominal_quota"],
                **_given(x, borrowing_limit="borrowing_limit", lending_limit="lending_limit"),
            )
            for x in q["quotas"]
        ),
        **_given(q, cohort="cohort", fair_sharing_weight="fair_sharing_weight"),
        **_given(
            q.get("preemption", {}),
            within_cluster_queue="within_cluster_queue",
            reclaim_within_cohort="reclaim_within_cohort",
            borrow_within_cohort="borrow_within_cohort",
        ),
    )


def _ray_request(r: Mapping[str, Any]) -> RayRequest:
    return RayRequest(
        workers=tuple(
            RayWorkers(
                flavor=w["flavor"],
                max_replicas=w["max_replicas"],
                **_given(w, min_replicas="min_replicas", gpus="gpus", cpus="cpus", memory_gib="memory_gib"),
            )
            for w in r["workers"]
        ),
        **_given(r, image="image", priority="priority", object_store_percent="object_store_percent"),
        **_given(r.get("head", {}), head_cpus="cpus", head_memory_gib="memory_gib"),
    )


def _tenant(t: Mapping[str, Any]) -> Tenant:
    return Tenant(
        name=t["name"],
        namespace=t.get("namespace", t["name"]),
        queue=t["queue"],
        priorities=tuple(t["priorities"]) if "priorities" in t else None,
        caps=_frozen(t["caps"]) if "caps" in t else None,
        ray=_ray_request(t["ray"]) if "ray" in t else None,
    )


def _allocation(doc: _Doc) -> Allocation:
    spec = doc.spec
    return Allocation(
        name=doc.name,
        source=doc.source,
        queues=tuple(_queue(q) for q in spec["queues"]),
        tenants=tuple(_tenant(t) for t in spec.get("tenants", ())),
        cohorts=tuple(
            Cohort(name=c["name"], **_given(c, parent="parent", fair_sharing_weight="fair_sharing_weight"))
            for c in spec.get("cohorts", ())
        ),
        reserved_gpus=_frozen(spec.get("reserved_gpus")),
        **_given(spec, fair_sharing="fair_sharing"),
    )


def _storage(doc: _Doc) -> Storage:
    spec = doc.spec
    return Storage(
        name=doc.name,
        source=doc.source,
        scratch=_defaulted(spec["scratch"], SCRATCH_DEFAULTS) if "scratch" in spec else None,
        classes=tuple(_defaulted(c, STORAGE_CLASS_DEFAULTS) for c in spec.get("classes", ())),
        volumes=tuple(_defaulted(v, VOLUME_DEFAULTS) for v in spec.get("volumes", ())),
    )


def _rollout(doc: _Doc) -> Rollout:
    # The schema admits only the dataclass's fields.
    spec = dict(doc.spec)
    pull_spec = spec.pop("pull", None)
    pull = None
    if pull_spec is not None:
        pull = PullSpec(**{**pull_spec, "revoked_signers": tuple(pull_spec.get("revoked_signers", ()))})
    return Rollout(name=doc.name, source=doc.source, pull=pull, **spec)


def _review_policy(doc: _Doc) -> ReviewPolicy:
    flags = _defaulted(doc.spec.get("flags", {}), REVIEW_FLAG_DEFAULTS)
    return ReviewPolicy(name=doc.name, source=doc.source, flags=flags)


def _latency_matrix(doc: _Doc) -> LatencyMatrix:
    """Findings: ``latency.pair-duplicate`` (a site pair given twice, in either order: which
    figure would count?), ``latency.rtt-implausible`` (0 ms between two different sites: a
    WAN round trip takes time, so 0 is a claim, not a measurement)."""
    rtt: dict[tuple[str, str], float] = {}
    directed: dict[tuple[str, str], float] = {}
    for i, p in enumerate(doc.spec["pairs"]):
        a, b, ms = p["a"], p["b"], float(p["rtt_ms"])
        if (a, b) in rtt:
            doc.findings.append(
                Finding(doc.source, ("spec", "pairs", i), "latency.pair-duplicate", f"{a}-{b} is given twice")
            )
            continue
        figures = (("rtt_ms", ms), ("a_to_b_ms", p.get("a_to_b_ms")), ("b_to_a_ms", p.get("b_to_a_ms")))
        zero = next((key for key, figure in figures if figure == 0), None)
        if a != b and zero is not None:  # the first 0 of the pair: one claim, one finding
            doc.findings.append(
                Finding(
                    doc.source,
                    ("spec", "pairs", i, zero),
                    "latency.rtt-implausible",
                    f"{a}-{b}: 0 ms between two different sites is not a measurement "
                    "(swarm metrics writes the measured p50, above 0)",
                )
            )
        rtt[(a, b)] = rtt[(b, a)] = ms
        for key, src, dst in (("a_to_b_ms", a, b), ("b_to_a_ms", b, a)):
            if key in p:
                directed[(src, dst)] = float(p[key])
    relays: dict[tuple[str, str], str] = {}
    for i, r in enumerate(doc.spec.get("relays", ())):
        pair = (min(r["a"], r["b"]), max(r["a"], r["b"]))
        if pair in relays:
            doc.findings.append(
                Finding(
                    doc.source,
                    ("spec", "relays", i),
                    "latency.pair-duplicate",
                    f"{r['a']}-{r['b']} is given twice",
                )
            )
            continue
        relays[pair] = r["relay"]
    return LatencyMatrix(
        name=doc.name,
        source=doc.source,
        rtt_ms=MappingProxyType(rtt),
        relays=MappingProxyType(relays),
        directed_ms=MappingProxyType(directed),
    )


def _mesh_addresses(doc: _Doc) -> MeshAddresses:
    addresses: dict[str, ipaddress.IPv4Address] = {}
    for node, text in doc.spec["addresses"].items():
        try:
            addresses[node] = ipaddress.IPv4Address(text)
        except ValueError as exc:
            doc.findings.append(
                Finding(
                    doc.source,
                    ("spec", "addresses", node),
                    "network.invalid",
                    f"{text!r} is not a valid IPv4 address: {exc}",
                )
            )
    return MeshAddresses(name=doc.name, source=doc.source, addresses=MappingProxyType(addresses))


def _node_acceptance(doc: _Doc) -> NodeAcceptance:
    rules = tuple(
        (
            _frozen(r.get("match", {})),
            MappingProxyType({k: float(v) for k, v in r.items() if k != "match"}),
        )
        for r in doc.spec["rules"]
    )
    age = doc.spec.get("max_run_age_hours")
    extra = {} if age is None else {"max_run_age_hours": float(age)}
    return NodeAcceptance(name=doc.name, source=doc.source, rules=rules, **extra)


def _cluster(doc: _Doc) -> ClusterSettings:
    # The schema admits only the dataclass's fields.
    spec = {**doc.spec, "labels": _frozen(doc.spec.get("labels"))}
    return ClusterSettings(name=doc.name, source=doc.source, **spec)


# kind -> its builder; None: the document is left out (a finding says why).
_BUILDERS: Mapping[str, Callable[[_Doc], object | None]] = MappingProxyType(
    {
        "Site": _site,
        "Node": _node,
        "GpuProfile": _gpu_profile,
        "HostProfile": _host_profile,
        "Assignment": _assignment,
        "RayCluster": _ray_cluster,
        "Mesh": _mesh,
        "Priority": _priority,
        "Allocation": _allocation,
        "Storage": _storage,
        "Rollout": _rollout,
        "ReviewPolicy": _review_policy,
        "LatencyMatrix": _latency_matrix,
        "NodeAcceptance": _node_acceptance,
        "MeshAddresses": _mesh_addresses,
        "Cluster": _cluster,
    }
)


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
    "MeshAddresses",
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


_KNOWN_KINDS = frozenset(_BUILDERS)


def _meant_kinds(kind: object) -> tuple[str, ...]:
    """The kinds a document that failed may have been meant as: its own, when known; the
    known kind its misspelt one is close to (``Nod``, ``node``: Node, which the schema step's
    "did you mean" names too); else UNKNOWN_KIND, any kind. Only those kinds are incomplete
    (:meth:`Fleet.complete`) and may hold its name (:meth:`Fleet.may_declare`), so one
    misspelt kind does not silence every check of the fleet."""
    if not isinstance(kind, str):
        return (UNKNOWN_KIND,)
    if kind in _KNOWN_KINDS:
        return (kind,)
    return tuple(close_names(kind, sorted(_KNOWN_KINDS))) or (UNKNOWN_KIND,)


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
        spec = doc.data.get("spec", {})
        obj = _BUILDERS[kind](_Doc(name=name, source=doc.source, spec=spec, meta=meta, findings=findings))
        if obj is not None:
            seen[name] = obj
    invalid_names: dict[str, set[str]] = {}
    invalid_kinds: set[str] = {UNKNOWN_KIND} if unread else set()
    unnamed_kinds: set[str] = {UNKNOWN_KIND} if unread else set()
    for doc in invalid:
        data = doc.data
        name = (
            data["metadata"].get("name")
            if isinstance(data, dict) and isinstance(data.get("metadata"), dict)
            else None
        )
        for kind in _meant_kinds(data.get("kind") if isinstance(data, dict) else None):
            invalid_kinds.add(kind)
            if isinstance(name, str):
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
        cluster=first("Cluster") or ClusterSettings(name=DEFAULT_FLEET_NAME, source=None),
        review=first("ReviewPolicy") or ReviewPolicy(name=DEFAULT_FLEET_NAME, source=None),
        latency=first("LatencyMatrix"),
        acceptance=first("NodeAcceptance"),
        mesh_addresses=first("MeshAddresses"),
        invalid_names=MappingProxyType({k: frozenset(v) for k, v in invalid_names.items()}),
        invalid_kinds=frozenset(invalid_kinds),
        unnamed_kinds=frozenset(unnamed_kinds),
    )
    return fleet, findings
