"""The fleet's Rollout as Ansible play keywords (and pyinfra batches)."""

from __future__ import annotations

from typing import Any

from ..fleet.model import Rollout
from .analysis import Analysis
from .types import NodeState, RolloutState


def rollout_state(a: Analysis | None) -> RolloutState:
    """``serial`` (canary batch first, then a percentage of the hosts),
    ``max_fail_percentage``, ``drain_grace_s`` and ``kubernetes_context``, from the fleet's
    Rollout, or the Rollout defaults when it has none (or ``a`` is None: no fleet)."""
    rollout = a.fleet.rollout if a is not None else None
    r = rollout or Rollout(name="default", source=None)
    return {
        "serial": [r.canary_hosts, f"{r.batch_percent}%"],
        "max_fail_percentage": r.max_fail_percentage,
        "drain_grace_s": r.drain_grace_s,
        "kubernetes_context": r.kubernetes_context,
    }


def rollout_batches(hosts: list[str], rollout: RolloutState) -> list[list[str]]:
    """``hosts`` cut into rolling batches as Ansible cuts a play's hosts by ``serial``: each
    entry of ``rollout["serial"]`` in turn (a count, or ``"N%"`` of all the hosts, at least
    1), the last repeated until every host has a batch. Used by the pyinfra engine, so both
    engines roll out in the same steps."""
    left, out, i = list(hosts), [], 0
    serial = rollout["serial"] or [len(hosts)]
    while left:
        step = serial[min(i, len(serial) - 1)]
        size = (len(hosts) * int(step[:-1])) // 100 if isinstance(step, str) else int(step)
        size = max(size, 1)
        out.append(left[:size])
        left = left[size:]
        i += 1
    return out


def batch_failed(failed: int, size: int, rollout: RolloutState) -> bool:
    """Whether a batch with ``failed`` of ``size`` hosts failed ends the rollout, as Ansible
    decides: more than ``max_fail_percentage`` percent failed, or every host did."""
    return failed > 0 and (failed == size or failed * 100 > rollout["max_fail_percentage"] * size)


# --------------------------------------------------------------------- reboots in batches

# What a node's batch does when the node needs a reboot (the NVIDIA driver changed, or the
# drivers layer's pending-reboot marker names it from an earlier run) and its GpuProfile
# sets driver.allow_reboot, in this order; both engines run these steps, named so, inside
# the drivers layer's batch, so the next batch starts only after this one is verified:
REBOOT_STEPS: tuple[str, ...] = (
    "ray-drain",  # GCS DrainNode (preemption, deadline now + drain_grace_s), wait for idle
    "kubernetes-drain",  # kubectl drain (cordon, then evict) from the controller
    "ray-stop",  # stop the node's Ray unit (it starts again at boot)
    "boot-id",  # read /proc/sys/kernel/random/boot_id
    "reboot",  # reboot and wait until SSH answers again
    "boot-id-changed",  # the boot id differs: the node really booted
    "gpu-converge",  # the GPU layer, now that the new driver is loaded
    "verify",  # swarm verify of the node (controller side): drift fails the node
    "kubernetes-uncordon",  # kubectl uncordon, once verified
)
# ... and without allow_reboot: the run succeeds, the node is marked and reported pending a
# reboot, and the GPU layer leaves the node's settings alone (it reads the marker).
PENDING_STEPS: tuple[str, ...] = ("mark-pending", "report-pending")


def reboot_due(driver_changed: bool, marker_text: str | None) -> bool:
    """Whether the node waits for a reboot into its NVIDIA driver: the driver package
    changed in this run, or the drivers layer's pending-reboot marker (``marker_text``, None
    when absent; /run empties at boot) names the driver, from a run that could not reboot
    (the same test the node-side GPU code makes, :data:`~..nodeside.gpu.DRIVER_REBOOT_TAG`)."""
    from ..nodeside.gpu import DRIVER_REBOOT_TAG

    return driver_changed or (marker_text is not None and DRIVER_REBOOT_TAG in marker_text)


def reboot_steps(node: NodeState, rollout: RolloutState, reboot_due: bool) -> list[str]:
    """The steps (:data:`REBOOT_STEPS` or :data:`PENDING_STEPS`, in order) the drivers
    layer's batch runs on ``node``: none when no reboot is due (``reboot_due``: the driver
    package changed in this run, or the pending-reboot marker names the NVIDIA driver) or
    the node has no NVIDIA driver to manage (no GPUs, simulated ones); the pending steps
    when its GpuProfile does not set ``allow_reboot``; otherwise the reboot, without the Ray
    steps on a node outside the Ray cluster and without the Kubernetes steps when the
    Rollout names no ``kubernetes_context``."""
    gpu = node["gpu"]
    if not reboot_due or not gpu or not gpu["driver"] or gpu["backend"] == "simulated":
        return []
    if not gpu["driver"]["allow_reboot"]:
        return list(PENDING_STEPS)
    skip = set()
    if node["ray"] is None:
        skip |= {"ray-drain", "ray-stop"}
    if not rollout.get("kubernetes_context"):
        skip |= {"kubernetes-drain", "kubernetes-uncordon"}
    return [s for s in REBOOT_STEPS if s not in skip]


def kubectl_drain_argv(context: str, node: str, grace_s: int) -> list[str]:
    """``kubectl drain`` of ``node`` in the cluster of kubeconfig ``context``: cordon, then
    evict its pods through the Eviction API (PodDisruptionBudgets respected), DaemonSet
    pods left alone (they would be recreated at once), emptyDir data given up (it dies with
    the reboot anyway), giving up after ``grace_s`` seconds (kubectl's ``--timeout``; the
    drain then fails, and so does the node's batch). The flags as kubectl defines them
    (kubernetes/kubectl pkg/cmd/drain/drain.go, NewCmdDrain: ``--ignore-daemonsets``,
    ``--delete-emptydir-data``, ``--timeout``, a duration; drain cordons first)."""
    return [
        "kubectl",
        f"--context={context}",
        "drain",
        node,
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        f"--timeout={grace_s}s",
    ]


def kubectl_uncordon_argv(context: str, node: str) -> list[str]:
    """``kubectl uncordon``: the node takes new pods again (after it was verified)."""
    return ["kubectl", f"--context={context}", "uncordon", node]


def kubectl_node_argv(context: str, node: str) -> list[str]:
    """``kubectl get node``: exit 0 when ``node`` is a node of the cluster (else it is not
    a Kubernetes node and the Kubernetes steps are skipped for it)."""
    return ["kubectl", f"--context={context}", "get", "node", node, "--output=name"]


# ------------------------------------------------------------------- Ray version changes

# What a Ray version change (Cluster spec.ray_version) does, in this order, in one step on
# every member at once (no batches), before the Ray layer's usual plays (the head, then the
# workers in batches). Ray refuses a node of another version than the cluster's (Ray 2.60.0
# python/ray/_private/node.py Node.check_version_info, before a worker node starts anything,
# through python/ray/_private/utils.py check_version_info: "Version mismatch: The cluster was
# started with: Ray: X ..."), so no member may keep the old Ray while another starts the new
# one: each member that runs another Ray than the declared one is drained (its running work
# given drain_grace_s), then the workers stop, then the head; the Ray layer then installs
# the new version and starts the head, then the workers, which join it on the same version.
RAY_UPGRADE_STEPS: tuple[str, ...] = (
    "ray-drain",
    "ray-stop-workers",
    "ray-stop-head",
    "ray-install",
    "ray-start-head",
    "ray-start-workers",
)


def installed_ray(distributions: dict[str, str]) -> str | None:
    """Ray's version among a virtualenv's distributions (``{name: version}``, names as
    importlib.metadata gives them), or None when Ray is not installed there."""
    for name, version in distributions.items():
        if name.lower() == "ray":
            return version
    return None


def ray_upgrade(nodes: dict[str, NodeState], installed: dict[str, str | None]) -> dict[str, Any] | None:
    """The Ray version change among ``nodes`` (Ray members or not), or None when there is
    none. ``installed``: per node, the Ray version its virtualenv holds now (None or absent:
    no Ray yet, a new member: nothing to drain). Returns ``{"from": [versions running],
    "to": the declared version, "nodes": the members whose Ray differs (each is drained and
    stopped), "steps": RAY_UPGRADE_STEPS}``."""
    members = {n: s["ray"] for n, s in nodes.items() if s["ray"] is not None}
    differ = sorted(
        n for n, ray in members.items() if installed.get(n) is not None and installed[n] != ray["version"]
    )
    if not differ:
        return None
    return {
        "from": sorted({v for n in differ if (v := installed.get(n)) is not None}),
        "to": sorted({members[n]["version"] for n in differ})[0],
        "nodes": differ,
        "steps": list(RAY_UPGRADE_STEPS),
    }


def ray_upgrade_note(change: dict[str, Any], grace_s: int) -> str:
    """What the converge output says of a Ray version change on a node."""
    return (
        f"Ray version change {', '.join(change['from'])} -> {change['to']}: drained (running work "
        f"given {grace_s} s) and stopped with every member that changes, before the head and "
        "then the workers start on the new version (Ray refuses mixed versions)"
    )
