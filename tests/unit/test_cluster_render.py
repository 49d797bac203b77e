"""``swarm render``: files per kind in apply order, --check for CI, exit codes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from swarm_infra import cli
from swarm_infra.cluster import render as yaml_files
from swarm_infra.cluster.meta import API_VERSIONS, sort_key

from .cluster_support import ROOT, by_kind, objects, state

INVALID = ROOT / "tests" / "data" / "invalid" / "ray-priority-not-allowed.yaml"


@pytest.fixture
def in_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


def test_every_kind_has_an_apply_position() -> None:
    assert set(yaml_files.KIND_ORDER) == set(API_VERSIONS)
    order = yaml_files.KIND_ORDER
    # Namespaces before anything namespaced; Kueue's cluster-scoped objects before the
    # queues that name them; claims after their classes and quotas; Ray clusters last.
    assert order[0] == "Namespace"
    assert order.index("ResourceFlavor") < order.index("ClusterQueue") < order.index("LocalQueue")
    assert order.index("Cohort") < order.index("ClusterQueue")
    assert order.index("StorageClass") < order.index("PersistentVolumeClaim")
    assert order.index("ResourceQuota") < order.index("PersistentVolumeClaim")
    assert order.index("ValidatingAdmissionPolicyBinding") < order.index("RayCluster") == len(order) - 1


@pytest.mark.usefixtures("in_repo")
def test_out_writes_one_file_per_kind_that_reads_back_as_the_objects(tmp_path: Path) -> None:
    assert cli.main(["render", "--fleet", "example", "--out", str(tmp_path)]) == 0
    objs = objects("example").all()
    objs = [o for o in objs if o["kind"] != "Node"]  # Nodes are never rendered (a phantom Node)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted({yaml_files.file_name(o["kind"]) for o in objs})
    read = [d for n in names for d in yaml.safe_load_all((tmp_path / n).read_text())]
    assert sorted(read, key=sort_key) == objs


@pytest.mark.usefixtures("in_repo")
def test_check_passes_on_fresh_output_and_fails_on_any_difference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["render", "--fleet", "example", "--out", str(tmp_path)]) == 0
    assert cli.main(["render", "--fleet", "example", "--check", str(tmp_path)]) == 0
    (tmp_path / "kustomization.yaml").write_text("resources: []\n")  # not ours: ignored
    assert cli.main(["render", "--fleet", "example", "--check", str(tmp_path)]) == 0
    capsys.readouterr()

    queues = tmp_path / yaml_files.file_name("ClusterQueue")
    queues.write_text(queues.read_text().replace("nominalQuota: 48", "nominalQuota: 40"))
    assert cli.main(["render", "--fleet", "example", "--check", str(tmp_path)]) == 1
    assert f"differs: {queues}" in capsys.readouterr().out

    assert cli.main(["render", "--fleet", "example", "--out", str(tmp_path)]) == 0
    (tmp_path / yaml_files.file_name("RayCluster")).unlink()
    (tmp_path / "99-extra.yaml").write_text("---\n")
    assert cli.main(["render", "--fleet", "example", "--check", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "missing:" in out and "not rendered from the fleet:" in out


@pytest.mark.usefixtures("in_repo")
def test_check_fails_when_the_policies_change(tmp_path: Path) -> None:
    """A pull request that changes policies without re-rendering is caught."""
    out = tmp_path / "rendered"
    assert cli.main(["render", "--fleet", "lab", "--out", str(out)]) == 0
    changed = tmp_path / "policies"
    changed.mkdir()
    for f in (ROOT / "policies" / "lab").iterdir():  # the YAML and the files it names (Ray's lock)
        text = f.read_text()
        if f.name == "scheduling.yaml":
            text = text.replace(
                "nominal_quota: 1, borrowing_limit: 1}", "nominal_quota: 0, borrowing_limit: 1}", 1
            )
            assert text != f.read_text()
        (changed / f.name).write_text(text)
    paths = [str(ROOT / "inventory" / "lab"), str(changed), str(ROOT / "policies" / "shared")]
    assert cli.main(["render", *paths, "--check", str(out)]) == 1


@pytest.mark.usefixtures("in_repo")
def test_out_removes_rendered_files_of_kinds_that_are_gone(tmp_path: Path) -> None:
    stale = tmp_path / "12-cohort.yaml"
    stale.write_text("---\n")
    keep = tmp_path / "README.md"
    keep.write_text("mine\n")
    assert cli.main(["render", "--fleet", "example", "--out", str(tmp_path)]) == 0
    assert not stale.exists() and keep.exists()


@pytest.mark.usefixtures("in_repo")
def test_stdout_sites_and_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["render", "--fleet", "lab"]) == 0
    docs = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    assert sorted(docs, key=sort_key) == [o for o in objects("lab").all() if o["kind"] != "Node"]
    # community's Ray cluster has workers in tyo1 and sjc1: one of them alone cannot hold it.
    assert cli.main(["render", "--fleet", "example", "--sites", "tyo1"]) == 2
    assert "community/community" in capsys.readouterr().err
    assert cli.main(["render", "--fleet", "example", "--sites", "tyo1,sjc1"]) == 0
    docs = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    assert not by_kind(docs, "Node")
    (term,) = by_kind(docs, "StorageClass")["swarm-scratch"]["allowedTopologies"]
    sites = {state("example")["nodes"][n]["site"] for n in term["matchLabelExpressions"][0]["values"]}
    assert sites == {"tyo1", "sjc1"}
    assert set(by_kind(docs, "RayCluster")) == {"community/community"}
    assert cli.main(["render", "--fleet", "example", "--sites", "atlantis"]) == 2
    assert "atlantis" in capsys.readouterr().err
    base = ROOT / "tests" / "data" / "base"
    assert cli.main(["render", str(base), str(INVALID)]) == 2
    err = capsys.readouterr().err
    assert "ray.priority-not-allowed" in err and "nothing was rendered" in err
