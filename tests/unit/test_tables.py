"""The package's one table formatter (swarm_infra/tables.py, over tabulate)."""

from __future__ import annotations

from swarm_infra.tables import table_lines


def test_columns_are_as_wide_as_their_widest_cell_two_spaces_apart_text_as_given_no_trailing_blanks():
    rows = [["NODE", "VALUE", "NOTE"], ["n1", "0012", ""], ["node-22", "1e3", "slow"]]
    assert table_lines(rows, right=[1]) == ["NODE     VALUE  NOTE", "n1        0012", "node-22    1e3  slow"]
    assert table_lines([["a", 1], ["bb"]], indent="  ") == ["  a   1", "  bb"]
    assert table_lines([]) == []
