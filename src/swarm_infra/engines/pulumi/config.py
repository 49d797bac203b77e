"""The stack's configuration (``Pulumi.<stack>.yaml``, namespace ``swarm``), typed.

Keys: ``fleet`` (inventory/<fleet>, policies/<fleet>, policies/shared), ``sites`` (a list:
one regional cluster), and per operator ``kueueEnabled``/``kueueVersion``,
``kuberayEnabled``/``kuberayVersion``, ``gpuOperator`` (``gpu-operator``,
``device-plugin`` or ``none``)/``gpuOperatorVersion``. ``helmRepoUsername`` and the secret
``helmRepoPassword`` (``pulumi config set --secret``) authenticate to a private chart
mirror. The cluster itself is chosen by ``kubernetes:context``.
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
GPU_MODES = ("gpu-operator", "device-plugin", "none")


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
    helm_username: str | None = None
    helm_password: Any = None  # a pulumi.Output[str] (secret) or None

    def __post_init__(self) -> None:
        if self.gpu_mode not in GPU_MODES:
            raise ValueError(
                f"swarm:gpuOperator must be one of {', '.join(GPU_MODES)}, not {self.gpu_mode!r}"
            )

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
            helm_username=c.get("helmRepoUsername"),
            helm_password=c.get_secret("helmRepoPassword"),
        )
