"""A run's measurements as a terminal table or as JSON, with the comparison to the previous run."""

from __future__ import annotations

import json

from swarm_infra.metrics.compare import Change
from swarm_infra.metrics.measurement import Measurement
from swarm_infra.tables import table_lines


def _labels(m: Measurement) -> str:
    return " ".join(f"{k}={v}" for k, v in m.labels)


def _key(m: Measurement) -> tuple[str, str, str, tuple[tuple[str, str], ...]]:
    return (m.tool, m.field, m.unit, m.labels)


def to_json(
    run_id: int,
    measurements: list[Measurement],
    changes: list[Change],
    not_measured: list[dict[str, object]] | None = None,
) -> str:
    """``{"run": id, "measurements": [{tool, field, value, unit, labels{}, previous?, change?,
    regression?, direction?}], "regressions": n}``, keys sorted, 2-space indent; ``change`` is a
    fraction; ``direction`` is ``higher``, ``lower``, ``none`` (not judged) or ``unknown``
    (no direction declared for the field: not judged either).
    With ``not_measured`` (``swarm metrics run``): also ``"not_measured": [{node, part, what,
    why, failed}]``."""
    by_key = {_key(c.current): c for c in changes}
    rows = []
    for m in measurements:
        row: dict[str, object] = {
            "tool": m.tool,
            "field": m.field,
            "value": m.value,
            "unit": m.unit,
            "labels": dict(m.labels),
        }
        c = by_key.get(_key(m))
        if c is not None:
            row.update(
                previous=c.previous,
                change=c.change,
                regression=c.regression,
                direction=c.direction or "unknown",
            )
        rows.append(row)
    doc: dict[str, object] = {
        "run": run_id,
        "measurements": rows,
        "regressions": sum(c.regression for c in changes),
    }
    if not_measured is not None:
        doc["not_measured"] = not_measured
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def to_table(measurements: list[Measurement], changes: list[Change]) -> str:
    """Aligned columns: tool, field, labels, value, unit, change vs previous run (``REGRESSION``
    marked; ``direction unknown`` where the field declares none, so the change is not judged).
    Values with 4 significant digits."""
    by_key = {_key(c.current): c for c in changes}
    rows = [("TOOL", "FIELD", "LABELS", "VALUE", "UNIT", "VS PREVIOUS")]
    for m in measurements:
        c = by_key.get(_key(m))
        delta = ""
        if c is not None:
            judged = "  REGRESSION" if c.regression else "" if c.direction else "  direction unknown"
            delta = f"{c.change:+.1%}{judged}"
        rows.append((m.tool, m.field, _labels(m), f"{m.value:.4g}", m.unit, delta))
    return "".join(line + "\n" for line in table_lines(rows))
