"""Decide (pure): from the declared fleet to the desired state every consumer applies.

``validate`` / ``load_fleet`` check that every decision can be made (the semantic rules
live beside the decisions they test, in ``checks/``); ``desired_state`` makes them:
profile choice by precedence (``assign``), GPU settings and limits (``gpu``, ``catalog``),
host tuning (``host``), mesh addressing and topology (``mesh``), the on-node layout
(``layout``), NodeState (``node``), GPU flavors as the cluster sees them (``flavors``), Ray
clusters (``ray``), ClusterState (``cluster``) and Rollout (``rollout``).
Shapes: :mod:`swarm_infra.resolve.types`.
"""

from .drivers import driver_state
from .rollout import rollout_state
from .state import desired_state
from .validate import Validation, load_fleet, validate

__all__ = ["Validation", "desired_state", "driver_state", "load_fleet", "rollout_state", "validate"]
