"""The label keys the project sets, in its own prefix: on nodes (NodeState.labels, Kubernetes
Node labels, Ray node labels) and on the objects it makes."""

from __future__ import annotations

PREFIX = "swarm.io/"
SITE_LABEL = f"{PREFIX}site"
REGION_LABEL = f"{PREFIX}region"
FLAVOR_LABEL = f"{PREFIX}gpu-flavor"
