"""The Debian packages each node layer installs, decided once for both engines.

The Ansible roles take them as their defaults (``swarm_packages`` filter) and the pyinfra
deploys read them here, so either engine installs the same set.
"""

from __future__ import annotations

# layer -> Debian packages (apt), installed without recommends.
PACKAGES: dict[str, list[str]] = {
    # wg(8) and wg-quick(8); wireguard-go where the kernel has no WireGuard module.
    "wireguard": ["wireguard-tools"],
    # iperf3, with which `swarm metrics run` measures the mesh and the underlay (Debian's
    # package leaves its daemon off); installed with the mesh.
    "mesh_tools": ["iperf3"],
    "wireguard_userspace": ["wireguard-go"],
    # Ray's virtualenv (python3 -m venv), nftables for Ray's firewall, and packaging, which
    # Ansible's pip module needs to compare versions.
    "ray": ["python3-venv", "nftables", "python3-packaging"],
    # fio, with which `swarm metrics run` measures scratch storage.
    "storage_tools": ["fio"],
    # mdadm for scratch RAID 0.
    "storage_raid": ["mdadm"],
}
# The package that makes each scratch filesystem.
FILESYSTEM_PACKAGES: dict[str, str] = {"xfs": "xfsprogs", "ext4": "e2fsprogs"}


def packages(layer: str) -> list[str]:
    """The packages of ``layer`` (a key of :data:`PACKAGES`); raises KeyError otherwise."""
    return list(PACKAGES[layer])
