"""The fleet's Rollout as Ansible play keywords (and pyinfra batches)."""

from __future__ import annotations

from collections.abc import Sequence

from ..fleet.model import Rollout
from .analysis import Analysis
from .types import RolloutState


def rollout_state(a: Analysis | None) -> RolloutState:
    """``serial`` (canary batch first, then a percentage of the hosts) and
    ``max_fail_percentage``, from the fleet's Rollout, or the Rollout defaults when it has
    none (or ``a`` is None: no fleet)."""
    r = (a and a.fleet.rollout) or Rollout("default", None)  # type: ignore[arg-type]
    return {"serial": [r.canary_hosts, f"{r.batch_percent}%"], "max_fail_percentage": r.max_fail_percentage}


def batches(hosts: Sequence[str], rollout: RolloutState) -> list[list[str]]:
    """``hosts`` (a play's hosts, in inventory order) cut into the batches Ansible runs for
    ``serial``: the canary count first, then each ``N%`` of *all* the play's hosts, rounded
    down and at least 1, the last size repeated until no host is left (Ansible's
    ``_get_serialized_batches`` and ``pct_to_int``)."""
    sizes = [
        max(int(int(s[:-1]) / 100 * len(hosts)), 1) if isinstance(s, str) else max(int(s), 1)
        for s in rollout["serial"]
    ]
    out: list[list[str]] = []
    start, i = 0, 0
    while start < len(hosts):
        size = sizes[min(i, len(sizes) - 1)]
        out.append(list(hosts[start : start + size]))
        start, i = start + size, i + 1
    return out
