"""A pull worker's copy of its Ray cluster's token, read from the head over the mesh.

The head serves its token file on its mesh address (a systemd socket unit, ``Accept=yes``,
and a service that writes the file to the connection: ``swarm_infra.resolve.files``), and
its Ray firewall admits only the cluster's pull workers that are direct WireGuard peers of
the head (``swarm_infra.resolve.ray.token_admission``). A worker converged by pull (no
controller to copy the token) runs :func:`fetch` on itself: one connection, a bounded read
(:data:`TIMEOUT_S` in all, at most :data:`MAX_BYTES`), the token checked
(:func:`token_problem`) and written with mode 0600 where the node's differs.

Standard library only: both engines send this file on stdin to the node's ``python3``
(``swarm_infra.engines.raytoken``), and the library imports :func:`token_problem`. Nothing
this code returns or raises holds the token or any byte read: the results are JSON the
engines print.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import tempfile
import time

MAX_BYTES = 1024  # a token file is 65 bytes; anything longer than this is not one
TIMEOUT_S = 10.0  # s: connecting and reading, together


def token_problem(text: str) -> str | None:
    """Why ``text`` (a token file's content, read from the head) is not a token as the head
    makes one (``swarm_infra.resolve.ray.token_command``: 64 lowercase hexadecimal
    characters and a newline), or None. The head's root can put anything in its file, and
    the workers write what it holds: the reason never quotes the value (it would be a
    secret when it is a token)."""
    token = text[:-1] if text.endswith("\n") else text
    if len(token) == 64 and all(c in "0123456789abcdef" for c in token):
        return None
    return f"expected 64 hexadecimal characters and a newline, got {len(text)} characters"


def read(host: str, port: int, timeout_s: float = TIMEOUT_S, max_bytes: int = MAX_BYTES) -> bytes:
    """Everything ``host``:``port`` (TCP) sends until it closes the connection: at most
    ``max_bytes`` (ValueError past that, naming only the limit), within ``timeout_s`` seconds
    from the first connection attempt to the end (TimeoutError, an OSError); a refused or
    reset connection raises its OSError."""
    deadline = time.monotonic() + timeout_s
    chunks: list[bytes] = []
    size = 0
    with socket.create_connection((host, port), timeout=timeout_s) as conn:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"nothing complete within {timeout_s:g} s")
            conn.settimeout(left)
            try:
                chunk = conn.recv(max_bytes + 1 - size)
            except TimeoutError:
                raise TimeoutError(f"nothing complete within {timeout_s:g} s") from None
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                raise ValueError(f"more than {max_bytes} bytes")


def _holds(path: str, data: bytes) -> bool:
    """Whether ``path`` is a regular file of root's, mode 0600, holding exactly ``data``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return False
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or stat.S_IMODE(st.st_mode) != 0o600 or st.st_uid != 0:
            return False
        return fh.read(MAX_BYTES + 1) == data


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


def fetch(host: str, port: int, path: str, check_mode: bool = False) -> dict[str, object]:
    """The head's token (read from ``host``:``port``, :func:`read`) into ``path`` where the
    node's file differs (content, mode 0600, root's): ``{"changed": bool}``; with
    ``check_mode`` nothing is written (the read is made: it changes nothing). On a failure,
    ``{"error": why}``: unreachable, too long, not a token (:func:`token_problem`), or the
    file could not be written. Neither ever holds what was read."""
    where = f"{host}:{port}"
    try:
        data = read(host, port, TIMEOUT_S, MAX_BYTES)
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
        return {"error": f"the Ray token could not be read from the head at {where}: {why}"}
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        text = "\x00" * len(data)  # not a token either; its length is all the reason says
    problem = token_problem(text) if data else "the head sent nothing (it holds no token yet?)"
    if problem:
        return {"error": f"the Ray token read from the head at {where} is refused: {problem}"}
    if _holds(path, data):
        return {"changed": False}
    if not check_mode:
        try:
            write_atomic(path, data, 0o600)
        except OSError as exc:
            return {"error": f"{path}: {exc.strerror or exc}"}
    return {"changed": True}
