"""The gpu layer: GPU settings through NVML (power limits, clocks, MIG), persisted and
re-applied at boot by a unit running the node-side GPU code (:mod:`swarm_infra.nodeside.gpu`)."""

from __future__ import annotations

from pathlib import Path

from ..paths import ETC_DIR, LIB_DIR, UNIT_DIR
from ..text import header, json_text, line_value
from ..types import NodeState
from .base import File, Layer


def gpu_code(node: NodeState | None = None) -> str:
    """The node-side GPU code's text (:mod:`swarm_infra.nodeside.gpu`), as it is installed:
    the same for every ``node``."""
    from ...nodeside import gpu

    return Path(gpu.__file__).read_text()


def gpu_settings(node: NodeState) -> str:
    """The desired GPU settings the boot-time unit re-applies: NodeState.gpu as JSON."""
    gpu = node["gpu"]
    assert gpu is not None  # rendered for nodes with GPUs only
    return json_text(gpu)


def gpu_unit(node: NodeState) -> str:
    """systemd unit re-applying the GPU settings at boot (power limits and clocks reset
    when a GPU resets or the node reboots)."""
    layout, gpu = node["layout"], node["gpu"]
    assert gpu is not None  # rendered for nodes with GPUs only
    files = layout["files"]
    return (
        header("GPU layer")
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


LAYER = Layer(
    name="gpu",
    role="gpu_tuning",
    hosts="all",
    state=("gpu",),
    title="GPU",
    sources=("GpuProfile", "Assignment"),
    parents=("lib_dir",),
    files={
        "etc_dir": File(path=ETC_DIR, directory=True),
        "gpu_code": File(path=f"{LIB_DIR}/swarm_gpu_node.py", text=gpu_code, removed=True),
        "gpu_settings": File(path=f"{ETC_DIR}/gpu-settings.json", text=gpu_settings, removed=True),
        "gpu_unit": File(path=f"{UNIT_DIR}/swarm-gpu-apply.service", text=gpu_unit, removed=True),
    },
    units={"gpu_apply": "swarm-gpu-apply.service"},
)
