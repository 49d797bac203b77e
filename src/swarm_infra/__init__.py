"""Swarm infrastructure pipeline: the library every consumer reads the fleet through.

Data flows one way: declare (YAML) → :func:`validate` / :func:`load_fleet` → resolve
(:func:`desired_state`) → consumers (Ansible, pyinfra, Pulumi, testinfra, review).
"""

from .diagnostics import Diagnostic, FleetInvalid, Report
from .resolve import desired_state
from .validate import Validation, load_fleet, validate

__all__ = ["Diagnostic", "FleetInvalid", "Report", "Validation", "desired_state", "load_fleet", "validate"]
