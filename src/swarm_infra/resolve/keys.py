"""Public keys that nodes report, checked before any other node's configuration uses them.

A node is trusted with itself only (docs/design.md, trust model): its root can make ``wg
pubkey`` print anything. A WireGuard public key is a Curve25519 point, 32 bytes, written
in standard base64 with padding: 44 characters, the last ``=`` (wg(8), "KEY FORMAT";
``wg pubkey`` prints exactly that and a newline). Anything else (a line break with a
``[Interface]`` and ``PostUp`` after it, say) is refused here, and the renderers refuse it
again (:mod:`.files`), so a value a node reports can never add a line to a peer's file.

SSH host keys go the other way: the fleet declares them (Node ``spec.ssh.host_keys``), the
review shows their changes, and the controller accepts a node only when it proves it holds
one. They are checked to their exact format here too (:func:`ssh_host_key_problem`), and
:func:`known_hosts_text` is the one function that turns them into the known_hosts file both
engines check against.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Iterable, Mapping

# 43 base64 characters and one "=": 32 bytes (the last character carries 4 bits of data
# and 2 zero bits, so only A, E, I, ... may stand before the padding; decoding checks it).
_KEY = re.compile(r"[A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=")


def wireguard_key_problem(value: object) -> str | None:
    """Why ``value`` is not a WireGuard public key, or None when it is one. The reason
    quotes at most 60 characters of the value, control characters escaped."""
    if not isinstance(value, str):
        return f"expected a WireGuard public key (44 base64 characters), got {type(value).__name__}"
    shown = value[:60].encode("unicode_escape").decode("ascii") + ("..." if len(value) > 60 else "")
    if not _KEY.fullmatch(value):
        return f"expected a WireGuard public key (44 base64 characters, 32 bytes), got {shown!r}"
    try:
        if len(base64.b64decode(value, validate=True)) != 32:
            return f"expected 32 bytes in base64, got {shown!r}"
    except binascii.Error:
        return f"not base64: {shown!r}"
    return None


def checked_keys(reported: Mapping[str, object]) -> tuple[dict[str, str], dict[str, str]]:
    """(accepted, refused) public keys by node name, from what nodes ``reported``: a key
    of the wrong format is refused with its reason; a key two nodes both report is refused
    for both (one of them copied the other's, or both hold one private key), naming the
    other node. Empty values (no key yet) are neither."""
    accepted: dict[str, str] = {}
    refused: dict[str, str] = {}
    owners: dict[str, list[str]] = {}
    for name, key in sorted(reported.items()):
        if key in (None, ""):
            continue
        problem = wireguard_key_problem(key)
        if problem:
            refused[name] = problem
            continue
        owners.setdefault(str(key), []).append(name)
    for key, names in owners.items():
        if len(names) == 1:
            accepted[names[0]] = key
            continue
        for name in names:
            others = ", ".join(n for n in names if n != name)
            refused[name] = f"the same public key as {others}: keys must be unique in the mesh"
    return accepted, refused


def key_change_problem(
    reported: str, recorded: str | None, accepted: bool, declared: str | None = None
) -> str | None:
    """Why a node's well-formed ``reported`` public key may not be used, or None.

    With ``declared``, the key the fleet records for the node (Node ``spec.mesh.public_key``,
    NodeState ``mesh.public_key``), the fleet decides alone: a ``reported`` key that differs
    is refused, and neither ``accepted`` nor the controller's record changes that (the
    recorded key is reviewed and signed; what a node reports never replaces it: the trust
    model). Peers keep using the declared key. A ``reported`` key equal to it is used even
    where the controller ``recorded`` another (the reviewed change wins).

    Without it (trust on first use): it differs from the key the controller ``recorded``
    for the node in an earlier run, and the operator has not ``accepted`` the change
    (``swarm converge --accept-key-change NODE``). A node that lost its disk makes a new
    key; so does a machine that took over the node's address, which must not become the
    peer every other node trusts without someone looking. No record (the node's first
    converge: trust on first use, and recorded) is no problem.

    An empty ``reported`` (check mode on a fresh node, which has no key yet) is no
    problem either way."""
    if not reported:
        return None
    if declared:
        if reported == declared:
            return None
        return (
            f"it holds the public key {reported}, not {declared} as recorded in the fleet (its Node "
            "spec.mesh.public_key): peers use the recorded key, so the node stays out of the mesh. "
            "Restore the node's own key, or, if the node was reinstalled, record its new key by a "
            "reviewed change (swarm node bootstrap prints it); --accept-key-change does not apply"
        )
    if not recorded or reported == recorded or accepted:
        return None
    return (
        f"it reports the public key {reported}, not {recorded} as recorded on the controller "
        "(a reinstalled node, or another machine answering for it): peers keep the recorded "
        "key; once the node's provider confirms the change, converge with --accept-key-change "
        "NODE"
    )


def key_holder(name: str, reported: str, bindings: Mapping[str, str]) -> str | None:
    """The node other than ``name`` that ``bindings`` ({node: public key}: the fleet's
    recorded keys, the controller's record) binds ``reported`` to, or None (the first of
    several, in name order)."""
    return next((n for n, k in sorted(bindings.items()) if k == reported and n != name), None)


def key_taken_problem(name: str, reported: str, bindings: Mapping[str, str]) -> str | None:
    """Why node ``name`` may not use ``reported``: another node holds it in ``bindings``
    (the controller's record of what each node reported first, or the fleet's recorded
    keys), or None. The first binding stands, as OpenSSH keeps a known host's key (issue
    #38): a newcomer that reports lab-gpu-2's public key (any provider can copy a public
    key) is refused, and lab-gpu-2 keeps its key and its peers, the controller's among them;
    before, both nodes lost their peers. An empty ``reported`` is no problem."""
    holder = key_holder(name, reported, bindings) if reported else None
    if holder is None:
        return None
    return (
        f"it reports the public key {reported}, which node {holder} holds (recorded first): a node "
        f"cannot take another node's key; {holder} keeps it and its peers, {name} stays out of the "
        "mesh until it reports a key of its own"
    )


# ------------------------------------------------------------------------ SSH host keys
# A node's SSH host key is declared in the fleet (Node spec.ssh.host_keys), reviewed like
# any change, and both engines accept only a node that proves it holds one of them
# (StrictHostKeyChecking=yes against a known_hosts made from the fleet: known_hosts_text).

# The host key types sshd makes and serves (ssh-keygen -A): ed25519, ECDSA on the three NIST
# curves, RSA. DSA is gone from OpenSSH (9.8) and paramiko (4.0); certificates and
# security-key (sk-) types are not host keys one can pin here.
SSH_HOST_KEY_TYPES = (
    "ssh-ed25519",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "ssh-rsa",
)
# RSA below 2048 bits is disallowed for signatures (NIST SP 800-131A rev. 2, table 2);
# OpenSSH's own floor, RequiredRSASize, is 1024.
SSH_MIN_RSA_BITS = 2048
# "<type> <base64>", one space: no options before it (an @cert-authority or @revoked marker,
# a from="..." clause), no comment after it, no other whitespace (a line break would add a
# line to the known_hosts file made from it). schemas/node.schema.json has the same pattern.
_SSH_KEY = re.compile(r"(?P<type>[a-z0-9-]+) (?P<data>[A-Za-z0-9+/]+={0,2})")


def _shown(value: str) -> str:
    return value[:60].encode("unicode_escape").decode("ascii") + ("..." if len(value) > 60 else "")


def _embedded_type(blob: bytes) -> str | None:
    """The key type a public key blob starts with (RFC 4253 6.6: an SSH string, a 4-byte
    big-endian length and that many bytes), or None when the blob does not start with one."""
    if len(blob) < 4:
        return None
    size = int.from_bytes(blob[:4], "big")
    if size > 64 or len(blob) < 4 + size:
        return None
    try:
        return blob[4 : 4 + size].decode("ascii")
    except UnicodeDecodeError:
        return None


def ssh_host_key_problem(value: object) -> str | None:
    """Why ``value`` is not an SSH host public key as the fleet declares one, or None.

    Exactly ``<type> <base64>`` (the first two fields of ``/etc/ssh/ssh_host_*_key.pub`` or
    of ``ssh-keyscan``'s lines): a type of :data:`SSH_HOST_KEY_TYPES`, canonical base64 whose
    blob names the same type and is a valid key of it with nothing after it (paramiko
    parses it; OpenSSH's ``ssh-keygen -l`` refuses the same blobs), RSA of at least
    :data:`SSH_MIN_RSA_BITS` bits. The reason quotes at most 60 characters of the value."""
    if not isinstance(value, str):
        return f"expected an SSH public key ('<type> <base64>'), got {type(value).__name__}"
    m = _SSH_KEY.fullmatch(value)
    if not m:
        return (
            f"expected an SSH public key as '<type> <base64>' (one space, no options, no comment), "
            f"got {_shown(value)!r}"
        )
    kind: str = m["type"]
    data: str = m["data"]
    if kind not in SSH_HOST_KEY_TYPES:
        return f"key type {kind!r} is not one of {', '.join(SSH_HOST_KEY_TYPES)}"
    try:
        blob = base64.b64decode(data, validate=True)
    except binascii.Error:
        return f"the key is not base64: {_shown(data)!r}"
    if base64.b64encode(blob).decode("ascii") != data:
        return f"the key is not in canonical base64: {_shown(data)!r}"
    embedded = _embedded_type(blob)
    if embedded != kind:
        named = f"a key of type {embedded!r}" if embedded else "no key type"
        return f"the key says {kind} but its data holds {named}"
    # paramiko is pyinfra's SSH library and parses what it will be given; imported here, as
    # only fleets that declare host keys need it (it adds 0.1 s to every start).
    from paramiko import PKey, RSAKey

    try:
        key = PKey.from_type_string(kind, blob)
    except Exception as exc:  # paramiko raises SSHException, ValueError, struct errors...
        return f"not a valid {kind} key: {type(exc).__name__}: {_shown(str(exc))}"
    if key.asbytes() != blob:
        return f"not a valid {kind} key: data after the key"
    if isinstance(key, RSAKey) and key.get_bits() < SSH_MIN_RSA_BITS:
        return f"an RSA key of {key.get_bits()} bits; at least {SSH_MIN_RSA_BITS} are required"
    return None


def ssh_host_key_fingerprint(key: str) -> str:
    """``<type> SHA256:<base64>``: the key as ``ssh-keygen -l`` and ``ssh`` show it (the
    SHA-256 of the blob in base64 without padding), for a key that passed
    :func:`ssh_host_key_problem`."""
    kind, data = key.split(" ", 1)
    digest = hashlib.sha256(base64.b64decode(data)).digest()
    return f"{kind} SHA256:{base64.b64encode(digest).decode('ascii').rstrip('=')}"


def known_hosts_name(host: str, port: int) -> str:
    """How OpenSSH (and paramiko) name ``host:port`` in known_hosts: the host alone on port
    22, else ``[host]:port`` (sshd(8), SSH_KNOWN_HOSTS FILE FORMAT)."""
    return host if port == 22 else f"[{host}]:{port}"


def known_hosts_text(targets: Iterable[tuple[str, int, Iterable[str]]]) -> str:
    """The known_hosts file for ``(host, port, host keys)`` targets: one line per key,
    ``name type base64`` (:func:`known_hosts_name`), in the targets' order; a target
    without keys gives no line. The same targets give the same bytes: host names are not
    hashed (hashing salts each line at random, and the names are in the fleet anyway).

    Raises ValueError for a key that :func:`ssh_host_key_problem` refuses: the fleet's keys
    were validated, so one here came from elsewhere (the lab's connection file)."""
    lines = []
    for host, port, keys in targets:
        for key in keys:
            problem = ssh_host_key_problem(key)
            if problem:
                raise ValueError(f"host key of {known_hosts_name(host, port)}: {problem}")
            lines.append(f"{known_hosts_name(host, port)} {key}\n")
    return "".join(lines)


# OpenSSH options that end a connection whose node stopped answering: a keepalive every 5 s
# through the encrypted channel, given up after 3 unanswered (about 15 s). Over the mesh a
# node that dies sends nothing back (WireGuard drops what it cannot deliver), so without them
# a connection to it, and Ansible's ControlPersist master with every run multiplexed onto it,
# waits out TCP's retransmissions (about 15 minutes, net.ipv4.tcp_retries2) instead of
# failing as unreachable. ssh_config(5): ServerAliveInterval, ServerAliveCountMax.
SSH_LIVENESS_OPTIONS = ("ServerAliveInterval=5", "ServerAliveCountMax=3")


def strict_ssh_options(known_hosts_file: str | None) -> list[str]:
    """OpenSSH ``-o`` options that check a node's host key strictly, for every tool that
    connects (Ansible's SSH arguments, ``ssh_argv``, testinfra, the lab's ``ssh``).

    ``StrictHostKeyChecking=yes`` always: an unknown or changed key fails the connection,
    nothing is trusted on first use (``accept-new``), and the first value OpenSSH reads wins
    over an ``~/.ssh/config`` that says otherwise. With ``known_hosts_file`` (the node's keys
    are known: declared, or the lab's) that file is the only one read: not the operator's
    files nor the system's (``GlobalKnownHostsFile``), so an old entry elsewhere cannot let
    another key in, and ``UpdateHostKeys=no`` keeps ssh from adding the keys a node offers.
    Without it, the operator's own known_hosts must already hold the node's key."""
    if known_hosts_file is None:
        return ["StrictHostKeyChecking=yes"]
    return [
        f"UserKnownHostsFile={known_hosts_file}",
        "GlobalKnownHostsFile=/dev/null",
        "StrictHostKeyChecking=yes",
        "UpdateHostKeys=no",
    ]
