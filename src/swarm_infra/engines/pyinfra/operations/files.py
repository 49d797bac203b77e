"""Files and directories: a file's text, owner, group and mode; a directory; a path gone
(pyinfra's ``files`` operations where something differs)."""

from __future__ import annotations

import hashlib
from collections.abc import Generator
from io import StringIO
from typing import Any

from pyinfra import host
from pyinfra.api import QuoteString, StringCommand, operation

from .run import changing, snapshot


@operation()
def managed_file(path: str, text: str, owner: str, group: str, mode: str) -> Generator[Any, None, None]:
    """The file ``path`` holding exactly ``text``, with its owner, group and mode: nothing
    when the snapshot shows it so, else pyinfra's ``files.put`` (which diffs under
    ``--diff``).

    **Example:**

    .. code:: python

        managed_file(name="Ray unit", path=f["path"], text=unit_text, owner="root",
                     group="root", mode="0644")
    """
    from pyinfra.operations import files

    found = snapshot()["paths"].get(path)
    want = hashlib.sha1(text.encode()).hexdigest()
    same = found and found["type"] == "file" and found.get("sha1") == want
    if same and (found["owner"], found["group"], found["mode"]) == (owner, group, mode):
        return
    changing()
    if host.state.config.DIFF and not host.state.is_executing and not found:
        _diff_new_file(path, text)
    yield from files.put._inner(src=StringIO(text), dest=path, user=owner, group=group, mode=mode)


def _diff_new_file(path: str, text: str) -> None:
    """Log the diff of a file about to be created whose directory is missing too (a
    directory an earlier operation makes): ``files.put`` yields that directory's ``mkdir``
    before it logs its diff, and change detection (check mode) stops at the first command,
    so the diff would never show."""
    import posixpath

    from pyinfra import logger
    from pyinfra.facts.files import Directory
    from pyinfra.operations.util.files import generate_color_diff

    if host.get_fact(Directory, path=posixpath.dirname(path)):
        return  # files.put logs it before its first command
    host.log(f"Will create {path}", logger.info)
    for line in generate_color_diff([], text.splitlines(keepends=True)):
        logger.info("  %s", line)


@operation()
def managed_mode(path: str, owner: str, group: str, mode: str) -> Generator[StringCommand, None, None]:
    """An existing file's owner, group and mode (a file made on the node, such as a private
    key: its content is never read here). Nothing when it is absent.

    **Example:** ``managed_mode(name="Key mode", path=p, owner="root", group="root", mode="0600")``"""
    found = snapshot()["paths"].get(path)
    if not found or (found["owner"], found["group"], found["mode"]) == (owner, group, mode):
        return
    changing()
    yield StringCommand("chown", QuoteString(f"{owner}:{group}"), QuoteString(path))
    yield StringCommand("chmod", QuoteString(mode), QuoteString(path))


@operation()
def managed_directory(path: str, owner: str, group: str, mode: str) -> Generator[Any, None, None]:
    """The directory ``path`` with its owner, group and mode (else ``files.directory``).

    **Example:**

    .. code:: python

        managed_directory(name="Settings", path="/etc/x", owner="root", group="root", mode="0755")
    """
    from pyinfra.operations import files

    found = snapshot()["paths"].get(path)
    if (
        found
        and found["type"] == "directory"
        and (found["owner"], found["group"], found["mode"]) == (owner, group, mode)
    ):
        return
    changing()
    yield from files.directory._inner(path=path, user=owner, group=group, mode=mode)


@operation()
def absent_path(path: str) -> Generator[StringCommand, None, None]:
    """Nothing at ``path`` (a file, or a directory with what it holds).

    **Example:** ``absent_path(name="Old unit", path=files["ray_worker_unit"]["path"])``"""
    if snapshot()["paths"].get(path) is None:
        return
    changing()
    yield StringCommand("rm", "-rf", "--", QuoteString(path))
