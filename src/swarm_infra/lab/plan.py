"""What the lab should look like for a fleet: sites, nodes, names and addresses.

Pure data, no side effects, so it is unit-tested without root. Layout (one host, no cloud)::

    host (the "core" of the WAN; routes between sites, NATs to the apt mirror)
     ├─ swl-<hash8>  ══ TUN pair + delay line (wanlink.py) = the site's WAN link ══  uplink
     │                                                   site router netns swl-site-<site>
     │                                                    └─ br0 (gateway address) ── n-<hash8>
     │                                                                               ══ eth0 of
     │                                                                     node netns swl-node-<node>
     └─ ... one site router per Site

Intra-site traffic stays on the site's bridge; anything leaving the site crosses its WAN link,
so a site with ``wan.latency_ms: L`` (one-way, per the Site schema) adds 2 L to every
round trip with another site or the host. Nodes with ``mesh.nat: true`` sit behind a NAT in
their site router: outbound traffic leaves with the router's uplink address and connections
from other sites are dropped (the host, playing the controller, may still connect).
"""

from __future__ import annotations

import hashlib
import ipaddress
from dataclasses import dataclass
from typing import Any

from ..resolve.analysis import Analysis

# RFC 2544 benchmarking range: never routed on the Internet, unlikely in a real fleet.
TRANSIT = ipaddress.IPv4Network("198.18.0.0/15")
PREFIX = "swl"


def _h8(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:8]


@dataclass(frozen=True, slots=True)
class LabSite:
    """A site as a router namespace holding a bridge, linked to the host by its WAN veth."""

    name: str
    cidr: ipaddress.IPv4Network
    gateway: ipaddress.IPv4Interface  # on br0, e.g. 10.77.1.1/24
    transit_host: ipaddress.IPv4Interface  # host end of the WAN link, /30
    transit_site: ipaddress.IPv4Interface  # site router end of the WAN link, /30
    wan: dict[str, float]  # latency_ms, jitter_ms, loss_percent, bandwidth_mbit (0: none)
    netns: str
    uplink_host: str  # interface name on the host (<= 15 characters)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "cidr": str(self.cidr),
            "gateway": str(self.gateway),
            "transit_host": str(self.transit_host),
            "transit_site": str(self.transit_site),
            "wan": dict(self.wan),
            "netns": self.netns,
            "uplink_host": self.uplink_host,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LabSite:
        """Inverse of :meth:`as_dict` (for a state file)."""
        return cls(
            name=d["name"],
            cidr=ipaddress.IPv4Network(d["cidr"]),
            gateway=ipaddress.IPv4Interface(d["gateway"]),
            transit_host=ipaddress.IPv4Interface(d["transit_host"]),
            transit_site=ipaddress.IPv4Interface(d["transit_site"]),
            wan=dict(d["wan"]),
            netns=d["netns"],
            uplink_host=d["uplink_host"],
        )


@dataclass(frozen=True, slots=True)
class LabNode:
    """A node as a system container: its own network namespace on its site's bridge."""

    name: str
    site: str
    address: ipaddress.IPv4Interface  # eth0, e.g. 10.77.1.11/24
    gateway: ipaddress.IPv4Address
    nat: bool
    ssh_user: str
    ssh_port: int
    netns: str
    veth: str  # the node link's end on the site bridge (in the site namespace)
    # Declared NVMe devices: (path in the node, size in GiB), each a loop device in the lab.
    nvme: tuple[tuple[str, int], ...] = ()

    @property
    def mac(self) -> str:
        """eth0's MAC address: locally administered, unicast, derived from the name, so a
        node restarted on a new link keeps it and its neighbours' ARP caches stay right."""
        h = hashlib.sha256(f"mac:{self.name}".encode()).hexdigest()
        return "02:" + ":".join(h[i : i + 2] for i in range(0, 10, 2))

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "site": self.site,
            "address": str(self.address),
            "gateway": str(self.gateway),
            "nat": self.nat,
            "ssh_user": self.ssh_user,
            "ssh_port": self.ssh_port,
            "netns": self.netns,
            "veth": self.veth,
            "nvme": [list(d) for d in self.nvme],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LabNode:
        """Inverse of :meth:`as_dict` (extra keys of a state file are ignored)."""
        return cls(
            name=d["name"],
            site=d["site"],
            address=ipaddress.IPv4Interface(d["address"]),
            gateway=ipaddress.IPv4Address(d["gateway"]),
            nat=d["nat"],
            ssh_user=d["ssh_user"],
            ssh_port=d["ssh_port"],
            netns=d["netns"],
            veth=d["veth"],
            nvme=tuple((path, size) for path, size in d.get("nvme", [])),
        )


@dataclass(frozen=True, slots=True)
class LabSpec:
    sites: dict[str, LabSite]
    nodes: dict[str, LabNode]

    def networks(self) -> list[ipaddress.IPv4Network]:
        """Every network the lab routes: site underlays and the transit range."""
        return [TRANSIT, *(s.cidr for s in self.sites.values())]


def wan_params(wan: Any) -> dict[str, float]:
    """A Site's ``wan`` block with every emulated parameter present (0 = not emulated)."""
    wan = dict(wan or {})
    return {k: wan.get(k, 0) for k in ("latency_ms", "jitter_ms", "loss_percent", "bandwidth_mbit")}


def _transit_slots(names: list[str]) -> dict[str, int]:
    """A /30 of TRANSIT per site, chosen by hash of the name so that adding a site never
    moves another one's (linear probing on collision, in name order)."""
    slots = TRANSIT.num_addresses // 4
    taken: dict[int, str] = {}
    out = {}
    for name in sorted(names):
        slot = int(_h8(name), 16) % slots
        while slot in taken:
            slot = (slot + 1) % slots
        taken[slot] = name
        out[name] = slot
    return out


def lab_spec(analysis: Analysis) -> LabSpec:
    """The lab for a validated fleet: every declared site and node (a bigger lab is a bigger
    fleet: :mod:`swarm_infra.lab.fleet`)."""
    fleet = analysis.fleet
    slots = _transit_slots(list(fleet.sites))
    sites: dict[str, LabSite] = {}
    for site in fleet.sites.values():
        hosts = site.underlay.hosts()
        gateway = site.gateway or next(iter(hosts))
        base = TRANSIT.network_address + 4 * slots[site.name]
        sites[site.name] = LabSite(
            name=site.name,
            cidr=site.underlay,
            gateway=ipaddress.IPv4Interface(f"{gateway}/{site.underlay.prefixlen}"),
            transit_host=ipaddress.IPv4Interface(f"{base + 1}/30"),
            transit_site=ipaddress.IPv4Interface(f"{base + 2}/30"),
            wan=wan_params(site.wan),
            netns=f"{PREFIX}-site-{site.name}",
            uplink_host=f"{PREFIX}-{_h8(site.name)}",
        )

    def lab_node(
        name: str,
        site: str,
        address: ipaddress.IPv4Address,
        nat: bool,
        user: str,
        port: int,
        nvme: tuple[tuple[str, int], ...] = (),
    ) -> LabNode:
        s = sites[site]
        return LabNode(
            name=name,
            site=site,
            address=ipaddress.IPv4Interface(f"{address}/{s.cidr.prefixlen}"),
            gateway=s.gateway.ip,
            nat=nat,
            ssh_user=user,
            ssh_port=port,
            netns=f"{PREFIX}-node-{name}",
            veth=f"n-{_h8(name)}",
            nvme=nvme,
        )

    out = {
        n.name: lab_node(n.name, n.site, n.address, n.nat, n.ssh_user, n.ssh_port, nvme=n.nvme)
        for n in fleet.nodes.values()
    }
    return LabSpec(sites, out)
