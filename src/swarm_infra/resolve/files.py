"""The text of every file the project writes on a node, decided once for both engines.

The texts live beside their files, in their layer's module (:mod:`.layers`); this module
keeps the names the roles' filters (``plugins/filter/swarm.py``), the pyinfra deploys and
the node-side tools import. The Ansible roles write these strings and the pyinfra
deploys upload them, so a node converged by either engine holds the same bytes and the
other engine finds nothing to change. Each text function is pure: it takes NodeState
and, where a file depends on what only the nodes know (WireGuard public keys), that
knowledge; it returns the file's whole text, ending with a newline.

Errors: a NodeState missing the slice a file needs raises ``KeyError``/``TypeError``; the
engines only ask for a layer's files where NodeState declares that layer.
"""

from __future__ import annotations

from .layers import STATIC, layer_files, static_file, tunables_spec
from .layers.drivers import reboot_required
from .layers.host import (
    AGENT_BOOT_DELAY_S,
    AGENT_RUN_TIMEOUT_S,
    agent_config_text,
    agent_service_text,
    agent_timer_text,
    apt_cache_conf,
    apt_cache_detect,
)
from .layers.mesh import (
    wireguard_conf,
    wireguard_dropin_items,
    wireguard_peer_keys,
    wireguard_peers,
    wireguard_running_differs,
)
from .layers.ray import ray_firewall_rules
from .text import UnsafeValue, line_value

__all__ = [
    "AGENT_BOOT_DELAY_S",
    "AGENT_RUN_TIMEOUT_S",
    "STATIC",
    "UnsafeValue",
    "agent_config_text",
    "agent_service_text",
    "agent_timer_text",
    "apt_cache_conf",
    "apt_cache_detect",
    "layer_files",
    "line_value",
    "ray_firewall_rules",
    "reboot_required",
    "static_file",
    "tunables_spec",
    "wireguard_conf",
    "wireguard_dropin_items",
    "wireguard_peer_keys",
    "wireguard_peers",
    "wireguard_running_differs",
]
