"""The lab's plan (names, addresses, WAN parameters), lab fleets of any size, and the pure helpers."""

from __future__ import annotations

import asyncio
import ipaddress
import random
import shutil
import socket
from pathlib import Path

import pytest

from swarm_infra.fleet.sources import convention_paths
from swarm_infra.lab import image
from swarm_infra.lab.fleet import nodes_yaml, write_lab_fleet
from swarm_infra.lab.plan import TRANSIT, LabNode, LabSite, lab_spec, wan_params
from swarm_infra.lab.wanlink import DelayLine
from swarm_infra.resolve import load_fleet

from .conftest import ROOT, fleet_dirs


@pytest.fixture(scope="module")
def lab_analysis():
    return load_fleet(fleet_dirs("lab"))


def test_lab_spec_follows_the_declarations(lab_analysis) -> None:
    spec = lab_spec(lab_analysis)
    assert sorted(spec.nodes) == ["lab-gpu-1", "lab-gpu-2", "lab-head-1"]
    gpu2 = spec.nodes["lab-gpu-2"]
    assert gpu2.address == ipaddress.IPv4Interface("10.77.2.11/24")
    assert gpu2.gateway == ipaddress.IPv4Address("10.77.2.1")
    assert gpu2.nat and not spec.nodes["lab-gpu-1"].nat
    wan = {"latency_ms": 20, "jitter_ms": 2, "loss_percent": 0, "bandwidth_mbit": 0}
    assert spec.sites["lab-b"].wan == wan


@pytest.fixture
def lab_40(tmp_path: Path):
    """The analysis of a generated 40-node lab fleet (swarm lab fleet --nodes 40)."""
    for d in ("inventory/lab", "policies/lab", "policies/shared"):
        shutil.copytree(ROOT / d, tmp_path / d)
    write_lab_fleet(tmp_path, 40)
    return load_fleet([str(p) for p in convention_paths(tmp_path, "lab-40")])


def test_interface_names_fit_the_kernel_limit_and_are_unique(lab_40) -> None:
    spec = lab_spec(lab_40)
    names = [s.uplink_host for s in spec.sites.values()] + [f"{s.uplink_host}s" for s in spec.sites.values()]
    names += [n.veth for n in spec.nodes.values()]
    assert all(len(n) <= 15 for n in names)  # IFNAMSIZ - 1
    assert len(set(names)) == len(names)


def test_transit_links_are_disjoint_and_stable_when_a_site_is_added(lab_analysis, tmp_path: Path) -> None:
    before = lab_spec(lab_analysis).sites
    extra = tmp_path / "site.yaml"
    extra.write_text(
        "apiVersion: swarm.io/v1alpha1\nkind: Site\nmetadata: {name: lab-c}\n"
        "spec: {region: local, underlay: {cidr: 10.77.3.0/24}}\n"
    )
    after = lab_spec(load_fleet([*fleet_dirs("lab"), extra])).sites
    for name, site in before.items():
        assert after[name].transit_host == site.transit_host
    nets = [s.transit_host.network for s in after.values()]
    assert len(set(nets)) == len(nets) and all(n.subnet_of(TRANSIT) for n in nets)
    # No gateway declared: the first host address.
    assert after["lab-c"].gateway == ipaddress.IPv4Interface("10.77.3.1/24")


def test_a_lab_fleet_of_n_nodes_validates_and_the_lab_runs_every_node(lab_40, tmp_path: Path) -> None:
    spec = lab_spec(lab_40)
    assert len(spec.nodes) == 40 == len(lab_40.fleet.nodes)
    assert set(spec.sites) == set(lab_analysis_sites())
    addresses = [(n.site, n.address.ip) for n in spec.nodes.values()]
    assert len(set(addresses)) == 40
    for n in spec.nodes.values():
        assert n.address.ip in spec.sites[n.site].cidr and n.address.ip != spec.sites[n.site].gateway.ip
    # The head and every worker of the lab fleet keep their place; the lab's policies come too.
    lab = load_fleet([str(p) for p in fleet_dirs("lab")]).fleet
    for name, node in lab.nodes.items():
        assert (lab_40.fleet.nodes[name].site, lab_40.fleet.nodes[name].address) == (node.site, node.address)
    assert lab_40.fleet.ray is not None
    write_lab_fleet(tmp_path, 5, ray=False)
    small = load_fleet([str(p) for p in convention_paths(tmp_path, "lab-5")])
    assert small.fleet.ray is None and len(small.fleet.nodes) == 5


def lab_analysis_sites() -> list[str]:
    return list(load_fleet([str(p) for p in fleet_dirs("lab")]).fleet.sites)


def test_a_lab_fleet_has_a_head_and_a_worker_at_least(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="2 to"):
        nodes_yaml(1)


def test_state_round_trip(lab_analysis) -> None:
    spec = lab_spec(lab_analysis)
    for site in spec.sites.values():
        assert LabSite.from_dict(site.as_dict()) == site
    for node in spec.nodes.values():
        assert LabNode.from_dict(node.as_dict()) == node


def test_wan_params_fill_missing_values_with_zero() -> None:
    assert wan_params({"latency_ms": 5}) == {
        "latency_ms": 5,
        "jitter_ms": 0,
        "loss_percent": 0,
        "bandwidth_mbit": 0,
    }
    assert wan_params(None)["latency_ms"] == 0


def test_host_mirror_reads_deb822_and_one_line_sources(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("SWARM_LAB_MIRROR", raising=False)
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n\n"
        "Types: deb\nURIs: http://mirror.example/debian/\nSuites: bookworm bookworm-updates\n"
    )
    assert image.host_mirror(tmp_path) == "http://mirror.example/debian"
    (tmp_path / "sources.list.d" / "debian.sources").unlink()
    (tmp_path / "sources.list").write_text("deb [arch=amd64] http://other.example/debian bookworm main\n")
    assert image.host_mirror(tmp_path) == "http://other.example/debian"
    (tmp_path / "sources.list").write_text("")
    assert image.host_mirror(tmp_path) == "http://deb.debian.org/debian"
    # sources.list(5): deb822 field names are case-insensitive; '#' lines are comments.
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "# the host's mirror\ntypes: deb\n# a comment inside the stanza\nuris: http://lower.example/debian\n"
        "suites: bookworm\ncomponents: main\n"
    )
    assert image.host_mirror(tmp_path) == "http://lower.example/debian"
    monkeypatch.setenv("SWARM_LAB_MIRROR", "http://env.example/debian/")
    assert image.host_mirror(tmp_path) == "http://env.example/debian"


def test_image_key_changes_with_the_package_list(monkeypatch) -> None:
    key = image.image_key("http://m/debian")
    assert key == image.image_key("http://m/debian")
    assert key != image.image_key("http://other/debian")
    monkeypatch.setattr(image, "PACKAGES", (*image.PACKAGES, "vim"))
    assert key != image.image_key("http://m/debian")


def _delay_line(latency_s: float, jitter_s: float, loss: float, packets: list[bytes]):
    """Run one DelayLine between datagram socket pairs (which keep packet boundaries, as a TUN
    device does); returns [(arrival offset in s, packet)]."""
    loop = asyncio.new_event_loop()
    src_in, src = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    dst, dst_out = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    for s in (src, dst, dst_out):
        s.setblocking(False)
    arrivals: list[tuple[float, bytes]] = []
    done = loop.create_future()

    def on_arrival() -> None:
        arrivals.append((loop.time() - start, dst_out.recv(65535)))
        if len(arrivals) == len(packets) and not done.done():
            done.set_result(None)

    DelayLine(loop, src.fileno(), dst.fileno(), latency_s, jitter_s, loss, random.Random(7))
    loop.add_reader(dst_out.fileno(), on_arrival)
    start = loop.time()
    for p in packets:
        src_in.send(p)
    if loss < 1:
        loop.run_until_complete(asyncio.wait_for(done, 5))
    else:
        loop.run_until_complete(asyncio.sleep(latency_s * 3))
    loop.close()
    for s in (src_in, src, dst, dst_out):
        s.close()
    return arrivals


def test_delay_line_holds_packets_for_the_latency_and_keeps_order() -> None:
    packets = [bytes([i]) * 20 for i in range(5)]
    arrivals = _delay_line(0.05, 0.01, 0.0, packets)
    assert [p for _, p in arrivals] == packets
    assert all(t >= 0.04 for t, _ in arrivals)


def test_delay_line_drops_everything_at_full_loss() -> None:
    assert _delay_line(0.01, 0.0, 1.0, [b"x" * 20, b"y" * 20]) == []
