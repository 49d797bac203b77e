"""Where the project's files live on a node, their owners and modes, and its unit names.

Decided once, by the layers (:mod:`.layers`: each layer's files with their paths, modes
and writers, under the directories of :mod:`.paths`), and carried in every NodeState
(``layout``): the Ansible roles, the pyinfra deploys, verification and the tests read
these values and never spell a path or a mode themselves.
"""

from __future__ import annotations

from functools import cache

from .layers import layout
from .paths import AGENT_LOCAL, TEXTFILE_DIR
from .types import LayoutState

__all__ = ["AGENT_LOCAL", "TEXTFILE_DIR", "node_layout"]


@cache
def node_layout(interface: str = "wg0") -> LayoutState:
    """The layout of a node whose mesh interface is ``interface`` (the WireGuard files and
    unit are named after it): every layer's files and units (:func:`.layers.layout`).
    Shared between nodes: do not modify the result.

    ``files`` (name -> ManagedPath):
      ``sysctl_conf``: sysctls of the HostProfile, read by systemd-sysctl at boot;
      ``mesh_sysctl_conf``: IP forwarding on relays and hubs;
      ``tmpfiles_conf``: hugepages, THP and CPU governor, written at boot by systemd-tmpfiles;
      ``state_dir``, ``host_tunables_record``, ``mesh_tunables_record``: each managed key's
      value before the project first set it, restored when the key is no longer declared;
      ``lib_dir``, ``gpu_code``: the node-side GPU code;
      ``etc_dir``, ``gpu_settings``: the desired GPU settings the re-apply unit reads;
      ``gpu_unit``: the boot-time re-apply unit;
      ``ray_venv``, ``ray_head_unit``, ``ray_worker_unit``: Ray in its own virtualenv and its
      units; ``ray_firewall_rules``, ``ray_firewall_unit``: Ray's ports kept off the underlay;
      ``ray_lock``, ``ray_index_ca``: the pip lock Ray installs from and the index's CA;
      ``ray_token_socket``, ``ray_token_service``: on a head serving pull workers, the socket
      on its mesh address and the per-connection service writing the token to it;
      ``wireguard_dir``, ``wireguard_key`` (the private key, never read back),
      ``wireguard_conf`` (no private key in it), ``wireguard_peers`` (public keys of peers);
      ``wireguard_dropin``: selects wireguard-go where the kernel has no WireGuard module;
      ``apt_cache_conf``, ``apt_cache_detect``: apt through the site's package cache while it
      answers, else straight to the mirror;
      ``apt_keyrings_dir``, ``driver_preferences``: the NVIDIA repositories' signing keys and
      the apt pin of the NVIDIA driver;
      ``nouveau_blacklist``: keeps nouveau off NVIDIA GPUs;
      ``reboot_required``: Debian's pending-reboot marker;
      ``mdadm_conf``, ``storage_record``: the scratch array for boot, and what scratch the
      project made (so that removing the declaration unmounts it);
      ``agent_dir``, ``agent_config``, ``agent_allowed_signers`` (the signers the node
      trusts: those of the last commit it applied), ``agent_revoked_signers`` (the keys it
      refuses whatever the signers say: git's gpg.ssh.revocationFile), ``agent_service``,
      ``agent_timer``: the pull agent, written by the host layer on pull nodes (its own
      files: :data:`AGENT_LOCAL`).
    ``units``: ``gpu_apply``, ``wireguard`` (wg-quick@IFACE), ``persistenced``,
    ``fabricmanager``, ``ray_head``, ``ray_worker``, ``ray_firewall``, ``ray_token_socket``,
    ``agent_service``, ``agent_timer``.
    """
    return layout(interface)
