"""How each kind of check reads its actual value on a node, through testinfra's Host.

Each reader takes (host, check, node_cache) and returns the actual value in the shape
``swarm_infra.verification.matches`` compares: sysctls and sysfs as {"live", "persisted"}
lists of fields, files as "user:group mode", services as "enabled, running", peers as
their AllowedIPs (None: absent), handshakes as an age in s (None: never), pings as
"reply" or "no reply".
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from testinfra.host import Host

from ..nodeside import facts
from .checks import Check

Cache = dict[str, Any]


def _cached(cache: Cache, key: str, read) -> Any:
    if key not in cache:
        cache[key] = read()
    return cache[key]


def _text(host: Host, path: str) -> str:
    f = host.file(path)
    return f.content_string if f.exists else ""


def _live_sysctls(host: Host, keys: list[str]) -> dict[str, list[str] | None]:
    """{key: fields of `sysctl -n` where the node can set the key, else None}; one command."""
    script = " ".join(
        f"if test -w {shlex.quote('/proc/sys/' + k.replace('.', '/'))}; then "
        f"printf '%s\\t' {shlex.quote(k)}; sysctl -n {shlex.quote(k)}; fi;"
        for k in keys
    )
    out = host.check_output(script) if keys else ""
    return {**dict.fromkeys(keys), **facts.tagged_lines(out)}


def sysctl(host: Host, check: Check, cache: Cache) -> dict[str, Any]:
    persisted = _cached(cache, "sysctl.d", lambda: facts.sysctl_conf(_text(host, check.args["path"])))
    # Live only where the node can set the key; otherwise the persisted value is the claim.
    live = _cached(cache, "sysctl", lambda: _live_sysctls(host, check.args["all_keys"]))
    key = check.args["key"]
    return {"live": live.get(key), "persisted": persisted.get(key)}


def sysfs(host: Host, check: Check, cache: Cache) -> dict[str, Any]:
    writes = _cached(cache, "tmpfiles", lambda: facts.tmpfiles_writes(_text(host, check.args["tmpfiles"])))
    path = check.args["path"]
    live = None
    if host.run(f"test -w {shlex.quote(path)}").rc == 0:
        live = facts.sysfs_choice(host.file(path).content_string)
    return {"live": live, "persisted": writes.get(check.args["glob"])}


def file(host: Host, check: Check, cache: Cache) -> str:
    out = host.run(f"stat -c '%U:%G %04a' {shlex.quote(check.args['path'])}")
    return out.stdout.strip() if out.rc == 0 else "absent"


def service(host: Host, check: Check, cache: Cache) -> str:
    s = host.service(check.args["unit"])
    enabled = "enabled" if s.is_enabled else "disabled"
    if check.desired == "enabled":
        return enabled
    return f"{enabled}, {'running' if s.is_running else 'not running'}"


def package(host: Host, check: Check, cache: Cache) -> str:
    p = host.package(check.args["package"])
    return p.version if p.is_installed else "absent"


def _link(host: Host, iface: str) -> dict[str, Any]:
    out = host.run(f"ip -j addr show dev {shlex.quote(iface)}")
    return facts.ip_link(out.stdout) if out.rc == 0 else {}


def interface_address(host: Host, check: Check, cache: Cache) -> str | None:
    inet = _cached(cache, "addr", lambda: _link(host, check.args["interface"])).get("inet", [])
    return inet[0] if len(inet) == 1 else (", ".join(inet) or None)


def interface_mtu(host: Host, check: Check, cache: Cache) -> int | None:
    return _cached(cache, "addr", lambda: _link(host, check.args["interface"])).get("mtu")


def public_key(host: Host, key_file: str) -> str:
    """The node's WireGuard public key, derived on the node from its private key file
    (read by ``wg pubkey`` on its standard input: the key is never in an argument)."""
    return host.check_output(f"wg pubkey < {shlex.quote(key_file)}")


def _dump(host: Host, iface: str) -> dict[str, dict[str, Any]]:
    out = host.run(f"wg show {shlex.quote(iface)} dump")
    return facts.wg_dump(out.stdout) if out.rc == 0 else {}


def peer(host: Host, check: Check, cache: Cache, key_of) -> list[str] | None:
    dump = _cached(cache, "dump", lambda: _dump(host, check.args["interface"]))
    entry = dump.get(key_of(check.args["peer"]))
    return entry["allowed_ips"] if entry else None


def handshake(host: Host, check: Check, cache: Cache, key_of) -> int | None:
    entry = _dump(host, check.args["interface"]).get(key_of(check.args["peer"]))
    if not entry or not entry["latest_handshake"]:
        return None
    return int(host.check_output("date +%s")) - entry["latest_handshake"]


def ping(host: Host, check: Check, cache: Cache) -> str:
    # -w 20: keep trying for up to 20 s; a peer behind NAT may need its next keepalive.
    a = check.args
    out = host.run(f"ping -c 1 -w 20 -I {a['interface']} {a['address']}")
    return "reply" if out.rc == 0 else "no reply"


def gpu(host: Host, check: Check, cache: Cache, spec: dict[str, Any]) -> Any:
    changes = _cached(cache, "gpu", lambda: _gpu_diff(host, spec, check.args["code"]))
    if isinstance(changes, str):
        return changes
    for c in changes:
        if c["gpu"] == check.args["index"] and c["key"] == check.args["setting"]:
            return c["before"]
    return check.desired


def _gpu_diff(host: Host, spec: dict[str, Any], code: str) -> list[dict[str, Any]] | str:
    """What differs, per the node-side GPU code (installed at ``code``) run with the
    desired settings on stdin; a string saying why when the code cannot run (not installed,
    NVML error)."""
    out = host.run(f"python3 {shlex.quote(code)} diff - <<'EOF'\n{json.dumps(spec)}\nEOF")
    if out.rc != 0:
        return f"unreadable: {(out.stderr.strip() or out.stdout.strip() or 'no output').splitlines()[-1]}"
    return json.loads(out.stdout)["changes"]
