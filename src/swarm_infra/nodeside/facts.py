"""Pure parsers of what nodes print: sysctl, sysctl.d and tmpfiles.d files, wg, ip.

Each takes a command's output or a file's text and returns plain data; none runs anything.
Verification's readers and the engines' fact gathering share them, so a node's state is
read one way. Standard library only, like the rest of ``nodeside``.
"""

from __future__ import annotations

import json
from typing import Any


def sysctl_fields(text: str) -> list[str]:
    """A sysctl value as its fields: ``sysctl -n`` separates multi-value keys with tabs,
    sysctl.d(5) files with spaces; compare these lists, never the strings."""
    return text.split()


def sysctl_conf(text: str) -> dict[str, list[str]]:
    """A sysctl.d(5) file as ``{key: fields}``; comments (``#``, ``;``) and blank lines
    skipped, a leading ``-`` (ignore errors) dropped from the key."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip().lstrip("-")] = sysctl_fields(value)
    return out


def tagged_lines(text: str) -> dict[str, list[str]]:
    """Lines of ``KEY<TAB>VALUE`` (what a batch of ``printf '%s\\t' KEY; sysctl -n KEY``
    prints) as ``{key: fields}``."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("\t")
        if sep:
            out[key] = sysctl_fields(value)
    return out


def tmpfiles_writes(text: str) -> dict[str, list[str]]:
    """The ``w`` lines of a tmpfiles.d(5) file as ``{path glob: fields of the argument}``."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        fields = line.split(None, 6)
        if len(fields) == 7 and fields[0] == "w":
            out[fields[1]] = fields[6].split()
    return out


def sysfs_choice(text: str) -> list[str]:
    """A sysfs setting's current value as fields. Files that list every choice mark the
    active one in brackets (transparent_hugepage/enabled: ``always [madvise] never``)."""
    chosen = [w.strip("[]") for w in text.split() if w.startswith("[")]
    return chosen or text.split()


def wg_dump(text: str) -> dict[str, dict[str, Any]]:
    """``wg show IFACE dump`` as ``{peer public key: {allowed_ips, endpoint,
    latest_handshake, rx_bytes, tx_bytes, persistent_keepalive_s}}``.

    The format, restated from wg(8) of wireguard-tools 1.0.20210914 (``show``, ``dump``):
    "the first [line] contains in order separated by tab: private-key, public-key,
    listen-port, fwmark. Subsequent lines are printed for each peer and contain in order
    separated by tab: public-key, preshared-key, endpoint, allowed-ips, latest-handshake,
    transfer-rx, transfer-tx, persistent-keepalive." Seen in real output (wireguard-go and
    wireguard-tools, tests/data/wg): an unset endpoint or allowed-ips is ``(none)``,
    allowed-ips are comma-separated CIDRs, latest-handshake is seconds since the epoch (0:
    never), transfer in bytes, persistent-keepalive seconds or ``off``.

    ``endpoint`` is None when unknown, ``allowed_ips`` a list of CIDRs,
    ``persistent_keepalive_s`` 0 when off. Lines with fewer than 5 fields are skipped; the
    counters are None when a line stops before them."""
    peers: dict[str, dict[str, Any]] = {}
    for line in text.splitlines()[1:]:
        f = line.split("\t")
        if len(f) < 5:
            continue
        number = [int(v) if v.isdigit() else None for v in (*f[5:8], "", "", "")[:3]]
        peers[f[0]] = {
            "endpoint": None if f[2] == "(none)" else f[2],
            "allowed_ips": [] if f[3] == "(none)" else f[3].split(","),
            "latest_handshake": int(f[4]),
            "rx_bytes": number[0],
            "tx_bytes": number[1],
            "persistent_keepalive_s": number[2] or 0,
        }
    return peers


def wg_dump_public_key(text: str) -> str | None:
    """The interface's own public key in ``wg show IFACE dump`` (:func:`wg_dump`'s format:
    the first line's second field), or None when the text holds no interface line."""
    first = text.split("\n", 1)[0].split("\t")
    return first[1] if len(first) >= 4 and first[1] else None


def ip_link(text: str) -> dict[str, Any]:
    """``ip -j addr show dev IFACE`` as ``{mtu, inet: ["a.b.c.d/len", ...]}``; an empty
    dict when the output holds no interface."""
    data = json.loads(text) if text.strip() else []
    if not data:
        return {}
    link = data[0]
    inet = [f"{a['local']}/{a['prefixlen']}" for a in link.get("addr_info", []) if a.get("family") == "inet"]
    return {"mtu": link.get("mtu"), "inet": inet}


def blkid_export(text: str) -> dict[str, str]:
    """``blkid -p -o export DEVICE`` (a low-level probe of the device itself) as a dict:
    TYPE, LABEL, UUID, PTTYPE, ...; empty when blkid found nothing (it exits 2)."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key] = value
    return out


def scratch_device_problem(device: str, probe: dict[str, str], scratch: dict[str, Any]) -> str | None:
    """Why ``device`` must not become scratch storage, or None when it is blank or holds
    what the project made for this scratch (its filesystem label, or, for RAID 0, an md
    member of the scratch array: mdadm names it HOST:NAME). ``probe``: :func:`blkid_export`;
    ``scratch``: NodeState.storage.scratch. A device holding anything else (another
    filesystem, a partition table, another array) is refused and named, never formatted."""
    if not probe:
        return None
    kind, label = probe.get("TYPE", ""), probe.get("LABEL", "")
    array = scratch.get("array")
    if array and kind == "linux_raid_member" and label.rsplit(":", 1)[-1] == array.rsplit("/", 1)[-1]:
        return None
    if not array and kind == scratch["filesystem"] and label == scratch["label"]:
        return None
    what = kind or (f"a {probe['PTTYPE']} partition table" if "PTTYPE" in probe else "data")
    named = f" labelled {label!r}" if label else ""
    return (
        f"{device} holds {what}{named}, which swarm did not make; refusing to format it "
        f"(if it is meant to be scratch, wipe it first: wipefs -a {device})"
    )


def _normalised(name: str) -> str:
    # PEP 503: runs of -, _ and . are one "-", case-insensitive.
    out: list[str]
    out, dash = [], False
    for ch in name.strip().lower():
        if ch in "-_.":
            dash = True
            continue
        if dash and out:
            out.append("-")
        dash = False
        out.append(ch)
    return "".join(out)


def requirements_missing(requirements: list[str], installed_json: str) -> list[str]:
    """The requirements (``name``, ``name[extras]==version``) that the installed
    distributions (``installed_json``: what ``snapshot.installed_distributions_argv`` prints;
    empty or invalid when there is no virtualenv) do not satisfy: a package absent, or not
    at its pinned version. Extras are not checked (pip lists the package alone)."""
    try:
        found = json.loads(installed_json) if installed_json.strip() else {}
    except ValueError:
        found = {}
    have = {_normalised(k): v for k, v in found.items()} if isinstance(found, dict) else {}
    missing = []
    for req in requirements:
        name, _, version = req.partition("==")
        key = _normalised(name.split("[", 1)[0])
        if key not in have or (version.strip() and have[key] != version.strip()):
            missing.append(req)
    return missing


def scratch_filesystem_made(probe: dict[str, str], scratch: dict[str, Any]) -> bool:
    """Whether a device's probe (:func:`blkid_export`) shows the scratch filesystem already
    made on it: the declared type with the declared label."""
    return probe.get("TYPE") == scratch["filesystem"] and probe.get("LABEL") == scratch["label"]
