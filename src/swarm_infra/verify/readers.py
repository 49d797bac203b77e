"""How each kind of check reads its actual value on a node, through testinfra's Host.

Each reader takes (host, check, node_cache) and returns the actual value in the shape
``swarm_infra.verification.matches`` compares: sysctls and sysfs as {"live", "persisted"}
lists of fields, files as "user:group mode", services as "enabled, running", a node's
WireGuard peers as ``{peer: problem}`` from one read of its dump, pings as "reply" or
"no reply".
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from testinfra.host import Host

from ..nodeside import facts
from ..resolve.ray import client_env_prefix
from .checks import Check, judge_peers

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


def absent(host: Host, check: Check, cache: Cache) -> str:
    return "present" if host.file(check.args["path"]).exists else "absent"


def conf_keys(host: Host, check: Check, cache: Cache) -> list[str] | str:
    """The keys a sysctl.d file sets, sorted; "absent" without the file."""
    f = host.file(check.args["path"])
    return sorted(facts.sysctl_conf(f.content_string)) if f.exists else "absent"


def json_keys(host: Host, check: Check, cache: Cache) -> list[str] | str:
    """The keys of a JSON object file, sorted; "absent" without the file."""
    f = host.file(check.args["path"])
    if not f.exists:
        return "absent"
    try:
        return sorted(json.loads(f.content_string))
    except ValueError:
        return "not JSON"


def mount(host: Host, check: Check, cache: Cache) -> dict[str, Any] | str:
    """What is mounted at the path: fstype, the source's label, options, and whether the
    target device supports discard (lsblk DISC-MAX > 0); "not mounted" otherwise."""
    out = host.run(
        f"findmnt --json --mountpoint {shlex.quote(check.args['path'])} --output SOURCE,FSTYPE,OPTIONS"
    )
    if out.rc != 0:
        return "not mounted"
    fs = json.loads(out.stdout)["filesystems"][0]
    label = host.run(f"blkid -p -s LABEL -o value {shlex.quote(fs['source'])}").stdout.strip()
    disc = host.run(f"lsblk -ndbo DISC-MAX {shlex.quote(check.args['target'])}").stdout.strip()
    return {
        "fstype": fs["fstype"],
        "label": label,
        "options": fs["options"].split(","),
        "discard_supported": disc.isdigit() and int(disc) > 0,
    }


def fstab(host: Host, check: Check, cache: Cache) -> dict[str, Any] | str:
    """The /etc/fstab line mounting the path: {spec: "SOURCE PATH FSTYPE", options}."""
    for line in _text(host, "/etc/fstab").splitlines():
        fields = line.split()
        if len(fields) >= 4 and not fields[0].startswith("#") and fields[1] == check.args["path"]:
            return {"spec": " ".join(fields[:3]), "options": fields[3].split(",")}
    return "absent"


def space(host: Host, check: Check, cache: Cache) -> dict[str, int] | str:
    out = host.run(f"df --block-size=1 --output=size,avail {shlex.quote(check.args['path'])}")
    if out.rc != 0:
        return "unreadable"
    size, avail = out.stdout.splitlines()[1].split()
    return {"size_bytes": int(size), "avail_bytes": int(avail)}


def array(host: Host, check: Check, cache: Cache) -> list[str] | str:
    """The md array's member devices, sorted (mdadm --detail --export)."""
    out = host.run(f"mdadm --detail --export {shlex.quote(check.args['array'])}")
    if out.rc != 0:
        return "absent"
    members = [v for k, _, v in (ln.partition("=") for ln in out.stdout.splitlines()) if k.endswith("_DEV")]
    return sorted(members)


def ray_exposed(host: Host, check: Check, cache: Cache) -> list[str]:
    """Listening TCP sockets of Ray's processes that answer beyond loopback and the node's
    mesh address without the firewall dropping their port: ["addr:port (process)"]."""
    fw = check.args["firewall"]
    guarded = set(fw["tcp_ports"])
    out = host.check_output("ss -ltnpH")
    exposed = []
    for line in out.splitlines():
        fields = line.split()
        if len(fields) < 6 or ("ray" not in line and "gcs_server" not in line and "raylet" not in line):
            continue
        addr, _, port_text = fields[3].rpartition(":")
        port = int(port_text)
        local_only = addr.strip("[]") in ("127.0.0.1", "::1", check.args["node_ip"])
        dropped = port in guarded or any(lo <= port <= hi for lo, hi in fw["tcp_ranges"])
        if not (local_only or dropped):
            process = fields[5].split('"')[1] if '"' in fields[5] else fields[5]
            exposed.append(f"{addr}:{port} ({process})")
    return sorted(exposed)


def tcp_port(host: Host, check: Check, cache: Cache) -> str:
    """Whether a TCP connection from this node to address:port opens within 3 s."""
    a = check.args
    probe = host.run(f"timeout 3 bash -c '</dev/tcp/{a['address']}/{int(a['port'])}'")
    return "open" if probe.rc == 0 else "closed"


def apt_proxy(host: Host, check: Check, cache: Cache) -> str:
    """What the node's apt proxy detect program answers for a Debian URI: the proxy apt would
    use now (the site's package cache, or ``DIRECT``)."""
    out = host.run(f"{shlex.quote(check.args['detect'])} http://deb.debian.org/debian/")
    return out.stdout.strip() if out.rc == 0 else f"unreadable: rc {out.rc}"


def ray_member(host: Host, check: Check, cache: Cache) -> dict[str, Any] | str:
    """The node as the head's state API lists it (run on the head): state, total resources
    and labels; "absent" when the head does not list it."""
    dashboard = check.args["dashboard"]
    if not dashboard:
        return "unreadable: the head runs no dashboard (state API)"
    nodes = _cached(
        cache, "ray_nodes", lambda: _ray_nodes(host, check.args["venv"], dashboard, check.args["token"])
    )
    if isinstance(nodes, str):
        return nodes
    alive = [n for n in nodes if n.get("node_ip") == check.args["node_ip"] and n.get("state") == "ALIVE"]
    entry = alive[0] if alive else next((n for n in nodes if n.get("node_ip") == check.args["node_ip"]), None)
    if entry is None:
        return "absent"
    return {
        "state": entry.get("state"),
        "resources": entry.get("resources_total") or {},
        "labels": entry.get("labels") or {},
    }


def _ray_nodes(host: Host, venv: str, dashboard: dict[str, Any], token: str) -> list[dict[str, Any]] | str:
    address = f"http://{dashboard['host']}:{dashboard['port']}"
    out = host.run(
        f"{client_env_prefix(token)} {shlex.quote(venv)}/bin/ray list nodes --detail --format json "
        f"--limit 10000 --address {address}"
    )
    if out.rc != 0:
        return f"unreadable: {(out.stderr.strip() or 'ray list nodes failed').splitlines()[-1]}"
    return json.loads(out.stdout)


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


def wg_dump_command(iface: str) -> str:
    """The one command that reads a node's clock and ``wg show IFACE dump`` (wg(8)), with the
    secrets replaced by ``(hidden)`` on the node: the interface line's private key and each
    peer's preshared key never leave it (DESIGN.md: only public keys travel). Output: the
    node's time (s since the epoch), then the dump's lines, fields in wg(8)'s order; no
    second line when the interface cannot be read."""
    hide = 'NR == 1 {$1 = "(hidden)"} NR > 1 {$2 = "(hidden)"} {print}'
    return f"date +%s && wg show {shlex.quote(iface)} dump | awk -F '\\t' -v OFS='\\t' {shlex.quote(hide)}"


def parse_wg_read(text: str) -> tuple[int, dict[str, dict[str, Any]]] | str:
    """The output of :func:`wg_dump_command` as (node time, :func:`facts.wg_dump`), or a
    string saying why it is unreadable."""
    lines = text.splitlines()
    if not lines or not lines[0].strip().isdigit():
        return "unreadable: no clock reading"
    if len(lines) < 2:
        return "unreadable: the interface could not be read (wg show)"
    return int(lines[0]), facts.wg_dump("\n".join(lines[1:]))


def wg_peers(
    host: Host, check: Check, cache: Cache, key_of, skip: frozenset[str] = frozenset()
) -> dict[str, str] | str:
    """Every declared peer but ``skip`` judged from ONE read of the node's dump
    (:func:`judge_peers`, against the fleet's recorded keys where it records them, the
    node's own included): ``{peer: problem}`` ({} when all is well), or a string saying
    why it is unreadable. ``key_of(name)``: the key a peer node holds, None when it cannot
    be read (asked only where the fleet records none)."""
    out = host.run(wg_dump_command(check.args["interface"]))
    read = parse_wg_read(out.stdout) if out.rc == 0 else f"unreadable: rc {out.rc}"
    if isinstance(read, str):
        return read
    now, dump = read
    own = (check.args.get("public_key"), facts.wg_dump_public_key(out.stdout.split("\n", 1)[-1]))
    return judge_peers(check.args["peers"], dump, now, key_of, skip, own)


def ping(host: Host, check: Check, cache: Cache) -> str:
    # -w 20: keep trying for up to 20 s; a peer behind NAT may need its next keepalive.
    a = check.args
    out = host.run(f"ping -c 1 -w 20 -I {a['interface']} {a['address']}")
    return "reply" if out.rc == 0 else "no reply"


def gpu(host: Host, check: Check, cache: Cache, spec: dict[str, Any]) -> Any:
    result = _cached(cache, "gpu", lambda: _gpu_diff(host, spec, check.args["code"]))
    if isinstance(result, str):
        return result
    changes, pending = result["changes"], result.get("pending_reset", {})
    index = check.args["index"]
    if check.args["setting"] == "mig_geometry" and "mig" in pending.get(str(index), []):
        return "none yet: the MIG mode waits for a GPU reset or reboot"
    for c in changes:
        if c["gpu"] == check.args["index"] and c["key"] == check.args["setting"]:
            return c["before"]
    return check.desired


def _gpu_diff(host: Host, spec: dict[str, Any], code: str) -> dict[str, Any] | str:
    """What differs, per the node-side GPU code (installed at ``code``) run with the
    desired settings on stdin; a string saying why when the code cannot run (not installed,
    NVML error)."""
    out = host.run(f"python3 {shlex.quote(code)} diff - <<'EOF'\n{json.dumps(spec)}\nEOF")
    if out.rc != 0:
        return f"unreadable: {(out.stderr.strip() or out.stdout.strip() or 'no output').splitlines()[-1]}"
    return json.loads(out.stdout)
