"""The Pulumi program: read the fleet, decide everything, then register the components.

Everything is validated and built before the first resource is registered: an invalid
fleet (``FleetInvalid``, the same report as ``swarm validate``) or sites that cannot form a
cluster (``ScopeError``) stop the program before ``pulumi up`` touches the cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pulumi

from ...cluster import ClusterObjects, build
from ...cluster.kueue import manager_config
from ...fleet.sources import convention_paths
from ...resolve import desired_state, load_fleet
from ...resolve.drivers import container_runtime_problems
from ...resolve.types import DesiredState
from .components import (
    Cluster,
    ClusterArgs,
    GpuOperator,
    GpuOperatorArgs,
    Mesh,
    MeshArgs,
    Operators,
    OperatorsArgs,
    RayClusters,
    RayClustersArgs,
    Storage,
    StorageArgs,
    gpu_operator_values,
)
from .config import StackConfig


@dataclass(frozen=True)
class Program:
    """What one run of the program made (for the entry point's exports and for tests)."""

    config: StackConfig
    state: DesiredState
    objects: ClusterObjects
    operators: Operators
    cluster: Cluster
    gpu: GpuOperator
    storage: Storage
    mesh: Mesh
    ray_clusters: RayClusters


def load(config: StackConfig, root: Path, gpu_present: bool = False) -> tuple[DesiredState, ClusterObjects]:
    """The fleet's desired state and objects (raises FleetInvalid, ScopeError);
    ``gpu_present`` as :func:`swarm_infra.cluster.build` takes it."""
    paths = [p for p in convention_paths(root, config.fleet) if p.is_dir()]
    if not paths:
        raise FileNotFoundError(f"no inventory/{config.fleet} or policies/{config.fleet} under {root}")
    state = desired_state(load_fleet(paths))
    return state, build(state, config.sites, gpu_present)


def run(config: StackConfig, root: Path) -> Program:
    """Register the stack's components for ``config`` with the fleet under ``root``."""
    state, objects = load(config, root)
    settings = state["cluster"]["settings"]
    elastic = any(o["spec"].get("enableInTreeAutoscaling") for o in objects.ray)
    operators = Operators("operators", OperatorsArgs(config, elastic, manager_config(state["cluster"])))
    cluster = Cluster("cluster", ClusterArgs(objects.cluster, operators.kueue))
    gpu_inputs = [
        r
        for key, r in cluster.resources.items()
        if key == f"Namespace:{settings['gpu_namespace']}"
        or (key.startswith("ConfigMap:") and key.split(":", 1)[1].startswith(settings["gpu_namespace"] + "/"))
    ]
    mig_strategy = state["cluster"]["gpu_sharing"]["operator_mig_strategy"]
    if config.gpu_mode == "gpu-operator":
        # One owner of the container runtime: refused before anything is registered when a
        # GPU node's driver layer would install a toolkit beside the Operator's (or none is on).
        drivers = {name: n["gpu"]["driver"] if n["gpu"] else None for name, n in state["nodes"].items()}
        problems = container_runtime_problems(drivers, gpu_operator_values(mig_strategy))
        if problems:
            raise ValueError("container runtime: " + "; ".join(problems))
    gpu = GpuOperator(
        "gpu-operator",
        GpuOperatorArgs(
            config,
            settings["gpu_namespace"],
            mig_strategy,
            gpu_inputs,
        ),
    )
    storage = Storage("storage", StorageArgs(objects.storage, cluster.namespaces, config))
    mesh = Mesh("mesh", MeshArgs(objects.mesh, state["cluster"]["mesh"], cluster.namespaces))
    queues = [
        r
        for key, r in cluster.resources.items()
        if key.startswith(("LocalQueue:", "WorkloadPriorityClass:", "PriorityClass:"))
    ]
    ray_clusters = RayClusters(
        "ray-clusters", RayClustersArgs(objects.ray, cluster.namespaces, operators.kuberay, queues)
    )
    return Program(config, state, objects, operators, cluster, gpu, storage, mesh, ray_clusters)


def export(program: Program) -> None:
    """Stack outputs: the fleet, the mesh topology, and what each component holds."""
    pulumi.export("fleet", program.state["cluster"]["settings"]["fleet"])
    pulumi.export("sites", list(program.config.sites) if program.config.sites else "all")
    pulumi.export(
        "mesh",
        {
            "addresses": program.mesh.addresses,
            "hubs": program.mesh.hubs,
            "relays": program.mesh.relays,
            "edges": program.mesh.edges,
        },
    )
    pulumi.export("objects", len(program.objects.all()))
    pulumi.export(
        "rayClusters",
        sorted(f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in program.objects.ray),
    )
