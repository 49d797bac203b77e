"""``swarm node bootstrap``: prepare a new machine to converge itself by pull.

Run once by the provider, as root, on the new machine. It writes the agent's files (the
settings, the allowed signers the operator handed over out of band, an ssh remote's deploy
key, 0600), makes the node's WireGuard key pair (the private key 0600 at the layout's
path, where the mesh layer finds and keeps it; it never leaves the node) and prints the
public key and the Node document to propose to the fleet repository. Until that change is
merged (reviewed, signed), the node's agent only pulls: the fleet does not declare it, so
it applies nothing (``waiting``) and no peer knows its key.

Trust: the allowed signers file given here is the node's root of trust (the first commit
is verified against it; each later one against the signers of the last commit applied).
Take it from the operator over a channel you trust, not from the Git remote.
"""

from __future__ import annotations

import base64
import ipaddress
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..errors import BootstrapError as BootstrapError
from ..fleet.diagnostics import json_path
from ..nodeside.atomic import write_atomic
from ..resolve.files import agent_config_text, agent_service_text, agent_timer_text
from ..resolve.keys import wireguard_key_problem
from ..resolve.layers.host import agent_settings, agent_settings_problems
from ..resolve.layout import AGENT_LOCAL, node_layout
from ..resolve.pull import allowed_signers_problems, ref_name, remote_scheme

_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
DEFAULT_INTERVAL_S, DEFAULT_RANDOMIZED_DELAY_S = 900, 300  # the schema's defaults


@dataclass(frozen=True)
class Request:
    """What the provider asked for (the command's arguments)."""

    node: str
    site: str
    address: str
    roles: tuple[str, ...]
    nat: bool
    fleet: str
    remote: str
    ref: str
    allowed_signers: Path
    deploy_key: Path | None = None
    known_hosts: Path | None = None
    status_port: int = 9100
    interface: str = "wg0"


def check(req: Request) -> str:
    """The allowed signers file's text, after checking every argument; raises
    :class:`BootstrapError` naming the first problem."""
    for what, value in (("--node", req.node), ("--site", req.site), ("--fleet", req.fleet)):
        if not _NAME.fullmatch(value):
            raise BootstrapError(
                f"{what} {value!r}: expected a DNS-1123 label (lower-case letters, digits, '-')"
            )
    try:
        ipaddress.IPv4Address(req.address)
    except ValueError:
        raise BootstrapError(f"--address {req.address!r}: expected the node's IPv4 address") from None
    try:
        scheme = remote_scheme(req.remote)
        ref_name(req.ref)
    except ValueError as exc:
        raise BootstrapError(str(exc)) from None
    # The settings file install writes, checked as the agent will read it (its schema): a
    # value the agent would refuse at every run (--status-port 0) is refused here instead.
    settings = agent_settings(req.node, req.fleet, req.remote, req.ref, req.status_port)
    for at, message in agent_settings_problems(settings)[:1]:
        field = str(at[0]) if at else ""
        raise BootstrapError(
            f"--{field.replace('_', '-')} {settings.get(field)!r}: {message} "
            f"(the agent's settings, {json_path(at)})"
        )
    if scheme == "ssh" and req.deploy_key is None:
        raise BootstrapError(
            "an ssh:// remote needs --deploy-key (the key the Git server grants read access)"
        )
    try:
        text = req.allowed_signers.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise BootstrapError(f"--allowed-signers {req.allowed_signers}: cannot read it ({exc})") from None
    problems = allowed_signers_problems(text)
    if problems:
        line, why = problems[0]
        raise BootstrapError(f"--allowed-signers {req.allowed_signers}:{line}: {why}")
    for what, path in (("--deploy-key", req.deploy_key), ("--known-hosts", req.known_hosts)):
        if path is not None and not path.is_file():
            raise BootstrapError(f"{what} {path}: no such file")
    return text


def public_key(private_b64: str) -> str:
    """The WireGuard public key of a private key in base64 (what ``wg pubkey`` prints):
    X25519 of the base point (RFC 7748; WireGuard's Curve25519 keys)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    raw = base64.b64decode(private_b64.strip(), validate=True)
    if len(raw) != 32:
        raise ValueError("a WireGuard private key is 32 bytes")
    pub = X25519PrivateKey.from_private_bytes(raw).public_key()
    data = pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(data).decode("ascii")


def _new_private_key() -> str:
    # wg genkey: 32 random bytes, clamped for Curve25519 (RFC 7748 5, decodeScalar25519).
    raw = bytearray(os.urandom(32))
    raw[0] &= 248
    raw[31] = (raw[31] & 127) | 64
    return base64.b64encode(bytes(raw)).decode("ascii")


def _write_new(path: Path, data: bytes, mode: int) -> None:
    """``data`` into a new file ``path`` created with ``mode`` (never wider for a moment)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "wb") as out:
        os.fchmod(out.fileno(), mode)
        out.write(data)


def wireguard_key(path: Path) -> tuple[str, bool]:
    """(the public key, made now) of the node's WireGuard key at ``path``: an existing key
    is kept (a node bootstrapped again keeps its identity), else one is made, 0600 in a
    0700 directory. Raises :class:`BootstrapError` for a file that holds no key."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    made = False
    if not path.exists():
        _write_new(path, (_new_private_key() + "\n").encode(), 0o600)
        made = True
    try:
        key = public_key(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise BootstrapError(
            f"{path} holds no WireGuard private key ({exc}); move it away and run again"
        ) from None
    problem = wireguard_key_problem(key)
    if problem:  # cannot happen for 32 bytes; checked as every reported key is
        raise BootstrapError(f"{path}: {problem}")
    return key, made


def memory_gib(meminfo: str) -> int:
    """Whole GiB of ``MemTotal`` in ``/proc/meminfo``'s text (kB), at least 1."""
    m = re.search(r"^MemTotal:\s+(\d+) kB$", meminfo, re.M)
    return max(1, int(m.group(1)) // (1024 * 1024)) if m else 1


def node_document(req: Request, key: str, cpus: int, memory: int) -> str:
    """The Node document to propose (YAML, one ``---`` document): what bootstrap knows of
    the machine, pull convergence and the public key. Made by a YAML emitter from checked
    values: no argument can add a field."""
    spec: dict[str, Any] = {
        "site": req.site,
        "address": req.address,
        "roles": list(req.roles),
        "convergence": "pull",
        "hardware": {"cpus": cpus, "memory_gib": memory},
        "mesh": {"public_key": key, **({"nat": True} if req.nat else {})},
    }
    doc = {"apiVersion": "swarm.io/v1alpha1", "kind": "Node", "metadata": {"name": req.node}, "spec": spec}
    return "---\n" + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)


def install(req: Request, signers: str, root: Path = Path("/")) -> dict[str, Path]:
    """Write the agent's files under ``root`` (``/`` on the node); returns them by layout
    name. The units get the schema's default interval and jitter until the fleet's own
    replace them (the host layer, on the first apply). The agent's textfile directory is
    made too (0755): node_exporter's textfile collector reports a missing directory as a
    scrape error (``node_textfile_scrape_error 1``, prometheus/node_exporter
    collector/textfile.go), which a peer's rollout gate would read before this agent's first
    report instead of "no report yet"."""
    layout = node_layout(req.interface)
    f = {**layout["files"], **AGENT_LOCAL}

    def at(name: str) -> Path:
        return root / f[name]["path"].lstrip("/")

    at("agent_dir").mkdir(parents=True, exist_ok=True, mode=0o700)
    at("agent_dir").chmod(0o700)
    at("agent_state_dir").mkdir(parents=True, exist_ok=True, mode=0o700)
    textfile_dir = at("agent_textfile").parent
    if not textfile_dir.is_dir():
        textfile_dir.mkdir(parents=True, mode=0o755)
        textfile_dir.chmod(0o755)  # whatever the umask: node_exporter reads it as its own user
    written = {
        "agent_config": agent_config_text(req.node, req.fleet, req.remote, req.ref, req.status_port).encode(),
        "agent_allowed_signers": (signers if signers.endswith("\n") else signers + "\n").encode(),
        "agent_service": agent_service_text(layout).encode(),
        "agent_timer": agent_timer_text(layout, DEFAULT_INTERVAL_S, DEFAULT_RANDOMIZED_DELAY_S).encode(),
    }
    if req.deploy_key is not None:
        written["agent_deploy_key"] = req.deploy_key.read_bytes()
    if req.known_hosts is not None:
        written["agent_known_hosts"] = req.known_hosts.read_bytes()
    out = {}
    for name, data in written.items():
        path = at(name)
        write_atomic(path, data, int(f[name]["mode"], 8))
        out[name] = path
    return out
