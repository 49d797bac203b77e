"""pyinfra inventory of the example fleet: `pyinfra inventory/example.py deploys/site.py`.

The hosts, groups (site_*, role_*, gpu, gpu_<model>, simulated_gpu, ray_head/ray_worker) and
data (`host.data.swarm`: the NodeState) are those the Ansible inventory plugin gives for
inventory/example, from the same library function; a running lab's connection file supplies
its addresses and SSH key. An invalid fleet prints the validator's report and exits 2
before pyinfra connects to any host.
"""

from swarm_infra.engines.pyinfra.inventory import inventory_file_groups
from swarm_infra.lab.state import read_connections

globals().update(inventory_file_groups(__file__, read_connections()))
