"""``swarm verify``: run tests/verify (testinfra) in-process and report per node and layer.

The pytest run reads every check first, nodes in parallel (runner.py), then reports them in
the checks' order; it writes JUnit XML (each drifted check carries a ``drift`` property:
JSON with node, layer, key, desired, actual). This module collects the same results as
they are reported and renders the per-node table (pass/fail per layer) and the drift
report.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from ..tables import table_lines
from .checks import LAYERS
from .runner import DEFAULT_FORKS

_ID = re.compile(r"\[(?P<node>[^/\]]+)/(?P<layer>[^/\]]+)/(?P<key>.+)\]\Z")


@dataclass
class Result:
    """One check's outcome: passed, drift, blocked or error (could not be read)."""

    node: str
    layer: str
    key: str
    outcome: str
    drift: dict[str, Any] | None = None
    message: str = ""


@dataclass
class Collector:
    """pytest plugin: one Result per check, printed as it fails (drift, error)."""

    out: TextIO = sys.stdout
    results: list[Result] = field(default_factory=list)

    def pytest_runtest_logreport(self, report: Any) -> None:
        m = _ID.search(report.nodeid)
        if not m or (report.when != "call" and not report.failed):
            return
        props = dict(report.user_properties)
        if report.passed:
            outcome = "passed"
        elif report.skipped:
            outcome = "blocked"
        elif "drift" in props:
            outcome = "drift"
        else:
            outcome = "error"
        message = ""
        if outcome == "blocked":
            message = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        elif outcome == "error":
            crash = getattr(report.longrepr, "reprcrash", None)
            text = crash.message if crash else str(report.longrepr)
            message = " ".join(text.split())[:300]
        r = Result(m["node"], m["layer"], m["key"], outcome, json.loads(props.get("drift", "null")), message)
        self.results.append(r)
        if outcome == "drift":
            assert r.drift is not None  # a drift outcome carries its record
            print(f"DRIFT  {_drift_line(r.drift)}", file=self.out, flush=True)
        elif outcome == "error":
            print(f"ERROR  {r.node} {r.layer} {r.key}: {message}", file=self.out, flush=True)

    def drift(self) -> list[dict[str, Any]]:
        return [r.drift for r in self.results if r.drift]

    def table(self) -> str:
        """Per node, per layer: "pass N", "FAIL k/N" (+ blocked), or "-" (nothing declared)."""
        nodes = sorted({r.node for r in self.results})
        table = [["node", *LAYERS]]
        for node in nodes:
            cells = []
            for layer in LAYERS:
                rs = [r for r in self.results if r.node == node and r.layer == layer]
                bad = sum(r.outcome in ("drift", "error") for r in rs)
                blocked = sum(r.outcome == "blocked" for r in rs)
                if not rs:
                    cell = "-"
                elif bad:
                    cell = f"FAIL {bad}/{len(rs)}" + (f" +{blocked}b" if blocked else "")
                elif blocked:
                    cell = f"blocked {blocked}/{len(rs)}"
                else:
                    cell = f"pass {len(rs)}"
                cells.append(cell)
            table.append([node, *cells])
        return "\n".join(table_lines(table))


def _drift_line(d: dict[str, Any]) -> str:
    return f"{d['node']:<20} {d['layer']:<8} {d['key']}: desired {d['desired']!r}, actual {d['actual']!r}"


def run(
    root: Path,
    inventory: Path,
    nodes: list[str],
    junit_xml: Path,
    *,
    path: str,
    forks: int = DEFAULT_FORKS,
    out: TextIO = sys.stdout,
) -> Collector:
    """Run ``root/tests/verify`` against ``inventory`` (only ``nodes`` if given), reading up
    to ``forks`` nodes at once (verify/runner.py), writing JUnit XML to ``junit_xml``.
    ``path`` is the PATH under which testinfra's ansible backend finds ``ansible-inventory``
    (the project's own). Returns the collector with every check's result, in the checks'
    order."""
    import pytest  # imported here: other commands should not pay for it

    Path("~/.ansible/cp").expanduser().mkdir(parents=True, exist_ok=True)  # shared SSH masters
    os.environ["PATH"] = path
    os.environ.setdefault("ANSIBLE_CONFIG", str(root / "ansible.cfg"))
    args = [
        str(root / "tests" / "verify"),
        f"--ansible-inventory={inventory}",
        f"--junitxml={junit_xml}",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:terminal",
        "--rootdir",
        str(root),
        f"--swarm-forks={forks}",
    ]
    args += [f"--hosts={n}" for n in nodes]
    collector = Collector(out)
    pytest.main(args, plugins=[collector])
    return collector


def report(collector: Collector) -> str:
    """The closing text: the table, then the drift report (or that there is none)."""
    drift = collector.drift()
    errors = [r for r in collector.results if r.outcome == "error"]
    lines = ["", collector.table(), ""]
    if drift:
        lines.append(f"drift: {len(drift)} item(s) differ from the declared state")
        lines += ["  " + _drift_line(d) for d in drift]
    else:
        lines.append("drift: none")
    if errors:
        lines.append(f"errors: {len(errors)} check(s) could not be read")
        lines += [f"  {r.node} {r.layer} {r.key}: {r.message}" for r in errors]
    blocked = sum(r.outcome == "blocked" for r in collector.results)
    passed = sum(r.outcome == "passed" for r in collector.results)
    lines.append(f"{passed} passed, {len(drift)} drifted, {blocked} blocked by drift, {len(errors)} errors")
    return "\n".join(lines)
