"""Host variables as the Ansible inventory plugin sets them: every value unsafe.

Ansible templates every string it is handed when a task reads it. Fleet data is
untrusted: a Jinja expression in it (``{{ lookup('pipe', ...) }}``) would run on the
controller. Ansible's own inventory plugins mark untrusted data with ``wrap_var``; so do
we, for every value: the NodeState and the connection variables.
"""

from __future__ import annotations

from typing import Any

from ..inventory import InventoryHost, ansible_connection_vars


def unsafe_host_vars(host: InventoryHost) -> dict[str, Any]:
    """``{"swarm": NodeState, ansible_host, ansible_port, ...}`` for ``host``, each value
    wrapped with ``ansible.utils.unsafe_proxy.wrap_var`` (strings become
    ``AnsibleUnsafeText`` at every depth): Ansible never templates them."""
    from ansible.utils.unsafe_proxy import wrap_var

    return {
        name: wrap_var(value)
        for name, value in {"swarm": host.state, **ansible_connection_vars(host.connection)}.items()
    }
