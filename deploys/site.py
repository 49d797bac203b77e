"""Every node layer, in the order of playbooks/site.yml (host, drivers, gpu, storage, mesh,
ray): ``pyinfra inventory/lab.py deploys/site.py``. The deploys live in the library
(swarm_infra.engines.pyinfra.layers); ``swarm converge --engine pyinfra`` runs the same ones
in the fleet's rolling batches."""

from swarm_infra.engines.pyinfra.layers import site

site()
