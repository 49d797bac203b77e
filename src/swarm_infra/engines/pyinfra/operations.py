"""pyinfra operations the swarm deploys use where pyinfra has none built in.

Each is an ``@operation()`` in the manner of pyinfra's own (``pyinfra/operations/*.py``): a
generator that reads facts and yields commands only for what differs, so a converged node
yields none (no change) and ``--dry`` shows what a run would do. Node-side logic is the same
code the Ansible modules run (:mod:`swarm_infra.nodeside`), sent on stdin; secrets never
appear in a command line: WireGuard keys are made on the node and read from their files
there.

Notes for the operator (simulated GPUs, sysctls a container cannot set, a pending reboot)
go through ``host.noop`` (pyinfra prints them) and :func:`record_note`, which
``swarm converge --engine pyinfra`` prints as the Ansible engine prints its roles' reports.
"""

from __future__ import annotations

import fnmatch
import json
import shlex
from collections.abc import Iterator, Mapping
from io import StringIO
from pathlib import Path
from typing import Any
from weakref import WeakKeyDictionary

from pyinfra import host
from pyinfra.api import FunctionCommand, OperationError, QuoteString, StringCommand, operation

from ...nodeside import gpu as nodeside_gpu
from ...nodeside import tunables as nodeside_tunables
from ...nodeside.facts import requirements_missing
from ...resolve.files import wireguard_conf, wireguard_peer_keys, wireguard_peers, wireguard_running_differs
from .facts import (
    BOOTSTRAP,
    BlockDeviceProbe,
    DpkgSelections,
    InstalledDistributions,
    InterfaceAddresses,
    Mounted,
    NodesideCall,
    WireGuardAllowedIps,
    WireGuardPublicKey,
    nodeside_payload,
)

_NOTES: WeakKeyDictionary[Any, dict[str, list[str]]] = WeakKeyDictionary()
_PUBLIC_KEYS: WeakKeyDictionary[Any, dict[str, str]] = WeakKeyDictionary()


def changed(meta: Any) -> bool:
    """Whether an operation changed something (once it ran) or would (while preparing a
    check run, when nothing runs): what ``_if`` conditions and handlers-like operations ask."""
    return meta.did_change() if meta.is_complete() else bool(meta._maybe_is_change)


def record_note(text: str) -> None:
    """A note for the operator about the current host (printed by pyinfra and collected for
    ``swarm converge``'s progress lines)."""
    host.noop(text)
    _NOTES.setdefault(host.state, {}).setdefault(host.name, []).append(text)


def notes(state: Any) -> dict[str, list[str]]:
    """The notes recorded in ``state``'s run, by host name."""
    return _NOTES.get(state, {})


def public_keys(state: Any) -> dict[str, str]:
    """WireGuard public keys of the hosts in ``state``'s run, by host name, as
    :func:`wireguard_key` found or made them (the other hosts' keys come from each node's
    peers file, as in the Ansible role)."""
    return _PUBLIC_KEYS.setdefault(state, {})


def _source(module: Any) -> tuple[str, str]:
    path = Path(module.__file__)
    return path.read_text(), path.name


def _nodeside_command(module: Any, call: str, *args: Any, **kwargs: Any) -> StringCommand:
    code, file = _source(module)
    return StringCommand(
        "python3", "-c", QuoteString(BOOTSTRAP), _stdin=nodeside_payload(code, file, call, *args, **kwargs)
    )


def _nodeside_fact(module: Any, label: str, call: str, *args: Any, **kwargs: Any) -> Any:
    code, file = _source(module)
    return host.get_fact(
        NodesideCall, label=label, _stdin=nodeside_payload(code, file, call, *args, **kwargs)
    )


@operation()
def tunables(spec: Mapping[str, Any]) -> Iterator[StringCommand]:
    """Converge sysctls and sysfs values to exactly ``spec`` (one managed sysctl.d file, one
    tmpfiles.d file, live values where they differ, removed keys restored to their value
    before the project set them): the node-side code the Ansible module ``swarm_tunables``
    runs (:mod:`swarm_infra.nodeside.tunables`).

    + spec: ``{"sysctls": {key: text}, "sysfs": [...], "sysctl_conf": path, "tmpfiles_conf":
      path or None, "record": path, "label": why}``

    **Example:**

    .. code:: python

        tunables(name="Host tuning", spec={"sysctls": {"vm.swappiness": "10"}, ...})
    """
    plan = _nodeside_fact(nodeside_tunables, "tunables", "plan", dict(spec))
    for item in plan["not_applied"]:
        record_note(f"{item['key']}: not applied: {item['reason']}")
    if plan["files"] or plan["writes"] or plan["restores"] or plan["record_changed"]:
        for f in plan["files"]:
            host.noop(f"{f['path']}: {'removed' if f['after'] is None else 'written'}")
        yield _nodeside_command(nodeside_tunables, "converge", dict(spec))


@operation()
def gpu_settings(gpu: Mapping[str, Any]) -> Iterator[StringCommand]:
    """Converge the node's GPUs to NodeState.gpu (power management limit, clocks, persistence,
    compute, ECC and MIG modes) with the node-side GPU code the Ansible module ``swarm_gpu``
    runs (:mod:`swarm_infra.nodeside.gpu`): validate every setting, then apply; changes that
    wait for a reset or reboot are reported, never half-applied.

    + gpu: NodeState.gpu (backend, devices, limits)

    **Example:**

    .. code:: python

        gpu_settings(name="GPU settings", gpu=host.data.swarm["gpu"])
    """
    found = _nodeside_fact(nodeside_gpu, "gpu diff", "run_spec", dict(gpu), apply=False)
    if not found or found.get("error"):
        raise OperationError(f"swarm-gpu: {(found or {}).get('error', 'the node-side GPU code failed')}")
    label = "SIMULATED " if found["simulated"] else ""
    if found["reboot_required"]:
        pending = {m for modes in found["pending_reset"].values() for m in modes}
        keys = sorted({c["key"] for c in found["changes"] if c.get("note")} | pending)
        record_note(f"{label}reboot or GPU reset required for: {', '.join(keys)}")
    if found["changes"]:
        for c in found["changes"]:
            host.noop(f"{label}gpu {c['gpu']} {c['key']}: {c['before']} -> {c['after']}")
        yield _nodeside_command(nodeside_gpu, "run_spec", dict(gpu), apply=True)


@operation()
def wireguard_key(path: str) -> Iterator[StringCommand | FunctionCommand]:
    """Make the node's WireGuard private key where there is none (``wg genkey`` on the node,
    written under umask 077: mode 0600 from the start, never printed, never in argv), and
    remember its public key for the peers' configuration.

    + path: the private key file (NodeState.layout ``wireguard_key``)

    **Example:**

    .. code:: python

        wireguard_key(name="WireGuard key", path=files["wireguard_key"]["path"])
    """
    key = host.get_fact(WireGuardPublicKey, path=path)
    if key:
        public_keys(host.state)[host.name] = key
        return
    yield StringCommand("umask", "077", "&&", "wg", "genkey", ">", QuoteString(path))

    def read(state: Any, host: Any) -> bool:
        ok, out = host.run_shell_command(StringCommand("wg", "pubkey", "<", QuoteString(path)))
        if ok and out.stdout_lines:
            public_keys(state)[host.name] = out.stdout_lines[0].strip()
        return ok

    yield FunctionCommand(read, (), {})


def peer_keys(node: Mapping[str, Any], recorded_text: list[str] | None) -> dict[str, str]:
    """The keys of ``node``'s declared peers: those of the hosts in this run over those in
    the node's peers file (``recorded_text``: its lines, None when absent)."""
    try:
        recorded = json.loads("\n".join(recorded_text)) if recorded_text else {}
    except ValueError:
        recorded = {}
    fresh = {name: key for name, key in public_keys(host.state).items() if name != node["name"]}
    return wireguard_peer_keys(node, recorded if isinstance(recorded, dict) else {}, fresh)


@operation()
def wireguard_file(node: Mapping[str, Any], which: str, path: str) -> Iterator[Any]:
    """Write the mesh file ``which`` (``"peers"``: the peers' public keys; ``"conf"``: the
    wg-quick configuration) of ``node`` to ``path``, with the keys of its declared peers
    known now: the hosts' in this run (:func:`wireguard_key`) over those recorded on the
    node. Computed when the operation runs, after every host made its key.

    **Example:**

    .. code:: python

        conf = wireguard_file(name="wg-quick configuration", node=node, which="conf",
                              path=files["wireguard_conf"]["path"])
    """
    from pyinfra.facts.files import FileContents
    from pyinfra.operations import files

    layout = node["layout"]["files"]
    keys = peer_keys(node, host.get_fact(FileContents, path=layout["wireguard_peers"]["path"]))
    text = wireguard_peers(node, keys) if which == "peers" else wireguard_conf(node, keys)
    f = layout["wireguard_peers" if which == "peers" else "wireguard_conf"]
    yield from files.put._inner(
        src=StringIO(text), dest=path, user=f["owner"], group=f["group"], mode=f["mode"]
    )


@operation()
def wireguard_sync(
    node: Mapping[str, Any], when_config_changed: Any, key_path: str, unit: str
) -> Iterator[StringCommand]:
    """Apply the configuration to the running interface with ``wg syncconf`` when it changed
    in this run (``when_config_changed``: that operation) or the running peers differ from
    it (``wg set`` at runtime, a drifted node): only what differs changes, so tunnels stay
    up. The stripped configuration has no private key (it is never in the file), so the key
    is spliced in on the node by awk reading the key file itself: it travels only through
    pipes, never a command line or the environment.

    **Example:**

    .. code:: python

        wireguard_sync(name="Sync peers", node=node, when_config_changed=conf,
                       key_path=files["wireguard_key"]["path"], unit="wg-quick@wg0")
    """
    from pyinfra.facts.files import FileContents

    interface = node["mesh"]["interface"]
    running = host.get_fact(WireGuardAllowedIps, interface=interface)
    if running is None:
        return  # not up: wg-quick reads the file when it starts
    if not changed(when_config_changed):
        keys = peer_keys(
            node, host.get_fact(FileContents, path=node["layout"]["files"]["wireguard_peers"]["path"])
        )
        if not wireguard_running_differs(node, keys, running):
            return
        host.noop(f"running peers differ from {interface}.conf: syncing")
    script = (
        "set -o pipefail; "
        f"if systemctl is-active --quiet {shlex.quote(unit)}; then "
        f"wg syncconf {shlex.quote(interface)} <(wg-quick strip {shlex.quote(interface)} | "
        f"awk -v keyfile={shlex.quote(key_path)} "
        "'{ print } /^\\[Interface\\]/ { getline key < keyfile; print \"PrivateKey = \" key }'); fi"
    )
    yield StringCommand("bash", "-c", QuoteString(script))


@operation()
def wireguard_mtu(mesh: Mapping[str, Any]) -> Iterator[StringCommand]:
    """Set the declared MTU on the running interface (``ip link set``: no tunnel drops).

    **Example:** ``wireguard_mtu(name="MTU", mesh=node["mesh"])``"""
    link = host.get_fact(InterfaceAddresses, interface=mesh["interface"])
    if link and link.get("mtu") != mesh["mtu"]:
        yield StringCommand(
            "ip", "link", "set", "dev", QuoteString(mesh["interface"]), "mtu", str(int(mesh["mtu"]))
        )


@operation()
def wireguard_address(mesh: Mapping[str, Any], unit: str) -> Iterator[StringCommand]:
    """Restart the interface when its running address is not the declared one (peers
    address this node by it; the one mesh change that drops its tunnels).

    **Example:** ``wireguard_address(name="Address", mesh=node["mesh"], unit="wg-quick@wg0")``"""
    link = host.get_fact(InterfaceAddresses, interface=mesh["interface"])
    if link and mesh["address"] not in link.get("inet", []):
        yield StringCommand("systemctl", "restart", QuoteString(unit))


@operation()
def dpkg_hold(packages: list[str]) -> Iterator[StringCommand]:
    """Hold ``packages`` (``dpkg --set-selections``), so that ``apt upgrade`` cannot move them;
    a package whose selection is already ``hold`` yields nothing.

    **Example:**

    .. code:: python

        dpkg_hold(name="Hold the driver", packages=["nvidia-driver"])
    """
    selections = host.get_fact(DpkgSelections)
    for name in packages:
        if selections.get(name) != "hold":
            yield StringCommand("echo", QuoteString(f"{name} hold"), "|", "dpkg", "--set-selections")


def nodeside_path(name: str) -> str:
    """The controller's path of the node-side file ``name`` (``gpu``, ``tunables``): the
    file the Ansible module ships, uploaded as it is."""
    return {"gpu": nodeside_gpu.__file__, "tunables": nodeside_tunables.__file__}[name]


@operation()
def note_if(text: str) -> Iterator[FunctionCommand]:
    """Report ``text`` about the host when the operation runs (with ``_if``, only when an
    earlier operation changed something): e.g. a reboot the policy does not allow.

    **Example:** ``note_if(name="Pending reboot", text="reboot required", _if=install.did_change)``"""

    def report(state: Any, host: Any) -> bool:
        _NOTES.setdefault(state, {}).setdefault(host.name, []).append(text)
        return True

    host.noop(text)
    yield FunctionCommand(report, (), {})


@operation()
def apt_pinned(packages: list[str], version: str) -> Iterator[StringCommand]:
    """Install ``packages`` at the Debian version glob ``version`` (``570.86.15-*``), up or
    down, through holds; installed versions matching the glob yield nothing (pyinfra's
    ``apt.packages`` compares versions exactly, and a pin is a glob).

    **Example:** ``apt_pinned(name="Driver", packages=["nvidia-driver"], version="570.86.15-*")``"""
    from pyinfra.facts.deb import DebPackages

    installed = host.get_fact(DebPackages)
    missing = [p for p in packages if not any(fnmatch.fnmatchcase(v, version) for v in installed.get(p, ()))]
    if missing:
        yield StringCommand(
            "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-q", "--no-install-recommends",
            "--allow-downgrades", "--allow-change-held-packages",
            *(QuoteString(f"{p}={version}") for p in packages),
        )  # fmt: skip


def storage_record_read(path: str) -> dict[str, Any]:
    """What scratch the project made on the node, from its record (``{}`` when none)."""
    from pyinfra.facts.files import FileContents

    try:
        data = json.loads("\n".join(host.get_fact(FileContents, path=path) or []) or "{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


@operation()
def refuse(problems: list[str]) -> Iterator[StringCommand]:
    """Fail the host with ``problems`` (one message each), when there are any: e.g. devices
    holding data swarm did not make, which must never be formatted.

    **Example:** ``refuse(name="Foreign devices", problems=["/dev/nvme0n1 holds ext4 ..."])``"""
    if problems:
        raise OperationError("; ".join(problems))
    return
    yield


@operation()
def md_raid0(array: str, devices: list[str]) -> Iterator[StringCommand]:
    """Create the md RAID 0 ``array`` over ``devices`` (mdadm), unless it exists.

    **Example:** ``md_raid0(name="Scratch array", array="/dev/md/scratch", devices=[...])``"""
    from pyinfra.facts.files import File

    if host.get_fact(File, path=array) is None:
        yield StringCommand(
            "mdadm", "--create", QuoteString(array), "--level=0", f"--raid-devices={len(devices)}",
            QuoteString(f"--name={array.rsplit('/', 1)[-1]}"), "--run", *(QuoteString(d) for d in devices),
        )  # fmt: skip


@operation()
def mdadm_conf(array: str, path: str) -> Iterator[StringCommand]:
    """Keep the array's ``ARRAY`` line (``mdadm --detail --brief``) in mdadm.conf(5), so it
    is assembled at boot; the line of the same array is replaced, others are kept.

    **Example:** ``mdadm_conf(name="Array at boot", array="/dev/md/scratch", path=conf)``"""
    from pyinfra.facts.files import FileContents

    from .facts import MdadmBrief

    line = host.get_fact(MdadmBrief, array=array)
    if not line:
        return
    lines = host.get_fact(FileContents, path=path) or []
    prefix = f"ARRAY {array} "
    if [ln for ln in lines if ln.startswith(prefix)] == [line]:
        return
    p, tmp = shlex.quote(path), shlex.quote(f"{path}.swarm-tmp")
    script = (
        f"mkdir -p {shlex.quote(str(Path(path).parent))} && touch {p} && "
        f"{{ grep -v {shlex.quote('^' + prefix)} {p}; echo {shlex.quote(line)}; }} > {tmp} && "
        f"chmod 0644 {tmp} && mv {tmp} {p}"
    )
    yield StringCommand("sh", "-c", QuoteString(script))


@operation()
def filesystem(device: str, fstype: str, label: str) -> Iterator[StringCommand]:
    """Make a ``fstype`` filesystem labelled ``label`` on ``device`` when it holds none (as
    ``community.general.filesystem``: an existing filesystem of that type is kept; another
    type fails, never reformatted).

    **Example:** ``filesystem(name="Scratch fs", device="/dev/nvme0n1", fstype="xfs", label="scratch")``"""
    found = host.get_fact(BlockDeviceProbe, device=device)
    kind = found.get("TYPE")
    if kind == fstype:
        return
    if kind:
        raise OperationError(f"{device} holds {kind}, not {fstype}; refusing to reformat it")
    yield StringCommand(f"mkfs.{fstype}", "-L", QuoteString(label), QuoteString(device))


def _fstab_script(source: str, path: str, fstype: str, options: list[str], present: bool) -> str:
    keep = f"awk -v p={shlex.quote(path)} '$1 ~ /^#/ || $2 != p' /etc/fstab > /etc/fstab.swarm-tmp"
    line = f"{source} {path} {fstype} {','.join(options) or 'defaults'} 0 0"
    add = f" && echo {shlex.quote(line)} >> /etc/fstab.swarm-tmp" if present else ""
    return keep + add + " && chmod 0644 /etc/fstab.swarm-tmp && mv /etc/fstab.swarm-tmp /etc/fstab"


def _fstab_lines(path: str) -> list[str]:
    from pyinfra.facts.files import FileContents

    lines = host.get_fact(FileContents, path="/etc/fstab") or []
    return [
        ln
        for ln in lines
        if not ln.lstrip().startswith("#") and len(ln.split()) > 1 and ln.split()[1] == path
    ]


@operation()
def mount(source: str, path: str, fstype: str, options: list[str]) -> Iterator[StringCommand]:
    """Mount ``source`` at ``path`` and keep it in /etc/fstab, as ``ansible.posix.mount``
    with ``state: mounted`` does (the same fstab line, ``SOURCE PATH FSTYPE OPTIONS 0 0``):
    the mount point is made, a changed line remounts.

    **Example:**

    .. code:: python

        mount(name="Scratch", source="LABEL=scratch", path=p, fstype="xfs", options=["noatime"])
    """
    want = f"{source} {path} {fstype} {','.join(options) or 'defaults'} 0 0"
    line_changed = _fstab_lines(path) != [want]
    if line_changed:
        yield StringCommand("mkdir", "-p", QuoteString(path))
        yield StringCommand("sh", "-c", QuoteString(_fstab_script(source, path, fstype, options, True)))
    mounted = host.get_fact(Mounted, path=path)
    if not mounted:
        yield StringCommand("mount", QuoteString(path))
    elif line_changed:
        yield StringCommand(
            "mount", "-o", QuoteString(f"remount,{','.join(options) or 'defaults'}"), QuoteString(path)
        )


@operation()
def unmount(path: str) -> Iterator[StringCommand]:
    """Unmount ``path``, drop its /etc/fstab line and remove the (empty) mount point, as
    ``ansible.posix.mount`` with ``state: absent`` does; data on the device stays.

    **Example:** ``unmount(name="Scratch no longer declared", path="/old-scratch")``"""
    from pyinfra.facts.files import Directory

    if host.get_fact(Mounted, path=path):
        yield StringCommand("umount", QuoteString(path))
    if _fstab_lines(path):
        yield StringCommand("sh", "-c", QuoteString(_fstab_script("", path, "", [], False)))
    if host.get_fact(Directory, path=path):
        yield StringCommand("rmdir", QuoteString(path))


@operation()
def pip_requirements(
    venv: str, requirements: list[str], index_url: str, trusted_host: str
) -> Iterator[StringCommand]:
    """Make the virtualenv ``venv`` (``python3 -m venv``) and install ``requirements`` in it
    from the package index ``index_url``, when a package is missing or not at its pinned
    version (``name==version``; :func:`swarm_infra.nodeside.facts.requirements_missing`,
    the Ansible role's test too).

    **Example:**

    .. code:: python

        pip_requirements(name="Ray", venv="/usr/local/lib/swarm/ray-venv",
                         requirements=["ray[default]==2.60.0"], index_url="http://mirror/simple/",
                         trusted_host="mirror")
    """
    installed = host.get_fact(InstalledDistributions, venv=venv)
    if not installed:
        yield StringCommand("python3", "-m", "venv", QuoteString(venv))
    if requirements_missing(list(requirements), installed):
        yield StringCommand(
            QuoteString(f"{venv}/bin/pip"), "install", "--disable-pip-version-check",
            "--index-url", QuoteString(index_url),
            "--trusted-host", QuoteString(trusted_host), *(QuoteString(r) for r in requirements),
        )  # fmt: skip


@operation()
def apt_install(packages: list[str], cache_time_s: int = 3600) -> Iterator[StringCommand]:
    """Install the ``packages`` that are not installed (without recommends), refreshing apt's
    package lists first when they are older than ``cache_time_s`` (their update stamp, else
    the lists directory, as Ansible's ``apt`` with ``cache_valid_time`` reads it). Nothing
    runs when every package is installed, so a converged node reports no change.

    **Example:** ``apt_install(name="WireGuard tools", packages=["wireguard-tools"])``"""
    from pyinfra.facts.deb import DebPackages

    installed = host.get_fact(DebPackages)
    missing = [p for p in packages if p not in installed]
    if not missing:
        return
    fresh = (
        '-n "$(find /var/lib/apt/periodic/update-success-stamp /var/lib/apt/lists -maxdepth 0 '
        f"-newermt '-{int(cache_time_s)} seconds' 2>/dev/null)\""
    )
    yield StringCommand("sh", "-c", QuoteString(f"[ {fresh} ] || apt-get update -q"))
    yield StringCommand(
        "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-q", "--no-install-recommends",
        *(QuoteString(p) for p in missing),
    )  # fmt: skip
