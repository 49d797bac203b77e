"""Plain-text tables for terminals: the one table formatter of the package, over ``tabulate``.

The tables the commands print once they have every row (``swarm metrics`` and ``metrics
accept``, ``swarm status``, ``swarm verify``, ``swarm lab status``, the fleet's capacity) are
laid out here (the converge recap keeps the fixed widths of the live lines it follows):
columns as wide as their widest cell, two spaces between them, text as given (no number
parsing: ``0012`` and ``1e3`` stay as written), no trailing blanks. A module of the package
root, outside the layers, so that every layer may use it (as :mod:`swarm_infra.hosttools`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def table_lines(rows: Iterable[Sequence[object]], right: Iterable[int] = (), indent: str = "") -> list[str]:
    """``rows`` (the header row first, if any; a cell is written with ``str``) as aligned
    lines: each column left-aligned, or right-aligned for the column indexes in ``right``;
    ``indent`` before each line; trailing blanks removed. [] for no rows."""
    # Imported here: every `swarm` command loads the modules that print tables, the pull
    # agent's `swarm agent run` too, whose node-side virtualenv has no tabulate
    # (lab/agentpkg.py ROOTS) and prints none.
    from tabulate import tabulate

    cells = [[str(c) for c in row] for row in rows]
    if not cells:
        return []
    columns = max(len(row) for row in cells)
    cells = [row + [""] * (columns - len(row)) for row in cells]
    aligned = set(right)
    text = tabulate(
        cells,
        tablefmt="plain",
        disable_numparse=True,
        colalign=["right" if i in aligned else "left" for i in range(columns)],
    )
    return [indent + line.rstrip() for line in text.splitlines()]
