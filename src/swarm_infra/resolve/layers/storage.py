"""The storage layer: local NVMe scratch (RAID 0, a filesystem, mounted by its label),
and the record of what scratch the project made, so that removing the declaration
unmounts it."""

from __future__ import annotations

from ..paths import STATE_DIR
from ..text import json_text
from ..types import NodeState
from .base import File, Layer


def storage_record(node: NodeState) -> str:
    """What scratch the project made on the node (so that removing the declaration
    unmounts it): mount path, target device and label, as JSON."""
    storage = node["storage"]
    assert storage is not None  # rendered for nodes with scratch only
    scratch = storage["scratch"]
    return json_text(
        {"mount_path": scratch["mount_path"], "target": scratch["target"], "label": scratch["label"]}
    )


LAYER = Layer(
    name="storage",
    role="storage",
    hosts="all",
    state=("storage",),
    title="Storage",
    sources=("Storage",),
    files={
        "storage_record": File(
            path=f"{STATE_DIR}/storage.json", text=storage_record, removed=True, read_back=True
        ),
        # mdadm.conf(5): arrays assembled at boot.
        "mdadm_conf": File(
            path="/etc/mdadm/mdadm.conf",
            task="the storage role's and deploy's array task (mdadm --detail --scan, after the array)",
            read_back=True,
        ),
    },
    packages=("storage_tools", "storage_raid"),
)
