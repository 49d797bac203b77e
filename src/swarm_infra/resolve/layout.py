"""Where the project's files live on a node, their owners and modes, and its unit names.

Decided here once and carried in every NodeState (``layout``): the Ansible roles, the
pyinfra deploys, verification and the tests read these values and never spell a path or
a mode themselves. Paths follow the FHS and each tool's own convention: sysctl.d(5) and
tmpfiles.d(5) drop-ins, ``/etc/wireguard`` for wg-quick(8), apt_preferences(5),
modprobe.d(5), systemd unit and drop-in directories.
"""

from __future__ import annotations

from functools import cache

from .types import LayoutState, ManagedPath

LIB_DIR = "/usr/local/lib/swarm"  # code the project installs on the node
ETC_DIR = "/etc/swarm"  # settings the project persists on the node
STATE_DIR = "/var/lib/swarm"  # what the project records on the node (values before it set them)
WIREGUARD_DIR = "/etc/wireguard"
UNIT_DIR = "/etc/systemd/system"
AGENT_DIR = f"{ETC_DIR}/agent"  # the pull agent's settings, trusted signers and deploy key
AGENT_STATE_DIR = f"{STATE_DIR}/agent"  # its clone of the fleet, work trees, status
# node_exporter's textfile collector directory (--collector.textfile.directory), the one
# swarm metrics writes its textfile to (swarm_infra.metrics.prometheus.TEXTFILE_PATH).
TEXTFILE_DIR = "/var/lib/node_exporter/textfile_collector"
# The unprivileged system user Ray and its jobs run as (sysusers.d(5) makes it, from the
# Ray layer's file): no job can read root's files (/etc/wireguard, the Ray token itself).
RAY_USER = "swarm-ray"


def _file(path: str, mode: str = "0644") -> ManagedPath:
    return {"path": path, "type": "file", "owner": "root", "group": "root", "mode": mode}


def _dir(path: str, mode: str = "0755") -> ManagedPath:
    return {"path": path, "type": "directory", "owner": "root", "group": "root", "mode": mode}


# The pull agent's own files on a pull node, which no layer writes: ``agent_deploy_key`` (an
# ssh remote's key, 0600, from swarm node bootstrap; never read back nor logged),
# ``agent_known_hosts`` (the Git server's host key), ``agent_pause`` (while it exists the
# agent does nothing), ``agent_state_dir`` (the clone of the fleet, work trees),
# ``agent_status`` (the last run's report, JSON), ``agent_textfile`` (the same for
# node_exporter), ``agent_venv`` (where the provider installed the package; the service runs
# its ``swarm``).
AGENT_LOCAL: dict[str, ManagedPath] = {
    "agent_deploy_key": _file(f"{AGENT_DIR}/deploy_key", "0600"),
    "agent_known_hosts": _file(f"{AGENT_DIR}/known_hosts"),
    "agent_pause": _file(f"{AGENT_DIR}/paused"),
    "agent_state_dir": _dir(AGENT_STATE_DIR, "0700"),
    "agent_status": _file(f"{AGENT_STATE_DIR}/status.json"),
    "agent_textfile": _file(f"{TEXTFILE_DIR}/swarm_agent.prom"),
    "agent_venv": _dir(f"{LIB_DIR}/agent-venv"),
}


@cache
def node_layout(interface: str = "wg0") -> LayoutState:
    """The layout of a node whose mesh interface is ``interface`` (the WireGuard files and
    unit are named after it). Shared between nodes: do not modify the result.

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
      ``agent_timer``: the
      pull agent, written by the host layer on pull nodes (its own files: :data:`AGENT_LOCAL`).
    ``units``: ``gpu_apply``, ``wireguard`` (wg-quick@IFACE), ``persistenced``,
    ``fabricmanager``, ``ray_head``, ``ray_worker``, ``ray_firewall``, ``ray_token_socket``,
    ``agent_service``, ``agent_timer``.
    """
    wg_unit = f"wg-quick@{interface}"
    return {
        "files": {
            "sysctl_conf": _file("/etc/sysctl.d/90-swarm.conf"),
            "mesh_sysctl_conf": _file("/etc/sysctl.d/90-swarm-mesh.conf"),
            "tmpfiles_conf": _file("/etc/tmpfiles.d/swarm-host-tuning.conf"),
            "state_dir": _dir(STATE_DIR),
            "host_tunables_record": _file(f"{STATE_DIR}/tunables-host.json"),
            "mesh_tunables_record": _file(f"{STATE_DIR}/tunables-mesh.json"),
            "lib_dir": _dir(LIB_DIR),
            "gpu_code": _file(f"{LIB_DIR}/swarm_gpu_node.py"),
            "etc_dir": _dir(ETC_DIR),
            "gpu_settings": _file(f"{ETC_DIR}/gpu-settings.json"),
            "gpu_unit": _file(f"{UNIT_DIR}/swarm-gpu-apply.service"),
            "ray_venv": _dir(f"{LIB_DIR}/ray-venv"),
            "ray_head_unit": _file(f"{UNIT_DIR}/ray-head.service"),
            "ray_worker_unit": _file(f"{UNIT_DIR}/ray-worker.service"),
            "ray_firewall_rules": _file(f"{ETC_DIR}/ray-firewall.nft"),
            "ray_firewall_unit": _file(f"{UNIT_DIR}/swarm-ray-firewall.service"),
            # The head's token for pull workers: socket (Accept=yes) and its service template.
            "ray_token_socket": _file(f"{UNIT_DIR}/swarm-ray-token.socket"),
            "ray_token_service": _file(f"{UNIT_DIR}/swarm-ray-token@.service"),
            "ray_sysusers": _file(f"/etc/sysusers.d/{RAY_USER}.conf"),
            # The pip lock Ray's virtualenv installs from (hashes), and the index's private CA.
            "ray_lock": _file(f"{ETC_DIR}/ray-requirements.lock"),
            "ray_index_ca": _file(f"{ETC_DIR}/ray-index-ca.pem"),
            # Ray's token (RAY_AUTH_MODE=token): made on the head, copied to the members,
            # root's only; the units read it as a systemd credential. Never read back.
            "ray_auth_token": _file(f"{ETC_DIR}/ray-auth-token", "0600"),
            "wireguard_dir": _dir(WIREGUARD_DIR, "0700"),
            "wireguard_key": _file(f"{WIREGUARD_DIR}/{interface}.key", "0600"),
            "wireguard_conf": _file(f"{WIREGUARD_DIR}/{interface}.conf", "0600"),
            "wireguard_peers": _file(f"{WIREGUARD_DIR}/peers.json"),
            "wireguard_dropin_dir": _dir(f"{UNIT_DIR}/{wg_unit}.service.d"),
            "wireguard_dropin": _file(f"{UNIT_DIR}/{wg_unit}.service.d/userspace.conf"),
            "apt_keyrings_dir": _dir("/etc/apt/keyrings"),
            # apt.conf(5): the site's package cache, used while it answers (the detect script).
            "apt_cache_conf": _file("/etc/apt/apt.conf.d/80swarm-package-cache"),
            "apt_cache_detect": _file(f"{LIB_DIR}/apt-proxy-detect", "0755"),
            "driver_preferences": _file("/etc/apt/preferences.d/swarm-nvidia-driver"),
            "nouveau_blacklist": _file("/etc/modprobe.d/swarm-blacklist-nouveau.conf"),
            # Debian's marker for a pending reboot (update-notifier, needrestart read it).
            "reboot_required": _file("/run/reboot-required"),
            # mdadm.conf(5): arrays assembled at boot; the record of the scratch the project made.
            "mdadm_conf": _file("/etc/mdadm/mdadm.conf"),
            "storage_record": _file(f"{STATE_DIR}/storage.json"),
            "agent_dir": _dir(AGENT_DIR, "0700"),
            "agent_config": _file(f"{AGENT_DIR}/agent.json"),
            "agent_allowed_signers": _file(f"{AGENT_DIR}/allowed_signers"),
            "agent_revoked_signers": _file(f"{AGENT_DIR}/revoked_signers"),
            "agent_service": _file(f"{UNIT_DIR}/swarm-agent.service"),
            "agent_timer": _file(f"{UNIT_DIR}/swarm-agent.timer"),
        },
        "units": {
            "gpu_apply": "swarm-gpu-apply.service",
            "wireguard": wg_unit,
            "persistenced": "nvidia-persistenced.service",
            "fabricmanager": "nvidia-fabricmanager.service",
            "ray_head": "ray-head.service",
            "ray_worker": "ray-worker.service",
            "ray_firewall": "swarm-ray-firewall.service",
            "ray_token_socket": "swarm-ray-token.socket",
            "agent_service": "swarm-agent.service",
            "agent_timer": "swarm-agent.timer",
        },
    }
