"""SSH host keys are declared, reviewed state (issue #22).

The fleet declares a node's host keys (Node ``spec.ssh.host_keys``); they are checked to
their exact format; one function makes the known_hosts file of a fleet (or of the lab,
whose keys are made at ``swarm lab up``) and both engines check every node strictly: against
that file when its keys are known, else against the operator's own known_hosts, never
trusting a key on first use.

Real oracles: the keys are made by OpenSSH's ``ssh-keygen``, which also judges the malformed
ones (``ssh-keygen -l``) and reads the known_hosts file back (``ssh-keygen -F``); paramiko,
pyinfra's SSH library, reads it too. The end-to-end cases run the real ``ssh`` client, real
``ansible`` and pyinfra's own SSH connector against an SSH server (paramiko's) presenting a
host key; the review's flag is in ``test_review.py``.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shlex
import shutil
import socket
import stat
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paramiko
import pytest

from swarm_infra.engines.inventory import (
    InventoryHost,
    ansible_connection_vars,
    inventory_hosts,
    ssh_argv,
    ssh_option_args,
)
from swarm_infra.engines.pyinfra.inventory import api_inventory, ssh_data
from swarm_infra.lab.plan import lab_spec
from swarm_infra.lab.state import LabState, read_connections, ssh_command
from swarm_infra.resolve import desired_state, load_fleet
from swarm_infra.resolve.keys import (
    known_hosts_text,
    ssh_host_key_fingerprint,
    ssh_host_key_problem,
    strict_ssh_options,
)

from .conftest import ROOT, fleet_dirs
from .test_inventory_plugin import ansible

KEYGEN = shutil.which("ssh-keygen")
SSH = shutil.which("ssh")
pytestmark = pytest.mark.skipif(KEYGEN is None, reason="needs OpenSSH's ssh-keygen (openssh-client)")

# name -> ssh-keygen arguments: every type the fleet accepts, and an RSA key too short.
KEY_TYPES = {
    "ed25519": ["-t", "ed25519"],
    "ecdsa256": ["-t", "ecdsa", "-b", "256"],
    "ecdsa384": ["-t", "ecdsa", "-b", "384"],
    "ecdsa521": ["-t", "ecdsa", "-b", "521"],
    "rsa3072": ["-t", "rsa", "-b", "3072"],
    "rsa1024": ["-t", "rsa", "-b", "1024"],
    "other-ed25519": ["-t", "ed25519"],
}


@pytest.fixture(scope="module")
def key_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Host key pairs made by ssh-keygen, as sshd's are (the private part for the server)."""
    d = tmp_path_factory.mktemp("host-keys")
    for name, args in KEY_TYPES.items():
        subprocess.run([KEYGEN, "-q", *args, "-N", "", "-C", "root@node", "-f", str(d / name)], check=True)
    return d


@pytest.fixture(scope="module")
def keys(key_dir: Path) -> dict[str, str]:
    """Each key as the fleet declares it: the .pub line without its comment."""
    return {name: " ".join((key_dir / f"{name}.pub").read_text().split()[:2]) for name in KEY_TYPES}


def openssh_fingerprint(path: Path) -> str | None:
    """``SHA256:...`` of the first key in ``path`` as ``ssh-keygen -l`` prints it, or None
    when OpenSSH does not take the file for a public key."""
    proc = subprocess.run([KEYGEN, "-l", "-f", str(path)], capture_output=True, text=True)
    return proc.stdout.split()[1] if proc.returncode == 0 else None


# ------------------------------------------------------------------------ the format


def test_keys_openssh_makes_are_accepted_with_openssh_fingerprints(
    keys: dict[str, str], tmp_path: Path
) -> None:
    for name, key in keys.items():
        if name == "rsa1024":
            continue
        assert ssh_host_key_problem(key) is None, name
        (tmp_path / "k.pub").write_text(key + "\n")
        kind = key.split()[0]
        assert ssh_host_key_fingerprint(key) == f"{kind} {openssh_fingerprint(tmp_path / 'k.pub')}", name


EXTRA_FIELD = b"\0\0\0\4evil"  # one more SSH string after the key's own fields


def _data_cases(keys: dict[str, str]) -> dict[str, str]:
    """Lines of the right shape whose key data is broken: OpenSSH refuses each too."""
    kind, data = keys["ed25519"].split()
    blob = base64.b64decode(data)
    ec_kind, ec_data = keys["ecdsa256"].split()
    # An ecdsa-sha2-nistp256 blob is 104 bytes: its base64 ends in one "=" and the character
    # before it carries 2 unused bits; set them and the same bytes are spelled another way.
    last = ec_data[-2]
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    respelled = ec_data[:-2] + alphabet[alphabet.index(last) | 1] + "="
    return {
        "not base64": f"{kind} {data[:-1]}",
        "non-canonical base64": f"{ec_kind} {respelled}",
        "labelled ed25519, holds ecdsa": f"{kind} {ec_data}",
        "labelled nistp384, holds nistp256": f"ecdsa-sha2-nistp384 {ec_data}",
        "truncated": f"{kind} {base64.b64encode(blob[:-1]).decode()}",
        "data after the key": f"{kind} {base64.b64encode(blob + EXTRA_FIELD).decode()}",
        "no key type inside": f"{kind} {base64.b64encode(b'garbage!').decode()}",
    }


def _shape_cases(keys: dict[str, str]) -> dict[str, Any]:
    """Values that are not exactly '<type> <base64>': each would add something to the
    known_hosts line it became (a comment, a marker, options, another line)."""
    key = keys["ed25519"]
    kind, data = key.split()
    return {
        "comment": f"{key} root@evil",
        "cert-authority marker": f"@cert-authority * {key}",
        "revoked marker": f"@revoked * {key}",
        "options": f'from="10.0.0.1" {key}',
        "line break": f"{key}\n* {key}",
        "trailing newline": f"{key}\n",
        "two spaces": f"{kind}  {data}",
        "tab": f"{kind}\t{data}",
        "type only": kind,
        "empty": "",
        "not a string": 42,
    }


def test_keys_with_broken_data_are_refused_as_openssh_refuses_them(
    keys: dict[str, str], tmp_path: Path
) -> None:
    for case, key in _data_cases(keys).items():
        assert ssh_host_key_problem(key), case
        (tmp_path / "k.pub").write_text(key + "\n")
        assert openssh_fingerprint(tmp_path / "k.pub") is None, f"OpenSSH takes {case!r}: the case is wrong"


def test_keys_that_are_not_exactly_type_and_base64_are_refused(keys: dict[str, str]) -> None:
    for case, value in _shape_cases(keys).items():
        problem = ssh_host_key_problem(value)
        assert problem, case
        assert "\n" not in problem, case


def test_types_outside_the_allowlist_and_short_rsa_are_refused(keys: dict[str, str]) -> None:
    data = keys["ed25519"].split()[1]
    assert "not one of" in (ssh_host_key_problem(f"ssh-dss {data}") or "")
    assert ssh_host_key_problem(f"sk-ssh-ed25519@openssh.com {data}")  # not even the shape
    assert "1024 bits" in (ssh_host_key_problem(keys["rsa1024"]) or "")


# ----------------------------------------------------------------- the known_hosts file


def test_known_hosts_names_a_port_other_than_22_as_openssh_and_paramiko_look_it_up(
    keys: dict[str, str], tmp_path: Path
) -> None:
    targets = [
        ("10.1.0.5", 22, [keys["ed25519"], keys["ecdsa256"]]),
        ("10.1.0.6", 2222, [keys["rsa3072"]]),
        ("10.1.0.7", 22, []),
    ]
    text = known_hosts_text(targets)
    assert text == (
        f"10.1.0.5 {keys['ed25519']}\n10.1.0.5 {keys['ecdsa256']}\n[10.1.0.6]:2222 {keys['rsa3072']}\n"
    )
    assert known_hosts_text(targets) == text  # the same bytes every time: no salted hashes
    path = tmp_path / "known_hosts"
    path.write_text(text)

    def openssh_finds(name: str) -> list[str]:
        proc = subprocess.run([KEYGEN, "-F", name, "-f", str(path)], capture_output=True, text=True)
        return [line for line in proc.stdout.splitlines() if not line.startswith("#")]

    assert openssh_finds("10.1.0.5") == [f"10.1.0.5 {keys['ed25519']}", f"10.1.0.5 {keys['ecdsa256']}"]
    assert openssh_finds("[10.1.0.6]:2222") == [f"[10.1.0.6]:2222 {keys['rsa3072']}"]
    assert openssh_finds("10.1.0.6") == [] and openssh_finds("10.1.0.7") == []

    paramiko_keys = paramiko.HostKeys(str(path))  # what pyinfra's SSH client loads
    five = paramiko_keys.lookup("10.1.0.5")
    assert five is not None and sorted(five.keys()) == ["ecdsa-sha2-nistp256", "ssh-ed25519"]
    six = paramiko_keys.lookup("[10.1.0.6]:2222")
    assert six is not None and f"ssh-rsa {six['ssh-rsa'].get_base64()}" == keys["rsa3072"]
    assert paramiko_keys.lookup("10.1.0.6") is None


def test_known_hosts_refuses_a_key_that_is_not_one(keys: dict[str, str]) -> None:
    with pytest.raises(ValueError, match=r"\[10.1.0.6\]:2222"):
        known_hosts_text([("10.1.0.6", 2222, [f"{keys['ed25519']}\n@cert-authority * {keys['ed25519']}"])])


def _example() -> dict[str, Any]:
    return desired_state(load_fleet([str(p) for p in fleet_dirs("example")]))


def test_the_engines_get_the_known_hosts_made_from_the_fleets_declared_keys() -> None:
    state = _example()
    declared = {n: s["ssh"]["host_keys"] for n, s in state["nodes"].items() if s["ssh"]["host_keys"]}
    assert declared, "the example fleet declares host keys"
    hosts = inventory_hosts(state)
    files = {h.name: h.connection.known_hosts_file for h in hosts if h.name in declared}
    assert None not in files.values()
    # One file per host (issue #38): each holds that node's target and keys, nothing else.
    assert len(set(files.values())) == len(declared) > 1
    for name, path in files.items():
        assert path is not None
        ssh = state["nodes"][name]["ssh"]
        expected = known_hosts_text([(ssh["host"], ssh["port"], ssh["host_keys"])])
        assert Path(path).read_text() == expected
        assert expected == "".join(f"{ssh['host']} {k}\n" for k in declared[name])
        assert stat.S_IMODE(Path(path).stat().st_mode) == 0o644
        assert Path(path).parent == Path(os.environ["SWARM_KNOWN_HOSTS_DIR"])  # not in the repository
    assert all(h.connection.known_hosts_file is None for h in hosts if h.name not in declared)
    # Made again from the fleet on each run: a file changed since is written back.
    name, path = next(iter(files.items()))
    assert path is not None
    expected = Path(path).read_text()
    Path(path).write_text(expected + "10.10.0.99 " + declared[name][0] + "\n")
    again = inventory_hosts(state)
    assert {h.name: h.connection.known_hosts_file for h in again if h.name in declared} == files
    assert Path(path).read_text() == expected


def _o_values(argv: list[str]) -> list[str]:
    """The value of each ``-o`` in an ssh command line."""
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "-o"]


def _check_strict(host: InventoryHost) -> None:
    """Both engines' settings for ``host`` (and ``ssh_argv``'s, for metrics) check its host
    key strictly, against the fleet's known_hosts exactly when its keys are known."""
    conn = host.connection
    known = conn.known_hosts_file
    assert (known is not None) == bool(conn.host_keys), host.name
    ansible_vars = ansible_connection_vars(conn)
    options = _o_values(shlex.split(ansible_vars["ansible_ssh_common_args"]))
    assert [o for o in options if o.startswith("StrictHostKeyChecking")] == ["StrictHostKeyChecking=yes"]
    assert ansible_vars["ansible_ssh_host_key_checking"] is True
    files = [o for o in options if o.startswith(("UserKnownHostsFile", "GlobalKnownHostsFile"))]
    assert files == ([f"UserKnownHostsFile={known}", "GlobalKnownHostsFile=/dev/null"] if known else [])
    data = ssh_data(conn)
    assert data["ssh_strict_host_key_checking"] == "yes"
    assert data.get("ssh_known_hosts_file") == known
    assert _o_values(ssh_argv(conn, "true"))[-len(options) :] == options


@pytest.mark.parametrize("fleet", ["example", "lab"])
def test_both_engines_check_every_node_strictly(fleet: str) -> None:
    state = desired_state(load_fleet([str(p) for p in fleet_dirs(fleet)]))
    for host in inventory_hosts(state):
        _check_strict(host)


def test_no_connection_setting_trusts_a_key_on_first_use_or_skips_the_check() -> None:
    """Grep-level: nothing shipped asks for accept-new (TOFU) or turns checking off."""
    loose = re.compile(
        r"StrictHostKeyChecking\s*[= ]\s*[\"']?(no|off|accept-new)\b"
        r"|strict_host_key_checking\W{1,4}(no|off|accept-new)\b"
        r"|[\"']accept-new[\"']"
        r"|host_key_checking\s*[=:]\s*(false|no|0)\b",
        re.I,
    )
    roots = ["src", "plugins", "deploys", "inventory", "roles", "playbooks", "stacks", "jobs", "benchmarks"]
    files = [ROOT / "ansible.cfg", ROOT / "tests" / "verify" / "conftest.py", ROOT / "tests" / "labkit.py"]
    for r in roots:
        files += [
            p
            for p in (ROOT / r).rglob("*")
            if p.is_file() and p.suffix in (".py", ".yml", ".yaml", ".cfg", ".j2", ".sh")
        ]
    hits = [
        f"{p.relative_to(ROOT)}: {m.group(0)}"
        for p in files
        for m in loose.finditer(p.read_text(errors="replace"))
    ]
    assert not hits
    assert "host_key_checking = True" in (ROOT / "ansible.cfg").read_text()


# -------------------------------------------------------------------------------- the lab


def test_the_lab_hands_the_engines_its_host_keys_and_known_hosts_where_they_connect(
    key_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lab's nodes get host keys at `swarm lab up`, which the lab fleet in Git cannot
    declare: the lab's connection file carries them (the lab's overlay of spec.ssh), the
    engines make their known_hosts from them with the fleet's function, and the lab's own
    ssh/known_hosts is made by it too. Each names a node at the address its users connect
    to: the lab's, the underlay address (the lab's own checks); the engines', the mesh
    address for a node reached over the controller's mesh (the lab fleet's Mesh declares
    the controller, ``ssh_over_mesh: nat``: lab-gpu-2 behind lab-b's NAT), so that SSH checks
    that node's key where it connects, and the underlay address for the others."""
    monkeypatch.setenv("SWARM_LAB_DIR", str(tmp_path / "lab"))
    analysis = load_fleet([str(p) for p in fleet_dirs("lab")])
    spec = lab_spec(analysis)
    lines = {}
    for name in spec.nodes:  # as lab/node.py prepare() makes a node's key
        subprocess.run(
            [KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", f"root@{name}", "-f", str(tmp_path / name)],
            check=True,
        )
        lines[name] = (tmp_path / f"{name}.pub").read_text().strip()
    nodes = {n: {**node.as_dict(), "pid": None, "host_key": lines[n]} for n, node in spec.nodes.items()}
    first = sorted(nodes)[0]
    nodes[first]["ssh_port"] = 2222  # a node whose sshd listens elsewhere: [host]:port
    LabState({}, nodes, {}).save()

    conns = read_connections()
    assert {n: c["host_keys"] for n, c in conns.items()} == {
        n: [" ".join(lines[n].split()[:2])] for n in nodes
    }
    hosts = inventory_hosts(desired_state(analysis), conns)
    lab_known = Path(conns[first]["known_hosts_file"])
    engines_known = {h.name: h.connection.known_hosts_file for h in hosts}
    assert None not in engines_known.values() and len(set(engines_known.values())) == len(hosts)
    # Where the engines connect, from the declaration: the NAT'd nodes at their mesh address.
    mesh = analysis.fleet.mesh
    assert mesh is not None and mesh.controller is not None and mesh.controller.ssh_over_mesh == "nat"
    over_mesh = {n for n, node in analysis.fleet.nodes.items() if node.nat}
    assert over_mesh == {"lab-gpu-2"}
    target = {n: str(analysis.addresses[n]) if n in over_mesh else c["host"] for n, c in conns.items()}
    assert {h.name: h.connection.host for h in hosts} == target
    for h in hosts:  # each host's own file: its target and its keys only
        assert Path(str(engines_known[h.name])).read_text() == known_hosts_text(
            [(target[h.name], conns[h.name]["port"], conns[h.name]["host_keys"])]
        )
    assert lab_known.read_text() == known_hosts_text(
        (c["host"], c["port"], c["host_keys"]) for c in conns.values()
    )
    address = nodes[first]["address"].split("/")[0]
    assert f"[{address}]:2222 {conns[first]['host_keys'][0]}\n" in lab_known.read_text()
    for host in hosts:
        assert host.connection.host_keys == tuple(conns[host.name]["host_keys"])
        _check_strict(host)
    lab_options = strict_ssh_options(str(lab_known))
    assert _o_values(ssh_command(conns[first], ["true"]))[: len(lab_options)] == lab_options


# -------------------------------------------------- end to end: real clients, one server


class _RefuseEveryone(paramiko.ServerInterface):
    """Any login fails: a client that gets as far as authenticating accepted the host key."""

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        return paramiko.AUTH_FAILED


@contextlib.contextmanager
def ssh_server(host_key: paramiko.PKey) -> Iterator[int]:
    """An SSH server on 127.0.0.1 (a free port, never 22) presenting ``host_key``."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    transports: list[paramiko.Transport] = []

    def serve() -> None:
        while True:
            try:
                client, _ = sock.accept()
            except OSError:
                return
            t = paramiko.Transport(client)
            t.add_server_key(host_key)
            transports.append(t)
            with contextlib.suppress(Exception):  # a client that gives up mid-handshake
                t.start_server(server=_RefuseEveryone())

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()
        for t in transports:
            t.close()


def _lab_node_at(port: int, host_keys: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The lab fleet's state, and a connection overlay that puts lab-head-1 at the server."""
    state = desired_state(load_fleet([str(p) for p in fleet_dirs("lab")]))
    return state, {"lab-head-1": {"host": "127.0.0.1", "port": port, "user": "root", "host_keys": host_keys}}


def _pyinfra_connect(host: InventoryHost) -> str:
    from pyinfra.api import Config, State

    inventory = api_inventory([host])
    State(inventory, Config())
    try:
        inventory.get_host(host.name).connect(show_errors=False, raise_exceptions=True)
    except Exception as exc:
        return str(exc)
    return "connected"


def operator_ssh_config(tmp: Path) -> tuple[Path, Path]:
    """An ssh_config standing for the operator's own, and the known_hosts it names (empty):
    whatever ssh would read or write there stays in the test, even under a regression that
    trusts keys on first use (OpenSSH takes ``~`` from the password database, not $HOME).
    Options on ssh's command line, the engines' among them, outrank it."""
    known, config = tmp / "operator_known_hosts", tmp / "ssh_config"
    config.write_text(f"Host *\n  UserKnownHostsFile {known}\n  GlobalKnownHostsFile /dev/null\n")
    return config, known


CASES = ("declared", "other", "none")  # the server's key declared, another key, no key


@pytest.mark.skipif(SSH is None, reason="needs OpenSSH's ssh")
def test_ssh_and_pyinfra_accept_the_declared_key_and_refuse_any_other(
    key_dir: Path, keys: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # paramiko's ~/.ssh/known_hosts and config: none
    config, operator_known = operator_ssh_config(tmp_path)
    declared = {"declared": [keys["ed25519"]], "other": [keys["other-ed25519"]], "none": []}
    host_key = paramiko.Ed25519Key.from_private_key_file(str(key_dir / "ed25519"))
    ssh, pyinfra = {}, {}
    with ssh_server(host_key) as port:
        for case in CASES:
            state, overlay = _lab_node_at(port, declared[case])
            (host,) = [h for h in inventory_hosts(state, overlay) if h.name == "lab-head-1"]
            argv = ssh_argv(host.connection, "true")
            argv[1:1] = ["-F", str(config)]
            ssh[case] = subprocess.run(argv, capture_output=True, text=True, timeout=60).stderr
            pyinfra[case] = _pyinfra_connect(host)
    assert "Permission denied" in ssh["declared"], ssh["declared"]  # past the host key
    assert "No authentication methods available" in pyinfra["declared"], pyinfra["declared"]
    for case in ("other", "none"):
        assert "Host key verification failed" in ssh[case] and "Permission denied" not in ssh[case], ssh
    assert "Host key for 127.0.0.1 does not match" in pyinfra["other"], pyinfra["other"]
    # No declared key: the operator's known_hosts decides, and nothing is trusted on first use.
    assert "StrictPolicy: No host key" in pyinfra["none"], pyinfra["none"]
    assert not operator_known.exists() and not (tmp_path / ".ssh" / "known_hosts").exists()


@pytest.mark.skipif(SSH is None, reason="needs OpenSSH's ssh")
def test_one_nodes_key_never_authenticates_another_node_at_the_same_target(
    key_dir: Path, keys: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue #38: two nodes whose targets meet (here both at one server, as a newcomer that
    declares the head's address would be) with different records: the server proves it holds
    A's key, so A's settings get past the host key, and B's never do, in ssh and pyinfra
    alike. ``ssh -G`` (the options ssh takes) shows B's settings name a file holding B's key
    only (``ssh-keygen -F``)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    config, operator_known = operator_ssh_config(tmp_path)
    host_key = paramiko.Ed25519Key.from_private_key_file(str(key_dir / "ed25519"))
    state = desired_state(load_fleet([str(p) for p in fleet_dirs("lab")]))
    record = {"lab-head-1": [keys["ed25519"]], "lab-gpu-1": [keys["other-ed25519"]]}
    with ssh_server(host_key) as port:
        overlay = {
            n: {"host": "127.0.0.1", "port": port, "user": "root", "host_keys": ks}
            for n, ks in record.items()
        }
        hosts = {h.name: h for h in inventory_hosts(state, overlay) if h.name in record}
        ssh, pyinfra, files = {}, {}, {}
        for name, host in hosts.items():
            argv = ssh_argv(host.connection, "true")
            argv[1:1] = ["-F", str(config)]
            ssh[name] = subprocess.run(argv, capture_output=True, text=True, timeout=60).stderr
            pyinfra[name] = _pyinfra_connect(host)
            effective = subprocess.run(
                [
                    SSH,
                    "-G",
                    "-F",
                    str(config),
                    *ssh_option_args(host.connection),
                    "-p",
                    str(port),
                    "127.0.0.1",
                ],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.splitlines()
            (files[name],) = [
                line.split(" ", 1)[1] for line in effective if line.startswith("userknownhostsfile ")
            ]
    assert (
        "Host key verification failed" in ssh["lab-gpu-1"] and "Permission denied" not in ssh["lab-gpu-1"]
    ), ssh
    assert "does not match" in pyinfra["lab-gpu-1"], pyinfra
    assert "Permission denied" in ssh["lab-head-1"], ssh  # A: past the host key
    assert "No authentication methods available" in pyinfra["lab-head-1"], pyinfra
    assert files["lab-gpu-1"] == hosts["lab-gpu-1"].connection.known_hosts_file != files["lab-head-1"]
    found = subprocess.run(
        [KEYGEN, "-F", f"[127.0.0.1]:{port}", "-f", files["lab-gpu-1"]], capture_output=True, text=True
    ).stdout
    assert [line.split(" ", 1)[1] for line in found.splitlines() if not line.startswith("#")] == [
        keys["other-ed25519"]
    ]
    assert not operator_known.exists()


@pytest.mark.skipif(SSH is None, reason="needs OpenSSH's ssh")
def test_ansible_accepts_the_declared_key_and_refuses_any_other_whatever_its_environment(
    key_dir: Path, keys: dict[str, str], tmp_path: Path
) -> None:
    """Real ``ansible`` through the inventory plugin, with the lab's connection file putting
    lab-head-1 at the server; ``ANSIBLE_HOST_KEY_CHECKING=False`` does not loosen it."""
    config, operator_known = operator_ssh_config(tmp_path)
    declared = {"declared": [keys["ed25519"]], "other": [keys["other-ed25519"]], "none": []}
    host_key = paramiko.Ed25519Key.from_private_key_file(str(key_dir / "ed25519"))
    lab = tmp_path / "lab"
    lab.mkdir()
    env = {
        "SWARM_LAB_DIR": str(lab),
        "SWARM_KNOWN_HOSTS_DIR": str(tmp_path / "known_hosts"),
        "ANSIBLE_HOST_KEY_CHECKING": "False",
        "ANSIBLE_SSH_ARGS": f"-F {config}",
        # Without pipelining Ansible first runs a command and reads ssh's own error; with it,
        # it writes the module to ssh's stdin at once and, on a loaded machine, can meet the
        # pipe of an ssh that already refused the key ("Broken pipe", the reason lost).
        "ANSIBLE_PIPELINING": "False",
    }
    out = {}
    with ssh_server(host_key) as port:
        for case in CASES:
            conn = {"host": "127.0.0.1", "port": port, "user": "root", "host_keys": declared[case]}
            (lab / "connection.json").write_text(json.dumps({"nodes": {"lab-head-1": conn}}))
            proc = ansible("ansible", "lab-head-1", "-i", "inventory/lab", "-m", "ping", env=env)
            out[case] = proc.stdout + proc.stderr
    assert "UNREACHABLE" in out["declared"] and "Permission denied" in out["declared"], out["declared"]
    for case in ("other", "none"):
        assert "UNREACHABLE" in out[case] and "Host key verification failed" in out[case], out[case]
    assert not operator_known.exists()
