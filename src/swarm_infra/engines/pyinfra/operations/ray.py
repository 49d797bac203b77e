"""Ray's node: its system user, and the cluster's token (made on the head, copied to or
fetched by the workers, never printed nor in argv)."""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Generator

from pyinfra import host
from pyinfra.api import OperationError, QuoteString, StringCommand, operation

from ....resolve.ray import token_command, token_problem
from .run import changing, snapshot
from .util import nodeside_command, nodeside_fact


@operation()
def system_user(user: str, sysusers: str) -> Generator[StringCommand, None, None]:
    """Make the system user ``user`` from its sysusers.d(5) file ``sysusers`` where the node
    has no such user (``systemd-sysusers FILE``, as the Ansible role does).

    **Example:** ``system_user(name="Ray's user", user="swarm-ray", sysusers=path)``"""
    if snapshot()["users"].get(user) is not None:
        return
    changing()
    yield StringCommand("systemd-sysusers", QuoteString(sysusers))


@operation()
def ray_token(path: str, head: str) -> Generator[StringCommand, None, None]:
    """The Ray cluster's token on this node: on the head (``head`` is this host) made where
    there is none (:func:`~swarm_infra.resolve.ray.token_command`: umask 077, never
    printed, never in argv); on a worker, the head's token written where this node's differs
    (compared by digest; read from the head when this run has it, written through stdin
    under umask 077, never in a file on the controller). A worker without a token in a run
    without the head fails, naming the head.

    **Example:** ``ray_token(name="Ray's token", path=files["ray_auth_token"]["path"], head=ray["head"])``"""
    mine = snapshot()["paths"].get(path)
    if head == host.name:
        if mine is None:
            changing()
            yield StringCommand(token_command(path))
        return
    head_host = next((h for h in host.state.inventory if h.name == head), None)
    if head_host is None or head_host not in host.state.active_hosts:
        if mine is None:
            raise OperationError(
                f"{host.name}: no Ray token, and the head ({head}) is not in this run: "
                "converge it with the head"
            )
        host.noop(f"Ray token kept (the head {head} is not in this run)")
        return
    ok, out = head_host.run_shell_command(
        StringCommand("cat", QuoteString(path)), print_output=False, print_input=False
    )
    token = "\n".join(out.stdout_lines).strip() if ok else ""
    if not token:  # a check run on a fresh head: it has no token yet
        host.noop(f"Ray token: the head {head} has none yet; copied once it has")
        return
    text = token + "\n"
    problem = token_problem(text)  # the head's word: checked before this node writes it
    if problem:
        raise OperationError(f"{host.name}: the Ray token read from {head} is refused: {problem}")
    if mine is not None and mine.get("sha1") == hashlib.sha1(text.encode()).hexdigest():
        return
    changing()
    yield StringCommand("sh", "-c", QuoteString(f"umask 077 && cat > {shlex.quote(path)}"), _stdin=text)


@operation()
def ray_token_fetch(host_ip: str, port: int, path: str) -> Generator[StringCommand, None, None]:
    """A pull worker's copy of the Ray cluster's token, read from the head's token port
    (``host_ip``:``port``, the head's mesh address) by the node itself
    (:func:`swarm_infra.nodeside.raytoken.fetch`: a bounded read, the token checked, written
    mode 0600): first read without writing, to know whether the node's file differs, then
    written where it does. The token never reaches the controller; a head that cannot be
    read, or whose answer is not a token, fails the host with the reason.

    **Example:** ``ray_token_fetch(name="Ray's token", host_ip=src["host"], port=src["port"], path=p)``"""
    from ....nodeside import raytoken

    plan = nodeside_fact(raytoken, "ray-token", "fetch", host_ip, port, path, check_mode=True)
    if not plan.get("changed"):
        return
    changing()
    yield nodeside_command(raytoken, "fetch", host_ip, port, path)
