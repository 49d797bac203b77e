"""A node layer's managed files and directories, converged in one call.

Each item says what one path must be: a file with exactly this content, a file whose
content is the node's own (a private key made on the node: only its owner and mode are
managed), a directory, or nothing. :func:`plan` compares, :func:`converge` applies only the
differences (files written atomically: a temporary file in the same directory, renamed),
and both report unified-diff material for the files whose content changes. One call per
layer instead of one Ansible task per file: every task is a round trip to the node and a
Python start there. Standard library only; used by the Ansible module ``swarm_files``.

ITEM: ``{"path": str, "state": "file"|"directory"|"absent", "content": str or None (file:
None keeps the node's content, the file must exist), "owner": str, "group": str, "mode":
"0644"}``.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any


def _current(path: str) -> dict[str, Any] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    kind = "directory" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode) else "other"
    try:
        owner = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner = str(st.st_uid)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return {"type": kind, "owner": owner, "group": group, "mode": f"{stat.S_IMODE(st.st_mode):04o}"}


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as fh:
            return fh.read()
    except OSError:
        return None


def plan(items: list[dict[str, Any]], root: str = "/") -> list[dict[str, Any]]:
    """What converging ``items`` would change, reading only: one entry per item that
    differs, ``{"path", "action": "create"|"update"|"attributes"|"remove"|"missing",
    "before": text or None, "after": text or None}`` (texts only where content changes;
    ``missing``: a file to keep whose content the node has not made yet)."""
    out = []

    def change(item: dict[str, Any], action: str, before: str | None = None, after: str | None = None):
        out.append({"path": item["path"], "action": action, "before": before, "after": after})

    for item in items:
        path = os.path.join(root, item["path"].lstrip("/"))
        now = _current(path)
        want = item["state"]
        if want == "absent":
            if now is not None:
                change(item, "remove")
        elif now is None:
            missing = want == "file" and item.get("content") is None
            change(item, "missing" if missing else "create", after=item.get("content"))
        elif now["type"] != want:
            change(item, "update", after=item.get("content"))
        elif want == "file" and item.get("content") is not None and _read(path) != item["content"]:
            change(item, "update", _read(path), item["content"])
        elif (now["owner"], now["group"], now["mode"]) != (item["owner"], item["group"], item["mode"]):
            change(item, "attributes")
    return out


def _attributes(path: str, item: dict[str, Any]) -> None:
    shutil.chown(path, item["owner"], item["group"])
    os.chmod(path, int(item["mode"], 8))


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


def converge(items: list[dict[str, Any]], check_mode: bool = False, root: str = "/") -> dict[str, Any]:
    """Bring ``items`` to their declared state (in order: a directory before the files in
    it); in check mode, change nothing. Returns ``{"changed": bool, "changes": plan
    entries, "changed_paths": [path, ...]}``; an item the node cannot satisfy (``missing``)
    is reported, never made up. Raises OSError on a failure to write."""
    changes = plan(items, root)
    by_path = {item["path"]: item for item in items}
    for change in [] if check_mode else changes:
        item, action = by_path[change["path"]], change["action"]
        path = os.path.join(root, item["path"].lstrip("/"))
        if action == "missing":
            continue
        if action == "attributes":
            _attributes(path, item)
            continue
        now = _current(path)
        if action == "remove" or (now is not None and now["type"] != item["state"]):
            _remove(path)
        if item["state"] == "directory":
            os.makedirs(path, exist_ok=True)
            _attributes(path, item)
        elif item["state"] == "file":
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.swarm-tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, int(item["mode"], 8))
            with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as fh:
                fh.write(item["content"])
            _attributes(tmp, item)
            os.replace(tmp, path)
    real = [c for c in changes if c["action"] != "missing"]
    return {"changed": bool(real), "changes": changes, "changed_paths": [c["path"] for c in real]}


def write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    """``text`` into ``path`` whole, with ``mode`` (a temporary file in the same directory,
    renamed over it: readers never see half a file, and a secret is never readable with a
    wider mode first); the directory is made when missing. Raises OSError."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as out:
            os.fchmod(out.fileno(), mode)
            out.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
