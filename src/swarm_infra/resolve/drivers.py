"""The NVIDIA driver stack of a node, per declared source, and what the node itself decides.

Two parts:

* :func:`driver_state`: NodeState.gpu.driver from a GpuProfile's ``driver`` block (pure, no
  node facts): the packages pinned at the driver's version and held, the packages outside
  the pin, NVIDIA's apt sources, the Debian components the packages come from, Fabric
  Manager for NVSwitch boards.
* :func:`driver_plan`: what the drivers layer does on one node, from one probe of the node
  (:data:`NODE_PROBE`, run by both engines, parsed here): the apt sources to add or to drop
  (adopting a source the node already has for the same repository), the kernel headers,
  and the refusals made before anything is installed (Secure Boot without an enrolled DKMS
  key, a different NVIDIA source, no Debian source to add components to).

Sources of the package sets:

* ``nvidia-cuda``: NVIDIA's CUDA repository for Debian 12, the compute-only set of NVIDIA's
  Driver Installation Guide ("Compute-only (Headless) and Desktop-only (no Compute)
  Installation", Debian: ``apt install nvidia-driver-cuda nvidia-kernel-open-dkms``: the
  open kernel modules, NVIDIA's default since R560); ``nvidia-driver-cuda`` carries
  ``nvidia-smi``, NVML and libcuda (NVIDIA's index declares it conflicting with a separate
  ``nvidia-smi``, so that one is not named); ``nvidia-persistenced``; ``nvidia-fabricmanager``
  at exactly the driver's version where the node has NVSwitch (Fabric Manager User Guide:
  "the Fabric Manager package version must match the driver version").
* ``debian``: Debian 12's own packages (bookworm ``non-free``, ``contrib`` and
  ``non-free-firmware``), from the archive's Packages files
  (http://deb.debian.org/debian/dists/bookworm/{non-free,contrib,non-free-firmware}/binary-amd64/Packages.xz;
  the relevant stanzas are kept in ``tests/data/debian/bookworm-nvidia.Packages``). Bookworm
  has no open kernel module package, so ``nvidia-kernel-dkms``; the versioned set
  (``Source: nvidia-graphics-drivers``) is pinned, while ``nvidia-persistenced`` (contrib,
  its own version line, 535.171.04) is not.
* Both: ``python3-pynvml`` (bookworm contrib 11.525.112-1, ``Depends: libnvidia-ml1 | ... |
  libnvidia-ml.so.1``) for the node-side GPU code, which imports pynvml; the kernel headers
  of the running kernel and the ``linux-headers-<flavour>`` meta package (DKMS builds the
  module for every kernel whose headers are installed, and skips a kernel without them).

The container runtime has one owner, :data:`CONTAINER_RUNTIME_OWNER`: the GPU Operator's
toolkit, never the node layer. The node layer installs no NVIDIA Container Toolkit and
removes the one an earlier converge installed (:data:`TOOLKIT_PACKAGES`, with our former apt
source); see :func:`container_runtime_problems` for the rule both layers are held to.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, TypedDict

from .catalog import gpu_catalog
from .layout import node_layout
from .types import AptSource, DriverState

# The sources a GpuProfile's driver may come from (schemas/gpuprofile.schema.json).
SOURCES = ("nvidia-cuda", "debian")
DEBIAN_SUITE = "bookworm"
# The one driver branch bookworm non-free publishes (nvidia-graphics-drivers 535.x).
DEBIAN_BRANCH = "535"
NVIDIA_CUDA_REPO = "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/"
NVIDIA_TOOLKIT_REPO = "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)"
# NVIDIA's CUDA repository (driver packages).
CUDA_SOURCE = ("nvidia-cuda", f"{NVIDIA_CUDA_REPO}3bf863cc.pub", f"{NVIDIA_CUDA_REPO} /")
# The libnvidia-container repository (the container toolkit,
# https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html),
# as earlier converges added it: now only dropped where a node still has our entry.
TOOLKIT_SOURCE = ("nvidia-container-toolkit", "https://nvidia.github.io/libnvidia-container/gpgkey",
                  f"{NVIDIA_TOOLKIT_REPO} /")  # fmt: skip

# Who configures containerd for the NVIDIA runtime (and writes the CDI spec) on the fleet's
# Kubernetes GPU nodes: the GPU Operator's toolkit (``toolkit.enabled: true``, ``cdi.enabled:
# true``; engines/pulumi gpu_operator_values follows this). Why the Operator and not the node
# layer: it is the Operator's default and NVIDIA's documented path for nodes whose driver is
# pre-installed ("Install NVIDIA GPU Operator", chart option driver.enabled=false with the
# toolkit left to the Operator); it writes the containerd config of the Kubernetes
# distribution it runs on (its toolkit.env: CONTAINERD_CONFIG, CONTAINERD_SOCKET) and restarts
# containerd itself; its toolkit is the version its release validates with its device plugin
# and CDI; and it regenerates the CDI spec whenever its toolkit pod starts, which it does after
# the reboot a driver change needs. NVIDIA says a host toolkit and the Operator's are not to be
# combined (the same page: toolkit.enabled=false "when using the Operator on systems with
# pre-installed NVIDIA runtimes"), so the node layer installs none. Bare-node Ray starts no
# containers: its nodes need no toolkit either.
CONTAINER_RUNTIME_OWNER = "gpu-operator"
# The NVIDIA Container Toolkit's Debian packages, as NVIDIA's install guide installs them
# (nvidia-container-toolkit, nvidia-container-toolkit-base, libnvidia-container-tools,
# libnvidia-container1, each at one version): removed from the nodes where installed.
TOOLKIT_PACKAGES = (
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
)
# Hosts whose apt sources are NVIDIA's: a node with one of them that is not a declared
# source is refused (it would mix two driver origins).
NVIDIA_HOSTS = ("developer.download.nvidia.com", "nvidia.github.io")

# Per source: packages pinned at the driver's version and held, packages outside the pin,
# and the Debian components their (and python3-pynvml's) dependency closure needs.
PINNED = {
    "nvidia-cuda": ("nvidia-driver-cuda", "nvidia-kernel-open-dkms", "nvidia-persistenced"),
    "debian": ("nvidia-kernel-dkms", "nvidia-smi", "libnvidia-ml1", "libcuda1", "firmware-nvidia-gsp"),
}
UNPINNED = {
    "nvidia-cuda": ("python3-pynvml",),
    "debian": ("nvidia-persistenced", "python3-pynvml"),
}
DEBIAN_COMPONENTS = {
    # python3-pynvml is in contrib.
    "nvidia-cuda": ("contrib",),
    # nvidia-kernel-dkms, nvidia-smi, libnvidia-ml1, libcuda1: non-free; nvidia-persistenced,
    # nvidia-modprobe, nvidia-kernel-common, python3-pynvml: contrib; firmware-nvidia-gsp:
    # non-free-firmware (Section fields of the bookworm Packages files).
    "debian": ("contrib", "non-free", "non-free-firmware"),
}
FABRIC_MANAGER = "nvidia-fabricmanager"
# Fabric Manager runs on NVSwitch systems: HGX/DGX 8-GPU baseboards of the models the
# catalog marks ``nvswitch`` (Fabric Manager User Guide, "Supported Platforms").
NVSWITCH_GPUS = 8

# Debian 12's kernel flavours with a linux-headers-<flavour> meta package (bookworm main).
DEBIAN_FLAVOURS = ("amd64", "cloud-amd64", "rt-amd64", "arm64", "cloud-arm64", "rt-arm64")
_SAFE_WORD = re.compile(r"[A-Za-z0-9._~:/@+%=,-]+")
_DEBIAN_KERNEL = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+-[0-9]+-(?P<flavour>[a-z0-9-]+)$")

# The UEFI global variable SecureBoot (EFI_GLOBAL_VARIABLE GUID, UEFI spec 2.10 §3.3): in
# efivarfs, 4 bytes of attributes, then 1 byte, 1 when Secure Boot is enabled. Read from the
# kernel's efivarfs rather than with mokutil --sb-state, which may not be installed; mokutil
# is asked only whether the DKMS signing key (Debian's dkms: /var/lib/dkms/mok.pub) is
# enrolled, which only the shim's MOK list can say.
SECURE_BOOT_VAR = "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-e098032b8c"
DKMS_KEY = "/var/lib/dkms/mok.pub"
SOURCES_FILES = "/etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources"
# One round trip: the running kernel, whether the NVIDIA module is loaded, Secure Boot, the DKMS
# key's enrolment, every apt source file. A constant (no fleet data in it); both engines run
# it with ``sh -c``.
NODE_PROBE = (
    "echo '@@ kernel'; uname -r; "
    "echo '@@ module'; test -d /sys/module/nvidia && echo loaded; "
    f"echo '@@ secure-boot'; od -An -tu1 {SECURE_BOOT_VAR} 2>/dev/null; "
    f"echo '@@ dkms-key'; command -v mokutil >/dev/null && mokutil --test-key {DKMS_KEY} 2>&1; "
    f"echo '@@ sources'; for f in {SOURCES_FILES}; do "
    '[ -f "$f" ] && { echo "@@@ $f"; cat "$f"; echo; }; done; true'
)


def fabric_manager_needed(gpus: Iterable[Mapping[str, Any]]) -> bool:
    """Whether a node with ``gpus`` ([{model, count}]) has NVSwitch: 8 GPUs of a model the
    catalog marks ``nvswitch`` (an HGX/DGX 8-GPU baseboard)."""
    catalog = gpu_catalog()
    return any(catalog[g["model"]].get("nvswitch") and g["count"] >= NVSWITCH_GPUS for g in gpus)


def driver_state(driver: Mapping[str, Any], gpus: Iterable[Mapping[str, Any]] = ()) -> DriverState:
    """A GpuProfile's ``driver`` ({source?, branch, version?, allow_reboot?}) on a node with
    ``gpus`` ([{model, count}]) as NodeState.gpu.driver: ``apt_version``, the Debian version
    glob that pins it (``570.86.15-*`` for a version, ``570.*`` for a branch;
    apt_preferences(5) and ``apt-get install name=glob``; NVIDIA's and Debian's packages
    carry a revision, ``570.86.15-1``), ``packages`` installed at that glob and held,
    ``extra_packages`` installed at their newest version, ``absent_packages`` removed where
    installed (the container toolkit: :data:`CONTAINER_RUNTIME_OWNER`), ``apt_sources``
    (NVIDIA's, each a
    one-line ``deb`` entry signed by the key fetched into the layout's ``apt_keyrings_dir``),
    ``debian_components`` the node's Debian source must offer, and ``fabric_manager``."""
    source = driver.get("source", "nvidia-cuda")
    version = driver.get("version")
    keyrings = node_layout()["files"]["apt_keyrings_dir"]["path"]
    fabric = fabric_manager_needed(gpus)
    pinned = [*PINNED[source], *([FABRIC_MANAGER] if fabric and source == "nvidia-cuda" else [])]
    sources = [CUDA_SOURCE] if source == "nvidia-cuda" else []
    return {
        "source": source,
        "branch": driver["branch"],
        "version": version,
        "allow_reboot": driver.get("allow_reboot", False),
        "apt_version": f"{version}-*" if version else f"{driver['branch']}.*",
        "packages": pinned,
        "extra_packages": list(UNPINNED[source]),
        "absent_packages": list(TOOLKIT_PACKAGES) if CONTAINER_RUNTIME_OWNER == "gpu-operator" else [],
        "apt_sources": [
            {"name": name, "key_url": key, "repo": f"deb [signed-by={keyrings}/{name}.asc] {url}"}
            for name, key, url in sources
        ],
        "debian_components": list(DEBIAN_COMPONENTS[source]),
        "fabric_manager": fabric,
    }


# ------------------------------------------------------------------ the node's probe


class SourceEntry(TypedDict):
    file: str
    types: list[str]
    uris: list[str]
    suites: list[str]
    components: list[str]
    options: dict[str, str]  # lower-case option names (signed-by, trusted, arch, ...)
    line: str  # the one-line entry as written ("" for deb822)


class DriverPlan(TypedDict):
    kernel: str
    module_loaded: bool  # the NVIDIA kernel module runs: its daemons can start now
    secure_boot: bool
    headers: list[str]  # linux-headers packages to install (unpinned)
    add: list[AptSource]  # sources to write (sources.list.d/NAME.list), keys to fetch
    remove: list[AptSource]  # our entries to drop: a foreign one has the repository; the toolkit's
    notes: list[str]
    problems: list[str]  # refusals: nothing is installed when there is one


def probe_sections(output: str) -> dict[str, Any]:
    """:data:`NODE_PROBE`'s output as ``{"kernel": str, "module": "loaded" or "",
    "secure-boot": str, "dkms-key": str, "sources": {path: text}}``."""
    out: dict[str, Any] = {"kernel": "", "module": "", "secure-boot": "", "dkms-key": "", "sources": {}}
    section, path = "", ""
    for line in output.splitlines():
        if line.startswith("@@@ ") and section == "sources":
            path = line[4:].strip()
            out["sources"][path] = ""
        elif line.startswith("@@ "):
            section, path = line[3:].strip(), ""
        elif section == "sources" and path:
            out["sources"][path] += line + "\n"
        elif section in ("kernel", "module", "secure-boot", "dkms-key"):
            out[section] = (out[section] + "\n" + line).strip()
    return out


def secure_boot_enabled(od_output: str) -> bool:
    """Whether efivarfs' SecureBoot variable (``od -An -tu1``: attributes, then the value)
    says Secure Boot is on. Absent (no UEFI, or not readable): off."""
    values = od_output.split()
    return len(values) >= 5 and values[4] == "1"


def parse_sources(files: Mapping[str, str]) -> list[SourceEntry]:
    """The enabled entries of apt source files (sources.list(5)): one-line ``*.list`` and
    deb822 ``*.sources``; others are not read by apt and are left out."""
    entries: list[SourceEntry] = []
    for path, text in sorted(files.items()):
        if path.endswith(".sources"):
            entries += _deb822(path, text)
        elif path.endswith(".list"):
            entries += _one_line(path, text)
    return entries


def _one_line(path: str, text: str) -> list[SourceEntry]:
    entries: list[SourceEntry] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        options: dict[str, str] = {}
        m = re.match(r"^(\S+)\s+\[([^\]]*)\]\s+(.*)$", line)
        if m:
            kind, opts, rest = m.groups()
            for opt in opts.split():
                key, _, value = opt.partition("=")
                options[key.lower()] = value
        else:
            kind, _, rest = line.partition(" ")
        words = rest.split()
        if len(words) < 2:
            continue
        entries.append({"file": path, "types": [kind], "uris": [words[0]], "suites": [words[1]],
                        "components": words[2:], "options": options, "line": line})  # fmt: skip
    return entries


def _deb822(path: str, text: str) -> list[SourceEntry]:
    # Stanzas end at a blank line, or where a field comes again (a transport that dropped the
    # blank lines must not merge two stanzas into one).
    stanzas: list[dict[str, str]] = [{}]
    key = ""
    for raw in text.splitlines():
        if raw.startswith("#"):
            continue
        if not raw.strip():
            stanzas.append({})
            key = ""
        elif raw[:1] in (" ", "\t") and key:
            stanzas[-1][key] += "\n" + raw.strip()
        elif ":" in raw:
            name, _, value = raw.partition(":")
            key = name.strip().lower()
            if key in stanzas[-1]:
                stanzas.append({})
            stanzas[-1][key] = value.strip()
    entries: list[SourceEntry] = []
    for fields in stanzas:
        if not fields.get("uris") or fields.get("enabled", "yes").lower() == "no":
            continue
        options = {k: v for k, v in fields.items() if k not in ("types", "uris", "suites", "components")}
        entries.append({
            "file": path, "types": fields.get("types", "").split(), "uris": fields["uris"].split(),
            "suites": fields.get("suites", "").split(), "components": fields.get("components", "").split(),
            "options": options, "line": "",
        })  # fmt: skip
    return entries


def _norm_uri(uri: str) -> str:
    return uri.rstrip("/")


def _host(uri: str) -> str:
    return re.sub(r"^[a-z+]+:(//)?", "", uri).split("/", 1)[0].split("@")[-1].lower()


def kernel_headers(release: str) -> tuple[list[str], str | None]:
    """The headers packages for the running kernel ``release`` (``uname -r``) and its
    flavour's meta package (future kernels), or none and why: a kernel that is not one of
    Debian 12's flavours has no headers package, and DKMS builds no module for it."""
    m = _DEBIAN_KERNEL.match(release)
    if not m or m.group("flavour") not in DEBIAN_FLAVOURS:
        return [], (
            f"running kernel {release or '(unknown)'} is not a Debian kernel: no linux-headers "
            "package for it, so DKMS builds no NVIDIA module for it"
        )
    return [f"linux-headers-{release}", f"linux-headers-{m.group('flavour')}"], None


def source_plan(
    driver: Mapping[str, Any], files: Mapping[str, str]
) -> tuple[list[AptSource], list[AptSource], list[str], list[str]]:
    """The apt sources to add and remove on a node whose source files are ``files``
    ({path: text}), with notes and problems. An NVIDIA source the node already has for the
    same repository (URI and suite; e.g. ``cuda-debian12-x86_64.list`` with
    ``signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg``, as NVIDIA's instructions make
    it) is adopted: apt refuses two entries for one repository with different Signed-By
    ("Conflicting values set for option Signed-By"), so ours is not added (and removed if an
    earlier run added it). Another NVIDIA source is refused. The Debian components the
    packages need are added for the node's own Debian mirror, with that entry's Signed-By."""
    entries = [e for e in parse_sources(files) if "deb" in e["types"]]
    add: list[AptSource] = []
    remove: list[AptSource] = []
    notes: list[str] = []
    problems: list[str] = []
    wanted_uris: set[str] = set()
    for src in driver["apt_sources"]:
        (mine,) = _one_line("", src["repo"])
        uri, suite = _norm_uri(mine["uris"][0]), mine["suites"][0]
        wanted_uris.add(uri)
        same = [e for e in entries if uri in map(_norm_uri, e["uris"]) and suite in e["suites"]]
        foreign = [e for e in same if e["line"] != mine["line"]]
        if foreign:
            notes.append(f"apt source {src['name']}: adopted {foreign[0]['file']} (the same repository)")
            if any(e["line"] == mine["line"] for e in same):
                remove.append(src)
        else:
            add.append(src)
    # The container toolkit's repository: ours (as earlier converges wrote it) is dropped; a
    # provider's own entry stays, unused (apt reads it, nothing installs from it).
    former = _former_toolkit_source()
    (former_entry,) = _one_line("", former["repo"])
    toolkit_uri = _norm_uri(former_entry["uris"][0])
    for e in entries:
        if toolkit_uri in map(_norm_uri, e["uris"]):
            if e["line"] == former_entry["line"]:
                if former not in remove:
                    remove.append(former)
            else:
                notes.append(
                    f"{e['file']}: NVIDIA's container toolkit repository left in place, unused (the GPU "
                    "Operator's toolkit owns the container runtime)"
                )
    wanted_uris.add(toolkit_uri)
    for e in entries:
        for uri in e["uris"]:
            if _host(uri) in NVIDIA_HOSTS and _norm_uri(uri) not in wanted_uris:
                problems.append(
                    f"{e['file']} has another NVIDIA apt source ({uri} {' '.join(e['suites'])}) than "
                    f"the declared driver source {driver['source']}: remove it, or declare its source"
                )
    debian = [
        e for e in entries
        if DEBIAN_SUITE in e["suites"] and "main" in e["components"]
        and not any(_host(u) in NVIDIA_HOSTS for u in e["uris"])
    ]  # fmt: skip
    if not debian:
        problems.append(f"no Debian {DEBIAN_SUITE} source with main on this node to add "
                        f"{', '.join(driver['debian_components'])} to")  # fmt: skip
        return add, remove, notes, problems
    uri = debian[0]["uris"][0]
    have = {c for e in entries if uri in e["uris"] and DEBIAN_SUITE in e["suites"] for c in e["components"]}
    missing = [c for c in driver["debian_components"] if c not in have]
    if missing:
        signed = debian[0]["options"].get("signed-by", "")
        if "\n" in signed or " " in signed:
            # A deb822 source with its key inline: a one-line entry cannot say the same
            # Signed-By, and any other value makes apt refuse both.
            problems.append(
                f"{debian[0]['file']} embeds its Signed-By key inline: add {' '.join(missing)} to its "
                "Components (apt refuses a second entry for that mirror with another Signed-By)"
            )
            return add, remove, notes, problems
        if not all(_SAFE_WORD.fullmatch(w) for w in (uri, signed or "-")):
            # Read from the node and written back into a sources line: one word each, or the
            # line would gain options or fields.
            problems.append(f"{debian[0]['file']}: its URI or Signed-By is not one plain word; not copied")
            return add, remove, notes, problems
        options = f"[signed-by={signed}] " if signed else ""
        add.append({"name": "swarm-debian-nvidia", "key_url": "",
                    "repo": f"deb {options}{uri} {DEBIAN_SUITE} {' '.join(missing)}"})  # fmt: skip
    return add, remove, notes, problems


def _former_toolkit_source() -> AptSource:
    """The container toolkit's apt source as earlier converges wrote it (the entry
    :func:`driver_state` made, signed by the key in the layout's ``apt_keyrings_dir``)."""
    keyrings = node_layout()["files"]["apt_keyrings_dir"]["path"]
    name, key, url = TOOLKIT_SOURCE
    return {"name": name, "key_url": key, "repo": f"deb [signed-by={keyrings}/{name}.asc] {url}"}


def container_runtime_problems(
    drivers: Mapping[str, Mapping[str, Any] | None], operator_values: Mapping[str, Any] | None
) -> list[str]:
    """Why the node layer and the GPU Operator disagree on who owns the container runtime:
    ``drivers`` maps node names to NodeState.gpu.driver (None: no driver layer),
    ``operator_values`` are the GPU Operator's Helm values (None: no Operator deployed).

    - a node installs any of :data:`TOOLKIT_PACKAGES` while the Operator's toolkit is on
      (``toolkit.enabled``, true unless set false: NVIDIA/gpu-operator v26.3.3
      ``deployments/gpu-operator/values.yaml``): two toolkits, which NVIDIA's GPU Operator
      documentation says not to combine;
    - the Operator's toolkit is off and some GPU node does not install the toolkit: nothing
      configures containerd for the NVIDIA runtime, so no pod gets a GPU;
    - a node installs the toolkit and also removes it.
    Empty: one owner. Sorted by node name."""
    toolkit = set(TOOLKIT_PACKAGES)
    operator_toolkit = None
    if operator_values is not None:
        operator_toolkit = operator_values.get("toolkit", {}).get("enabled", True) is not False
    problems = []
    for name, driver in sorted(drivers.items()):
        if driver is None:
            continue
        installs = toolkit & {*driver["packages"], *driver["extra_packages"]}
        removes = toolkit & set(driver.get("absent_packages", []))
        if installs and removes:
            problems.append(f"{name}: installs and removes {', '.join(sorted(installs & removes))}")
        if installs and operator_toolkit:
            problems.append(
                f"{name}: the node layer installs {', '.join(sorted(installs))} while the GPU Operator's "
                "toolkit is on (toolkit.enabled): two owners of the container runtime"
            )
        if not installs and operator_toolkit is False:
            problems.append(
                f"{name}: the GPU Operator's toolkit is off (toolkit.enabled: false) and the node layer "
                "installs no container toolkit: nothing configures containerd for the NVIDIA runtime"
            )
    return problems


def driver_plan(driver: Mapping[str, Any], probe_output: str) -> DriverPlan:
    """What the drivers layer does on a node, from :data:`NODE_PROBE`'s output: see
    :class:`DriverPlan`. Secure Boot on and the DKMS signing key not enrolled is refused
    before anything is installed: the module DKMS builds would be signed by a key the
    firmware does not trust and never load."""
    facts = probe_sections(probe_output)
    secure_boot = secure_boot_enabled(facts["secure-boot"])
    add, remove, notes, problems = source_plan(driver, facts["sources"])
    headers, why = kernel_headers(facts["kernel"])
    if why:
        notes.append(why)
    if secure_boot and "is already enrolled" not in facts["dkms-key"]:
        problems.insert(0, (
            f"Secure Boot is on and the DKMS signing key {DKMS_KEY} is not enrolled "
            f"({facts['dkms-key'] or 'mokutil not installed'}): the NVIDIA module would not load; "
            f"enroll it (mokutil --import {DKMS_KEY}, then confirm at the next boot) or turn Secure Boot off"
        ))  # fmt: skip
    return {"kernel": facts["kernel"], "module_loaded": facts["module"] == "loaded",
            "secure_boot": secure_boot, "headers": headers,
            "add": add, "remove": remove, "notes": notes, "problems": problems}  # fmt: skip
