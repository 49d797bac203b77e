"""pyinfra's change detection as the operations and the runner read it
(:func:`swarm_infra.engines.pyinfra.operations.util.would_change`, the one read of a private
attribute of pyinfra, ``OperationMeta._maybe_is_change``), against the pinned pyinfra: real
operations added to a real ``State`` whose only host is ``@local`` (pyinfra's local
connector: no SSH, no root), in check mode (added, not run), then run.

Were pyinfra to rename the attribute or change what it means, these fail: the helper would
raise, or answer otherwise than the directory's presence says.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyinfra.api import Config, Inventory, State, StringCommand, operation
from pyinfra.api.connect import connect_all
from pyinfra.api.operation import add_op
from pyinfra.api.operations import run_ops
from pyinfra.operations import files

from swarm_infra.engines.pyinfra.operations import changed, would_change


def _local_state(check_for_changes: bool = True) -> tuple[State, Any]:
    state = State(Inventory((["@local"], {})), Config(), check_for_changes=check_for_changes)
    connect_all(state)
    (host,) = list(state.inventory)
    return state, host


def test_would_change_is_pyinfras_change_detection(tmp_path: Path) -> None:
    state, host = _local_state()
    there = add_op(state, files.directory, path=str(tmp_path))[host]
    missing = add_op(state, files.directory, path=str(tmp_path / "new"))[host]
    # files.directory yields nothing for a directory that exists, a mkdir for one that does not.
    assert (would_change(there), would_change(missing)) == (False, True)
    assert (changed(there), changed(missing)) == (False, True)  # before the run: the prediction
    assert not (tmp_path / "new").exists()  # check mode: nothing ran
    run_ops(state)
    assert (tmp_path / "new").is_dir()
    assert (changed(there), changed(missing)) == (False, True)  # after the run: what it did


def test_would_change_never_runs_the_operation_again(tmp_path: Path) -> None:
    # Without change detection pyinfra does not look; the public ``will_change`` would run
    # the command generator then (an operation's fact reads, its snapshot dropped): the
    # helper answers False and runs nothing.
    ran: list[str] = []

    @operation()
    def counted(path: str) -> Any:
        ran.append(path)
        yield StringCommand("mkdir", path)

    state, host = _local_state(check_for_changes=False)
    meta = add_op(state, counted, path=str(tmp_path / "x"))[host]
    assert would_change(meta) is False and ran == []
    checked, checked_host = _local_state()
    meta = add_op(checked, counted, path=str(tmp_path / "y"))[checked_host]
    assert ran == [str(tmp_path / "y")]  # run once, while added
    assert would_change(meta) is True and len(ran) == 1


@pytest.mark.parametrize("value", [True, False, None])
def test_would_change_reads_the_attribute_pyinfra_sets(value: bool | None) -> None:
    from pyinfra.api.operation import OperationMeta

    assert would_change(OperationMeta("hash", value)) is bool(value)
