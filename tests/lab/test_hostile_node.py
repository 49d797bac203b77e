"""A hostile node on the real lab (issue #22; root, lab): its root makes `wg pubkey` print a
key followed by lines that would route every address to it and run a command as root on
each peer at its next `wg-quick up`; later it makes itself a new key pair.

With either engine, the converge exits non-zero naming the node, no other node's wg0.conf
changes (none gets the injected lines), and the other nodes' mesh keeps working. A new key
is refused the same way until the operator accepts it (``--accept-key-change``); then every
peer gets it and the node is back in the mesh. Check mode refuses it too and writes nothing.
The engines' steps are shown without a lab in tests/unit/test_hostile_keys.py.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import subprocess
from pathlib import Path

import pytest

from swarm_infra.engines import keyrecord
from tests.labkit import FILES, LAB_STATE, UNITS, converge_summary, on_node, swarm

pytestmark = [pytest.mark.root, pytest.mark.lab]
LAB_ORDER = 23  # after test_pyinfra, which leaves the lab converged
LAB_NEEDS = LAB_LEAVES = "converged"  # the node's new key is accepted and every peer has it

# A node the controller reaches over the underlay: one behind the lab's real NAT that makes
# itself a new key pair is cut off the controller's mesh (which keeps the recorded key), and
# only its console or its own pull of a reviewed key could bring it back.
HOSTILE = "lab-gpu-1"
OTHERS = sorted(n for n, s in LAB_STATE["nodes"].items() if s["mesh"] and n != HOSTILE)
MESH = {name: node["mesh"]["address"].split("/")[0] for name, node in LAB_STATE["nodes"].items()}
CONF = FILES["wireguard_conf"]
MARKER = "/tmp/pwned-by-a-peer"
INJECTED = f"AllowedIPs = 0.0.0.0/0\n[Interface]\nPostUp = touch {MARKER}"
# The node's root shadows wg (first on PATH for SSH sessions, /usr/local/bin): `wg pubkey`,
# as the Ansible role and pyinfra's snapshot run it, prints its real key, then the lines.
WRAPPER = "/usr/local/bin/wg"
WRAPPER_TEXT = f"""#!/bin/sh
if [ "$1" = pubkey ]; then /usr/bin/wg pubkey; printf '%s\\n' {shlex.quote(INJECTED)}; exit 0; fi
exec /usr/bin/wg "$@"
"""
RECORD = keyrecord.record_path(Path("inventory/lab"))  # where `swarm converge` keeps the keys


def conf_digests() -> dict[str, str]:
    return {n: hashlib.sha256(on_node(n, f"cat {CONF}").stdout.encode()).hexdigest() for n in OTHERS}


def assert_others_mesh_works() -> None:
    for src in OTHERS:
        for dst in OTHERS:
            if dst != src:
                out = on_node(src, f"ping -c 1 -W 3 -I wg0 {MESH[dst]}", check=False).stdout
                assert " 0% packet loss" in out, (src, dst, out)


def assert_refused(proc: subprocess.CompletedProcess[str], engine: str) -> None:
    assert proc.returncode == 1, (engine, proc.stdout[-3000:], proc.stderr[-2000:])
    assert f"{HOSTILE}: WireGuard public key refused" in proc.stdout, (engine, proc.stdout[-3000:])
    assert f"failed or unreachable: {HOSTILE}" in proc.stderr, (engine, proc.stderr[-2000:])
    summary = converge_summary(proc.stdout)
    assert summary[HOSTILE]["failed"] >= 1
    assert all(summary[n]["failed"] == 0 and summary[n]["unreachable"] == 0 for n in OTHERS), summary


@pytest.mark.parametrize("engine", ["ansible", "pyinfra"])
def test_a_poisoned_wg_pubkey_changes_no_other_nodes_configuration(lab, engine: str) -> None:
    before = conf_digests()
    on_node(HOSTILE, f"cat > {WRAPPER} <<'EOF'\n{WRAPPER_TEXT}EOF\nchmod 0755 {WRAPPER}")
    try:
        assert "PostUp" in on_node(HOSTILE, f"wg pubkey < {FILES['wireguard_key']}").stdout  # poisoned
        proc = swarm("converge", "--layer", "mesh", "--engine", engine, check=False)
        assert_refused(proc, engine)
        assert "expected a WireGuard public key" in proc.stdout
    finally:
        on_node(HOSTILE, f"rm -f {WRAPPER}")
    assert conf_digests() == before
    for node in OTHERS:
        assert "PostUp = touch" not in on_node(node, f"cat {CONF}").stdout
        assert on_node(node, f"test ! -e {MARKER}", check=False).returncode == 0
    assert_others_mesh_works()


def test_a_new_key_is_refused_until_the_operator_accepts_it(lab) -> None:
    old_key = keyrecord.load(RECORD)[HOSTILE]
    before = conf_digests()
    # The node's root makes itself a new key pair and brings its interface up with it (as a
    # reinstalled node, or another machine answering for it, would).
    key = FILES["wireguard_key"]
    on_node(HOSTILE, f"umask 077 && wg genkey > {key}.new && mv {key}.new {key}")
    on_node(HOSTILE, f"systemctl restart {UNITS['wireguard']}")
    new_key = on_node(HOSTILE, f"wg pubkey < {key}").stdout.strip()
    assert new_key != old_key

    check = swarm("converge", "--layer", "mesh", "--engine", "pyinfra", "--check", check=False)
    assert check.returncode == 1 and f"{HOSTILE}: WireGuard public key refused: it reports" in check.stdout
    for engine in ("pyinfra", "ansible"):
        proc = swarm("converge", "--layer", "mesh", "--engine", engine, check=False)
        assert_refused(proc, engine)
        assert new_key in proc.stdout and old_key in proc.stdout and "--accept-key-change" in proc.stdout
    assert conf_digests() == before  # every peer keeps the recorded key
    assert keyrecord.load(RECORD)[HOSTILE] == old_key
    assert_others_mesh_works()

    proc = swarm("converge", "--layer", "mesh", "--accept-key-change", HOSTILE, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert f"changed (accepted): {HOSTILE}" in proc.stdout
    assert keyrecord.load(RECORD)[HOSTILE] == new_key
    for node in OTHERS:
        peers = json.loads(on_node(node, f"cat {FILES['wireguard_peers']}").stdout)
        assert peers.get(HOSTILE) == new_key, node
        out = on_node(node, f"ping -c 2 -W 3 -I wg0 {MESH[HOSTILE]}", check=False).stdout
        assert " 0% packet loss" in out or "1 received" in out, (node, out)
    # Accepted once is recorded: the next converge needs no flag and changes nothing.
    again = swarm("converge", "--layer", "mesh", "--engine", "pyinfra")
    assert all(row["changed"] == 0 for row in converge_summary(again.stdout).values())
