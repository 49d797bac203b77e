"""The lab's Git server (lab/gitserver.py) with the real git and git-http-backend: a clone
and a fetch over https checked against the lab CA, a push refused, an untrusted CA refused;
and the CGI bridge's pure parts from RFC 3875's rules."""

from __future__ import annotations

import io
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from swarm_infra.lab import gitserver, tlsindex


def git(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None, check: bool = True):
    base = {
        "PATH": os.environ["PATH"],
        "HOME": str(cwd or "/"),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.org",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.org",
    }
    done = subprocess.run(
        ["git", *args], cwd=cwd, env={**base, **(env or {})}, capture_output=True, text=True
    )
    if check:
        assert done.returncode == 0, done.stderr
    return done


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path, Path, Path]]:
    """(url of fleet.git, the CA file, the bare repository, a work clone)."""
    tls = tlsindex.ensure_tls(tmp_path / "tls", "127.0.0.1")
    root = tmp_path / "repos"
    root.mkdir()
    work = tmp_path / "work"
    git("init", "-q", "-b", "main", str(work))
    (work / "f.txt").write_text("one\n")
    git("add", "f.txt", cwd=work)
    git("commit", "-q", "-m", "one", cwd=work)
    git("clone", "-q", "--bare", str(work), str(root / "fleet.git"))
    httpd = gitserver.server(root, "127.0.0.1", 0, tls)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{httpd.server_address[1]}/fleet.git", tls.ca, root / "fleet.git", work
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_clone_and_fetch_over_https_with_the_lab_ca(served, tmp_path: Path) -> None:
    url, ca, bare, work = served
    env = {"GIT_SSL_CAINFO": str(ca)}
    for version in ("2", "0"):  # smart HTTP, protocol v2 and the original one
        dest = tmp_path / f"clone-v{version}"
        git("-c", f"protocol.version={version}", "clone", "-q", url, str(dest), env=env)
        assert (dest / "f.txt").read_text() == "one\n"
    # A new commit on the served repository is fetched (many objects: the negotiation grows).
    for i in range(30):
        (work / f"g{i}.txt").write_text(f"{i}\n")
    git("add", ".", cwd=work)
    git("commit", "-q", "-m", "two", cwd=work)
    git("push", "-q", str(bare), "main", cwd=work)
    dest = tmp_path / "clone-v2"
    git("fetch", "-q", "origin", cwd=dest, env=env)
    head = git("rev-parse", "main", cwd=work).stdout.strip()
    assert git("rev-parse", "origin/main", cwd=dest).stdout.strip() == head


def test_a_push_is_refused_and_the_repository_unchanged(served, tmp_path: Path) -> None:
    url, ca, bare, work = served
    before = git("rev-parse", "main", cwd=bare).stdout
    (work / "f.txt").write_text("pushed\n")
    git("commit", "-q", "-am", "push", cwd=work)
    done = git("push", url, "main", cwd=work, env={"GIT_SSL_CAINFO": str(ca)}, check=False)
    assert done.returncode != 0
    assert git("rev-parse", "main", cwd=bare).stdout == before


def test_a_client_without_the_lab_ca_refuses_the_server(served, tmp_path: Path) -> None:
    url, _, _, _ = served
    other = tlsindex.ensure_tls(tmp_path / "other-ca", "127.0.0.1").ca
    done = git("clone", "-q", url, str(tmp_path / "x"), env={"GIT_SSL_CAINFO": str(other)}, check=False)
    assert done.returncode != 0 and "certificate" in done.stderr.lower()


def test_cgi_environ_passes_headers_but_never_credentials() -> None:
    env = gitserver.cgi_environ(
        "POST",
        "/fleet.git/git-upload-pack?x=1",
        {
            "Content-Type": "application/x-git-upload-pack-request",
            "Git-Protocol": "version=2",
            "Authorization": "Basic eDp5",
            "Proxy-Authorization": "Basic eDp5",
            "Content-Length": "99",
        }.items(),
        Path("/srv/git"),
        "10.77.2.1",
        12,
    )
    assert env["PATH_INFO"] == "/fleet.git/git-upload-pack" and env["QUERY_STRING"] == "x=1"
    assert env["CONTENT_TYPE"] == "application/x-git-upload-pack-request"
    assert env["CONTENT_LENGTH"] == "12"  # the body actually read, not the header's claim
    assert env["HTTP_GIT_PROTOCOL"] == "version=2"
    assert not {k for k in env if "AUTHORIZATION" in k} and "REMOTE_USER" not in env


def test_split_cgi_response_takes_the_status_out() -> None:
    status, headers, body = gitserver.split_cgi_response(
        b"Status: 403 Forbidden\r\nContent-Type: text/plain\r\n\r\nno"
    )
    assert (status, headers, body) == (403, [("Content-Type", "text/plain")], b"no")
    assert gitserver.split_cgi_response(b"Content-Type: a/b\n\nx")[0] == 200
    with pytest.raises(ValueError):
        gitserver.split_cgi_response(b"no header block")


def test_read_chunked() -> None:
    data = io.BytesIO(b"4\r\nWiki\r\n5;ext=1\r\npedia\r\n0\r\nTrailer: x\r\n\r\n")
    assert gitserver.read_chunked(data) == b"Wikipedia"
    with pytest.raises(ValueError):
        gitserver.read_chunked(io.BytesIO(b"zz\r\n"))
    with pytest.raises(ValueError):
        gitserver.read_chunked(io.BytesIO(b"10\r\n" + b"x" * 16 + b"\r\n0\r\n\r\n"), limit=8)
