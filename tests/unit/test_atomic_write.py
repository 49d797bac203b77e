"""The package's one atomic file write (:func:`swarm_infra.nodeside.atomic.write_atomic`) and
its verbatim copies in the node-side files that are shipped alone.

What it owes its callers: no name a local user can predict (a symbolic link planted beside
the target is never written through), the mode (and owner) in place before the first byte
whatever the umask, readers that see the old file or the new one, the file and its
directory synced, and nothing left behind when a write fails.
"""

from __future__ import annotations

import errno
import getpass
import grp
import inspect
import os
import re
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from swarm_infra.nodeside import atomic, files, gpu, raytoken, tunables

ROOT = Path(__file__).resolve().parents[2]
NODESIDE = ROOT / "src/swarm_infra/nodeside"
BEGIN, END = "# >>> write_atomic", "# <<< write_atomic"
# The node-side files shipped alone (one file each: Ansible's module_utils, pyinfra's and
# the roles' stdin payloads, the GPU code installed for its boot-time unit): each carries
# the original's region verbatim, since it cannot import a sibling.
SHIPPED: tuple[ModuleType, ...] = (files, tunables, gpu, raytoken)
WRITERS = (atomic, *SHIPPED)


def region(text: str) -> str | None:
    """The text from the begin marker's line to the end marker's, or None without both."""
    if BEGIN not in text or END not in text[text.index(BEGIN) :]:
        return None
    start = text.rindex("\n", 0, text.index(BEGIN)) + 1
    return text[start : text.index("\n", text.index(END, start)) + 1]


def drifted(original: str, copies: dict[str, str]) -> list[str]:
    """The names of ``copies`` (file texts) whose region is not the original's, byte for byte."""
    want = region(original)
    assert want is not None and want.count(BEGIN) == 1 and want.count(END) == 1
    return sorted(name for name, text in copies.items() if region(text) != want)


def carriers() -> dict[str, str]:
    """Every Python file of the node side and of plugins/ (module_utils are links to the
    node side, but a link made a copy must match too) that holds the region."""
    found = {}
    for f in [*NODESIDE.glob("*.py"), *(ROOT / "plugins").rglob("*.py")]:
        text = f.read_text()
        if BEGIN in text and f.resolve() != Path(atomic.__file__).resolve():
            found[str(f.relative_to(ROOT))] = text
    return found


def test_each_shipped_copy_is_the_nodeside_original_byte_for_byte() -> None:
    texts = carriers()
    assert {str(Path(m.__file__).resolve().relative_to(ROOT)) for m in SHIPPED} <= set(texts)
    assert drifted(Path(atomic.__file__).read_text(), texts) == []
    for module in SHIPPED:  # and each module runs that very function
        assert inspect.getsource(module.write_atomic) == inspect.getsource(atomic.write_atomic)


def test_the_copy_check_fails_when_a_copy_drifts_by_one_byte() -> None:
    original = Path(atomic.__file__).read_text()
    text = Path(files.__file__).read_text()
    drift = text.replace("os.fsync(fd)", "os.fsync(fd) ", 1)
    assert drift != text
    assert drifted(original, {"files.py": text, "drift.py": drift}) == ["drift.py"]
    assert drifted(original, {"gone.py": text.replace(END, "# end")}) == ["gone.py"]


def test_no_other_atomic_write_in_the_package_or_the_plugins() -> None:
    """Every rename over a file (``os.replace``) is the helper's own: no seventh helper."""
    outside = []
    for f in [*(ROOT / "src/swarm_infra").rglob("*.py"), *(ROOT / "plugins").rglob("*.py")]:
        text = f.read_text()
        own = region(text) or ""
        if text.replace(own, "").count("os.replace(") or re.search(r"\.swarm-tmp\b", text.replace(own, "")):
            outside.append(str(f.relative_to(ROOT)))
    # pyinfra's operations write /etc/fstab and mdadm.conf with shell commands on the node:
    # mktemp's random name (operations/storage.py replace_script), never a fixed one.
    assert outside == []


# ------------------------------------------------------------------------- the behaviour


@pytest.fixture(params=WRITERS, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def write_atomic(request: pytest.FixtureRequest) -> Callable[..., None]:
    return request.param.write_atomic  # type: ignore[no-any-return]


@pytest.fixture
def no_umask() -> Iterator[None]:
    """umask 0777: a mode that came from ``open``'s mode argument would be 0000."""
    old = os.umask(0o777)
    try:
        yield
    finally:
        os.umask(old)


def _spy_writes(monkeypatch: pytest.MonkeyPatch, seen: Callable[[int], None]) -> None:
    real = os.write

    def write(fd: int, data: Any) -> int:
        seen(fd)
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)


def test_the_temporary_file_has_its_mode_and_owner_before_any_byte(
    write_atomic: Callable[..., None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_umask: None
) -> None:
    target = tmp_path / "secret"
    target.write_text("old\n")
    root = os.geteuid() == 0
    uid, gid = (65534, 65534) if root else (os.getuid(), os.getgid())
    during: list[tuple[int, int, int, str, str]] = []

    def seen(fd: int) -> None:
        st = os.fstat(fd)
        name = os.readlink(f"/proc/self/fd/{fd}")
        during.append((stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, name, target.read_text()))

    _spy_writes(monkeypatch, seen)
    write_atomic(target, "new\n", 0o640, uid, gid)
    assert during, "the helper writes with os.write"
    for mode, owner, group, name, visible in during:
        assert (mode, owner, group) == (0o640, uid, gid)
        assert Path(name).parent == tmp_path and Path(name) != target
        assert visible == "old\n"  # readers see the old file until the rename
    st = target.stat()
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o640, uid, gid)
    assert target.read_text() == "new\n" and sorted(os.listdir(tmp_path)) == ["secret"]


def test_the_temporary_name_is_random_and_made_exclusively_without_following_links(
    write_atomic: Callable[..., None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "token"
    made: list[tuple[str, int]] = []
    real = os.open

    def spy(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if os.path.dirname(os.fspath(path)) == str(tmp_path):
            made.append((os.path.basename(os.fspath(path)), flags))
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", spy)
    write_atomic(target, b"a", 0o600)
    write_atomic(target, b"b", 0o600)
    names = [name for name, _ in made]
    assert len(names) == 2 and names[0] != names[1] and "token" not in names
    want = os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    assert all(flags & want == want for _, flags in made)


@pytest.mark.parametrize("planted", ["{name}.swarm-tmp", ".{name}.swarm-tmp", ".{name}.new", "{name}.tmp"])
def test_a_link_planted_at_a_predictable_temporary_name_is_never_written_through(
    write_atomic: Callable[..., None], tmp_path: Path, planted: str
) -> None:
    """A local user who can write the directory plants a link where the old helpers wrote
    (``path.swarm-tmp`` with O_TRUNC); the write must leave it and its target alone."""
    victim = tmp_path / "elsewhere" / "shadow"
    victim.parent.mkdir()
    victim.write_text("root:x:0:\n")
    target = tmp_path / "etc" / "managed.conf"
    target.parent.mkdir()
    link = target.parent / planted.format(name=target.name)
    link.symlink_to(victim)
    write_atomic(target, "declared\n", 0o644)
    assert victim.read_text() == "root:x:0:\n"
    assert link.is_symlink() and os.readlink(link) == str(victim)
    assert target.read_text() == "declared\n" and not target.is_symlink()


def test_a_symbolic_link_at_the_target_itself_is_replaced_not_followed(
    write_atomic: Callable[..., None], tmp_path: Path
) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    target = tmp_path / "managed"
    target.symlink_to(victim)
    write_atomic(target, "declared\n", 0o644)
    assert victim.read_text() == "keep\n" and not target.is_symlink() and target.read_text() == "declared\n"


@pytest.mark.parametrize("where", ["write", "fsync", "replace"])
def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(
    write_atomic: Callable[..., None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    target = tmp_path / "state.json"
    target.write_text("old\n")
    os.chmod(target, 0o644)
    real_fsync = os.fsync

    def full(*args: Any) -> Any:
        raise OSError(errno.ENOSPC, "No space left on device")

    def fsync_file(fd: int) -> None:  # the file's sync fails; a directory's would pass
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            full()
        real_fsync(fd)

    monkeypatch.setattr(os, where, fsync_file if where == "fsync" else full)
    with pytest.raises(OSError, match="No space left"):
        write_atomic(target, "new\n" * 100_000, 0o600)
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path)) == ["state.json"]
    assert target.read_text() == "old\n" and stat.S_IMODE(target.stat().st_mode) == 0o644


def test_the_file_then_its_directory_are_synced_after_all_is_written(
    write_atomic: Callable[..., None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "sub" / "new.conf"  # a missing directory is made
    synced: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        st = os.fstat(fd)
        synced.append("dir" if stat.S_ISDIR(st.st_mode) else f"file of {st.st_size} bytes")
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    data = os.urandom(3 * 65536 + 7)
    write_atomic(target, data, 0o644)
    assert synced == [f"file of {len(data)} bytes", "dir"]
    assert target.read_bytes() == data


def test_text_is_written_as_utf8_keeping_undecodable_bytes(
    write_atomic: Callable[..., None], tmp_path: Path
) -> None:
    target = tmp_path / "t"
    write_atomic(target, "é\udcff\n", 0o644)
    assert target.read_bytes() == b"\xc3\xa9\xff\n"


# ------------------------------------------------------------ the shipped files' callers


def _item(path: str, content: str, mode: str = "0600") -> dict[str, Any]:
    return {
        "path": path,
        "state": "file",
        "content": content,
        "owner": getpass.getuser(),
        "group": grp.getgrgid(os.getgid()).gr_name,
        "mode": mode,
    }


def test_files_converge_does_not_write_through_a_link_at_the_old_temporary_name(tmp_path: Path) -> None:
    """The old files code wrote ``path.swarm-tmp`` with O_TRUNC and no O_EXCL: a link planted
    there by a user who can write the directory sent a secret's text to the link's target."""
    victim = tmp_path / "victim"
    victim.write_text("untouched\n")
    (tmp_path / "etc/example").mkdir(parents=True)
    (tmp_path / "etc/example/secret.conf.swarm-tmp").symlink_to(victim)
    result = files.converge([_item("/etc/example/secret.conf", "secret\n")], root=str(tmp_path))
    assert result["changed_paths"] == ["/etc/example/secret.conf"]
    assert victim.read_text() == "untouched\n"
    conf = tmp_path / "etc/example/secret.conf"
    assert conf.read_text() == "secret\n" and stat.S_IMODE(conf.stat().st_mode) == 0o600


def test_files_converge_refuses_an_unknown_owner_before_writing(tmp_path: Path) -> None:
    item = {**_item("/etc/x.conf", "x\n"), "owner": "no-such-user-swarm"}
    with pytest.raises(LookupError, match="no such user: 'no-such-user-swarm'"):
        files.converge([item], root=str(tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_tunables_converge_does_not_write_through_a_link_at_the_old_temporary_name(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("untouched\n")
    conf = tmp_path / "etc/sysctl.d/99-test.conf"
    conf.parent.mkdir(parents=True)
    Path(f"{conf}.swarm-tmp").symlink_to(victim)
    (tmp_path / "proc/sys/vm").mkdir(parents=True)
    (tmp_path / "proc/sys/vm/swappiness").write_text("60\n")
    spec = {
        "sysctls": {"vm.swappiness": "10"},
        "sysfs": [],
        "sysctl_conf": "/etc/sysctl.d/99-test.conf",
        "tmpfiles_conf": None,
        "record": "/var/lib/test/record.json",
        "label": "test",
    }
    assert tunables.converge(spec, root=str(tmp_path))["changed"]
    assert victim.read_text() == "untouched\n"
    assert "vm.swappiness = 10" in conf.read_text()
