"""The pull agent's settings file against its JSON Schema (``schemas/agentsettings.schema.json``,
issue #37 item 4): what the controller renders (the host layer, ``swarm node bootstrap``)
and what the agent reads are checked by the fleet's own validator.

The shipped fleets are made pull fleets as a provider's site would (every node
``spec.convergence: pull``, the Rollout's ``spec.pull``) and their rendered settings must be
what the agent takes; a settings file the schema refuses is refused naming the ``$.field``,
by the agent as one line and by bootstrap before anything is written.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from swarm_infra import cli
from swarm_infra.agent.config import FIELDS, ConfigInvalid, parse_config
from swarm_infra.fleet.diagnostics import Source
from swarm_infra.fleet.schemas import AGENT_SETTINGS, FILES, check_file, load_schema
from swarm_infra.fleet.sources import FLEET_NAME, fleet_names
from swarm_infra.resolve import desired_state, load_fleet
from swarm_infra.resolve.files import UnsafeValue, agent_config_text, layer_files

from .conftest import ROOT
from .pullfleet import REMOTE, SIGNER, record_controller_key
from .test_agent_bootstrap import bootstrap

GOOD = {
    "node": "n1",
    "fleet": "lab",
    "remote": "https://git.example.org/f.git",
    "ref": "main",
    "engine": "ansible",
    "status_port": 9100,
}


def settings(**change: Any) -> str:
    return json.dumps({**GOOD, **change})


def test_the_schema_is_the_settings_the_agent_reads() -> None:
    schema = load_schema(FILES[AGENT_SETTINGS])
    assert schema["additionalProperties"] is False
    assert schema["required"] == list(schema["properties"]) == list(FIELDS)
    # The names as the fleet spells them: a node's (common.schema.json's name), a fleet's
    # directory (fleet/sources.py FLEET_NAME), the port as every port of the fleet.
    props = schema["properties"]
    assert props["node"]["$ref"] == "common.schema.json#/$defs/name"
    assert props["fleet"]["pattern"] == f"^{FLEET_NAME.pattern}$"
    assert props["status_port"]["$ref"] == "common.schema.json#/$defs/port"
    assert props["engine"]["const"] == "ansible"
    assert check_file(AGENT_SETTINGS, GOOD, Source("x", 0)) == []


def _pull_fleet(base: Path, name: str) -> list[Path]:
    """Fleet ``name`` copied under ``base`` with every node converging by pull."""
    dirs = [f"inventory/{name}", f"policies/{name}", "policies/shared"]
    for d in dirs:
        shutil.copytree(ROOT / d, base / d)
    for f in (base / "inventory" / name).rglob("*.yaml"):
        docs = [d for d in yaml.safe_load_all(f.read_text()) if d]
        for doc in docs:
            if doc["kind"] == "Node":
                doc["spec"]["convergence"] = "pull"
        f.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    policies = base / "policies" / name
    (policies / "allowed_signers").write_text(f"ops@example.org {SIGNER}\n")
    pull = {"remote": REMOTE, "ref": "main", "fleet": name, "allowed_signers_file": "allowed_signers"}
    rollout = [d for d in yaml.safe_load_all((policies / "rollout.yaml").read_text()) if d]
    for doc in rollout:
        doc["spec"]["pull"] = pull
    (policies / "rollout.yaml").write_text(yaml.safe_dump_all(rollout, sort_keys=False))
    mesh = [d for d in yaml.safe_load_all((policies / "mesh.yaml").read_text()) if d]
    if any("controller" in d["spec"] for d in mesh):
        record_controller_key(policies)
    return [base / d for d in dirs]


@pytest.mark.parametrize("fleet", fleet_names(ROOT))
def test_every_shipped_fleets_rendered_settings_validate(tmp_path: Path, fleet: str) -> None:
    state = desired_state(load_fleet(_pull_fleet(tmp_path, fleet)))
    assert state["nodes"]
    for name, node in state["nodes"].items():
        path = node["layout"]["files"]["agent_config"]["path"]
        (item,) = [i for i in layer_files(node, "host") if i["path"] == path]
        data = json.loads(item["content"])
        assert check_file(AGENT_SETTINGS, data, Source(path, 0)) == []
        config = parse_config(item["content"], path)
        assert (config.node, config.fleet, config.remote, config.status_port) == (name, fleet, REMOTE, 9100)


@pytest.mark.parametrize(
    "text, field, words",
    [
        (settings(extra=1), "$.extra", "unexpected key 'extra'"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "ref"}), "$", '"ref" is a required property'),
        (settings(node=5), "$.node", "expected a string, got integer 5"),
        (settings(node="n" * 64), "$.node", "at most 63 characters"),
        (settings(fleet="a/b"), "$.fleet", "does not match the pattern"),
        (settings(engine="pyinfra"), "$.engine", "expected 'ansible'"),
        (settings(status_port=0), "$.status_port", "expected a value at least 1, got 0"),
        (settings(status_port=65536), "$.status_port", "expected a value at most 65535, got 65536"),
        (settings(status_port="9100"), "$.status_port", "expected an integer, got string '9100'"),
        # JSON Schema counts 8.0 as an integer; the fleet's validator does not (as in YAML).
        (settings(status_port=9100.0), "$.status_port", "got the float 9100.0; write 9100"),
        ("[]", "$", "expected a mapping"),
    ],
)
def test_a_settings_file_the_schema_refuses_is_refused_naming_the_field(
    text: str, field: str, words: str
) -> None:
    with pytest.raises(ConfigInvalid) as info:
        parse_config(text, "settings.json")
    message = str(info.value)
    assert message.startswith(f"settings.json: {field}: ")
    assert words in message and "\n" not in message


@pytest.mark.parametrize(
    "text, words",
    [
        # More digits than int() converts (Python's int_max_str_digits, 4300): a ValueError
        # that is not a JSONDecodeError.
        ('{"status_port": ' + "9" * 5000 + "}", "Exceeds the limit"),
        ("[" * 100_000, "maximum recursion depth"),
    ],
)
def test_json_the_parser_gives_up_on_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, words: str
) -> None:
    bad = tmp_path / "agent.json"
    bad.write_text(text)
    assert cli.main(["agent", "run", "--config", str(bad), "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: not JSON" in err and words in err and "Traceback" not in err


def test_the_renderer_never_writes_settings_the_agent_refuses() -> None:
    with pytest.raises(UnsafeValue, match=re.escape("$.status_port: expected a value at most 65535")):
        agent_config_text("n1", "lab", REMOTE, "main", 70000)
    with pytest.raises(UnsafeValue, match=re.escape("$.fleet: 'a/b' does not match the pattern")):
        agent_config_text("n1", "a/b", REMOTE, "main", 9100)
    assert json.loads(agent_config_text("n1", "lab", REMOTE, "main", 9100)) == {**GOOD, "remote": REMOTE}


@pytest.mark.parametrize("port", ["0", "70000"])
def test_bootstrap_refuses_a_status_port_the_agent_would_refuse(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], port: str
) -> None:
    assert cli.main(bootstrap(tmp_path, "--status-port", port)) == 2
    err = capsys.readouterr().err
    assert f"--status-port {port}: expected a value at " in err and "$.status_port" in err
    assert "nothing was written" in err and "Traceback" not in err
    assert not (tmp_path / "node").exists()
