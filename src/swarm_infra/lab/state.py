"""Where the lab keeps what it made: state, the lab SSH key, and the connection file.

``$SWARM_LAB_DIR`` (default ``/var/lib/swarm-lab``, mode 0700)::

    state.json          what `up` created (sites, nodes, PIDs, host settings to restore)
    connection.json     per node: host, port, user, private key, host keys (read by the
                        inventory: the lab's overlay of the fleet's spec.ssh), known_hosts
    ssh/id_ed25519      the lab's SSH key (0600), made at the first `up`, removed by `down`
    ssh/known_hosts     every node's host key, so SSH checks host keys strictly
    nodes/<name>/       each node's overlay upper/work directories and console.log

The lab's nodes get new host keys at each `up` that creates them, so the lab fleet
(inventory/lab, in Git) cannot declare them: the connection file does, per node, as it
replaces the declared SSH address. The engines make their known_hosts from those keys with
the same function as from a fleet's declared ones (``resolve.keys.known_hosts_text``);
``ssh/known_hosts``, for ``swarm lab ssh`` and the lab's own checks, is made by it too.

The base image is cached separately, in ``$SWARM_LAB_CACHE`` (default ``/var/cache/swarm-lab``),
and survives ``down``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..nodeside.atomic import write_atomic
from ..resolve.keys import SSH_LIVENESS_OPTIONS, known_hosts_text, strict_ssh_options
from .system import run


def state_dir() -> Path:
    return Path(os.environ.get("SWARM_LAB_DIR", "/var/lib/swarm-lab"))


def cache_dir() -> Path:
    return Path(os.environ.get("SWARM_LAB_CACHE", "/var/cache/swarm-lab"))


def connection_file() -> Path:
    """The file the Ansible inventory plugin and ``swarm lab ssh`` read node connections from."""
    return state_dir() / "connection.json"


@dataclass
class LabState:
    """The lab as last written by ``up``: JSON-serialisable parts only."""

    sites: dict[str, dict[str, Any]]
    nodes: dict[str, dict[str, Any]]  # LabNode.as_dict() + pid, host_key
    host: dict[str, Any]  # ip_forward_before, run_netns_was_mount, image

    @classmethod
    def load(cls) -> LabState:
        path = state_dir() / "state.json"
        if not path.exists():
            return cls({}, {}, {})
        data = json.loads(path.read_text())
        return cls(data.get("sites", {}), data.get("nodes", {}), data.get("host", {}))

    def save(self) -> None:
        d = state_dir()
        d.mkdir(parents=True, exist_ok=True)
        os.chmod(d, 0o700)
        state = {"sites": self.sites, "nodes": self.nodes, "host": self.host}
        write_atomic(d / "state.json", json.dumps(state, indent=2), 0o644)
        self._write_connections()

    def _write_connections(self) -> None:
        key, known = ssh_key_paths()
        conns = {
            name: {
                "host": n["address"].split("/")[0],
                "port": n["ssh_port"],
                "user": n["ssh_user"],
                "private_key_file": str(key),
                "host_keys": [public_key(n["host_key"])],
                "known_hosts_file": str(known),
            }
            for name, n in sorted(self.nodes.items())
        }
        known.parent.mkdir(parents=True, exist_ok=True)
        known.write_text(known_hosts_text((c["host"], c["port"], c["host_keys"]) for c in conns.values()))
        os.chmod(known, 0o644)
        connection_file().write_text(json.dumps({"nodes": conns}, indent=2) + "\n")


def public_key(line: str) -> str:
    """``<type> <base64>`` of a ``.pub`` line (``ssh-keygen`` adds a comment, ``root@NODE``):
    the form the fleet declares host keys in."""
    return " ".join(line.split()[:2])


def read_connections() -> dict[str, dict[str, Any]]:
    """Per lab node: ``{host, port, user, private_key_file, host_keys, known_hosts_file}``
    from the connection file; empty when no lab is up (the inventory then uses the declared
    SSH). The inventory reads the host keys; ``known_hosts_file`` (the same keys, made by
    the same function) is for :func:`ssh_command`."""
    path = connection_file()
    if not path.exists():
        return {}
    return json.loads(path.read_text()).get("nodes", {})


def ssh_key_paths() -> tuple[Path, Path]:
    d = state_dir() / "ssh"
    return d / "id_ed25519", d / "known_hosts"


def ensure_ssh_key() -> str:
    """The lab's SSH key pair (made once, private part 0600); returns the public key line."""
    key, _ = ssh_key_paths()
    if not key.exists():
        key.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(key.parent, 0o700)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "swarm-lab", "-f", str(key)])
    os.chmod(key, 0o600)
    return key.with_suffix(".pub").read_text().strip()


def ssh_command(node: dict[str, Any], command: list[str] | None = None) -> list[str]:
    """``ssh`` argv for a node from the connection file, with strict host key checking
    against the lab's known_hosts (the options the engines use:
    ``resolve.keys.strict_ssh_options``)."""
    return [
        "ssh",
        "-i",
        node["private_key_file"],
        *(
            arg
            for option in (*strict_ssh_options(node["known_hosts_file"]), *SSH_LIVENESS_OPTIONS)
            for arg in ("-o", option)
        ),
        "-o",
        "BatchMode=yes",
        "-o",
        "ConnectTimeout=10",
        "-p",
        str(node["port"]),
        f"{node['user']}@{node['host']}",
        *(command or []),
    ]
