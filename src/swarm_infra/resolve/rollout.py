"""The fleet's Rollout as Ansible play keywords (and pyinfra batches)."""

from __future__ import annotations

from ..fleet.model import Rollout
from .analysis import Analysis
from .types import RolloutState


def rollout_state(a: Analysis | None) -> RolloutState:
    """``serial`` (canary batch first, then a percentage of the hosts) and
    ``max_fail_percentage``, from the fleet's Rollout, or the Rollout defaults when it has
    none (or ``a`` is None: no fleet)."""
    rollout = a.fleet.rollout if a is not None else None
    r = rollout or Rollout(name="default", source=None)
    return {"serial": [r.canary_hosts, f"{r.batch_percent}%"], "max_fail_percentage": r.max_fail_percentage}


def rollout_batches(hosts: list[str], rollout: RolloutState) -> list[list[str]]:
    """``hosts`` cut into rolling batches as Ansible cuts a play's hosts by ``serial``: each
    entry of ``rollout["serial"]`` in turn (a count, or ``"N%"`` of all the hosts, at least
    1), the last repeated until every host has a batch. Used by the pyinfra engine, so both
    engines roll out in the same steps."""
    left, out, i = list(hosts), [], 0
    serial = rollout["serial"] or [len(hosts)]
    while left:
        step = serial[min(i, len(serial) - 1)]
        size = (len(hosts) * int(step[:-1])) // 100 if isinstance(step, str) else int(step)
        size = max(size, 1)
        out.append(left[:size])
        left = left[size:]
        i += 1
    return out


def batch_failed(failed: int, size: int, rollout: RolloutState) -> bool:
    """Whether a batch with ``failed`` of ``size`` hosts failed ends the rollout, as Ansible
    decides: more than ``max_fail_percentage`` percent failed, or every host did."""
    return failed > 0 and (failed == size or failed * 100 > rollout["max_fail_percentage"] * size)
