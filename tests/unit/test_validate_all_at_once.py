"""``swarm validate`` reports every problem at once (issue #36, "a newcomer's first hour").

Every schema finding at a path is reported, not only the first; an unknown key is named at
the key, with the field it is close to; and a document that fails its schema takes only
itself out of the checks: the semantic findings of every other document are still reported,
without follow-on errors about the one left out. Nothing is applied while any error stands.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from swarm_infra import cli
from swarm_infra.fleet.diagnostics import Diagnostic, FleetInvalid, Source
from swarm_infra.fleet.loader import RawDocument
from swarm_infra.fleet.schemas import check_document
from swarm_infra.resolve import load_fleet, validate

DATA = Path(__file__).resolve().parents[1] / "data"
BASE = DATA / "base"
API = "apiVersion: swarm.io/v1alpha1\n"

RAY = (
    "---\n" + API + "kind: RayCluster\nmetadata: {name: r}\nspec:\n"
    "  head: {selector: {roles: [gpu-worker]}}\n"
    '  package_index: {url: "https://10.1.0.1:8443/simple/"}\n'
    "  lock_file: ray.lock\n"
    "---\n" + API + 'kind: Cluster\nmetadata: {name: swarm}\nspec: {ray_version: "2.60.0"}\n'
)


def node(name: str, hardware: str = "{cpus: 4, memory_gib: 16}", site: str = "s1", address: str = "") -> str:
    address = address or f"10.1.0.{50 + int(name[1:]) % 100}"
    return (
        "---\n" + API + f"kind: Node\nmetadata: {{name: {name}}}\nspec:\n  site: {site}\n"
        f"  address: {address}\n  roles: [cpu-worker]\n  hardware: {hardware}\n"
    )


def errors_of(tmp_path: Path, text: str, *, with_base: bool = True, lock: bool = False) -> list[Diagnostic]:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(text)
    if lock:
        (tmp_path / "ray.lock").write_text((DATA / "invalid" / "ray.lock").read_text())
    return validate([BASE, fleet] if with_base else [fleet]).report.errors


def schema_findings(data: dict[str, object]) -> list[tuple[str, str, str]]:
    from swarm_infra.fleet.diagnostics import json_path

    doc = RawDocument(Source("x.yaml", 0, 1), data)
    return [(json_path(f.path), f.rule, f.message) for f in check_document(doc)]


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), start=1) if needle in line)


# ------------------------------------------------------------------ unknown keys (typos)


def test_a_typo_key_is_named_at_the_key_with_did_you_mean(tmp_path: Path) -> None:
    text = node("n9", "\n    cpus: 4\n    memroy_gib: 16")
    [error] = errors_of(tmp_path, text)
    assert (error.rule, error.path) == ("schema.additionalProperties", "$.spec.hardware.memroy_gib")
    assert (error.line, error.col) == (line_of(text, "memroy_gib"), 5)
    assert "'memroy_gib'" in error.message and "did you mean 'memory_gib'?" in error.message
    # the "memory_gib is required" that the typo causes is the same mistake: said once
    assert "required" in error.message


def test_each_unknown_key_is_its_own_finding(tmp_path: Path) -> None:
    text = node("n9", "{cpus: 4, memory_gib: 16, nic_speed_gb: 25, colour: blue}")
    errors = errors_of(tmp_path, text)
    found = {e.path: e.message for e in errors}
    assert [e.rule for e in errors] == ["schema.additionalProperties"] * 2
    assert set(found) == {"$.spec.hardware.nic_speed_gb", "$.spec.hardware.colour"}
    assert "did you mean 'nic_speed_gbps'?" in found["$.spec.hardware.nic_speed_gb"]
    # no close field: the message lists the fields there are instead of guessing
    assert "did you mean" not in found["$.spec.hardware.colour"]
    assert "memory_gib" in found["$.spec.hardware.colour"]


def test_a_key_already_given_is_not_suggested() -> None:
    data = {
        "apiVersion": "swarm.io/v1alpha1",
        "kind": "Site",
        "metadata": {"name": "s9"},
        "spec": {"region": "r9", "regoin": "r9", "underlay": {"cidr": "10.99.0.0/24"}},
    }
    [(path, rule, message)] = schema_findings(data)
    assert (path, rule) == ("$.spec.regoin", "schema.additionalProperties")
    assert "did you mean" not in message


def test_many_unknown_keys_are_one_finding_at_the_object() -> None:
    spec: dict[str, object] = {"value": 1, **{f"x{i}": 1 for i in range(50)}}
    data = {"apiVersion": "swarm.io/v1alpha1", "kind": "Priority", "metadata": {"name": "p9"}, "spec": spec}
    [(path, rule, message)] = schema_findings(data)
    assert (path, rule) == ("$.spec", "schema.additionalProperties")
    assert "'x0'" in message and "45 more" in message


# ------------------------------------------------------------- every finding at a path


def test_every_missing_required_key_is_named() -> None:
    # One finding for what the mapping lacks, naming every key (not only the first).
    data = {
        "apiVersion": "swarm.io/v1alpha1",
        "kind": "Node",
        "metadata": {"name": "n9"},
        "spec": {"roles": ["cpu-worker"], "hardware": {"cpus": 4, "memory_gib": 16}},
    }
    [(path, rule, message)] = schema_findings(data)
    assert (path, rule) == ("$.spec", "schema.required")
    assert '"site"' in message and '"address"' in message


def test_a_missing_key_and_a_missing_alternative_at_one_path(tmp_path: Path) -> None:
    text = "---\n" + API + "kind: Assignment\nmetadata: {name: a9}\nspec: {precedence: 5}\n"
    errors = errors_of(tmp_path, text)
    assert sorted((e.path, e.rule) for e in errors) == [
        ("$.spec", "schema.anyOf"),
        ("$.spec", "schema.required"),
    ]
    assert all(e.line == 5 for e in errors)


def test_a_value_too_long_and_of_the_wrong_characters_says_both() -> None:
    # One line per value, the most telling keyword's, saying every problem of the value.
    data = {
        "apiVersion": "swarm.io/v1alpha1",
        "kind": "Site",
        "metadata": {"name": "s9"},
        "spec": {"region": "R" * 70 + " !", "underlay": {"cidr": "10.99.0.0/24"}},
    }
    [(path, rule, message)] = schema_findings(data)
    assert (path, rule) == ("$.spec.region", "schema.pattern")
    assert "does not match the pattern" in message and "expected at most 63 characters, got 72" in message


def test_a_value_of_the_wrong_type_is_one_finding() -> None:
    # Keywords that judge a value of another type (an enum of strings given a number) repeat
    # the type error: they are not reported.
    data = {
        "apiVersion": "swarm.io/v1alpha1",
        "kind": "GpuProfile",
        "metadata": {"name": "g9"},
        "spec": {"driver": {"branch": "550", "source": 5}},
    }
    assert [(p, r) for p, r, _ in schema_findings(data)] == [("$.spec.driver.source", "schema.type")]


def test_any_of_says_what_the_branch_of_the_value_s_type_wants() -> None:
    # A sysctl value is an integer, a string or a list: a string with a character no
    # sysctl takes fails the string branch's pattern, and the message says so, once.
    data = {
        "apiVersion": "swarm.io/v1alpha1",
        "kind": "HostProfile",
        "metadata": {"name": "h9"},
        "spec": {"sysctls": {"net.core.default_qdisc": "fq;reboot"}},
    }
    [(path, rule, message)] = schema_findings(data)
    assert (path, rule) == ("$.spec.sysctls['net.core.default_qdisc']", "schema.anyOf")
    assert "does not match the pattern" in message


# ------------------------------------------------- a failed document leaves only itself out


def test_semantic_findings_survive_a_schema_error_in_another_document(tmp_path: Path) -> None:
    errors = errors_of(tmp_path, node("n9", "{cpus: lots, memory_gib: 16}") + RAY, lock=True)
    assert sorted((e.path, e.rule) for e in errors) == [
        ("$.spec.hardware.cpus", "schema.type"),
        ("$.spec.head.selector", "ray.head-not-unique"),
    ]


def test_a_reference_to_a_document_that_failed_is_not_unknown(tmp_path: Path) -> None:
    text = (
        node("n9", "{cpus: lots, memory_gib: 16}")
        + "---\n"
        + API
        + "kind: Assignment\nmetadata: {name: a9}\nspec: {selector: {nodes: [n9]}, host_profile: h-base}\n"
        + node("n10", site="nowhere")
    )
    errors = errors_of(tmp_path, text)
    assert sorted((e.path, e.rule) for e in errors) == [
        ("$.spec.hardware.cpus", "schema.type"),
        ("$.spec.site", "reference.unresolved"),
    ]


def test_a_document_of_an_unknown_kind_leaves_out_only_its_name(tmp_path: Path) -> None:
    text = (
        "---\n" + API + "kind: Nod\nmetadata: {name: n8}\nspec: {}\n"
        "---\n" + API + "kind: Assignment\nmetadata: {name: a9}\n"
        "spec: {selector: {nodes: [n8]}, host_profile: h-base}\n" + node("n10", site="nowhere")
    )
    errors = errors_of(tmp_path, text)
    assert sorted((e.path, e.rule) for e in errors) == [
        ("$.kind", "schema.kind"),
        ("$.spec.site", "reference.unresolved"),
    ]
    [kind] = [e for e in errors if e.rule == "schema.kind"]
    assert "did you mean 'Node'?" in kind.message


def test_a_document_of_an_unknown_unnamed_kind_still_silences_references(tmp_path: Path) -> None:
    # Neither its kind nor its name can be read: it may be anything, so no reference is
    # reported as unknown (it would be a false error if the document declared it).
    text = "---\n" + API + "kind: Foo\nmetadata: {}\nspec: {}\n" + node("n10", site="nowhere")
    assert [(e.path, e.rule) for e in errors_of(tmp_path, text)] == [("$.kind", "schema.kind")]


def test_nothing_is_applied_and_the_cli_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fleet = tmp_path / "fleet.yaml"
    text = node("n9", "{cpus: 4, memroy_gib: 16}") + node("n10", site="nowhere")
    fleet.write_text(text)
    with pytest.raises(FleetInvalid) as raised:
        load_fleet([BASE, fleet])
    assert len(raised.value.report.errors) == 2
    assert cli.main(["validate", str(BASE), str(fleet)]) == 2
    out = capsys.readouterr().out
    line = line_of(text, "memroy_gib")
    col = text.splitlines()[line - 1].index("memroy_gib") + 1
    assert f"{fleet}:{line}:{col}: error[schema.additionalProperties]: $.spec.hardware.memroy_gib:" in out
    assert "error[reference.unresolved]: $.spec.site:" in out
    assert out.rstrip().endswith("2 error(s), 1 warning(s)")
