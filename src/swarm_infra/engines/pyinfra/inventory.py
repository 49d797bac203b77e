"""The pyinfra inventory of a fleet: the same hosts, groups and data as the Ansible plugin.

Both engines build their hosts from :func:`swarm_infra.engines.inventory.inventory_hosts`
(one decision: names, groups, connections, NodeState). Here they become pyinfra's shapes:
the ``groups`` dict a pyinfra inventory file exposes (``inventory/lab.py``), or an
:class:`pyinfra.api.Inventory` for the API (``swarm converge --engine pyinfra``). Each host's
data holds ``swarm`` (its NodeState, as Ansible's host variable of the same name) and
pyinfra's SSH settings.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..inventory import Connection, InventoryHost, InventorySourceError, fleet_state, inventory_hosts


def ssh_data(conn: Connection) -> dict[str, Any]:
    """pyinfra's SSH connector settings for ``conn``: address, port, user, the lab's key when
    it has one, and the host key checked strictly as Ansible checks it
    (:func:`swarm_infra.resolve.keys.strict_ssh_options`).

    ``ssh_strict_host_key_checking="yes"`` always: pyinfra's own default is ``accept-new``
    (it would trust, and append to known_hosts, whatever key a node first shows), and an
    explicit value also outranks ``~/.ssh/config``. ``ssh_known_hosts_file`` when the node's
    keys are known: pyinfra (paramiko) then reads that file only. Without it, paramiko reads
    the operator's ``~/.ssh/known_hosts`` (or ``UserKnownHostsFile`` of ``~/.ssh/config``)."""
    data: dict[str, Any] = {
        "ssh_hostname": conn.host,
        "ssh_port": conn.port,
        "ssh_user": conn.user,
        "ssh_strict_host_key_checking": "yes",
    }
    if conn.private_key_file:
        data.update(ssh_key=conn.private_key_file, ssh_allow_agent=False, ssh_look_for_keys=False)
    if conn.known_hosts_file:
        data["ssh_known_hosts_file"] = conn.known_hosts_file
    return data


def host_data(host: InventoryHost) -> dict[str, Any]:
    """A host's pyinfra data: ``swarm`` (NodeState) and its SSH settings."""
    return {"swarm": host.state, **ssh_data(host.connection)}


def inventory_groups(hosts: list[InventoryHost]) -> dict[str, list[Any]]:
    """``{"all": [(name, data), ...], group: [name, ...], ...}``: what a pyinfra inventory
    file defines at module level (groups sorted, hosts in name order). Host data sits on
    ``all`` only, so no group's data can shadow it."""
    groups: dict[str, list[Any]] = {"all": [(h.name, host_data(h)) for h in hosts]}
    for h in hosts:
        for g in h.groups:
            groups.setdefault(g, []).append(h.name)
    return {"all": groups.pop("all"), **dict(sorted(groups.items()))}


def inventory_file_groups(source: str | Path, connections: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The groups of the fleet that inventory source ``source`` names (a pyinfra inventory
    file ``inventory/NAME.py`` stands for ``inventory/NAME``), for that file to export:
    ``globals().update(inventory_file_groups(__file__, read_connections()))``.

    An invalid fleet prints the validator's report (``file:line:col`` per problem) to stderr
    and exits 2 before pyinfra connects to any host, like ``swarm validate``.
    """
    path = Path(source)
    fleet = path.with_suffix("") if path.suffix == ".py" else path
    try:
        _, state = fleet_state(fleet)
    except InventorySourceError as exc:
        print(str(exc), file=sys.stderr)
        raise SystemExit(2) from None
    return inventory_groups(inventory_hosts(state, connections))


def api_inventory(hosts: list[InventoryHost]) -> Any:
    """A :class:`pyinfra.api.Inventory` of ``hosts`` with the same groups and data."""
    from pyinfra.api import Inventory

    groups = inventory_groups(hosts)
    everyone = groups.pop("all")
    return Inventory((everyone, {}), **{g: (names, {}) for g, names in groups.items()})
