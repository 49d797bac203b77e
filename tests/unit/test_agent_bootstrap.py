"""``swarm node bootstrap`` and the agent's units as the host layer renders them.

The WireGuard public key is checked against the real ``wg pubkey`` (wireguard-tools), the
printed Node document against the real validator (added to a copy of the lab fleet, it
must validate and resolve the node as a pull node with that key), file modes as stat
reports them. Nothing needs root: ``--root`` points the files at a temporary directory.
"""

from __future__ import annotations

import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from swarm_infra import cli
from swarm_infra.agent.bootstrap import public_key, wireguard_key
from swarm_infra.resolve import desired_state, load_fleet
from swarm_infra.resolve.files import layer_files
from swarm_infra.resolve.layout import AGENT_LOCAL

from .pullfleet import copy_lab, declare_pull

ROOT = Path(__file__).resolve().parents[2]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.skipif(shutil.which("wg") is None, reason="needs wireguard-tools")
def test_the_public_key_is_what_wg_pubkey_prints(tmp_path: Path) -> None:
    key = tmp_path / "wg" / "wg0.key"
    public, made = wireguard_key(key)
    assert made and mode(key) == 0o600 and mode(key.parent) == 0o700
    real = subprocess.run(["wg", "pubkey"], input=key.read_text(), capture_output=True, text=True, check=True)
    assert public == real.stdout.strip()
    # An existing key is kept: a node bootstrapped again keeps its identity.
    assert wireguard_key(key) == (public, False)
    # And a key wg genkey made gives what wg pubkey gives.
    private = subprocess.run(["wg", "genkey"], capture_output=True, text=True, check=True).stdout
    pub = subprocess.run(["wg", "pubkey"], input=private, capture_output=True, text=True, check=True).stdout
    assert public_key(private) == pub.strip()


def bootstrap(tmp_path: Path, *extra: str) -> list[str]:
    signers = tmp_path / "allowed_signers"
    signers.write_text(
        (ROOT / "tests/data/invalid/pull-allowed-signers-invalid.lock").read_text().splitlines()[1] + "\n"
    )
    return [
        "node", "bootstrap", "--root", str(tmp_path / "node"), "--no-start",
        "--node", "lab-gpu-9", "--site", "lab-b", "--address", "10.77.2.19", "--nat",
        "--fleet", "lab", "--remote", "https://git.example.org/swarm/fleet.git",
        "--ref", "main", "--allowed-signers", str(signers), *extra,
    ]  # fmt: skip


def test_bootstrap_writes_the_agent_and_prints_a_document_the_fleet_takes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(bootstrap(tmp_path)) == 0
    out = capsys.readouterr().out
    node = tmp_path / "node"
    agent = node / "etc/swarm/agent"
    assert mode(agent) == 0o700 and mode(node / "etc/wireguard/wg0.key") == 0o600
    # node_exporter's textfile directory exists before the agent's first report (a missing
    # one is a scrape error for node_exporter), readable by its unprivileged user.
    textfile_dir = node / Path(AGENT_LOCAL["agent_textfile"]["path"]).parent.relative_to("/")
    assert mode(textfile_dir) == 0o755 and list(textfile_dir.iterdir()) == []
    config = yaml.safe_load((agent / "agent.json").read_text())
    assert config == {"node": "lab-gpu-9", "fleet": "lab", "remote": "https://git.example.org/swarm/fleet.git",
                      "ref": "main", "engine": "ansible", "status_port": 9100}  # fmt: skip
    timer = (node / "etc/systemd/system/swarm-agent.timer").read_text()
    assert "OnUnitActiveSec=900\n" in timer and "RandomizedDelaySec=300\n" in timer
    # systemd.timer(5): AccuracySec= defaults to 1min, a slip on top of the declared jitter.
    assert "AccuracySec=1s\n" in timer
    key = out.split("WireGuard public key (made now): ")[1].split()[0]
    document = out[out.index("---\n") :]
    # The document, added to the lab fleet (with the Rollout's pull settings), validates and
    # makes the node a pull node with the key the node holds.
    fleet = copy_lab(tmp_path / "fleet")
    (fleet / "inventory/lab/lab-gpu-9.yaml").write_text(document)
    signers = (agent / "allowed_signers").read_text()
    declare_pull(fleet, (), remote="https://git.example.org/swarm/fleet.git", signers=signers, interval_s=600)
    state = desired_state(
        load_fleet([fleet / "inventory/lab", fleet / "policies/lab", fleet / "policies/shared"])
    )
    n = state["nodes"]["lab-gpu-9"]
    assert n["pull"] is not None and n["pull"]["interval_s"] == 600
    assert (
        load_fleet([fleet / "inventory/lab", fleet / "policies/lab", fleet / "policies/shared"])
        .fleet.nodes["lab-gpu-9"]
        .wireguard_public_key
        == key
    )
    # The host layer then writes the same settings and the fleet's interval.
    items = {i["path"]: i for i in layer_files(n, "host")}
    files = n["layout"]["files"]
    config, timer = files["agent_config"]["path"], files["agent_timer"]["path"]
    signers = files["agent_allowed_signers"]["path"]
    assert items[config]["content"] == (agent / "agent.json").read_text()
    assert "OnUnitActiveSec=600\n" in items[timer]["content"]
    assert items[signers]["content"] == (agent / "allowed_signers").read_text()
    # A push node of the same fleet holds none of it.
    push = {i["path"]: i["state"] for i in layer_files(state["nodes"]["lab-gpu-1"], "host")}
    assert push[timer] == "absent"


def test_an_ssh_remotes_deploy_key_is_copied_0600(tmp_path: Path) -> None:
    key = tmp_path / "id"
    key.write_text("PRIVATE\n")
    key.chmod(0o644)
    argv = bootstrap(tmp_path, "--deploy-key", str(key))
    argv[argv.index("--remote") + 1] = "ssh://git@git.example.org/swarm/fleet.git"
    assert cli.main(argv) == 0
    copied = tmp_path / "node" / AGENT_LOCAL["agent_deploy_key"]["path"].lstrip("/")
    assert copied.read_text() == "PRIVATE\n" and mode(copied) == 0o600


@pytest.mark.parametrize(
    "change, words",
    [
        (("--remote", "ext::sh -c id"), "Git remote"),
        (("--remote", "ssh://git@h/r.git"), "--deploy-key"),
        (("--node", "Bad Name"), "--node"),
        (("--address", "10.1.2"), "--address"),
        (("--ref", "a..b"), "branch"),
        (("--allowed-signers", "/nonexistent"), "cannot read"),
    ],
)
def test_bad_input_exits_2_without_a_traceback_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: tuple[str, str], words: str
) -> None:
    argv = bootstrap(tmp_path)
    argv[argv.index(change[0]) + 1] = change[1]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err and "nothing was written" in err
    assert not (tmp_path / "node").exists()


def test_agent_run_with_a_broken_settings_file_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "agent.json"
    bad.write_text('{"node": "x"}')
    assert cli.main(["agent", "run", "--config", str(bad), "--root", str(tmp_path)]) == 2
    assert "exactly" in capsys.readouterr().err


def analyze(tmp_path: Path, service: str, timer: str) -> list[str]:
    """systemd-analyze verify's complaints about the agent's units, installed under a
    root made here (the program the service runs exists there; the system's own units are
    linked in, for the targets the units name)."""
    from swarm_infra.resolve.layout import AGENT_LOCAL

    root = tmp_path / "root"
    units = root / "etc/systemd/system"
    units.mkdir(parents=True)
    program = root / AGENT_LOCAL["agent_venv"]["path"].lstrip("/") / "bin/swarm"
    program.parent.mkdir(parents=True)
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    (root / "usr/lib").mkdir(parents=True)
    (root / "usr/lib/systemd").symlink_to("/usr/lib/systemd")
    (units / "swarm-agent.service").write_text(service)
    (units / "swarm-agent.timer").write_text(timer)
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", f"--root={root}",
         str(units / "swarm-agent.timer"), str(units / "swarm-agent.service")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return [ln for ln in (done.stdout + done.stderr).splitlines() if "swarm-agent" in ln] + (
        [f"exit {done.returncode}"] if done.returncode else []
    )


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None or not Path("/usr/lib/systemd/system").is_dir(),
    reason="needs systemd",
)
def test_systemd_takes_the_agents_units(tmp_path: Path) -> None:
    from swarm_infra.resolve.files import agent_service_text, agent_timer_text
    from swarm_infra.resolve.layout import node_layout

    layout = node_layout()
    service, timer = agent_service_text(layout), agent_timer_text(layout, 900, 300)
    assert analyze(tmp_path / "good", service, timer) == []
    # The same check sees a value systemd ignores (it would only warn at boot).
    broken = analyze(tmp_path / "bad", service, timer.replace("OnUnitActiveSec=900", "OnUnitActiveSec=9x"))
    assert any("Failed to parse timer value" in ln for ln in broken)
    assert (
        "Type=oneshot\n" in service
        and "OnUnitActiveSec=900\n" in timer
        and "RandomizedDelaySec=300\n" in timer
    )
