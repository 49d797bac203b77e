"""The head's own ``schemas/`` are read as data (issue #39, item 4): the review runs on
``pull_request_target`` with the base's secrets, so a pull request's schema that names an
external ``$ref`` (``http://``, ``file://``) must never make the reviewer fetch a URL or read
a runner's file; it is a head problem at the schema file instead.

Each pull request is a real Git commit on the example fleet with ``schemas/``; the HTTP
server is a real one on a free local port that records every request it gets.
"""

from __future__ import annotations

import http.server
import json
import re
import shutil
import uuid
from pathlib import Path
from typing import Any, ClassVar

import pytest

from swarm_infra import cli
from swarm_infra.fleet import schemas
from swarm_infra.fleet.loader import load_documents
from swarm_infra.review import review
from swarm_infra.review.load import HEAD_SCHEMA_RULE
from swarm_infra.review.markdown import render

from .conftest import ROOT, committed, serve_http
from .test_review import FLEET_DIRS, git, replace

NODE_SCHEMA = "schemas/node.schema.json"
API_VERSION_REF = '"$ref": "common.schema.json#/$defs/apiVersion"'


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """main: the example fleet and the schemas, one commit."""
    return committed(tmp_path_factory.mktemp("refs") / "repo", (*FLEET_DIRS, "schemas"))


@pytest.fixture
def repo(origin: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "repo"
    shutil.copytree(origin, dest, symlinks=True)
    return dest


def head_with_ref(repo: Path, ref: str) -> int:
    """Commit a head whose node schema takes ``apiVersion``'s schema from ``ref``; returns
    the line of that ``$ref`` in the schema file."""
    replace(repo, NODE_SCHEMA, API_VERSION_REF, f'"$ref": {json.dumps(ref)}')
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "node apiVersion from elsewhere")
    lines = (repo / NODE_SCHEMA).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if json.dumps(ref) in line)


def outputs(
    repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str, str, Any]:
    """What the workflow's review step produces: (exit code, comment, full report, stdout
    and stderr of the JSON run, the review as JSON)."""
    monkeypatch.chdir(repo)
    code = cli.main(["review", "--base", "HEAD~1", "--out", "c.md", "--full", "f.md"])
    streams = capsys.readouterr()
    assert cli.main(["review", "--base", "HEAD~1", "--format", "json"]) == code
    out = capsys.readouterr()
    data = json.loads(out.out)
    return (
        code,
        (repo / "c.md").read_text(),
        (repo / "f.md").read_text(),
        streams.out + streams.err + out.err,
        data,
    )


def refused_problems(repo: Path) -> list[Any]:
    r = review(repo, "HEAD~1")
    assert [f.fleet for f in r.fleets] == ["example"]
    return [p for p in r.fleets[0].problems if p.rule == HEAD_SCHEMA_RULE]


class Recorder(http.server.BaseHTTPRequestHandler):
    """Answers every GET with a schema holding a marker, and records the request."""

    requests: ClassVar[list[str]] = []
    marker = ""

    def do_GET(self) -> None:
        type(self).requests.append(self.path)
        body = json.dumps({"const": type(self).marker}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/schema+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def recorder(marker: str) -> type[Recorder]:
    """A :class:`Recorder` of its own (requests recorded apart from other tests')."""
    return type("Handler", (Recorder,), {"requests": [], "marker": marker})


def test_an_http_ref_in_the_heads_schema_is_refused_without_a_request(
    repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = f"served-{uuid.uuid4().hex}"
    handler = recorder(marker)
    with serve_http(handler) as url:
        line = head_with_ref(repo, f"{url}/x.json")
        code, comment, full, streams, data = outputs(repo, monkeypatch, capsys)
        own = refused_problems(repo)
    assert handler.requests == []  # the reviewer never asked
    assert code == 2 and data["exit_code"] == 2  # a head problem, not a traceback
    for text in (comment, full, streams, json.dumps(data)):
        assert marker not in text
        assert "Traceback" not in text
    assert [(p.location.file, p.location.line) for p in own] == [(NODE_SCHEMA, line)]
    assert f"{url}/x.json" in own[0].message and "refused" in own[0].message
    assert own[0].path == "$.properties.apiVersion['$ref']"  # where in the schema
    assert "refused" in comment


def test_a_file_ref_in_the_heads_schema_never_shows_the_files_content(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = f"secret-{uuid.uuid4().hex}"
    target = tmp_path / "runner-file.json"
    target.write_text(json.dumps({"const": secret}))
    line = head_with_ref(repo, target.as_uri())
    code, comment, full, streams, data = outputs(repo, monkeypatch, capsys)
    assert code == 2 and data["exit_code"] == 2
    for text in (comment, full, streams, json.dumps(data)):
        assert secret not in text
        assert "Traceback" not in text
    own = refused_problems(repo)
    assert [(p.location.file, p.location.line) for p in own] == [(NODE_SCHEMA, line)]
    assert target.as_uri() in own[0].message and "refused" in own[0].message


def test_a_relative_ref_outside_the_shared_schemas_is_refused_at_its_file(repo: Path, tmp_path: Path) -> None:
    """A relative ``$ref`` resolves against the schema's own URI (``BASE_URI``): a name that
    is not a shared schema would be fetched from that host; it is refused like the others."""
    line = head_with_ref(repo, "../../etc/passwd.json")
    own = refused_problems(repo)
    assert [(p.location.file, p.location.line) for p in own] == [(NODE_SCHEMA, line)]
    assert "https://swarm.io/etc/passwd.json" in own[0].message
    # Only the node schema failed to load: the other kinds are still checked, and none fails.
    assert len(own) == 1


def test_a_shared_schema_with_an_external_ref_is_refused_at_that_file(repo: Path, tmp_path: Path) -> None:
    secret = f"secret-{uuid.uuid4().hex}"
    target = tmp_path / "runner-file.json"
    target.write_text(json.dumps({"const": secret}))
    common = json.loads((repo / "schemas/common.schema.json").read_text())
    common["$defs"]["apiVersion"] = {"$ref": target.as_uri()}
    (repo / "schemas/common.schema.json").write_text(json.dumps(common, indent=2) + "\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "apiVersion from a runner file")
    line = next(
        i
        for i, text in enumerate((repo / "schemas/common.schema.json").read_text().splitlines(), 1)
        if target.as_uri() in text
    )
    r = review(repo, "HEAD~1")
    assert r.exit_code == 2
    own = [p for p in r.fleets[0].problems if p.rule == HEAD_SCHEMA_RULE]
    assert [(p.location.file, p.location.line) for p in own] == [("schemas/common.schema.json", line)]
    assert secret not in render(r) + render(r, None) + json.dumps(r.as_json())


def test_the_reviewers_own_schemas_retrieve_nothing_either(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``swarm validate`` (and the review's own check) builds its validators from the
    installed ``schemas/``: one with an external ``$ref`` fails to load, it never fetches."""
    handler = recorder("served")
    installed = tmp_path / "schemas"
    shutil.copytree(ROOT / "schemas", installed)
    with serve_http(handler) as url:
        replace(tmp_path, "schemas/node.schema.json", API_VERSION_REF, f'"$ref": "{url}/x.json"')
        monkeypatch.setattr(schemas, "schema_dir", lambda: installed)
        schemas.load_schema.cache_clear()
        schemas._validators.cache_clear()
        try:
            docs, _ = load_documents(sorted((ROOT / "inventory/example/nodes").glob("*.yaml"))[:1])
            with pytest.raises(ValueError, match=re.escape(f"{url}/x.json: {schemas.REFUSED}")):
                list(schemas.check_document(docs[0]))
        finally:
            schemas.load_schema.cache_clear()
            schemas._validators.cache_clear()
    assert handler.requests == []
