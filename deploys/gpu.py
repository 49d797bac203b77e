"""The gpu layer alone: `pyinfra inventory/lab.py deploys/gpu.py` (as playbooks/gpu.yml)."""

from swarm_infra.engines.pyinfra.layers import layer

layer("gpu")
