"""One test per declared item per node (see conftest.py and swarm_infra.verification)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from swarm_infra.verify import readers
from swarm_infra.verify.checks import Check, matches

pytestmark = pytest.mark.verify


def _describe(actual: Any) -> Any:
    if isinstance(actual, dict) and set(actual) == {"live", "persisted"}:
        live = "n/a (read-only here)" if actual["live"] is None else " ".join(actual["live"])
        persisted = "absent" if actual["persisted"] is None else " ".join(actual["persisted"])
        return f"live {live}; persisted {persisted}"
    if actual is None:
        return "absent"
    return actual


def test_declared_state(check: Check, node_host, node_cache, swarm_state, request, record_property) -> None:
    outcomes = request.config._swarm_outcomes
    blocked = [r for r in check.requires if outcomes.get(r) is False]
    if blocked:
        pytest.skip(f"blocked: {', '.join(blocked)} drifted")
    host = node_host(check.args.get("on", check.node))  # some checks read from another node
    cache = node_cache.setdefault(check.node, {})
    node = swarm_state["nodes"][check.node]
    if check.kind == "wg_peers":
        key_cache = node_cache.setdefault("_public_keys", {})

        def key_of(name: str) -> str | None:
            if name not in key_cache:
                key_file = swarm_state["nodes"][name]["layout"]["files"]["wireguard_key"]["path"]
                try:
                    key_cache[name] = readers.public_key(node_host(name), key_file)
                except Exception:  # the peer node is unreachable: that peer's problem, not the check's
                    key_cache[name] = None
            return key_cache[name]

        # A peer whose own tunnel drifted is that drift, not one of this node's too.
        down = frozenset(
            p for p, v in check.args["peers"].items() if v["service"] and outcomes.get(v["service"]) is False
        )
        actual = readers.wg_peers(host, check, cache, key_of, down)
    elif check.kind == "gpu":
        actual = readers.gpu(host, check, cache, node["gpu"])
    else:
        actual = getattr(readers, check.kind)(host, check, cache)
    if not matches(check, actual):
        drift = {
            "node": check.node,
            "layer": check.layer,
            "key": check.key,
            "desired": check.desired,
            "actual": _describe(actual),
        }
        record_property("drift", json.dumps(drift, sort_keys=True))
        pytest.fail(f"drift: {check.node} {check.layer} {check.key}: desired {check.desired!r}, "
                    f"actual {drift['actual']!r}", pytrace=False)  # fmt: skip
