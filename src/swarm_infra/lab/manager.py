"""``swarm lab up|down|status``: bring the lab to the fleet's shape, take it away, report it."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from .. import hosttools
from ..fleet.lockfile import lock_text
from ..resolve import desired_state
from ..resolve.analysis import Analysis
from ..resolve.meshfilter import TABLE
from . import mirror, network, node, pkgcache, rayvenv, services, tlsindex
from .image import ensure_image, host_mirror
from .plan import PREFIX, LabNode, LabSite, LabSpec, lab_spec
from .state import (
    LabState,
    cache_dir,
    connection_file,
    ensure_ssh_key,
    read_connections,
    ssh_command,
    state_dir,
)
from .system import LabError, require_root, run

Log = Callable[[str], None]


@contextmanager
def _locked() -> Iterator[None]:
    d = state_dir()
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o700)
    with open(d / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def _preflight() -> None:
    require_root()
    absent = hosttools.missing(("lab",))
    if absent:
        raise LabError(hosttools.missing_message(absent))


def _run_netns_is_mount() -> bool:
    return any(
        line.split()[4] == "/run/netns" for line in Path("/proc/self/mountinfo").read_text().splitlines()
    )


def up(analysis: Analysis, log: Log = print, unseeded: Collection[str] = ()) -> dict[str, str]:
    """Make the lab match the fleet; returns {node: created|restarted|replaced|unchanged}.

    Idempotent: nodes that run with the same spec are left alone; nodes no longer in the spec
    are stopped and removed. Ray nodes get Ray's prebuilt virtualenv as a read-only layer
    (lab/rayvenv.py) unless named in ``unseeded`` ("all": none of them); a node whose
    seeding changes is replaced. Raises :class:`LabError` (nothing half-done is left running
    unnoticed: ``status`` shows it and ``down`` removes it).
    """
    _preflight()
    spec = lab_spec(analysis)
    started = time.monotonic()
    with _locked():
        state = LabState.load()
        image = ensure_image(cache_dir() / "images", log=log)
        pubkey = ensure_ssh_key()
        if "run_netns_was_mount" not in state.host:
            state.host["run_netns_was_mount"] = _run_netns_is_mount()
        if "nspawn_run_dir_existed" not in state.host:
            state.host["nspawn_run_dir_existed"] = node.NSPAWN_RUN_DIR.exists()
        before = network.ensure_host_forwarding(spec.networks())
        if "ip_forward_before" not in state.host:
            state.host["ip_forward_before"] = before
        state.host["image"] = str(image)
        state.save()

        wheels = _wheelhouse(analysis, log)
        seeds = _ray_seeds(analysis, image, wheels, unseeded, log)
        tls = _index_tls() if wheels is not None else None
        outcome = _reconcile(spec, state, image, pubkey, log, seeds, tls.ca.read_text() if tls else None)
        _ensure_index(analysis, state, log, wheels)
        _ensure_package_cache(analysis, state, log)
        state.save()
    took = time.monotonic() - started
    counts = {k: sum(1 for v in outcome.values() if v == k) for k in sorted(set(outcome.values()))}
    log(
        f"lab    {len(spec.nodes)} node(s) up in {took:.1f} s ("
        + ", ".join(f"{n} {k}" for k, n in counts.items())
        + f"); connections: {connection_file()}"
    )
    return outcome


def _wheelhouse(analysis: Analysis, log: Log) -> Path | None:
    """The wheelhouse of the fleet's Ray packages (downloaded once) when its RayCluster
    names the lab's package index; None otherwise."""
    ray = analysis.fleet.ray
    if ray is None or not mirror.serves(ray.package_index):
        return None
    return mirror.ensure_wheelhouse(cache_dir() / "wheelhouse", lock_text(ray.lock), log)


def _index_tls() -> tlsindex.TlsFiles:
    """The lab index's CA and certificate, made once per machine in the lab's cache."""
    return tlsindex.ensure_tls(cache_dir() / "index-tls", str(mirror.SERVICE_ADDRESS))


def _ray_seeds(
    analysis: Analysis, image: Path, wheels: Path | None, unseeded: Collection[str], log: Log
) -> dict[str, Path]:
    """{node: the layer holding its Ray virtualenv} for the fleet's Ray nodes not named in
    ``unseeded`` (none with "all", or when the lab serves no wheelhouse): the requirements
    and venv path are the node's own desired state (NodeState.ray.requirements,
    layout.files.ray_venv)."""
    if wheels is None or "all" in unseeded:
        return {}
    nodes = desired_state(analysis)["nodes"]
    seeds: dict[str, Path] = {}
    built: dict[str, Path] = {}
    for name, ns in sorted(nodes.items()):
        if not ns["ray"] or name in unseeded:
            continue
        venv, requirements = ns["layout"]["files"]["ray_venv"]["path"], ns["ray"]["requirements"]
        key = rayvenv.venv_key(image, venv, requirements)
        if key not in built:
            built[key] = rayvenv.ensure_ray_venv(
                cache_dir() / "ray-venv", image, wheels, venv, requirements, log
            )
        seeds[name] = built[key]
    return seeds


def _ensure_index(analysis: Analysis, state: LabState, log: Log, wheels: Path | None) -> None:
    """Serve the fleet's Ray packages (``wheels``) from this host when its RayCluster names
    the lab's package index (lab/mirror.py); stop a served index the fleet no longer names."""
    ray = analysis.fleet.ray
    old = state.host.get("index") or {}
    if ray is None or wheels is None:
        mirror.stop_index(old.get("pid"), old.get("port", 0))
        state.host.pop("index", None)
        return
    port = urlparse(ray.package_index).port or 443
    mirror.ensure_service_address()
    if old.get("wheels") == str(wheels) and mirror.index_is_running(old.get("pid"), port):
        return
    mirror.stop_index(old.get("pid"), old.get("port", 0))
    cgroup = node.cgroup2_root() / "swarm-lab" / "services"
    tls = _index_tls()
    pid = mirror.start_index(
        wheels, state_dir() / "index", tls.ca.parent, port, cgroup, state_dir() / "index.log"
    )
    state.host["index"] = {"pid": pid, "port": port, "wheels": str(wheels)}
    log(f"index  {ray.package_index} serves {wheels.name} (https, the lab CA {tls.ca}; pid {pid})")


def _ensure_package_cache(analysis: Analysis, state: LabState, log: Log) -> None:
    """Run the sites' package cache on this host when a site's ``package_cache.apt_proxy``
    names the lab's service address (lab/pkgcache.py): offline while the image's mirror does
    not answer, so a converge does not wait on it; stop it when no site names it."""
    old = state.host.get("package_cache") or {}
    proxies = {s.apt_proxy for s in analysis.fleet.sites.values() if pkgcache.serves(s.apt_proxy)}
    if not proxies:
        pkgcache.stop(old.get("pid"), old.get("port", 0))
        state.host.pop("package_cache", None)
        return
    if len(proxies) > 1:
        raise LabError(
            f"the lab runs one package cache; the sites name {', '.join(sorted(map(str, proxies)))}"
        )
    port = pkgcache.port_of(str(proxies.pop()))
    cache = cache_dir() / "apt-cacher-ng"
    # A cold cache has nothing to serve offline: it stays online, whatever the mirror does.
    offline = pkgcache.holds_packages(cache) and not pkgcache.mirror_answers(host_mirror())
    mirror.ensure_service_address()
    how = "running"
    if not (old.get("port") == port and pkgcache.is_running(old.get("pid"), port, offline)):
        pkgcache.stop(old.get("pid"), old.get("port", 0))
        pid = pkgcache.start(
            state_dir() / "apt-cacher-ng", cache, state_dir() / "apt-cacher-ng-log", port, offline,
            node.cgroup2_root() / "swarm-lab" / "services",
        )  # fmt: skip
        state.host["package_cache"] = {"pid": pid, "port": port, "offline": offline}
        how = "started"
    mode = "offline: the mirror does not answer, serving what it holds" if offline else "online"
    pid = state.host["package_cache"]["pid"]
    log(f"cache  http://{mirror.SERVICE_ADDRESS}:{port} apt-cacher-ng ({mode}; {cache}), {how}, pid {pid}")


def _reconcile(
    spec: LabSpec,
    state: LabState,
    image: Path,
    pubkey: str,
    log: Log,
    seeds: dict[str, Path],
    index_ca: str | None = None,
) -> dict[str, str]:
    # Sites whose structure (not just wan) changed are rebuilt, and their nodes with them.
    def structure(d: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in d.items() if k not in ("wan", "link_pid")}

    rebuilt_sites = {
        name
        for name, old in state.sites.items()
        if name not in spec.sites or structure(old) != structure(spec.sites[name].as_dict())
    }
    # The overlay's lower directories, top first: Ray's virtualenv where seeded, the image.
    wanted = {
        name: {**n.as_dict(), "image": str(image), "lower": ":".join(map(str, [*_seed(seeds, name), image]))}
        for name, n in spec.nodes.items()
    }
    outcome: dict[str, str] = {}
    for name, old in list(state.nodes.items()):
        same = {k: old.get(k) for k in wanted.get(name, {})} == wanted.get(name)
        if not same or old["site"] in rebuilt_sites:
            lab_node = LabNode.from_dict(old)
            log(f"node   {name}: {node.stop(lab_node, old.get('pid'))}, removing")
            network.remove_namespace(old["netns"])
            node.remove(node.NodeDirs(state_dir(), name))
            del state.nodes[name]
            if name in wanted:
                outcome[name] = "replaced"
    for name in sorted(rebuilt_sites):
        gone = state.sites.pop(name)
        log(f"site   {name}: removing")
        network.remove_site(LabSite.from_dict(gone), gone.get("link_pid"))
    state.save()

    mirror.ensure_service_address()  # the address the host sends to the sites from
    for site in spec.sites.values():
        old = state.sites.get(site.name, {})
        if old and old["wan"] != site.wan:
            network.stop_link(old.get("link_pid"), site)
        cgroup = node.cgroup2_root() / "swarm-lab" / "sites" / site.name
        (state_dir() / "sites").mkdir(exist_ok=True)
        log_file = state_dir() / "sites" / f"{site.name}.log"
        source = mirror.SERVICE_ADDRESS
        started, pid = network.ensure_site(site, old.get("link_pid"), cgroup, log_file, source)
        network.ensure_site_nat(site, [n for n in spec.nodes.values() if n.site == site.name and n.nat])
        state.sites[site.name] = {**site.as_dict(), "link_pid": pid}
        if started:
            wan = ", ".join(f"{k}={v}" for k, v in site.wan.items() if v) or "no WAN emulation"
            log(f"site   {site.name}: router {site.netns}, bridge {site.gateway}, WAN link ({wan})")
    state.save()

    booting: list[tuple[str, int, socket.socket]] = []
    for name, lab_node in spec.nodes.items():
        old = state.nodes.get(name, {})  # {}: a node new to the lab
        if old and node.is_running(lab_node, old.get("pid")):
            outcome[name] = "unchanged"
            continue
        dirs = node.NodeDirs(state_dir(), name)
        if old and dirs.upper.is_dir():
            host_key = old["host_key"]
            outcome[name] = "restarted"
        else:
            host_key = node.prepare(
                lab_node,
                dirs,
                image,
                f"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t{name}\n",
                pubkey,
                index_ca,
            )
            outcome.setdefault(name, "created")
        network.ensure_node_link(lab_node, spec.sites[lab_node.site])
        pid, notify = node.start(lab_node, dirs, wanted[name]["lower"])
        # A restarted node keeps its disk, so what it joined with (its mesh) too.
        kept = {"joined": old["joined"]} if outcome[name] == "restarted" and old.get("joined") else {}
        state.nodes[name] = {**wanted[name], "pid": pid, "host_key": host_key, **kept}
        state.save()
        booting.append((name, pid, notify))

    conns = read_connections()

    def boot(item: tuple[str, int, socket.socket]) -> str:
        name, pid, notify = item
        t0 = time.monotonic()
        booted = node.wait_booted(spec.nodes[name], pid, notify)
        conn = conns[name]
        if spec.nodes[name].nat:
            # Behind a real NAT nothing reaches its sshd from here: checked at its console.
            # The controller reaches it over the mesh once it has joined (lab/join.py).
            done = node.console(pid, ["systemctl", "is-active", "ssh.service"])
            if done.returncode != 0:
                raise LabError(f"node {name}: booted but its sshd is {done.stdout.decode().strip()}")
            took = time.monotonic() - t0
            return f"node   {name}: {outcome[name]}, {booted} in {took:.1f} s, sshd active (behind NAT)"
        proc = subprocess.run(ssh_command(conn, ["hostname"]), capture_output=True, text=True, timeout=60)
        if proc.returncode != 0 or proc.stdout.strip() != name:
            raise LabError(
                f"node {name}: booted but SSH failed: {proc.stderr.strip() or proc.stdout.strip()}"
            )
        took = time.monotonic() - t0
        return f"node   {name}: {outcome[name]}, {booted} in {took:.1f} s, ssh ok ({conn['host']})"

    with ThreadPoolExecutor(max_workers=8) as pool:
        for line in pool.map(boot, booting):
            log(line)
    return outcome


def _seed(seeds: dict[str, Path], name: str) -> list[Path]:
    return [seeds[name]] if name in seeds else []


def down(log: Log = print) -> list[str]:
    """Kill every lab node and remove everything the lab made; returns what is left (empty).

    Works from the state file and also sweeps by name (``swl-*`` namespaces and links, the
    ``SWARM-LAB`` chains, the ``swarm-lab`` cgroup), so a lost or stale state file still
    cleans up. The base image cache is kept.
    """
    _preflight()
    started = time.monotonic()
    with _locked():
        state = LabState.load()
        lab_nodes = [LabNode.from_dict(d) for d in state.nodes.values()]
        # Killed at once, not powered off: everything a node holds is deleted below, so a
        # clean shutdown protects nothing, and Ray's units made it wait out nspawn's 20 s
        # (a SIGKILL of a PID namespace's init kills every process in it).
        with ThreadPoolExecutor(max_workers=16) as pool:
            results = list(
                pool.map(lambda n: node.stop(n, state.nodes[n.name].get("pid"), timeout=0), lab_nodes)
            )
        for n, how in zip(lab_nodes, results, strict=True):
            log(f"node   {n.name}: {how}")
        index = state.host.get("index") or {}
        mirror.stop_index(index.get("pid"), index.get("port", 0))
        cache = state.host.get("package_cache") or {}
        pkgcache.stop(cache.get("pid"), cache.get("port", 0))
        git = state.host.get("git") or {}
        services.stop(git.get("pid"), GIT_MARKER, git.get("port", 0))
        _kill_strays()
        for n in lab_nodes:
            network.remove_namespace(n.netns)
            node.remove(node.NodeDirs(state_dir(), n.name))
        for d in state.sites.values():
            network.remove_site(LabSite.from_dict(d), d.get("link_pid"))
            log(f"site   {d['name']}: removed")
        for ns in network.lab_namespaces():
            network.remove_namespace(ns)
        for link in network.lab_host_links():
            run(["ip", "link", "del", link], check=False)
        controller_link = state.host.get("controller_interface")
        if (
            controller_link
            and run(["ip", "link", "show", "dev", controller_link], check=False).returncode == 0
        ):
            run(["ip", "link", "del", "dev", controller_link], check=False)  # its wireguard-go exits
            log(f"mesh   the controller's {controller_link}: removed")
        if controller_link and run(["nft", "list", "table", "inet", TABLE], check=False).returncode == 0:
            # Its filter (engines/controller.py apply_filter), which `swarm mesh controller-up` made.
            run(["nft", "delete", "table", "inet", TABLE], check=False)
            log(f"mesh   the controller's filter (nft table inet {TABLE}): removed")
        network.remove_host_forwarding(state.host.get("ip_forward_before"))
        for root in node.cgroup_roots():
            node.remove_cgroup(root / "swarm-lab")
        # `ip netns add` made /run/netns a mount point; undo that if the lab was first to.
        if (
            state.host.get("run_netns_was_mount") is False
            and _run_netns_is_mount()
            and not any(Path("/run/netns").iterdir())
        ):
            run(["umount", "/run/netns"], check=False)
        # systemd-nspawn's run directory, if the lab's nodes were the ones that made it.
        if state.host.get("nspawn_run_dir_existed") is False:
            shutil.rmtree(node.NSPAWN_RUN_DIR, ignore_errors=True)
    shutil.rmtree(state_dir(), ignore_errors=True)
    left = leftovers(set(state.nodes))
    log(
        f"lab    down in {time.monotonic() - started:.1f} s"
        + (f"; LEFT BEHIND: {left}" if left else ", nothing left")
    )
    return left


def _kill_strays() -> None:
    """SIGKILL any process still in a lab cgroup (a node whose PID the state lost)."""
    cg = node.cgroup2_root() / "swarm-lab"
    if not cg.exists():
        return
    for procs in cg.rglob("cgroup.procs"):
        for pid in procs.read_text().split():
            with suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
    for procs in cg.rglob("cgroup.procs"):
        for pid in procs.read_text().split():
            network.wait_exit(int(pid), 10)


def leftovers(names: set[str]) -> list[str]:
    """Anything of the lab's still on the host: namespaces, links, routes, chains, cgroups,
    processes, mounts, state, and nspawn's run directories of the nodes ``names``. Empty
    after a successful ``down``."""
    left = [f"netns {ns}" for ns in network.lab_namespaces()]
    left += [f"link {link}" for link in network.lab_host_links()]
    routes = run(["ip", "-o", "route", "show"]).stdout
    left += [f"route {r.strip()}" for r in routes.splitlines() if f" {PREFIX}-" in r]
    for table in ("filter", "nat"):
        rules = run(["iptables", "-t", table, "-S"]).stdout
        left += [f"iptables -t {table} {r}" for r in rules.splitlines() if network.CHAIN in r]
    for root in node.cgroup_roots():
        cg = root / "swarm-lab"
        if cg.exists():
            left.append(f"cgroup {cg}")
            left += [f"process {pid}" for p in cg.rglob("cgroup.procs") for pid in p.read_text().split()]
    mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    left += [
        f"mount {m.split()[4]}" for m in mounts if f"/{PREFIX}-" in m.split()[4] or str(state_dir()) in m
    ]
    if state_dir().exists():
        left.append(f"directory {state_dir()}")
    loops = run(["losetup", "--noheadings", "--output", "NAME,BACK-FILE", "--list"]).stdout.splitlines()
    left += [f"loop device {ln.split()[0]}" for ln in loops if str(state_dir()) in ln]
    propagate = node.NSPAWN_RUN_DIR / "propagate"
    left += [f"directory {propagate / n}" for n in sorted(names) if (propagate / n).exists()]
    return left


GIT_MARKER = b"swarm_infra.lab.gitserver"
GIT_PORT = 8443


def git_root() -> Path:
    """Where the lab's Git server finds its bare repositories (in the lab's state: ``down``
    removes them with the rest)."""
    return state_dir() / "git"


def serve_git(port: int = GIT_PORT, log: Log = print) -> str:
    """Serve the bare repositories under :func:`git_root` read-only over https on the
    service address (lab/gitserver.py, the lab CA's certificate), in the lab's services
    cgroup, until :func:`stop_git` or ``down``; returns the server's base URL
    (``https://192.0.2.1:PORT/``; a repository ``NAME.git`` is at ``URL + "NAME.git"``).
    A server already running on ``port`` is kept. Raises LabError when no lab is up or it
    does not start."""
    require_root()
    with _locked():
        state = LabState.load()
        if not state.nodes:
            raise LabError("no lab is up: run `swarm lab up` first")
        url = f"https://{mirror.SERVICE_ADDRESS}:{port}/"
        old = state.host.get("git") or {}
        if old.get("port") == port and services.is_running(old.get("pid"), GIT_MARKER, port):
            return url
        services.stop(old.get("pid"), GIT_MARKER, old.get("port", 0))
        git_root().mkdir(parents=True, exist_ok=True)
        mirror.ensure_service_address()
        tls = _index_tls()
        pid = services.start(
            [sys.executable, "-m", "swarm_infra.lab.gitserver", "--address", str(mirror.SERVICE_ADDRESS),
             "--port", str(port), "--root", str(git_root()), "--tls", str(tls.ca.parent)],
            str(mirror.SERVICE_ADDRESS), port, node.cgroup2_root() / "swarm-lab" / "services",
            state_dir() / "git.log", "the lab's Git server",
        )  # fmt: skip
        state.host["git"] = {"pid": pid, "port": port}
        state.save()
    log(f"git    {url} serves {git_root()} read-only (https, the lab CA {tls.ca}; pid {pid})")
    return url


def stop_git() -> None:
    """Stop the lab's Git server, if it runs (its repositories stay until ``down``)."""
    require_root()
    with _locked():
        state = LabState.load()
        old = state.host.pop("git", None) or {}
        services.stop(old.get("pid"), GIT_MARKER, old.get("port", 0))
        state.save()


def joined(name: str) -> str | None:
    """The fleet commit node ``name`` joined by pull (lab/join.py) since it was made, or None
    (a node made anew has joined nothing)."""
    state = LabState.load()
    return (state.nodes.get(name) or {}).get("joined")


def set_joined(name: str, commit: str) -> None:
    """Record that node ``name`` joined by pull with fleet ``commit``. Raises LabError when
    the lab has no such node."""
    require_root()
    with _locked():
        state = LabState.load()
        if name not in state.nodes:
            raise LabError(f"no lab node named {name}")
        state.nodes[name]["joined"] = commit
        state.save()


def set_controller_interface(interface: str) -> None:
    """Record the controller's mesh interface on this host (``swarm mesh controller-up``):
    ``down`` deletes it (its wireguard-go exits with it)."""
    require_root()
    with _locked():
        state = LabState.load()
        state.host["controller_interface"] = interface
        state.save()


def stop_node(name: str, kill: bool = False) -> str:
    """Power one node off (systemd's poweroff signal; SIGKILL after 20 s, or at once with
    ``kill``: a crash) and wait until it has exited; its filesystem, links and state stay,
    and ``up`` starts it again. Returns how it stopped. Raises LabError when no lab is up or
    it has no node ``name``."""
    require_root()
    with _locked():
        state = LabState.load()
        if name not in state.nodes:
            raise LabError(f"no lab node named {name} (nodes: {', '.join(sorted(state.nodes)) or 'none'})")
        d = state.nodes[name]
        return node.stop(LabNode.from_dict(d), d.get("pid"), timeout=0 if kill else 20)


def status() -> list[dict[str, Any]]:
    """Per node: name, site, address, pid, running, systemd state, ssh reachability."""
    require_root()
    state = LabState.load()
    conns = read_connections()
    rows = []
    for name, d in sorted(state.nodes.items()):
        lab_node = LabNode.from_dict(d)
        running = node.is_running(lab_node, d.get("pid"))
        ssh = "-"
        if running and d["nat"]:
            ssh = "nat"  # nothing reaches it from here: over the mesh only (swarm lab ssh)
        elif running and name in conns:
            proc = subprocess.run(ssh_command(conns[name], ["true"]), capture_output=True, timeout=30)
            ssh = "ok" if proc.returncode == 0 else "failed"
        rows.append(
            {
                "name": name,
                "site": d["site"],
                "address": d["address"],
                "nat": d["nat"],
                "pid": d.get("pid") if running else None,
                "state": node.system_state(d["pid"]) if running else "stopped",
                "ssh": ssh,
            }
        )
    return rows
