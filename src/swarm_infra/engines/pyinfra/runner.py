"""Converging nodes with pyinfra's Python API (``swarm converge --engine pyinfra``).

The run follows the Ansible playbooks' structure, so both engines roll out in the same
steps: each layer in the order of ``playbooks/site.yml``, in the rolling batches of the
fleet's Rollout (:func:`swarm_infra.resolve.rollout.rollout_batches`); WireGuard keys on
every host first, without batches; the Ray head before the Ray workers. One pyinfra
``State`` holds the whole run (one SSH connection per host): the deploys
(:mod:`.layers`) add every operation first, then this module runs them step by step,
batch by batch, each operation on all of a batch's hosts at once (pyinfra's own order),
and a host that fails runs nothing more. ``check`` runs nothing: it reports what each
operation would change (pyinfra's change detection, as ``pyinfra --dry``).

Progress goes to a :class:`Reporter`: one line per changed or failed operation and per
note, pyinfra's file diffs with ``diff``, and the same summary table as the Ansible engine.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TextIO

from ...resolve.keys import key_taken_problem
from ...resolve.rollout import batch_failed, rollout_batches
from ...resolve.types import RolloutState
from ..endpoints import endpoint_resolution_problems
from ..inventory import InventoryHost
from ..keyrecord import KeyCheck
from ..report import HostTally, result_line, summary_table
from . import layers as L
from . import operations as ops
from .inventory import api_inventory


@dataclass(frozen=True)
class Step:
    """Deploy functions run on ``hosts`` (names), in rolling batches when ``batched``."""

    functions: tuple[Callable[[], None], ...]
    hosts: tuple[str, ...]
    batched: bool


def plan(layer: str, hosts: list[InventoryHost]) -> list[Step]:
    """The steps of a run of ``layer`` (``site`` or one of :data:`.layers.LAYERS`) on
    ``hosts``, mirroring the playbooks: batches per layer, keys before the mesh, a Ray
    version change on every Ray member at once, the Ray head alone before the workers, then
    the nodes outside the Ray cluster."""
    names = tuple(h.name for h in hosts)
    role = {h.name: ray["role"] if (ray := h.state.get("ray")) else None for h in hosts}
    layers = list(L.LAYERS) if layer == "site" else [layer]
    steps: list[Step] = []
    for name in layers:
        if name == "mesh":
            steps += [Step((L.mesh_keys,), names, False), Step((L.mesh_layer,), names, True)]
        elif name == "ray":
            head = tuple(n for n in names if role[n] == "head")
            workers = tuple(n for n in names if role[n] == "worker")
            rest = tuple(n for n in names if role[n] is None)
            # A Ray version change first, on every member at once (the playbook's first play).
            steps.append(Step((L.ray_upgrade,), tuple(n for n in names if role[n] is not None), False))
            steps += [Step((L.ray_layer,), head, False), Step((L.ray_layer,), workers, True)]
            steps += [Step((L.ray_layer,), rest, False)]
        else:
            steps.append(Step(L.LAYERS[name], names, True))
    return [s for s in steps if s.hosts]


class Reporter:
    """Per-host tallies and live lines of a pyinfra run, in the Ansible engine's format."""

    def __init__(self, out: TextIO, *, verbose: bool = False, show_diff: bool = False) -> None:
        self.out, self.verbose, self.show_diff = out, verbose, show_diff
        self.started = time.monotonic()
        self.hosts: dict[str, HostTally] = {}
        self.diffs: dict[tuple[str, str], list[str]] = {}  # (host, operation hash) -> diff lines

    def line(self, host: str, label: str, text: str) -> None:
        self.out.write(result_line(time.monotonic() - self.started, host, label, text) + "\n")
        self.out.flush()

    def result(
        self, host: str, outcome: str, text: str, changed: bool = False, message: str = "", op: str = ""
    ) -> None:
        tally = self.hosts.setdefault(host, HostTally())
        setattr(tally, outcome, getattr(tally, outcome) + 1)
        tally.changed += changed
        if outcome in ("failed", "unreachable"):
            tally.messages.append(f"{text}: {message or outcome}")
            self.line(host, outcome, f"{text}\n    {tally.messages[-1]}")
        elif changed or self.verbose:
            self.line(host, "changed" if changed else outcome, text)
        diff = self.diffs.pop((host, op), [])
        if diff and changed and self.show_diff:
            self.out.write("\n".join("    " + ln for ln in diff) + "\n")

    def note(self, host: str, text: str) -> None:
        self.hosts.setdefault(host, HostTally()).note(text)
        self.line(host, "note", text)

    def summary(self, simulated: Iterable[str]) -> str:
        return summary_table(self.hosts, set(simulated))


class _DiffCapture(logging.Handler):
    """pyinfra logs file diffs (``--diff``) while an operation is generated; they are
    collected per host and operation (pyinfra's context is greenlet-local) for the reporter."""

    def __init__(self, reporter: Reporter) -> None:
        super().__init__(logging.INFO)
        self.reporter = reporter

    def emit(self, record: logging.LogRecord) -> None:
        from pyinfra.context import ctx_host

        text = record.getMessage()
        host = ctx_host.get() if ctx_host.isset() else None  # None: a log outside any host
        op = getattr(host, "current_op_hash", None) if host else None
        if host and op and (text.startswith("  ") or text.startswith("@@")):
            from click import unstyle

            self.reporter.diffs.setdefault((host.name, op), []).append(unstyle(text).rstrip())


def run(
    layer: str,
    hosts: list[InventoryHost],
    rollout: RolloutState,
    reporter: Reporter,
    *,
    check: bool = False,
    diff: bool = False,
    keys: KeyCheck | None = None,
    verify_argv: list[str] | None = None,
) -> int:
    """Converge ``hosts`` to their NodeState with the pyinfra deploys of ``layer``.

    ``keys``: the controller's key record and accepted changes; its ``published`` gets the
    WireGuard public keys the hosts reported and passed (:mod:`..keyrecord`).
    ``verify_argv``: the ``swarm verify`` command a node rebooted in its batch is verified
    with before the next batch (None: not verified, and said so).

    Returns 0 when every host converged (or, with ``check``, could be checked), 1 when a
    host failed or was unreachable (the others carry on, within the Rollout's tolerance).
    Nothing runs on a host whose connection failed; in ``check`` mode nothing runs at all.
    Nothing runs anywhere when a peer's mesh endpoint name resolves to an address that is
    no peer's (:func:`..endpoints.endpoint_resolution_problems`, as the Ansible inventory
    refuses the fleet): the node it names is reported failed.
    """
    refused_endpoints = endpoint_resolution_problems({h.name: h.state for h in hosts})
    if refused_endpoints:
        for name, why in sorted(refused_endpoints.items()):
            reporter.result(name, "failed", "mesh endpoint", message=why)
        return 1
    import pyinfra
    from pyinfra.api import Config, State
    from pyinfra.api.connect import connect_all, disconnect_all
    from pyinfra.api.state import StateStage

    pyinfra.is_cli = False
    config = Config()
    config.DIFF = diff
    # Change detection (running every operation's generator once while preparing) is only
    # wanted in check mode: it reads every fact twice.
    state = State(api_inventory(hosts), config, check_for_changes=check)
    keys = keys if keys is not None else KeyCheck()
    ops.key_check(state).recorded = keys.recorded
    ops.key_check(state).accepted = keys.accepted
    ops.run_settings(state).update(rollout=rollout, verify_argv=list(verify_argv or []))
    capture = _DiffCapture(reporter)
    pyinfra_log = logging.getLogger("pyinfra")
    level = pyinfra_log.level
    pyinfra_log.addHandler(capture)
    if diff:  # diffs are INFO records; the root logger's WARNING would drop them
        pyinfra_log.setLevel(logging.INFO)
    try:
        state.set_stage(StateStage.Connect)
        connect_all(state)
        by_name = {h.name: h for h in state.inventory}
        up = {h.name for h in state.active_hosts}
        for name in sorted(set(by_name) - up):
            reporter.result(name, "unreachable", "connect", message="SSH connection failed")
        state.set_stage(StateStage.Prepare)
        _prefetch(state, [by_name[n] for n in sorted(up)])
        refused: dict[str, str] = {}
        steps = _prepare(state, plan(layer, hosts), by_name, up, refused)
        for name, why in sorted(refused.items()):
            step, _, message = why.partition(": ")
            reporter.result(name, "failed", step, message=message)
        _report_notes(state, reporter)
        state.set_stage(StateStage.Execute)
        state.is_executing = not check
        failed = {n for n in by_name if n not in up} | set(refused)

        def run_batch(live: list[Any], ops_of: dict[Any, list[str]]) -> set[str]:
            return _run_batch(state, live, ops_of, reporter, check)

        rc = roll(steps, rollout, failed, run_batch, reporter)
        _report_notes(state, reporter)
        return rc
    finally:
        keys.published.update(ops.public_keys(state))
        pyinfra_log.removeHandler(capture)
        pyinfra_log.setLevel(level)
        if state.current_stage >= StateStage.Connect:
            disconnect_all(state)


def roll(
    steps: list[tuple],
    rollout: RolloutState,
    failed: set[str],
    run_batch: Callable[[list[Any], dict[Any, list[str]]], set[str]],
    reporter: Reporter,
) -> int:
    """Run the prepared ``steps`` ((step, hosts, their operations) from :func:`_prepare`),
    each in the Rollout's batches when batched: ``run_batch(hosts, ops_of)`` runs a batch
    and returns the hosts that failed (a failed reboot step or verify among them). A host in
    ``failed`` (updated) runs nothing more; a batch that fails beyond the Rollout's
    tolerance (:func:`batch_failed`) stops the run before the next batch. Returns 1 when a
    host failed, else 0."""
    for step, members, ops_of in steps:
        names = [h.name for h in members]
        batches = rollout_batches(names, rollout) if step.batched else [names]
        for batch in batches:
            live = [h for h in members if h.name in batch and h.name not in failed]
            bad = run_batch(live, ops_of)
            failed |= bad
            if bad and batch_failed(len(bad), len(batch), rollout):
                reporter.line("-", "failed", f"batch {batch} failed beyond the Rollout's tolerance: stopping")
                return 1
    return 1 if failed else 0


def _prefetch(state: Any, hosts: list[Any]) -> None:
    """Read every host's snapshot at once (the deploys ask for it while preparing, host by
    host: one round trip each, in turn, otherwise)."""
    import gevent
    from pyinfra.context import ctx_host, ctx_state

    def one(h: Any) -> None:
        with ctx_state.use(state), ctx_host.use(h):
            ops.snapshot()

    gevent.joinall([gevent.spawn(one, h) for h in hosts])


def _prepare(
    state: Any, steps: list[Step], by_name: dict[str, Any], up: set[str], refused: dict[str, str]
) -> list[tuple]:
    """Add every step's operations for its hosts; returns (step, hosts, {host: its op hashes}).

    An operation that refuses a host while it is added (``OperationError``: in check mode
    pyinfra runs each operation's generator here, and a refused WireGuard key raises) puts
    the host's name and why in ``refused``; it gets no operations from later steps.

    Operations are identified as the pyinfra CLI identifies them, by the call stack's line
    numbers (prefixed by the step's index), not by their rank on each host as the API
    does: hosts take different paths through a deploy (a node without GPUs skips most of
    the GPU layer), and ranks would give different operations the same identity."""
    import pyinfra
    from pyinfra.api import OperationError
    from pyinfra.context import ctx_host, ctx_state

    out = []
    was_cli, pyinfra.is_cli = pyinfra.is_cli, True
    try:
        for index, step in enumerate(steps):
            members = [by_name[n] for n in step.hosts if n in up and n not in refused]
            added = {h: len(h.op_hash_order) for h in members}
            state.current_op_file_number = index
            for h in members:
                with ctx_state.use(state), ctx_host.use(h):
                    for function in step.functions:
                        try:
                            function()
                        except OperationError as exc:
                            refused[h.name] = f"{function.__name__}: {exc}"
                            break
                    taken = None if h.name in refused else _key_taken(state, h)
                    if taken:  # published while added (check mode, or a key already on the node)
                        refused[h.name] = f"mesh: {h.name}: WireGuard public key refused: {taken}"
            members = [h for h in members if h.name not in refused]
            out.append((step, members, {h: list(h.op_hash_order[added[h] :]) for h in members}))
    finally:
        pyinfra.is_cli = was_cli
    return out


_reported: set[tuple[int, str, str]] = set()


def _report_notes(state: Any, reporter: Reporter) -> None:
    for host, texts in sorted(ops.notes(state).items()):
        for text in texts:
            key = (id(state), host, text)
            if key not in _reported:
                _reported.add(key)
                reporter.note(host, text)


def _key_taken(state: Any, h: Any) -> str | None:
    """Why the WireGuard key host ``h`` published in this run is another node's in the
    controller's record (:func:`swarm_infra.resolve.keys.key_taken_problem`: the first
    binding stands), or None; a refused key is taken back before any peer's file is
    computed (an operation runs on every host before the next). A key the fleet records for
    ``h`` (checked by its own operation) or one the operator accepts is not judged here."""
    published = ops.public_keys(state)
    key = published.get(h.name)
    check = ops.key_check(state)
    mesh = (h.data.get("swarm") or {}).get("mesh") or {}
    if not key or h.name in check.accepted or mesh.get("public_key"):
        return None
    problem = key_taken_problem(h.name, key, check.recorded)
    if problem:
        del published[h.name]
    return problem


def _run_batch(
    state: Any, hosts: list[Any], ops_of: dict[Any, list[str]], reporter: Reporter, check: bool
) -> set[str]:
    """Run (or, in check mode, evaluate) each operation of the step on ``hosts`` in pyinfra's
    order, an operation on all of them before the next; returns the hosts that failed."""
    import gevent
    from pyinfra.api.operations import run_host_op
    from pyinfra.context import ctx_host, ctx_state

    order = [h for h in state.get_op_order() if any(h in ops_of[x] for x in hosts)]
    failed: set[str] = set()
    for op_hash in order:
        names = ", ".join(sorted(state.get_op_meta(op_hash).names)) or op_hash
        running = [h for h in hosts if op_hash in ops_of[h] and h.name not in failed]
        if check:
            for h in running:
                data = state.get_op_data_for_host(h, op_hash)
                ifs = data.global_arguments.get("_if")
                ifs = ifs if isinstance(ifs, list) else [ifs] if ifs else []
                would = ops.would_change(data.operation_meta) and all(f() for f in ifs)
                reporter.result(h.name, "ok", names, changed=would, op=op_hash)
            continue

        def one(h: Any, op_hash: str = op_hash) -> bool:
            with ctx_state.use(state), ctx_host.use(h):
                try:
                    return run_host_op(state, h, op_hash)
                except Exception as exc:  # an operation that raised (OperationError, a fact's failure)
                    h.swarm_error = f"{type(exc).__name__}: {exc}"
                    return False

        greenlets = {gevent.spawn(one, h): h for h in running}
        gevent.joinall(list(greenlets))
        _report_notes(state, reporter)
        for g, h in greenlets.items():
            meta = state.get_op_data_for_host(h, op_hash).operation_meta
            taken = _key_taken(state, h)
            if g.value and taken:
                failed.add(h.name)
                refusal = f"{h.name}: WireGuard public key refused: {taken}"
                reporter.result(h.name, "failed", names, message=refusal)
            elif g.value:
                reporter.result(
                    h.name, "ok", names, changed=meta.is_complete() and meta.did_change(), op=op_hash
                )
            else:
                failed.add(h.name)
                reporter.result(h.name, "failed", names, message=_error(h, meta))
    return failed


def _error(host: Any, meta: Any) -> str:
    err = getattr(host, "swarm_error", None)
    if err:
        host.swarm_error = None
        return err
    out = getattr(meta, "_combined_output", None)
    lines = [ln.line for ln in out if ln.buffer_name == "stderr"] if out else []
    return lines[-1].strip() if lines else "the operation failed"
