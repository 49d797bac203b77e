"""The label keys the project sets, in its own prefix: on nodes (NodeState.labels, Kubernetes
Node labels, Ray node labels) and on the objects it makes."""

from __future__ import annotations

PREFIX = "swarm.io/"
SITE_LABEL = f"{PREFIX}site"
REGION_LABEL = f"{PREFIX}region"
FLAVOR_LABEL = f"{PREFIX}gpu-flavor"
# Which kind of node: "gpu" on nodes with GPUs, "cpu" on the others. The site CPU flavors
# select "cpu", so a pod admitted to one never lands on a GPU node of that site, even
# without the GPU taint.
NODE_CLASS_LABEL = f"{PREFIX}node-class"
