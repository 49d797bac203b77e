"""A copy of the lab fleet whose free-form strings are Jinja expressions (issue #11, class 1).

Shared by ``tests/unit/test_inventory_plugin.py`` (real ``ansible-inventory`` and
``ansible-playbook -c local``) and ``tests/lab/test_hostile_converge.py`` (a real converge).
The payload is a lookup that would run a command on the controller if anything templated
it: ``touch MARKER``. Tests assert that the marker never appears.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]


def payload(marker: Path) -> str:
    """A Jinja expression that creates ``marker`` on the controller when templated."""
    return f"{{{{ lookup('pipe', 'touch {marker}') }}}}"


@dataclass(frozen=True)
class Poisoned:
    """One free-form string set to the payload: its file, document index, JSON path, and
    whether the schema accepts the payload there (else validation must refuse it)."""

    file: Path
    index: int
    path: str
    accepted: bool


def _poison(kind: str, doc: dict[str, Any], jinja: str, everywhere: bool) -> list[tuple[str, bool]]:
    """Put ``jinja`` into the free-form strings of one document (in place): annotations
    and StorageClass parameters, which stay free, always; with ``everywhere`` also the
    strings the schema constrains (region, provider, descriptions, label values, GPU model
    names). Returns (JSON path, accepted) of each."""
    done: list[tuple[str, bool]] = []
    doc.setdefault("metadata", {}).setdefault("annotations", {})["note"] = jinja
    done.append(("$.metadata.annotations.note", True))
    spec = doc.get("spec", {})
    if kind == "Storage":
        for i, c in enumerate(spec.get("classes", [])):
            c.setdefault("parameters", {})["template"] = jinja
            done.append((f"$.spec.classes[{i}].parameters.template", True))
    if not everywhere:
        return done
    if kind == "Site":
        spec["region"] = jinja
        spec["provider"] = jinja
        done += [("$.spec.region", False), ("$.spec.provider", False)]
    elif kind == "Priority":
        spec["description"] = jinja
        done.append(("$.spec.description", False))
    elif kind == "Node":
        for key in doc["metadata"].get("labels", {}):
            doc["metadata"]["labels"][key] = jinja
            done.append((f"$.metadata.labels.{key}", False))
        for i, slot in enumerate(spec.get("hardware", {}).get("gpus", [])):
            slot["model"] = jinja
            done.append((f"$.spec.hardware.gpus[{i}].model", False))
    return done


def jinja_fleet(dest: Path, marker: Path, everywhere: bool) -> tuple[Path, list[Poisoned]]:
    """Copy the lab fleet (inventory/lab, policies/lab, policies/shared) under ``dest`` with
    the payload in its free-form strings (see :func:`_poison`). Returns the copy's
    inventory directory (``dest/inventory/lab``) and what was poisoned."""
    jinja = payload(marker)
    poisoned: list[Poisoned] = []
    for part in ("inventory/lab", "policies/lab", "policies/shared"):
        shutil.copytree(ROOT / part, dest / part)
        for f in sorted((dest / part).rglob("*.yaml")):
            docs = [d for d in yaml.safe_load_all(f.read_text()) if d is not None]
            for index, doc in enumerate(docs):
                for path, accepted in _poison(doc["kind"], doc, jinja, everywhere):
                    poisoned.append(Poisoned(f, index, path, accepted))
            f.write_text(yaml.safe_dump_all(docs, sort_keys=False, width=10_000))
    return dest / "inventory" / "lab", poisoned
