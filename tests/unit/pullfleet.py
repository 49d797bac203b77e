"""Pull fleets for the unit tests: copies of the lab fleet with nodes converging by pull.

One place declares what a real pull fleet needs, so the tests that make one do it alike:
the nodes' ``spec.convergence: pull``, the Rollout's ``spec.pull`` (remote, ref, fleet, the
allowed signers file) and the controller's WireGuard key recorded in the Mesh
(``spec.controller.public_key``): the lab fleet declares its controller without one (made
per machine at ``swarm lab up``), and a pull node computes its peers from the repository
alone, so the validator refuses such a fleet (``mesh.controller-key-unrecorded``). Recording
the key is the operator's reviewed change a real pull fleet needs.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]

# A fixed test WireGuard public key (32 bytes in base64), not a secret: the controller's.
CONTROLLER_KEY = "GK9rBwkn3vUFr6s2PZXxJbVvjGy5h8wAS6FaA3Bq8nA="
# An OpenSSH ed25519 public key: the fleet's one allowed signer.
SIGNER = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOQxQJhF2zz4pZl2bsm3C6i0u1FZSxiQwZ7Wc7d9Wn5R"
REMOTE = "https://git.example.org/f.git"  # nothing answers there


def copy_lab(base: Path, name: str = "lab") -> Path:
    """The lab fleet copied under ``base`` as fleet ``name`` (``inventory/NAME``,
    ``policies/NAME``, ``policies/shared``); returns ``base``."""
    shutil.copytree(ROOT / "inventory/lab", base / "inventory" / name)
    shutil.copytree(ROOT / "policies/lab", base / "policies" / name)
    shutil.copytree(ROOT / "policies/shared", base / "policies/shared", dirs_exist_ok=True)
    return base


def _edit(path: Path, change: Any) -> None:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    for doc in docs:
        change(doc)
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))


def record_controller_key(policies: Path, key: str = CONTROLLER_KEY) -> None:
    """Record ``key`` as the controller's (Mesh ``spec.controller.public_key``) in the
    fleet's policies directory ``policies``."""

    def change(doc: dict[str, Any]) -> None:
        if doc["kind"] == "Mesh":
            doc["spec"]["controller"]["public_key"] = key

    _edit(policies / "mesh.yaml", change)


def declare_pull(
    base: Path,
    nodes: Iterable[str],
    *,
    fleet: str = "lab",
    remote: str = REMOTE,
    signers: str = f"ops@example.org {SIGNER}\n",
    **fields: Any,
) -> Path:
    """Make fleet ``fleet`` under ``base`` (a copy of the lab's: :func:`copy_lab`) a pull
    fleet: the ``nodes`` converge by pull, the Rollout pulls from ``remote`` (``ref: main``,
    ``allowed_signers_file: allowed_signers`` holding ``signers``, and ``fields``: other
    ``spec.pull`` settings), and the Mesh records the controller's key
    (:data:`CONTROLLER_KEY`). Returns ``base``."""
    inventory, policies = base / "inventory" / fleet, base / "policies" / fleet
    pulled = set(nodes)
    if pulled:

        def converge_by_pull(doc: dict[str, Any]) -> None:
            if doc["kind"] == "Node" and doc["metadata"]["name"] in pulled:
                doc["spec"]["convergence"] = "pull"

        _edit(inventory / "nodes.yaml", converge_by_pull)
    (policies / "allowed_signers").write_text(signers)
    pull = {
        "remote": remote,
        "ref": "main",
        "fleet": fleet,
        "allowed_signers_file": "allowed_signers",
        **fields,
    }

    def rollout(doc: dict[str, Any]) -> None:
        if doc["kind"] == "Rollout":
            doc["spec"]["pull"] = pull

    _edit(policies / "rollout.yaml", rollout)
    record_controller_key(policies)
    return base
