"""Reading ``swarm metrics accept``'s table back (metrics/acceptance.py, ``verdict_table``)."""

from __future__ import annotations

import re


def cells(out: str) -> dict[str, dict[str, str]]:
    """The table in ``out`` as ``{row: {threshold: cell}}``: a row per node and the ``limit``
    row; a blank cell is ``""``. The header's names are joined back from their lines (each
    cut after an ``_``); the table ends at the first line whose first column is not a name
    (a failure's line, the legend, the summary). Raises StopIteration without a table."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("NODE "))
    limit = next(i for i in range(start, len(lines)) if lines[i].startswith("limit "))
    offsets = [m.start() for m in re.finditer(r"\S+", lines[start])]

    def split(line: str) -> list[str]:
        return [line[a:b].strip() for a, b in zip(offsets, [*offsets[1:], None], strict=True)]

    names = ["".join(parts) for parts in zip(*(split(h) for h in lines[start:limit]), strict=True)][1:]
    rows: dict[str, dict[str, str]] = {}
    for line in lines[limit:]:
        first = line[: offsets[1]].strip()
        if not first or " " in first or first.endswith(":"):
            break
        rows[first] = dict(zip(names, split(line)[1:], strict=True))
    return rows
