"""The node layers as pyinfra deploys: the same desired state the Ansible roles apply.

One function per layer, in the order of ``playbooks/site.yml``: :func:`host_layer`,
:func:`drivers_layer`, :func:`gpu_layer`, :func:`storage_layer`, :func:`mesh_keys` +
:func:`mesh_layer`, :func:`ray_layer`. Each reads the current host's NodeState
(``host.data.swarm``) and calls operations (:mod:`.operations`, which hand over to
pyinfra's ``files.put``, ``files.directory`` and ``systemd.service`` where something
differs; ``apt.repo``, ``files.download``, ``server.shell``, ``server.reboot`` directly).
Paths, modes and unit names come from NodeState.layout, file texts from
:mod:`swarm_infra.resolve.files` and packages from :mod:`swarm_infra.resolve.packages`,
exactly as the roles take them, so either engine leaves a node in the same state and the
other finds nothing to change. The entry points in ``deploys/`` call these.
"""

from __future__ import annotations

from typing import Any

from pyinfra import host
from pyinfra.operations import apt, files, server

from ...nodeside.facts import scratch_device_problem
from ...resolve import notes
from ...resolve.drivers import driver_plan
from ...resolve.files import layer_files, static_file, tunables_spec, wireguard_dropin_items
from ...resolve.layers import NAMES, node_packages
from ...resolve.ray import pip_environment
from ...resolve.rollout import (
    installed_ray,
    kubectl_drain_argv,
    kubectl_node_argv,
    kubectl_uncordon_argv,
    ray_upgrade_note,
    reboot_due,
    reboot_steps,
)
from ...resolve.rollout import ray_upgrade as rollout_ray_upgrade
from ...resolve.types import NodeState
from . import facts as F
from . import operations as ops

# How long to wait for a node to come back after an allowed reboot (s): the drivers role's
# drivers_reboot_timeout_s.
DRIVERS_REBOOT_TIMEOUT_S = 900


def _node() -> NodeState:
    """The current host's NodeState (the inventory puts it in ``host.data.swarm``)."""
    node: NodeState = host.data.swarm
    return node


def put(node: NodeState, name: str, text: str, what: str, **kwargs: Any) -> Any:
    """The layout's file ``name`` holding ``text``, with its owner and mode."""
    f = node["layout"]["files"][name]
    return ops.managed_file(
        name=what, path=f["path"], text=text, owner=f["owner"], group=f["group"], mode=f["mode"], **kwargs
    )


def directory(node: NodeState, name: str, what: str) -> Any:
    f = node["layout"]["files"][name]
    return ops.managed_directory(
        name=what, path=f["path"], owner=f["owner"], group=f["group"], mode=f["mode"]
    )


def layer_items(node: NodeState, layer: str, what: str) -> dict[str, Any]:
    """Every file and directory ``layer`` manages (:func:`swarm_infra.resolve.files.
    layer_files`, what the Ansible roles give their ``swarm_files`` task), each by its
    operation; returns ``{path: operation}`` for what depends on a change."""
    return {item["path"]: _item(item, what) for item in layer_files(node, layer)}


def _item(item: dict[str, Any], what: str) -> Any:
    """The operation that converges one item of :func:`layer_files`."""
    path, state, name = item["path"], item["state"], f"{what}: {item['path']}"
    if state == "absent":
        return ops.absent_path(name=name, path=path)
    attrs = {"owner": item["owner"], "group": item["group"], "mode": item["mode"]}
    if state == "directory":
        return ops.managed_directory(name=name, path=path, **attrs)
    if item["content"] is None:  # made on the node (a private key): only its attributes
        return ops.managed_mode(name=name, path=path, **attrs)
    return ops.managed_file(name=name, path=path, text=item["content"], **attrs)


def any_changed(*op_metas: Any) -> Any:
    """An ``_if`` callable: true when any of the operations changed something (or, in a
    check run, would)."""
    return lambda: any(ops.changed(o) for o in op_metas)


# ------------------------------------------------------------------------------- host


def host_layer() -> None:
    """apt through the site's package cache (first: every later apt run uses it) and, on a
    pull node, the pull agent's files and timer (a push node loses them), then the sysctls,
    hugepages, THP and the CPU governor of the node's HostProfile, or none."""
    node = _node()
    timer = node["layout"]["units"]["agent_timer"]
    if not node["pull"] and ops.unit_state(timer)["enabled"]:  # before its file goes
        ops.unit(
            name="Stop the pull agent (the node converges by push)",
            service=timer,
            running=False,
            enabled=False,
        )
    items = layer_items(node, "host", "Point apt at the site's package cache; the pull agent's files")
    if node["pull"]:
        files_ = node["layout"]["files"]
        ops.unit(
            name="Reload systemd (the pull agent's units changed)",
            service=timer,
            daemon_reload=True,
            restarted=True,
            _if=any_changed(items[files_["agent_service"]["path"]], items[files_["agent_timer"]["path"]]),
        )
        ops.unit(name="Run the pull agent on its timer", service=timer, running=True, enabled=True)
    ops.tunables(
        name="Converge sysctls, hugepages, THP and the CPU governor to the declared set",
        spec=tunables_spec(_node(), "host"),
    )


# ---------------------------------------------------------------------------- drivers


def drivers_layer(require_device: bool = True, kernel_headers: bool = True) -> None:
    """The NVIDIA driver stack of the declared source at the declared version, pinned and
    held (:mod:`swarm_infra.resolve.drivers`); nouveau blacklisted; nvidia-persistenced
    (and Fabric Manager on NVSwitch boards); pynvml and the kernel headers; no container
    toolkit (the GPU Operator's owns the runtime; one installed before is removed); a
    reboot only when allowed (else marked and reported). The node's probe first:
    a source the node has for the same repository is adopted, and Secure Boot without an
    enrolled DKMS key or a foreign NVIDIA source is refused before anything is installed.
    Simulated GPUs, and nodes without an NVIDIA PCI device, are reported and skipped.
    ``kernel_headers`` false: no linux-headers (a kernel that is not the node's own)."""
    node = _node()
    gpu = node["gpu"]
    if not gpu or not gpu["driver"]:
        return
    driver, layout = gpu["driver"], node["layout"]
    if gpu["backend"] == "simulated":
        ops.record_note(notes.drivers_simulated(node))
        return
    if require_device and not host.get_fact(F.NvidiaPciDevice):
        ops.record_note(notes.drivers_no_device(node))
        return
    # The node's probe, decided on by the library (resolve.drivers.driver_plan), as the role does.
    plan = driver_plan(driver, host.get_fact(F.DriverProbe))
    ops.refuse(
        name="Refuse before installing anything (Secure Boot, no key; another NVIDIA source)",
        problems=plan["problems"],
    )
    for text in plan["notes"]:
        ops.record_note(text)
    blacklist = put(node, "nouveau_blacklist", static_file(node, "nouveau_blacklist"), "Blacklist nouveau")
    server.shell(
        name="Rebuild the initramfs",
        commands=["test ! -x /usr/sbin/update-initramfs || update-initramfs -u"],
        _if=any_changed(blacklist),
    )
    keyrings = layout["files"]["apt_keyrings_dir"]["path"]
    sources = [
        apt.repo(name=f"Drop our {src['name']} apt source (unused)", src=src["repo"],
                 filename=src["name"], present=False)
        for src in plan["remove"]
    ]  # fmt: skip
    for src in plan["add"]:
        if src["key_url"]:
            files.download(
                name=f"Fetch the {src['name']} apt signing key",
                src=src["key_url"],
                dest=f"{keyrings}/{src['name']}.asc",
                user="root",
                group="root",
                mode="0644",
            )
        sources.append(
            apt.repo(name=f"Add the {src['name']} apt source", src=src["repo"], filename=src["name"])
        )
    pin = put(node, "driver_preferences", static_file(node, "driver_preferences"), "Pin the driver packages")
    apt.update(name="Refresh the apt cache after a source or pin change", _if=any_changed(pin, *sources))
    install = ops.apt_pinned(
        name="Install the driver at the declared version",
        packages=driver["packages"],
        version=driver["apt_version"],
    )
    ops.apt_install(
        name="Install pynvml and the kernel headers",
        packages=[*driver["extra_packages"], *(plan["headers"] if kernel_headers else [])],
    )
    # One owner of the container runtime: the GPU Operator's toolkit (resolve.drivers.
    # CONTAINER_RUNTIME_OWNER). A toolkit an earlier converge installed goes.
    if driver["absent_packages"]:
        ops.apt_absent(
            name="Remove the NVIDIA container toolkit (the GPU Operator's toolkit owns the runtime)",
            packages=driver["absent_packages"],
        )
    ops.dpkg_hold(name="Hold the driver packages", packages=driver["packages"])
    # nvidia-persistenced (NVIDIA calls nvidia-smi -pm legacy) and, on NVSwitch boards, Fabric
    # Manager (CUDA waits for it). Both need the kernel module: where it is not loaded (a
    # driver installed and the reboot still to come) they are enabled and start with it.
    for key in ("persistenced", *(("fabricmanager",) if driver["fabric_manager"] else ())):
        ops.unit(
            name=f"Enable {'and start ' if plan['module_loaded'] else ''}{layout['units'][key]}",
            service=layout["units"][key],
            running=True if plan["module_loaded"] else None,
            enabled=True,
        )
    reboot_batch(node, install)


def reboot_batch(node: NodeState, install: Any) -> None:
    """What the drivers layer's batch does about a reboot, the steps
    :func:`swarm_infra.resolve.rollout.reboot_steps` names (the role's tasks/reboot.yml runs
    the same, each operation's name starting with its step): due when the driver package
    changed (``install``, at run time) or the pending-reboot marker names the driver (read
    with the node's snapshot). Without allow_reboot: mark and report it pending. With it,
    in the batch: drain Ray, kubectl drain, stop Ray, reboot, check the boot id changed,
    the GPU layer, swarm verify, kubectl uncordon."""
    from ..reboot import ray_drain_call

    layout, gpu = node["layout"], node["gpu"]
    assert gpu is not None and gpu["driver"] is not None
    run = ops.run_settings()
    rollout = run["rollout"]
    marker = ops.snapshot()["texts"].get(layout["files"]["reboot_required"]["path"])
    steps = reboot_steps(node, rollout, True)
    # Due at run time when only this run's install makes it so.
    when: dict[str, Any] = {} if reboot_due(False, marker) else {"_if": any_changed(install)}
    if "mark-pending" in steps:
        what = "[mark-pending] Mark the reboot as pending (the GPU profile does not allow one)"
        put(node, "reboot_required", static_file(node, "reboot_required"), what, **when)
        text = notes.drivers_reboot_pending(node)
        ops.note_if(name="[report-pending] Report the pending reboot", text=text, **when)
        return
    if "reboot" not in steps:
        return
    grace, context, name = rollout["drain_grace_s"], rollout["kubernetes_context"], node["name"]
    if "ray-drain" in steps:
        call = ray_drain_call(node, grace, f"a reboot into NVIDIA driver {gpu['driver']['apt_version']}")
        ops.ray_drain(name="[ray-drain] Drain the node out of the Ray cluster", argv=call["argv"],
                      stdin=call["stdin"], _env=call["env"], **when)  # fmt: skip
    if "kubernetes-drain" in steps and context:
        ops.controller_command(name="[kubernetes-drain] Cordon and drain the node (kubectl drain)",
                               argv=kubectl_drain_argv(context, name, grace),
                               when_ok=kubectl_node_argv(context, name), **when)  # fmt: skip
    if "ray-stop" in steps and node["ray"] is not None:
        ops.unit(name="[ray-stop] Stop Ray on the node (it starts again at boot)",
                 service=layout["units"][f"ray_{node['ray']['role']}"], running=False, **when)  # fmt: skip
    ops.boot_id(name="[boot-id] Read the boot id", **when)
    server.reboot(name="[reboot] Reboot into the new driver and wait for the node",
                  reboot_timeout=DRIVERS_REBOOT_TIMEOUT_S, **when)  # fmt: skip
    ops.boot_id_changed(name="[boot-id-changed] Fail unless the node booted", **when)
    ops.gpu_reapply(name="[gpu-converge] Converge the GPU layer on the new driver", gpu=gpu, **when)
    ops.verify_node(name="[verify] Verify the node's drivers and GPU layers (swarm verify)", node=name,
                    junit_dir=run.get("verify_dir", "/tmp"), **when)  # fmt: skip
    if "kubernetes-uncordon" in steps and context:
        ops.controller_command(name="[kubernetes-uncordon] Let the verified node take pods again",
                               argv=kubectl_uncordon_argv(context, name),
                               when_ok=kubectl_node_argv(context, name), **when)  # fmt: skip


# -------------------------------------------------------------------------------- gpu


def gpu_layer() -> None:
    """The node-side GPU code, the persisted settings and the boot-time re-apply unit, then
    the settings themselves; a node without GPUs loses all of it."""
    node = _node()
    gpu, layout = node["gpu"], node["layout"]
    unit = layout["units"]["gpu_apply"]
    if not gpu:
        if ops.unit_state(unit)["enabled"]:
            ops.unit(name="Disable the re-apply unit", service=unit, enabled=False)
        layer_items(node, "gpu", "Remove the GPU code, settings and unit")
        return
    if gpu["backend"] == "simulated":
        ops.record_note(notes.gpu_simulated(node))
    files_ = layer_items(node, "gpu", "GPU code, settings and boot-time re-apply unit")
    unit_file = files_[layout["files"]["gpu_unit"]["path"]]
    ops.unit(
        name="Reload systemd (the re-apply unit changed)",
        service=unit,
        daemon_reload=True,
        _if=any_changed(unit_file),
    )
    ops.unit(name="Enable the re-apply unit", service=unit, enabled=True)
    ops.gpu_settings(name="Converge GPU settings", gpu=gpu)


# ---------------------------------------------------------------------------- storage


def storage_layer() -> None:
    """Local NVMe scratch: RAID 0 over several devices (mdadm, persisted), the declared
    filesystem with its label, mounted by label with the declared options (``discard``
    where the device supports it), in fstab. Never formats a device holding anything the
    project did not make. Scratch no longer declared is unmounted and leaves fstab (its
    data stays)."""
    node = _node()
    storage, layout = node["storage"], node["layout"]
    previous = ops.storage_record().get("mount_path")
    if previous and (not storage or previous != storage["scratch"]["mount_path"]):
        ops.unmount(name="Unmount scratch that is no longer declared here", path=previous)
    if not storage:
        layer_items(node, "storage", "Forget it")
        return
    scratch = storage["scratch"]
    ops.apt_install(
        name="Install the filesystem tools, fio (and mdadm for RAID 0)",
        packages=node_packages(node, "storage"),
    )
    devices = ops.snapshot()["devices"]
    problems = [scratch_device_problem(d, devices[d]["probe"], dict(scratch)) for d in scratch["devices"]]
    ops.refuse(name="Refuse devices holding anything swarm did not make", problems=[p for p in problems if p])
    if scratch["raid0"]:
        assert scratch["array"] is not None  # set whenever raid0 is
        ops.md_raid0(name="Assemble the RAID 0 array", array=scratch["array"], devices=scratch["devices"])
        ops.mdadm_conf(
            name="Persist the array for boot",
            array=scratch["array"],
            path=layout["files"]["mdadm_conf"]["path"],
        )
    ops.filesystem(
        name="Make the filesystem (only on a blank target; an existing one is kept)",
        device=scratch["target"],
        fstype=scratch["filesystem"],
        label=scratch["label"],
    )
    discard = devices.get(scratch["target"], {}).get("discard_max_bytes", 0) > 0
    ops.mount(
        name="Mount it by label, persisted in fstab",
        source=f"LABEL={scratch['label']}",
        path=scratch["mount_path"],
        fstype=scratch["filesystem"],
        options=list(scratch["mount_options"]) + (["discard"] if discard else []),
    )
    layer_items(
        node, "storage", "Record the scratch the project made (so that removing its declaration unmounts it)"
    )


# ------------------------------------------------------------------------------- mesh


def mesh_keys() -> None:
    """WireGuard tools, and the node's private key made on the node (0600, never read back);
    its public key is kept for the peers' configuration. Runs on every node before
    :func:`mesh_layer` (each operation runs on all hosts before the next)."""
    node = _node()
    if not node["mesh"]:
        return
    userspace = not ops.snapshot()["modules"].get("wireguard")
    ops.apt_install(
        name="Install WireGuard tools and iperf3 (and wireguard-go without the kernel module)",
        packages=node_packages(node, "mesh", userspace_wireguard=userspace),
    )
    directory(node, "wireguard_dir", "Create the WireGuard directory")
    key = node["layout"]["files"]["wireguard_key"]
    ops.wireguard_key(
        name="Generate the private key on the node (0600, never read back)",
        path=key["path"],
        declared=node["mesh"].get("public_key"),
    )
    ops.managed_mode(
        name="Keep the private key readable by root only",
        path=key["path"],
        owner=key["owner"],
        group=key["group"],
        mode=key["mode"],
    )


def mesh_layer() -> None:
    """The peers' public keys recorded for limited runs, forwarding on relays and hubs (and
    off elsewhere), wg-quick with wireguard-go where the kernel has no module, the
    configuration applied with ``wg syncconf`` (tunnels stay up), runtime drift of peers and
    MTU repaired in place, and an interface restart only when its address changed."""
    node = _node()
    mesh = node["mesh"]
    if not mesh:
        return
    layout = node["layout"]
    unit = layout["units"]["wireguard"]
    ops.wireguard_file(
        name="Record the peer public keys (not secret) for runs limited to other hosts",
        node=node,
        which="peers",
    )
    ops.tunables(
        name="Forward between peers on relays and hubs, and stop where a node no longer is one",
        spec=tunables_spec(node, "mesh"),
    )
    dropin = None
    if not ops.snapshot()["modules"].get("wireguard"):
        for item in wireguard_dropin_items(node):
            dropin = _item(item, "Select the userspace implementation (no WireGuard kernel module)")
    conf = ops.wireguard_file(name="Write the wg-quick configuration", node=node, which="conf")
    if dropin is not None:
        ops.unit(
            name="Reload systemd (the wg-quick drop-in changed)",
            service=unit,
            daemon_reload=True,
            _if=any_changed(dropin),
        )
    ops.unit(name="Enable and start the interface", service=unit, running=True, enabled=True)
    ops.wireguard_sync(name="Sync WireGuard peers", node=node, when_config_changed=conf)
    ops.wireguard_mtu(name="Set the declared MTU on the running interface (no tunnel drops)", mesh=mesh)
    ops.wireguard_address(
        name="Restart the interface when its address differs (peers address this node by it)",
        mesh=mesh,
        unit=unit,
    )


# -------------------------------------------------------------------------------- ray


def ray_upgrade() -> None:
    """A Ray version change, before the Ray layer (the role's tasks/upgrade.yml, the same
    steps, :data:`swarm_infra.resolve.rollout.RAY_UPGRADE_STEPS`): a member whose virtualenv
    holds another Ray than the declared one (the node's snapshot) is drained (the Rollout's
    grace), then stopped, the workers before the head, in one step on every member at once
    (Ray refuses mixed versions); :func:`ray_layer` then installs the new Ray and starts
    the head, then the workers."""
    from ..reboot import ray_drain_call

    node = _node()
    ray, layout = node["ray"], node["layout"]
    if not ray:
        return
    venv = ops.snapshot()["venvs"].get(layout["files"]["ray_venv"]["path"]) or {}
    change = rollout_ray_upgrade({node["name"]: node}, {node["name"]: installed_ray(venv)})
    if change is None:
        return
    grace = ops.run_settings()["rollout"]["drain_grace_s"]
    ops.record_note(ray_upgrade_note(change, grace))
    call = ray_drain_call(node, grace, f"an upgrade to Ray {change['to']}")
    ops.ray_drain(name="[ray-drain] Drain the member out of the Ray cluster", argv=call["argv"],
                  stdin=call["stdin"], _env=call["env"])  # fmt: skip
    if ray["role"] == "worker":
        ops.unit(name="[ray-stop-workers] Stop Ray on the workers that change",
                 service=layout["units"]["ray_worker"], running=False)  # fmt: skip
    else:
        ops.unit(name="[ray-stop-head] Stop Ray on the head (the workers that change are stopped)",
                 service=layout["units"]["ray_head"], running=False)  # fmt: skip


def ray_layer() -> None:
    """The fleet's own Ray cluster over the mesh: the cluster's token (made on the head,
    copied to the workers; a pull worker reads it from the head's token port over the mesh,
    which the head serves to such workers only), Ray's unprivileged user, nftables letting
    only the members reach Ray's ports, the pinned Ray in its virtualenv from the declared
    package index, and the head or worker unit (restarted only when Ray, its unit or its
    token changed). A node outside the cluster keeps none of the layer's units or files."""
    node = _node()
    ray, layout = node["ray"], node["layout"]
    paths, units = layout["files"], layout["units"]
    own = units[f"ray_{ray['role']}"] if ray else None
    serves = bool(ray and ray["firewall"]["token_port"] is not None)
    unit_files = {r: f"{r}_unit" for r in ("ray_head", "ray_worker", "ray_firewall")}
    for role, file in {**unit_files, "ray_token_socket": "ray_token_socket"}.items():
        present = ops.snapshot()["paths"].get(paths[file]["path"]) is not None
        keep = role == "ray_firewall" or units[role] == own or (role == "ray_token_socket" and serves)
        if present and (not ray or not keep):
            ops.unit(
                name=f"Stop and disable {units[role]} (not this node's)",
                service=units[role],
                running=False,
                enabled=False,
            )
    if not ray:
        layer_items(node, "ray", "Remove what the Ray layer made on a node outside the Ray cluster")
        return
    assert own is not None  # set whenever ray is
    if ray["simulated_gpus"]:
        ops.record_note(notes.ray_simulated_gpus(node))
    ops.apt_install(name="Install the venv module and nftables", packages=node_packages(node, "ray"))
    # Ray's user, the token file's mode, the firewall rules letting only the cluster's
    # members reach Ray's ports, its unit, this node's Ray unit; then Ray's token: made on
    # the head, copied from it to each worker (the head's step runs first), root's only.
    made = layer_items(node, "ray", "Ray layer")
    source = ray["token_source"]
    if source is None:
        token = ops.ray_token(name="Ray's token", path=paths["ray_auth_token"]["path"], head=ray["head"])
    else:  # a pull worker: from the head's token port over the mesh
        token = ops.ray_token_fetch(
            name="Ray's token, read from the head over the mesh",
            host_ip=source["host"],
            port=source["port"],
            path=paths["ray_auth_token"]["path"],
        )
    ops.system_user(
        name="Make Ray's unprivileged user from its sysusers.d file",
        user=ray["user"],
        sysusers=paths["ray_sysusers"]["path"],
    )
    rules = made[paths["ray_firewall_rules"]["path"]]
    fw_unit = made[paths["ray_firewall_unit"]["path"]]
    unit_file = made[paths[f"ray_{ray['role']}_unit"]["path"]]
    firewall = units["ray_firewall"]
    ops.unit(
        name="Reload systemd (the firewall unit changed)",
        service=firewall,
        daemon_reload=True,
        _if=any_changed(fw_unit),
    )
    ops.unit(name="Enable and start the firewall (before Ray)", service=firewall, running=True, enabled=True)
    # Reloaded, not restarted: Ray's units require the firewall, and a restart of a required
    # unit restarts them (systemd.unit(5), Requires=); new members must not restart Ray.
    ops.unit(name="Reload the Ray firewall", service=firewall, reloaded=True, _if=any_changed(rules, fw_unit))
    if serves:
        # The head's token port for pull workers, after the firewall that admits only them.
        socket_file = made[paths["ray_token_socket"]["path"]]
        service_file = made[paths["ray_token_service"]["path"]]
        sock = units["ray_token_socket"]
        ops.unit(
            name="Reload systemd (the token socket or service changed)",
            service=sock,
            daemon_reload=True,
            _if=any_changed(socket_file, service_file),
        )
        ops.unit(name="Enable and start the token socket for pull workers", service=sock, running=True,
                 enabled=True)  # fmt: skip
        ops.unit(name="Restart the token socket (its address or port changed)", service=sock,
                 restarted=True, _if=any_changed(socket_file))  # fmt: skip
    install = ops.pip_requirements(
        name="Install Ray's lock in its virtualenv from the declared package index",
        venv=paths["ray_venv"]["path"],
        requirements=ray["requirements"],
        lock=paths["ray_lock"]["path"],
        environment=pip_environment(node),
    )
    ops.unit(
        name="Reload systemd (the Ray unit changed)",
        service=own,
        daemon_reload=True,
        _if=any_changed(unit_file),
    )
    # Only a Ray that ran before this run runs an old Ray or unit: one this run starts
    # already runs the new ones, and restarting it would be wasted time.
    was_running = ops.unit_state(own)["running"]
    ops.unit(name="Enable and start Ray", service=own, running=True, enabled=True)
    ops.unit(
        name="Restart Ray",
        service=own,
        restarted=True,
        _if=lambda: was_running and any_changed(install, unit_file, token)(),
    )


# ------------------------------------------------------------------------------- site

_STEPS = {
    "host": (host_layer,),
    "drivers": (drivers_layer,),
    "gpu": (gpu_layer,),
    "storage": (storage_layer,),
    "mesh": (mesh_keys, mesh_layer),
    "ray": (ray_layer,),
}
# The registry's layers, in its order, each with its steps: a layer the registry names and
# this module does not deploy fails at import, not halfway through a converge.
LAYERS = {name: _STEPS[name] for name in NAMES}


def site() -> None:
    """Every layer, in the order of ``playbooks/site.yml``."""
    for steps in LAYERS.values():
        for step in steps:
            step()


def layer(name: str) -> None:
    """One layer by name (``host``, ``drivers``, ``gpu``, ``storage``, ``mesh``, ``ray``), or
    ``site`` for all. Raises KeyError for another name."""
    if name == "site":
        site()
        return
    for step in LAYERS[name]:
        step()
