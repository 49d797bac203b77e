"""What the agent needs to know of a verified commit's fleet, resolved by that commit's own
library: ``python -m swarm_infra.agent.plan TREE FLEET NODE PORT`` run with the work tree's
``src`` first on PYTHONPATH (:func:`swarm_infra.agent.run.node_plan`). A fleet that uses a
field newer than the agent's installed package still resolves, because its own code reads it.

Prints one JSON object: ``{"error": null or one line, "declared": the node is a pull node of
the fleet, "pull_nodes": [...], "rollout": RolloutState, "status_urls": {node: url}}``
(``status_urls`` for the nodes of the batches before this node's only).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ..fleet.diagnostics import FleetInvalid
from ..fleet.sources import FleetEscapes, UnknownFleet, named_fleet_paths
from ..resolve import desired_state, load_fleet
from ..resolve.rollout import rollout_batches
from ..resolve.types import NodeState


def status_url(node: NodeState, port: int) -> str:
    """Where ``node``'s agent report is read: node_exporter's ``/metrics`` on its mesh
    address (its underlay address when the fleet has no mesh)."""
    mesh = node["mesh"]
    address = mesh["address"].split("/")[0] if mesh else node["address"]
    return f"http://{address}:{port}/metrics"


def node_plan(tree: Path, fleet: str, node: str, port: int) -> dict[str, Any]:
    """The plan of ``node`` in fleet ``fleet`` of the work tree ``tree`` (module doc)."""
    out: dict[str, Any] = {
        "error": None,
        "declared": False,
        "pull_nodes": [],
        "rollout": None,
        "status_urls": {},
    }
    try:
        state = desired_state(load_fleet(named_fleet_paths(tree, fleet)))
    except (UnknownFleet, FleetEscapes) as exc:
        out["error"] = str(exc)
        return out
    except FleetInvalid as exc:
        first = exc.report.text().strip().splitlines()[:1]
        out["error"] = f"the fleet is invalid: {' '.join(first)}"
        return out
    pull_nodes = sorted(name for name, n in state["nodes"].items() if n["pull"])
    out.update(pull_nodes=pull_nodes, rollout=state["rollout"])
    if node not in pull_nodes:
        return out
    out["declared"] = True
    cut = rollout_batches(pull_nodes, state["rollout"])
    mine = next(i for i, b in enumerate(cut) if node in b)
    out["status_urls"] = {p: status_url(state["nodes"][p], port) for batch in cut[:mine] for p in batch}
    return out


def main(argv: list[str]) -> int:
    tree, fleet, node, port = argv
    print(json.dumps(node_plan(Path(tree), fleet, node, int(port)), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
