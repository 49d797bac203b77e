"""A node's reboot in its Rollout batch: drain it (Ray, Kubernetes), check that it really
booted, converge its GPUs on the new driver, verify it before the next batch. Each runs
every time it is reached (``is_idempotent=False``); ``_if`` says when."""

from __future__ import annotations

from collections.abc import Generator, Mapping
from typing import Any

from pyinfra import logger
from pyinfra.api import FunctionCommand, QuoteString, StringCommand, operation

from ....nodeside import gpu as nodeside_gpu
from .run import changing, run_of, run_settings
from .util import nodeside_command


@operation(is_idempotent=False)
def ray_drain(argv: list[str], stdin: str) -> Generator[StringCommand, None, None]:
    """Drain the node out of its Ray cluster (:func:`swarm_infra.engines.reboot.ray_drain_call`
    gives ``argv`` and ``stdin``; pass its ``env`` as ``_env``): no new work is placed on
    it and its running work gets the Rollout's grace. The outcome is printed.

    **Example:** ``ray_drain(name="Drain", **call_without_env, _env=call["env"])``"""
    changing()
    yield StringCommand(*(QuoteString(a) for a in argv), _stdin=stdin)


@operation(is_idempotent=False)
def controller_command(
    argv: list[str], when_ok: list[str] | None = None
) -> Generator[FunctionCommand, None, None]:
    """Run ``argv`` on the controller (kubectl), failing the host when it fails; with
    ``when_ok``, only when that command succeeds first (``kubectl get node``: is it a node of
    the cluster), else say why nothing ran.

    **Example:** ``controller_command(name="Drain", argv=kubectl_drain_argv(ctx, n, 600))``"""
    import subprocess

    changing()

    def run(state: Any, host: Any) -> bool:
        try:
            member = None if when_ok is None else subprocess.run(when_ok, capture_output=True, check=False)
            if member is not None and member.returncode:
                what = " ".join(argv[2:4])
                run_of(state).note(
                    host.name, f"not a Kubernetes node ({' '.join(when_ok or ())} failed): no {what}"
                )
                return True
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
        except OSError as exc:  # kubectl missing: a failure, never "not a node" (an undrained reboot)
            logger.error(f"{host.name}: {' '.join(argv)}: {exc}")
            return False
        if done.returncode:
            logger.error(f"{host.name}: {' '.join(argv)}: {done.stderr.strip()[-500:]}")
        return done.returncode == 0

    yield FunctionCommand(run, (), {})


def _boot_id(host: Any) -> str | None:
    from ...reboot import BOOT_ID

    ok, out = host.run_shell_command(StringCommand("cat", BOOT_ID))
    return "\n".join(out.stdout_lines).strip() if ok else None


@operation(is_idempotent=False)
def boot_id() -> Generator[FunctionCommand, None, None]:
    """Remember the node's boot id (/proc/sys/kernel/random/boot_id) before its reboot.

    **Example:** ``boot_id(name="Read the boot id")``"""

    def read(state: Any, host: Any) -> bool:
        found = _boot_id(host)
        if found:
            run_of(state).boot_ids[host.name] = found
        return bool(found)

    yield FunctionCommand(read, (), {})


@operation(is_idempotent=False)
def boot_id_changed() -> Generator[FunctionCommand, None, None]:
    """Fail the host unless its boot id differs from the one :func:`boot_id` read: the node
    really booted (pyinfra's ``server.reboot`` only compares uptimes).

    **Example:** ``boot_id_changed(name="The node booted")``"""

    def check(state: Any, host: Any) -> bool:
        before = run_of(state).boot_ids.get(host.name)
        now = _boot_id(host)
        if not before or not now or now == before:
            logger.error(
                f"{host.name}: the boot id did not change ({before} -> {now}): the node did not reboot"
            )
            return False
        return True

    yield FunctionCommand(check, (), {})


@operation(is_idempotent=False)
def gpu_reapply(gpu: Mapping[str, Any]) -> Generator[StringCommand, None, None]:
    """Converge the node's GPU settings after its reboot (the node-side GPU code, reading
    the GPUs as they are now: the settings read before the reboot mean nothing any more).

    **Example:** ``gpu_reapply(name="GPU settings on the new driver", gpu=node["gpu"])``"""
    changing()
    yield nodeside_command(nodeside_gpu, "run_spec", dict(gpu), apply=True)


@operation(is_idempotent=False)
def verify_node(node: str, junit_dir: str) -> Generator[FunctionCommand, None, None]:
    """``swarm verify`` of the node's drivers and GPU layers, on the controller (the run's
    ``verify_argv``, :func:`run_settings`); drift fails the host, so the Rollout stops
    before its next batch. Without a verify command, says that nothing was verified.

    **Example:** ``verify_node(name="Verify", node=host.name, junit_dir="/tmp")``"""
    import subprocess

    def run(state: Any, host: Any) -> bool:
        argv = list(run_settings(state)["verify_argv"])
        if not argv:
            run_of(state).note(
                host.name, f"not verified: run through swarm converge, or run swarm verify --limit {node}"
            )
            return True
        argv += ["--limit", node, "--layer", "drivers", "--layer", "gpu",
                 "--junit-xml", f"{junit_dir}/verify-{node}.xml"]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode:
            logger.error(f"{node}: swarm verify after the reboot failed:\n{done.stdout[-2000:]}")
        return done.returncode == 0

    yield FunctionCommand(run, (), {})
