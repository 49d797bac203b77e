"""The host layer alone: `pyinfra inventory/lab.py deploys/host.py` (as playbooks/host.yml)."""

from swarm_infra.engines.pyinfra.layers import layer

layer("host")
