"""The objects as YAML files, one per kind, in the order ``kubectl apply -f DIR`` needs.

``files(objects)`` → ``{file name: text}``: ``NN-<kind>.yaml`` where NN is the apply order
(namespaces first; Kueue's objects after the cluster-scoped ones they name; claims and
Ray clusters last), each a stream of ``---`` documents sorted by (namespace, name), keys
sorted. ``Node`` objects are left out (``NOT_RENDERED``): ``kubectl apply`` or a GitOps tool
would create a Node for a machine that has not joined; the Pulumi stack applies them as
``NodePatch``, which only patches an existing node. The same objects always give the same
bytes. ``differences(expected, directory)`` says how a directory's rendered files differ
from them (for ``swarm render --check``).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path

import yaml

from .meta import K8sObject, no_gc, sort_key

# Apply order. Every kind the builder makes is listed (a test checks it).
KIND_ORDER = (
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "PriorityClass",
    "StorageClass",
    "ConfigMap",
    "Deployment",
    "ResourceQuota",
    "LimitRange",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "Node",
    "WorkloadPriorityClass",
    "ResourceFlavor",
    "Cohort",
    "ClusterQueue",
    "LocalQueue",
    "PersistentVolumeClaim",
    "RayCluster",
)
# Built but never written: a Node in a file would create one for a machine that has not
# joined (issue #24); only the Pulumi stack patches nodes (NodePatch).
NOT_RENDERED = frozenset({"Node"})
RENDERED = re.compile(r"^[0-9]{2}-[a-z]+\.yaml$")  # the names file_name() gives; other files are left alone
HEADER = "# Rendered by `swarm render` from fleet {fleet!r} (inventory/, policies/). Do not edit.\n"
# No line folding: libyaml and PyYAML's own emitter fold long quoted strings differently.
WIDTH = 1 << 30
try:  # libyaml's emitter: the same text as the pure-Python one (a test compares), ~10x faster
    _Dumper: type = yaml.CSafeDumper
except AttributeError:  # pragma: no cover - PyYAML built without libyaml
    _Dumper = yaml.SafeDumper


def file_name(kind: str) -> str:
    """``20-persistentvolumeclaim.yaml`` for ``PersistentVolumeClaim``."""
    return f"{KIND_ORDER.index(kind):02d}-{kind.lower()}.yaml"


def dump(objects: Iterable[K8sObject], dumper: type = _Dumper) -> str:
    """A ``---``-separated YAML stream, keys sorted (``yaml.safe_dump_all`` with libyaml's
    emitter and no line folding)."""
    with no_gc():
        return _dump_all(objects, dumper)


def _dump_all(objects: Iterable[K8sObject], dumper: type) -> str:
    return yaml.dump_all(
        objects, Dumper=dumper, sort_keys=True, explicit_start=True, default_flow_style=False, width=WIDTH
    )


def files(objects: Iterable[K8sObject], fleet: str) -> dict[str, str]:
    """File name → YAML text, one file per kind (see the module doc)."""
    by_kind: dict[str, list[K8sObject]] = defaultdict(list)
    for obj in objects:
        if obj["kind"] not in NOT_RENDERED:
            by_kind[obj["kind"]].append(obj)
    return {
        file_name(kind): HEADER.format(fleet=fleet) + dump(sorted(objs, key=sort_key))
        for kind, objs in sorted(by_kind.items(), key=lambda kv: KIND_ORDER.index(kv[0]))
    }


def rendered_files(directory: Path) -> dict[str, Path]:
    """The files in ``directory`` named as :func:`file_name` names them (others are not ours)."""
    if not directory.is_dir():
        return {}
    return {p.name: p for p in sorted(directory.iterdir()) if RENDERED.match(p.name) and p.is_file()}


def differences(expected: Mapping[str, str], directory: Path) -> list[str]:
    """How ``directory``'s rendered files (``NN-kind.yaml``) differ from ``expected``: one
    line per file that is missing, extra or different; [] when they are the same. Other
    files in ``directory`` (a kustomization.yaml, a README) are ignored."""
    found = rendered_files(directory)
    out = []
    for name in sorted(set(expected) | set(found)):
        if name not in found:
            out.append(f"missing: {directory / name}")
        elif name not in expected:
            out.append(f"not rendered from the fleet: {directory / name}")
        elif found[name].read_text(encoding="utf-8") != expected[name]:
            out.append(f"differs: {directory / name}")
    return out
