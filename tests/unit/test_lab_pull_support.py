"""The lab's support for pull mode, its pure parts: the emulated NAT, a real one with no
inbound hole for the controller (the iptables rules written, not run; tests/lab/test_lab.py
proves it on the lab), and the agent's package laid out for a node (lab/agentpkg.py)."""

from __future__ import annotations

import io
import tarfile

import pytest

from swarm_infra.lab import agentpkg, network
from swarm_infra.lab.plan import lab_spec
from swarm_infra.resolve import load_fleet
from swarm_infra.resolve.layout import AGENT_LOCAL

from .conftest import ROOT, fleet_dirs


@pytest.fixture(scope="module")
def lab_b():
    spec = lab_spec(load_fleet(fleet_dirs("lab")))
    return spec.sites["lab-b"], [n for n in spec.nodes.values() if n.site == "lab-b" and n.nat]


def nat_rules(monkeypatch: pytest.MonkeyPatch, site, nodes) -> list[list[str]]:
    ran: list[list[str]] = []

    class Done:
        returncode = 1  # "no such chain": the chain is made

    def run(argv, netns=None, check=True):
        ran.append(list(argv))
        return Done()

    monkeypatch.setattr(network, "run", run)
    network.ensure_site_nat(site, nodes)
    # The rules appended to the NAT chains (filter and nat tables), in order.
    return [a for a in ran if "-A" in a and a[a.index("-A") + 1] == network.NAT_CHAIN]


def test_the_nat_lets_in_replies_only_and_nothing_from_the_controller(lab_b, monkeypatch) -> None:
    site, nodes = lab_b
    (gpu2,) = nodes
    ip, host = str(gpu2.address.ip), str(site.transit_host.ip)
    base = ["iptables", "-A", network.NAT_CHAIN, "-i", "uplink", "-d", ip]
    replies = [*base, "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"]
    snat = ["iptables", "-t", "nat", "-A", network.NAT_CHAIN, "-s", ip, "-o", "uplink", "-j", "SNAT",
            "--to-source", str(site.transit_site.ip)]  # fmt: skip
    rules = nat_rules(monkeypatch, site, nodes)
    assert rules == [snat, replies, [*base, "-j", "DROP"]]
    assert not any(host in rule for rule in rules)  # the host (the controller) has no hole


def test_the_agents_package_holds_what_the_agent_runs() -> None:
    names = {n.lower().replace("_", "-") for n in agentpkg.closure(agentpkg.ROOTS)}
    # The roots and what their metadata requires (ansible-core's Jinja2, jsonschema's
    # referencing), never the controller-only distributions. prometheus-client: the gate
    # parses the earlier batches' pages with its text parser (agent/report.py).
    wanted = {"pyyaml", "jsonschema", "jsonschema-rs", "paramiko", "ansible-core", "jinja2", "referencing",
              "prometheus-client"}  # fmt: skip
    assert wanted <= names
    assert not names & {"pulumi", "pyinfra", "ray", "matplotlib", "pytest"}
    venv = AGENT_LOCAL["agent_venv"]["path"]
    with tarfile.open(fileobj=io.BytesIO(agentpkg.stage(ROOT, venv))) as tar:
        members = {m.name: m for m in tar.getmembers()}
        site = "lib/python3.11/site-packages"
        assert f"{site}/swarm_infra/cli/__init__.py" in members
        assert f"{site}/swarm_infra/schemas/node.schema.json" in members  # as the wheel has it
        assert f"{site}/ansible_collections/ansible/posix/plugins/callback/json.py" in members
        assert f"{site}/prometheus_client/parser.py" in members  # the gate's parser
        assert not [n for n in members if n.startswith(f"{site}/ansible_collections/amazon/")]
        assert not [n for n in members if "__pycache__" in n or n.startswith(("/", "..")) or "/../" in n]
        script = tar.extractfile(members["bin/swarm"]).read().decode()
        assert script.startswith(f"#!{venv}/bin/python\n") and members["bin/swarm"].mode == 0o755
        assert "from swarm_infra.cli import main" in script


def test_the_join_takes_only_a_key_from_what_bootstrap_printed() -> None:
    """What a node prints is untrusted: the join records a WireGuard key or nothing."""
    from swarm_infra.lab import join
    from swarm_infra.lab.system import LabError

    key = "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA="
    assert join.bootstrap_key(f"...\nWireGuard public key (made now): {key}\n---\n") == key
    for printed in ("WireGuard public key (kept): AllowedIPs=0.0.0.0/0\n", "no key here\n"):
        with pytest.raises(LabError):
            join.bootstrap_key(printed)
