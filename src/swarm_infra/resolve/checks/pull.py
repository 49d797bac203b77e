"""Pull convergence: a pull node needs the Rollout's ``spec.pull``; its remote, ref and
allowed signers file are what the agent can use; recorded WireGuard keys are keys and
unique (rules ``pull.*``, ``mesh.public-key-*``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from ...fleet.diagnostics import Diagnostic, Finding
from ...fleet.lockfile import read_referenced
from ...fleet.model import Fleet
from ..analysis import Analysis
from ..keys import wireguard_key_problem
from ..mesh import peers as mesh_peers
from ..pull import (
    MAX_SIGNERS_BYTES,
    allowed_signers_problems,
    ref_name,
    remote_scheme,
    revoked_signer_problem,
)
from ..ray import members as ray_members
from ..ray import token_admission


def read_pull_files(fleet: Fleet, roots: Sequence[str]) -> tuple[Fleet, list[Finding], list[Diagnostic]]:
    """Read the Rollout's allowed signers file into the model (``rollout.pull.
    allowed_signers``): ``(fleet, findings at the policy's field, diagnostics at the
    file's lines)``. ``roots``: real paths of the directories the fleet was read from; the
    file must lie inside them (:func:`swarm_infra.fleet.lockfile.read_referenced`)."""
    rollout = fleet.rollout
    if rollout is None or rollout.pull is None or rollout.source is None:
        return fleet, [], []
    where = ("spec", "pull", "allowed_signers_file")
    base = Path(rollout.source.file).parent
    path, data, problem = read_referenced(
        base, rollout.pull.allowed_signers_file, list(roots), MAX_SIGNERS_BYTES
    )
    if problem:
        return fleet, [Finding(rollout.source, where, *problem)], []
    assert data is not None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return (
            fleet,
            [Finding(rollout.source, where, "pull.allowed-signers-invalid", f"{path} is not UTF-8")],
            [],
        )
    problems = allowed_signers_problems(text)
    if problems:
        diagnostics = [
            Diagnostic(str(path), line, 1, "$", "pull.allowed-signers-invalid", why) for line, why in problems
        ]
        return fleet, [], diagnostics
    pull = replace(rollout.pull, allowed_signers=text)
    return replace(fleet, rollout=replace(rollout, pull=pull)), [], []


def pull_declared(a: Analysis) -> Iterator[Finding]:
    """A node that converges by pull needs the Rollout's ``spec.pull`` (``pull.not-declared``);
    the remote and ref must be ones the agent fetches (``pull.remote-invalid``,
    ``pull.ref-invalid``); each revoked signer a key (``pull.revoked-signer-invalid``)."""
    rollout = a.fleet.rollout
    pull = rollout.pull if rollout is not None else None
    if pull is None:
        for node in a.fleet.nodes.values():
            if node.convergence == "pull":
                yield Finding(
                    node.source,
                    ("spec", "convergence"),
                    "pull.not-declared",
                    "the node converges by pull, but the fleet's Rollout declares no spec.pull "
                    "(the remote, ref and allowed signers its agent uses)",
                )
        return
    assert rollout is not None and rollout.source is not None
    try:
        remote_scheme(pull.remote)
    except ValueError as exc:
        yield Finding(rollout.source, ("spec", "pull", "remote"), "pull.remote-invalid", str(exc))
    try:
        ref_name(pull.ref)
    except ValueError as exc:
        yield Finding(rollout.source, ("spec", "pull", "ref"), "pull.ref-invalid", str(exc))
    for i, revoked in enumerate(pull.revoked_signers):
        problem = revoked_signer_problem(revoked)
        if problem:
            yield Finding(
                rollout.source, ("spec", "pull", "revoked_signers", i), "pull.revoked-signer-invalid", problem
            )


def public_keys_unique(a: Analysis) -> Iterator[Finding]:
    """Each recorded WireGuard public key (Node ``spec.mesh.public_key``) is one
    (``mesh.public-key-invalid``: the schema's pattern lets through a few strings that are
    not 32 bytes) and belongs to one node only (``mesh.public-key-duplicate``: two nodes
    with one key would receive each other's traffic)."""
    owners: dict[str, list[str]] = {}
    for node in a.fleet.nodes.values():
        key = node.wireguard_public_key
        if key is None:
            continue
        problem = wireguard_key_problem(key)
        if problem:
            yield Finding(node.source, ("spec", "mesh", "public_key"), "mesh.public-key-invalid", problem)
            continue
        owners.setdefault(key, []).append(node.name)
    ctl = a.fleet.mesh.controller if a.fleet.mesh is not None else None
    if ctl is not None and ctl.public_key is not None:
        path = ("spec", "controller", "public_key")
        problem = wireguard_key_problem(ctl.public_key)
        if problem:
            yield Finding(ctl.source, path, "mesh.public-key-invalid", problem)
        elif ctl.public_key in owners:
            yield Finding(
                ctl.source,
                path,
                "mesh.public-key-duplicate",
                f"the same WireGuard public key as node {owners[ctl.public_key][0]}: keys must be "
                "unique in the mesh (the controller's private key never leaves the controller)",
            )
    for names in owners.values():
        for name in names[1:]:
            yield Finding(
                a.fleet.nodes[name].source,
                ("spec", "mesh", "public_key"),
                "mesh.public-key-duplicate",
                f"the same WireGuard public key as {names[0]}: keys must be unique in the mesh",
            )


def controller_key_recorded(a: Analysis) -> Iterator[Finding]:
    """``mesh.controller-key-unrecorded``: the Mesh declares the controller without its
    public key and a node that peers with the controller (not a spoke: a spoke's one peer is
    its hub, mesh.controller_peer) converges by pull. A pull node computes its peers from the
    repository alone (its agent has no controller to ask), so without the key its peer list
    would hold the controller as a comment and the controller could never reach it; push
    mode alone may take the running controller's own key (engines/controller.py)."""
    ctl = a.fleet.mesh.controller if a.fleet.mesh is not None else None
    if ctl is None or ctl.public_key is not None:
        return
    topo = a.topology
    pulled = sorted(
        n.name
        for n in a.fleet.nodes.values()
        if n.convergence == "pull" and not (topo is not None and topo.is_spoke(n))
    )
    if pulled:
        yield Finding(
            ctl.source,
            ("spec", "controller"),
            "mesh.controller-key-unrecorded",
            f"the controller has no public_key, but {', '.join(pulled[:3])}"
            f"{' and others' if len(pulled) > 3 else ''} converge{'s' if len(pulled) == 1 else ''} by "
            "pull and compute their peers from the repository alone: record the controller's key "
            "(spec.controller.public_key, printed by `swarm mesh controller-key`)",
        )


def pull_ray_members(a: Analysis) -> Iterator[Finding]:
    """``pull.ray-token-unreachable`` (a warning): a pull node in the fleet's bare-node Ray
    cluster as a worker that the head does not serve the token to. A pull worker reads the
    cluster's token from the head's token port over the mesh, and the head admits only the
    pull workers that are its direct WireGuard peers (:func:`..ray.token_admission`): one the
    head reaches through a relay is refused (the relay holds its address in its AllowedIPs
    at the head and could send as it), so that worker's Ray layer fails on the node until
    it has the token (the other layers apply)."""
    ray = a.fleet.ray
    if ray is None or a.fleet.mesh is None or a.topology is None:
        return
    heads, workers = ray_members(ray, a.fleet)
    pull = {
        n: str(a.addresses[n])
        for n in workers
        if a.fleet.nodes[n].convergence == "pull" and n not in heads and n in a.addresses
    }
    if not pull or not heads:
        return
    peers, _ = mesh_peers(a.fleet, a.topology, a.addresses, a.controller_address)
    _, relayed = token_admission(peers.get(heads[0], []), pull)
    for name in relayed:
        yield Finding(
            a.fleet.nodes[name].source,
            ("spec", "convergence"),
            "pull.ray-token-unreachable",
            f"a pull node in the Ray cluster that is not a direct WireGuard peer of the head "
            f"{heads[0]} (the head routes its mesh address through another peer, a relay, which "
            "could send as it): the head does not serve it the cluster's token over the mesh, so "
            "its Ray layer fails (the other layers apply). Converge it by push, or give it a "
            "direct path to the head",
            "warning",
        )


CHECKS = (pull_declared, public_keys_unique, controller_key_recorded, pull_ray_members)
