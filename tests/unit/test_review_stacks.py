"""`swarm review` of the fleet's Pulumi stacks (issue #39, item 2): every stack of the fleet
at either side, each one the cluster an apply updates, not only the fleet-wide objects.

The base commit holds the example fleet and the repository's own ``Pulumi*.yaml`` (the
project file, ``Pulumi.example.yaml`` of every site, ``Pulumi.example-eu.yaml`` of fra1
and ams2, ``Pulumi.lab.yaml``); each test commits one change of them on top and reviews
HEAD~1..HEAD. Expected objects are built here from the desired state of the working tree
with ``build(state, sites=...)``, the sites read from the stack files as they are before
and after the change, never taken from the review's output.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from swarm_infra import cli
from swarm_infra.cluster import ScopeError, build
from swarm_infra.cluster.stacks import read_stacks
from swarm_infra.review import Review, review
from swarm_infra.review.markdown import render

from .conftest import FLEET_DIRS, ROOT, committed, git
from .test_review import commit, flags, line_of, replace, state, summary_line

STACK_FILES = ("Pulumi.yaml", "Pulumi.example.yaml", "Pulumi.example-eu.yaml", "Pulumi.lab.yaml")
EU = "Pulumi.example-eu.yaml"
EVERY = "Pulumi.example.yaml"


@pytest.fixture(scope="module")
def stacks_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    files = {name: (ROOT / name).read_text() for name in STACK_FILES}
    return committed(tmp_path_factory.mktemp("stacks") / "repo", FLEET_DIRS, files)


@pytest.fixture
def repo(stacks_base: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "repo"
    shutil.copytree(stacks_base, dest, symlinks=True)
    return dest


def keys(objects: list[dict]) -> dict[tuple[str, str, str, str], dict]:
    return {
        (o["apiVersion"], o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o
        for o in objects
    }


def expected(before: list[dict], after: list[dict]) -> set[tuple[str, tuple[str, str, str, str]]]:
    """(change, key) of each object that differs between two object lists."""
    b, a = keys(before), keys(after)
    out = set()
    for k in b.keys() | a.keys():
        if b.get(k) != a.get(k):
            out.add(("added" if k not in b else "removed" if k not in a else "changed", k))
    return out


def shown(r: Review, stack: str) -> set[tuple[str, tuple[str, str, str, str]]]:
    (sc,) = [s for s in r.fleets[0].stacks if s.stack == stack]
    return {(o.change, (o.api_version, o.kind, o.namespace, o.name)) for o in sc.objects}


def test_a_site_dropped_from_a_regional_stack_shows_that_stacks_objects(repo: Path) -> None:
    st = state(repo)
    sites_before = read_stacks(repo)["example-eu"].sites
    replace(repo, EU, "    - ams2\n", "")
    sites_after = read_stacks(repo)["example-eu"].sites
    assert sites_before and sites_after and set(sites_before) - set(sites_after) == {"ams2"}
    commit(repo, "example-eu: fra1 only")
    r = review(repo, "HEAD~1")
    want = expected(build(st, sites_before).all(), build(st, sites_after).all())
    assert want and {c for c, _ in want} == {"removed", "changed"}
    assert shown(r, "example-eu") == want
    fr = r.fleets[0]
    assert fr.nodes_changed == 0 and fr.objects == []  # no fleet file changes
    (eu,) = [s for s in fr.stacks if s.stack == "example-eu"]
    assert eu.before and eu.after and eu.before.sites == list(sites_before) and eu.after.sites == ["fra1"]
    assert [(x.file, x.line, x.ref) for x in eu.where] == [(EU, line_of(repo, EU, "  swarm:sites:"), "head")]
    # The stack of every site holds the fleet's objects: listed, not built again.
    (every,) = [s for s in fr.stacks if s.stack == "example"]
    assert every.every_site and every.objects == [] and every.where == []
    removed = sum(c == "removed" for c, _ in want)
    changed = sum(c == "changed" for c, _ in want)
    line = summary_line(r)
    assert not re.search(r"(?<!\d)0 cluster objects change", line)
    counted = f"(stack example-eu\\: {removed} removed, {changed} changed)"
    assert f"{removed + changed} cluster objects change {counted}" in line
    md = render(r)
    assert "### Pulumi stacks" in md and "swarm\\:sites \N{MINUS SIGN}ams2" in md
    assert "#### Stack <code>example-eu</code>" in md and "<code>ams2-gpu-01</code>" in md


def test_a_stacks_context_changed_blocks(repo: Path) -> None:
    replace(repo, EVERY, "kubernetes:context: swarm-example\n", "kubernetes:context: swarm-other\n")
    commit(repo, "another cluster")
    r = review(repo, "HEAD~1")
    (flag,) = flags(r)["stack-target-changed"]
    assert flag.action == "block" and r.exit_code == 1
    assert "swarm-example → swarm-other" in flag.reason and "example" in flag.reason
    assert [(x.file, x.line) for x in flag.where] == [(EVERY, line_of(repo, EVERY, "  kubernetes:context:"))]
    # Of every site at both sides: its objects are the fleet's (none change).
    (every,) = [s for s in r.fleets[0].stacks if s.stack == "example"]
    assert every.every_site and every.objects == []
    assert "1 blocking: stack-target-changed" in r.summary


def test_a_stack_moved_to_another_fleet_blocks_and_leaves_the_fleet(repo: Path) -> None:
    st = state(repo)
    sites = read_stacks(repo)["example-eu"].sites
    replace(repo, EU, "swarm:fleet: example\n", "swarm:fleet: lab\n")
    commit(repo, "example-eu is lab's now")
    r = review(repo, "HEAD~1")
    (flag,) = flags(r)["stack-target-changed"]
    assert "swarm:fleet example → lab" in flag.reason
    assert [(x.file, x.line) for x in flag.where] == [(EU, line_of(repo, EU, "  swarm:fleet:"))]
    # Of this fleet, the stack's cluster holds nothing at the head.
    assert shown(r, "example-eu") == expected(build(st, sites).all(), [])


def test_a_stack_file_that_is_not_yaml_at_the_head_is_an_invalid_head(
    repo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (repo / EU).write_text("config:\n  swarm:sites: [fra1, ams2\n")
    commit(repo, "broken stack file")
    r = review(repo, "HEAD~1")
    assert r.exit_code == 2 and r.summary.startswith("❌ example: the head is invalid (1 error)")
    (problem,) = r.fleets[0].problems
    assert problem.rule == "review.stack-file" and problem.severity == "error"
    assert problem.location.file == EU and problem.location.line > 0 and EU in problem.message
    assert "Pulumi\\.example-eu\\.yaml" in render(r)
    # The command: exit 2, the file named, no traceback.
    monkeypatch.chdir(repo)
    assert cli.main(["review", "--base", "HEAD~1"]) == 2
    out = capsys.readouterr()
    assert "Pulumi\\.example-eu\\.yaml" in out.out and "Traceback" not in out.out + out.err


def test_a_new_stack_of_the_fleet_shows_its_objects_added(repo: Path) -> None:
    st = state(repo)
    (repo / "Pulumi.example-apac.yaml").write_text(
        "config:\n  swarm:fleet: example\n  swarm:sites: [sjc1, tyo1]\n  kubernetes:context: swarm-apac\n"
    )
    sites = read_stacks(repo)["example-apac"].sites
    commit(repo, "a regional cluster for sjc1 and tyo1")
    r = review(repo, "HEAD~1")
    objects = build(st, sites).all()
    assert shown(r, "example-apac") == {("added", k) for k in keys(objects)}
    (apac,) = [s for s in r.fleets[0].stacks if s.stack == "example-apac"]
    assert apac.before is None and apac.after and apac.after.context == "swarm-apac"
    assert f"{len(objects)} cluster objects change (stack example-apac\\: {len(objects)} added)" in (
        summary_line(r)
    )
    assert "stack added" in render(r)


def test_a_stack_whose_sites_cannot_form_a_cluster_says_why(repo: Path) -> None:
    st = state(repo)
    (repo / "Pulumi.example-us.yaml").write_text("config:\n  swarm:sites: [sjc1]\n")
    commit(repo, "sjc1 alone")
    with pytest.raises(ScopeError) as exc:
        build(st, ["sjc1"])
    r = review(repo, "HEAD~1")
    (us,) = [s for s in r.fleets[0].stacks if s.stack == "example-us"]
    assert us.after and us.after.fleet == "example"  # Pulumi.yaml's default fleet
    assert us.error == f"head: {exc.value}" and us.objects == []
    assert "stack example-us\\: not compared" in summary_line(r)


def test_stacks_that_follow_a_renamed_fleet_are_no_target_change(repo: Path) -> None:
    git(repo, "mv", "inventory/example", "inventory/prod")
    git(repo, "mv", "policies/example", "policies/prod")
    for name in (EVERY, EU):
        replace(repo, name, "swarm:fleet: example\n", "swarm:fleet: prod\n")
    commit(repo, "rename example to prod, and its stacks with it")
    r = review(repo, "HEAD~1")
    (fr,) = r.fleets
    assert fr.fleet == "prod" and "fleet-renamed" in flags(r)
    assert "stack-target-changed" not in flags(r)  # fleet-renamed says it, once
    assert [s.stack for s in fr.stacks] == ["example", "example-eu"]
    assert all(
        s.before and s.before.fleet == "example" and s.after and s.after.fleet == "prod" for s in fr.stacks
    )


def test_a_stack_file_the_base_cannot_parse_leaves_that_stack_uncompared(repo: Path) -> None:
    good = (repo / EU).read_text()
    (repo / EU).write_text("config: [\n")
    commit(repo, "broken at the base")
    (repo / EU).write_text(good)
    commit(repo, "fixed")
    r = review(repo, "HEAD~1")
    assert r.exit_code != 2 and not r.fleets[0].problems
    (eu,) = [s for s in r.fleets[0].stacks if s.stack == "example-eu"]
    assert eu.error and eu.error.startswith(f"base: {EU}") and eu.objects == []
    assert "stack example-eu\\: not compared" in summary_line(r)


def test_a_stack_file_that_is_a_symbolic_link_at_the_head_is_not_followed(repo: Path) -> None:
    (repo / EU).unlink()
    (repo / EU).symlink_to("/etc/hostname")
    commit(repo, "a link")
    r = review(repo, "HEAD~1")
    (problem,) = r.fleets[0].problems
    assert r.exit_code == 2 and problem.location.file == EU and "symbolic link" in problem.message
