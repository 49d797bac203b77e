"""The lab's networks: site routers with bridges, node links, WAN links, NAT.

Everything the lab adds to the host is named with the ``swl`` prefix (namespaces
``swl-site-*``/``swl-node-*``, host interfaces ``swl-*``, iptables chain ``SWARM-LAB``) so
``swarm lab down`` can find and remove it even without a state file. Deleting a namespace
deletes the veths in it, and with them their peers.
"""

from __future__ import annotations

import ipaddress
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

from .plan import PREFIX, LabNode, LabSite
from .system import LabError, process_argv, run

CHAIN = "SWARM-LAB"
NAT_CHAIN = "SWARM-LAB-NAT"  # inside a site router: emulated NAT for mesh.nat nodes
NETNS_DIR = Path("/run/netns")
IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")


def netns_exists(name: str) -> bool:
    return (NETNS_DIR / name).exists()


def lab_namespaces() -> list[str]:
    """Names of every lab network namespace on the host, state file or not."""
    if not NETNS_DIR.is_dir():
        return []
    return sorted(p.name for p in NETNS_DIR.iterdir() if p.name.startswith(f"{PREFIX}-"))


def lab_host_links() -> list[str]:
    """Names of lab interfaces in the host's namespace."""
    out = run(["ip", "-o", "link", "show"]).stdout
    names = [line.split(":", 2)[1].strip().split("@", 1)[0] for line in out.splitlines() if ":" in line]
    return [n for n in names if n.startswith(f"{PREFIX}-")]


def ensure_host_forwarding(networks: list[ipaddress.IPv4Network]) -> str | None:
    """Let the host route between sites and NAT the lab to the outside (the apt mirror).

    Enables ``net.ipv4.ip_forward`` (returns its previous value, to restore at ``down``; None
    when it was already on) and (re)writes the ``SWARM-LAB`` chains: lab traffic is accepted
    in FORWARD and masqueraded in POSTROUTING unless it stays inside the lab.
    """
    before = IP_FORWARD.read_text().strip()
    if before != "1":
        IP_FORWARD.write_text("1\n")
    for table, hook in (("filter", "FORWARD"), ("nat", "POSTROUTING")):
        if run(["iptables", "-t", table, "-n", "-L", CHAIN], check=False).returncode != 0:
            run(["iptables", "-t", table, "-N", CHAIN])
        run(["iptables", "-t", table, "-F", CHAIN])
        if run(["iptables", "-t", table, "-C", hook, "-j", CHAIN], check=False).returncode != 0:
            run(["iptables", "-t", table, "-I", hook, "1", "-j", CHAIN])
    comment = ["-m", "comment", "--comment", "swarm lab"]
    for net in networks:
        run(["iptables", "-A", CHAIN, "-s", str(net), "-j", "ACCEPT", *comment])
        run(["iptables", "-A", CHAIN, "-d", str(net), "-j", "ACCEPT", *comment])
        for inner in networks:
            run(["iptables", "-t", "nat", "-A", CHAIN, "-s", str(net), "-d", str(inner), "-j", "RETURN"])
        run(["iptables", "-t", "nat", "-A", CHAIN, "-s", str(net), "-j", "MASQUERADE", *comment])
    return None if before == "1" else before


def remove_host_forwarding(ip_forward_before: str | None) -> None:
    """Remove the ``SWARM-LAB`` chains and restore ``ip_forward`` if the lab changed it."""
    for table, hook in (("filter", "FORWARD"), ("nat", "POSTROUTING")):
        while run(["iptables", "-t", table, "-D", hook, "-j", CHAIN], check=False).returncode == 0:
            pass
        if run(["iptables", "-t", table, "-n", "-L", CHAIN], check=False).returncode == 0:
            run(["iptables", "-t", table, "-F", CHAIN])
            run(["iptables", "-t", table, "-X", CHAIN])
    if ip_forward_before is not None:
        IP_FORWARD.write_text(f"{ip_forward_before}\n")


def link_is_running(site: LabSite, pid: int | None) -> bool:
    """``pid`` is this site's WAN link process (checked by its command line, not just alive)."""
    argv = process_argv(pid)
    return b"swarm_infra.lab.wanlink" in argv and site.uplink_host.encode() in argv


def _start_link(site: LabSite, cgroup: Path, log: Path) -> int:
    """Start the site's WAN link process; returns its PID once both TUN devices exist."""
    wan = site.wan
    site_if = f"{site.uplink_host}s"
    with open(log, "a") as err:
        proc = subprocess.Popen(
            [
                "setsid",
                "-f",
                sys.executable,
                "-m",
                "swarm_infra.lab.wanlink",
                site.uplink_host,
                site_if,
                "--latency-ms",
                str(wan["latency_ms"]),
                "--jitter-ms",
                str(wan["jitter_ms"]),
                "--loss-percent",
                str(wan["loss_percent"]),
            ],
            stdout=subprocess.PIPE,
            stderr=err,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        proc.wait()
        proc.stdout.close()
    if len(line) != 2 or line[0] != "ready":
        raise LabError(f"the WAN link of site {site.name} did not start; see {log}")
    pid = int(line[1])
    cgroup.mkdir(parents=True, exist_ok=True)
    (cgroup / "cgroup.procs").write_text(f"{pid}\n")
    ns = site.netns
    run(["ip", "link", "set", "dev", site_if, "netns", ns])
    run(["ip", "link", "set", "dev", site_if, "name", "uplink"], netns=ns)
    run(["ip", "addr", "add", str(site.transit_host), "dev", site.uplink_host])
    run(["ip", "link", "set", site.uplink_host, "up"])
    run(["ip", "addr", "add", str(site.transit_site), "dev", "uplink"], netns=ns)
    run(["ip", "link", "set", "uplink", "up"], netns=ns)
    run(["ip", "route", "replace", "default", "via", str(site.transit_host.ip)], netns=ns)
    if wan["bandwidth_mbit"]:
        tbf = ["root", "tbf", "rate", f"{wan['bandwidth_mbit']}mbit", "burst", "64kb", "latency", "100ms"]
        run(["tc", "qdisc", "replace", "dev", site.uplink_host, *tbf])
        run(["tc", "qdisc", "replace", "dev", "uplink", *tbf], netns=ns)
    return pid


def stop_link(pid: int | None, site: LabSite) -> None:
    """Stop the site's WAN link process (its TUN devices, addresses and routes go with it)."""
    if link_is_running(site, pid):
        assert pid is not None
        os.kill(pid, signal.SIGTERM)
        wait_exit(pid, 10)


def ensure_site(
    site: LabSite, link_pid: int | None, cgroup: Path, log: Path, source: ipaddress.IPv4Address
) -> tuple[bool, int]:
    """Create the site's router namespace and bridge if missing, and (re)start its WAN link
    if it is not running or its ``wan`` changed. Returns (created, WAN link PID).

    ``source``: the host's one "internet" address (the lab's service address, which holds the
    controller's endpoint): what the host sends to the site from (:func:`_route_from`).

    Idempotent: an existing site with a running link is left as it is, so running nodes keep
    their links; a changed ``wan`` restarts only the link process, never the bridge.
    """
    created = False
    ns = site.netns
    if not netns_exists(ns):
        created = True
        run(["ip", "netns", "add", ns])
        run(["ip", "link", "set", "lo", "up"], netns=ns)
        run(["ip", "link", "add", "br0", "type", "bridge"], netns=ns)
        run(["ip", "addr", "add", str(site.gateway), "dev", "br0"], netns=ns)
        run(["ip", "link", "set", "br0", "up"], netns=ns)
        # Per-namespace: lets the site router route, never touches the host's setting.
        run(["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"], netns=ns)
    started = created or not link_is_running(site, link_pid)
    if started:
        stop_link(link_pid, site)
        link_pid = _start_link(site, cgroup, log)
    assert link_pid is not None
    _route_from(site, source)
    return started, link_pid


def _route_from(site: LabSite, source: ipaddress.IPv4Address) -> None:
    """Send what the host sends to the site (its public address, the router's uplink end,
    and its CIDR) from ``source``, as a host on the internet with one address does.

    Without it the kernel picks the transit link's own address, and a NAT'd node's tunnel to
    the controller breaks whenever the controller's WireGuard forgets the source it last
    answered from: wireguard-go clears that "sticky" source on a rebind (every ``wg
    syncconf`` that names ``ListenPort``: device/device.go ``BindUpdate``; reproduced with
    ``wg set IFACE listen-port`` of the same port) and, as its route listener may
    (device/sticky_linux.go), at times the lab did not pin down (gaps during converges that
    changed nothing on the controller). Its next packet then leaves from the transit address;
    the site's NAT holds a mapping for the endpoint address only and drops it as a new
    inbound flow, and the node is cut off until its own next keepalive or handshake (up to
    PersistentKeepalive, 25 s; the lab saw 15 s gaps and a failed converge)."""
    via = str(site.transit_site.ip)
    run(["ip", "route", "replace", f"{via}/32", "dev", site.uplink_host, "src", str(source)])
    run(["ip", "route", "replace", str(site.cidr), "via", via, "dev", site.uplink_host, "src", str(source)])


def ensure_site_nat(site: LabSite, nat_nodes: list[LabNode]) -> None:
    """(Re)write the emulated NAT in the site router for the site's ``mesh.nat`` nodes.

    Outbound: SNAT to the router's uplink address. Inbound from outside the site: replies
    only. A provider's real NAT: nothing outside opens a connection to the nodes, the
    controller included; the lab reaches them by pull first, then over the mesh (lab/join.py).
    """
    ns = site.netns
    for table, hook in (("filter", "FORWARD"), ("nat", "POSTROUTING")):
        if run(["iptables", "-t", table, "-n", "-L", NAT_CHAIN], netns=ns, check=False).returncode != 0:
            run(["iptables", "-t", table, "-N", NAT_CHAIN], netns=ns)
            run(["iptables", "-t", table, "-A", hook, "-j", NAT_CHAIN], netns=ns)
        run(["iptables", "-t", table, "-F", NAT_CHAIN], netns=ns)
    for node in nat_nodes:
        ip = str(node.address.ip)
        run(
            [
                "iptables",
                "-t",
                "nat",
                "-A",
                NAT_CHAIN,
                "-s",
                ip,
                "-o",
                "uplink",
                "-j",
                "SNAT",
                "--to-source",
                str(site.transit_site.ip),
            ],
            netns=ns,
        )
        base = ["iptables", "-A", NAT_CHAIN, "-i", "uplink", "-d", ip]
        run([*base, "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"], netns=ns)
        run([*base, "-j", "DROP"], netns=ns)


def remove_site(site: LabSite, link_pid: int | None) -> None:
    """Stop the site's WAN link and delete its router namespace (bridge and node links go too)."""
    stop_link(link_pid, site)
    if netns_exists(site.netns):
        run(["ip", "netns", "del", site.netns])
    run(["ip", "route", "del", str(site.cidr)], check=False)


def wait_exit(pid: int, timeout: float) -> bool:
    """Block until process ``pid`` exits (pidfd, no polling); False on timeout."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(timeout * 1000))
    finally:
        os.close(fd)


def ensure_node_link(node: LabNode, site: LabSite) -> None:
    """Create the node's network namespace with ``eth0`` on the site bridge, addressed and routed.

    Called before the node boots; the node's systemd manages no network, so this stays.
    """
    ns = node.netns
    remove_namespace(ns)
    run(["ip", "link", "del", node.veth], netns=site.netns, check=False)
    run(["ip", "netns", "add", ns])
    run(
        [
            "ip",
            "link",
            "add",
            node.veth,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "address",
            node.mac,
            "netns",
            ns,
        ],
        netns=site.netns,
    )
    run(["ip", "link", "set", node.veth, "master", "br0", "up"], netns=site.netns)
    run(["ip", "link", "set", "lo", "up"], netns=ns)
    run(["ip", "addr", "add", str(node.address), "dev", "eth0"], netns=ns)
    run(["ip", "link", "set", "eth0", "up"], netns=ns)
    run(["ip", "route", "add", "default", "via", str(node.gateway)], netns=ns)


def remove_namespace(name: str) -> None:
    if netns_exists(name):
        run(["ip", "netns", "del", name])
