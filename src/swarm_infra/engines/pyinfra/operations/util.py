"""What the operations share: what pyinfra says of an operation's result, node-side code sent
on stdin, and small text helpers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyinfra import host
from pyinfra.api import QuoteString, StringCommand

from ..facts import BOOTSTRAP, NodesideCall, nodeside_payload


def would_change(meta: Any) -> bool:
    """Whether pyinfra found, while it added the operation (before anything runs), that the
    operation yields commands: its change detection, which a check run (``--dry``) reports.
    False when pyinfra did not look (a State made with ``check_for_changes=False``).

    ``meta``: the ``OperationMeta`` an operation call returns (``state.get_op_data_for_host(
    host, op_hash).operation_meta`` in the runner).

    The one read of a private attribute of pyinfra in the package, tested against the
    pinned pyinfra (tests/unit/test_pyinfra_change_detection.py)."""
    # pyinfra 3.10.0, pyinfra/api/operation.py: operation()'s decorated function sets
    # ``OperationMeta(op_hash, op_is_change)``, op_is_change being None unless
    # ``state.should_check_for_changes()``, then True as soon as the command generator yields
    # a command, else False; OperationMeta.__init__ keeps it as ``_maybe_is_change``. The
    # public ``OperationMeta.will_change`` returns it too, but where it is None runs the
    # command generator again (through ``context.state``/``context.host``): the operations'
    # fact reads, and their ``changing()``, which drops the node's snapshot.
    return bool(meta._maybe_is_change)


def changed(meta: Any) -> bool:
    """Whether an operation changed something (once it ran) or would (while preparing a
    check run, when nothing runs): what ``_if`` conditions ask."""
    return meta.did_change() if meta.is_complete() else would_change(meta)


def _payload(module: Any, call: str, *args: Any, **kwargs: Any) -> str:
    path = Path(module.__file__)
    return nodeside_payload(path.read_text(), path.name, call, *args, **kwargs)


def nodeside_command(module: Any, call: str, *args: Any, **kwargs: Any) -> StringCommand:
    """The command running ``module.call(*args, **kwargs)`` on the node: the node-side file
    (:mod:`swarm_infra.nodeside`) and the call sent on stdin, never in argv."""
    return StringCommand(
        "python3", "-c", QuoteString(BOOTSTRAP), _stdin=_payload(module, call, *args, **kwargs)
    )


def nodeside_fact(module: Any, label: str, call: str, *args: Any, **kwargs: Any) -> Any:
    """What ``module.call(*args, **kwargs)`` returns on the current host (the
    :class:`~..facts.NodesideCall` fact, labelled ``label`` in pyinfra's output)."""
    return host.get_fact(NodesideCall, label=label, _stdin=_payload(module, call, *args, **kwargs))


def unit_name(unit: str) -> str:
    """A systemd unit's full name: a bare name is a ``.service``."""
    return unit if "." in unit else f"{unit}.service"


def text_lines(text: str | None) -> list[str]:
    """The lines of ``text`` (none for None or empty)."""
    return text.splitlines() if text else []
