"""The drivers layer: the NVIDIA driver stack of the declared source at the declared
version, pinned and held; persistenced, Fabric Manager on NVSwitch boards; pynvml, kernel
headers. It may reboot the node, where the GPU profile allows it.

Its files are written by the role's and the deploy's own tasks, each between the package
steps it must precede or follow (:func:`swarm_infra.resolve.drivers.driver_plan`), with
the texts below (``swarm_file``, :func:`swarm_infra.resolve.layers.static_file`).
"""

from __future__ import annotations

from ..text import header, line_value
from ..types import NodeState
from .base import File, Layer

# Package-name globs (apt_preferences(5)) of everything that belongs to one NVIDIA driver
# version and must move with it: NVIDIA's Debian packages split the driver into these.
DRIVER_PINNED_PACKAGES = (
    "nvidia-* libnvidia-ml* libnvidia-cfg* libnvidia-gl* libnvidia-egl* libnvidia-encode* "
    "libnvidia-ptx* libnvidia-rtcore* libnvidia-nvvm* libnvidia-fbc* libnvidia-allocator* "
    "libnvidia-pkcs11* libcuda* cuda-drivers* firmware-nvidia-gsp xserver-xorg-video-nvidia "
    "libglx-nvidia* libegl-nvidia* libgles-nvidia* libgl1-nvidia*"
)


def driver_preferences(node: NodeState) -> str:
    """apt_preferences(5) file pinning the NVIDIA driver packages to NodeState's
    ``gpu.driver.apt_version`` at priority 1001 (wins over newer and installed versions)."""
    gpu = node["gpu"]
    assert gpu is not None and gpu["driver"] is not None  # rendered for nodes with a driver only
    driver = gpu["driver"]
    version = line_value(driver["apt_version"], "driver apt_version")
    return (
        header("NVIDIA driver pin")
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
        header("NVIDIA driver") + "# nouveau must not bind the GPU before the NVIDIA driver does.\n"
        "blacklist nouveau\n"
        "options nouveau modeset=0\n"
    )


def reboot_required(node: NodeState) -> str:
    """Debian's pending-reboot marker (layout ``reboot_required``), naming the new driver."""
    gpu = node["gpu"]
    assert gpu is not None and gpu["driver"] is not None  # rendered for nodes with a driver only
    version = line_value(gpu["driver"]["apt_version"], "driver apt_version")
    return f"*** System restart required: NVIDIA driver {version} (swarm) ***\n"


# Each written at its step of the driver plan: the blacklist before the driver's packages,
# the keyrings directory and the pin before its sources, the marker after an install.
_TASK = "the drivers role's and deploy's own tasks, ordered by driver_plan"

LAYER = Layer(
    name="drivers",
    role="drivers",
    hosts="gpu",
    state=("gpu", "driver"),
    title="Driver",
    sources=("GpuProfile", "Assignment"),
    files={
        "nouveau_blacklist": File(
            path="/etc/modprobe.d/swarm-blacklist-nouveau.conf", text=nouveau_blacklist, task=_TASK
        ),
        "apt_keyrings_dir": File(path="/etc/apt/keyrings", directory=True, task=_TASK),
        "driver_preferences": File(
            path="/etc/apt/preferences.d/swarm-nvidia-driver", text=driver_preferences, task=_TASK
        ),
        # Debian's marker for a pending reboot (update-notifier, needrestart read it); an
        # earlier run's pending reboot is read back.
        "reboot_required": File(
            path="/run/reboot-required", text=reboot_required, task=_TASK, read_back=True
        ),
    },
    units={"persistenced": "nvidia-persistenced.service", "fabricmanager": "nvidia-fabricmanager.service"},
)
