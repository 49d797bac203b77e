"""Storage: where node-local scratch may be mounted, and classes that can bind."""

from __future__ import annotations

import posixpath
from collections.abc import Iterator

from ...fleet.diagnostics import Finding, excerpt
from ..analysis import Analysis
from ..paths import STATE_DIR
from ..provisioners import LOCAL_PATH, PROVISIONERS

# Mounting scratch on (or inside) these would hide or replace the system's own files.
SYSTEM_DIRS = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/sys",
    "/usr",
    "/var",
    "/tmp",
    "/home",
    "/opt",
    "/srv",
    "/mnt",
    "/media",
)
# Inside these a mount is fine (/var/lib/scratch, /mnt/scratch), but not in the pseudo
# filesystems and the system's own trees.
NO_MOUNTS_INSIDE = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc",
                    "/run", "/sbin", "/sys", "/usr")  # fmt: skip
# Directories whose contents a scratch mount on them (or above them) would hide or replace:
# the kubelet's and the container runtimes' state, the logs, the package manager's state
# and the project's own record of what it set (layout STATE_DIR; issue #22).
NO_MOUNTS_AT_OR_INSIDE = (
    "/var/lib/kubelet",
    "/var/lib/containerd",
    "/var/lib/docker",
    "/var/log",
    "/var/lib/apt",
    "/var/lib/dpkg",
    STATE_DIR,
    "/var/lib/systemd",
)


def _overlaps(path: str, directory: str) -> bool:
    """``path`` is ``directory``, lies in it or contains it."""
    return path == directory or path.startswith(directory + "/") or directory.startswith(path + "/")


def scratch_mount(a: Analysis) -> Iterator[Finding]:
    """``storage.mount-path-invalid``: the scratch mount path is ``/``, is not in normal form
    (``.``, ``..``, ``//`` or a trailing ``/``), is a system directory itself, or lies
    inside one that must never be mounted over (``/etc``, ``/usr``, ``/proc``, ...)."""
    st = a.fleet.storage
    if st is None or st.scratch is None:
        return
    path = st.scratch["mount_path"]
    normal = posixpath.normpath(path)
    problem = None
    if path != normal or path.startswith("//"):
        problem = f"is not in normal form (it means {excerpt(normal)}); write it so"
    elif path == "/":
        problem = "is the root filesystem"
    elif path in SYSTEM_DIRS:
        problem = "is a system directory; mount scratch on a directory of its own (/scratch)"
    else:
        inside = next((d for d in NO_MOUNTS_INSIDE if path.startswith(d + "/")), None)
        covers = next((d for d in NO_MOUNTS_AT_OR_INSIDE if _overlaps(path, d)), None)
        if inside:
            problem = f"is inside {inside}, which must not be mounted over"
        elif covers:
            problem = f"would cover {covers} (system, kubelet, container runtime, log or swarm state)"
    if problem:
        yield Finding(
            st.source,
            ("spec", "scratch", "mount_path"),
            "storage.mount-path-invalid",
            f"mount path {excerpt(path)} {problem}",
        )


def provisioners(a: Analysis) -> Iterator[Finding]:
    """``storage.provisioner-not-installed``: a class names a provisioner the stack does not
    install (:data:`~swarm_infra.resolve.provisioners.PROVISIONERS`), or ``rancher.io/local-path``
    (the scratch class's provisioner: claim scratch through ``scratch.storage_class``);
    ``storage.scratch-quota-exceeded``: a tenant's declared scratch volumes request more than
    ``scratch.tenant_quota_gib`` (the ResourceQuota would refuse them)."""
    st = a.fleet.storage
    if st is None:
        return
    for ci, c in enumerate(st.classes):
        known = PROVISIONERS.get(c["provisioner"])
        if known is None or not known.declarable:
            offered = ", ".join(p.name for p in PROVISIONERS.values() if p.declarable)
            why = (
                "is the scratch class's provisioner; claim node-local scratch with scratch.storage_class"
                if known is not None
                else f"is not installed by the stack (it installs {offered}); "
                "no claim of this class would bind"
            )
            yield Finding(
                st.source,
                ("spec", "classes", ci, "provisioner"),
                "storage.provisioner-not-installed",
                f"provisioner {excerpt(c['provisioner'])} {why}",
            )
    scratch = st.scratch
    if scratch is None:
        return
    used: dict[str, int] = {}
    last: dict[str, int] = {}
    for vi, v in enumerate(st.volumes):
        if v["class"] == scratch["storage_class"]:
            used[v["tenant"]] = used.get(v["tenant"], 0) + v["size_gib"]
            last[v["tenant"]] = vi
    for tenant, gib in sorted(used.items()):
        if gib > scratch["tenant_quota_gib"]:
            yield Finding(
                st.source,
                ("spec", "volumes", last[tenant], "size_gib"),
                "storage.scratch-quota-exceeded",
                f"tenant {tenant!r}'s scratch volumes request {gib} GiB, above scratch.tenant_quota_gib "
                f"({scratch['tenant_quota_gib']}); the ResourceQuota would refuse them",
            )


def access_modes(a: Analysis) -> Iterator[Finding]:
    """``storage.access-mode-unsupported``: a volume asks for an access mode its class's
    provisioner cannot provision (:attr:`~swarm_infra.resolve.provisioners.Provisioner.access_modes`):
    the claim would stay ``Pending``. The scratch class is ``rancher.io/local-path``, which
    takes ``ReadWriteOnce`` and ``ReadWriteOncePod`` only; ``access_modes`` defaults to
    ``[ReadWriteMany]``, so a scratch volume must name its mode. A class that names no known
    provisioner is reported by ``storage.provisioner-not-installed``, an unknown class by
    ``reference.unresolved``."""
    st = a.fleet.storage
    if st is None:
        return
    provisioner = {c["name"]: c["provisioner"] for c in st.classes}
    if st.scratch is not None:
        provisioner[st.scratch["storage_class"]] = LOCAL_PATH
    for vi, v in enumerate(st.volumes):
        known = PROVISIONERS.get(provisioner.get(v["class"], ""))
        if known is None:
            continue
        bad = [m for m in v["access_modes"] if m not in known.access_modes]
        if bad:
            yield Finding(
                st.source,
                ("spec", "volumes", vi, "access_modes"),
                "storage.access-mode-unsupported",
                f"class {v['class']!r} ({known.name}) cannot provision {', '.join(bad)} "
                f"(it takes {', '.join(known.access_modes)}; access_modes defaults to [ReadWriteMany]): "
                "the claim would stay Pending",
            )


def scratch_nodes(a: Analysis) -> Iterator[Finding]:
    """``storage.scratch-unavailable``: a volume names the scratch class, but no node has NVMe
    scratch (``hardware.nvme``): the cluster layer renders neither the scratch class nor its
    provisioner then (nowhere to put a volume), and the claim would stay ``Pending``. Not
    reported while a Node document is left out (its own error is)."""
    st = a.fleet.storage
    if st is None or st.scratch is None or not a.fleet.complete("Node"):
        return
    if any(n.nvme for n in a.fleet.nodes.values()):
        return
    cls = st.scratch["storage_class"]
    for vi, v in enumerate(st.volumes):
        if v["class"] == cls:
            yield Finding(
                st.source,
                ("spec", "volumes", vi, "class"),
                "storage.scratch-unavailable",
                f"class {cls!r} is node-local scratch, but no node has NVMe scratch (hardware.nvme): "
                "the class is not made and the claim would stay Pending",
            )


def scratch_quota_caps(a: Analysis) -> Iterator[Finding]:
    """``storage.scratch-quota-above-caps`` (a warning): ``scratch.tenant_quota_gib`` is above
    a tenant's ``caps.storage_gib``. Both ResourceQuotas apply to the tenant's namespace
    (``swarm-scratch`` on the scratch class, ``swarm-caps`` on every claim, scratch included)
    and the API server's quota admission refuses a claim that exceeds either, so the tenant
    never gets the declared scratch: the smaller number is the real one. A warning, not an
    error: nothing is refused that the policy meant to allow beyond the caps, and the scratch
    quota is one number for every tenant, so a tenant with a small storage cap may be meant
    to have less scratch. Lower ``tenant_quota_gib`` (or raise the cap) to silence it."""
    st, alloc = a.fleet.storage, a.fleet.allocation
    if st is None or st.scratch is None or alloc is None:
        return
    quota = st.scratch["tenant_quota_gib"]
    for ti, t in enumerate(alloc.tenants):
        cap = t.caps.get("storage_gib") if t.caps is not None else None
        if cap is not None and quota > cap:
            yield Finding(
                alloc.source,
                ("spec", "tenants", ti, "caps", "storage_gib"),
                "storage.scratch-quota-above-caps",
                f"tenant {t.name!r} may request {cap} GiB of storage in all (caps.storage_gib), less "
                f"than scratch.tenant_quota_gib ({quota} GiB): its namespace's quotas allow at most "
                f"{cap} GiB of scratch",
                "warning",
            )


CHECKS = (scratch_mount, provisioners, access_modes, scratch_nodes, scratch_quota_caps)
