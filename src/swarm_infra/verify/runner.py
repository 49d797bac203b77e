"""Verification's checks run on many nodes at once, each node's one after another.

``run_waves`` takes :func:`swarm_infra.verify.checks.check_waves`' waves and a ``read``
function (tests/verify/conftest.py: the node's reader over SSH) and returns every check's
:class:`Outcome`. Within a wave, the checks are grouped by the node their commands run on
(``args["on"]``, else the check's node); each group runs in order on one worker thread, at
most ``forks`` groups at once (Ansible's ``forks``: ansible.cfg sets 16). A wave starts
when the previous one has finished, so a check's ``requires`` are decided before it runs
and the outcomes do not depend on the threads' timing: the same fleet state gives the
same outcomes, reported in the waves' order whatever finished first.

Work is I/O (SSH round trips), so threads, not processes: the controller's cores bound
only the SSH clients' CPU (the lab has 2 cores).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from .checks import Check, matches

DEFAULT_FORKS = 16  # as ansible.cfg's forks: the converge engines' parallelism


@dataclass(frozen=True)
class Outcome:
    """One check's result: ``outcome`` is "passed", "drift", "blocked" (``blocked_by``: the
    required check ids that did not pass) or "error" (``error``: what the read raised);
    ``actual``: the value read (None when blocked or on error)."""

    outcome: str
    actual: Any = None
    blocked_by: tuple[str, ...] = ()
    error: BaseException | None = None


def where(check: Check) -> str:
    """The node a check's commands run on: ``args["on"]`` (a check read from another node),
    else its own."""
    return str(check.args.get("on", check.node))


def _groups(wave: Sequence[Check]) -> list[list[Check]]:
    """The wave's checks by the node they run on, in order of first appearance."""
    groups: dict[str, list[Check]] = {}
    for check in wave:
        groups.setdefault(where(check), []).append(check)
    return list(groups.values())


def check_schedule(waves: Sequence[Sequence[Check]]) -> None:
    """Raise ValueError when a check requires one that is not decided before it runs: one of
    a later wave, or of its own wave on another node (that would depend on the threads'
    timing), or later in its own node's group. A required check that is not in the waves at
    all (``--limit``) is fine: it does not block."""
    decided: set[str] = set()
    every = {c.id for wave in waves for c in wave}
    for i, wave in enumerate(waves):
        for group in _groups(wave):
            before = set(decided)
            for check in group:
                late = [r for r in check.requires if r in every and r not in before]
                if late:
                    raise ValueError(
                        f"wave {i + 1}: {check.id} requires {', '.join(late)}, not decided before it"
                    )
                before.add(check.id)
        decided |= {c.id for c in wave}


def run_waves(
    waves: Sequence[Sequence[Check]],
    read: Callable[[Check, Mapping[str, bool]], Any],
    forks: int = DEFAULT_FORKS,
) -> dict[str, Outcome]:
    """Every check's outcome, by check id, in the waves' order.

    ``read(check, passed)`` returns the check's actual value (``passed``: check id -> whether
    it passed, for the checks decided so far: the peers check skips peers whose tunnel
    drifted); what it raises is the check's error. A check is blocked, and not read, when
    one of its ``requires`` did not pass (drifted, errored or was itself blocked). ``forks``:
    the most nodes read at once (>= 1; ValueError otherwise, or when :func:`check_schedule`
    finds the waves out of order).
    """
    if forks < 1:
        raise ValueError(f"forks must be at least 1, not {forks}")
    check_schedule(waves)
    outcomes: dict[str, Outcome] = {}
    passed: dict[str, bool] = {}  # written by one group's thread per check id; read after

    def run_group(group: list[Check]) -> None:
        for check in group:
            blocked = tuple(r for r in check.requires if passed.get(r) is False)
            if blocked:
                result = Outcome("blocked", blocked_by=blocked)
            else:
                try:
                    actual = read(check, passed)
                except Exception as e:  # a reader's failure is this check's error, not the run's
                    result = Outcome("error", error=e)
                else:
                    result = Outcome("passed" if matches(check, actual) else "drift", actual)
            outcomes[check.id] = result
            passed[check.id] = result.outcome == "passed"

    with ThreadPoolExecutor(max_workers=forks, thread_name_prefix="verify") as pool:
        for wave in waves:
            # list(): wait for the whole wave, and re-raise what a group raised outside a read.
            list(pool.map(run_group, _groups(wave)))
    return {c.id: outcomes[c.id] for wave in waves for c in wave}
