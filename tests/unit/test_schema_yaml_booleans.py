"""A word YAML 1.1 reads as a boolean, where text is expected (issue #39, item 8): a
ReviewPolicy action written ``off`` unquoted is the boolean false to PyYAML, and the error
says so, names the word as written and how to write it, instead of "False is not one of:
block, warn, off". The words are PyYAML's own (its resolver's bool pattern), the expected
values the schema's own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from swarm_infra import validate

DATA = Path(__file__).resolve().parents[1] / "data"
ROOT = Path(__file__).resolve().parents[2]
ACTIONS = json.loads((ROOT / "schemas/reviewpolicy.schema.json").read_text())["$defs"]["action"]["enum"]
# PyYAML's implicit bool resolver (yaml/resolver.py): these words, in these three casings.
WORDS = [
    w for base in ("yes", "no", "true", "false", "on", "off") for w in (base, base.title(), base.upper())
]

POLICY = """---
apiVersion: swarm.io/v1alpha1
kind: ReviewPolicy
metadata: {{name: swarm}}
spec:
  flags:
    quota-over-capacity: {value}
"""


def errors(tmp_path: Path, value: str) -> list[str]:
    (tmp_path / "policy.yaml").write_text(POLICY.format(value=value))
    return [f"{d.rule} {d.path}: {d.message}" for d in validate([DATA / "base", tmp_path]).report.errors]


def test_the_corpus_case_names_the_word_and_the_quoted_form() -> None:
    path = DATA / "invalid/review-policy-action-unquoted-off.yaml"
    (error,) = validate([DATA / "base", path]).report.errors
    assert error.message == (
        '`off` unquoted is read by YAML as the boolean false; write it quoted: "off" '
        f"(expected one of: {', '.join(ACTIONS)})"
    )


@pytest.mark.parametrize("word", WORDS)
def test_every_yaml_boolean_word_is_named_as_written(tmp_path: Path, word: str) -> None:
    value = yaml.safe_load(word)
    assert isinstance(value, bool)  # what PyYAML makes of it
    assert errors(tmp_path, word) == [
        f"schema.enum $.spec.flags.quota-over-capacity: `{word}` unquoted is read by YAML as the "
        f'boolean {json.dumps(value)}; write it quoted: "{word}" (expected one of: {", ".join(ACTIONS)})'
    ]
    # As the message says: quoted, it is text (an action, when it is one).
    assert errors(tmp_path, json.dumps(word)) == (
        []
        if word in ACTIONS
        else [f"schema.enum $.spec.flags.quota-over-capacity: {word!r} is not one of: {', '.join(ACTIONS)}"]
    )


def test_an_explicit_bool_tag_is_not_said_to_be_unquoted(tmp_path: Path) -> None:
    (error,) = errors(tmp_path, "!!bool off")
    assert "unquoted is read" not in error and "`" not in error
    assert "got the boolean false" in error and f"one of: {', '.join(ACTIONS)}" in error


def test_a_string_field_says_the_same(tmp_path: Path) -> None:
    """Any field that wants text, not only an enum: a node's label value written ``on``."""
    fleet = (DATA / "base/fleet.yaml").read_text()
    assert "labels: {tier: a}" in fleet
    (tmp_path / "fleet.yaml").write_text(fleet.replace("labels: {tier: a}", "labels: {tier: on}", 1))
    (error,) = validate([tmp_path]).report.errors
    assert (error.rule, error.path) == ("schema.type", "$.metadata.labels.tier")
    assert error.message.startswith(
        '`on` unquoted is read by YAML as the boolean true; write it quoted: "on"'
    )
