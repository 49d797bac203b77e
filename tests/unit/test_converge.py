"""``swarm converge``: progress and summary from a real ansible-runner run, and the
checks that stop it before Ansible starts (no lab needed; the lab tests converge nodes)."""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
from pathlib import Path

from swarm_infra.engines.ansible.progress import Progress
from swarm_infra.engines.ansible.runner import run_playbook

from .conftest import ROOT

PLAYBOOK = """---
- name: Progress probe
  hosts: all
  gather_facts: false
  tasks:
    - name: Write a file
      ansible.builtin.copy:
        dest: "{{ out_dir }}/{{ inventory_hostname }}.txt"
        content: "hello\\n"
        mode: "0644"
    - name: Report something
      ansible.builtin.debug:
        msg: "a report from the role"
    - name: Fail on purpose
      ansible.builtin.fail:
        msg: "deliberate failure"
      when: inventory_hostname == 'bad'
"""


def probe_project(tmp: Path) -> tuple[Path, Path]:
    (tmp / "playbooks").mkdir()
    (tmp / "playbooks/site.yml").write_text(PLAYBOOK)
    (tmp / "ansible.cfg").write_text("[defaults]\nhost_key_checking = False\n")
    inventory = tmp / "hosts.ini"
    local = f"ansible_connection=local ansible_python_interpreter={sys.executable}"
    # Port 1 on loopback refuses at once: a real unreachable host without waiting.
    inventory.write_text(
        f"good {local}\nbad {local}\nghost ansible_host=127.0.0.1 ansible_port=1 ansible_user=nobody\n"
        f"[all:vars]\nout_dir={tmp}\n"
    )
    return tmp, inventory


def test_progress_counts_and_prints_what_ansible_runner_reports(tmp_path: Path) -> None:
    root, inventory = probe_project(tmp_path)
    out = io.StringIO()
    progress = Progress(out, show_diff=True)
    rc, _ = run_playbook(root, "site", inventory, diff=True, progress=progress)
    assert rc != 0, out.getvalue()  # a failed and an unreachable host
    assert {h: t.status for h, t in progress.hosts.items()} == {
        "good": "changed",
        "bad": "FAILED",
        "ghost": "UNREACHABLE",
    }
    assert progress.hosts["good"].changed == 1 and progress.hosts["good"].failed == 0
    text = out.getvalue()
    assert "+++ after: " in text and "+hello" in text  # --diff, under the task's line
    assert "note        a report from the role" in text
    assert "deliberate failure" in text and "ghost" in text
    assert (tmp_path / "good.txt").read_text() == "hello\n"
    table = progress.summary(simulated={"good"})
    assert "good                 changed" in table and "(SIMULATED GPU)" in table


def test_check_mode_changes_nothing(tmp_path: Path) -> None:
    root, inventory = probe_project(tmp_path)
    progress = Progress(io.StringIO())
    run_playbook(root, "site", inventory, check=True, limit="good", progress=progress)
    assert progress.hosts["good"].changed == 1 and set(progress.hosts) == {"good"}
    assert not (tmp_path / "good.txt").exists()


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "swarm_infra.cli", "converge", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )


def test_an_invalid_fleet_exits_2_before_ansible_starts(tmp_path: Path) -> None:
    (tmp_path / "inventory").mkdir()
    shutil.copytree(ROOT / "inventory/lab", tmp_path / "inventory/lab")
    shutil.copytree(ROOT / "policies", tmp_path / "policies")
    nodes = tmp_path / "inventory/lab/nodes.yaml"
    nodes.write_text(nodes.read_text().replace("site: lab-b", "site: lab-z", 1))
    proc = cli("-i", str(tmp_path / "inventory/lab"))
    assert proc.returncode == 2
    assert "lab-z" in proc.stderr and "nothing was run" in proc.stderr
    assert "PLAY" not in proc.stdout


def test_a_path_that_is_no_fleet_inventory_exits_2(tmp_path: Path) -> None:
    proc = cli("-i", str(tmp_path))
    assert proc.returncode == 2 and "is not a fleet inventory" in proc.stderr


def test_outside_the_repository_root_exits_2(tmp_path: Path) -> None:
    proc = cli(cwd=tmp_path)
    assert proc.returncode == 2 and "repository root" in proc.stderr


def test_progress_collects_the_published_wireguard_keys_and_passes_extra_vars(tmp_path: Path) -> None:
    # The wireguard role's keys tasks end with set_fact wireguard_public_key; `swarm converge`
    # records what real ansible-runner events carry of it, and gives the record as extra vars.
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks/site.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.set_fact:\n"
        "        wireguard_public_key: \"{{ wireguard_key_record[inventory_hostname] | default('') }}\"\n"
    )
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(f"a ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    progress = Progress(io.StringIO())
    rc, _ = run_playbook(
        tmp_path, "site", inventory, extravars={"wireguard_key_record": {"a": "K"}}, progress=progress
    )
    assert rc == 0 and progress.public_keys == {"a": "K"}
