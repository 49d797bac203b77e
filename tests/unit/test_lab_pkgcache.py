"""The lab's package cache (lab/pkgcache.py): the lab fleet names it, and its mirror probe
answers as the mirror does (a real HTTP server on loopback, and a closed port)."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from swarm_infra.fleet.sources import fleet_paths
from swarm_infra.lab import pkgcache
from swarm_infra.lab.image import SUITE
from swarm_infra.resolve import load_fleet

ROOT = Path(__file__).resolve().parents[2]


def test_every_lab_site_names_the_cache_the_lab_runs() -> None:
    fleet = load_fleet(fleet_paths(ROOT / "inventory/lab")).fleet
    proxies = {site.apt_proxy for site in fleet.sites.values()}
    assert len(proxies) == 1 and all(pkgcache.serves(p) for p in proxies), proxies


def test_the_example_fleets_site_caches_are_not_the_labs() -> None:
    fleet = load_fleet(fleet_paths(ROOT / "inventory/example")).fleet
    declared = [site.apt_proxy for site in fleet.sites.values() if site.apt_proxy]
    assert declared and not any(pkgcache.serves(p) for p in declared)


@pytest.fixture
def mirror(tmp_path: Path) -> Iterator[str]:
    (tmp_path / "dists" / SUITE).mkdir(parents=True)
    (tmp_path / "dists" / SUITE / "InRelease").write_text("signed index\n")
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(tmp_path))  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_the_probe_sees_a_mirror_that_serves_the_suites_index(mirror: str) -> None:
    assert pkgcache.mirror_answers(mirror)
    assert not pkgcache.mirror_answers(mirror + "/elsewhere")  # 404: not a mirror of the suite


def test_the_probe_sees_a_mirror_that_does_not_answer() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        assert not pkgcache.mirror_answers(f"http://127.0.0.1:{port}/debian", timeout=2)


def test_the_cache_runs_offline_only_when_asked_and_says_so_on_its_command_line(tmp_path: Path) -> None:
    online, offline = pkgcache.argv(tmp_path, 3142, False), pkgcache.argv(tmp_path, 3142, True)
    assert "Offlinemode=0" in online and "Offlinemode=1" in offline
    assert "Port=3142" in online and f"BindAddress={pkgcache.SERVICE_ADDRESS}" in online
    conf = pkgcache.config(tmp_path / "cache", tmp_path / "log")
    assert f"CacheDir: {tmp_path / 'cache'}\n" in conf and "Offlinemode" not in conf


def test_a_cold_cache_holds_nothing_to_serve_offline(tmp_path: Path) -> None:
    cache = tmp_path / "apt-cacher-ng"
    assert not pkgcache.holds_packages(cache)  # no directory yet
    (cache / "deb.debian.org/debian/dists/bookworm").mkdir(parents=True)
    (cache / "deb.debian.org/debian/dists/bookworm/InRelease").write_text("index\n")
    assert not pkgcache.holds_packages(cache)  # an index alone serves no package
    pool = cache / "deb.debian.org/debian/pool/main/h/hello"
    pool.mkdir(parents=True)
    (pool / "hello_2.10-3_amd64.deb").write_bytes(b"!<arch>\n")
    assert pkgcache.holds_packages(cache)
