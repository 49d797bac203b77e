"""``swarm converge``: run a layer playbook through ansible-runner, with live progress.

The playbooks and roles do the work; this module validates the fleet first (so an invalid
fleet exits 2 before Ansible starts), runs ``playbooks/<layer>.yml`` with ansible-runner
against the ``swarm`` inventory plugin, prints a line per notable task result as it happens
(changed, failed, unreachable; every result with ``--verbose``), a live status line on a
terminal, and a per-host summary at the end.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
LAYERS = ("site", "host", "drivers", "gpu", "mesh")
# ansible-runner event name -> the tally it counts toward.
_RESULT = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_unreachable": "unreachable",
    "runner_on_skipped": "skipped",
}


@dataclass
class HostTally:
    """Per-host task counts, as in Ansible's PLAY RECAP."""

    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    messages: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        if self.unreachable:
            return "UNREACHABLE"
        if self.failed:
            return "FAILED"
        return "changed" if self.changed else "ok"


class Progress:
    """ansible-runner ``event_handler``: tallies results per host and prints them live.

    ``out`` gets one line per changed/failed/unreachable result (all results if
    ``verbose``), with Ansible's own diff text when ``show_diff``. On a terminal a status
    line (elapsed s, play, task, hosts) is redrawn under them.
    """

    def __init__(self, out: TextIO, *, verbose: bool = False, show_diff: bool = False) -> None:
        self.out = out
        self.live = out.isatty()
        self.verbose = verbose
        self.show_diff = show_diff
        self.started = time.monotonic()
        self.hosts: dict[str, HostTally] = {}
        self.play = ""
        self.task = ""
        self.diffs: dict[str, list[str]] = {}

    def _print(self, line: str) -> None:
        if self.live:
            self.out.write("\r\033[K")
        self.out.write(line + "\n")
        self._status()

    def _status(self) -> None:
        if not self.live:
            return
        changed = sum(1 for t in self.hosts.values() if t.changed)
        bad = sum(1 for t in self.hosts.values() if t.failed or t.unreachable)
        self.out.write(
            f"\r\033[K[{time.monotonic() - self.started:6.1f}s] {self.play} | {self.task[:50]}"
            f" | hosts {len(self.hosts)} changed {changed} failed {bad}"
        )
        self.out.flush()

    def __call__(self, event: dict[str, Any]) -> bool:
        kind = event.get("event", "")
        data = event.get("event_data", {})
        if kind == "playbook_on_play_start":
            self.play = data.get("play", "")
            self._print(f"== PLAY {self.play}")
        elif kind == "playbook_on_task_start":
            self.task = data.get("task", "")
            self._status()
        elif kind == "runner_on_file_diff" and self.show_diff and event.get("stdout"):
            # Diffs arrive before their task's result: held and printed under its line.
            text = _ANSI.sub("", event["stdout"]).replace("\r", "")
            self.diffs.setdefault(data.get("host", ""), []).extend(text.strip().splitlines())
        elif kind in _RESULT and data.get("host"):
            self._result(kind, data)
        return True

    def _result(self, kind: str, data: dict[str, Any]) -> None:
        host = data["host"]
        tally = self.hosts.setdefault(host, HostTally())
        res = data.get("res") or {}
        outcome = _RESULT[kind]
        if outcome == "failed" and data.get("ignore_errors"):
            outcome = "ok"
        setattr(tally, outcome, getattr(tally, outcome) + 1)
        changed = outcome == "ok" and bool(res.get("changed"))
        tally.changed += changed
        # The roles' debug reports (simulated GPUs, sysctls not applied, reboot pending).
        note = outcome == "ok" and str(data.get("resolved_action", "")).endswith("debug") and res.get("msg")
        text = data.get("task", "")
        if outcome in ("failed", "unreachable"):
            msg = str(res.get("msg") or res.get("stderr") or "").strip().splitlines()
            tally.messages.append(f"{text}: {msg[0] if msg else outcome}")
            text += "\n    " + tally.messages[-1]
        elif note:
            text = "\n    ".join(map(str, note)) if isinstance(note, list) else str(note)
        if changed or note or outcome in ("failed", "unreachable") or self.verbose:
            label = "changed" if changed else "note" if note else outcome
            elapsed = time.monotonic() - self.started
            self._print(f"[{elapsed:6.1f}s] {host:<20} {label:<11} {text}")
        diff = self.diffs.pop(host, [])
        if diff and changed:
            self._print("\n".join("    " + ln for ln in diff))

    def summary(self, simulated: Collection[str]) -> str:
        """The per-host table printed at the end (host, status, ok/changed/failed/...)."""
        lines = [
            "",
            f"{'host':<20} {'status':<12} {'ok':>4} {'changed':>8} {'failed':>7} "
            f"{'unreachable':>12} {'skipped':>8}",
        ]
        for host in sorted(self.hosts):
            t = self.hosts[host]
            note = "  (SIMULATED GPU)" if host in simulated else ""
            lines.append(
                f"{host:<20} {t.status:<12} {t.ok:>4} {t.changed:>8} {t.failed:>7} "
                f"{t.unreachable:>12} {t.skipped:>8}{note}"
            )
        return "\n".join(lines)


def path_with_ansible() -> str:
    """PATH with this Python's bin directory first, so the project's ansible-playbook runs.

    Raises FileNotFoundError when there is no ansible-playbook at all.
    """
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    if not shutil.which("ansible-playbook", path=path):
        raise FileNotFoundError("ansible-playbook not found (pip install -e . installs ansible)")
    return path


def run_playbook(
    root: Path,
    layer: str,
    inventory: Path,
    *,
    check: bool = False,
    diff: bool = False,
    limit: str | None = None,
    progress: Callable[[dict[str, Any]], bool],
) -> tuple[int, str]:
    """Run ``root/playbooks/<layer>.yml`` with ansible-runner.

    Returns (ansible-playbook's exit status, the last 2,000 characters of its output);
    the output tail explains errors that happen before any host event (a ``--limit``
    matching no host, a playbook syntax error).
    ``progress`` receives every ansible-runner event. Artifacts go to a temporary
    directory that is removed afterwards, so no task output (which ``no_log`` already
    censors) stays on the controller.
    """
    import ansible_runner  # imported here: `swarm validate` should not pay for it

    flags = [f for f, on in (("--check", check), ("--diff", diff)) if on]
    with tempfile.TemporaryDirectory(prefix="swarm-converge-") as private:
        runner = ansible_runner.run(
            private_data_dir=private,
            project_dir=str(root),
            playbook=str(root / "playbooks" / f"{layer}.yml"),
            inventory=str(inventory.resolve()),
            limit=limit,
            cmdline=" ".join(flags) or None,
            envvars={
                "ANSIBLE_CONFIG": str(root / "ansible.cfg"),
                "ANSIBLE_NOCOLOR": "1",
                "PATH": path_with_ansible(),
            },
            event_handler=progress,
            quiet=True,
        )
        return int(runner.rc), runner.stdout.read()[-2000:]
