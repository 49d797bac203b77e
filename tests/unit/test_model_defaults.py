"""The ``default`` values the JSON schemas document are the fleet model's defaults.

Every ``default`` keyword in ``schemas/*.json`` is collected (as the kind and the field's
path in ``spec``) and compared with the default the model applies to a field left out: a
dataclass field's default, or an entry of one of the model's ``*_DEFAULTS`` mappings for
nested policy objects. A schema default with no counterpart fails, so the two cannot drift.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import MISSING, fields
from typing import Any

import pytest

from swarm_infra.fleet import model
from swarm_infra.fleet.schemas import KINDS, schema_dir
from swarm_infra.resolve.node import driver_state


def _field_default(cls: type, name: str) -> Any:
    f = next(f for f in fields(cls) if f.name == name)
    if f.default is not MISSING:
        return f.default
    assert f.default_factory is not MISSING, f"{cls.__name__}.{name} has no default"
    return f.default_factory()


def _field(cls: type, name: str) -> Callable[[], Any]:
    return lambda: _field_default(cls, name)


def _entry(mapping: Mapping[str, Any], key: str) -> Callable[[], Any]:
    return lambda: mapping[key]


# (kind, path in spec: "a.b" for nested objects, "a[]" for an array's items) -> the model's
# default for that field.
MODEL_DEFAULTS: dict[tuple[str, str], Callable[[], Any]] = {
    ("Allocation", "fair_sharing"): _field(model.Allocation, "fair_sharing"),
    ("Allocation", "queues[].fair_sharing_weight"): _field(model.Queue, "fair_sharing_weight"),
    ("Allocation", "queues[].preemption.within_cluster_queue"): _field(model.Queue, "within_cluster_queue"),
    ("Allocation", "queues[].preemption.reclaim_within_cohort"): _field(model.Queue, "reclaim_within_cohort"),
    ("Allocation", "queues[].preemption.borrow_within_cohort"): _field(model.Queue, "borrow_within_cohort"),
    ("Allocation", "cohorts[].fair_sharing_weight"): _field(model.Cohort, "fair_sharing_weight"),
    ("Allocation", "tenants[].ray.object_store_percent"): _field(model.RayRequest, "object_store_percent"),
    ("Allocation", "tenants[].ray.head.cpus"): _field(model.RayRequest, "head_cpus"),
    ("Allocation", "tenants[].ray.head.memory_gib"): _field(model.RayRequest, "head_memory_gib"),
    ("Allocation", "tenants[].ray.workers[].min_replicas"): _field(model.RayWorkers, "min_replicas"),
    ("Assignment", "precedence"): _field(model.Assignment, "precedence"),
    ("Cluster", "system_namespace"): _field(model.ClusterSettings, "system_namespace"),
    ("Cluster", "gpu_namespace"): _field(model.ClusterSettings, "gpu_namespace"),
    ("Cluster", "gpu_taint"): _field(model.ClusterSettings, "gpu_taint"),
    # The one default applied past the model: resolve reads the driver block as declared.
    ("GpuProfile", "driver.allow_reboot"): lambda: driver_state({"branch": "570"})["allow_reboot"],
    ("GpuProfile", "driver.source"): lambda: driver_state({"branch": "570"})["source"],
    ("GpuProfile", "mig.profiles"): _entry(model.MIG_DEFAULTS, "profiles"),
    ("HostProfile", "hugepages.size_kib"): _entry(model.HUGEPAGES_DEFAULTS, "size_kib"),
    ("NodeAcceptance", "max_run_age_hours"): _field(model.NodeAcceptance, "max_run_age_hours"),
    ("Mesh", "interface"): _field(model.Mesh, "interface"),
    ("Mesh", "listen_port"): _field(model.Mesh, "listen_port"),
    ("Mesh", "mtu"): _field(model.Mesh, "mtu"),
    ("Mesh", "persistent_keepalive_s"): _field(model.Mesh, "persistent_keepalive_s"),
    ("Mesh", "topology"): _field(model.Mesh, "topology"),
    ("Mesh", "relays.max_site_pairs"): _field(model.Mesh, "relay_max_site_pairs"),
    ("Mesh", "relays.hysteresis_ms"): _field(model.Mesh, "relay_hysteresis_ms"),
    ("Mesh", "relays.hysteresis_percent"): _field(model.Mesh, "relay_hysteresis_percent"),
    ("Mesh", "relays.allowed_providers"): _field(model.Mesh, "relay_allowed_providers"),
    ("Mesh", "controller.name"): _field(model.MeshController, "name"),
    ("Mesh", "controller.interface"): _field(model.MeshController, "interface"),
    ("Mesh", "controller.ssh_over_mesh"): _field(model.MeshController, "ssh_over_mesh"),
    ("Node", "ssh.port"): _field(model.Node, "ssh_port"),
    ("Node", "ssh.user"): _field(model.Node, "ssh_user"),
    ("Node", "ssh.host_keys"): _field(model.Node, "ssh_host_keys"),
    ("Node", "gpu_backend"): _field(model.Node, "gpu_backend"),
    ("Node", "mesh.nat"): _field(model.Node, "nat"),
    ("Node", "convergence"): _field(model.Node, "convergence"),
    ("Priority", "preemption_policy"): _field(model.Priority, "preemption_policy"),
    ("Priority", "global_default"): _field(model.Priority, "global_default"),
    ("RayCluster", "workers"): lambda: {"selector": model.RAY_DEFAULT_WORKERS},
    ("RayCluster", "object_store_percent"): _field(model.RayCluster, "object_store_percent"),
    ("RayCluster", "dashboard.enabled"): _field(model.RayCluster, "dashboard_enabled"),
    ("RayCluster", "dashboard.port"): _field(model.RayCluster, "dashboard_port"),
    ("RayCluster", "dashboard.clients"): _field(model.RayCluster, "dashboard_clients"),
    **{("RayCluster", f"ports.{k}"): _entry(model.RAY_PORTS, k) for k in model.RAY_PORTS},
    **{
        ("ReviewPolicy", f"flags.{k}"): _entry(model.REVIEW_FLAG_DEFAULTS, k)
        for k in model.REVIEW_FLAG_DEFAULTS
    },
    ("Rollout", "canary_hosts"): _field(model.Rollout, "canary_hosts"),
    ("Rollout", "batch_percent"): _field(model.Rollout, "batch_percent"),
    ("Rollout", "max_fail_percentage"): _field(model.Rollout, "max_fail_percentage"),
    ("Rollout", "pull.interval_s"): _field(model.PullSpec, "interval_s"),
    ("Rollout", "pull.randomized_delay_s"): _field(model.PullSpec, "randomized_delay_s"),
    ("Rollout", "pull.status_port"): _field(model.PullSpec, "status_port"),
    ("Rollout", "pull.revoked_signers"): _field(model.PullSpec, "revoked_signers"),
    ("Rollout", "drain_grace_s"): _field(model.Rollout, "drain_grace_s"),
    ("Rollout", "kubernetes_context"): _field(model.Rollout, "kubernetes_context"),
    **{("Storage", f"scratch.{k}"): _entry(model.SCRATCH_DEFAULTS, k) for k in model.SCRATCH_DEFAULTS},
    **{
        ("Storage", f"classes[].{k}"): _entry(model.STORAGE_CLASS_DEFAULTS, k)
        for k in model.STORAGE_CLASS_DEFAULTS
    },
    **{("Storage", f"volumes[].{k}"): _entry(model.VOLUME_DEFAULTS, k) for k in model.VOLUME_DEFAULTS},
}


def _defaults(schema: Mapping[str, Any], path: str) -> Iterator[tuple[str, Any]]:
    """(path, value) of every ``default`` keyword at or under ``schema`` (a field named
    ``default`` under ``properties`` is a field, not the keyword)."""
    if "default" in schema:
        yield path, schema["default"]
    for name, sub in schema.get("properties", {}).items():
        yield from _defaults(sub, f"{path}.{name}" if path else name)
    items = schema.get("items")
    if isinstance(items, dict):
        yield from _defaults(items, f"{path}[]")


def _schema_defaults() -> dict[tuple[str, str], Any]:
    out = {}
    for kind, filename in KINDS.items():
        schema = json.loads((schema_dir() / filename).read_text())
        spec = schema["properties"].get("spec", {})
        assert "default" not in schema, f"{filename}: a default outside spec"
        for path, value in _defaults(spec, ""):
            out[(kind, path)] = value
    return out


SCHEMA_DEFAULTS = _schema_defaults()


def _plain(value: Any) -> Any:
    """``value`` as JSON would hold it: mappings as dicts, tuples as lists."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def test_the_schemas_document_defaults() -> None:
    assert len(SCHEMA_DEFAULTS) >= 40  # the walk finds them (guards the walk itself)


@pytest.mark.parametrize(
    "kind, path", sorted(set(SCHEMA_DEFAULTS) & set(MODEL_DEFAULTS)), ids=lambda p: str(p)
)
def test_schema_default_is_the_model_default(kind: str, path: str) -> None:
    schema_value, model_value = SCHEMA_DEFAULTS[(kind, path)], _plain(MODEL_DEFAULTS[(kind, path)]())
    assert schema_value == model_value, (
        f"{kind} spec.{path}: schema says {schema_value!r}, model {model_value!r}"
    )
    assert type(schema_value) is type(model_value) or {type(schema_value), type(model_value)} <= {int, float}


def test_every_schema_default_has_a_model_default() -> None:
    missing = sorted(set(SCHEMA_DEFAULTS) - set(MODEL_DEFAULTS))
    assert not missing, f"schema defaults the model does not apply (or this test does not map): {missing}"


def test_every_model_default_is_documented_in_the_schema() -> None:
    undocumented = sorted(set(MODEL_DEFAULTS) - set(SCHEMA_DEFAULTS))
    assert not undocumented, f"model defaults without a `default` in schemas/: {undocumented}"


def test_the_model_applies_the_defaults_to_a_document_that_leaves_them_out() -> None:
    """The builders leave out what a document does not declare, so the field defaults apply."""
    from swarm_infra.fleet.diagnostics import Source
    from swarm_infra.fleet.loader import RawDocument

    src = Source("mem.yaml", 0, 1)

    def doc(kind: str, spec: dict[str, Any]) -> RawDocument:
        data = {"apiVersion": "swarm.io/v1alpha1", "kind": kind, "metadata": {"name": "x"}, "spec": spec}
        return RawDocument(src, data)

    fleet, findings = model.build_fleet(
        [
            doc("Mesh", {"cidr": "10.9.0.0/24"}),
            doc("Rollout", {}),
            doc("Priority", {"value": 1}),
            doc("Cluster", {}),
        ],
        [],
    )
    assert not findings
    assert fleet.mesh is not None and fleet.rollout is not None
    for (kind, path), value in SCHEMA_DEFAULTS.items():
        obj = {"Mesh": fleet.mesh, "Rollout": fleet.rollout, "Cluster": fleet.cluster}.get(kind)
        if obj is not None and "." not in path:
            assert _plain(getattr(obj, path)) == value, (kind, path)
    assert fleet.priorities["x"].preemption_policy == SCHEMA_DEFAULTS[("Priority", "preemption_policy")]
    assert fleet.priorities["x"].global_default is SCHEMA_DEFAULTS[("Priority", "global_default")]
