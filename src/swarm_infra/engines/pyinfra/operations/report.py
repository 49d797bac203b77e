"""What the operations tell the operator: a note when an operation runs, a host failed with
its problems."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from pyinfra import host
from pyinfra.api import FunctionCommand, OperationError, StringCommand, operation

from .run import run_of


@operation()
def note_if(text: str) -> Generator[FunctionCommand, None, None]:
    """Report ``text`` about the host when the operation runs (with ``_if``, only when an
    earlier operation changed something): e.g. a reboot the policy does not allow.

    **Example:** ``note_if(name="Pending reboot", text="reboot required", _if=...)``"""

    def report(state: Any, host: Any) -> bool:
        run_of(state).note(host.name, text)
        return True

    host.noop(text)
    yield FunctionCommand(report, (), {})


@operation()
def refuse(problems: list[str]) -> Generator[StringCommand, None, None]:
    """Fail the host with ``problems`` (one message each), when there are any: e.g. devices
    holding data swarm did not make, which must never be formatted.

    **Example:** ``refuse(name="Foreign devices", problems=["/dev/nvme0n1 holds ext4 ..."])``"""
    if problems:
        raise OperationError("; ".join(problems))
    yield from ()
