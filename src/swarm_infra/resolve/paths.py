"""The directories the project's node files live under, and the files no layer writes.

The layers (:mod:`.layers`) name each file's path under these directories; the layout
(:func:`.layout.node_layout`) is made from the layers. Paths follow the FHS and each tool's
own convention: sysctl.d(5) and tmpfiles.d(5) drop-ins, ``/etc/wireguard`` for
wg-quick(8), apt_preferences(5), modprobe.d(5), systemd unit and drop-in directories.
"""

from __future__ import annotations

from typing import Literal

from .types import ManagedPath

LIB_DIR = "/usr/local/lib/swarm"  # code the project installs on the node
ETC_DIR = "/etc/swarm"  # settings the project persists on the node
STATE_DIR = "/var/lib/swarm"  # what the project records on the node (values before it set them)
WIREGUARD_DIR = "/etc/wireguard"
UNIT_DIR = "/etc/systemd/system"
AGENT_DIR = f"{ETC_DIR}/agent"  # the pull agent's settings, trusted signers and deploy key
AGENT_STATE_DIR = f"{STATE_DIR}/agent"  # its clone of the fleet, work trees, status
# node_exporter's textfile collector directory (--collector.textfile.directory), the one
# swarm metrics writes its textfile to (swarm_infra.metrics.prometheus.TEXTFILE_PATH).
TEXTFILE_DIR = "/var/lib/node_exporter/textfile_collector"
# The unprivileged system user Ray and its jobs run as (sysusers.d(5) makes it, from the
# Ray layer's file): no job can read root's files (/etc/wireguard, the Ray token itself).
RAY_USER = "swarm-ray"


def managed_path(path: str, mode: str, directory: bool = False) -> ManagedPath:
    """A root-owned file (or directory) at ``path`` with ``mode`` (octal text)."""
    kind: Literal["file", "directory"] = "directory" if directory else "file"
    return {"path": path, "type": kind, "owner": "root", "group": "root", "mode": mode}


# The pull agent's own files on a pull node, which no layer writes: ``agent_deploy_key`` (an
# ssh remote's key, 0600, from swarm node bootstrap; never read back nor logged),
# ``agent_known_hosts`` (the Git server's host key), ``agent_pause`` (while it exists the
# agent does nothing), ``agent_state_dir`` (the clone of the fleet, work trees),
# ``agent_status`` (the last run's report, JSON), ``agent_textfile`` (the same for
# node_exporter), ``agent_venv`` (where the provider installed the package; the service runs
# its ``swarm``).
AGENT_LOCAL: dict[str, ManagedPath] = {
    "agent_deploy_key": managed_path(f"{AGENT_DIR}/deploy_key", "0600"),
    "agent_known_hosts": managed_path(f"{AGENT_DIR}/known_hosts", "0644"),
    "agent_pause": managed_path(f"{AGENT_DIR}/paused", "0644"),
    "agent_state_dir": managed_path(AGENT_STATE_DIR, "0700", directory=True),
    "agent_status": managed_path(f"{AGENT_STATE_DIR}/status.json", "0644"),
    "agent_textfile": managed_path(f"{TEXTFILE_DIR}/swarm_agent.prom", "0644"),
    "agent_venv": managed_path(f"{LIB_DIR}/agent-venv", "0755", directory=True),
}
