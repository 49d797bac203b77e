"""Both engines manage the same things on every node, layer by layer (no lab, seconds).

The Ansible side is read from the roles themselves (:mod:`tests.unit.role_reader`: the
playbook's plays, the roles' tasks and defaults, Ansible's Templar with the project's
filters, the host variables of the real inventory plugin); the pyinfra side is the real
layer functions of :mod:`swarm_infra.engines.pyinfra.layers` with their operations
recorded instead of run. Both see the same node: the same NodeState, the same facts (the
kernel has no WireGuard module, an NVIDIA device is present or not, the peers' public
keys). What is compared, per node and layer: files and directories (path, state, content,
owner, group, mode), apt sources and keys, packages (and the pinned version), units
(enabled, started), the tunables spec (sysctls, sysfs), the GPU settings request, Ray's
virtualenv requirements and index, mounts, and the operator notes.

Fleets: both shipped ones (lab, example) and a generated one whose nodes leave every
optional layer undeclared (the removal paths).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Collection
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from swarm_infra.engines.pyinfra import facts as F
from swarm_infra.engines.pyinfra import layers as L
from swarm_infra.engines.pyinfra import operations as O
from swarm_infra.resolve.layers import NAMES
from swarm_infra.resolve.rollout import rollout_state
from tests.unit.pullfleet import CONTROLLER_KEY, copy_lab, declare_pull
from tests.unit.role_reader import run_layer

ROOT = Path(__file__).resolve().parents[2]
# What the GPU layer hands the node-side code: the MIG holders and the pending-reboot marker too.
GPU_REQUEST = ("backend", "devices", "limits", "mig_holders", "reboot_marker")


def _key(name: str) -> str:
    """A syntactically valid WireGuard public key (32 bytes, base64) derived from a name."""
    import base64
    import hashlib

    return base64.b64encode(hashlib.sha256(name.encode()).digest()).decode()


def _inventory(inventory: Path) -> dict[str, Any]:
    from ansible.parsing.ajson import AnsibleJSONDecoder

    tool = Path(sys.executable).parent / "ansible-inventory"
    out = subprocess.run(
        [str(tool), "-i", str(inventory), "--list"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out, cls=AnsibleJSONDecoder)


def _groups(inv: dict[str, Any]) -> dict[str, set[str]]:
    groups: dict[str, set[str]] = {}

    def walk(group: str, parents: tuple[str, ...]) -> None:
        entry = inv.get(group, {})
        for host in entry.get("hosts", []):
            groups.setdefault(host, {"all"}).update({group, *parents})
        for child in entry.get("children", []):
            walk(child, (*parents, group))

    walk("all", ())
    return groups


def _bare_fleet(tmp: Path) -> Path:
    """The lab fleet with every optional layer undeclared: no HostProfile, GpuProfile,
    scratch or Ray assignment, so each layer's removal path runs."""
    shutil.copytree(ROOT / "inventory" / "lab", tmp / "inventory" / "lab-bare")
    shutil.copytree(ROOT / "policies" / "lab", tmp / "policies" / "lab-bare")
    for path in (tmp / "policies" / "lab-bare").glob("*.yaml"):
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        keep = [d for d in docs if d["kind"] not in ("Assignment", "RayCluster", "Storage")]
        path.write_text(yaml.safe_dump_all(keep) if keep else "")
    return tmp / "inventory" / "lab-bare"


# Nodes of the keyed fleet whose WireGuard key the fleet records (Node spec.mesh.public_key);
# lab-gpu-1's is not, so its peers still learn it from the run.
KEYED = ("lab-head-1", "lab-gpu-2")


def _keyed_fleet(tmp: Path) -> Path:
    """The lab fleet with some nodes' WireGuard keys recorded (issue #27): their peers' files
    come from the fleet, with no key reported in the run (as a pull node applies alone)."""
    shutil.copytree(ROOT / "inventory" / "lab", tmp / "inventory" / "lab-keyed")
    shutil.copytree(ROOT / "policies" / "lab", tmp / "policies" / "lab-keyed")
    shutil.copytree(ROOT / "policies" / "shared", tmp / "policies" / "shared")
    path = tmp / "inventory" / "lab-keyed" / "nodes.yaml"
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    for doc in docs:
        if doc["metadata"]["name"] in KEYED:
            doc["spec"].setdefault("mesh", {})["public_key"] = _key(doc["metadata"]["name"])
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return tmp / "inventory" / "lab-keyed"


def _controlled_fleet(tmp: Path) -> Path:
    """The lab fleet with the operator's controller in the mesh (Mesh spec.controller): every
    node's peers hold it, from the resolver, whichever engine writes them."""
    shutil.copytree(ROOT / "inventory" / "lab", tmp / "inventory" / "lab-controlled")
    shutil.copytree(ROOT / "policies" / "lab", tmp / "policies" / "lab-controlled")
    shutil.copytree(ROOT / "policies" / "shared", tmp / "policies" / "shared")
    path = tmp / "policies" / "lab-controlled" / "mesh.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["spec"]["controller"] = {"public_key": CONTROLLER_KEY, "endpoint": "192.0.2.1"}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return tmp / "inventory" / "lab-controlled"


def _pulled_fleet(tmp: Path) -> Path:
    """The lab fleet whose lab-gpu-2, a Ray worker and a direct WireGuard peer of the head,
    converges by pull: the head serves it the Ray token over the mesh (socket, service,
    firewall rule) and it reads the token from there, whichever engine applies. As a real
    pull fleet must, it records the controller's key (tests/unit/pullfleet.py)."""
    declare_pull(copy_lab(tmp, "lab-pulled"), ["lab-gpu-2"], fleet="lab-pulled")
    return tmp / "inventory" / "lab-pulled"


# ------------------------------------------------------------------------- the facts

FACTS = {"userspace_wireguard": True, "nvidia_device": True}


# The drivers layer's probe of a Debian 12 node set up by NVIDIA's own instructions (its
# CUDA source with NVIDIA's keyring: adopted, not doubled) whose Debian source lacks contrib.
DRIVER_PROBE = """@@ kernel
6.1.0-28-amd64
@@ module
loaded
@@ secure-boot
   6   0   0   0   0
@@ dkms-key
@@ sources
@@@ /etc/apt/sources.list.d/debian.sources
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

@@@ /etc/apt/sources.list.d/cuda-debian12-x86_64.list
deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] \
https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/ /
"""


def _registered(node: dict[str, Any]) -> dict[str, Any]:
    """What the roles register from the node, as the facts above say."""
    return {
        "drivers_probe": {"stdout": DRIVER_PROBE},
        "wireguard_module": {"stat": {"exists": not FACTS["userspace_wireguard"]}},
        "drivers_pci": {"matched": 1 if FACTS["nvidia_device"] else 0},
        "wireguard_pubkey": {"stdout": _key(node["name"]), "stderr": ""},
        "wireguard_recorded": {},
        "ray_present": {"files": []},
        "storage_recorded": {},
    }


# ------------------------------------------------------------- the Ansible side


def _ansible(layer: str, hostvars: dict[str, Any], groups: set[str], node: dict[str, Any]) -> dict[str, Any]:
    managed = _empty()
    for call in run_layer(layer, hostvars, groups, _registered(node)):
        a, m = call.args, call.module.split(".")[-1]
        if m == "swarm_files":
            for item in a["items"]:
                _file(managed, item)
        elif m == "copy":
            _file(managed, {"path": a["dest"], "state": "file", "content": a["content"], **_attrs(a)})
        elif m == "file":
            _file(managed, {"path": a["path"], "state": a["state"], "content": None, **_attrs(a)})
        elif m == "get_url":
            managed["downloads"].append((a["url"], a["dest"], a["mode"]))
        elif m == "apt_repository":
            managed["sources"].append((a["filename"], a["repo"], a.get("state", "present")))
        elif m == "apt" and "name" in a and a.get("state") == "absent":
            managed["absent"] += list(a["name"])
        elif m == "apt" and "name" in a:
            for name in a["name"]:
                package, _, version = str(name).partition("=")
                managed["packages"][package] = version or None
        elif m == "dpkg_selections":
            managed["held"].append(a["name"])
        elif m == "systemd_service" and ("enabled" in a or "state" in a):
            unit = managed["units"].setdefault(a["name"], {})
            if "enabled" in a:
                unit["enabled"] = bool(a["enabled"])
            if "state" in a:
                unit["running"] = a["state"] != "stopped"
        elif m == "pip":
            # The lock file pip reads is a managed file (compared with the files); its pins
            # decide whether pip runs at all (the role's when: swarm_requirements_missing).
            managed["pip"] = (a["virtualenv"], a["requirements"], dict(call.environment))
        elif m == "swarm_tunables":
            managed["tunables"].append(_spec(a))
        elif m == "swarm_gpu":
            managed["gpu"] = {k: a[k] for k in GPU_REQUEST}
        elif m == "reboot":
            managed["reboot"] = True
        elif m == "fail" and layer == "drivers":
            # The drivers layer's refusal (the probe is a fixture here, so its condition is
            # known; other layers' refusals wait on results this test does not have).
            managed["refused"] = str(a["msg"])
        elif m == "command" and a.get("argv", [])[:2] == ["python3", "-c"] and "stdin" in a:
            # A node-side call: a pull worker's read of the Ray token (its function and arguments).
            # (the reader's templar gives the JSON already parsed; Ansible keeps it text: _unsafe)
            call = a["stdin"] if isinstance(a["stdin"], dict) else json.loads(str(a["stdin"]))
            if call["call"] == "fetch":
                managed["token_read"] = (*call["args"], call["kwargs"].get("check_mode", False))
        elif m == "debug" and "msg" in a:
            msgs = a["msg"] if isinstance(a["msg"], list) else [a["msg"]]
            managed["notes"] |= {str(x) for x in msgs if not str(x).startswith("check mode:")}
    return managed


def _attrs(a: dict[str, Any]) -> dict[str, Any]:
    return {"owner": a.get("owner"), "group": a.get("group"), "mode": a.get("mode")}


# --------------------------------------------------------------- the pyinfra side


class _Op:
    """An operation's result as the layers see it (``_if`` callables read ``changed``)."""


class _Recorder:
    def __init__(self, managed: dict[str, Any], node: dict[str, Any]) -> None:
        self.m, self.node = managed, node

    # operations of swarm_infra.engines.pyinfra.operations
    def managed_file(self, path: str, text: str, **kw: Any) -> _Op:
        _file(self.m, {"path": path, "state": "file", "content": text, **_pick(kw)})
        return _Op()

    def managed_directory(self, path: str, **kw: Any) -> _Op:
        _file(self.m, {"path": path, "state": "directory", "content": None, **_pick(kw)})
        return _Op()

    def managed_mode(self, path: str, **kw: Any) -> _Op:
        _file(self.m, {"path": path, "state": "file", "content": None, **_pick(kw)})
        return _Op()

    def absent_path(self, path: str, **kw: Any) -> _Op:
        _file(self.m, {"path": path, "state": "absent"})
        return _Op()

    def unit(self, service: str, running: bool | None = None, enabled: bool | None = None, **kw: Any) -> _Op:
        unit = self.m["units"].setdefault(service, {})
        if enabled is not None:
            unit["enabled"] = enabled
        if running is not None or kw.get("restarted"):
            unit["running"] = bool(running) or bool(kw.get("restarted"))
        return _Op()

    def ray_token_fetch(self, host_ip: str, port: int, path: str, **kw: Any) -> _Op:
        self.m["token_read"] = (host_ip, port, path, False)
        return _Op()

    def apt_install(self, packages: list[str], **kw: Any) -> _Op:
        self.m["packages"].update(dict.fromkeys(packages))
        return _Op()

    def apt_absent(self, packages: list[str], **kw: Any) -> _Op:
        self.m["absent"] += list(packages)
        return _Op()

    def apt_pinned(self, packages: list[str], version: str, **kw: Any) -> _Op:
        self.m["packages"].update(dict.fromkeys(packages, version))
        return _Op()

    def dpkg_hold(self, packages: list[str], **kw: Any) -> _Op:
        self.m["held"] += list(packages)
        return _Op()

    def pip_requirements(
        self, venv: str, requirements: list[str], lock: str, environment: dict[str, str], **kw: Any
    ) -> _Op:
        self.m["pip"] = (venv, lock, dict(environment))
        return _Op()

    def tunables(self, spec: dict[str, Any], **kw: Any) -> _Op:
        self.m["tunables"].append(_spec(spec))
        return _Op()

    def gpu_settings(self, gpu: dict[str, Any], **kw: Any) -> _Op:
        self.m["gpu"] = {k: gpu[k] for k in GPU_REQUEST}
        return _Op()

    def refuse(self, problems: list[str], **kw: Any) -> _Op:
        if problems:
            self.m["refused"] = "; ".join(problems)
        return _Op()

    def record_note(self, text: str) -> None:
        self.m["notes"].add(text)

    def note_if(self, text: str, **kw: Any) -> _Op:
        self.m["notes"].add(text)
        return _Op()

    def wireguard_file(self, node: dict[str, Any], which: str, **kw: Any) -> _Op:
        # The operation's own body, its file writes recorded.
        for command in O.wireguard_file._inner(node=node, which=which):
            del command
        return _Op()

    def wireguard_key(self, path: str, **kw: Any) -> _Op:
        return _Op()

    def snapshot(self) -> dict[str, Any]:
        # Blank scratch devices (nothing on them), as the storage fixture below says.
        scratch = (self.node["storage"] or {}).get("scratch") or {}
        devices = {
            d: {"probe": "", "discard_max_bytes": 0}
            for d in [*scratch.get("devices", []), scratch.get("target")]
            if d
        }
        return {
            "modules": {"wireguard": not FACTS["userspace_wireguard"]},
            "paths": {},
            "devices": devices,
            "texts": {},  # no pending-reboot marker from an earlier run
            "venvs": {},  # no Ray installed yet: no Ray version change
        }

    def run_settings(self) -> dict[str, Any]:
        # The Rollout the Ansible side's swarm_rollout lookup falls back to without a fleet.
        return {"rollout": rollout_state(None), "verify_argv": []}

    def unit_state(self, unit: str) -> dict[str, bool]:
        # Units were there before (a node leaving a layer): what the roles' unconditional
        # steps assume too.
        return {"enabled": True, "running": False}

    def storage_record(self) -> dict[str, Any]:
        return {}

    def changed(self, meta: Any) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:
        # Operations whose effect this test does not compare (wg syncconf, MTU, storage steps).
        return lambda *a, **kw: _Op()


class _Module:
    """pyinfra's own operation modules (apt, files, server), recorded."""

    def __init__(self, managed: dict[str, Any]) -> None:
        self.m = managed

    def download(self, src: str, dest: str, mode: str, **kw: Any) -> _Op:
        self.m["downloads"].append((src, dest, mode))
        return _Op()

    def repo(self, src: str, filename: str, present: bool = True, **kw: Any) -> _Op:
        self.m["sources"].append((filename, src, "present" if present else "absent"))
        return _Op()

    def reboot(self, **kw: Any) -> _Op:
        self.m["reboot"] = True
        return _Op()

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **kw: _Op()


def _pick(kw: dict[str, Any]) -> dict[str, Any]:
    return {"owner": kw.get("owner"), "group": kw.get("group"), "mode": kw.get("mode")}


def _pyinfra(
    layer: str,
    node: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    reported: bool = True,
    hosts: Collection[str] | None = None,
) -> dict[str, Any]:
    """What pyinfra's ``layer`` manages on ``node``; ``reported``: the run's ``hosts`` (default
    every peer) published their keys, as in ``_ansible``'s hostvars. The controller is no host
    of the run: a key it has comes from the fleet or push mode, never from the run."""
    managed = _empty()
    recorder = _Recorder(managed, node)
    module = _Module(managed)
    with monkeypatch.context() as mp:
        mp.setattr(L, "ops", recorder)
        for name in ("apt", "files", "server"):
            mp.setattr(L, name, module)
        mp.setattr(
            L,
            "host",
            SimpleNamespace(
                data=SimpleNamespace(swarm=node),
                get_fact=lambda fact, *a, **k: (
                    DRIVER_PROBE if fact is F.DriverProbe else FACTS["nvidia_device"]
                ),
            ),
        )
        # The hosts' keys in this run, as operations.peer_keys merges them (its snapshot aside).
        peers = (
            {
                p["name"]: _key(p["name"])
                for p in (node["mesh"] or {}).get("peers", [])
                if hosts is None or p["name"] in hosts
            }
            if reported
            else {}
        )
        mp.setattr(O.mesh, "peer_keys", lambda n: O.wireguard_peer_keys(n, {}, peers))
        mp.setattr(O.managed_file, "_inner", lambda **kw: iter([recorder.managed_file(**kw)]))
        L.layer(layer)
    return managed


# ------------------------------------------------------------------ comparison


def _empty() -> dict[str, Any]:
    return {"files": {}, "downloads": [], "sources": [], "packages": {}, "absent": [], "held": [],
            "units": {}, "pip": None, "tunables": [], "gpu": None, "reboot": False, "notes": set(),
            "refused": None, "token_read": None}  # fmt: skip


def _file(managed: dict[str, Any], item: dict[str, Any]) -> None:
    entry = {k: item.get(k) for k in ("state", "content", "owner", "group", "mode")}
    if entry["state"] == "absent":
        entry = {"state": "absent"}
    previous = managed["files"].get(item["path"])
    if previous and previous.get("content") is not None and entry.get("content") is None:
        return  # a later mode-only step on a file already written (the private key's mode)
    managed["files"][item["path"]] = entry


def _spec(spec: dict[str, Any]) -> dict[str, Any]:
    # Keys a caller leaves out mean "none": the mesh layer passes no sysfs or tmpfiles file.
    return {k: v for k, v in spec.items() if v not in (None, [], {}) or k == "sysctls"}


FLEETS = ["lab", "example", "bare", "keyed", "controlled", "pulled"]
MAKE = {"bare": _bare_fleet, "keyed": _keyed_fleet, "controlled": _controlled_fleet, "pulled": _pulled_fleet}


@pytest.fixture(scope="module")
def fleets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    out = {}
    for fleet in FLEETS:
        inventory = (
            MAKE[fleet](tmp_path_factory.mktemp(fleet)) if fleet in MAKE else ROOT / "inventory" / fleet
        )
        out[fleet] = _inventory(inventory)
    return out


@pytest.mark.parametrize("layer", NAMES)
@pytest.mark.parametrize("fleet", FLEETS)
@pytest.mark.parametrize("userspace", [True, False], ids=["wireguard-go", "kernel-wireguard"])
def test_both_engines_manage_the_same(
    fleet: str,
    layer: str,
    userspace: bool,
    fleets: dict[str, dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    inv = fleets[fleet]
    monkeypatch.setitem(FACTS, "userspace_wireguard", userspace)
    hostvars_all = inv["_meta"]["hostvars"]
    groups = _groups(inv)
    assert hostvars_all, f"{fleet}: no hosts"
    # Every host's public key published in this run, as keys.yml's set_fact does; none in the
    # keyed fleet (the keys its nodes record are all their peers have).
    reported = fleet != "keyed"
    published = {
        h: {**v, "wireguard_public_key": _key(h)} if reported else v for h, v in hostvars_all.items()
    }
    managed_somewhere = False
    for host, hostvars in sorted(hostvars_all.items()):
        node = json.loads(json.dumps(hostvars["swarm"]))
        ansible = _ansible(
            layer, {**hostvars, "inventory_hostname": host, "hostvars": published}, groups[host], node
        )
        pyinfra = _pyinfra(layer, node, monkeypatch, reported, hostvars_all)
        for key in ansible:
            assert _norm(ansible[key]) == _norm(pyinfra[key]), f"{fleet}/{host}/{layer}: {key} differ"
        managed_somewhere |= any(v for k, v in ansible.items() if k != "notes")
    # Not an empty comparison: on the example fleet (real NVML GPUs, scratch, Ray) every layer
    # manages something somewhere.
    if fleet == "example":
        assert managed_somewhere, f"{fleet}: the {layer} layer manages nothing on any node"
    if fleet == "keyed" and layer == "mesh":
        # Not an empty comparison either: the peers' keys come from the fleet alone.
        conf = ansible["files"][node["layout"]["files"]["wireguard_conf"]["path"]]["content"]
        for peer in node["mesh"]["peers"]:
            known = f"PublicKey = {_key(peer['name'])}\n" in conf
            assert known == (peer["name"] in KEYED), f"{host}: {peer['name']}"
    if fleet == "controlled" and layer == "mesh":
        # The controller's peer is in what both engines wrote, with its recorded key.
        conf = ansible["files"][node["layout"]["files"]["wireguard_conf"]["path"]]["content"]
        assert f"[Peer]\n# controller\nPublicKey = {CONTROLLER_KEY}\n" in conf, host


def _norm(value: Any) -> Any:
    if isinstance(value, set):
        return sorted(value)
    if isinstance(value, list):
        return sorted((_norm(v) for v in value), key=repr)
    if isinstance(value, tuple):
        return tuple(_norm(v) for v in value)
    if isinstance(value, dict):
        return {str(k): _norm(v) for k, v in value.items()}
    return value if not isinstance(value, str) else str(value)
