"""The drivers layer alone: `pyinfra inventory/lab.py deploys/drivers.py` (as playbooks/drivers.yml)."""

from swarm_infra.engines.pyinfra.layers import layer

layer("drivers")
