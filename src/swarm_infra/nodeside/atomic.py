"""The package's one atomic file write: :func:`write_atomic`.

The library, the CLI, the agent and the lab import it from here. The node-side files that
are shipped alone, as one file each (``files.py``, ``tunables.py``, ``gpu.py`` and
``raytoken.py``: Ansible's module_utils, pyinfra's and the roles' stdin payloads, the GPU
code installed for its boot-time unit), cannot import a sibling, so each carries the
region between the two marker comments below verbatim; ``tests/unit/test_atomic_write.py``
fails when a copy differs from this one by a byte. Change it here, then paste it there.

Standard library only, like the rest of ``nodeside``.
"""

from __future__ import annotations

import contextlib
import os
import tempfile


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
