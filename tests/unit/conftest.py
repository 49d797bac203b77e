from __future__ import annotations

import contextlib
import http.server
import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The example fleet's directories: what the review tests commit as their base.
FLEET_DIRS = ("inventory/example", "policies/example", "policies/shared")
GIT_ENV = {
    "GIT_AUTHOR_NAME": "test",
    "GIT_AUTHOR_EMAIL": "test@example.invalid",
    "GIT_COMMITTER_NAME": "test",
    "GIT_COMMITTER_EMAIL": "test@example.invalid",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


@pytest.fixture
def root() -> Path:
    return ROOT


def fleet_dirs(name: str) -> list[Path]:
    return [ROOT / "inventory" / name, ROOT / "policies" / name, ROOT / "policies" / "shared"]


@pytest.fixture(autouse=True, scope="session")
def _known_hosts_dir(tmp_path_factory: pytest.TempPathFactory):
    """The known_hosts files the inventory makes from a fleet (engines/inventory.py) go to a
    temporary directory, not the user's ~/.cache (subprocesses inherit it); the controller's
    state directory is an empty temporary one, not the user's ~/.local/state."""
    patch = pytest.MonkeyPatch()
    patch.setenv("SWARM_KNOWN_HOSTS_DIR", str(tmp_path_factory.mktemp("known_hosts")))
    # Nor the controller's state (its key, its key records: engines/controller.py,
    # engines/keyrecord.py): the lab fleet's controller records no key, and push mode would
    # take the key of whoever runs the tests. Tests that need a key make one here.
    patch.setenv("SWARM_STATE_DIR", str(tmp_path_factory.mktemp("state")))
    yield
    patch.undo()


@contextlib.contextmanager
def serve_http(handler: Callable[..., Any]) -> Iterator[str]:
    """A real HTTP server on 127.0.0.1 (a free port) answering with ``handler`` (a
    ``BaseHTTPRequestHandler`` class or factory) on a thread, for as long as the block
    runs; yields its base URL (``http://127.0.0.1:PORT``)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def git(repo: Path, *args: str) -> str:
    """``git -C repo ARGS``' output, with a fixed identity and no user or system configuration."""
    env = {**os.environ, **GIT_ENV}
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, env=env
    ).stdout


def committed(repo: Path, dirs: Iterable[str] = FLEET_DIRS, files: Mapping[str, str] | None = None) -> Path:
    """A new Git repository at ``repo`` whose one commit on ``main`` holds the project's
    ``dirs`` (copied) and ``files`` (path -> text); returns ``repo``."""
    for d in dirs:
        shutil.copytree(ROOT / d, repo / d)
    for path, text in (files or {}).items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "the example fleet")
    return repo


@pytest.fixture(scope="module")
def base_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example fleet committed in a Git repository (one per test module)."""
    return committed(tmp_path_factory.mktemp("review") / "repo")


@pytest.fixture
def repo(base_repo: Path, tmp_path: Path) -> Path:
    """A copy of ``base_repo`` for one test to commit a change on."""
    dest = tmp_path / "repo"
    shutil.copytree(base_repo, dest, symlinks=True)
    return dest
