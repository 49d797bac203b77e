"""Draining this node out of its Ray cluster before it is rebooted or Ray is upgraded.

Runs on the node with the Python of the node's Ray virtualenv (the Ray that the cluster
runs now: a client of another Ray version is refused by the cluster, see below), with
Ray's token authentication in its environment (``swarm_infra.resolve.ray.client_env``).
Both engines send this file on stdin (the node-side bootstrap); only the standard library
and the installed ``ray`` are imported.

What it does, with Ray 2.60.0's own calls (``python/ray/scripts/scripts.py``,
``drain_node``: the hidden ``ray drain-node`` command, which needs the node's ID, and
``python/ray/autoscaler/v2/instance_manager/subscribers/ray_stopper.py``, which drains the
same way):

1. ``GcsClient(address=GCS).get_all_node_info()``: the ALIVE node whose
   ``node_manager_address`` is this node's mesh address (``ray start --node-ip-address``).
2. ``drain_node(node_id, DRAIN_NODE_REASON_PREEMPTION, message, deadline_ms)`` with the
   deadline now + ``grace_s``: a preemption drain cannot be rejected by the raylet
   (``src/ray/raylet/node_manager.cc``, ``NodeManager::HandleDrainRaylet``: only an
   idle-termination drain is refused when the node is busy); from then on no new task or
   actor is placed on the node, and its running work learns the deadline.
3. Polls the node's state until it is DEAD (the raylet left), reports no activity
   (``state_snapshot.node_activity`` empty: nothing runs there any more), or the deadline
   passes. The caller then stops the node's Ray unit, whatever the outcome: the grace is
   the declared upper bound on what running work is given.

``ray drain-node`` itself (Ray 2.60.0) first checks that the client's Ray version is the
cluster's (``_check_ray_version``: "Ray version mismatch: cluster has Ray version ...").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

# Ray 2.60.0 core/generated/autoscaler_pb2.py: DrainNodeReason values.
PREEMPTION = "DRAIN_NODE_REASON_PREEMPTION"
POLL_S = 2.0


def _client(gcs_address: str) -> Any:  # pragma: no cover - needs a running Ray cluster
    from ray._raylet import GcsClient  # type: ignore[attr-defined]  # compiled: no stub for it

    return GcsClient(address=gcs_address)


def _reason_value(name: str) -> int:  # pragma: no cover - needs Ray on the node
    from ray.core.generated import autoscaler_pb2

    return int(autoscaler_pb2.DrainNodeReason.Value(name))  # type: ignore[attr-defined]


def _alive(info: Any) -> bool:
    # GcsNodeInfo.GcsNodeState: ALIVE = 0, DEAD = 1 (Ray 2.60.0 core/generated/gcs_pb2.py).
    return int(info.state) == 0


def drain(
    gcs_address: str,
    node_ip: str,
    grace_s: int,
    message: str,
    *,
    client: Any = None,
    reason: int | None = None,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """Drain this node (mesh address ``node_ip``) from the Ray cluster whose GCS is
    ``gcs_address`` (``host:port``), giving its running work ``grace_s`` seconds.

    Returns ``{"node_id": hex or None, "outcome": ..., "waited_s": float}`` with outcome
    ``not-in-cluster`` (no alive node has that address: nothing to drain), ``dead`` (the
    raylet left while draining), ``idle`` (nothing runs there any more) or
    ``grace-expired`` (work was still running at the deadline); ``{"error": text}`` when the
    GCS cannot be reached or refuses the drain. ``client``, ``reason``, ``clock``, ``sleep``
    are for tests (default: Ray's ``GcsClient``, PREEMPTION, wall clock)."""
    try:
        gcs = client if client is not None else _client(gcs_address)
        mine = [
            (node_id, info)
            for node_id, info in gcs.get_all_node_info().items()
            if _alive(info) and info.node_manager_address == node_ip
        ]
    except Exception as exc:  # the GCS unreachable, a refused token: said, not raised
        return {"error": f"Ray GCS {gcs_address}: {type(exc).__name__}: {exc}"}
    if not mine:
        return {"node_id": None, "outcome": "not-in-cluster", "waited_s": 0.0}
    node_id = mine[0][0]
    hex_id = node_id.hex() if hasattr(node_id, "hex") else str(node_id)
    start = clock()
    deadline = start + grace_s
    try:
        accepted, why = gcs.drain_node(
            hex_id,
            reason if reason is not None else _reason_value(PREEMPTION),
            message,
            int(deadline * 1000),
        )
    except Exception as exc:
        return {"error": f"Ray GCS {gcs_address}: drain of {hex_id}: {type(exc).__name__}: {exc}"}
    if not accepted:
        return {"error": f"Ray refused to drain node {hex_id}: {why}"}
    while True:
        now = clock()
        try:
            info = gcs.get_all_node_info().get(node_id)
        except Exception:  # the GCS busy for a moment: try again until the deadline
            info = False
        if info is None or (info and not _alive(info)):
            return {"node_id": hex_id, "outcome": "dead", "waited_s": round(now - start, 1)}
        if info and not list(info.state_snapshot.node_activity):
            return {"node_id": hex_id, "outcome": "idle", "waited_s": round(now - start, 1)}
        if now >= deadline:
            return {"node_id": hex_id, "outcome": "grace-expired", "waited_s": round(now - start, 1)}
        sleep(min(POLL_S, max(deadline - now, 0.0)))
