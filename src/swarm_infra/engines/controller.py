"""The controller's own mesh interface, applied on the host that runs ``swarm``.

The fleet declares the controller (Mesh ``spec.controller``) and decides its interface
(:mod:`swarm_infra.resolve.controller`); this module applies it here: a kernel WireGuard
link where the kernel has the module, else a userspace one (``wireguard-go``, as the lab's
nodes run it), then ``wg setconf`` and the address, MTU and route with ``ip``; before the
link carries a packet, its filter (:func:`swarm_infra.resolve.meshfilter.controller_mesh_ruleset`:
a peer reaches only the replies to what the controller starts) with ``nft -f``.

The private key lives in one file on the controller, mode 0600 in a 0700 directory, made
by :func:`ensure_key` (``wg genkey``). It is never in an argument, the environment or Git:
``wg`` reads it on its standard input, and ``wg setconf`` reads the configuration with the
key spliced in from a pipe. The configuration without the key and the filter's nft script
are kept beside it (0600), so that a later run can show what changes (``--check``/``--diff``).

Default key: ``$SWARM_STATE_DIR/controller/wireguard.key`` (default state directory
``$XDG_STATE_HOME/swarm``, else ``~/.local/state/swarm``), one per controller whatever the
fleet: its public key is what the fleet records, or, where the fleet records none (a
controller made per machine: the lab's), what push mode writes into the nodes' peer lists
(:func:`own_public_key`). The public key is kept beside it in ``wireguard.key.pub``.
"""

from __future__ import annotations

import difflib
import os
import stat
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ControllerError as ControllerError
from ..nodeside.atomic import write_atomic
from ..resolve.controller import (
    ControllerState,
    controller_key_missing,
    controller_wg_conf,
    with_controller_key,
    with_private_key,
)
from ..resolve.keys import wireguard_key_problem
from ..resolve.meshfilter import TABLE, controller_mesh_ruleset
from ..resolve.types import DesiredState

Runner = Callable[[Sequence[str], str | None], subprocess.CompletedProcess[str]]


def run_command(argv: Sequence[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` (no shell), ``stdin`` on its standard input; output captured, not checked."""
    return subprocess.run(list(argv), input=stdin, capture_output=True, text=True, check=False)


def state_dir() -> Path:
    """Where the controller keeps its key and configuration (module doc)."""
    base = os.environ.get("SWARM_STATE_DIR") or os.path.join(
        os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state"), "swarm"
    )
    return Path(base) / "controller"


def default_key_path() -> Path:
    return state_dir() / "wireguard.key"


def _private_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)


def read_private_key(path: Path) -> str:
    """The private key in ``path``; refused (:class:`ControllerError`) when the file is
    missing, not a regular file, readable by group or others, or not one key."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        raise ControllerError(f"{path}: no key; make one with `swarm mesh controller-key`") from None
    if not stat.S_ISREG(st.st_mode):
        raise ControllerError(f"{path}: not a regular file")
    if st.st_mode & 0o077:
        raise ControllerError(f"{path}: mode {stat.S_IMODE(st.st_mode):04o}; a private key must be 0600")
    key = path.read_text().strip()
    if wireguard_key_problem(key):
        raise ControllerError(f"{path}: not a WireGuard key (wg genkey's output)")
    return key


def public_key(path: Path, runner: Runner = run_command) -> str:
    """The public key of the private key in ``path`` (``wg pubkey``, the key on its stdin)."""
    proc = runner(["wg", "pubkey"], read_private_key(path) + "\n")
    key = proc.stdout.strip()
    if proc.returncode != 0 or wireguard_key_problem(key):
        raise ControllerError(f"wg pubkey failed: {proc.stderr.strip() or key!r}")
    return key


def _pub_path(path: Path) -> Path:
    return path.with_name(path.name + ".pub")


def _keep_public(path: Path, key: str) -> str:
    pub = _pub_path(path)
    if not pub.exists() or pub.read_text().strip() != key:
        write_atomic(pub, key + "\n", 0o644)  # a public key is not secret
    return key


def own_public_key(path: Path | None = None, runner: Runner = run_command) -> str | None:
    """This controller's public key: the one kept beside its key file (default
    :func:`default_key_path`), else derived from the key (``wg pubkey``); None when it has no
    key file. Raises :class:`ControllerError` for a key file that :func:`read_private_key`
    refuses."""
    path = path or default_key_path()
    pub = _pub_path(path)
    try:
        if pub.is_file() and not pub.is_symlink():
            key = pub.read_text().strip()
            if not wireguard_key_problem(key):
                return key
        if not (path.exists() or path.is_symlink()):
            return None
    except OSError as exc:  # another user's 0700 state directory, a broken disk
        raise ControllerError(f"{pub}: {exc.strerror or exc}") from None
    return public_key(path, runner)


def with_own_key(state: DesiredState, runner: Runner = run_command) -> DesiredState:
    """``state`` with this controller's own public key (:func:`own_public_key`) in the nodes'
    peer lists where the fleet records none (``resolve.controller.with_controller_key``);
    ``state`` itself when it records one, or when this controller has no key (the peer then
    stays a comment: ``swarm converge`` refuses to run so, see cli/converge.py). Raises
    :class:`ControllerError` for a key file that cannot be used."""
    if not controller_key_missing(state):
        return state
    key = own_public_key(runner=runner)
    return state if key is None else with_controller_key(state, key)


def ensure_key(path: Path, runner: Runner = run_command) -> tuple[str, bool]:
    """(public key, made now) for the key in ``path``, made with ``wg genkey`` when there is
    none: the file is created 0600 (``O_EXCL``: never over another file), its directory 0700.
    The public key is (re)written beside it (``<path>.pub``, 0644: :func:`own_public_key`)."""
    if path.exists() or path.is_symlink():
        return _keep_public(path, public_key(path, runner)), False
    _private_dir(path.parent)
    proc = runner(["wg", "genkey"], None)
    key = proc.stdout.strip()
    if proc.returncode != 0 or wireguard_key_problem(key):
        raise ControllerError(f"wg genkey failed: {proc.stderr.strip()}")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(key + "\n")
    return _keep_public(path, public_key(path, runner)), True


@dataclass
class Outcome:
    """What :func:`up` did (or, in check mode, would do): ``steps`` as sentences, ``diff``
    of the configuration file (unified, empty when unchanged), ``changed``."""

    steps: list[str] = field(default_factory=list)
    diff: str = ""
    changed: bool = False


def conf_path(state: ControllerState) -> Path:
    return state_dir() / f"{state['interface']}.conf"


def filter_path(state: ControllerState) -> Path:
    return state_dir() / f"{state['interface']}.nft"


def apply_filter(state: ControllerState, runner: Runner = run_command) -> None:
    """Load the filter of the controller's mesh interface (table ``inet swarm``:
    :func:`~swarm_infra.resolve.meshfilter.controller_mesh_ruleset`) with ``nft -f``, the
    script on its standard input: one transaction that replaces the table whole, so running
    it again changes nothing and a table flushed by hand is restored. Raises
    :class:`ControllerError` when nft refuses it."""
    _must(runner, ["nft", "-f", "/dev/stdin"], controller_mesh_ruleset(state))


def remove_filter(runner: Runner = run_command) -> bool:
    """Delete table ``inet swarm`` (the mesh interface's filter); False when there was none."""
    if runner(["nft", "list", "table", "inet", TABLE], None).returncode != 0:
        return False
    _must(runner, ["nft", "delete", "table", "inet", TABLE])
    return True


def _diff(before: str, after: str, path: Path) -> str:
    """Unified diff of a kept file and what the fleet makes of it."""
    return "".join(
        difflib.unified_diff(before.splitlines(True), after.splitlines(True), str(path), f"{path} (fleet)")
    )


def _link_exists(interface: str, runner: Runner) -> bool:
    return runner(["ip", "link", "show", "dev", interface], None).returncode == 0


def _must(runner: Runner, argv: Sequence[str], stdin: str | None = None) -> None:
    proc = runner(argv, stdin)
    if proc.returncode != 0:
        raise ControllerError(f"{' '.join(argv)}: {proc.stderr.strip() or f'exit {proc.returncode}'}")


def up(
    state: ControllerState,
    key_path: Path,
    peer_keys: Mapping[str, str] | None = None,
    check: bool = False,
    runner: Runner = run_command,
) -> Outcome:
    """Bring the controller's interface to ``state``; ``check``: only say what would change.
    ``peer_keys``: the nodes' public keys (``resolve.controller.controller_peer_keys``;
    default the fleet's records alone).

    Refuses (:class:`ControllerError`) a key whose public key is not the one the fleet
    records (the nodes would not answer it); where the fleet records none, the key is this
    controller's own (the one push mode wrote on the nodes: :func:`own_public_key`). Steps:
    the link (``ip link add ... type wireguard``, else ``wireguard-go``), ``wg setconf``
    (the key spliced in through a pipe), ``ip address replace`` (the mesh prefix makes the
    route to the mesh CIDR), ``ip link set ... mtu ... up``. Idempotent: a running interface
    whose configuration changed gets ``wg syncconf`` (unchanged peers keep their sessions and
    the endpoints learnt from nodes behind NAT), one whose configuration did not change is
    left as it is. The filter (:func:`apply_filter`) is loaded first, on every run (the same
    table again: it restores one flushed by hand); ``diff`` includes its script's.
    """
    iface = state["interface"]
    have = public_key(key_path, runner)
    if state["public_key"] is None:
        # Push mode wrote this controller's own key (the default key's, own_public_key) into
        # the nodes' peer lists: another key would not be answered, and a NAT'd node would be
        # cut off. A stale .pub beside the default key is refused the same way.
        own = own_public_key(runner=runner)
        if have != own:
            raise ControllerError(
                f"{key_path} holds the key of {have}, but the fleet records no key for the controller "
                f"{state['name']!r}, so the nodes hold this controller's own ({own or 'none'}: "
                f"{default_key_path()}): use that key, or record the controller's key in the fleet"
            )
    elif have != state["public_key"]:
        raise ControllerError(
            f"{key_path} holds the key of {have}, but the fleet records {state['public_key']} for "
            f"the controller {state['name']!r} (Mesh spec.controller.public_key): record this "
            "controller's key in the fleet, or use the key the fleet records (--key)"
        )
    conf = controller_wg_conf(state, peer_keys)
    path = conf_path(state)
    before = path.read_text() if path.exists() else ""
    ruleset = controller_mesh_ruleset(state)
    rules_path = filter_path(state)
    rules_before = rules_path.read_text() if rules_path.exists() else ""
    out = Outcome()
    conf_diff, rules_diff = _diff(before, conf, path), _diff(rules_before, ruleset, rules_path)
    out.diff = conf_diff + rules_diff
    exists = _link_exists(iface, runner)
    if rules_diff or not exists:
        out.steps.append(
            f"nft -f: table inet {TABLE} drops what {iface}'s peers start (replies to the controller pass)"
        )
    if not exists:
        out.steps.append(f"create {iface} (kernel WireGuard, else wireguard-go)")
    if not exists:
        out.steps.append(f"wg setconf {iface} ({len(state['peers'])} peer(s))")
    elif conf_diff:
        out.steps.append(
            f"wg syncconf {iface} ({len(state['peers'])} peer(s); unchanged ones keep their sessions)"
        )
    out.steps.append(f"address {state['address']} (route to {state['cidr']}), mtu {state['mtu']}, up")
    out.changed = bool(out.diff) or not exists
    if check:
        return out
    _private_dir(path.parent)
    # The filter first: the interface never carries a peer's packet unfiltered (iifname
    # matches a link that does not exist yet).
    apply_filter(state, runner)
    write_atomic(rules_path, ruleset, 0o600)
    if not exists and runner(["ip", "link", "add", "dev", iface, "type", "wireguard"], None).returncode != 0:
        # No kernel module (the lab's kernel): the userspace implementation makes a TUN link.
        _must(runner, ["wireguard-go", iface])
    write_atomic(path, conf, 0o600)
    if not exists:
        _must(
            runner, ["wg", "setconf", iface, "/dev/stdin"], with_private_key(conf, read_private_key(key_path))
        )
    elif conf_diff:
        # syncconf, not setconf: setconf replaces every peer (WGDEVICE_REPLACE_PEERS), so the
        # sessions and the endpoints learnt from NAT'd nodes would go, and a node behind NAT
        # would not be reached until its own session expired (REJECT_AFTER_TIME, 180 s).
        _must(
            runner,
            ["wg", "syncconf", iface, "/dev/stdin"],
            with_private_key(conf, read_private_key(key_path)),
        )
    _must(runner, ["ip", "address", "replace", state["address"], "dev", iface])
    _must(runner, ["ip", "link", "set", "dev", iface, "mtu", str(int(state["mtu"])), "up"])
    return out


def down(interface: str, runner: Runner = run_command) -> bool:
    """Delete the controller's interface (a wireguard-go process exits with its link) and its
    filter (:func:`remove_filter`); False when there was no interface."""
    remove_filter(runner)
    if not _link_exists(interface, runner):
        return False
    _must(runner, ["ip", "link", "del", "dev", interface])
    return True
