"""The lab's host services (the package index, the package cache): processes on the
service address, started in the lab's cgroup so that ``down`` ends them whatever happens."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path

from .network import wait_exit
from .system import LabError, process_argv

READY_TIMEOUT_S = 60
STOP_TIMEOUT_S = 10


def is_running(pid: int | None, marker: bytes, port: int) -> bool:
    """Process ``pid`` is alive and is the service: ``marker`` (its program) and ``port`` are
    among its arguments (a recycled PID is not)."""
    argv = process_argv(pid)
    return any(marker in a for a in argv) and any(str(port).encode() in a for a in argv)


def start(argv: Sequence[str], address: str, port: int, cgroup: Path, log_file: Path, what: str) -> int:
    """Start ``argv`` detached, logging to ``log_file``, in ``cgroup``; returns its PID once
    ``address:port`` accepts a connection. Raises LabError when it exits or does not answer
    within READY_TIMEOUT_S, or when something else already listens there (the message names
    ``what`` and the log)."""
    if _answers(address, port):
        raise LabError(f"{what}: something else already listens on {address}:{port}; stop it first")
    with open(log_file, "a") as log:
        proc = subprocess.Popen(
            list(argv), stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
        )
    cgroup.mkdir(parents=True, exist_ok=True)
    (cgroup / "cgroup.procs").write_text(f"{proc.pid}\n")
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not _answers(address, port):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise LabError(f"{what} did not start; see {log_file}")
        time.sleep(0.1)  # the server is binding its socket; nothing to wait on but a connect
    return proc.pid


def _answers(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=1):
            return True
    except OSError:
        return False


def stop(pid: int | None, marker: bytes, port: int) -> None:
    """End the service if ``pid`` is still it: SIGTERM, and wait for it to exit (its socket
    closed, so that a service started next on the same port can bind it), SIGKILL after
    STOP_TIMEOUT_S; nothing otherwise."""
    if not is_running(pid, marker, port):
        return
    assert pid is not None
    os.kill(pid, signal.SIGTERM)
    if not wait_exit(pid, STOP_TIMEOUT_S):
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        wait_exit(pid, STOP_TIMEOUT_S)
