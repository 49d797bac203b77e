"""Public keys that nodes report, checked before any other node's configuration uses them.

A node is trusted with itself only (docs/design.md, trust model): its root can make ``wg
pubkey`` print anything. A WireGuard public key is a Curve25519 point, 32 bytes, written
in standard base64 with padding: 44 characters, the last ``=`` (wg(8), "KEY FORMAT";
``wg pubkey`` prints exactly that and a newline). Anything else (a line break with a
``[Interface]`` and ``PostUp`` after it, say) is refused here, and the renderers refuse it
again (:mod:`.files`), so a value a node reports can never add a line to a peer's file.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping

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
