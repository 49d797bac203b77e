"""The node-side and controller-side commands of a batch's reboot and of a Ray upgrade,
the same for both engines (the steps and their order are the library's:
:data:`swarm_infra.resolve.rollout.REBOOT_STEPS`, :data:`~swarm_infra.resolve.rollout.RAY_UPGRADE_STEPS`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..nodeside import raydrain
from ..resolve.ray import client_env
from ..resolve.types import NodeState
from .nodeside_call import BOOTSTRAP, nodeside_payload

BOOT_ID = "/proc/sys/kernel/random/boot_id"  # proc(5): a new random UUID at every boot


def ray_drain_call(node: NodeState, grace_s: int, why: str) -> dict[str, Any]:
    """How to drain ``node`` out of the fleet's Ray cluster
    (:func:`swarm_infra.nodeside.raydrain.drain`): ``argv`` (the Python of the node's Ray
    virtualenv, the cluster's Ray, running the node-side bootstrap), ``stdin`` (the code and
    its arguments: the head's GCS address, the node's mesh address, the grace in seconds and
    the reason message) and ``env`` (Ray's token authentication, the token read from its
    file on the node). Nothing of it comes from the node; the fleet's values travel as JSON
    on stdin, never through a shell."""
    ray = node["ray"]
    if ray is None:
        raise ValueError(f"{node['name']} is not in the Ray cluster")
    files = node["layout"]["files"]
    source = Path(raydrain.__file__)
    return {
        "argv": [f"{files['ray_venv']['path']}/bin/python", "-c", BOOTSTRAP],
        "stdin": nodeside_payload(
            source.read_text(),
            source.name,
            "drain",
            ray["gcs_address"],
            ray["node_ip"],
            grace_s,
            f"swarm: {node['name']} is drained for {why}",
        ),
        "env": client_env(files["ray_auth_token"]["path"]),
    }
