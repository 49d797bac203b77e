"""Issue #24 review, items 2, 5, 6, 9, 10, 11 and 13: claims only in access modes their
provisioner supports, add-on namespaces decided once and reserved, no scratch claim where no
scratch is made, a bounded local-path config, one storage limit, CEL literals quoted and a
pinned helper image.

Upstream behaviour restated from the pinned versions' source (no cluster here):

- rancher/local-path-provisioner v0.0.37, ``provisioner.go`` ``provisionFor``: on node paths
  (not a shared filesystem), any access mode other than ``ReadWriteOnce`` and
  ``ReadWriteOncePod`` fails provisioning ("NodePath only supports ReadWriteOnce and
  ReadWriteOncePod (1.22+) access modes"); ``main.go`` ``DefaultHelperImage`` is
  ``rancher/library-busybox:1.32.1``, while ``deploy/local-path-storage.yaml`` names
  ``docker.io/library/busybox`` without a tag and the chart's ``values.yaml``
  ``helperImage.tag`` is ``latest``;
- kubernetes-csi/csi-driver-nfs v4.13.1, ``pkg/nfs/controllerserver.go``
  ``isValidVolumeCapabilities`` (only block volumes refused: every filesystem access mode
  is provisioned) and ``pkg/nfs/nfs.go`` ``NewDriver`` (advertises
  ``SINGLE_NODE_MULTI_WRITER``, which ``ReadWriteOncePod`` needs);
- kubernetes/kubernetes ``pkg/apis/core/validation/validation.go`` ``ValidateConfigMap``:
  the bytes of a ConfigMap's values may total at most ``MaxSecretSize`` (1 MiB).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from swarm_infra import validate
from swarm_infra.cluster import build
from swarm_infra.cluster import core as cluster_core
from swarm_infra.cluster.admission import validations
from swarm_infra.cluster.render import KIND_ORDER, NOT_RENDERED, file_name
from swarm_infra.cluster.scope import scope
from swarm_infra.engines.pulumi.config import StackConfig
from swarm_infra.resolve.addons import ADDON_NAMESPACES, KUBERAY_NAMESPACE, KUEUE_NAMESPACE
from swarm_infra.resolve.checks.cluster import SYSTEM_NAMESPACES
from swarm_infra.resolve.provisioners import LOCAL_PATH, NFS_CSI, PROVISIONERS
from swarm_infra.resolve.types import DesiredState

from .cluster_support import ROOT, by_kind, objects, state
from .test_pulumi_stack import run_stack

DATA = ROOT / "tests" / "data"
# Upstream, restated (module doc): what each provisioner can provision.
UPSTREAM_ACCESS_MODES = {
    LOCAL_PATH: {"ReadWriteOnce", "ReadWriteOncePod"},
    NFS_CSI: {"ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"},
}


# ----------------------------------------------------------------------------- item 2


def test_provisioners_declare_the_access_modes_upstream_provisions() -> None:
    assert {p.name: set(p.access_modes) for p in PROVISIONERS.values()} == UPSTREAM_ACCESS_MODES


@pytest.mark.parametrize("fleet", ["example", "lab"])
def test_every_rendered_claim_asks_for_modes_its_provisioner_provisions(fleet: str) -> None:
    objs = objects(fleet).all()
    provisioner = {name: c["provisioner"] for name, c in by_kind(objs, "StorageClass").items()}
    for key, pvc in by_kind(objs, "PersistentVolumeClaim").items():
        modes = set(pvc["spec"]["accessModes"])
        assert modes <= UPSTREAM_ACCESS_MODES[provisioner[pvc["spec"]["storageClassName"]]], key


def _validate(tmp_path: Path, text: str) -> Any:
    extra = tmp_path / "extra.yaml"
    extra.write_text(text)
    return validate([DATA / "base", extra]).report


ALLOCATION = """
apiVersion: swarm.io/v1alpha1
kind: Allocation
metadata: {name: a}
spec:
  queues:
    - {name: q1, quotas: [{flavor: h100-sxm5-80gb, nominal_quota: 1}]}
  tenants: [{name: t1, queue: q1, caps: {storage_gib: CAP}}]
"""
SCRATCH_NODE = """
apiVersion: swarm.io/v1alpha1
kind: Node
metadata: {name: n9}
spec:
  site: s1
  address: 10.1.0.50
  roles: [cpu-worker]
  hardware: {cpus: 4, memory_gib: 16, nvme: [{device: /dev/nvme0n1, size_gib: 1000}]}
"""


def _storage(volume: str, quota: int = 100) -> str:
    return f"""
apiVersion: swarm.io/v1alpha1
kind: Storage
metadata: {{name: st}}
spec:
  scratch: {{mount_path: /scratch, tenant_quota_gib: {quota}}}
  volumes: [{volume}]
"""


def test_a_scratch_claim_left_at_the_default_mode_is_refused(tmp_path: Path) -> None:
    """access_modes defaults to [ReadWriteMany], which local-path never provisions."""
    docs = [
        ALLOCATION.replace("CAP", "1000"),
        _storage("{name: v, tenant: t1, class: swarm-scratch, size_gib: 1}"),
    ]
    report = _validate(tmp_path, "---".join([*docs, SCRATCH_NODE]))
    assert [(e.rule, e.path) for e in report.errors] == [
        ("storage.access-mode-unsupported", "$.spec.volumes[0].access_modes")
    ]


def test_a_scratch_claim_in_read_write_once_is_valid(tmp_path: Path) -> None:
    volume = "{name: v, tenant: t1, class: swarm-scratch, size_gib: 1, access_modes: [ReadWriteOnce]}"
    docs = [ALLOCATION.replace("CAP", "1000"), _storage(volume), SCRATCH_NODE]
    report = _validate(tmp_path, "---".join(docs))
    assert report.errors == [] and [w for w in report.warnings if w.rule.startswith("storage.")] == []


# ----------------------------------------------------------------------------- item 5


def test_add_on_namespaces_are_reserved_and_used_by_the_stack() -> None:
    assert set(ADDON_NAMESPACES) == {"kueue-system", "ray-system", "local-path-storage"}
    assert set(ADDON_NAMESPACES) <= set(SYSTEM_NAMESPACES)
    with pytest.MonkeyPatch.context() as mp:
        run = run_stack(StackConfig(), mp)
    releases = {c.name: c.inputs for c in run.created if c.typ == "kubernetes:helm.sh/v3:Release"}
    assert releases["kueue"]["namespace"] == KUEUE_NAMESPACE
    assert releases["kuberay-operator"]["namespace"] == KUBERAY_NAMESPACE
    # The one namespace the cluster layer renders for an add-on is one of them.
    ours = {t["namespace"] for t in state("example")["cluster"]["tenants"]} | {
        state("example")["cluster"]["settings"][k] for k in ("system_namespace", "gpu_namespace")
    }
    rendered = set(by_kind(objects("example").all(), "Namespace")) - ours
    assert rendered == {"local-path-storage"}


@pytest.mark.parametrize("field", ["system_namespace", "gpu_namespace"])
@pytest.mark.parametrize("namespace", ADDON_NAMESPACES)
def test_the_clusters_namespaces_are_no_add_ons(tmp_path: Path, field: str, namespace: str) -> None:
    text = (
        "apiVersion: swarm.io/v1alpha1\nkind: Cluster\nmetadata: {name: c}\n"
        f"spec: {{{field}: {namespace}}}\n"
    )
    report = _validate(tmp_path, text)
    assert [(e.rule, e.path) for e in report.errors] == [("cluster.namespace-reserved", f"$.spec.{field}")]


# ----------------------------------------------------------------------------- item 6


def _with_scratch_volume(base: DesiredState, *, no_scratch_in: set[str]) -> DesiredState:
    s = copy.deepcopy(base)
    for n in s["nodes"].values():
        if n["site"] in no_scratch_in:
            n["storage"] = None
    st = s["cluster"]["storage"]
    assert st is not None and st["scratch"] is not None
    tenant = s["cluster"]["tenants"][0]
    st["volumes"].append(
        {
            "name": "tmp",
            "tenant": tenant["name"],
            "namespace": tenant["namespace"],
            "class": st["scratch"]["storage_class"],
            "size_gib": 10,
            "purpose": "other",
            "access_modes": ["ReadWriteOnce"],
        }
    )
    return s


def _claims(s: DesiredState) -> dict[str, str]:
    return {
        k: o["spec"]["storageClassName"] for k, o in by_kind(build(s).all(), "PersistentVolumeClaim").items()
    }


def test_a_scoped_cluster_without_scratch_gets_no_scratch_claim() -> None:
    s = _with_scratch_volume(state("example"), no_scratch_in={"ams2"})
    scratch_class = s["cluster"]["storage"]["scratch"]["storage_class"]  # type: ignore[index]
    without = _claims(scope(s, ["ams2"]))
    assert scratch_class not in without.values()
    assert without  # the NFS claims stay
    assert scratch_class not in by_kind(build(scope(s, ["ams2"])).all(), "StorageClass")
    # A cluster with scratch nodes keeps the claim, and makes its class.
    assert scratch_class in _claims(scope(s, ["fra1"])).values()


def test_the_builder_refuses_a_scratch_claim_with_no_scratch_node() -> None:
    s = _with_scratch_volume(
        state("example"), no_scratch_in={n["site"] for n in state("example")["nodes"].values()}
    )
    with pytest.raises(ValueError, match="no node of this cluster has scratch"):
        build(s)


# ----------------------------------------------------------------------------- item 9


def _scratch_nodes(count: int, name_chars: int) -> list[Any]:
    node = next(n for n in state("example")["nodes"].values() if n["storage"] is not None)
    out = []
    for i in range(count):
        n = copy.deepcopy(node)
        n["name"] = f"{i:0{name_chars}d}"
        out.append(n)
    return out


def test_the_local_path_config_is_compact_json() -> None:
    nodes = _scratch_nodes(3, 10)
    objs = cluster_core.local_path_provisioner(state("example")["cluster"], nodes)
    text = next(o for o in objs if o["kind"] == "ConfigMap")["data"]["config.json"]
    assert json.loads(text) == {
        "nodePathMap": [{"node": n["name"], "paths": [n["storage"]["scratch"]["mount_path"]]} for n in nodes]
    }
    assert text == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))


def test_a_local_path_config_above_a_configmaps_limit_is_refused() -> None:
    # 253-character node names (a DNS subdomain's maximum): ~4,500 nodes pass 1 MiB.
    nodes = _scratch_nodes(5000, 253)
    with pytest.raises(ValueError, match="above a ConfigMap's 1 MiB"):
        cluster_core.local_path_provisioner(state("example")["cluster"], nodes)


# ----------------------------------------------------------------------------- item 11


def test_a_scratch_quota_above_a_tenants_storage_cap_is_a_warning(tmp_path: Path) -> None:
    volume = "{name: v, tenant: t1, class: swarm-scratch, size_gib: 1, access_modes: [ReadWriteOnce]}"
    docs = [ALLOCATION.replace("CAP", "100"), _storage(volume, quota=200), SCRATCH_NODE]
    report = _validate(tmp_path, "---".join(docs))
    assert report.errors == []
    assert [(w.rule, w.path) for w in report.warnings if w.rule.startswith("storage.")] == [
        ("storage.scratch-quota-above-caps", "$.spec.tenants[0].caps.storage_gib")
    ]


@pytest.mark.parametrize("fleet", ["example", "lab"])
def test_no_tenant_is_granted_scratch_above_its_storage_cap(fleet: str) -> None:
    """The two rendered quotas of each tenant namespace agree: swarm-scratch within swarm-caps."""
    quotas = by_kind(objects(fleet).all(), "ResourceQuota")
    for key, q in quotas.items():
        ns, name = key.split("/")
        if name != cluster_core.SCRATCH_QUOTA or f"{ns}/{cluster_core.CAPS_NAME}" not in quotas:
            continue
        total = quotas[f"{ns}/{cluster_core.CAPS_NAME}"]["spec"]["hard"].get("requests.storage")
        (scratch,) = q["spec"]["hard"].values()
        if total is not None:
            assert int(scratch.removesuffix("Gi")) <= int(total.removesuffix("Gi")), key


# ----------------------------------------------------------------------------- item 13


def test_the_default_priority_reaches_cel_only_as_a_quoted_literal() -> None:
    messages = [v["messageExpression"] for v in validations("batch")]
    assert "' must name its PriorityClass (the default Priority is batch)'" in messages[0]
    with pytest.raises(ValueError, match="CEL string literal"):
        validations("x' + object.metadata.name + '")


def test_the_local_path_helper_image_is_pinned() -> None:
    objs = objects("example").all()
    helper = yaml.safe_load(
        by_kind(objs, "ConfigMap")["local-path-storage/local-path-config"]["data"]["helperPod.yaml"]
    )
    (container,) = helper["spec"]["containers"]
    assert container["image"] == "docker.io/rancher/library-busybox:1.32.1"  # upstream main.go, restated


# ----------------------------------------------------------------------------- item 10


def test_the_docs_name_the_last_rendered_file() -> None:
    last = file_name(next(k for k in reversed(KIND_ORDER) if k not in NOT_RENDERED))
    for doc in ("docs/cluster.md", "README.md"):
        text = (ROOT / doc).read_text()
        named = {w for w in text.split() if w.endswith(".yaml") and w[:2].isdigit() and w[2] == "-"}
        assert max(named) == last, doc
