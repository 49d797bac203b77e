"""What a node holds now, read in one go: the files, units, packages, interfaces, block
devices and virtualenvs that converging its layers looks at.

Reading them one by one costs a round trip each (over a WAN link, 40 ms and more); the
pyinfra engine sends this file and a SPEC on stdin and gets everything back in one, so a
converged node is checked in a handful of round trips. Standard library only, like the
rest of ``nodeside``; read-only: it never changes the node.

SPEC (JSON): ``{"paths": [path, ...], "texts": [path, ...], "units": [unit, ...],
"packages": [name, ...], "interfaces": [name, ...], "devices": [path, ...],
"venvs": [path, ...], "public_keys": [private key path, ...], "wireguard": [interface, ...],
"mounts": [mount point, ...], "modules": [kernel module, ...], "users": [name, ...]}`` (every
key optional). The
result has the same keys:

* ``paths``: ``{path: {"type": "file"|"directory"|"link"|"other", "mode": "0644", "owner",
  "group", "sha1" (files only)} or None}``;
* ``texts``: ``{path: text or None}``;
* ``units``: ``{unit: {"enabled": UnitFileState, "active": ActiveState}}`` (systemctl show:
  ``enabled``/``disabled``/... and ``active``/``inactive``/...; ``""`` when unknown);
* ``packages``: ``{name: installed version or None}``;
* ``interfaces``: ``{name: {"mtu", "inet": [CIDR, ...]}}`` (absent interfaces left out);
* ``devices``: ``{path: {"probe": blkid export, "discard_max_bytes": int}}``;
* ``venvs``: ``{path: {distribution: version}}`` ({} when no such virtualenv);
* ``public_keys``: ``{private key path: public key or None}`` (``wg pubkey`` reads the file
  on the node: the private key never leaves it);
* ``wireguard``: ``{interface: "wg show IFACE allowed-ips" output, or None when down}``;
* ``mounts``: ``{mount point: {"source", "fstype", "options"} or None}`` (/proc/self/mounts);
* ``modules``: ``{module: loaded}`` (/sys/module/NAME exists);
* ``users``: ``{name: uid or None}`` (the password database).
"""

from __future__ import annotations

import grp
import hashlib
import json
import os
import pwd
import stat
import subprocess
import sys


def _run(argv: list[str], stdin: str | None = None) -> tuple[int, str]:
    try:
        proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return 127, ""
    return proc.returncode, proc.stdout


def _name(table, ident: int) -> str:
    try:
        return table(ident)[0]
    except KeyError:
        return str(ident)


def path_state(path: str) -> dict | None:
    """Type, mode, owner, group and (for files) SHA-1 of ``path``, None when absent."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    kind = (
        "file"
        if stat.S_ISREG(st.st_mode)
        else "directory"
        if stat.S_ISDIR(st.st_mode)
        else "link"
        if stat.S_ISLNK(st.st_mode)
        else "other"
    )
    out: dict[str, str | None] = {
        "type": kind,
        "mode": f"{stat.S_IMODE(st.st_mode):04o}",
        "owner": _name(pwd.getpwuid, st.st_uid),
        "group": _name(grp.getgrgid, st.st_gid),
    }
    if kind == "file":
        digest = hashlib.sha1()
        try:
            with open(path, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 16), b""):
                    digest.update(block)
            out["sha1"] = digest.hexdigest()
        except OSError:
            out["sha1"] = None
    return out


def _text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


def _units(units: list[str]) -> dict:
    out = {u: {"enabled": "", "active": ""} for u in units}
    if not units:
        return out
    _, text = _run(["systemctl", "show", "--property=Id,UnitFileState,ActiveState", "--", *units])
    # One block per unit, in the order asked, separated by blank lines.
    for unit, block in zip(units, text.split("\n\n"), strict=False):
        fields = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        out[unit] = {"enabled": fields.get("UnitFileState", ""), "active": fields.get("ActiveState", "")}
    return out


def _packages(names: list[str]) -> dict:
    out: dict = dict.fromkeys(names)
    if not names:
        return out
    _, text = _run(["dpkg-query", "-W", "-f", "${Package}\t${Status}\t${Version}\n", *names])
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) == 3 and fields[1].endswith(" installed"):
            out[fields[0].split(":")[0]] = fields[2]
    return out


def _interfaces(names: list[str]) -> dict:
    out = {}
    for name in names:
        code, text = _run(["ip", "-j", "addr", "show", "dev", name])
        data = json.loads(text) if code == 0 and text.strip() else []
        if data:
            link = data[0]
            inet = [
                f"{a['local']}/{a['prefixlen']}"
                for a in link.get("addr_info", [])
                if a.get("family") == "inet"
            ]
            out[name] = {"mtu": link.get("mtu"), "inet": inet}
    return out


def _devices(paths: list[str]) -> dict:
    out = {}
    for path in paths:
        _, probe = _run(["blkid", "-p", "-o", "export", path])
        _, disc = _run(["lsblk", "--nodeps", "--noheadings", "--bytes", "--output", "DISC-MAX", path])
        fields = dict(line.split("=", 1) for line in probe.splitlines() if "=" in line)
        disc = disc.strip()
        out[path] = {"probe": fields, "discard_max_bytes": int(disc) if disc.isdigit() else 0}
    return out


def installed_distributions_argv(venv: str) -> list[str]:
    """The command that prints, as one JSON object, every distribution installed in the
    virtualenv ``venv`` with its version (importlib.metadata: a fraction of ``pip list``'s
    time, which imports pip)."""
    code = (
        "import importlib.metadata as m, json; "
        "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"
    )
    return [os.path.join(venv, "bin", "python"), "-c", code]


def _venvs(paths: list[str]) -> dict:
    out = {}
    for path in paths:
        rc, text = _run(installed_distributions_argv(path))
        out[path] = json.loads(text) if rc == 0 and text.strip() else {}
    return out


def _public_keys(paths: list[str]) -> dict:
    out: dict = {}
    for path in paths:
        try:
            with open(path) as fh:
                private = fh.read()
        except OSError:
            out[path] = None
            continue
        rc, public = _run(["wg", "pubkey"], stdin=private)
        out[path] = public.strip() if rc == 0 and public.strip() else None
    return out


def _wireguard(interfaces: list[str]) -> dict:
    out = {}
    for name in interfaces:
        rc, text = _run(["wg", "show", name, "allowed-ips"])
        out[name] = text if rc == 0 else None
    return out


def _mounts(points: list[str]) -> dict:
    out: dict = dict.fromkeys(points)
    text = _text("/proc/self/mounts") or ""
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 4:
            # fstab(5) escapes: a space in a path is \040.
            target = fields[1].replace("\\040", " ")
            if target in out:
                out[target] = {"source": fields[0], "fstype": fields[2], "options": fields[3]}
    return out


def snapshot(spec: dict) -> dict:
    """Everything ``spec`` asks about (see the module's docstring), read-only."""
    return {
        "paths": {p: path_state(p) for p in spec.get("paths", [])},
        "texts": {p: _text(p) for p in spec.get("texts", [])},
        "units": _units(list(spec.get("units", []))),
        "packages": _packages(list(spec.get("packages", []))),
        "interfaces": _interfaces(list(spec.get("interfaces", []))),
        "devices": _devices(list(spec.get("devices", []))),
        "venvs": _venvs(list(spec.get("venvs", []))),
        "public_keys": _public_keys(list(spec.get("public_keys", []))),
        "wireguard": _wireguard(list(spec.get("wireguard", []))),
        "mounts": _mounts(list(spec.get("mounts", []))),
        "modules": {m: os.path.isdir(os.path.join("/sys/module", m)) for m in spec.get("modules", [])},
        "users": {u: _uid(u) for u in spec.get("users", [])},
    }


def _uid(name: str) -> int | None:
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return None


if __name__ == "__main__":
    print(json.dumps(snapshot(json.load(sys.stdin)), sort_keys=True))
