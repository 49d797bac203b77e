"""The agent's settings file and the node-local paths it uses.

The settings (layout ``agent_config``, JSON) are rendered by the library, first by ``swarm
node bootstrap`` and then by the host layer from the fleet
(:func:`swarm_infra.resolve.layers.host.agent_config`): ``{"node", "fleet", "remote", "ref",
"engine", "status_port"}``, as ``schemas/agentsettings.schema.json`` describes them. A
file that is not exactly that is refused whole.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path

from ..errors import ConfigInvalid as ConfigInvalid
from ..fleet.diagnostics import Source, json_path, one_line
from ..fleet.schemas import AGENT_SETTINGS, check_file
from ..resolve.layout import AGENT_LOCAL, node_layout
from ..resolve.pull import ref_name, remote_scheme

# Findings about the object's keys rather than a value: the message says what the whole is.
_WHOLE = ("schema.additionalProperties", "schema.required")


@dataclass(frozen=True)
class AgentConfig:
    node: str
    fleet: str
    remote: str
    ref: str
    engine: str
    status_port: int


FIELDS = tuple(f.name for f in fields(AgentConfig))  # the settings' keys, as the schema requires


def parse_config(text: str, where: str) -> AgentConfig:
    """The settings in ``text`` (from ``where``, a file name for messages); raises
    :class:`ConfigInvalid`, one line: ``WHERE: $.field: problem`` for each problem the
    settings' schema finds (``schemas/agentsettings.schema.json``, checked by the fleet's
    validator: :func:`swarm_infra.fleet.schemas.check_file`), else for a remote or ref the
    agent would not fetch (:func:`~swarm_infra.resolve.pull.remote_scheme`,
    :func:`~swarm_infra.resolve.pull.ref_name`)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigInvalid(f"{where}:{exc.lineno}: not JSON ({exc.msg})") from None
    except (ValueError, RecursionError) as exc:
        # What the parser refuses beyond the grammar: an integer of more digits than
        # int() converts (sys.set_int_max_str_digits), nesting deeper than its stack.
        raise ConfigInvalid(
            f"{where}: not JSON the agent reads ({one_line(str(exc).split(':', 1)[0])})"
        ) from None
    findings = check_file(AGENT_SETTINGS, data, Source(where, 0))
    if findings:
        problems = [f"{json_path(f.path)}: {f.message}" for f in findings]
        if any(f.rule in _WHOLE or not f.path for f in findings):
            problems.append(f"expected a JSON object with exactly {', '.join(sorted(FIELDS))}")
        raise ConfigInvalid(one_line(f"{where}: " + "; ".join(problems)))
    for field, check in (("remote", remote_scheme), ("ref", ref_name)):
        try:
            check(data[field])
        except ValueError as exc:
            raise ConfigInvalid(f"{where}: $.{field}: {exc}") from None
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
