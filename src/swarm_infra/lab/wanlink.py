"""A site's emulated WAN link: a userspace delay line between two TUN devices.

``tc netem`` would be the usual tool, but this machine's kernel is built without it
(``CONFIG_NET_SCH_NETEM`` is not set; only HTB, TBF and ingress qdiscs exist), and the lab must
run where CI runs. So each site's link to the host is a pair of TUN devices and this process
copies IP packets between them, applying the Site's ``wan`` as netem would: each packet is held
``latency_ms`` +/- a uniform ``jitter_ms`` (never reordered: a packet never leaves before the one
ahead of it), dropped with probability ``loss_percent``. ``bandwidth_mbit`` is a TBF qdisc on
both devices (see network.py). Both directions are delayed, so a round trip between the host
and a site with ``latency_ms: 20`` takes 40 ms more.

Run as ``python -m swarm_infra.lab.wanlink HOST_IF SITE_IF [--latency-ms L] [--jitter-ms J]
[--loss-percent P]``: it creates both devices in the host's network namespace, prints
``ready PID`` and serves until SIGTERM; its devices vanish with it. The caller moves ``SITE_IF``
into the site's namespace.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import fcntl
import os
import random
import signal
import struct
import sys

TUNSETIFF = 0x400454CA
IFF_TUN, IFF_NO_PI = 0x0001, 0x1000
MAX_PACKET = 65535


def open_tun(name: str) -> int:
    """A TUN device named ``name`` (layer 3, no packet info header); returns its fd."""
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


class DelayLine:
    """One direction: packets read from ``src`` are written to ``dst`` after the delay.

    Packets wait in a FIFO with their due times (each no earlier than the one ahead) and one
    timer serves the head, so order is kept even when due times tie (asyncio's timer heap does
    not keep insertion order for equal times).
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        src: int,
        dst: int,
        latency_s: float,
        jitter_s: float,
        loss: float,
        rng: random.Random,
    ) -> None:
        self.loop, self.src, self.dst = loop, src, dst
        self.latency_s, self.jitter_s, self.loss, self.rng = latency_s, jitter_s, loss, rng
        self.queue: collections.deque[tuple[float, bytes]] = collections.deque()
        self.timer: asyncio.TimerHandle | None = None
        loop.add_reader(src, self.on_readable)

    def on_readable(self) -> None:
        while True:
            try:
                packet = os.read(self.src, MAX_PACKET)
            except BlockingIOError:
                return
            if self.loss and self.rng.random() < self.loss:
                continue
            if not self.latency_s and not self.jitter_s and not self.queue:
                self.send(packet)
                continue
            delay = max(0.0, self.latency_s + self.rng.uniform(-self.jitter_s, self.jitter_s))
            due = self.loop.time() + delay
            if self.queue:
                due = max(due, self.queue[-1][0])
            self.queue.append((due, packet))
            if self.timer is None:
                self.timer = self.loop.call_at(due, self.flush)

    def flush(self) -> None:
        now = self.loop.time()
        while self.queue and self.queue[0][0] <= now:
            self.send(self.queue.popleft()[1])
        self.timer = self.loop.call_at(self.queue[0][0], self.flush) if self.queue else None

    def send(self, packet: bytes) -> None:
        # The device's queue is full or going away: the packet is lost, as on a wire.
        with contextlib.suppress(OSError):
            os.write(self.dst, packet)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m swarm_infra.lab.wanlink", description=__doc__)
    parser.add_argument("host_if")
    parser.add_argument("site_if")
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--jitter-ms", type=float, default=0.0)
    parser.add_argument("--loss-percent", type=float, default=0.0)
    args = parser.parse_args(argv)
    host_fd, site_fd = open_tun(args.host_if), open_tun(args.site_if)
    loop = asyncio.new_event_loop()
    rng = random.Random()
    params = (args.latency_ms / 1000, args.jitter_ms / 1000, args.loss_percent / 100, rng)
    DelayLine(loop, host_fd, site_fd, *params)
    DelayLine(loop, site_fd, host_fd, *params)
    stop = loop.create_future()

    def _stop() -> None:
        if not stop.done():
            stop.set_result(None)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, _stop)
    print(f"ready {os.getpid()}", flush=True)
    sys.stdout.close()
    loop.run_until_complete(stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
