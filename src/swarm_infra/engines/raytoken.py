"""A pull worker's read of its Ray cluster's token from the head over the mesh, the same
call for both engines (:func:`swarm_infra.nodeside.raytoken.fetch`, run by the node's
``python3``). Nothing of it comes from the node; the fleet's values travel as JSON on
stdin, never through a shell, and the token never passes through the engine: the node
reads and writes it, the engine gets ``{"changed": bool}`` or ``{"error": why}``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..nodeside import raytoken
from ..resolve.types import NodeState
from .nodeside_call import BOOTSTRAP, nodeside_payload


def ray_token_fetch_call(node: NodeState, check_mode: bool = False) -> dict[str, Any]:
    """How ``node`` (a Ray worker converged by pull: NodeState.ray.token_source set) reads
    the token: ``argv`` (the node's ``python3`` running the node-side bootstrap) and
    ``stdin`` (the code and its arguments: the head's mesh address and token port, the
    token file's path, ``check_mode``). ValueError for a node without a token source."""
    ray = node["ray"]
    source = ray["token_source"] if ray is not None else None
    if source is None:
        raise ValueError(f"{node['name']} reads no Ray token over the mesh")
    code = Path(raytoken.__file__)
    return {
        "argv": ["python3", "-c", BOOTSTRAP],
        "stdin": nodeside_payload(
            code.read_text(),
            code.name,
            "fetch",
            source["host"],
            source["port"],
            node["layout"]["files"]["ray_auth_token"]["path"],
            check_mode=check_mode,
        ),
    }
