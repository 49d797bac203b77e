"""The head's claim: what the pull request's OWN code says the merge result resolves to.

The reviewer is the base's code, so a change to the library, the roles or the inventory
scripts has an effect the review cannot see (both sides are resolved by the same, base,
code). review.yml's trusted job must never run the head's code; head-plan.yml does, in a
``pull_request`` job (a read-only token, no secrets, GitHub's "Events that trigger
workflows": a fork's pull request gets no secrets and a read-only ``GITHUB_TOKEN``): it
runs ``swarm claim`` on the merge commit GitHub built and uploads the file as the artifact
``swarm-claim``. The trusted review reads it back as DATA (:func:`read_claim`: one JSON
document, size-limited, shape-checked) and compares it with what the base's code resolves
the same merge result to (:func:`compare`): the difference is the effect of the code
change, as the head's code claims it. It is shown beside the base's verdict, labelled as
the head's claim, and never changes the verdict or the exit code.

The file (:data:`FORMAT`): ``{"format": "swarm-claim/1", "tree": TREE, "fleets": {NAME:
{"nodes": {NODE: NodeState}, "objects": [K8sObject], "error": null}}}``; ``tree`` is the
merge commit's tree id, so a claim of another merge result (the base moved since) is
known as stale; a fleet that does not resolve has ``error`` set and nothing else.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import ClaimInvalid as ClaimInvalid
from ..fleet.diagnostics import excerpt
from .diff import node_changes, object_changes
from .load import object_key
from .model import ClaimDiff

FORMAT = "swarm-claim/1"
_TREE = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # a SHA-1 or SHA-256 object id
MAX_BYTES = 512 * 1024 * 1024  # a claim of 10,000 nodes is about 60 MB


def claim_document(tree: str, fleets: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The claim file's document for the merge result whose tree id is ``tree``: ``fleets``
    maps a name to ``{"nodes": ..., "objects": [...], "error": None}`` or ``{"error": why}``."""
    return {"format": FORMAT, "tree": tree, "fleets": dict(fleets)}


def read_claim(path: Path) -> dict[str, Any]:
    """The claim at ``path``, checked: the format, a 40- or 64-hex ``tree``, and per fleet a
    mapping of node names to mappings and a list of objects each with a string
    ``apiVersion``, ``kind`` and ``metadata.name``. Raises :class:`ClaimInvalid`."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ClaimInvalid(f"no claim file: {exc.strerror}") from None
    if size > MAX_BYTES:
        raise ClaimInvalid(f"the claim is {size} bytes, more than {MAX_BYTES}")
    try:
        doc = json.loads(path.read_bytes())
    except (ValueError, UnicodeDecodeError):
        raise ClaimInvalid("the claim is not JSON") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ClaimInvalid(f"the claim is not a {FORMAT} document")
    tree = doc.get("tree")
    if not isinstance(tree, str) or not _TREE.fullmatch(tree):
        raise ClaimInvalid("the claim's tree is not a commit tree id")
    fleets = doc.get("fleets")
    if not isinstance(fleets, dict):
        raise ClaimInvalid("the claim's fleets is not a mapping")
    for name, entry in fleets.items():
        if not isinstance(entry, dict):
            raise ClaimInvalid(f"fleet {excerpt(name)}: not a mapping")
        if entry.get("error") is not None:
            if not isinstance(entry["error"], str):
                raise ClaimInvalid(f"fleet {excerpt(name)}: error is not text")
            continue
        nodes, objects = entry.get("nodes"), entry.get("objects")
        if not isinstance(nodes, dict) or not all(isinstance(v, dict) for v in nodes.values()):
            raise ClaimInvalid(f"fleet {excerpt(name)}: nodes is not a mapping of node states")
        if not isinstance(objects, list) or not all(_is_object(o) for o in objects):
            raise ClaimInvalid(f"fleet {excerpt(name)}: objects is not a list of Kubernetes objects")
    return doc


def _is_object(obj: Any) -> bool:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return (
        isinstance(meta, dict)
        and all(isinstance(obj.get(k), str) for k in ("apiVersion", "kind"))
        and isinstance(meta.get("name"), str)
        and isinstance(meta.get("namespace", ""), str)
    )


def compare(
    claim: Mapping[str, Any] | None,
    fleet: str,
    tree: str,
    nodes: Mapping[str, Any],
    objects: Mapping[Any, Any],
) -> ClaimDiff | None:
    """The head's claim for ``fleet`` against the base code's resolution of the same merge
    result (its tree ``tree``): its desired ``nodes`` and cluster ``objects``. None when
    there is no claim. A claim of another tree is ``stale``; a fleet the claim lacks, or
    one whose states the diff cannot read, is an ``error`` (the claim is the head's code's
    output: any shape may come, none may stop the review)."""
    if claim is None:
        return None
    if claim["tree"] != tree:
        return ClaimDiff(stale=True)
    entry = claim["fleets"].get(fleet)
    if entry is None:
        return ClaimDiff(error="the head's code claims no such fleet")
    if entry.get("error") is not None:
        return ClaimDiff(error=f"the head's code does not resolve it: {entry['error'][:300]}")
    try:
        theirs = {object_key(o): o for o in entry["objects"]}
        changes, _ = node_changes(nodes, entry["nodes"])
        return ClaimDiff(changes, object_changes(objects, theirs))
    except Exception as exc:
        return ClaimDiff(error=f"the claim's states could not be compared ({type(exc).__name__})")
