"""pyinfra operations of the swarm deploys.

Each is an ``@operation()`` in the manner of pyinfra's own (``pyinfra/operations/*.py``): a
generator that reads facts and yields commands only for what differs, so a converged node
yields none (no change) and a check run (``--dry``) shows what a real one would do.

**One snapshot per node.** pyinfra's built-in operations read one fact per question (a
file's stat, its SHA-1, a unit's state), and each fact is an SSH round trip: 40 ms and more
to a node behind the lab's emulated WAN, far more to a real provider. These operations ask
one snapshot of the node instead (:mod:`swarm_infra.nodeside.snapshot`: every managed
path, unit, package, interface, device, mount and virtualenv, read in one round trip, by
the :class:`~.facts.NodesideCall` fact). Where something differs, they hand over to the
built-in operation (``files.put``, ``files.directory``, ``systemd.service``), which reads
its own facts, diffs files under ``--diff`` and yields the commands; any change drops the
snapshot, so the next operation reads the node again.

**Same code on the node as Ansible.** Host tuning and GPU settings run the node-side files
the Ansible modules run (:mod:`swarm_infra.nodeside.tunables`, :mod:`~swarm_infra.nodeside.
gpu`), sent on stdin. Secrets never appear in a command line: WireGuard keys are made on the
node and read from their files there.

Notes for the operator (simulated GPUs, sysctls a container cannot set, a pending reboot)
go through ``host.noop`` (pyinfra prints them) and :func:`record_note`, which ``swarm
converge --engine pyinfra`` prints as the Ansible engine prints its roles' reports.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import shlex
from collections.abc import Generator, Mapping
from io import StringIO
from pathlib import Path
from typing import Any, cast
from weakref import WeakKeyDictionary

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, OperationError, QuoteString, StringCommand, operation

from ...nodeside import gpu as nodeside_gpu
from ...nodeside import snapshot as nodeside_snapshot
from ...nodeside import tunables as nodeside_tunables
from ...nodeside.facts import requirements_missing
from ...resolve.files import layer_files, wireguard_peer_keys, wireguard_running_differs
from ...resolve.keys import key_change_problem, wireguard_key_problem
from ...resolve.layers import known_packages, read_back
from ...resolve.notes import gpu_reset_required, not_applied
from ...resolve.ray import token_command, token_problem
from ...resolve.types import NodeState
from ..keyrecord import KeyCheck
from .facts import BOOTSTRAP, DpkgSelections, MdadmBrief, NodesideCall, nodeside_payload

_NOTES: WeakKeyDictionary[Any, dict[str, list[str]]] = WeakKeyDictionary()
_PUBLIC_KEYS: WeakKeyDictionary[Any, dict[str, str]] = WeakKeyDictionary()
_KEY_CHECKS: WeakKeyDictionary[Any, KeyCheck] = WeakKeyDictionary()
# Per run: the Rollout and the swarm verify command (set by the runner), and each host's
# boot id before its reboot.
_RUNS: WeakKeyDictionary[Any, dict[str, Any]] = WeakKeyDictionary()
_BOOT_IDS: WeakKeyDictionary[Any, dict[str, str]] = WeakKeyDictionary()
_SNAPSHOTS: WeakKeyDictionary[Any, dict[str, dict[str, Any]]] = WeakKeyDictionary()


# -------------------------------------------------------------------------- helpers


def changed(meta: Any) -> bool:
    """Whether an operation changed something (once it ran) or would (while preparing a
    check run, when nothing runs): what ``_if`` conditions ask."""
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


def key_check(state: Any) -> KeyCheck:
    """The controller's key record and the accepted key changes for ``state``'s run (set by
    the runner; empty: every well-formed key is trusted)."""
    return _KEY_CHECKS.setdefault(state, KeyCheck())


def run_settings(state: Any = None) -> dict[str, Any]:
    """``state``'s run (default: the current host's): ``rollout`` (RolloutState; the
    defaults until the runner sets the fleet's) and ``verify_argv`` (the swarm verify
    command a rebooted node is verified with; empty: not verified, and said so)."""
    from ...resolve.rollout import rollout_state

    return _RUNS.setdefault(
        state if state is not None else host.state, {"rollout": rollout_state(None), "verify_argv": []}
    )


def _payload(module: Any, call: str, *args: Any, **kwargs: Any) -> str:
    path = Path(module.__file__)
    return nodeside_payload(path.read_text(), path.name, call, *args, **kwargs)


def _nodeside_command(module: Any, call: str, *args: Any, **kwargs: Any) -> StringCommand:
    return StringCommand(
        "python3", "-c", QuoteString(BOOTSTRAP), _stdin=_payload(module, call, *args, **kwargs)
    )


def _nodeside_fact(module: Any, label: str, call: str, *args: Any, **kwargs: Any) -> Any:
    return host.get_fact(NodesideCall, label=label, _stdin=_payload(module, call, *args, **kwargs))


def snapshot_spec(node: NodeState) -> dict[str, Any]:
    """What the snapshot of ``node`` reads: its layout's paths and units, the layers'
    packages, its mesh interface and key, scratch devices and mount, Ray's virtualenv, and
    the files whose text the deploys compare."""
    layout = node["layout"]
    files = layout["files"]
    mesh, storage, ray = node.get("mesh"), node.get("storage"), node.get("ray")
    scratch = storage["scratch"] if storage else None
    texts = list(dict.fromkeys(read_back()))  # the registry's read_back files, once each
    return {
        "paths": sorted(
            {f["path"] for f in files.values()}
            | ({scratch["array"]} if scratch and scratch["array"] else set())
        ),
        "texts": [files[t]["path"] for t in texts] + ["/etc/fstab"],
        "units": sorted(_unit_name(u) for u in layout["units"].values()),
        "packages": known_packages(node),
        "interfaces": [mesh["interface"]] if mesh else [],
        "devices": sorted(set(scratch["devices"]) | {scratch["target"]}) if scratch else [],
        "venvs": [files["ray_venv"]["path"]] if ray else [],
        "public_keys": [files["wireguard_key"]["path"]] if mesh else [],
        "wireguard": [mesh["interface"]] if mesh else [],
        "mounts": [scratch["mount_path"]] if scratch else [],
        "modules": ["wireguard"],
        "users": [ray["user"]] if ray else [],
    }


def snapshot() -> dict[str, Any]:
    """The current host's snapshot, read once and kept until an operation changes the node."""
    cache = _SNAPSHOTS.setdefault(host.state, {})
    if host.name not in cache:
        cache[host.name] = _nodeside_fact(
            nodeside_snapshot, "snapshot", "snapshot", snapshot_spec(host.data.swarm)
        )
    return cache[host.name]


def changing() -> None:
    """Drop the current host's snapshot: an operation is about to change the node."""
    _SNAPSHOTS.get(host.state, {}).pop(host.name, None)


def _unit_name(unit: str) -> str:
    return unit if "." in unit else f"{unit}.service"


def _lines(text: str | None) -> list[str]:
    return text.splitlines() if text else []


# ------------------------------------------------------------------ files and units


@operation()
def managed_file(path: str, text: str, owner: str, group: str, mode: str) -> Generator[Any, None, None]:
    """The file ``path`` holding exactly ``text``, with its owner, group and mode: nothing
    when the snapshot shows it so, else pyinfra's ``files.put`` (which diffs under
    ``--diff``).

    **Example:**

    .. code:: python

        managed_file(name="Ray unit", path=f["path"], text=unit_text, owner="root",
                     group="root", mode="0644")
    """
    from pyinfra.operations import files

    found = snapshot()["paths"].get(path)
    want = hashlib.sha1(text.encode()).hexdigest()
    same = found and found["type"] == "file" and found.get("sha1") == want
    if same and (found["owner"], found["group"], found["mode"]) == (owner, group, mode):
        return
    changing()
    if host.state.config.DIFF and not host.state.is_executing and not found:
        _diff_new_file(path, text)
    yield from files.put._inner(src=StringIO(text), dest=path, user=owner, group=group, mode=mode)


def _diff_new_file(path: str, text: str) -> None:
    """Log the diff of a file about to be created whose directory is missing too (a
    directory an earlier operation makes): ``files.put`` yields that directory's ``mkdir``
    before it logs its diff, and change detection (check mode) stops at the first command,
    so the diff would never show."""
    import posixpath

    from pyinfra import logger
    from pyinfra.facts.files import Directory
    from pyinfra.operations.util.files import generate_color_diff

    if host.get_fact(Directory, path=posixpath.dirname(path)):
        return  # files.put logs it before its first command
    host.log(f"Will create {path}", logger.info)
    for line in generate_color_diff([], text.splitlines(keepends=True)):
        logger.info("  %s", line)


@operation()
def managed_mode(path: str, owner: str, group: str, mode: str) -> Generator[StringCommand, None, None]:
    """An existing file's owner, group and mode (a file made on the node, such as a private
    key: its content is never read here). Nothing when it is absent.

    **Example:** ``managed_mode(name="Key mode", path=p, owner="root", group="root", mode="0600")``"""
    found = snapshot()["paths"].get(path)
    if not found or (found["owner"], found["group"], found["mode"]) == (owner, group, mode):
        return
    changing()
    yield StringCommand("chown", QuoteString(f"{owner}:{group}"), QuoteString(path))
    yield StringCommand("chmod", QuoteString(mode), QuoteString(path))


@operation()
def managed_directory(path: str, owner: str, group: str, mode: str) -> Generator[Any, None, None]:
    """The directory ``path`` with its owner, group and mode (else ``files.directory``).

    **Example:**

    .. code:: python

        managed_directory(name="Settings", path="/etc/x", owner="root", group="root", mode="0755")
    """
    from pyinfra.operations import files

    found = snapshot()["paths"].get(path)
    if (
        found
        and found["type"] == "directory"
        and (found["owner"], found["group"], found["mode"]) == (owner, group, mode)
    ):
        return
    changing()
    yield from files.directory._inner(path=path, user=owner, group=group, mode=mode)


@operation()
def absent_path(path: str) -> Generator[StringCommand, None, None]:
    """Nothing at ``path`` (a file, or a directory with what it holds).

    **Example:** ``absent_path(name="Old unit", path=files["ray_worker_unit"]["path"])``"""
    if snapshot()["paths"].get(path) is None:
        return
    changing()
    yield StringCommand("rm", "-rf", "--", QuoteString(path))


def unit_state(service: str) -> dict[str, bool]:
    """``{"exists", "enabled", "running"}`` of a systemd unit, from the snapshot."""
    state = snapshot()["units"].get(_unit_name(service)) or {"enabled": "", "active": ""}
    return {
        "exists": state["enabled"] not in ("", "not-found") or state["active"] not in ("", "inactive"),
        "enabled": state["enabled"] in ("enabled", "enabled-runtime", "static", "alias", "linked"),
        "running": state["active"] in ("active", "activating", "reloading"),
    }


@operation()
def unit(
    service: str,
    running: bool | None = None,
    enabled: bool | None = None,
    restarted: bool = False,
    daemon_reload: bool = False,
    reloaded: bool = False,
) -> Generator[Any, None, None]:
    """A systemd unit enabled or not, running or not, restarted or reloaded (when running):
    nothing when the snapshot shows it so, else pyinfra's ``systemd.service``
    (``daemon_reload`` first when asked).

    **Example:** ``unit(name="Start Ray", service="ray-head.service", running=True, enabled=True)``"""
    from pyinfra.operations import systemd

    now = unit_state(service)
    if (
        not restarted
        and not reloaded
        and not daemon_reload
        and (running is None or running == now["running"])
        and (enabled is None or enabled == now["enabled"])
    ):
        return
    changing()
    yield from systemd.service._inner(
        service=_unit_name(service),
        running=running,
        enabled=enabled,
        restarted=restarted,
        reloaded=reloaded,
        daemon_reload=daemon_reload,
    )


@operation()
def note_if(text: str) -> Generator[FunctionCommand, None, None]:
    """Report ``text`` about the host when the operation runs (with ``_if``, only when an
    earlier operation changed something): e.g. a reboot the policy does not allow.

    **Example:** ``note_if(name="Pending reboot", text="reboot required", _if=...)``"""

    def report(state: Any, host: Any) -> bool:
        _NOTES.setdefault(state, {}).setdefault(host.name, []).append(text)
        return True

    host.noop(text)
    yield FunctionCommand(report, (), {})


# --------------------------------------------------------------------------- packages


@operation()
def apt_install(packages: list[str], cache_time_s: int = 3600) -> Generator[StringCommand, None, None]:
    """Install the ``packages`` that are not installed (without recommends), refreshing apt's
    package lists first when they are older than ``cache_time_s`` (their update stamp, else
    the lists directory, as Ansible's ``apt`` with ``cache_valid_time`` reads them).
    Nothing runs when every package is installed, so a converged node reports no change.

    **Example:** ``apt_install(name="WireGuard tools", packages=["wireguard-tools"])``"""
    known = snapshot()["packages"]
    if any(p not in known for p in packages):
        from pyinfra.facts.deb import DebPackages

        known = {**known, **{p: "" for p in host.get_fact(DebPackages)}}
    missing = [p for p in packages if known.get(p) is None]
    if not missing:
        return
    changing()
    fresh = (
        '-n "$(find /var/lib/apt/periodic/update-success-stamp /var/lib/apt/lists -maxdepth 0 '
        f"-newermt '-{int(cache_time_s)} seconds' 2>/dev/null)\""
    )
    yield StringCommand("sh", "-c", QuoteString(f"[ {fresh} ] || apt-get update -q"))
    yield StringCommand(
        "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-q", "--no-install-recommends",
        *(QuoteString(p) for p in missing),
    )  # fmt: skip


@operation()
def apt_absent(packages: list[str]) -> Generator[StringCommand, None, None]:
    """Remove the ``packages`` that are installed (``apt-get remove``, their configuration
    kept, as Ansible's ``apt`` with ``state: absent``); nothing runs when none is.

    **Example:** ``apt_absent(name="No container toolkit", packages=["nvidia-container-toolkit"])``"""
    known = snapshot()["packages"]
    if any(p not in known for p in packages):
        from pyinfra.facts.deb import DebPackages

        known = {**known, **{p: "" for p in host.get_fact(DebPackages)}}
    present = [p for p in packages if known.get(p) is not None]
    if not present:
        return
    changing()
    yield StringCommand(
        "DEBIAN_FRONTEND=noninteractive", "apt-get", "remove", "-y", "-q", *(QuoteString(p) for p in present)
    )


@operation()
def apt_pinned(packages: list[str], version: str) -> Generator[StringCommand, None, None]:
    """Install ``packages`` at the Debian version glob ``version`` (``570.86.15-*``), up or
    down, through holds; installed versions matching the glob yield nothing (pyinfra's
    ``apt.packages`` compares versions exactly, and a pin is a glob).

    **Example:** ``apt_pinned(name="Driver", packages=["nvidia-driver"], version="570.86.15-*")``"""
    installed = snapshot()["packages"]
    if all(installed.get(p) and fnmatch.fnmatchcase(installed[p], version) for p in packages):
        return
    changing()
    yield StringCommand(
        "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-q", "--no-install-recommends",
        "--allow-downgrades", "--allow-change-held-packages",
        *(QuoteString(f"{p}={version}") for p in packages),
    )  # fmt: skip


@operation()
def dpkg_hold(packages: list[str]) -> Generator[StringCommand, None, None]:
    """Hold ``packages`` (``dpkg --set-selections``), so that ``apt upgrade`` cannot move them;
    a package whose selection is already ``hold`` yields nothing.

    **Example:** ``dpkg_hold(name="Hold the driver", packages=["nvidia-driver"])``"""
    selections = host.get_fact(DpkgSelections)
    for name in packages:
        if selections.get(name) != "hold":
            yield StringCommand("echo", QuoteString(f"{name} hold"), "|", "dpkg", "--set-selections")


@operation()
def pip_requirements(
    venv: str, requirements: list[str], lock: str, environment: Mapping[str, str]
) -> Generator[StringCommand, None, None]:
    """Make the virtualenv ``venv`` (``python3 -m venv``) and install the lock file ``lock``
    (a path on the node) in it with pip's ``environment`` (the index, hash-checking mode,
    wheels only, the index's CA: :func:`swarm_infra.resolve.ray.pip_environment`), when a
    pin of ``requirements`` (the lock's pins) is missing or not at its version
    (:func:`swarm_infra.nodeside.facts.requirements_missing`, the Ansible role's test too).

    **Example:**

    .. code:: python

        pip_requirements(name="Ray", venv=files["ray_venv"]["path"],
                         requirements=["ray[default]==2.60.0", ...], lock=files["ray_lock"]["path"],
                         environment={"PIP_INDEX_URL": "https://mirror/simple/", "PIP_REQUIRE_HASHES": "1"})
    """
    installed = snapshot()["venvs"].get(venv) or {}
    if not requirements_missing(list(requirements), json.dumps(installed)):
        return
    changing()
    if not installed:
        yield StringCommand("python3", "-m", "venv", QuoteString(venv))
    yield StringCommand(
        "env", *(QuoteString(f"{k}={v}") for k, v in sorted(environment.items())),
        QuoteString(f"{venv}/bin/pip"), "install", "-r", QuoteString(lock),
    )  # fmt: skip


# ------------------------------------------------------------------- host and GPU


@operation()
def tunables(spec: Mapping[str, Any]) -> Generator[StringCommand, None, None]:
    """Converge sysctls and sysfs values to exactly ``spec`` (one managed sysctl.d file, one
    tmpfiles.d file, live values where they differ, removed keys restored to their value
    before the project set them): the node-side code the Ansible module ``swarm_tunables``
    runs (:mod:`swarm_infra.nodeside.tunables`).

    + spec: ``{"sysctls": {key: text}, "sysfs": [...], "sysctl_conf": path, "tmpfiles_conf":
      path or None, "record": path, "label": why}`` (:func:`swarm_infra.resolve.files.
      tunables_spec`)

    **Example:**

    .. code:: python

        tunables(name="Host tuning", spec=tunables_spec(host.data.swarm, "host"))
    """
    plan = _nodeside_fact(nodeside_tunables, "tunables", "plan", dict(spec))
    for item in plan["not_applied"]:
        record_note(not_applied(item))
    if plan["files"] or plan["writes"] or plan["restores"] or plan["record_changed"]:
        for f in plan["files"]:
            host.noop(f"{f['path']}: {'removed' if f['after'] is None else 'written'}")
        changing()
        yield _nodeside_command(nodeside_tunables, "converge", dict(spec))


@operation()
def gpu_settings(gpu: Mapping[str, Any]) -> Generator[StringCommand, None, None]:
    """Converge the node's GPUs to NodeState.gpu (power management limit, clocks, persistence,
    compute, ECC and MIG modes) with the node-side GPU code the Ansible module ``swarm_gpu``
    runs (:mod:`swarm_infra.nodeside.gpu`): validate every setting, then apply; changes that
    wait for a reset or reboot are reported, never half-applied.

    **Example:** ``gpu_settings(name="GPU settings", gpu=host.data.swarm["gpu"])``"""
    found = _nodeside_fact(nodeside_gpu, "gpu diff", "run_spec", dict(gpu), apply=False)
    if not found or found.get("error"):
        raise OperationError(f"swarm-gpu: {(found or {}).get('error', 'the node-side GPU code failed')}")
    label = "SIMULATED " if found["simulated"] else ""
    if found["reboot_required"]:
        record_note(gpu_reset_required(found))
    if found["changes"]:
        for c in found["changes"]:
            host.noop(f"{label}gpu {c['gpu']} {c['key']}: {c['before']} -> {c['after']}")
        changing()
        yield _nodeside_command(nodeside_gpu, "run_spec", dict(gpu), apply=True)


# -------------------------------------------------------------------------------- ray


@operation()
def system_user(user: str, sysusers: str) -> Generator[StringCommand, None, None]:
    """Make the system user ``user`` from its sysusers.d(5) file ``sysusers`` where the node
    has no such user (``systemd-sysusers FILE``, as the Ansible role does).

    **Example:** ``system_user(name="Ray's user", user="swarm-ray", sysusers=path)``"""
    if snapshot()["users"].get(user) is not None:
        return
    changing()
    yield StringCommand("systemd-sysusers", QuoteString(sysusers))


@operation()
def ray_token(path: str, head: str) -> Generator[StringCommand, None, None]:
    """The Ray cluster's token on this node: on the head (``head`` is this host) made where
    there is none (:func:`~swarm_infra.resolve.ray.token_command`: umask 077, never
    printed, never in argv); on a worker, the head's token written where this node's differs
    (compared by digest; read from the head when this run has it, written through stdin
    under umask 077, never in a file on the controller). A worker without a token in a run
    without the head fails, naming the head.

    **Example:** ``ray_token(name="Ray's token", path=files["ray_auth_token"]["path"], head=ray["head"])``"""
    mine = snapshot()["paths"].get(path)
    if head == host.name:
        if mine is None:
            changing()
            yield StringCommand(token_command(path))
        return
    head_host = next((h for h in host.state.inventory if h.name == head), None)
    if head_host is None or head_host not in host.state.active_hosts:
        if mine is None:
            raise OperationError(
                f"{host.name}: no Ray token, and the head ({head}) is not in this run: "
                "converge it with the head"
            )
        host.noop(f"Ray token kept (the head {head} is not in this run)")
        return
    ok, out = head_host.run_shell_command(
        StringCommand("cat", QuoteString(path)), print_output=False, print_input=False
    )
    token = "\n".join(out.stdout_lines).strip() if ok else ""
    if not token:  # a check run on a fresh head: it has no token yet
        host.noop(f"Ray token: the head {head} has none yet; copied once it has")
        return
    text = token + "\n"
    problem = token_problem(text)  # the head's word: checked before this node writes it
    if problem:
        raise OperationError(f"{host.name}: the Ray token read from {head} is refused: {problem}")
    if mine is not None and mine.get("sha1") == hashlib.sha1(text.encode()).hexdigest():
        return
    changing()
    yield StringCommand("sh", "-c", QuoteString(f"umask 077 && cat > {shlex.quote(path)}"), _stdin=text)


@operation()
def ray_token_fetch(host_ip: str, port: int, path: str) -> Generator[StringCommand, None, None]:
    """A pull worker's copy of the Ray cluster's token, read from the head's token port
    (``host_ip``:``port``, the head's mesh address) by the node itself
    (:func:`swarm_infra.nodeside.raytoken.fetch`: a bounded read, the token checked, written
    mode 0600): first read without writing, to know whether the node's file differs, then
    written where it does. The token never reaches the controller; a head that cannot be
    read, or whose answer is not a token, fails the host with the reason.

    **Example:** ``ray_token_fetch(name="Ray's token", host_ip=src["host"], port=src["port"], path=p)``"""
    from ...nodeside import raytoken

    plan = _nodeside_fact(raytoken, "ray-token", "fetch", host_ip, port, path, check_mode=True)
    if not plan.get("changed"):
        return
    changing()
    yield _nodeside_command(raytoken, "fetch", host_ip, port, path)


# ------------------------------------------------------------------- reboots in batches


@operation(is_idempotent=False)
def ray_drain(argv: list[str], stdin: str) -> Generator[StringCommand, None, None]:
    """Drain the node out of its Ray cluster (:func:`swarm_infra.engines.reboot.ray_drain_call`
    gives ``argv`` and ``stdin``; pass its ``env`` as ``_env``): no new work is placed on
    it and its running work gets the Rollout's grace. The outcome is printed.

    **Example:** ``ray_drain(name="Drain", **call_without_env, _env=call["env"])``"""
    changing()
    yield StringCommand(*(QuoteString(a) for a in argv), _stdin=stdin)


@operation(is_idempotent=False)
def controller_command(
    argv: list[str], when_ok: list[str] | None = None
) -> Generator[FunctionCommand, None, None]:
    """Run ``argv`` on the controller (kubectl), failing the host when it fails; with
    ``when_ok``, only when that command succeeds first (``kubectl get node``: is it a node of
    the cluster), else say why nothing ran.

    **Example:** ``controller_command(name="Drain", argv=kubectl_drain_argv(ctx, n, 600))``"""
    import subprocess

    changing()

    def run(state: Any, host: Any) -> bool:
        try:
            member = None if when_ok is None else subprocess.run(when_ok, capture_output=True, check=False)
            if member is not None and member.returncode:
                what = " ".join(argv[2:4])
                _NOTES.setdefault(state, {}).setdefault(host.name, []).append(
                    f"not a Kubernetes node ({' '.join(when_ok or ())} failed): no {what}"
                )
                return True
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
        except OSError as exc:  # kubectl missing: a failure, never "not a node" (an undrained reboot)
            logger.error(f"{host.name}: {' '.join(argv)}: {exc}")
            return False
        if done.returncode:
            logger.error(f"{host.name}: {' '.join(argv)}: {done.stderr.strip()[-500:]}")
        return done.returncode == 0

    yield FunctionCommand(run, (), {})


def _boot_id(host: Any) -> str | None:
    from ..reboot import BOOT_ID

    ok, out = host.run_shell_command(StringCommand("cat", BOOT_ID))
    return "\n".join(out.stdout_lines).strip() if ok else None


@operation(is_idempotent=False)
def boot_id() -> Generator[FunctionCommand, None, None]:
    """Remember the node's boot id (/proc/sys/kernel/random/boot_id) before its reboot.

    **Example:** ``boot_id(name="Read the boot id")``"""

    def read(state: Any, host: Any) -> bool:
        found = _boot_id(host)
        if found:
            _BOOT_IDS.setdefault(state, {})[host.name] = found
        return bool(found)

    yield FunctionCommand(read, (), {})


@operation(is_idempotent=False)
def boot_id_changed() -> Generator[FunctionCommand, None, None]:
    """Fail the host unless its boot id differs from the one :func:`boot_id` read: the node
    really booted (pyinfra's ``server.reboot`` only compares uptimes).

    **Example:** ``boot_id_changed(name="The node booted")``"""

    def check(state: Any, host: Any) -> bool:
        before = _BOOT_IDS.get(state, {}).get(host.name)
        now = _boot_id(host)
        if not before or not now or now == before:
            logger.error(
                f"{host.name}: the boot id did not change ({before} -> {now}): the node did not reboot"
            )
            return False
        return True

    yield FunctionCommand(check, (), {})


@operation(is_idempotent=False)
def gpu_reapply(gpu: Mapping[str, Any]) -> Generator[StringCommand, None, None]:
    """Converge the node's GPU settings after its reboot (the node-side GPU code, reading
    the GPUs as they are now: the settings read before the reboot mean nothing any more).

    **Example:** ``gpu_reapply(name="GPU settings on the new driver", gpu=node["gpu"])``"""
    changing()
    yield _nodeside_command(nodeside_gpu, "run_spec", dict(gpu), apply=True)


@operation(is_idempotent=False)
def verify_node(node: str, junit_dir: str) -> Generator[FunctionCommand, None, None]:
    """``swarm verify`` of the node's drivers and GPU layers, on the controller (the run's
    ``verify_argv``, :func:`run_settings`); drift fails the host, so the Rollout stops
    before its next batch. Without a verify command, says that nothing was verified.

    **Example:** ``verify_node(name="Verify", node=host.name, junit_dir="/tmp")``"""
    import subprocess

    def run(state: Any, host: Any) -> bool:
        argv = list(run_settings(state)["verify_argv"])
        if not argv:
            _NOTES.setdefault(state, {}).setdefault(host.name, []).append(
                f"not verified: run through swarm converge, or run swarm verify --limit {node}"
            )
            return True
        argv += ["--limit", node, "--layer", "drivers", "--layer", "gpu",
                 "--junit-xml", f"{junit_dir}/verify-{node}.xml"]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode:
            logger.error(f"{node}: swarm verify after the reboot failed:\n{done.stdout[-2000:]}")
        return done.returncode == 0

    yield FunctionCommand(run, (), {})


# ------------------------------------------------------------------------------- mesh


@operation()
def wireguard_key(
    path: str, declared: str | None = None
) -> Generator[StringCommand | FunctionCommand, None, None]:
    """Make the node's WireGuard private key where there is none (``wg genkey`` on the node,
    written under umask 077: mode 0600 from the start, never printed, never in argv), and
    remember its public key for the peers' configuration. ``declared``: the key the fleet
    records for the node (NodeState ``mesh.public_key``); a node holding another fails.

    **Example:** ``wireguard_key(name="WireGuard key", path=files["wireguard_key"]["path"])``"""
    key = snapshot()["public_keys"].get(path)
    if key:
        _publish(host.state, host.name, key, declared)
        return
    changing()
    yield StringCommand("umask", "077", "&&", "wg", "genkey", ">", QuoteString(path))

    def read(state: Any, host: Any) -> bool:
        ok, out = host.run_shell_command(StringCommand("wg", "pubkey", "<", QuoteString(path)))
        if not ok:
            return False
        try:
            _publish(state, host.name, "\n".join(out.stdout_lines).rstrip(), declared)
        except OperationError as refused:
            logger.error(str(refused))  # the host fails here; its name and why are printed
            return False
        return True

    yield FunctionCommand(read, (), {})


def _publish(state: Any, name: str, reported: str, declared: str | None = None) -> None:
    """Keep the public key node ``name`` reported for its peers' files, once it is checked
    to be a WireGuard key (the node's root can make ``wg pubkey`` print anything) and to be
    the one the fleet records (``declared``), else the one the controller recorded or an
    accepted change (:func:`key_check`); else fail the host, naming it: it gets no peers and
    no peer's file changes because of it."""
    check = key_check(state)
    problem = wireguard_key_problem(reported) or key_change_problem(
        reported, check.recorded.get(name), name in check.accepted, declared
    )
    if problem:
        raise OperationError(f"{name}: WireGuard public key refused: {problem}")
    public_keys(state)[name] = reported


def peer_keys(node: Mapping[str, Any]) -> dict[str, str]:
    """The keys of ``node``'s declared peers: those of the hosts in this run over those in
    the node's peers file (read from the snapshot)."""
    text = snapshot()["texts"].get(node["layout"]["files"]["wireguard_peers"]["path"])
    try:
        recorded = json.loads(text) if text else {}
    except ValueError:
        recorded = {}
    fresh = {name: key for name, key in public_keys(host.state).items() if name != node["name"]}
    return wireguard_peer_keys(cast(NodeState, node), recorded if isinstance(recorded, dict) else {}, fresh)


@operation()
def wireguard_file(node: Mapping[str, Any], which: str) -> Generator[Any, None, None]:
    """Write the mesh file ``which`` (``"peers"``: the peers' public keys; ``"conf"``: the
    wg-quick configuration) of ``node``, with the keys of its declared peers known now: the
    hosts' in this run (:func:`wireguard_key`) over those recorded on the node. Computed
    when the operation runs, after every host made its key.

    **Example:** ``conf = wireguard_file(name="wg-quick configuration", node=node, which="conf")``"""
    path = node["layout"]["files"]["wireguard_peers" if which == "peers" else "wireguard_conf"]["path"]
    item = next(i for i in layer_files(cast(NodeState, node), "mesh", peer_keys(node)) if i["path"] == path)
    yield from managed_file._inner(
        path=path, text=item["content"], owner=item["owner"], group=item["group"], mode=item["mode"]
    )


@operation()
def wireguard_sync(node: Mapping[str, Any], when_config_changed: Any) -> Generator[StringCommand, None, None]:
    """Apply the configuration to the running interface with ``wg syncconf`` when it changed
    in this run (``when_config_changed``: that operation) or the running peers differ from
    it (``wg set`` at runtime, a drifted node): only what differs changes, so tunnels stay
    up. The stripped configuration has no private key (it is never in the file), so the key
    is spliced in on the node by awk reading the key file itself: it travels only through
    pipes, never a command line or the environment.

    **Example:** ``wireguard_sync(name="Sync peers", node=node, when_config_changed=conf)``"""
    interface = node["mesh"]["interface"]
    running = snapshot()["wireguard"].get(interface)
    if running is None:
        return  # not up: wg-quick reads the file when it starts
    if not changed(when_config_changed):
        if not wireguard_running_differs(cast(NodeState, node), peer_keys(node), running):
            return
        host.noop(f"running peers differ from {interface}.conf: syncing")
    layout = node["layout"]
    unit, key = layout["units"]["wireguard"], layout["files"]["wireguard_key"]["path"]
    script = (
        "set -o pipefail; "
        f"if systemctl is-active --quiet {shlex.quote(unit)}; then "
        f"wg syncconf {shlex.quote(interface)} <(wg-quick strip {shlex.quote(interface)} | "
        f"awk -v keyfile={shlex.quote(key)} "
        "'{ print } /^\\[Interface\\]/ { getline key < keyfile; print \"PrivateKey = \" key }'); fi"
    )
    changing()
    yield StringCommand("bash", "-c", QuoteString(script))


@operation()
def wireguard_mtu(mesh: Mapping[str, Any]) -> Generator[StringCommand, None, None]:
    """Set the declared MTU on the running interface (``ip link set``: no tunnel drops).

    **Example:** ``wireguard_mtu(name="MTU", mesh=node["mesh"])``"""
    link = snapshot()["interfaces"].get(mesh["interface"])
    if link and link.get("mtu") != mesh["mtu"]:
        changing()
        yield StringCommand(
            "ip", "link", "set", "dev", QuoteString(mesh["interface"]), "mtu", str(int(mesh["mtu"]))
        )


@operation()
def wireguard_address(mesh: Mapping[str, Any], unit: str) -> Generator[StringCommand, None, None]:
    """Restart the interface when its running address is not the declared one (peers
    address this node by it; the one mesh change that drops its tunnels).

    **Example:** ``wireguard_address(name="Address", mesh=node["mesh"], unit=units["wireguard"])``"""
    link = snapshot()["interfaces"].get(mesh["interface"])
    if link and mesh["address"] not in link.get("inet", []):
        changing()
        yield StringCommand("systemctl", "restart", QuoteString(unit))


# ---------------------------------------------------------------------------- storage


def storage_record() -> dict[str, Any]:
    """What scratch the project made on the node, from its record (``{}`` when none)."""
    text = snapshot()["texts"].get(host.data.swarm["layout"]["files"]["storage_record"]["path"])
    try:
        data = json.loads(text) if text else {}
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


@operation()
def refuse(problems: list[str]) -> Generator[StringCommand, None, None]:
    """Fail the host with ``problems`` (one message each), when there are any: e.g. devices
    holding data swarm did not make, which must never be formatted.

    **Example:** ``refuse(name="Foreign devices", problems=["/dev/nvme0n1 holds ext4 ..."])``"""
    if problems:
        raise OperationError("; ".join(problems))
    yield from ()


@operation()
def md_raid0(array: str, devices: list[str]) -> Generator[StringCommand, None, None]:
    """Create the md RAID 0 ``array`` over ``devices`` (mdadm), unless it exists.

    **Example:** ``md_raid0(name="Scratch array", array="/dev/md/scratch", devices=[...])``"""
    if snapshot()["paths"].get(array) is not None:
        return
    changing()
    yield StringCommand(
        "mdadm", "--create", QuoteString(array), "--level=0", f"--raid-devices={len(devices)}",
        QuoteString(f"--name={array.rsplit('/', 1)[-1]}"), "--run", *(QuoteString(d) for d in devices),
    )  # fmt: skip


@operation()
def mdadm_conf(array: str, path: str) -> Generator[StringCommand, None, None]:
    """Keep the array's ``ARRAY`` line (``mdadm --detail --brief``) in mdadm.conf(5), so it
    is assembled at boot; the line of the same array is replaced, others are kept.

    **Example:** ``mdadm_conf(name="Array at boot", array="/dev/md/scratch", path=conf)``"""
    line = host.get_fact(MdadmBrief, array=array)
    if not line:
        return
    prefix = f"ARRAY {array} "
    if [ln for ln in _lines(snapshot()["texts"].get(path)) if ln.startswith(prefix)] == [line]:
        return
    p, tmp = shlex.quote(path), shlex.quote(f"{path}.swarm-tmp")
    script = (
        f"mkdir -p {shlex.quote(str(Path(path).parent))} && touch {p} && "
        f"{{ grep -v {shlex.quote('^' + prefix)} {p}; echo {shlex.quote(line)}; }} > {tmp} && "
        f"chmod 0644 {tmp} && mv {tmp} {p}"
    )
    changing()
    yield StringCommand("sh", "-c", QuoteString(script))


@operation()
def filesystem(device: str, fstype: str, label: str) -> Generator[StringCommand, None, None]:
    """Make a ``fstype`` filesystem labelled ``label`` on ``device`` when it holds none (as
    ``community.general.filesystem``: an existing filesystem of that type is kept; another
    type fails, never reformatted).

    **Example:** ``filesystem(name="Scratch fs", device="/dev/nvme0n1", fstype="xfs", label="scratch")``"""
    probe = (snapshot()["devices"].get(device) or {}).get("probe", {})
    kind = probe.get("TYPE")
    if kind == fstype:
        return
    if kind:
        raise OperationError(f"{device} holds {kind}, not {fstype}; refusing to reformat it")
    changing()
    yield StringCommand(f"mkfs.{fstype}", "-L", QuoteString(label), QuoteString(device))


def _fstab_line(source: str, path: str, fstype: str, options: list[str]) -> str:
    # As ansible.posix.mount writes it (dump and passno 0).
    return f"{source} {path} {fstype} {','.join(options) or 'defaults'} 0 0"


def _fstab_mine(path: str) -> list[str]:
    lines = _lines(snapshot()["texts"].get("/etc/fstab"))
    return [
        ln
        for ln in lines
        if not ln.lstrip().startswith("#") and len(ln.split()) > 1 and ln.split()[1] == path
    ]


def _fstab_script(path: str, line: str | None) -> str:
    keep = f"awk -v p={shlex.quote(path)} '$1 ~ /^#/ || $2 != p' /etc/fstab > /etc/fstab.swarm-tmp"
    add = f" && echo {shlex.quote(line)} >> /etc/fstab.swarm-tmp" if line else ""
    return keep + add + " && chmod 0644 /etc/fstab.swarm-tmp && mv /etc/fstab.swarm-tmp /etc/fstab"


@operation()
def mount(source: str, path: str, fstype: str, options: list[str]) -> Generator[StringCommand, None, None]:
    """Mount ``source`` at ``path`` and keep it in /etc/fstab, as ``ansible.posix.mount``
    with ``state: mounted`` does (the same fstab line, ``SOURCE PATH FSTYPE OPTIONS 0 0``):
    the mount point is made, a changed line remounts.

    **Example:**

    .. code:: python

        mount(name="Scratch", source="LABEL=scratch", path=p, fstype="xfs", options=["noatime"])
    """
    line = _fstab_line(source, path, fstype, options)
    line_changed = _fstab_mine(path) != [line]
    mounted = snapshot()["mounts"].get(path)
    if not line_changed and mounted:
        return
    changing()
    # The mount point may be gone even when the line is in place (ansible.posix.mount makes
    # it whenever it is missing); the snapshot does not say, and mkdir -p is harmless.
    if line_changed or not mounted:
        yield StringCommand("mkdir", "-p", QuoteString(path))
    if line_changed:
        yield StringCommand("sh", "-c", QuoteString(_fstab_script(path, line)))
    if not mounted:
        yield StringCommand("mount", QuoteString(path))
    else:
        yield StringCommand(
            "mount", "-o", QuoteString(f"remount,{','.join(options) or 'defaults'}"), QuoteString(path)
        )


@operation()
def unmount(path: str) -> Generator[StringCommand, None, None]:
    """Unmount ``path``, drop its /etc/fstab line and remove the (empty) mount point, as
    ``ansible.posix.mount`` with ``state: absent`` does; data on the device stays.

    **Example:** ``unmount(name="Scratch no longer declared", path="/old-scratch")``

    Called only where the record of what the project made names a mount point no longer
    declared; every command is safe to repeat."""
    p = shlex.quote(path)
    changing()
    yield StringCommand("sh", "-c", QuoteString(f"! mountpoint -q {p} || umount {p}"))
    yield StringCommand("sh", "-c", QuoteString(_fstab_script(path, None)))
    yield StringCommand("sh", "-c", QuoteString(f"! test -d {p} || rmdir {p}"))
