"""The repository's Pulumi stacks: which fleet, and which of its sites, each one is.

A stack is a file ``Pulumi.<stack>.yaml`` beside ``Pulumi.yaml`` (Pulumi's "stack settings
file", pulumi.com/docs/concepts/projects/#stack-settings-file), whose ``config`` holds the
project's keys as ``swarm:<key>``: ``swarm:fleet`` (default: ``Pulumi.yaml``'s
``config.fleet.default``, as the Pulumi engine applies a project-level default) and
``swarm:sites`` (a list: one regional cluster; absent: every site), and
``kubernetes:context``. A fleet may have several stacks (``Pulumi.example.yaml`` for every
site, ``Pulumi.example-eu.yaml`` for fra1 and ams2): an apply updates each, and a review
compares each one's objects. The stack program reads the same keys
(:class:`swarm_infra.engines.pulumi.config.StackConfig`); this module only reads the files,
as data, so it also serves a review of files from a pull request.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..errors import StackFileError as StackFileError

STACK_FILE = re.compile(r"Pulumi\.(?P<stack>[A-Za-z0-9_.-]+)\.yaml")
PROJECT_FILE = "Pulumi.yaml"
DEFAULT_FLEET = "example"  # Pulumi.yaml's own default, when it declares none


@dataclass(frozen=True)
class Stack:
    """One stack: its ``name`` (``<stack>`` of the file name), ``fleet``, ``sites`` (None:
    every site of the fleet) and ``context`` (``kubernetes:context``, None: the kubeconfig's
    current one)."""

    name: str
    fleet: str
    sites: tuple[str, ...] | None
    context: str | None


def _mapping(file: str, text: str) -> Mapping[str, Any]:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise StackFileError(f"{file}{where}: not YAML ({getattr(exc, 'problem', None) or exc})") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise StackFileError(f"{file}: expected a mapping, got {type(doc).__name__}")
    return doc


def default_fleet(project_text: str | None) -> str:
    """``config.fleet.default`` of ``Pulumi.yaml`` (its text; None: no such file)."""
    if project_text is None:
        return DEFAULT_FLEET
    config = _mapping(PROJECT_FILE, project_text).get("config") or {}
    fleet = config.get("fleet") if isinstance(config, dict) else None
    default = fleet.get("default") if isinstance(fleet, dict) else fleet
    return default if isinstance(default, str) and default else DEFAULT_FLEET


def parse_stack(name: str, text: str, fleet_default: str = DEFAULT_FLEET) -> Stack:
    """The :class:`Stack` of ``Pulumi.<name>.yaml`` whose text is ``text``. Raises
    :class:`StackFileError` for YAML that is not a mapping or keys of the wrong type
    (``swarm:fleet`` a string, ``swarm:sites`` a list of strings)."""
    file = f"Pulumi.{name}.yaml"
    config = _mapping(file, text).get("config") or {}
    if not isinstance(config, dict):
        raise StackFileError(f"{file}: config must be a mapping")
    fleet = config.get("swarm:fleet", fleet_default)
    if not isinstance(fleet, str) or not fleet:
        raise StackFileError(f"{file}: swarm:fleet must be a fleet name, not {fleet!r}")
    sites = config.get("swarm:sites")
    if sites is not None and (not isinstance(sites, list) or not all(isinstance(s, str) for s in sites)):
        raise StackFileError(f"{file}: swarm:sites must be a list of site names")
    context = config.get("kubernetes:context")
    return Stack(name, fleet, tuple(sites) if sites else None, context if isinstance(context, str) else None)


def parse_stacks(files: Mapping[str, str]) -> dict[str, Stack]:
    """Every stack of ``files`` (repository-relative path -> text; other paths are
    ignored), by name, sorted. Raises :class:`StackFileError` (see :func:`parse_stack`)."""
    fleet_default = default_fleet(files.get(PROJECT_FILE))
    out = {}
    for path in sorted(files):
        m = STACK_FILE.fullmatch(path)
        if m:
            out[m["stack"]] = parse_stack(m["stack"], files[path], fleet_default)
    return out


def read_stacks(root: Path) -> dict[str, Stack]:
    """The stacks of the checkout at ``root`` (its ``Pulumi.*.yaml``)."""
    files = {p.name: p.read_text(encoding="utf-8") for p in root.glob("Pulumi*.yaml") if p.is_file()}
    return parse_stacks(files)


def stacks_of(stacks: Mapping[str, Stack], fleet: str) -> list[Stack]:
    """The stacks of ``fleet``, by name."""
    return [s for _, s in sorted(stacks.items()) if s.fleet == fleet]
