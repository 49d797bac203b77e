"""What ``swarm converge`` prints, whichever engine runs: per-host tallies, one line per
notable result, and the summary table (the same columns for Ansible and pyinfra)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from ..resolve.notes import PENDING_REBOOT


@dataclass
class HostTally:
    """Per-host counts, as in Ansible's PLAY RECAP: tasks (Ansible) or operations (pyinfra)
    that ran ok, changed something, failed, were skipped; unreachable hosts."""

    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    messages: list[str] = field(default_factory=list)
    pending_reboot: bool = False  # a layer reported the node pending a reboot (not a failure)

    def note(self, text: str) -> None:
        """Count a layer's note: one that says the node waits for a reboot marks it."""
        self.pending_reboot |= text.startswith(PENDING_REBOOT)

    @property
    def status(self) -> str:
        if self.unreachable:
            return "UNREACHABLE"
        if self.failed:
            return "FAILED"
        return "changed" if self.changed else "ok"


def result_line(elapsed_s: float, host: str, label: str, text: str) -> str:
    """One live line: ``[  12.3s] host  label  text`` (label: changed, failed, unreachable,
    note, ok)."""
    return f"[{elapsed_s:6.1f}s] {host:<20} {label:<11} {text}"


def summary_table(hosts: Mapping[str, HostTally], simulated: Collection[str]) -> str:
    """The per-host table printed at the end (host, status, ok/changed/failed/...), hosts
    with simulated GPUs and hosts pending a reboot marked, then the hosts pending a reboot.
    Fixed widths, not :func:`swarm_infra.tables.table_lines`: the host column is as wide as
    in the live lines above it (:func:`result_line`), printed before all hosts are known."""
    lines = [
        "",
        f"{'host':<20} {'status':<12} {'ok':>4} {'changed':>8} {'failed':>7} "
        f"{'unreachable':>12} {'skipped':>8}",
    ]
    for host in sorted(hosts):
        t = hosts[host]
        note = "  (SIMULATED GPU)" if host in simulated else ""
        note += "  (PENDING REBOOT)" if t.pending_reboot else ""
        lines.append(
            f"{host:<20} {t.status:<12} {t.ok:>4} {t.changed:>8} {t.failed:>7} "
            f"{t.unreachable:>12} {t.skipped:>8}{note}"
        )
    pending = sorted(h for h, t in hosts.items() if t.pending_reboot)
    if pending:
        lines.append(
            f"{PENDING_REBOOT}: {', '.join(pending)}: the new NVIDIA driver waits for a reboot "
            "(allow_reboot is false in the GPU profile); their GPU layer was skipped, not failed"
        )
    return "\n".join(lines)
