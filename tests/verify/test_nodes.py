"""One test per declared item per node (see conftest.py and swarm_infra.verify.checks).

The checks were read by the ``verified`` fixture (swarm_infra.verify.runner, nodes in
parallel); each test reports its check's outcome, in the checks' order.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from swarm_infra.verify.checks import Check

pytestmark = pytest.mark.verify


def _describe(actual: Any) -> Any:
    if isinstance(actual, dict) and set(actual) == {"live", "persisted"}:
        live = "n/a (read-only here)" if actual["live"] is None else " ".join(actual["live"])
        persisted = "absent" if actual["persisted"] is None else " ".join(actual["persisted"])
        return f"live {live}; persisted {persisted}"
    if actual is None:
        return "absent"
    return actual


def test_declared_state(check: Check, verified, record_property) -> None:
    result = verified[check.id]
    if result.outcome == "blocked":
        pytest.skip(f"blocked: {', '.join(result.blocked_by)} drifted")
    if result.outcome == "error":
        assert result.error is not None  # an error outcome carries what the read raised
        raise result.error
    if result.outcome == "drift":
        drift = {
            "node": check.node,
            "layer": check.layer,
            "key": check.key,
            "desired": check.desired,
            "actual": _describe(result.actual),
        }
        record_property("drift", json.dumps(drift, sort_keys=True))
        pytest.fail(f"drift: {check.node} {check.layer} {check.key}: desired {check.desired!r}, "
                    f"actual {drift['actual']!r}", pytrace=False)  # fmt: skip
