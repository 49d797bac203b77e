"""The stack's configuration (``Pulumi.<stack>.yaml``, namespace ``swarm``), typed.

Keys: ``fleet`` (inventory/<fleet>, policies/<fleet>, policies/shared), ``sites`` (a list:
one regional cluster), and per operator ``kueueEnabled``/``kueueVersion``,
``kuberayEnabled``/``kuberayVersion``, ``gpuOperator`` (``gpu-operator`` or ``none``;
``device-plugin`` is refused until the node layer configures the container
runtime)/``gpuOperatorVersion``, ``csiNfsVersion``. ``chartMirror``
declares a private chart mirror (an ``https://`` Helm repository or an ``oci://`` registry
path): every chart then comes from it, and ``helmRepoUsername`` and the secret
``helmRepoPassword`` (``pulumi config set --secret``) authenticate to it and to nothing
else; without a mirror the charts come from their public repositories, with no
credentials (credentials without a mirror are refused). The cluster itself is chosen by
``kubernetes:context``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi

# Pinned chart versions (each overridable in the stack config). Not fetched here: no
# registry is reachable from the machines this was written on.
KUEUE_CHART = "oci://registry.k8s.io/kueue/charts/kueue"
KUEUE_VERSION = "0.17.5"  # serves kueue.x-k8s.io/v1beta2 (storage since 0.16)
KUBERAY_REPO = "https://ray-project.github.io/kuberay-helm/"
KUBERAY_VERSION = "1.6.0"
NVIDIA_REPO = "https://helm.ngc.nvidia.com/nvidia"
GPU_OPERATOR_VERSION = "v26.3.3"
DEVICE_PLUGIN_REPO = "https://nvidia.github.io/k8s-device-plugin"
DEVICE_PLUGIN_VERSION = "0.17.2"
# kubernetes-csi/csi-driver-nfs: the provisioner nfs.csi.k8s.io (resolve/provisioners.py).
CSI_NFS_REPO = "https://raw.githubusercontent.com/kubernetes-csi/csi-driver-nfs/master/charts"
CSI_NFS_VERSION = "4.13.1"  # charts/index.yaml version (appVersion 4.13.1)
CSI_NFS_NAMESPACE = "kube-system"  # the chart's documented install namespace
GPU_MODES = ("gpu-operator", "device-plugin", "none")


@dataclass(frozen=True)
class Chart:
    """Where a chart comes from: ``chart`` (name, or an ``oci://`` reference) and the Helm
    repository ``repo`` (None for OCI), plus the credentials to send (mirror only)."""

    chart: str
    repo: str | None
    username: str | None = None
    password: Any = None


# The charts' public homes: chart name → Helm repository, or None where the chart is an OCI
# reference (Kueue publishes its chart only to registry.k8s.io).
PUBLIC: dict[str, str | None] = {
    "kueue": None,
    "kuberay-operator": KUBERAY_REPO,
    "gpu-operator": NVIDIA_REPO,
    "nvidia-device-plugin": DEVICE_PLUGIN_REPO,
    "csi-driver-nfs": CSI_NFS_REPO,
}


@dataclass(frozen=True)
class Operator:
    enabled: bool
    version: str


@dataclass(frozen=True)
class StackConfig:
    """What a stack chooses; defaults: the example fleet, every site, every operator."""

    fleet: str = "example"
    sites: tuple[str, ...] | None = None
    kueue: Operator = field(default_factory=lambda: Operator(True, KUEUE_VERSION))
    kuberay: Operator = field(default_factory=lambda: Operator(True, KUBERAY_VERSION))
    gpu_mode: str = "gpu-operator"
    gpu_version: str | None = None  # None: the pinned version of gpu_mode
    chart_mirror: str | None = None  # https:// Helm repository or oci:// registry path
    helm_username: str | None = None
    helm_password: Any = None  # a pulumi.Output[str] (secret) or None
    csi_nfs_version: str = CSI_NFS_VERSION

    def __post_init__(self) -> None:
        if self.gpu_mode not in GPU_MODES:
            raise ValueError(
                f"swarm:gpuOperator must be one of {', '.join(GPU_MODES)}, not {self.gpu_mode!r}"
            )
        if self.gpu_mode == "device-plugin":
            # Issue #24: the device plugin alone needs containerd configured for the NVIDIA
            # runtime on every GPU node; the runtime is the GPU Operator's toolkit's
            # (resolve.drivers.CONTAINER_RUNTIME_OWNER, issue #23), the node layer's never.
            raise ValueError(
                "swarm:gpuOperator: device-plugin is not supported: the node layer does not "
                "configure containerd for the NVIDIA runtime (the GPU Operator's toolkit owns it), "
                "so the device plugin would find no GPU; use gpu-operator (its toolkit configures "
                "the runtime) or none"
            )
        if self.chart_mirror is None and (self.helm_username or self.helm_password is not None):
            raise ValueError(
                "swarm:helmRepoUsername/helmRepoPassword are set but no swarm:chartMirror: the "
                "credentials would go to public chart repositories; declare the mirror or remove them"
            )
        if self.chart_mirror is not None and not self.chart_mirror.startswith(("https://", "oci://")):
            raise ValueError(
                f"swarm:chartMirror must be an https:// or oci:// URL, not {self.chart_mirror!r}"
            )

    def chart(self, name: str) -> Chart:
        """Where chart ``name`` (a key of :data:`PUBLIC`) comes from: the declared mirror,
        with the credentials, or its public home without any."""
        if name not in PUBLIC:
            raise KeyError(f"no chart {name!r}")
        mirror = self.chart_mirror
        if mirror is None:
            repo = PUBLIC[name]
            return Chart(name, repo) if repo is not None else Chart(KUEUE_CHART, None)
        if mirror.startswith("oci://"):
            return Chart(f"{mirror.rstrip('/')}/{name}", None, self.helm_username, self.helm_password)
        return Chart(name, mirror, self.helm_username, self.helm_password)

    @property
    def gpu(self) -> Operator:
        default = GPU_OPERATOR_VERSION if self.gpu_mode == "gpu-operator" else DEVICE_PLUGIN_VERSION
        return Operator(self.gpu_mode != "none", self.gpu_version or default)

    @classmethod
    def from_pulumi(cls, config: pulumi.Config | None = None) -> StackConfig:
        """Read the ``swarm:*`` keys of the current stack."""
        c = config or pulumi.Config("swarm")
        sites = c.get_object("sites")
        return cls(
            fleet=c.get("fleet") or "example",
            sites=tuple(sites) if sites else None,
            kueue=Operator(c.get_bool("kueueEnabled") is not False, c.get("kueueVersion") or KUEUE_VERSION),
            kuberay=Operator(
                c.get_bool("kuberayEnabled") is not False, c.get("kuberayVersion") or KUBERAY_VERSION
            ),
            gpu_mode=c.get("gpuOperator") or "gpu-operator",
            gpu_version=c.get("gpuOperatorVersion"),
            chart_mirror=c.get("chartMirror"),
            helm_username=c.get("helmRepoUsername"),
            helm_password=c.get_secret("helmRepoPassword"),
            csi_nfs_version=c.get("csiNfsVersion") or CSI_NFS_VERSION,
        )
