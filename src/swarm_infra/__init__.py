"""Swarm infrastructure pipeline: the library every consumer reads the fleet through.

Data flows one way, and the subpackages follow it: ``fleet`` (declare: files, YAML,
schemas, the typed model) -> ``resolve`` (decide: validation and the desired state) ->
consumers (``engines``, ``verify``, ``lab``) -> ``cli``; ``nodeside`` is the code that runs
on the nodes, ``gitrun`` the one way the review and the agent run git, ``errors`` the
library's exception classes (below every layer). The names below are
re-exported lazily, so ``import swarm_infra.lab.wanlink`` does not load the validator.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Diagnostic", "FleetInvalid", "Report", "Validation", "desired_state", "load_fleet", "validate"]


def __getattr__(name: str) -> Any:
    if name in ("Diagnostic", "FleetInvalid", "Report"):
        from .fleet import diagnostics

        return getattr(diagnostics, name)
    if name in ("Validation", "desired_state", "load_fleet", "validate"):
        from . import resolve

        return getattr(resolve, name)
    raise AttributeError(f"module 'swarm_infra' has no attribute {name!r}")
