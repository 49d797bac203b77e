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

import contextlib
import grp
import os
import pwd
import shutil
import stat
import tempfile
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


def _ids(item: dict[str, Any]) -> tuple[int, int]:
    """The uid and gid of ``item``'s owner and group (names); LookupError for an unknown one,
    as :func:`shutil.chown` raises."""
    try:
        uid = pwd.getpwnam(item["owner"]).pw_uid
    except KeyError:
        raise LookupError(f"no such user: {item['owner']!r}") from None
    try:
        gid = grp.getgrnam(item["group"]).gr_gid
    except KeyError:
        raise LookupError(f"no such group: {item['group']!r}") from None
    return uid, gid


def _attributes(path: str, item: dict[str, Any]) -> None:
    os.chown(path, *_ids(item))
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
            write_atomic(path, item["content"], int(item["mode"], 8), *_ids(item))
    real = [c for c in changes if c["action"] != "missing"]
    return {"changed": bool(real), "changes": changes, "changed_paths": [c["path"] for c in real]}


# >>> write_atomic: verbatim from swarm_infra/nodeside/atomic.py (tests/unit/test_atomic_write.py)
def write_atomic(
    path: str | os.PathLike[str], data: bytes | str, mode: int, uid: int = -1, gid: int = -1
) -> None:
    """``data`` (bytes, or text written as UTF-8) into the file ``path``, whole, with the
    permission bits ``mode`` and, where given, the owner ``uid`` and group ``gid`` (``-1``:
    the writer's own); a missing parent directory is made (with the umask's mode).

    Readers see the old file or the new one, never a part. A temporary file is made in the
    same directory under a random name (:func:`tempfile.mkstemp`, which opens it with
    ``O_CREAT|O_EXCL|O_NOFOLLOW``, mode 0600: a file or symbolic link planted in advance is
    never written through), given its owner and then ``mode`` (so ``mode`` holds whatever
    the umask, and a secret is never readable more widely) before any byte is written; it is
    written, ``fsync``-ed, renamed over ``path`` (:func:`os.replace`: a symbolic link at
    ``path`` is replaced, not followed), and the directory is ``fsync``-ed so that the
    rename survives a crash. On any error the temporary file is removed and the error
    raised (OSError, or TypeError for ``data`` of another type); ``path`` is then as it was.
    """
    directory, name = os.path.split(os.fspath(path))
    directory = directory or "."
    os.makedirs(directory, exist_ok=True)
    blob = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".swarm-tmp", dir=directory)
    try:
        try:
            if uid != -1 or gid != -1:
                os.fchown(fd, uid, gid)  # before the mode: a change of owner clears set-id bits
            os.fchmod(fd, mode)
            view = memoryview(blob)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


# <<< write_atomic
