"""pyinfra operations of the swarm deploys.

Each is an ``@operation()`` in the manner of pyinfra's own (``pyinfra/operations/*.py``): a
generator that reads facts and yields commands only for what differs, so a converged node
yields none (no change) and a check run (``--dry``) shows what a real one would do.

**One snapshot per node.** pyinfra's built-in operations read one fact per question (a
file's stat, its SHA-1, a unit's state), and each fact is an SSH round trip: 40 ms and more
to a node behind the lab's emulated WAN, far more to a real provider. These operations ask
one snapshot of the node instead (:mod:`swarm_infra.nodeside.snapshot`: every managed
path, unit, package, interface, device, mount and virtualenv, read in one round trip, by
the :class:`~swarm_infra.engines.pyinfra.facts.NodesideCall` fact). Where something
differs, they hand over to the built-in operation (``files.put``, ``files.directory``,
``systemd.service``), which reads its own facts, diffs files under ``--diff`` and yields the
commands; any change drops the snapshot, so the next operation reads the node again.

**Same code on the node as Ansible.** Host tuning and GPU settings run the node-side files
the Ansible modules run (:mod:`swarm_infra.nodeside.tunables`, :mod:`~swarm_infra.nodeside.
gpu`), sent on stdin. Secrets never appear in a command line: WireGuard keys are made on the
node and read from their files there.

Notes for the operator (simulated GPUs, sysctls a container cannot set, a pending reboot)
go through ``host.noop`` (pyinfra prints them) and :func:`~.run.record_note`, which ``swarm
converge --engine pyinfra`` prints as the Ansible engine prints its roles' reports.

**One module a domain**, as pyinfra's own operations are (``files``, ``systemd``, ``apt``):
:mod:`.files`, :mod:`.units`, :mod:`.packages`, :mod:`.tuning` (host tuning and GPU
settings), :mod:`.mesh`, :mod:`.storage`, :mod:`.ray`, :mod:`.reboot` (a node's reboot in its
batch) and :mod:`.report` (notes and refusals); what a run keeps beside pyinfra's State (the
notes, the keys, the snapshots, the runner's settings) is one :class:`~.run.Run` per State
(:mod:`.run`), and :mod:`.util` holds the helpers they share, the one read of a private
attribute of pyinfra among them (:func:`~.util.would_change`). Every name is imported here:
``from swarm_infra.engines.pyinfra.operations import unit``.
"""

from __future__ import annotations

# Tests reach these through this module (the names the single module once imported).
from pyinfra.api import OperationError

from ....resolve.files import wireguard_peer_keys
from ....resolve.keys import wireguard_key_problem
from .files import absent_path, managed_directory, managed_file, managed_mode
from .mesh import (
    _publish,
    peer_keys,
    wireguard_address,
    wireguard_file,
    wireguard_key,
    wireguard_mtu,
    wireguard_sync,
)
from .packages import apt_absent, apt_install, apt_pinned, dpkg_hold, pip_requirements
from .ray import ray_token, ray_token_fetch, system_user
from .reboot import boot_id, boot_id_changed, controller_command, gpu_reapply, ray_drain, verify_node
from .report import note_if, refuse
from .run import (
    Run,
    changing,
    key_check,
    notes,
    public_keys,
    record_note,
    run_of,
    run_settings,
    snapshot,
    snapshot_spec,
)
from .storage import filesystem, md_raid0, mdadm_conf, mount, storage_record, unmount
from .tuning import gpu_settings, tunables
from .units import unit, unit_state
from .util import changed, would_change

__all__ = [
    "OperationError",
    "Run",
    "_publish",
    "absent_path",
    "apt_absent",
    "apt_install",
    "apt_pinned",
    "boot_id",
    "boot_id_changed",
    "changed",
    "changing",
    "controller_command",
    "dpkg_hold",
    "filesystem",
    "gpu_reapply",
    "gpu_settings",
    "key_check",
    "managed_directory",
    "managed_file",
    "managed_mode",
    "md_raid0",
    "mdadm_conf",
    "mount",
    "note_if",
    "notes",
    "peer_keys",
    "pip_requirements",
    "public_keys",
    "ray_drain",
    "ray_token",
    "ray_token_fetch",
    "record_note",
    "refuse",
    "run_of",
    "run_settings",
    "snapshot",
    "snapshot_spec",
    "storage_record",
    "system_user",
    "tunables",
    "unit",
    "unit_state",
    "unmount",
    "verify_node",
    "wireguard_address",
    "wireguard_file",
    "wireguard_key",
    "wireguard_key_problem",
    "wireguard_mtu",
    "wireguard_peer_keys",
    "wireguard_sync",
    "would_change",
]
