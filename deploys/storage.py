"""The storage layer alone: `pyinfra inventory/lab.py deploys/storage.py` (as playbooks/storage.yml)."""

from swarm_infra.engines.pyinfra.layers import layer

layer("storage")
