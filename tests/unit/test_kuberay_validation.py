"""KubeRay v1.6.0's RayCluster validation, restated in ``cluster.rules.kuberay_violations``
(ray-project/kuberay tag v1.6.0: ray-operator/controllers/ray/utils/validation.go
ValidateRayClusterMetadata and ValidateRayClusterSpec, ray-operator/pkg/webhooks/v1/
raycluster_webhook.go validateWorkerGroups, common/pod.go labelPod and convertParamMap):
every rendered RayCluster of both fleets passes it, and each restated rule refuses the
object that breaks it (so a pass means something)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from swarm_infra.cluster.rules import kuberay_violations, violations

from .cluster_support import by_kind, objects

FLEETS = ("example", "lab")


def ray_clusters() -> list[tuple[str, str]]:
    return [(f, key) for f in FLEETS for key in sorted(by_kind(objects(f).all(), "RayCluster"))]


@pytest.mark.parametrize(("fleet", "key"), ray_clusters(), ids=lambda x: str(x))
def test_every_rendered_ray_cluster_passes_kuberay_validation(fleet: str, key: str) -> None:
    rc = by_kind(objects(fleet).all(), "RayCluster")[key]
    assert kuberay_violations(rc) == []
    assert violations(rc) == []


def test_both_fleets_render_ray_clusters() -> None:
    assert {f for f, _ in ray_clusters()} == set(FLEETS)


Mutation = Callable[[dict[str, Any]], None]


def _worker(rc: dict[str, Any]) -> dict[str, Any]:
    w: dict[str, Any] = rc["spec"]["workerGroupSpecs"][0]
    return w


def _head_env(name: str, value: str) -> Mutation:
    def mutate(rc: dict[str, Any]) -> None:
        rc["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["env"] = [
            {"name": name, "value": value}
        ]

    return mutate


def _set(path: tuple[Any, ...], value: Any) -> Mutation:
    def mutate(rc: dict[str, Any]) -> None:
        target = rc
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = value

    return mutate


def _v2_with_env(rc: dict[str, Any]) -> None:
    rc["spec"]["autoscalerOptions"] = {"version": "v2"}
    _head_env("RAY_enable_autoscaler_v2", "true")(rc)


def _v2_restart(rc: dict[str, Any]) -> None:
    rc["spec"]["autoscalerOptions"] = {"version": "v2"}
    _worker(rc)["template"]["spec"]["restartPolicy"] = "Always"


def _no_autoscaling(rc: dict[str, Any]) -> None:
    rc["spec"].pop("enableInTreeAutoscaling")
    del _worker(rc)["minReplicas"]


def _v2_env_without_autoscaling(rc: dict[str, Any]) -> None:
    rc["spec"].pop("enableInTreeAutoscaling")
    _head_env("RAY_enable_autoscaler_v2", "true")(rc)


def _old_ray_token(rc: dict[str, Any]) -> None:
    rc["spec"]["rayVersion"] = "2.51.0"
    rc["spec"]["authOptions"] = {"mode": "token"}


W0 = ("spec", "workerGroupSpecs", 0)
HEAD = ("spec", "headGroupSpec")

# (what breaks, mutation of the example fleet's acme-ai RayCluster, expected message part)
MUTATIONS: list[tuple[str, Mutation, str]] = [
    ("labels in rayStartParams", _set((*W0, "rayStartParams", "labels"), "a=b"), "rayStartParams['labels']"),
    (
        "labels in the head's rayStartParams",
        _set((*HEAD, "rayStartParams", "labels"), "a=b"),
        "headGroupSpec",
    ),
    ("label key", _set((*W0, "labels"), {"-bad/key": "v"}), "label key"),
    ("label value", _set((*W0, "labels"), {"swarm.io/x": "not ok"}), "not a valid label value"),
    ("resources twice", _set((*W0, "rayStartParams", "num-gpus"), "8"), "resources in both"),
    ("resources twice (json)", _set((*W0, "rayStartParams", "resources"), "'{}'"), "resources in both"),
    ("name too long", _set(("metadata", "name"), "a" * 54), "DNS-1035"),
    ("name not DNS-1035", _set(("metadata", "name"), "1acme"), "DNS-1035"),
    ("no head container", _set((*HEAD, "template", "spec", "containers"), []), "headGroupSpec should have"),
    ("no worker container", _set((*W0, "template", "spec", "containers"), []), "at least one container"),
    ("min above max", _set((*W0, "minReplicas"), 5), "greater than maxReplicas"),
    ("negative", _set((*W0, "maxReplicas"), -1), "negative"),
    ("idle timeout without v2", _set((*W0, "idleTimeoutSeconds"), 60), "idleTimeoutSeconds"),
    ("suspended with autoscaling", _set((*W0, "suspend"), True), "suspended"),
    (
        "group name duplicate",
        lambda rc: rc["spec"]["workerGroupSpecs"].append(copy.deepcopy(_worker(rc))),
        "unique",
    ),
    ("group name not a label value", _set((*W0, "groupName"), "h100 sxm"), "ray.io/group"),
    ("shell word", _set((*W0, "rayStartParams", "object-store-memory"), "1 2"), "plain shell word"),
    ("shell expansion", _set((*HEAD, "rayStartParams", "temp-dir"), "$(id)"), "plain shell word"),
    ("redis username", _set((*HEAD, "rayStartParams", "redis-username"), "u"), "redis username"),
    ("redis address without FT", _head_env("RAY_REDIS_ADDRESS", "r:6379"), "RAY_REDIS_ADDRESS"),
    ("v2 env and version", _v2_with_env, "autoscalerOptions.version"),
    ("v2 restart policy", _v2_restart, "restartPolicy"),
    ("min/max unset without autoscaling", _no_autoscaling, "required when autoscaling is disabled"),
    ("v2 env without autoscaling", _v2_env_without_autoscaling, "enableInTreeAutoscaling is false"),
    (
        "idle timeout negative",
        _set(("spec", "autoscalerOptions"), {"idleTimeoutSeconds": -1}),
        "non-negative",
    ),
    ("token auth on an old Ray", _old_ray_token, "2.52.0"),
]


@pytest.mark.parametrize(("what", "mutate", "message"), MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_each_restated_rule_refuses_what_breaks_it(what: str, mutate: Mutation, message: str) -> None:
    rc = copy.deepcopy(by_kind(objects("example").all(), "RayCluster")["acme-ai/acme-ai"])
    assert kuberay_violations(rc) == []
    mutate(rc)
    found = kuberay_violations(rc)
    assert any(message in f for f in found), found


def test_token_auth_on_a_recent_ray_passes() -> None:
    rc = copy.deepcopy(by_kind(objects("example").all(), "RayCluster")["acme-ai/acme-ai"])
    rc["spec"]["authOptions"] = {"mode": "token"}
    rc["spec"]["rayVersion"] = "2.52.0"  # the least KubeRay accepts with token auth
    assert kuberay_violations(rc) == []


@pytest.mark.parametrize(("fleet", "key"), ray_clusters(), ids=lambda x: str(x))
def test_every_rendered_ray_cluster_asks_kuberay_for_token_auth(fleet: str, key: str) -> None:
    """The tenants' clusters answer only with a token, as the bare-node cluster does: KubeRay
    (v1.5.1 and later) then makes a Secret with a random token and sets RAY_AUTH_MODE and
    RAY_AUTH_TOKEN on every Ray container (Ray docs, "Configure Ray clusters to use token
    authentication"); the head's dashboard and job API listen on 0.0.0.0 in the pod."""
    rc = by_kind(objects(fleet).all(), "RayCluster")[key]
    assert rc["spec"]["authOptions"] == {"mode": "token"}
