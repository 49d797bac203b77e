"""The schemas are valid Draft 2020-12 and documented; the catalogs are coherent."""

from __future__ import annotations

import json

import jsonschema
import pytest

from swarm_infra.fleet.schemas import FILES, KINDS, SHARED, load_schema
from swarm_infra.resolve.catalog import gpu_catalog, mig_fit_problem, sysctl_catalog, sysctl_value_problem


@pytest.mark.parametrize("filename", [*KINDS.values(), *SHARED, *FILES.values()])
def test_schema_is_valid_draft_2020_12(filename: str) -> None:
    schema = load_schema(filename)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


def _undocumented(node: object, path: str = "") -> list[str]:
    missing = []
    if isinstance(node, dict):
        for name, sub in node.get("properties", {}).items():
            if name not in ("apiVersion", "kind", "metadata", "spec") and "description" not in sub:
                missing.append(f"{path}.{name}")
        for key, sub in node.items():
            missing += _undocumented(sub, f"{path}.{key}" if key != "properties" else path)
    elif isinstance(node, list):
        for i, sub in enumerate(node):
            missing += _undocumented(sub, f"{path}[{i}]")
    return missing


@pytest.mark.parametrize("filename", [*KINDS.values(), *SHARED, *FILES.values()])
def test_every_field_is_described(filename: str) -> None:
    assert _undocumented(load_schema(filename)) == []


def test_python_jsonschema_agrees_with_the_fast_validator_on_the_corpus(root) -> None:
    """The hot path uses jsonschema-rs; the reference implementation must agree with it.

    Not on tests/data/hostile: there the two differ by design. python-jsonschema's
    patterns use Python's '$', which also matches before a trailing newline, and JSON
    Schema counts 2.0 an integer (the validator refuses both, see check_document); some of
    those files would also expand to gigabytes under plain yaml.safe_load.
    """
    import yaml
    from referencing import Registry, Resource

    from swarm_infra.fleet.diagnostics import Source
    from swarm_infra.fleet.loader import RawDocument
    from swarm_infra.fleet.schemas import BASE_URI, check_document

    registry = Registry().with_resources(
        (BASE_URI + f, Resource.from_contents(load_schema(f))) for f in SHARED
    )
    files = [
        f
        for d in ("tests/data/base", "tests/data/invalid", "inventory", "policies")
        for f in sorted((root / d).rglob("*.yaml"))
    ]
    compared = 0
    for f in files:
        try:
            docs = list(yaml.safe_load_all(f.read_text()))
        except yaml.YAMLError:
            continue
        for i, data in enumerate(docs):
            if not isinstance(data, dict) or data.get("kind") not in KINDS:
                continue
            try:
                json.dumps(data)
            except TypeError:
                continue
            ref = jsonschema.Draft202012Validator(
                load_schema(KINDS[data["kind"]]),
                registry=registry,
                format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER,
            )
            fast = list(check_document(RawDocument(Source(str(f), i), data)))
            assert ref.is_valid(data) == (not fast), (f, i)
            compared += 1
    assert compared > 60


def test_gpu_catalog_is_coherent() -> None:
    catalog = gpu_catalog()
    assert {
        "H100-SXM5-80GB",
        "H100-PCIE-80GB",
        "H200-SXM-141GB",
        "A100-SXM4-40GB",
        "A100-SXM4-80GB",
        "L40S",
        "L4",
        "RTX-4090",
    } <= set(catalog)
    flavors = [m["flavor"] for m in catalog.values()]
    assert len(flavors) == len(set(flavors))
    for name, m in catalog.items():
        p, c = m["power"], m["clocks"]
        assert 0 < p["min_w"] <= p["default_w"] <= p["max_w"], name
        assert 0 < c["graphics_min_mhz"] < c["graphics_max_mhz"], name
        assert m["source"].startswith("https://"), name
        if m["mig"]:
            assert all(mig_fit_problem(name, [prof]) is None for prof in m["mig"]["profiles"])


def test_mig_fit() -> None:
    assert mig_fit_problem("A100-SXM4-80GB", ["3g.40gb", "3g.40gb"]) is None
    assert "compute slices" in mig_fit_problem("A100-SXM4-80GB", ["4g.40gb", "4g.40gb"])
    assert "does not support MIG" in mig_fit_problem("L40S", ["1g.10gb"])


@pytest.mark.parametrize(
    ("key", "value", "ok"),
    [
        ("vm.swappiness", 10, True),
        ("vm.swappiness", 300, False),
        ("vm.swappiness", "10", False),
        ("vm.swappiness", True, False),
        ("net.ipv4.tcp_rmem", [4096, 87380, 6291456], True),
        ("net.ipv4.tcp_rmem", [4096, 87380], False),
        ("net.ipv4.tcp_congestion_control", "bbr", True),
        ("net.ipv4.tcp_congestion_control", "vegas9", False),
        ("not.in.catalog", "x", True),
    ],
)
def test_sysctl_value_types(key: str, value: object, ok: bool) -> None:
    assert (sysctl_value_problem(key, value) is None) == ok
    assert set(sysctl_catalog()) >= {"vm.swappiness", "net.ipv4.tcp_rmem"}
