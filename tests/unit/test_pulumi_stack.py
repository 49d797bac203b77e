"""The Pulumi program under ``pulumi.runtime.set_mocks`` (no Pulumi CLI, no cluster): resource
types, names, parents, dependencies and inputs, and proof that the resources are exactly
the objects ``swarm render`` writes."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml
from pulumi.runtime.mocks import MockMonitor

from swarm_infra.cluster import ScopeError
from swarm_infra.engines.pulumi import components
from swarm_infra.engines.pulumi import config as cfg
from swarm_infra.engines.pulumi.config import Operator, StackConfig
from swarm_infra.engines.pulumi.program import Program, run
from swarm_infra.engines.pulumi.resources import resource_name, resource_type
from swarm_infra.fleet.diagnostics import FleetInvalid

from .cluster_support import ROOT, objects, state


class Recorder(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.created: list[pulumi.runtime.MockResourceArgs] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.created.append(args)
        return f"{args.name}-id", args.inputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict[str, Any]:
        return {}


@dataclass
class Run:
    program: Program | None
    created: list[Any]
    urns: list[str]
    registered: list[tuple[dict[str, Any], pulumi.ResourceOptions]] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)

    def one(self, typ: str, name: str) -> Any:
        (found,) = [r for r in self.created if r.typ == typ and r.name == name]
        return found


def run_stack(conf: StackConfig, monkeypatch: pytest.MonkeyPatch, root: Path = ROOT) -> Run:
    """Run the program under mocks; record each object registered with its options."""
    recorder = Recorder()
    monitor = MockMonitor(recorder)
    pulumi.runtime.set_mocks(recorder, project="swarm", stack="test", preview=False, monitor=monitor)
    registered: list[tuple[dict[str, Any], pulumi.ResourceOptions]] = []
    real = components.register

    def spy(obj: dict[str, Any], opts: pulumi.ResourceOptions) -> Any:
        registered.append((obj, opts))
        return real(obj, opts)

    monkeypatch.setattr(components, "register", spy)
    holder: dict[str, Any] = {}

    @pulumi.runtime.test
    def program() -> Any:
        p = holder["program"] = run(conf, root)
        m = p.mesh
        return pulumi.Output.all(m.addresses, m.hubs, m.relays, m.edges).apply(
            lambda v: holder.update(
                outputs=dict(zip(("addresses", "hubs", "relays", "edges"), v, strict=True))
            )
        )

    program()
    return Run(holder["program"], recorder.created, list(monitor.resources), registered, holder["outputs"])


def type_token(obj: dict[str, Any]) -> str:
    api = obj["apiVersion"] if "/" in obj["apiVersion"] else f"core/{obj['apiVersion']}"
    return f"kubernetes:{api}:{'NodePatch' if obj['kind'] == 'Node' else obj['kind']}"


def plain(value: Any) -> Any:
    """Inputs as the mocks see them, with protobuf's floats back to ints where whole."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


@pytest.fixture(scope="module")
def example_run() -> Iterator[Run]:
    with pytest.MonkeyPatch.context() as mp:
        yield run_stack(StackConfig(), mp)


# ------------------------------------------------------------------------ the proof


def test_pulumi_registers_exactly_the_objects_swarm_render_writes(example_run: Run) -> None:
    rendered = objects("example").all()
    kube = [r for r in example_run.created if r.typ.startswith("kubernetes:") and "helm.sh" not in r.typ]
    assert len(kube) == len(rendered)
    for obj in rendered:
        created = example_run.one(type_token(obj), resource_name(obj))
        assert plain(created.inputs) == obj, (obj["kind"], resource_name(obj))


def test_resource_types_follow_the_kind(example_run: Run) -> None:
    seen = {}
    for obj, _ in example_run.registered:
        seen[obj["kind"]] = resource_type(obj["kind"])
    assert seen["Namespace"] == seen["Node"] == seen["ValidatingAdmissionPolicy"] == "typed"
    assert seen["ClusterQueue"] == seen["RayCluster"] == "custom"
    # A Python CustomResource takes only spec: WorkloadPriorityClass's value needs the
    # generic resource, and still reaches the provider as a Kueue type.
    assert seen["WorkloadPriorityClass"] == "object"
    wpc = example_run.one("kubernetes:kueue.x-k8s.io/v1beta2:WorkloadPriorityClass", "production")
    assert wpc.inputs["value"] == 100000 and "spec" not in wpc.inputs


# --------------------------------------------------------------- components, parents


COMPONENTS = {
    "swarm:cluster:Operators": "operators",
    "swarm:cluster:Cluster": "cluster",
    "swarm:cluster:GpuOperator": "gpu-operator",
    "swarm:cluster:Storage": "storage",
    "swarm:cluster:Mesh": "mesh",
    "swarm:cluster:RayClusters": "ray-clusters",
}
PARENT_OF_KIND = {
    "StorageClass": "swarm:cluster:Storage",
    "PersistentVolumeClaim": "swarm:cluster:Storage",
    "RayCluster": "swarm:cluster:RayClusters",
}


def test_components_and_the_parent_of_every_object(example_run: Run) -> None:
    made = {(r.typ, r.name) for r in example_run.created if r.typ.startswith("swarm:")}
    assert made == set(COMPONENTS.items())
    mesh_configmap = ("ConfigMap", "swarm-system/swarm-mesh-topology")
    assert example_run.program is not None
    storage = {(o["kind"], resource_name(o)) for o in example_run.program.objects.storage}
    for obj, opts in example_run.registered:
        expected = PARENT_OF_KIND.get(obj["kind"], "swarm:cluster:Cluster")
        if (obj["kind"], resource_name(obj)) in storage:  # the provisioners and scratch quotas
            expected = "swarm:cluster:Storage"
        if (obj["kind"], resource_name(obj)) == mesh_configmap:
            expected = "swarm:cluster:Mesh"
        assert isinstance(opts.parent, pulumi.ComponentResource)
        # The URN carries the parent's type: urn:...::<parent type>$<type>::<name>.
        (urn,) = [u for u in example_run.urns if u.endswith(f"${type_token(obj)}::{resource_name(obj)}")]
        assert urn.split("::")[2].split("$")[-2] == expected, urn


def test_helm_releases_are_pinned_children_of_their_components(example_run: Run) -> None:
    releases = {r.name: r.inputs for r in example_run.created if r.typ == "kubernetes:helm.sh/v3:Release"}
    assert releases["kueue"]["version"] == cfg.KUEUE_VERSION
    assert releases["kueue"]["chart"] == cfg.KUEUE_CHART
    assert releases["kuberay-operator"]["version"] == cfg.KUBERAY_VERSION
    gpu = releases["gpu-operator"]
    assert gpu["version"] == cfg.GPU_OPERATOR_VERSION
    assert gpu["namespace"] == state("example")["cluster"]["settings"]["gpu_namespace"]
    # The node layer installs the driver and owns MIG; the Operator configures the runtime
    # (test_stack_storage_gpu.py) and reads our device plugin config.
    assert gpu["values"]["driver"] == {"enabled": False} and gpu["values"]["toolkit"] == {"enabled": True}
    assert gpu["values"]["devicePlugin"]["config"]["name"] == "swarm-device-plugin-config"
    assert gpu["values"]["migManager"] == {"enabled": False}
    # acme-ai's Ray cluster autoscales: Kueue needs the elastic-jobs feature gate.
    assert releases["kueue"]["values"]["controllerManager"]["featureGates"] == [
        {"name": "ElasticJobsViaWorkloadSlices", "enabled": True}
    ]
    urns = {u.rsplit("::", 1)[1]: u for u in example_run.urns if "helm.sh/v3:Release" in u}
    assert (
        "swarm:cluster:Operators$" in urns["kueue"] and "swarm:cluster:GpuOperator$" in urns["gpu-operator"]
    )


def test_dependencies_namespaces_operators_and_classes(example_run: Run) -> None:
    p = example_run.program
    assert p is not None
    kueue, kuberay = p.operators.kueue, p.operators.kuberay
    for obj, opts in example_run.registered:
        deps = list(opts.depends_on or [])
        ns = obj["metadata"].get("namespace")
        if ns in p.cluster.namespaces:
            assert p.cluster.namespaces[ns] in deps, resource_name(obj)
        if obj["apiVersion"].startswith("kueue.x-k8s.io"):
            assert kueue in deps
        if obj["kind"] == "RayCluster":
            assert kuberay in deps
        if obj["kind"] == "PersistentVolumeClaim":
            cls = p.storage.resources[f"StorageClass:{obj['spec']['storageClassName']}"]
            assert cls in deps


def test_mesh_outputs_are_the_topology(example_run: Run) -> None:
    topo = state("example")["cluster"]["mesh"]
    assert example_run.outputs == {k: topo[k] for k in ("addresses", "hubs", "relays", "edges")}


# ------------------------------------------------------------------ config, stacks


def test_operators_can_each_be_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    conf = StackConfig(fleet="lab", kueue=Operator(False, "x"), kuberay=Operator(False, "x"), gpu_mode="none")
    r = run_stack(conf, monkeypatch)
    assert not [c for c in r.created if "helm.sh" in c.typ]
    assert all(not opts.depends_on or all(d is not None for d in opts.depends_on) for _, opts in r.registered)
    # The objects are the same whether or not the stack installs the operators.
    kube = [c for c in r.created if c.typ.startswith("kubernetes:")]
    assert len(kube) == len(objects("lab").all())


def test_device_plugin_mode_is_refused_until_the_node_layer_configures_the_runtime() -> None:
    """The device plugin alone needs containerd configured for the NVIDIA runtime, which no
    node-layer role does yet (the GPU Operator's toolkit does): refused before anything is
    registered, naming the reason and the way out."""
    with pytest.raises(ValueError, match=r"containerd.*use gpu-operator"):
        StackConfig(fleet="lab", gpu_mode="device-plugin")
    with pytest.raises(ValueError, match="gpuOperator"):
        StackConfig(gpu_mode="amd")


def test_config_is_read_from_the_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    pulumi.runtime.set_all_config(
        {
            "swarm:fleet": "example",
            "swarm:sites": '["fra1"]',
            "swarm:kuberayEnabled": "false",
            "swarm:gpuOperator": "gpu-operator",
            "swarm:gpuOperatorVersion": "v26.3.4",
        }
    )
    try:
        conf = StackConfig.from_pulumi()
    finally:
        pulumi.runtime.set_all_config({})
    assert conf.sites == ("fra1",) and conf.kuberay.enabled is False and conf.kueue.enabled is True
    assert conf.gpu == Operator(True, "v26.3.4") and conf.kueue.version == cfg.KUEUE_VERSION
    r = run_stack(conf, monkeypatch)
    nodes = {c.name for c in r.created if c.typ == "kubernetes:core/v1:NodePatch"}
    assert nodes == {n for n, s in state("example")["nodes"].items() if s["site"] == "fra1"}


def test_project_file_and_stack_files() -> None:
    project = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())
    assert project["main"] == "stacks/" and project["runtime"]["name"] == "python"
    assert project["backend"]["url"].startswith("file://")
    declared = project["config"]
    assert declared["kueueVersion"]["default"] == cfg.KUEUE_VERSION
    assert declared["kuberayVersion"]["default"] == cfg.KUBERAY_VERSION
    assert declared["helmRepoPassword"]["secret"] is True
    stacks = sorted(ROOT.glob("Pulumi.*.yaml"))
    assert {p.name for p in stacks} >= {"Pulumi.lab.yaml", "Pulumi.example.yaml"}
    for path in stacks:
        values = yaml.safe_load(path.read_text())["config"]
        assert "kubernetes:context" in values, path
        keys = {k.split(":", 1)[1] for k in values if k.startswith(f"{project['name']}:")}
        assert keys <= set(declared), path


@pytest.mark.parametrize("stack", sorted(p.name for p in ROOT.glob("Pulumi.*.yaml")))
def test_every_stack_file_builds(stack: str, monkeypatch: pytest.MonkeyPatch) -> None:
    values = yaml.safe_load((ROOT / stack).read_text())["config"]
    sites = values.get("swarm:sites")
    conf = StackConfig(
        fleet=values["swarm:fleet"],
        sites=tuple(sites) if sites else None,
        gpu_mode=values.get("swarm:gpuOperator", "gpu-operator"),
    )
    r = run_stack(conf, monkeypatch)
    assert any(c.typ == "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue" for c in r.created)


def test_stacks_entry_point_is_thin() -> None:
    text = (ROOT / "stacks" / "__main__.py").read_text()
    assert "StackConfig.from_pulumi()" in text and len(text.splitlines()) < 15


# --------------------------------------------------------------------------- bad input


def test_an_invalid_fleet_stops_the_program_before_any_resource(tmp_path: Path) -> None:
    """The same error as swarm validate, and nothing registered: never half an update."""
    for part in ("inventory", "policies"):
        (tmp_path / part).mkdir()
    (tmp_path / "inventory" / "bad").symlink_to(ROOT / "tests" / "data" / "base")
    (tmp_path / "policies" / "bad").mkdir()
    bad = ROOT / "tests" / "data" / "invalid" / "ray-pod-too-large.yaml"
    (tmp_path / "policies" / "bad" / "allocation.yaml").write_text(bad.read_text())
    recorder = Recorder()
    pulumi.runtime.set_mocks(recorder, project="swarm", stack="test", preview=False)

    @pulumi.runtime.test
    def program() -> Any:
        return run(StackConfig(fleet="bad"), tmp_path).mesh.edges

    with pytest.raises(FleetInvalid) as exc:
        program()
    assert "ray.pod-too-large" in exc.value.report.text()
    assert recorder.created == []


def test_sites_that_cannot_form_a_cluster_stop_the_program_before_any_resource() -> None:
    recorder = Recorder()
    pulumi.runtime.set_mocks(recorder, project="swarm", stack="test", preview=False)

    @pulumi.runtime.test
    def program() -> Any:
        return run(StackConfig(sites=("tyo1",)), ROOT).mesh.edges

    with pytest.raises(ScopeError, match="community"):
        program()
    assert recorder.created == []


@pytest.mark.parametrize("fleet", ["example", "lab"])
def test_kueue_release_carries_the_policys_configuration(fleet: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue #24, items 7, 8, 12: the Kueue release's values hold the manager Configuration
    (kueue chart v0.17.5: managerConfig.controllerManagerConfigYaml): fair sharing exactly
    when the fleet's Allocation chooses it, jobs without a queue name managed in the tenant
    namespaces, node-local resources excluded; the chart's integrations kept."""
    created = run_stack(StackConfig(fleet=fleet), monkeypatch).created
    (kueue,) = [c.inputs for c in created if c.typ == "kubernetes:helm.sh/v3:Release" and c.name == "kueue"]
    config = yaml.safe_load(kueue["values"]["managerConfig"]["controllerManagerConfigYaml"])
    assert config["apiVersion"] == "config.kueue.x-k8s.io/v1beta2" and config["kind"] == "Configuration"
    fair = bool(state(fleet)["cluster"]["fair_sharing"])
    assert fair is (fleet == "example")  # the example chooses fair sharing, the lab does not
    assert ("fairSharing" in config) is fair
    assert config["manageJobsWithoutQueueName"] is True
    assert config["managedJobsNamespaceSelector"] == {
        "matchExpressions": [{"key": "swarm.io/tenant", "operator": "Exists"}]
    }
    assert config["resources"]["excludeResourcePrefixes"] == ["ephemeral-storage", "hugepages-", "rdma/"]
    assert (
        "pod" in config["integrations"]["frameworks"]
        and "ray.io/raycluster" in config["integrations"]["frameworks"]
    )
    assert config["webhook"] == {"port": 9443} and config["leaderElection"]["leaderElect"] is True
