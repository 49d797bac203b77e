"""The mesh layer alone: `pyinfra inventory/lab.py deploys/mesh.py` (as playbooks/mesh.yml)."""

from swarm_infra.engines.pyinfra.layers import layer

layer("mesh")
