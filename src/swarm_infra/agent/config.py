"""The agent's settings file and the node-local paths it uses.

The settings (layout ``agent_config``, JSON) are rendered by the library, first by ``swarm
node bootstrap`` and then by the host layer from the fleet
(:func:`swarm_infra.resolve.files.agent_config`): ``{"node", "fleet", "remote", "ref",
"engine", "status_port"}``. A file that is not exactly that is refused whole.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigInvalid as ConfigInvalid
from ..fleet.sources import FLEET_NAME
from ..resolve.layout import AGENT_LOCAL, node_layout
from ..resolve.pull import ref_name, remote_scheme

# A node name as the fleet's schema allows one (common.schema.json's name).
_NODE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


@dataclass(frozen=True)
class AgentConfig:
    node: str
    fleet: str
    remote: str
    ref: str
    engine: str
    status_port: int


def parse_config(text: str, where: str) -> AgentConfig:
    """The settings in ``text`` (from ``where``); raises :class:`ConfigInvalid`."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigInvalid(f"{where}:{exc.lineno}: not JSON ({exc.msg})") from None
    fields = {"node", "fleet", "remote", "ref", "engine", "status_port"}
    if not isinstance(data, dict) or set(data) != fields:
        raise ConfigInvalid(f"{where}: expected a JSON object with exactly {', '.join(sorted(fields))}")
    if not isinstance(data["node"], str) or not _NODE.fullmatch(data["node"]):
        raise ConfigInvalid(f"{where}: $.node: not a node name: {data['node']!r}")
    if not isinstance(data["fleet"], str) or not FLEET_NAME.fullmatch(data["fleet"]):
        raise ConfigInvalid(f"{where}: $.fleet: not a fleet name: {data['fleet']!r}")
    try:
        remote_scheme(data["remote"])
        ref_name(data["ref"])
    except ValueError as exc:
        raise ConfigInvalid(f"{where}: {exc}") from None
    if data["engine"] != "ansible":
        raise ConfigInvalid(f"{where}: $.engine: only 'ansible' applies in pull mode, got {data['engine']!r}")
    port = data["status_port"]
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise ConfigInvalid(f"{where}: $.status_port: not a TCP port: {port!r}")
    return AgentConfig(**data)


def load_config(path: Path) -> AgentConfig:
    """The settings file at ``path``; raises :class:`ConfigInvalid` (also when unreadable)."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigInvalid(f"{path}: cannot read it ({exc})") from None
    return parse_config(text, str(path))


@dataclass(frozen=True)
class Paths:
    """Where the agent reads and writes on the node (layout's ``agent_*`` files)."""

    allowed_signers: Path
    revoked_signers: Path
    deploy_key: Path
    known_hosts: Path
    pause: Path
    state_dir: Path
    status: Path
    textfile: Path
    reboot_required: Path

    @property
    def clone(self) -> Path:
        return self.state_dir / "fleet.git"

    @property
    def trees(self) -> Path:
        return self.state_dir / "trees"

    @classmethod
    def node(cls, root: Path = Path("/")) -> Paths:
        """The layout's paths, under ``root`` (``/`` on a node; a temporary directory in tests)."""
        f = {**node_layout()["files"], **AGENT_LOCAL}

        def at(name: str) -> Path:
            return root / f[name]["path"].lstrip("/")

        return cls(
            allowed_signers=at("agent_allowed_signers"),
            revoked_signers=at("agent_revoked_signers"),
            deploy_key=at("agent_deploy_key"),
            known_hosts=at("agent_known_hosts"),
            pause=at("agent_pause"),
            state_dir=at("agent_state_dir"),
            status=at("agent_status"),
            textfile=at("agent_textfile"),
            reboot_required=at("reboot_required"),
        )
