"""Live progress of an Ansible run: per-host tallies and one line per notable result.

An ansible-runner ``event_handler`` (:class:`Progress`) prints a line per changed, failed or
unreachable task result as it happens (every result with ``verbose``), Ansible's diff under
its task with ``show_diff``, a status line redrawn on a terminal, and the per-host table
at the end (:meth:`Progress.summary`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Collection
from typing import Any, TextIO

from ..report import HostTally, result_line, summary_table

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# ansible-runner event name -> the tally it counts toward.
_RESULT = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_unreachable": "unreachable",
    "runner_on_skipped": "skipped",
}


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
        # WireGuard public keys the hosts published (the wireguard role's keys tasks set
        # wireguard_public_key only after both of its checks passed), for the key record.
        self.public_keys: dict[str, str] = {}

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
        published = (res.get("ansible_facts") or {}).get("wireguard_public_key")
        if outcome == "ok" and published and isinstance(published, str):
            self.public_keys[host] = published
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
            tally.note(text)
        if changed or note or outcome in ("failed", "unreachable") or self.verbose:
            label = "changed" if changed else "note" if note else outcome
            self._print(result_line(time.monotonic() - self.started, host, label, text))
        diff = self.diffs.pop(host, [])
        if diff and changed:
            self._print("\n".join("    " + ln for ln in diff))

    def summary(self, simulated: Collection[str]) -> str:
        """The per-host table printed at the end (host, status, ok/changed/failed/...)."""
        return summary_table(self.hosts, simulated)
