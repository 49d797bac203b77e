"""Kernel tunables on a node, converged to exactly what is declared.

Sysctls go to one managed sysctl.d(5) file and sysfs values (hugepages, transparent
hugepages, CPU governor) to one managed tmpfiles.d(5) file, so they hold at boot; the live
values are written now, only where they differ. The first time the project sets a key, its
value before that is recorded on the node (a JSON file); when a key or a whole profile is
no longer declared, its line leaves the file and the recorded value is written back. So
the declared state is the whole truth: removing a declaration removes its effect.

A key the node cannot set is persisted and reported, never a failure: read-only here (a
container's /proc/sys, /sys), not in this node (a host-global key absent from a network
namespace), or refused by the kernel (EINVAL). Any other error fails.

One self-contained file (standard library only), used by the Ansible module
``swarm_tunables``, by pyinfra (uploaded and run: ``python3 tunables.py apply|diff SPEC``),
and by tests. SPEC (JSON): ``{"sysctls": {key: text}, "sysfs": [{"name", "path", "glob",
"value"}], "sysctl_conf": path, "tmpfiles_conf": path or null, "record": path, "label":
"why, for the files' header"}``.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import json
import os
import sys
import tempfile
from typing import Any

PROC_SYS = "/proc/sys"
# Errors that mean "this node cannot set it here", reported, never a failure.
_REFUSED = {
    errno.EROFS: "read-only here",
    errno.EACCES: "read-only here",
    errno.EPERM: "read-only here",
    errno.ENOENT: "not in this node (a host-global key)",
    errno.EINVAL: "the kernel refused it (EINVAL)",
}


def sysctl_path(key: str, root: str = "/") -> str:
    """/proc/sys path of a dotted sysctl key (sysctl.d(5): dots separate components)."""
    return os.path.join(root, PROC_SYS.lstrip("/"), key.replace(".", "/"))


def _fields(text: str | None) -> list[str] | None:
    return None if text is None else text.split()


def _read(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read()
    except (FileNotFoundError, IsADirectoryError, PermissionError, OSError):
        return None


def _live(path: str) -> str | None:
    """A tunable's current value as text (THP-style files: the bracketed choice)."""
    text = _read(path)
    if text is None:
        return None
    chosen = [w.strip("[]") for w in text.split() if w.startswith("[")]
    return " ".join(chosen or text.split())


def render_sysctl_conf(sysctls: dict[str, str], label: str) -> str | None:
    """The managed sysctl.d file's content; None when nothing is declared (no file)."""
    if not sysctls:
        return None
    lines = [f"# Managed by swarm ({label}). Changes here are overwritten.", ""]
    lines += [f"{key} = {sysctls[key]}" for key in sorted(sysctls)]
    return "\n".join(lines) + "\n"


def render_tmpfiles_conf(sysfs: list[dict[str, str]], label: str) -> str | None:
    """The managed tmpfiles.d file's content (``w`` lines, written at boot by
    systemd-tmpfiles); None when nothing is declared (no file)."""
    if not sysfs:
        return None
    lines = [f"# Managed by swarm ({label}): sysfs values written at boot (tmpfiles.d(5), type w).", ""]
    lines += [f"w {item['glob']} - - - - {item['value']}" for item in sysfs]
    return "\n".join(lines) + "\n"


def _targets(spec: dict[str, Any], root: str) -> dict[str, tuple[str, str]]:
    """Every live file to converge: {record key: (path, desired text)}. Sysctls are keyed
    ``sysctl:KEY``; sysfs values ``sysfs:PATH`` (a glob expands to every match, e.g. each CPU)."""
    out = {f"sysctl:{k}": (sysctl_path(k, root), v) for k, v in spec.get("sysctls", {}).items()}
    for item in spec.get("sysfs", []):
        pattern = os.path.join(root, item["glob"].lstrip("/"))
        for path in sorted(glob.glob(pattern)) or [os.path.join(root, item["path"].lstrip("/"))]:
            rel = "/" + os.path.relpath(path, root)
            out[f"sysfs:{rel}"] = (path, item["value"])
    return out


def _label(record_key: str) -> str:
    return record_key.partition(":")[2]


def plan(spec: dict[str, Any], root: str = "/") -> dict[str, Any]:
    """What converging ``spec`` would do, reading only.

    Returns ``{"files": [{path, before, after}] (only those that change; None = absent),
    "writes": [{key, path, before, after}] (live values to set), "restores": [{key, path,
    before, after}] (keys no longer declared, back to their recorded value), "record":
    the record after converging, "not_applied": [{key, reason}] (keys this node cannot
    set, predicted from write access)}``.
    """
    label = spec.get("label", "")
    files = []
    for path, content in (
        (spec["sysctl_conf"], render_sysctl_conf(spec.get("sysctls", {}), label)),
        (spec.get("tmpfiles_conf"), render_tmpfiles_conf(spec.get("sysfs", []), label)),
    ):
        if not path:
            continue
        full = os.path.join(root, path.lstrip("/"))
        before = _read(full)
        if before != content:
            files.append({"path": path, "before": before, "after": content})
    record_path = os.path.join(root, spec["record"].lstrip("/"))
    old_record: dict[str, str] = json.loads(_read(record_path) or "{}")
    record = dict(old_record)
    writes, restores, not_applied = [], [], []
    targets = _targets(spec, root)
    for key, (path, want) in sorted(targets.items()):
        current = _live(path)
        if current is None:
            not_applied.append({"key": _label(key), "reason": _REFUSED[errno.ENOENT]})
            continue
        record.setdefault(key, current)  # the value before the project first set it
        if _fields(current) == _fields(want):
            continue
        if not os.access(path, os.W_OK):
            not_applied.append({"key": _label(key), "reason": _REFUSED[errno.EROFS]})
            continue
        writes.append({"key": _label(key), "path": path, "before": current, "after": want})
    for key in sorted(set(old_record) - set(targets)):
        original = record.pop(key)
        kind, _, name = key.partition(":")
        path = sysctl_path(name, root) if kind == "sysctl" else os.path.join(root, name.lstrip("/"))
        current = _live(path)
        if current is not None and _fields(current) != _fields(original) and os.access(path, os.W_OK):
            restores.append({"key": name, "path": path, "before": current, "after": original})
    return {
        "files": files,
        "writes": writes,
        "restores": restores,
        "record": record,
        "record_changed": record != old_record,
        "not_applied": not_applied,
    }


def _write_file(path: str, content: str | None, mode: int = 0o644) -> None:
    if content is None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return
    write_atomic(path, content, mode)


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


def converge(spec: dict[str, Any], check_mode: bool = False, root: str = "/") -> dict[str, Any]:
    """Bring the files and live values to ``spec``; in check mode, change nothing.

    Returns :func:`plan`'s result plus ``changed`` (bool). Live writes the kernel refuses
    (read-only, absent, EINVAL) move to ``not_applied``; any other error raises OSError.
    """
    result = plan(spec, root)
    if not check_mode:
        for f in result["files"]:
            _write_file(os.path.join(root, f["path"].lstrip("/")), f["after"])
        done = []
        for w in result["writes"] + result["restores"]:
            try:
                with open(w["path"], "w") as fh:
                    fh.write(w["after"] + "\n")
                done.append(w)
            except OSError as exc:
                if exc.errno not in _REFUSED:
                    raise
                result["not_applied"].append({"key": w["key"], "reason": _REFUSED[exc.errno]})
        result["writes"] = [w for w in result["writes"] if w in done]
        result["restores"] = [w for w in result["restores"] if w in done]
        if result["record_changed"]:
            record_path = os.path.join(root, spec["record"].lstrip("/"))
            _write_file(
                record_path,
                json.dumps(result["record"], indent=2, sort_keys=True) + "\n" if result["record"] else None,
            )
    result["changed"] = bool(result["files"] or result["writes"] or result["restores"])
    return result


def main(argv: list[str]) -> int:
    """CLI: ``apply|diff SPEC.json`` (``-``: stdin). Prints the result as JSON; exit 0, 2 usage."""
    if len(argv) != 3 or argv[1] not in ("apply", "diff"):
        print("usage: tunables.py apply|diff SPEC.json|-", file=sys.stderr)
        return 2
    if argv[2] == "-":
        spec = json.load(sys.stdin)
    else:
        with open(argv[2]) as fh:
            spec = json.load(fh)
    result = converge(spec, check_mode=argv[1] == "diff")
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
