"""Every OpenSSH connection the tools make to a node ends when the node stops answering
(resolve/keys.py SSH_LIVENESS_OPTIONS: ssh_config(5) ServerAliveInterval/ServerAliveCountMax).

Over the mesh a stopped node sends nothing back, so before these options a converge that
found Ansible's ControlPersist master to a node stopped since waited for TCP to give up
(about 15 minutes; found on the lab: tests/e2e/test_main_job.py's stopped node, reached over
the controller's mesh interface). The lab proof is that test; here, that the options reach
each tool's ssh command line, parsed by OpenSSH itself (``ssh -G`` prints the configuration
a command line makes, connecting nowhere)."""

from __future__ import annotations

import shlex
import shutil
import subprocess

import pytest

from swarm_infra.engines.inventory import Connection, ansible_connection_vars, ssh_argv
from swarm_infra.lab.state import ssh_command

CONN = Connection(host="10.210.0.96", port=22, user="root", private_key_file="/k", known_hosts_file="/kh")
LAB_NODE = {
    "host": "10.77.2.11",
    "port": 22,
    "user": "root",
    "private_key_file": "/k",
    "known_hosts_file": "/kh",
}


def effective(argv: list[str]) -> dict[str, str]:
    """What OpenSSH makes of ``argv``'s options (``ssh -G``: the configuration, no connection)."""
    options = argv[1 : argv.index("--")] if "--" in argv else argv[1:-1]
    done = subprocess.run(["ssh", "-G", *options, "node"], capture_output=True, text=True, check=True)
    return dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs OpenSSH's client")
@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(ssh_argv(CONN, "true"), id="swarm lab ssh over the mesh, verify"),
        pytest.param(ssh_command(LAB_NODE, ["true"]), id="the lab's ssh"),
        pytest.param(
            ["ssh", *shlex.split(ansible_connection_vars(CONN)["ansible_ssh_common_args"]), "node"],
            id="ansible_ssh_common_args",
        ),
    ],
)
def test_a_node_that_stops_answering_ends_the_connection_in_15_s(argv: list[str]) -> None:
    config = effective(argv)
    assert (config["serveraliveinterval"], config["serveralivecountmax"]) == ("5", "3")
