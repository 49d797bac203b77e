"""The packet filter of the controller's mesh interface: what a mesh peer may reach on the
controller (``swarm mesh controller-up`` applies it: :mod:`swarm_infra.engines.controller`).

A node is trusted with itself only (DESIGN.md, trust model), and mesh membership grants the
mesh, nothing more. The controller serves nothing to the nodes over the mesh: every
exchange with a node is one the controller starts (push mode's and verify's SSH, the
metrics' SSH, ``swarm status`` reading a node's report page, ``swarm lab up``'s ping), the
nodes' Git server and package caches are on the underlay (the lab's ``SERVICE_ADDRESS``,
``lab/mirror.py``), and WireGuard itself runs over the underlay (UDP to the controller's
``endpoint``), never through its own interface. So a packet arriving on the mesh interface
is accepted only when conntrack ties it to a flow the controller started
(``established``: the replies; ``related``: the ICMP errors of those flows, path MTU
discovery's "fragmentation needed" among them), and a peer's ping to the controller itself
is answered (rate-limited: how a node, the NAT'd one first, checks its tunnel); every new
connection a peer opens to the controller, and every packet a peer asks the controller to
forward, is dropped. Other
interfaces are not touched (the chains' policy is accept): the operator's own SSH, the
lab's namespaces and their NAT keep working.
"""

from __future__ import annotations

import re

from .controller import ControllerState
from .files import UnsafeValue

TABLE = "swarm"
"""The nftables table (family ``inet``: IPv4 and IPv6) that holds the filter; the
project's own name, so that no other tool's table is flushed with it."""

PING_RATE = "5/second"
"""How many echo requests a second the controller answers over the mesh, from all peers
together (nftables ``limit rate``, wiki "Rate limiting matchings"): a peer may check that
its tunnel to the controller is up (a NAT'd node's first packet, an operator's ping), and
that is all an answer tells it; the rest of the flood is dropped."""

_IFNAME = re.compile(r"[a-z][a-z0-9]{0,14}")  # schemas/mesh.schema.json controller.interface


def controller_mesh_ruleset(state: ControllerState) -> str:
    """The nft script (``nft -f``) of the filter on the controller's mesh interface
    (``state["interface"]``): one transaction that creates table ``inet swarm`` when absent,
    deletes it and defines it whole, so a second run leaves the same table (idempotent) and
    no packet ever sees half of it (nft(8) applies a file atomically: "nft -f" and the
    nftables wiki, "Atomic rule replacement"; the ``table``/``delete table`` pair is the
    wiki's idiom for replacing one table without touching the others, "Scripting").

    Chains (nftables wiki, "Configuring chains": base chains of type ``filter`` on the
    ``input`` and ``forward`` hooks at priority ``filter``, policy ``accept``):
    ``input`` answers a peer's ping (ICMP and ICMPv6 echo requests to the controller
    itself, at most :data:`PING_RATE`: a node checks its tunnel with it) and, with
    ``forward``, sends the rest of what arrives on the mesh interface to ``mesh``, which
    accepts ``ct state established,related`` (wiki, "Matching connection tracking stateful
    metainformation") and drops the rest, counted. The interface is matched by name
    (``iifname``, wiki "Matching packet metainformation"), not by index (``iif``): the
    rule holds before the interface exists and after it is deleted and made again (a
    wireguard-go restart), where an index would silently match nothing.

    Raises :class:`UnsafeValue` for an interface name that is not one the schema admits
    (it is written inside the script)."""
    iface = state["interface"]
    if not _IFNAME.fullmatch(iface):
        raise UnsafeValue(f"the controller's interface name {iface!r} is not [a-z][a-z0-9]{{0,14}}")
    return "\n".join(
        [
            "#!/usr/sbin/nft -f",
            f"# Managed by swarm (swarm mesh controller-up): the filter of {iface}, the controller's",
            "# mesh interface. Peers reach only the replies to what the controller starts.",
            f"table inet {TABLE}",
            f"delete table inet {TABLE}",
            f"table inet {TABLE} {{",
            "\tchain input {",
            "\t\ttype filter hook input priority filter; policy accept;",
            f'\t\tiifname "{iface}" icmp type echo-request limit rate {PING_RATE} accept',
            f'\t\tiifname "{iface}" icmpv6 type echo-request limit rate {PING_RATE} accept',
            f'\t\tiifname "{iface}" jump mesh',
            "\t}",
            "",
            "\tchain forward {",
            "\t\ttype filter hook forward priority filter; policy accept;",
            f'\t\tiifname "{iface}" jump mesh',
            "\t}",
            "",
            "\tchain mesh {",
            "\t\tct state established,related accept",
            "\t\tcounter drop",
            "\t}",
            "}",
            "",
        ]
    )
