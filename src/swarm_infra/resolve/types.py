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
    host: str  # address or name the controller connects to
    port: int
    user: str


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


class DriverState(TypedDict):
    branch: str  # e.g. "570"
    version: str | None  # e.g. "570.86.15"; None: the newest of the branch
    allow_reboot: bool
    apt_version: str  # the Debian version glob that pins it: "570.86.15-*" or "570.*"


class PowerLimits(TypedDict):
    default_w: int
    min_w: int
    max_w: int


class ClockLimits(TypedDict):
    graphics_min_mhz: int
    graphics_max_mhz: int
    graphics_step_mhz: int
    memory_mhz: list[int]


class GpuLimits(TypedDict):
    """A model's catalog limits: what the simulated backend enforces in place of NVML."""

    product_name: str  # as NVML reports it
    memory_mib: int
    power: PowerLimits
    clocks: ClockLimits
    application_clocks: bool  # the model supports application clocks
    ecc: bool
    mig_profiles: list[str]


class GpuState(TypedDict):
    backend: Literal["nvml", "simulated"]
    profile: str | None  # GpuProfile name; None: settings left as they are
    assignment: str | None  # the Assignment that chose the profile
    driver: DriverState | None
    devices: list[GpuDevice]
    limits: dict[str, GpuLimits]  # by model


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


class MeshState(TypedDict):
    interface: str  # e.g. "wg0"
    address: str  # the node's mesh address with the mesh prefix, e.g. "10.210.0.7/16"
    listen_port: int
    mtu: int
    forwarding: bool  # relays and hubs in use route between peers
    sysctls: dict[str, str]  # what forwarding needs, as sysctl.d writes it ({} when not forwarding)
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
    layout: LayoutState


# -------------------------------------------------------------------------- cluster


class FlavorState(TypedDict):
    name: str  # Kueue ResourceFlavor name, e.g. "h100-sxm5-80gb"
    gpu_model: str
    product_name: str
    node_labels: dict[str, str]
    gpus: int  # GPUs of this model on gpu-worker nodes


class QuotaState(TypedDict):
    flavor: str
    resource: str  # "nvidia.com/gpu"
    nominal_quota: int  # GPUs
    borrowing_limit: int | None  # GPUs; None: unlimited within the cohort
    lending_limit: int | None  # GPUs; None: all of nominalQuota may be lent


class PreemptionState(TypedDict):
    within_cluster_queue: str  # Never | LowerPriority | LowerOrNewerEqualPriority
    reclaim_within_cohort: str  # Never | LowerPriority | Any
    borrow_within_cohort: str  # Never | LowerPriority


class ClusterQueueState(TypedDict):
    name: str
    cohort: str | None
    fair_sharing_weight: float
    preemption: PreemptionState
    quotas: list[QuotaState]


class TenantState(TypedDict):
    name: str
    namespace: str
    local_queue: str
    cluster_queue: str
    priorities: list[str]  # Priority names the tenant may use


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


class ClusterStorageState(TypedDict):
    scratch: ScratchPolicy | None
    classes: list[StorageClassState]
    volumes: list[VolumeState]


class CapacityState(TypedDict):
    gpus: int
    nominal_quota: int  # summed over ClusterQueues
    unallocated: int  # gpus - nominal_quota (negative is invalid and never resolved)


class ClusterState(TypedDict):
    flavors: list[FlavorState]
    cohorts: list[str]
    cluster_queues: list[ClusterQueueState]
    tenants: list[TenantState]
    priorities: list[PriorityState]  # highest value first
    storage: ClusterStorageState | None
    capacity: dict[str, CapacityState]  # by flavor


# -------------------------------------------------------------------------- whole


class RolloutState(TypedDict):
    serial: list[int | str]  # Ansible serial: canary host count, then "N%" batches
    max_fail_percentage: int


class DesiredState(TypedDict):
    nodes: dict[str, NodeState]  # by name, in name order
    cluster: ClusterState
    rollout: RolloutState
