"""The fleet's Rollout as Ansible play keywords (and pyinfra batches)."""

from __future__ import annotations

from ..fleet.model import Rollout
from .analysis import Analysis
from .types import RolloutState


def rollout_state(a: Analysis | None) -> RolloutState:
    """``serial`` (canary batch first, then a percentage of the hosts) and
    ``max_fail_percentage``, from the fleet's Rollout, or the Rollout defaults when it has
    none (or ``a`` is None: no fleet)."""
    r = (a and a.fleet.rollout) or Rollout("default", None)  # type: ignore[arg-type]
    return {"serial": [r.canary_hosts, f"{r.batch_percent}%"], "max_fail_percentage": r.max_fail_percentage}
