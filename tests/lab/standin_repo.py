"""A local stand-in for NVIDIA's apt repository (no NVIDIA repository is reachable here).

Real ``.deb`` files built with ``dpkg-deb`` and indexed with ``dpkg-scanpackages``, carrying
the names and version lines of NVIDIA's Debian 12 packages but no driver: the
``nvidia-persistenced`` stand-in ships a unit that only sleeps. What this proves is the
role's apt handling (pin, versioned install, hold, upgrade through the hold, service,
reboot marker), not a real driver install.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

# name -> versions published; 575 is a newer branch the pin must keep out. The names of
# NVIDIA's compute-only set (swarm_infra.resolve.drivers.PINNED["nvidia-cuda"]), and
# libnvidia-ml1, which Debian's python3-pynvml (bookworm contrib, installed from the real
# mirror) depends on.
_DRIVER = ["570.86.15-1", "570.124.06-1", "575.51.03-1"]
PACKAGES = {
    "nvidia-driver-cuda": _DRIVER,
    "nvidia-kernel-open-dkms": _DRIVER,
    "nvidia-persistenced": _DRIVER,
    "libnvidia-ml1": _DRIVER,
    "nvidia-container-toolkit": ["1.17.4-1"],
}
UNIT = """[Unit]
Description=NVIDIA Persistence Daemon (swarm stand-in: sleeps, no driver)

[Service]
ExecStart=/bin/sleep infinity

[Install]
WantedBy=multi-user.target
"""


def _deb(out: Path, name: str, version: str) -> None:
    root = out / f"build-{name}-{version}"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN/control").write_text(
        f"Package: {name}\nVersion: {version}\nArchitecture: all\n"
        "Maintainer: swarm tests <tests@swarm.invalid>\n"
        f"Description: stand-in for NVIDIA's {name} (no driver inside)\n"
    )
    doc = root / "usr/share/doc" / name
    doc.mkdir(parents=True)
    (doc / "STAND-IN").write_text(f"{name} {version}: swarm test stand-in\n")
    if name == "nvidia-persistenced":
        unit_dir = root / "lib/systemd/system"
        unit_dir.mkdir(parents=True)
        (unit_dir / "nvidia-persistenced.service").write_text(UNIT)
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "-b", str(root), str(out / f"{name}_{version}_all.deb")],
        check=True,
        capture_output=True,
    )


KEY_FILE = "standin-key.asc"


def build(out: Path) -> Path:
    """Build the flat repository in ``out``; returns ``out`` (holding ``Packages`` and debs)."""
    out.mkdir(parents=True, exist_ok=True)
    for name, versions in PACKAGES.items():
        for version in versions:
            _deb(out, name, version)
    index = subprocess.run(
        ["dpkg-scanpackages", "--multiversion", "."], cwd=out, check=True, capture_output=True
    ).stdout
    (out / "Packages").write_bytes(index)
    # The role fetches every source's signing key (NodeState's AptSource requires one); this
    # repository is unsigned and listed [trusted=yes], so its "key" is a placeholder file.
    (out / KEY_FILE).write_text("# placeholder: the stand-in repository is unsigned ([trusted=yes])\n")
    return out
