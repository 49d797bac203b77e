"""Ansible filters ``swarm_*``: decisions the library makes, for roles to apply.

Filters run on the controller, like the inventory plugin, so they call the swarm_infra
library directly; roles never restate its rules in Jinja. The pyinfra deploys call the same
functions, so both engines write the same bytes. Text a filter returns is marked unsafe
(``wrap_var``): it holds fleet strings, which Ansible must never template.

Each filter is documented in its own ``<name>.yml`` beside this file, as ansible-core
documents its own filters (``ansible-doc -t filter swarm_file``); this file carries no
DOCUMENTATION, which ansible-doc would show for every filter it exports instead.
"""

from __future__ import annotations

from typing import Any


def _unsafe(text: str) -> Any:
    # Unsafe (never templated), and native text: Ansible would otherwise turn a result that
    # starts with "{" or "[" (a JSON file) into a dict, and copy would write that its own way.
    from ansible.utils.unsafe_proxy import NativeJinjaUnsafeText

    return NativeJinjaUnsafeText(text)


def swarm_file(node: dict, name: str) -> Any:
    from swarm_infra.resolve.files import static_file

    return _unsafe(static_file(node, str(name)))  # unsafe wrappers are str/dict/list


def swarm_layer_files(node: dict, layer: str, peer_keys: dict | None = None) -> Any:
    from ansible.utils.unsafe_proxy import wrap_var

    from swarm_infra.resolve.files import layer_files

    return wrap_var(layer_files(node, str(layer), dict(peer_keys or {})))


def swarm_wireguard_dropin_items(node: dict) -> Any:
    from ansible.utils.unsafe_proxy import wrap_var

    from swarm_infra.resolve.files import wireguard_dropin_items

    return wrap_var(wireguard_dropin_items(node))


def swarm_tunables_spec(node: dict, layer: str) -> dict:
    from ansible.utils.unsafe_proxy import wrap_var

    from swarm_infra.resolve.files import tunables_spec

    return wrap_var(tunables_spec(node, str(layer)))


def swarm_wireguard_peer_keys(node: dict, recorded: dict | None, hostvars: Any) -> dict[str, str]:
    """Keys of the declared peers: those published in this run (``wireguard_public_key`` of
    each peer host in ``hostvars``) over those ``recorded`` on the node."""
    from swarm_infra.resolve.files import wireguard_peer_keys

    fresh = {}
    for peer in node["mesh"]["peers"]:
        name = str(peer["name"])
        if name in hostvars:
            fresh[name] = str(hostvars[name].get("wireguard_public_key", "") or "")
    from ansible.utils.unsafe_proxy import wrap_var

    return wrap_var(wireguard_peer_keys(node, dict(recorded or {}), fresh))


def swarm_wireguard_conf(node: dict, peer_keys: dict) -> Any:
    from swarm_infra.resolve.files import wireguard_conf

    return _unsafe(wireguard_conf(node, dict(peer_keys)))


def swarm_wireguard_peers(node: dict, peer_keys: dict) -> Any:
    from swarm_infra.resolve.files import wireguard_peers

    return _unsafe(wireguard_peers(node, dict(peer_keys)))


def swarm_wireguard_running_differs(node: dict, peer_keys: dict, allowed_ips_output: str) -> bool:
    from swarm_infra.resolve.files import wireguard_running_differs

    return wireguard_running_differs(node, dict(peer_keys), str(allowed_ips_output))


def swarm_wireguard_key_problem(value: Any) -> str:
    """Why a node's reported public key is not a WireGuard key ("" when it is one)."""
    from swarm_infra.resolve.keys import wireguard_key_problem

    return wireguard_key_problem(str(value)) or ""


def swarm_wireguard_key_change_problem(
    value: Any, record: Any, node: str, accepted: Any, declared: Any = None
) -> str:
    """Why ``node``'s reported key differs from the key the fleet records for it
    (``declared``: NodeState ``mesh.public_key``), or, with none recorded there, from the
    controller's record and is not accepted, or is another node's in that record (the first
    binding stands, unless the operator accepts this node's key) ("" otherwise; a malformed
    key is :func:`swarm_wireguard_key_problem`'s to refuse)."""
    from swarm_infra.resolve.keys import key_change_problem, key_taken_problem, wireguard_key_problem

    reported = str(value)
    if wireguard_key_problem(reported):
        return ""
    bindings = {str(k): str(v) for k, v in dict(record or {}).items()}
    was_accepted = node in list(accepted or [])
    return (
        key_change_problem(reported, bindings.get(node), was_accepted, str(declared or "") or None)
        or (None if was_accepted or declared else key_taken_problem(node, reported, bindings))
        or ""
    )


def swarm_note(node: dict, name: str) -> Any:
    from swarm_infra.resolve.notes import note

    return _unsafe(note(node, str(name)))


def swarm_note_gpu_reset(found: dict) -> Any:
    from swarm_infra.resolve.notes import gpu_reset_required

    return _unsafe(gpu_reset_required(found))


def swarm_note_not_applied(item: dict) -> Any:
    from swarm_infra.resolve.notes import not_applied

    return _unsafe(not_applied(item))


def swarm_packages(layer: str) -> Any:
    """The Debian packages of a node layer (``filesystems``: the package per filesystem)."""
    from swarm_infra.resolve.packages import FILESYSTEM_PACKAGES, packages

    return dict(FILESYSTEM_PACKAGES) if layer == "filesystems" else packages(str(layer))


def swarm_installed_distributions_argv(venv: str) -> list[str]:
    from swarm_infra.nodeside.snapshot import installed_distributions_argv

    return installed_distributions_argv(str(venv))


def swarm_requirements_missing(requirements: list, installed_json: str) -> list[str]:
    from swarm_infra.nodeside.facts import requirements_missing

    return requirements_missing([str(r) for r in requirements], str(installed_json))


def swarm_pip_environment(node: dict) -> dict:
    """pip's environment for installing Ray's lock (resolve.ray.pip_environment)."""
    from swarm_infra.resolve.ray import pip_environment

    return pip_environment(node)  # type: ignore[arg-type]


def swarm_ray_token_command(path: str) -> str:
    """The shell command making the Ray cluster's token on the head (resolve.ray.token_command)."""
    from swarm_infra.resolve.ray import token_command

    return token_command(str(path))


def swarm_ray_token_problem(text: str) -> str:
    """Why a token read from the head is not one ("" when it is: resolve.ray.token_problem)."""
    from swarm_infra.resolve.ray import token_problem

    return token_problem(str(text)) or ""


def swarm_ip_link(output: str) -> dict:
    """``ip -j addr show dev IFACE`` as ``{mtu, inet: [CIDR, ...]}`` ({} when absent)."""
    from swarm_infra.nodeside.facts import ip_link

    return ip_link(str(output))


def swarm_scratch_filesystem_made(probe_output: str, scratch: dict) -> bool:
    """Whether ``blkid -p -o export DEVICE``'s output shows the scratch filesystem made."""
    from swarm_infra.nodeside.facts import blkid_export, scratch_filesystem_made

    return scratch_filesystem_made(blkid_export(str(probe_output)), dict(scratch))


def swarm_scratch_problems(results: list, scratch: dict) -> list[str]:
    from swarm_infra.nodeside.facts import blkid_export, scratch_device_problem

    problems = (
        scratch_device_problem(str(r["item"]), blkid_export(str(r.get("stdout", ""))), dict(scratch))
        for r in results
    )
    return [p for p in problems if p]


def swarm_driver_probe(_: object = "") -> str:
    """The drivers layer's node probe (resolve.drivers.NODE_PROBE), a constant command."""
    from swarm_infra.resolve.drivers import NODE_PROBE

    return NODE_PROBE


def swarm_driver_plan(driver: dict, probe_output: str) -> dict:
    """resolve.drivers.driver_plan: the drivers layer's decisions from the node's probe."""
    from swarm_infra.resolve.drivers import driver_plan

    return dict(driver_plan(driver, str(probe_output)))


def swarm_reboot_steps(
    node: dict, rollout: dict, driver_changed: bool, marker: dict | None = None
) -> list[str]:
    """resolve.rollout.reboot_steps: what the drivers layer's batch does on the node, given
    whether the driver package changed in this run and ``marker`` (the registered slurp of
    the pending-reboot marker; absent or failed: no marker)."""
    import base64

    from swarm_infra.resolve.rollout import reboot_due, reboot_steps

    text = None
    if marker and not marker.get("failed") and marker.get("content") is not None:
        text = base64.b64decode(str(marker["content"])).decode(errors="replace")
    return reboot_steps(node, rollout, reboot_due(bool(driver_changed), text))


def swarm_ray_drain_call(node: dict, grace_s: int, why: str) -> dict:
    """engines.reboot.ray_drain_call: argv, stdin and environment of the node's Ray drain
    (fleet strings in stdin only, never templated)."""
    from swarm_infra.engines.reboot import ray_drain_call

    call = ray_drain_call(node, int(grace_s), str(why))  # type: ignore[arg-type]
    return {"argv": call["argv"], "stdin": _unsafe(call["stdin"]), "env": call["env"]}


def swarm_ray_token_fetch_call(node: dict, check_mode: bool = False) -> dict:
    """engines.raytoken.ray_token_fetch_call: argv and stdin of a pull worker's read of the
    Ray token from the head over the mesh (fleet strings in stdin only, never templated)."""
    from swarm_infra.engines.raytoken import ray_token_fetch_call

    call = ray_token_fetch_call(node, bool(check_mode))  # type: ignore[arg-type]
    return {"argv": call["argv"], "stdin": _unsafe(call["stdin"])}


def swarm_kubectl_argv(node: str, step: str, context: str, grace_s: int = 0) -> list[str]:
    """resolve.rollout's kubectl commands for a rebooted node: ``step`` ``member`` (is it a
    node of the cluster), ``drain`` or ``uncordon``."""
    from swarm_infra.resolve import rollout

    if step == "member":
        return rollout.kubectl_node_argv(context, node)
    if step == "drain":
        return rollout.kubectl_drain_argv(context, node, int(grace_s))
    if step == "uncordon":
        return rollout.kubectl_uncordon_argv(context, node)
    raise ValueError(f"swarm_kubectl_argv: unknown step {step!r}")


def swarm_ray_upgrade(node: dict, installed_json: str, grace_s: int = 0) -> Any:
    """resolve.rollout.ray_upgrade for this node (its NodeState, and the JSON that
    C(swarm_installed_distributions_argv) printed for its Ray virtualenv; empty: none):
    the version change with its note, or None."""
    import json

    from swarm_infra.resolve.rollout import installed_ray, ray_upgrade, ray_upgrade_note

    try:
        dists = json.loads(installed_json) if installed_json else {}
    except ValueError:
        dists = {}
    version = installed_ray(dists) if isinstance(dists, dict) else None
    change = ray_upgrade({node["name"]: node}, {node["name"]: version})  # type: ignore[dict-item]
    if change is None:
        return None
    return {**change, "note": _unsafe(ray_upgrade_note(change, int(grace_s)))}


class FilterModule:
    def filters(self) -> dict:
        return {
            "swarm_file": swarm_file,
            "swarm_tunables_spec": swarm_tunables_spec,
            "swarm_layer_files": swarm_layer_files,
            "swarm_wireguard_dropin_items": swarm_wireguard_dropin_items,
            "swarm_wireguard_peer_keys": swarm_wireguard_peer_keys,
            "swarm_wireguard_conf": swarm_wireguard_conf,
            "swarm_wireguard_peers": swarm_wireguard_peers,
            "swarm_wireguard_running_differs": swarm_wireguard_running_differs,
            "swarm_scratch_problems": swarm_scratch_problems,
            "swarm_packages": swarm_packages,
            "swarm_driver_probe": swarm_driver_probe,
            "swarm_driver_plan": swarm_driver_plan,
            "swarm_reboot_steps": swarm_reboot_steps,
            "swarm_ray_drain_call": swarm_ray_drain_call,
            "swarm_ray_token_fetch_call": swarm_ray_token_fetch_call,
            "swarm_kubectl_argv": swarm_kubectl_argv,
            "swarm_ray_upgrade": swarm_ray_upgrade,
            "swarm_note": swarm_note,
            "swarm_wireguard_key_problem": swarm_wireguard_key_problem,
            "swarm_wireguard_key_change_problem": swarm_wireguard_key_change_problem,
            "swarm_note_gpu_reset": swarm_note_gpu_reset,
            "swarm_note_not_applied": swarm_note_not_applied,
            "swarm_ip_link": swarm_ip_link,
            "swarm_scratch_filesystem_made": swarm_scratch_filesystem_made,
            "swarm_installed_distributions_argv": swarm_installed_distributions_argv,
            "swarm_requirements_missing": swarm_requirements_missing,
            "swarm_ray_token_command": swarm_ray_token_command,
            "swarm_ray_token_problem": swarm_ray_token_problem,
            "swarm_pip_environment": swarm_pip_environment,
        }
