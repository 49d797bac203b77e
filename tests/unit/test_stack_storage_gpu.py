"""Issue #24, items 3, 4, 5, 10 and 13: storage that binds, scratch that is cleaned and
capped, one owner per GPU concern, charts from the declared mirror only, no rendered Nodes.

Upstream behaviour is restated from the pinned versions' source (no cluster here):

- NVIDIA/gpu-operator v26.3.3, ``deployments/gpu-operator/values.yaml`` (chart defaults)
  and ``controllers/state_manager.go`` (``labelGPUNodes``: which labels the Operator
  writes on nodes);
- NVIDIA/k8s-device-plugin v0.17.2, ``deployments/helm/nvidia-device-plugin/values.yaml``
  (default node affinity) and ``Chart.yaml`` (NFD only with ``nfd.enabled``/``gfd.enabled``);
- rancher/local-path-provisioner v0.0.37, ``provisioner.go`` (``getPathOnNode``,
  ``deleteFor``) and ``deploy/local-path-storage.yaml``;
- kubernetes/kubernetes, ResourceQuota's storage-class scoped resource
  ``<class>.storageclass.storage.k8s.io/requests.storage`` (``pkg/quota/v1/evaluator/core/
  persistent_volume_claims.go``, ``V1ResourceByStorageClass``; documented in
  website ``content/en/docs/concepts/policy/resource-quotas.md``);
- kubernetes-csi/csi-driver-nfs v4.13.1, ``charts/v4.13.1/csi-driver-nfs/values.yaml``
  (``driver.name: nfs.csi.k8s.io``) and ``charts/index.yaml`` (chart version ``4.13.1``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from swarm_infra import cli
from swarm_infra.cluster import build
from swarm_infra.cluster import render as yaml_files
from swarm_infra.cluster.core import (
    GPU_PRESENT_LABEL,
    LOCAL_PATH_CONFIGMAP,
    LOCAL_PATH_NAMESPACE,
    SCRATCH_QUOTA,
)
from swarm_infra.engines.pulumi import config as cfg
from swarm_infra.engines.pulumi.config import StackConfig
from swarm_infra.engines.pulumi.resources import resource_name
from swarm_infra.resolve.provisioners import LOCAL_PATH, NFS_CSI, PROVISIONERS

from .cluster_support import by_kind, objects, state
from .test_pulumi_stack import Run, run_stack

FLEETS = ("example", "lab")

# ------------------------------------------------------------- upstream, restated

# NVIDIA/gpu-operator v26.3.3 deployments/gpu-operator/values.yaml: the defaults this stack
# relies on or overrides.
GPU_OPERATOR_DEFAULTS = {
    ("nfd", "enabled"): True,
    ("cdi", "enabled"): True,
    ("driver", "enabled"): True,
    ("toolkit", "enabled"): True,
    ("migManager", "enabled"): True,
    ("migManager", "config", "default"): "all-disabled",
    ("mig", "strategy"): "single",
}
# controllers/state_manager.go v26.3.3: gpuNodeLabels (NFD's labels of an NVIDIA PCI device).
NFD_GPU_LABELS = {
    "feature.node.kubernetes.io/pci-10de.present": "true",
    "feature.node.kubernetes.io/pci-0302_10de.present": "true",
    "feature.node.kubernetes.io/pci-0300_10de.present": "true",
}
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_CAPABLE_LABEL = "nvidia.com/mig.capable"


def value(values: dict[str, Any], path: tuple[str, ...]) -> Any:
    """A Helm value: the user's where set, else the chart default restated above."""
    node: Any = values
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return GPU_OPERATOR_DEFAULTS.get(path)
        node = node[key]
    return node


def operator_node_labels(values: dict[str, Any], labels: dict[str, str]) -> dict[str, str]:
    """The labels the GPU Operator writes on a node (state_manager.go v26.3.3,
    ``labelGPUNodes``): ``nvidia.com/gpu.present`` "true" where NFD found an NVIDIA PCI
    device and "false" where it is "true" without one; ``nvidia.com/mig.config=all-disabled``
    on a MIG-capable GPU node without the label, only while the MIG manager is enabled and
    its default config is all-disabled."""
    has_gpu = any(labels.get(k) == v for k, v in NFD_GPU_LABELS.items())
    present = labels.get(GPU_PRESENT_LABEL) == "true"
    out: dict[str, str] = {}
    if not present and has_gpu:
        out[GPU_PRESENT_LABEL] = present_value = "true"
    elif present and not has_gpu:
        out[GPU_PRESENT_LABEL] = present_value = "false"
    else:
        present_value = labels.get(GPU_PRESENT_LABEL, "")
    if (
        present_value == "true"
        and value(values, ("migManager", "enabled"))
        and labels.get(MIG_CAPABLE_LABEL) == "true"
        and not labels.get(MIG_CONFIG_LABEL)
        and value(values, ("migManager", "config", "default")) == "all-disabled"
    ):
        out[MIG_CONFIG_LABEL] = "all-disabled"
    return out


# NVIDIA/k8s-device-plugin v0.17.2 deployments/helm/nvidia-device-plugin/values.yaml:
# affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms
# (ORed terms, each one `In ["true"|"NVIDIA"]` expression). Chart.yaml: the NFD subchart only
# with `nfd.enabled,gfd.enabled` (first set wins; gfd.enabled defaults to false): no NFD.
DEVICE_PLUGIN_AFFINITY = (
    ("feature.node.kubernetes.io/pci-10de.present", "true"),
    ("feature.node.kubernetes.io/cpu-model.vendor_id", "NVIDIA"),
    ("nvidia.com/gpu.present", "true"),
)


def device_plugin_admits(labels: dict[str, str]) -> bool:
    return any(labels.get(k) == v for k, v in DEVICE_PLUGIN_AFFINITY)


def node_labels(objs: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    return {n: o["metadata"]["labels"] for n, o in by_kind(objs, "Node").items()}


@pytest.fixture(scope="module")
def example_run() -> Any:
    with pytest.MonkeyPatch.context() as mp:
        yield run_stack(StackConfig(), mp)


def releases(r: Run) -> dict[str, dict[str, Any]]:
    return {c.name: c.inputs for c in r.created if c.typ == "kubernetes:helm.sh/v3:Release"}


# --------------------------------------------------------------------- items 3 and 5


def test_gpu_operator_owns_the_runtime_the_node_layer_the_driver_and_mig(example_run: Run) -> None:
    """Item 3: one owner per concern. The node layer installs the driver and (issue #23)
    owns MIG; no role configures containerd for the NVIDIA runtime, so the Operator's
    toolkit must (CDI on); NFD must run, or nothing labels the GPU nodes for the operands."""
    values = releases(example_run)["gpu-operator"]["values"]
    assert value(values, ("driver", "enabled")) is False
    assert value(values, ("toolkit", "enabled")) is True
    assert value(values, ("cdi", "enabled")) is True
    assert value(values, ("nfd", "enabled")) is True
    assert value(values, ("migManager", "enabled")) is False
    roles = Path(__file__).resolve().parents[2] / "roles"
    configured = [p for p in roles.rglob("*") if p.is_file() and "nvidia-ctk" in p.read_text(errors="ignore")]
    assert not configured, "the node layer now configures the runtime: turn the toolkit off"


# NVIDIA Container Toolkit install guide ("Installing the NVIDIA Container Toolkit", With apt:
# Ubuntu, Debian): the packages it installs, each at one version.
NVIDIA_TOOLKIT_PACKAGES = {
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
}


@pytest.mark.parametrize("fleet", FLEETS)
def test_one_owner_of_the_container_runtime(fleet: str, example_run: Run) -> None:
    """Issue #23: the node layer installed nvidia-container-toolkit on every GPU node while
    the Operator's toolkit (on) configured containerd too; NVIDIA's GPU Operator
    documentation ("Install NVIDIA GPU Operator", chart option ``toolkit.enabled``) turns the
    Operator's off where the host has one. The Operator owns it: no GPU node of either fleet
    installs a toolkit package, and every one removes an earlier one."""
    values = releases(example_run)["gpu-operator"]["values"]
    assert value(values, ("toolkit", "enabled")) is True
    drivers = [n["gpu"]["driver"] for n in state(fleet)["nodes"].values() if n["gpu"] and n["gpu"]["driver"]]
    assert drivers, f"{fleet}: no GPU node with a driver layer"
    for driver in drivers:
        assert not NVIDIA_TOOLKIT_PACKAGES & {*driver["packages"], *driver["extra_packages"]}
        assert set(driver["absent_packages"]) == NVIDIA_TOOLKIT_PACKAGES
        assert not any("libnvidia-container" in s["repo"] for s in driver["apt_sources"])


def test_the_stack_refuses_a_node_layer_that_installs_a_toolkit_beside_the_operators(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The check the stack runs before it registers the Operator, fed what the old node layer
    decided (the toolkit among the unpinned packages of each source)."""
    from swarm_infra.resolve import drivers as D

    monkeypatch.setattr(D, "UNPINNED", {k: (*v, "nvidia-container-toolkit") for k, v in D.UNPINNED.items()})
    with pytest.raises(ValueError, match="two owners of the container runtime"):
        run_stack(StackConfig(), monkeypatch)


@pytest.mark.parametrize("fleet", FLEETS)
def test_no_node_patch_conflicts_with_the_operators_labels(fleet: str, example_run: Run) -> None:
    """Item 5, day two: a node joins, NFD and GFD label it (MIG-capable GPUs), the Operator
    labels it before the stack's next ``pulumi up``; the NodePatch then sets no label the
    Operator wrote to another value (server-side apply would report a conflict)."""
    values = releases(example_run)["gpu-operator"]["values"]
    s = state(fleet)
    for name, labels in node_labels(objects(fleet).all()).items():
        joined = {**NFD_GPU_LABELS, MIG_CAPABLE_LABEL: "true"} if s["nodes"][name]["gpu"] is not None else {}
        written = operator_node_labels(values, joined)
        clashes = {k for k in set(written) & set(labels) if written[k] != labels[k]}
        assert not clashes, (name, written)
        assert MIG_CONFIG_LABEL not in written, name  # the MIG manager is off: MIG is the node layer's


@pytest.mark.parametrize("fleet", FLEETS)
def test_the_device_plugin_lands_on_exactly_the_gpu_nodes_in_device_plugin_mode(fleet: str) -> None:
    """Item 3: without NFD, the chart's affinity needs ``nvidia.com/gpu.present=true``."""
    s = state(fleet)
    gpu_nodes = {n for n, ns in s["nodes"].items() if ns["gpu"] is not None}
    admitted = {
        n
        for n, labels in node_labels(build(s, gpu_present=True).all()).items()
        if device_plugin_admits(labels)
    }
    assert admitted == gpu_nodes and gpu_nodes


def test_device_plugin_mode_is_refused_while_no_one_configures_the_runtime() -> None:
    """Item 3: in device-plugin mode nothing would configure containerd for the NVIDIA
    runtime (no node-layer role runs ``nvidia-ctk``: see the test above), so the stack
    refuses the mode instead of deploying a device plugin that finds no GPU."""
    with pytest.raises(ValueError, match="does not configure containerd"):
        StackConfig(fleet="lab", gpu_mode="device-plugin")


def effective_mig_strategy(values: dict[str, Any], config_strategy: str) -> str:
    """The MIG strategy the device plugin runs with on a node whose config says
    ``config_strategy``. NVIDIA/gpu-operator v26.3.3 ``controllers/object_controls.go``
    ``applyMIGConfiguration``: a non-empty ``ClusterPolicy.spec.mig.strategy`` (the chart's
    ``mig.strategy``, default ``single``) becomes the container's ``MIG_STRATEGY`` env;
    NVIDIA/k8s-device-plugin v0.17.2 ``cmd/nvidia-device-plugin/main.go`` binds
    ``--mig-strategy`` to ``MIG_STRATEGY`` and ``api/config/v1/flags.go``
    (``UpdateFromCLIFlags``/``updateFromCLIFlag``: ``c.IsSet``, true for a flag set by
    env) lets it override the config file's ``flags.migStrategy``."""
    operator = value(values, ("mig", "strategy"))
    return operator if operator else config_strategy


def advertised(strategy: str, layout: str) -> str:
    """What the device plugin advertises for a GPU whose MIG layout is ``layout`` (none,
    single: one repeated profile, mixed) under ``strategy``. NVIDIA/k8s-device-plugin
    v0.17.2 ``internal/rm/rm.go`` ``AddDefaultResourcesToConfig``: whole GPUs are always
    ``nvidia.com/gpu``; ``single`` adds every MIG device as ``nvidia.com/gpu``, ``mixed``
    each profile as ``nvidia.com/mig-<profile>``; ``none`` adds no MIG resource."""
    if layout == "none":
        return "nvidia.com/gpu (whole GPU)"
    return {"single": "nvidia.com/gpu (MIG device)", "mixed": "nvidia.com/mig-<profile>"}.get(
        strategy, "no MIG device"
    )


def _mixed_mig_root(tmp: Path) -> Path:
    """The example fleet with the A100 40GB MIG profile split into a mixed layout (its
    flavor then out of every queue: a mixed layout has no nvidia.com/gpu to count)."""
    root = Path(__file__).resolve().parents[2]
    for d in ("inventory", "policies"):
        shutil.copytree(root / d, tmp / d)
    profiles = tmp / "policies/shared/gpu-profiles.yaml"
    text = profiles.read_text()
    old = "mig: {enabled: true, profiles: [3g.20gb, 3g.20gb]}"
    assert old in text
    profiles.write_text(text.replace(old, "mig: {enabled: true, profiles: [3g.20gb, 2g.10gb, 1g.5gb]}"))
    scheduling = tmp / "policies/example/scheduling.yaml"
    text = scheduling.read_text()
    quota = "        - {flavor: a100-pcie-40gb, nominal_quota: 8}\n"
    assert quota in text
    scheduling.write_text(text.replace(quota, ""))
    return tmp


@pytest.mark.parametrize("fleet", ["example", "lab", "mixed"])
def test_the_operators_mig_strategy_keeps_what_each_config_advertises(
    fleet: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Item 4: the Operator's one MIG strategy overrides every config's ``migStrategy``;
    on each node, the device plugin must still advertise what the node's config (the
    library's decision, which the quotas count) says. ``mig: {enabled: false}`` is no MIG."""
    if fleet == "mixed":
        r = run_stack(StackConfig(), monkeypatch, root=_mixed_mig_root(tmp_path))
    else:
        r = run_stack(StackConfig(fleet=fleet), monkeypatch)
    values = releases(r)["gpu-operator"]["values"]
    assert r.program is not None
    (configmap,) = [
        o for o in r.program.objects.cluster if o["kind"] == "ConfigMap" and "migStrategy" in str(o["data"])
    ]
    configs = {k: yaml.safe_load(v)["flags"]["migStrategy"] for k, v in configmap["data"].items()}
    if fleet == "mixed":
        assert "mixed" in configs.values()
    for name, own in configs.items():
        layout = own  # a config's strategy is its profile's layout (resolve/gpu.py sharing_state)
        assert advertised(effective_mig_strategy(values, own), layout) == advertised(own, layout), name
    # No config uses MIG: the Operator monitors no MIG device (chart default: single).
    if set(configs.values()) == {"none"}:
        assert value(values, ("mig", "strategy")) == "none"


def test_gpu_operator_mode_leaves_gpu_present_to_the_operator() -> None:
    """With the Operator, NFD labels the node and the Operator sets ``gpu.present``; a
    stack-set "true" before NFD has run would be reset to "false" (then conflict)."""
    assert operator_node_labels({}, {GPU_PRESENT_LABEL: "true"}) == {GPU_PRESENT_LABEL: "false"}
    for labels in node_labels(objects("example").all()).values():
        assert GPU_PRESENT_LABEL not in labels


# ------------------------------------------------------------------------- item 4


@pytest.mark.parametrize("fleet", FLEETS)
def test_every_storage_class_names_a_provisioner_the_stack_installs(fleet: str) -> None:
    objs = objects(fleet).all()
    classes = by_kind(objs, "StorageClass")
    assert classes
    for name, c in classes.items():
        assert c["provisioner"] in PROVISIONERS, name
        if PROVISIONERS[c["provisioner"]].node_local:
            assert c["volumeBindingMode"] == "WaitForFirstConsumer", name
    if any(c["provisioner"] == LOCAL_PATH for c in classes.values()):
        (deploy,) = by_kind(objs, "Deployment").values()
        assert deploy["metadata"]["namespace"] == LOCAL_PATH_NAMESPACE


def test_storage_prerequisites_are_installed_before_classes_and_claims(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Pulumi mocks: the csi-driver-nfs release (pinned, from its public repository) and the
    local-path Deployment exist, each class depends on its provisioner, each claim on its
    class, the provisioner's objects on its namespace."""
    example_run = run_stack(StackConfig(), monkeypatch)  # its own run: only its registrations
    p = example_run.program
    assert p is not None
    nfs = releases(example_run)["csi-driver-nfs"]
    assert (nfs["chart"], nfs["version"]) == ("csi-driver-nfs", cfg.CSI_NFS_VERSION)
    assert nfs["repositoryOpts"] == {"repo": cfg.CSI_NFS_REPO}
    assert p.storage.nfs is not None
    deployment = p.storage.resources[f"Deployment:{LOCAL_PATH_NAMESPACE}/local-path-provisioner"]
    own_ns = p.storage.resources[f"Namespace:{LOCAL_PATH_NAMESPACE}"]
    needs = {NFS_CSI: p.storage.nfs, LOCAL_PATH: deployment}
    checked = set()
    for obj, opts in example_run.registered:
        deps = list(opts.depends_on or [])
        if obj["kind"] == "StorageClass":
            assert needs[obj["provisioner"]] in deps, resource_name(obj)
            checked.add(obj["provisioner"])
        if obj["kind"] == "PersistentVolumeClaim":
            assert p.storage.resources[f"StorageClass:{obj['spec']['storageClassName']}"] in deps
            checked.add("claim")
        if obj["metadata"].get("namespace") == LOCAL_PATH_NAMESPACE:
            assert own_ns in deps, resource_name(obj)
    assert checked == {NFS_CSI, LOCAL_PATH, "claim"}


def test_no_nfs_driver_without_an_nfs_class(monkeypatch: pytest.MonkeyPatch) -> None:
    r = run_stack(StackConfig(fleet="lab", gpu_mode="none"), monkeypatch)
    assert "csi-driver-nfs" not in releases(r)


# ------------------------------------------------------------------------ item 10


@pytest.mark.parametrize("fleet", FLEETS)
def test_scratch_volumes_are_deleted_with_their_claim_and_capped_per_tenant(fleet: str) -> None:
    s = state(fleet)
    st = s["cluster"]["storage"]
    assert st is not None and st["scratch"] is not None
    scratch = st["scratch"]
    objs = objects(fleet).all()
    cls = by_kind(objs, "StorageClass")[scratch["storage_class"]]
    # local-path's deleteFor removes a volume's directory unless the PV's policy is Retain;
    # the PV takes the class's reclaimPolicy (provisionFor).
    assert cls["provisioner"] == LOCAL_PATH and cls["reclaimPolicy"] == "Delete"
    assert not by_kind(objs, "PersistentVolume")  # no static, whole-disk, retained volumes
    config = by_kind(objs, "ConfigMap")[f"{LOCAL_PATH_NAMESPACE}/{LOCAL_PATH_CONFIGMAP}"]["data"]
    assert 'rm -rf "$VOL_DIR"' in config["teardown"]
    # getPathOnNode: a listed node gets its paths; an unlisted one only the DEFAULT entry,
    # which is absent, so no volume is made off scratch.
    paths = {e["node"]: e["paths"] for e in json.loads(config["config.json"])["nodePathMap"]}
    with_scratch = {n: ns["storage"] for n, ns in s["nodes"].items() if ns["storage"] is not None}
    assert paths == {n: [sto["scratch"]["mount_path"] for _ in [0]] for n, sto in with_scratch.items()}
    (term,) = cls["allowedTopologies"]
    assert term["matchLabelExpressions"] == [
        {"key": "kubernetes.io/hostname", "values": sorted(with_scratch)}
    ]
    # Helper pods run on GPU nodes (scratch is there): they tolerate the GPU taint.
    taint = s["cluster"]["settings"]["gpu_taint"]
    helper = yaml.safe_load(config["helperPod.yaml"])
    if taint is not None:
        assert {"key": taint["key"], "operator": "Exists", "effect": taint["effect"]} in helper["spec"][
            "tolerations"
        ]
    # One quota per tenant namespace on the class's requests, at tenant_quota_gib.
    quotas = {k: q for k, q in by_kind(objs, "ResourceQuota").items() if k.endswith("/" + SCRATCH_QUOTA)}
    key = f"{scratch['storage_class']}.storageclass.storage.k8s.io/requests.storage"
    assert quotas.keys() == {f"{t['namespace']}/{SCRATCH_QUOTA}" for t in s["cluster"]["tenants"]}
    for q in quotas.values():
        assert q["spec"]["hard"] == {key: f"{scratch['tenant_quota_gib']}Gi"}
    # The declared scratch claims fit their tenant's quota (the quota admission sums requests).
    used: dict[str, int] = {}
    for v in st["volumes"]:
        if v["class"] == scratch["storage_class"]:
            used[v["namespace"]] = used.get(v["namespace"], 0) + v["size_gib"]
    assert all(g <= scratch["tenant_quota_gib"] for g in used.values())


# ------------------------------------------------------------------------ item 13

MIRROR = "https://charts.mirror.example.internal/swarm"
OCI_MIRROR = "oci://registry.mirror.example.internal/charts"


def test_helm_repos_follow_the_declared_mirror(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a mirror, every chart comes from it with the credentials; without one, every
    chart comes from its public home and no release carries credentials."""
    public = releases(run_stack(StackConfig(), monkeypatch))
    assert {n: r["chart"] for n, r in public.items()} == {
        "kueue": cfg.KUEUE_CHART,
        "kuberay-operator": "kuberay-operator",
        "gpu-operator": "gpu-operator",
        "csi-driver-nfs": "csi-driver-nfs",
    }
    for name, r in public.items():
        opts = r.get("repositoryOpts") or {}
        assert "username" not in opts and "password" not in opts, name
        assert opts.get("repo") == cfg.PUBLIC[name], name

    conf = StackConfig(chart_mirror=MIRROR, helm_username="robot", helm_password="s3cret")
    mirrored = releases(run_stack(conf, monkeypatch))
    assert mirrored.keys() == public.keys()
    for name, r in mirrored.items():
        assert r["chart"] == name
        assert r["repositoryOpts"] == {"repo": MIRROR, "username": "robot", "password": "s3cret"}, name

    oci = releases(run_stack(StackConfig(chart_mirror=OCI_MIRROR, helm_username="robot"), monkeypatch))
    for name, r in oci.items():
        assert r["chart"] == f"{OCI_MIRROR}/{name}"
        assert r["repositoryOpts"] == {"username": "robot"}, name


def test_credentials_without_a_mirror_are_refused() -> None:
    with pytest.raises(ValueError, match="chartMirror"):
        StackConfig(helm_username="robot", helm_password="s3cret")
    with pytest.raises(ValueError, match="chartMirror"):
        StackConfig(chart_mirror="http://plain.example/charts")
    pulumi.runtime.set_all_config({"swarm:chartMirror": MIRROR, "swarm:helmRepoUsername": "robot"})
    try:
        assert StackConfig.from_pulumi().chart("gpu-operator").repo == MIRROR
    finally:
        pulumi.runtime.set_all_config({})


@pytest.mark.parametrize("fleet", FLEETS)
def test_rendered_files_hold_no_node(fleet: str, tmp_path: Path) -> None:
    """Item 13: a Node in a file applied by a GitOps tool creates a phantom Node; the
    labels and taints reach nodes only through the stack's NodePatch."""
    assert cli.main(["render", "--fleet", fleet, "--out", str(tmp_path)]) == 0
    docs = [d for p in sorted(tmp_path.iterdir()) for d in yaml.safe_load_all(p.read_text()) if d]
    assert docs and not [d for d in docs if d["kind"] == "Node"]
    assert yaml_files.file_name("Node") not in {p.name for p in tmp_path.iterdir()}
    assert by_kind(objects(fleet).all(), "Node")  # still built, for the NodePatch
