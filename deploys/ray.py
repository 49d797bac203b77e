"""The ray layer alone: `pyinfra inventory/lab.py deploys/ray.py` (as playbooks/ray.yml)."""

from swarm_infra.engines.pyinfra.layers import layer

layer("ray")
