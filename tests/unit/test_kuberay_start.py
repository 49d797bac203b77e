"""Every Ray process the fleets start parses with the pinned Ray's own ``ray start``.

KubeRay's pods: the command KubeRay v1.6.0 builds from each rendered group (restated in
``kuberay_support`` from ray-project/kuberay v1.6.0 ray-operator/controllers/ray/common/
pod.go, generateRayStartCommand and convertParamMap), split as bash splits it, parsed by
``ray.scripts.scripts.start`` of the installed Ray (the real click command, never invoked),
and the parsed values compared with the Ray decision (``resolve.ray``). Bare-node Ray: the
units' ``start_args`` (each argument quoted whole for systemd) through the same parser.
The installed Ray must be the fleets' Ray (Cluster spec.ray_version), or this proves
nothing about the Ray the fleets run.
"""

from __future__ import annotations

import copy
import importlib.metadata
import re
import shlex
import tomllib
from typing import Any

import click
import pytest
import yaml

from swarm_infra.resolve.ray import resources_param

from .cluster_support import ROOT, by_kind, fleet_dirs, objects, state
from .kuberay_support import (
    ULIMIT,
    bash_words,
    container_args,
    parse_ray_start,
    ray_start_command,
    shell_problems,
)

FLEETS = ("example", "lab")
GIB = 1 << 30


def declared_ray_version(fleet: str) -> str:
    """The fleet's Ray version as its files declare it (kind Cluster, spec.ray_version)."""
    found = []
    for d in fleet_dirs(fleet):
        for f in sorted(d.rglob("*.yaml")):
            for doc in yaml.safe_load_all(f.read_text()):
                if isinstance(doc, dict) and doc.get("kind") == "Cluster":
                    found.append(doc["spec"]["ray_version"])
    (version,) = found
    return str(version)


def test_the_installed_ray_is_every_fleets_ray() -> None:
    """A bump of the fleets' Ray without the test dependency (or the reverse) fails here."""
    installed = importlib.metadata.version("ray")
    pins = [
        r
        for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"][
            "dev"
        ]
        if re.match(r"^ray\b", r)
    ]
    assert pins == [f"ray=={installed}"], "pyproject.toml's dev extra must pin ray exactly"
    for fleet in FLEETS:
        assert declared_ray_version(fleet) == installed, fleet


def groups() -> list[tuple[str, str, int | None]]:
    """(fleet, namespace/name, group) of every rendered RayCluster group; group None: head."""
    out = []
    for fleet in FLEETS:
        for key, rc in sorted(by_kind(objects(fleet).all(), "RayCluster").items()):
            out += [(fleet, key, None)] + [
                (fleet, key, i) for i in range(len(rc["spec"]["workerGroupSpecs"]))
            ]
    return out


def decided(fleet: str, key: str, group: int | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Ray decision (ClusterState.ray_clusters entry, and its group) behind a group."""
    (cluster,) = [
        c for c in state(fleet)["cluster"]["ray_clusters"] if f"{c['namespace']}/{c['name']}" == key
    ]
    return cluster, dict(cluster["head"] if group is None else cluster["workers"][group])


@pytest.mark.parametrize(("fleet", "key", "group"), groups(), ids=lambda x: str(x))
def test_kuberay_start_command_parses_as_the_ray_decision(fleet: str, key: str, group: int | None) -> None:
    rc = by_kind(objects(fleet).all(), "RayCluster")[key]
    command = ray_start_command(rc, group)
    assert container_args(rc, group) == [f"{ULIMIT}; {command}"]
    # Ray's own parser first (it names what it refuses), then what shlex does not model.
    params = parse_ray_start(shlex.split(command))
    assert shell_problems(command) == []
    cluster, g = decided(fleet, key, group)
    assert params["head"] is (group is None)
    assert params["block"] is True
    assert params["num_cpus"] == g["cpus"]
    assert params["memory"] == g["memory_gib"] * GIB
    assert params["num_gpus"] == (g["gpus"] or None)
    assert params["object_store_memory"] == g["object_store_bytes"]
    assert params["labels"] == g["labels"]
    assert params["resources"] == {k: float(v) for k, v in g["resources"].items()}
    if group is None:
        assert params["address"] is None
        assert params["no_monitor"] is cluster["autoscaling"]
    else:
        name, ns = cluster["name"], cluster["namespace"]
        assert params["address"] == f"{name}-head-svc.{ns}.svc.cluster.local:6379"


@pytest.mark.parametrize("fleet", FLEETS)
def test_worker_groups_carry_ray_labels_and_resources(fleet: str) -> None:
    """Not vacuous: some parsed group has Ray node labels and accelerator resources."""
    rcs = by_kind(objects(fleet).all(), "RayCluster")
    parsed = [
        parse_ray_start(bash_words(ray_start_command(rc, i)))
        for rc in rcs.values()
        for i in range(len(rc["spec"]["workerGroupSpecs"]))
    ]
    assert parsed and all(p["labels"] and p["resources"] for p in parsed)


def test_bare_node_start_args_parse_as_the_ray_decision() -> None:
    """The lab's bare-node units: systemd hands each start_args element whole to ray."""
    nodes = {n: s["ray"] for n, s in state("lab")["nodes"].items() if s.get("ray")}
    assert nodes
    for name, ray in nodes.items():
        params = parse_ray_start(["ray", *ray["start_args"]])
        assert params["head"] is (ray["role"] == "head"), name
        assert params["labels"] == ray["labels"], name
        assert params["resources"] == {k: float(v) for k, v in ray["resources"].items()}, name
        assert params["num_gpus"] == ray["num_gpus"] and params["num_cpus"] == ray["num_cpus"], name
        assert params["object_store_memory"] == ray["object_store_bytes"], name


# ------------------------------------------------------------- the oracle bites


def worker(fleet: str = "example") -> tuple[dict[str, Any], int]:
    rc = copy.deepcopy(by_kind(objects(fleet).all(), "RayCluster")["acme-ai/acme-ai"])
    return rc, 0


def test_a_resources_param_with_a_space_splits_in_bash_and_ray_refuses_it() -> None:
    """What the builder did before: rayStartParams resources = json.dumps(...), with a space,
    pasted unquoted by KubeRay. bash makes two words of it, and ray start refuses the rest."""
    rc, i = worker()
    w = rc["spec"]["workerGroupSpecs"][i]
    w["rayStartParams"]["resources"] = resources_param({k: int(v) for k, v in w.pop("resources").items()})
    command = ray_start_command(rc, i)
    with pytest.raises(ValueError, match="shell expansion"):
        bash_words(command)
    with pytest.raises(click.UsageError, match="unexpected extra argument"):
        parse_ray_start(shlex.split(command))


def test_labels_in_a_form_ray_does_not_read_are_refused() -> None:
    rc, i = worker()
    rc["spec"]["workerGroupSpecs"][i]["labels"] = {"swarm.io/gpu-flavor": "a=b"}
    with pytest.raises(ValueError, match="key-value"):
        parse_ray_start(bash_words(ray_start_command(rc, i)))


def test_an_unknown_ray_start_option_is_refused() -> None:
    rc, i = worker()
    rc["spec"]["workerGroupSpecs"][i]["rayStartParams"]["object-store-bytes"] = "1"
    with pytest.raises(click.NoSuchOption):
        parse_ray_start(bash_words(ray_start_command(rc, i)))


def test_a_value_ray_cannot_convert_is_refused() -> None:
    rc, i = worker()
    rc["spec"]["workerGroupSpecs"][i]["rayStartParams"]["object-store-memory"] = "20Gi"
    with pytest.raises(click.BadParameter):
        parse_ray_start(bash_words(ray_start_command(rc, i)))


@pytest.mark.parametrize(
    "word", ["$(id)", "`id`", "x;y", "a|b", "a>b", "*", "~root", "{a,b}", '"$HOME"', "#c", "'open"]
)
def test_shell_constructs_shlex_does_not_model_are_refused(word: str) -> None:
    with pytest.raises(ValueError):
        bash_words(f"ray start --temp-dir {word}")
