"""The lab's host services (lab/services.py): stopping one waits until it has exited, so a
service started next on its port can bind it (the package cache restarts offline or online
on the same port at each `swarm lab up`)."""

from __future__ import annotations

import subprocess
import sys
import time

from swarm_infra.lab import services

# A stand-in service: slow to exit on SIGTERM (as apt-cacher-ng finishing its transfers),
# its program and port among its arguments as the real ones' are.
SLOW_EXIT = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *a: (time.sleep(0.5), sys.exit(0)))\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)


def test_stop_returns_once_the_service_has_exited() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_EXIT, "stand-in-service", "Port=3142"], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    assert services.is_running(proc.pid, b"stand-in-service", 3142)
    started = time.monotonic()
    services.stop(proc.pid, b"stand-in-service", 3142)
    assert proc.poll() is not None, "stop returned while the service was still running"
    assert time.monotonic() - started >= 0.4  # it did wait for the slow exit


def test_stop_leaves_a_process_that_is_not_the_service_alone() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "other"])
    try:
        services.stop(proc.pid, b"stand-in-service", 3142)
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()
