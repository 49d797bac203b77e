"""The shape of the desired state, written once: NodeState, ClusterState and their parts.

Desired state is plain JSON data (it travels to Ansible as host variables, to pyinfra as
host data, to the nodes as files), so its parts are ``TypedDict``s: type checkers and
readers see every field, while the values stay dicts, lists, str, int, float, bool and
None. Units are in the field names where they apply (``_w``, ``_mhz``, ``_gib``, ``_s``);
otherwise the comment after the field says. Produced by :mod:`swarm_infra.resolve` only;
treat every instance as read-only (identical parts are shared between nodes).
"""

from __future__ import annotations

from typing import Literal, TypedDict

# ----------------------------------------------------------------------------- node


class SshState(TypedDict):
    # Address or name the controller connects to: the node's mesh address when via_mesh,
    # else its declared spec.ssh.host (resolve.mesh.ssh_over_mesh decides)
    host: str
    via_mesh: bool  # reached over the controller's mesh interface (Mesh spec.controller)
    port: int
    user: str
    # "<type> <base64>" as declared: the only keys the engines accept from the node (empty:
    # the operator's own known_hosts decides, still strictly)
    host_keys: list[str]


class GpuSlotState(TypedDict):
    model: str  # GPU catalog name, e.g. "H100-SXM5-80GB"
    count: int


class NvmeState(TypedDict):
    device: str  # block device path on the node, e.g. "/dev/nvme0n1"
    size_gib: int


class HardwareState(TypedDict):
    cpus: int
    memory_gib: int
    nic_speed_gbps: float | None
    gpus: list[GpuSlotState]
    nvme: list[NvmeState]


class ApplicationClocks(TypedDict):
    memory_mhz: int
    graphics_mhz: int


class LockedClocks(TypedDict):
    min_mhz: int
    max_mhz: int


class MigSettings(TypedDict):
    enabled: bool
    profiles: list[str]  # MIG profile names in creation order, e.g. ["3g.40gb", "3g.40gb"]


class GpuSettings(TypedDict, total=False):
    """One GPU's declared settings; a key absent is left as the driver has it."""

    persistence_mode: bool
    power_limit_w: int  # power management limit, W (NVML takes mW)
    application_clocks: ApplicationClocks
    locked_clocks: LockedClocks
    compute_mode: Literal["DEFAULT", "EXCLUSIVE_PROCESS", "PROHIBITED"]
    ecc: bool  # ECC mode; a change is pending until reboot
    mig: MigSettings  # MIG mode; a change needs a GPU reset or reboot


class GpuDevice(TypedDict):
    index: int  # NVML device index
    model: str
    settings: GpuSettings


class AptSource(TypedDict):
    name: str  # the sources.list.d file name, and the key's name in the keyrings directory
    key_url: str  # the signing key, fetched to <apt_keyrings_dir>/<name>.asc ("": none to fetch)
    repo: str  # one-line sources.list(5) entry, signed-by that key


class DriverState(TypedDict):
    source: Literal["nvidia-cuda", "debian"]  # where the packages come from (resolve/drivers.py)
    branch: str  # e.g. "570"
    version: str | None  # e.g. "570.86.15"; None: the newest of the branch
    allow_reboot: bool
    apt_version: str  # the Debian version glob that pins it: "570.86.15-*" or "570.*"
    packages: list[str]  # installed at apt_version and held
    extra_packages: list[str]  # installed at their newest version (pynvml)
    absent_packages: list[str]  # removed where installed: the container toolkit (the GPU Operator's)
    apt_sources: list[AptSource]  # NVIDIA's repositories
    debian_components: list[str]  # what the node's Debian source must offer (contrib, non-free...)
    fabric_manager: bool  # NVSwitch: nvidia-fabricmanager pinned with the driver, and running


class PowerLimits(TypedDict):
    default_w: int
    min_w: int
    max_w: int


class ClockLimits(TypedDict):
    graphics_min_mhz: int
    graphics_max_mhz: int
    graphics_step_mhz: int
    memory_mhz: list[int]


class MigPlacement(TypedDict):
    """Where one MIG GPU instance profile may go (MIG User Guide, "Supported MIG Profiles")."""

    size: int  # memory slices the instance takes
    starts: list[int]  # memory slices an instance may start at (NVML possible placements)
    instances: int  # most instances of the profile on one GPU


class GpuLimits(TypedDict):
    """A model's catalog limits: what the simulated backend enforces in place of NVML."""

    product_name: str  # as NVML reports it
    memory_mib: int
    power: PowerLimits
    clocks: ClockLimits
    application_clocks: bool  # the model supports application clocks
    ecc: bool
    mig_profiles: list[str]
    mig_compute_slices: int  # the whole GPU's compute slices for MIG; 0: no MIG
    mig_placements: dict[str, MigPlacement]  # by profile name; {}: no MIG


class GpuSharingState(TypedDict):
    """How the NVIDIA device plugin advertises the node's GPUs (:func:`resolve.gpu.sharing_state`)."""

    device_plugin_config: str  # key of the device plugin's config the node selects: profile name or "default"
    mig_strategy: Literal["none", "single", "mixed"]  # device plugin flags.migStrategy
    time_slicing_replicas: int | None  # None: no time-slicing
    units_per_gpu: int | None  # nvidia.com/gpu per physical GPU; None: mixed MIG (nvidia.com/mig-*)


class GpuState(TypedDict):
    backend: Literal["nvml", "simulated"]
    profile: str | None  # GpuProfile name; None: settings left as they are
    assignment: str | None  # the Assignment that chose the profile
    driver: DriverState | None
    devices: list[GpuDevice]
    limits: dict[str, GpuLimits]  # by model
    sharing: GpuSharingState
    # systemd units holding MIG instances open, stopped around a MIG change (nodeside/gpu.py)
    mig_holders: list[str]
    # the drivers layer's pending-reboot marker: while it names the driver, the GPU layer waits
    reboot_marker: str


class SysfsItem(TypedDict):
    name: Literal["hugepages", "transparent_hugepages", "cpu_governor"]
    path: str  # the file to read back
    glob: str  # what a tmpfiles.d "w" line writes (every CPU for the governor)
    value: str  # the text written


class HugePages(TypedDict):
    size_kib: int
    count: int


class HostState(TypedDict):
    profile: str
    assignment: str
    sysctls: dict[str, int | str | list[int]]  # key -> value as declared (typed)
    sysctl_text: dict[str, str]  # key -> the same value as sysctl.d(5) writes it (fields space-separated)
    hugepages: HugePages | None
    transparent_hugepages: str | None  # always | madvise | never
    cpu_governor: str | None
    sysfs: list[SysfsItem]


class PeerState(TypedDict):
    name: str  # the peer node
    allowed_ips: list[str]  # CIDRs routed through this peer, in address order
    endpoint: str | None  # "host:port"; None: the peer connects to us
    persistent_keepalive_s: int  # 0: off
    # The peer's WireGuard public key as recorded in the fleet (its Node spec.mesh.public_key,
    # reviewed); None: not recorded, the key is learnt from the peer when it converges.
    public_key: str | None


class MeshState(TypedDict):
    interface: str  # e.g. "wg0"
    address: str  # the node's mesh address with the mesh prefix, e.g. "10.210.0.7/16"
    listen_port: int
    mtu: int
    forwarding: bool  # relays and hubs in use route between peers
    sysctls: dict[str, str]  # what forwarding needs, as sysctl.d writes it ({} when not forwarding)
    # The node's own WireGuard public key as recorded in the fleet (Node spec.mesh.public_key);
    # the engines refuse the node when the key it holds differs. None: not recorded.
    public_key: str | None
    peers: list[PeerState]


class ScratchState(TypedDict):
    mount_path: str
    filesystem: Literal["xfs", "ext4"]
    raid0: bool  # true only with more than one device
    devices: list[str]
    size_gib: int  # sum of the devices' sizes
    array: str | None  # the md RAID 0 array (mdadm) when raid0, else None
    target: str  # what gets the filesystem: the array, or the only device
    label: str  # filesystem label; fstab mounts LABEL=...
    mount_options: list[str]  # plus "discard" on the node when the target supports TRIM


class StorageState(TypedDict):
    scratch: ScratchState


class ManagedPath(TypedDict):
    """A file or directory the project writes on a node, with its ownership and mode."""

    path: str
    type: Literal["file", "directory"]
    owner: str
    group: str
    mode: str  # octal text, e.g. "0600"


class LayoutState(TypedDict):
    """Where the project's files live on a node and what its units are called
    (:mod:`swarm_infra.resolve.layout`). Present on every node, whatever it declares, so
    that removing a declaration can remove the files it made."""

    files: dict[str, ManagedPath]
    units: dict[str, str]  # role -> systemd unit name


class RayFirewallState(TypedDict):
    """Who may open a connection to Ray's ports (nftables on the node): loopback, and over
    the mesh interface the cluster's members; the head's dashboard and job API also the
    declared dashboard clients. Everyone else, on every interface, is dropped."""

    mesh_interface: str
    members: list[str]  # the Ray cluster's members' mesh addresses, sorted
    dashboard_port: int | None  # the head's dashboard and job API; None elsewhere or when off
    dashboard_clients: list[str]  # CIDRs besides the members allowed to it (RayCluster dashboard.clients)
    tcp_ports: list[int]
    tcp_ranges: list[list[int]]  # [first, last] port ranges (worker processes)
    # The head's token port (RayCluster spec.ports.token) while it serves pull workers; else None.
    token_port: int | None
    token_clients: list[str]  # mesh addresses admitted to it (resolve.ray.token_admission), sorted


class RayTokenSourceState(TypedDict):
    """Where a pull worker reads its Ray cluster's token over the mesh (the head's socket unit)."""

    host: str  # the head's mesh address
    port: int  # its token port (RayCluster spec.ports.token)


class RayDashboardState(TypedDict):
    host: str  # the head's mesh address
    port: int


class RayPinState(TypedDict):
    requirement: str  # name==version or name[extras]==version, as the lock file pins it
    hashes: list[str]  # sha256 hex digests pip accepts for its file (--hash=sha256:...)


class RayNodeState(TypedDict):
    """The node's part in the fleet's own Ray cluster (kind RayCluster), over the mesh."""

    cluster: str
    role: Literal["head", "worker"]
    head: str  # the head node's name (its token is the cluster's)
    user: str  # the unprivileged system user Ray and its jobs run as
    version: str  # the pinned Ray release
    requirements: list[
        str
    ]  # every pin of the lock (name[extras]==version), in its order: what must be installed
    lock: list[
        RayPinState
    ]  # the lock file (spec.lock_file) as pins with their hashes: pip --require-hashes -r
    package_index: str  # pip --index-url, https:// only
    index_ca: str | None  # PEM certificates pip trusts for the index (pip --cert); None: pip's trust store
    node_ip: str  # the node's mesh address: ray start --node-ip-address
    head_ip: str  # the head's mesh address
    gcs_address: str  # "head_ip:port": workers join with ray start --address
    num_cpus: int
    num_gpus: int  # logical GPUs declared to Ray (ray start --num-gpus)
    simulated_gpus: bool  # the node's GPUs are simulated: Ray's GPUs are logical only
    resources: dict[str, int]  # custom resources: accelerator_type:<name> of the node's GPU models
    labels: dict[str, str]  # ray start --labels: swarm.io/site, swarm.io/region, swarm.io/gpu-flavor
    object_store_bytes: int  # ray start --object-store-memory
    ports: dict[str, int]  # gcs, node_manager, object_manager, ..., min_worker, max_worker
    dashboard: RayDashboardState | None  # the head's dashboard and job API; None elsewhere
    firewall: RayFirewallState
    # A worker converged by pull reads the token from the head over the mesh; None: through
    # the controller (push), or on the head.
    token_source: RayTokenSourceState | None
    wan_rtt_ms: float  # worst RTT head site <-> a member's site, ms (measured or declared, the higher)
    config: dict[str, int]  # Ray config (health check, GCS reconnect) from wan_rtt_ms: RAY_<name> in the unit
    start_args: list[str]  # `ray start ...` arguments after `ray`: the units' ExecStart, for both engines


class PackageCacheState(TypedDict):
    apt_proxy: str  # http://HOST:PORT of the site's apt cache (apt-cacher-ng)
    host: str  # its host and port, which the node probes before using it
    port: int


class PullState(TypedDict):
    """How a pull-mode node converges itself (:mod:`swarm_infra.resolve.pull`)."""

    fleet: str  # the fleet's name in the repository: inventory/<fleet>
    remote: str  # https://, ssh:// or file:// Git URL of the fleet repository
    ref: str  # the branch the agent tracks
    engine: Literal["ansible"]  # ansible-playbook -c local --limit <node>
    allowed_signers: str  # the allowed signers file's text (ssh-keygen(1) ALLOWED SIGNERS)
    revoked_signers: list[str]  # "keytype base64" per revoked key (gpg.ssh.revocationFile)
    interval_s: int  # the timer's OnUnitActiveSec
    randomized_delay_s: int  # the timer's RandomizedDelaySec
    status_port: int  # where peers read the agent's report (node_exporter's port, over the mesh)


class NodeState(TypedDict):
    name: str
    site: str
    region: str
    roles: list[str]
    labels: dict[str, str]  # the node's labels plus swarm.io/site and swarm.io/gpu-flavor
    address: str  # underlay IPv4 address
    ssh: SshState
    hardware: HardwareState
    gpu: GpuState | None  # None: no GPUs
    host: HostState | None  # None: no HostProfile assigned
    mesh: MeshState | None  # None: the fleet has no Mesh
    storage: StorageState | None  # None: no scratch declared or no NVMe
    ray: RayNodeState | None  # None: not in the fleet's Ray cluster
    package_cache: PackageCacheState | None  # None: the site declares no package cache
    pull: PullState | None  # None: converged by push (the default)
    layout: LayoutState


# -------------------------------------------------------------------------- cluster


class TaintState(TypedDict):
    key: str
    value: str
    effect: str  # NoSchedule | PreferNoSchedule | NoExecute


class TolerationState(TypedDict):
    key: str
    operator: Literal["Exists"]
    effect: str


class FlavorState(TypedDict):
    name: str  # Kueue ResourceFlavor name, e.g. "h100-sxm5-80gb"
    gpu_model: str
    product_name: str
    node_labels: dict[str, str]
    # Tolerations Kueue adds to the pods it admits to the flavor: of the GPU taint, when the
    # Cluster taints GPU nodes. (No nodeTaints: those would make every workload state the
    # toleration itself before Kueue admits it.)
    tolerations: list[TolerationState]
    gpus: int  # GPUs of this model on gpu-worker nodes
    units_per_gpu: int | None  # nvidia.com/gpu per GPU there; None: not one number (no quota allowed)
    cpus: int  # CPUs of those nodes
    memory_gib: int  # memory of those nodes


class ResourceAmountState(TypedDict):
    """One covered resource of a quota, in Kueue's terms and in base units: nvidia.com/gpu in
    devices as the device plugin advertises them, cpu in millicores, memory in MiB."""

    name: Literal["nvidia.com/gpu", "cpu", "memory"]
    nominal_quota: int
    borrowing_limit: int | None  # None: unlimited within the cohort
    lending_limit: int | None  # None: all of nominalQuota may be lent


class QuotaState(TypedDict):
    flavor: str
    resource: str  # "nvidia.com/gpu"
    nominal_quota: int  # GPUs
    borrowing_limit: int | None  # GPUs; None: unlimited within the cohort
    lending_limit: int | None  # GPUs; None: all of nominalQuota may be lent
    # Every covered resource (nvidia.com/gpu, cpu, memory), the GPUs converted to device units
    # and CPU/memory the flavor nodes' share per GPU (:func:`resolve.cluster.quota_resources`).
    resources: list[ResourceAmountState]


class PreemptionState(TypedDict):
    within_cluster_queue: str  # Never | LowerPriority | LowerOrNewerEqualPriority
    reclaim_within_cohort: str  # Never | LowerPriority | Any
    borrow_within_cohort: str  # Never | LowerPriority


class CpuQuotaState(TypedDict):
    """A queue's quota on a site's CPU flavor: its tenants' Ray heads there (nvidia.com/gpu 0)."""

    flavor: str  # CpuFlavorState.name
    resources: list[ResourceAmountState]  # nvidia.com/gpu 0, cpu (millicores), memory (MiB)


class ClusterQueueState(TypedDict):
    name: str
    cohort: str | None
    fair_sharing_weight: float
    preemption: PreemptionState
    quotas: list[QuotaState]  # GPU flavors in the policy's order (Kueue: order is preference)
    cpu_quotas: list[CpuQuotaState]  # after the GPU flavors, by flavor name


class ComputeState(TypedDict, total=False):
    cpu_millicores: int
    memory_mib: int


class ContainerCapsState(TypedDict):
    default_request: ComputeState | None
    default_limit: ComputeState | None
    max: ComputeState | None


class CapsState(TypedDict):
    """A tenant namespace's hard caps; None: not capped. ResourceQuota and LimitRange."""

    gpus: int | None  # requests.nvidia.com/gpu, device units
    cpu_millicores: int | None  # requests.cpu
    memory_mib: int | None  # requests.memory
    pods: int | None
    storage_gib: int | None  # requests.storage
    persistent_volume_claims: int | None
    container: ContainerCapsState | None  # LimitRange of type Container


class TenantState(TypedDict):
    name: str
    namespace: str
    local_queue: str
    cluster_queue: str
    priorities: list[str]  # Priority names the tenant may use
    caps: CapsState | None
    # requests.nvidia.com/gpu of the namespace's ResourceQuota, device units: caps.gpus, else
    # (and at most) what the queue could ever be admitted (nominal + borrowing limit per flavor).
    gpu_quota: int
    ray_cluster: str | None  # name of the tenant's RayCluster (in ClusterState.ray_clusters)


class CohortState(TypedDict):
    """A Cohort that needs a Kueue object (declared in the Allocation's cohorts)."""

    name: str
    parent: str | None
    fair_sharing_weight: float


class RayGroupState(TypedDict):
    """One group of Ray pods, all the same size (:mod:`swarm_infra.resolve.ray`)."""

    name: str  # "head" or the worker group's name (its flavor)
    flavor: str | None  # GPU flavor; None: the head
    node_labels: dict[str, str]  # where the pods must run (head: its site, or its first workers' flavor)
    gpus: int  # nvidia.com/gpu per pod, device units
    cpus: int  # per pod
    memory_gib: int  # per pod
    object_store_bytes: int  # ray start --object-store-memory (and /dev/shm size)
    resources: dict[str, int]  # Ray custom resources: accelerator_type:<name> of the flavor's model
    labels: dict[str, str]  # Ray node labels (ray start --labels): the GPU flavor
    replicas: int  # pods at first (head: 1)
    min_replicas: int
    max_replicas: int


class RayClusterState(TypedDict):
    """A Ray cluster: head and worker groups (KubeRay RayCluster; bare-node Ray reuses the decision)."""

    name: str
    tenant: str | None
    namespace: str
    local_queue: str | None  # Kueue LocalQueue that admits it; None: not queued
    priority: str | None  # Priority name (PriorityClass and WorkloadPriorityClass)
    ray_version: str
    image: str
    autoscaling: bool  # some group has min_replicas < max_replicas
    head: RayGroupState
    workers: list[RayGroupState]


class DevicePluginConfigState(TypedDict):
    """One named NVIDIA device plugin config (nodes select it with nvidia.com/device-plugin.config)."""

    name: str
    mig_strategy: str  # none | single | mixed
    time_slicing_replicas: int | None
    time_slicing_resources: list[str]  # what is time-sliced: nvidia.com/gpu, or each nvidia.com/mig-<profile>


class GpuSharingClusterState(TypedDict):
    device_plugin_configs: list[DevicePluginConfigState]  # "default" first, then by name
    # The GPU Operator's one MIG strategy (ClusterPolicy mig.strategy), which it passes to
    # the device plugin and GFD as MIG_STRATEGY, overriding each config's migStrategy:
    # "mixed" if a config is mixed, else "single" if one is single, else "none".
    operator_mig_strategy: Literal["none", "single", "mixed"]


class RelayRouteState(TypedDict):
    """Which relay carries the NAT-to-NAT traffic between two sites (both directions)."""

    sites: list[str]  # the two sites, in name order
    providers: list[str]  # their providers, in the same order
    relay: str  # the relay node
    relay_site: str
    relay_provider: str
    path_rtt_ms: float | None  # measured site -> relay -> site RTT, ms; None: a leg unmeasured
    basis: Literal["measured", "held", "unmeasured"]  # see resolve.mesh.RelayRoute


class MeshTopologyState(TypedDict):
    """The mesh as in-cluster tools read it (ConfigMap in the system namespace)."""

    cidr: str
    interface: str
    addresses: dict[str, str]  # node -> mesh address (no prefix)
    hubs: dict[str, str]  # hub-and-spoke site -> hub node
    relays: list[str]  # nodes that may relay (role relay, public, not a spoke), by name
    relay_routes: list[RelayRouteState]  # one per NAT-to-NAT site pair, by sites
    edges: list[list[str]]  # WireGuard peerings [a, b], a < b, sorted


class ClusterSettingsState(TypedDict):
    fleet: str  # label swarm.io/fleet
    system_namespace: str
    gpu_namespace: str
    labels: dict[str, str]  # on every object (managed-by, part-of, fleet and the Cluster's labels)
    gpu_taint: TaintState | None  # on nodes with GPUs; None: GPU nodes are not tainted


class PriorityState(TypedDict):
    name: str
    value: int
    preemption_policy: str  # PreemptLowerPriority | Never
    global_default: bool
    description: str


class StorageClassState(TypedDict):
    name: str
    provisioner: str
    parameters: dict[str, str]
    reclaim_policy: str  # Delete | Retain
    volume_binding_mode: str  # WaitForFirstConsumer | Immediate
    default: bool


# Functional form: "class" (the StorageClass name, as the Storage policy spells it) is a keyword.
VolumeState = TypedDict(
    "VolumeState",
    {
        "name": str,
        "tenant": str,
        "namespace": str,
        "class": str,  # StorageClass name
        "size_gib": int,
        "purpose": str,  # dataset | checkpoint | other
        "access_modes": list[str],
    },
)


class ScratchPolicy(TypedDict):
    mount_path: str
    filesystem: str
    raid0: bool
    storage_class: str  # StorageClass of node-local scratch volumes (rancher.io/local-path)
    tenant_quota_gib: int  # scratch each tenant namespace may request (a ResourceQuota)


class ClusterStorageState(TypedDict):
    scratch: ScratchPolicy | None
    classes: list[StorageClassState]
    volumes: list[VolumeState]


class CapacityState(TypedDict):
    gpus: int
    nominal_quota: int  # summed over ClusterQueues
    unallocated: int  # gpus - nominal_quota (negative is invalid and never resolved)


class CpuFlavorState(TypedDict):
    """A site's nodes without GPUs as a Kueue ResourceFlavor (node labels swarm.io/site and
    swarm.io/node-class=cpu)."""

    name: str  # "cpu-<site>"
    site: str
    node_labels: dict[str, str]


class ClusterState(TypedDict):
    settings: ClusterSettingsState
    fair_sharing: bool  # Kueue fair sharing on (Allocation fair_sharing); else classical preemption
    flavors: list[FlavorState]
    cpu_flavors: list[CpuFlavorState]  # the sites where a Ray head goes, by name
    cohorts: list[str]  # every cohort a queue names
    cohort_objects: list[CohortState]  # the cohorts that need a Kueue Cohort object
    cluster_queues: list[ClusterQueueState]
    tenants: list[TenantState]
    priorities: list[PriorityState]  # highest value first
    storage: ClusterStorageState | None
    capacity: dict[str, CapacityState]  # by flavor
    gpu_sharing: GpuSharingClusterState
    ray_clusters: list[RayClusterState]  # by (namespace, name)
    mesh: MeshTopologyState | None  # None: the fleet has no Mesh


# -------------------------------------------------------------------------- whole


class RolloutState(TypedDict):
    serial: list[int | str]  # Ansible serial: canary host count, then "N%" batches
    max_fail_percentage: int
    drain_grace_s: int  # seconds running work gets on a drained node (reboots, Ray upgrades)
    kubernetes_context: str | None  # kubeconfig context for kubectl drain; None: no Kubernetes step


class DesiredState(TypedDict):
    nodes: dict[str, NodeState]  # by name, in name order
    cluster: ClusterState
    rollout: RolloutState
