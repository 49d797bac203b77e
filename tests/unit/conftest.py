from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def root() -> Path:
    return ROOT


def fleet_dirs(name: str) -> list[Path]:
    return [ROOT / "inventory" / name, ROOT / "policies" / name, ROOT / "policies" / "shared"]


@pytest.fixture(autouse=True, scope="session")
def _known_hosts_dir(tmp_path_factory: pytest.TempPathFactory):
    """The known_hosts files the inventory makes from a fleet (engines/inventory.py) go to a
    temporary directory, not the user's ~/.cache (subprocesses inherit it)."""
    patch = pytest.MonkeyPatch()
    patch.setenv("SWARM_KNOWN_HOSTS_DIR", str(tmp_path_factory.mktemp("known_hosts")))
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
