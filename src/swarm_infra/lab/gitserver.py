"""The lab's Git server: the fleet repository over https, read-only, for pull-mode nodes.

A provider's node reaches the fleet's Git remote as it reaches the internet: out through its
site's NAT. In the lab that remote is this host on the lab's service address, served by
``git http-backend`` (git's own smart-HTTP CGI program, git-http-backend(1)) behind
Python's ``http.server`` wrapped in TLS with the certificate of the lab's CA
(:func:`swarm_infra.lab.tlsindex.ensure_tls`, the package index's: one CA for the lab's
services, trusted by the nodes as a provider's machines trust their own CA). Run as
``python -m swarm_infra.lab.gitserver --address A --port P --root DIR --tls DIR``.

Read-only: http-backend serves ``upload-pack`` (fetch, clone) of every repository under
``--root`` (``GIT_HTTP_EXPORT_ALL``) and refuses ``receive-pack`` (push) to a request that
is not authenticated (git-http-backend(1), ``http.receivepack``: "disabled by default for
anonymous users"); nothing here authenticates, so nothing is pushed over the network. The
operator's merge reaches the repository on the host's disk, as a forge's would.

The CGI bridge (:func:`cgi_environ`, :func:`split_cgi_response`) is RFC 3875's: the request's
method, path and query, its headers as ``HTTP_*`` (``Git-Protocol`` included, for protocol
v2), the body on stdin with ``CONTENT_LENGTH`` (a chunked body is de-chunked first: git
sends large fetch negotiations chunked), and the program's ``Status:`` and headers turned
into the HTTP response.
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

from .tlsindex import TlsFiles, with_tls

HTTP_BACKEND = "git-http-backend"
CGI_TIMEOUT_S = 300
MAX_BODY_BYTES = 64 << 20  # a fetch negotiation is kilobytes; nothing larger is read


def backend_path() -> str:
    """git-http-backend's path: in git's exec path (``git --exec-path``)."""
    exec_path = subprocess.run(["git", "--exec-path"], capture_output=True, text=True, check=True).stdout
    return str(Path(exec_path.strip()) / HTTP_BACKEND)


def cgi_environ(
    method: str, target: str, headers: Iterable[tuple[str, str]], root: Path, remote_addr: str, body_len: int
) -> dict[str, str]:
    """The CGI environment (RFC 3875 section 4.1) of one request to git-http-backend:
    ``target`` is the request line's path and query; every header becomes ``HTTP_<NAME>``
    except ``Content-Type``/``Content-Length`` (their own variables) and ``Authorization``
    and ``Proxy-*`` (never passed on, RFC 3875 4.1.18); ``headers``: (name, value) pairs.
    ``REMOTE_USER`` is never set: the server authenticates nobody, so http-backend refuses
    pushes."""
    parts = urlsplit(target)
    env = {
        "GATEWAY_INTERFACE": "CGI/1.1",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REQUEST_METHOD": method,
        "PATH_INFO": unquote(parts.path),
        "QUERY_STRING": parts.query,
        "REMOTE_ADDR": remote_addr,
        "CONTENT_LENGTH": str(body_len),
        "GIT_PROJECT_ROOT": str(root),
        "GIT_HTTP_EXPORT_ALL": "1",
        "PATH": "/usr/bin:/bin",
    }
    for name, value in headers:
        key = name.upper().replace("-", "_")
        if key == "CONTENT_TYPE":
            env["CONTENT_TYPE"] = value
        elif key in ("CONTENT_LENGTH", "AUTHORIZATION", "TRANSFER_ENCODING") or key.startswith("PROXY"):
            continue
        else:
            env[f"HTTP_{key}"] = value
    return env


def split_cgi_response(output: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
    """(status, headers, body) of a CGI program's output (RFC 3875 section 6): the header
    lines up to the first empty line (CRLF or LF), ``Status: NNN reason`` taken out (200
    when absent). Raises ValueError for output without a header block."""
    for sep in (b"\r\n\r\n", b"\n\n"):
        head, found, body = output.partition(sep)
        if found:
            break
    else:
        raise ValueError("the CGI program wrote no header block")
    status, headers = 200, []
    for line in head.decode("latin-1").splitlines():
        name, colon, value = line.partition(":")
        if not colon:
            raise ValueError(f"not a CGI header line: {line[:80]!r}")
        if name.strip().lower() == "status":
            status = int(value.strip().split()[0])
        else:
            headers.append((name.strip(), value.strip()))
    return status, headers, body


def read_chunked(stream: io.BufferedIOBase, limit: int = MAX_BODY_BYTES) -> bytes:
    """The body of a ``Transfer-Encoding: chunked`` request (RFC 9112 section 7.1) read
    from ``stream``; raises ValueError past ``limit`` bytes or on a malformed chunk."""
    out = bytearray()
    while True:
        size_line = stream.readline(1024)
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise ValueError("malformed chunk size") from None
        if size == 0:
            while stream.readline(1024) not in (b"\r\n", b"\n", b""):
                pass  # trailer fields
            return bytes(out)
        if len(out) + size > limit:
            raise ValueError("request body too large")
        out += stream.read(size)
        stream.readline(1024)  # the chunk's CRLF


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    root: Path
    backend: str

    def _serve(self) -> None:
        try:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                body = read_chunked(self.rfile)
            else:
                length = int(self.headers.get("Content-Length") or 0)
                if length > MAX_BODY_BYTES:
                    raise ValueError("request body too large")
                body = self.rfile.read(length) if length else b""
        except ValueError as exc:
            self.send_error(400, str(exc))
            return
        env = cgi_environ(
            self.command, self.path, self.headers.items(), self.root, self.client_address[0], len(body)
        )
        try:
            done = subprocess.run(
                [self.backend], input=body, env=env, capture_output=True, timeout=CGI_TIMEOUT_S, check=False
            )
            status, headers, payload = split_cgi_response(done.stdout)
        except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
            self.send_error(500, f"git http-backend: {exc}")
            return
        self.send_response(status)
        for name, value in headers:
            if name.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
        if done.stderr:
            self.log_message("%s", done.stderr.decode(errors="replace").strip()[:500])

    do_GET = _serve
    do_POST = _serve


def server(root: Path, address: str, port: int, files: TlsFiles) -> ThreadingHTTPServer:
    """An https Git server of the repositories under ``root`` on ``address:port`` with the
    certificate in ``files`` (TLS 1.2 at least); not yet serving."""
    handler = type("Handler", (_Handler,), {"root": root.resolve(), "backend": backend_path()})
    return with_tls(ThreadingHTTPServer((address, port), handler), files)


def main(argv: list[str] | None = None) -> int:
    """``python -m swarm_infra.lab.gitserver --address A --port P --root DIR --tls DIR``."""
    p = argparse.ArgumentParser(description="serve the lab's Git repositories over https, read-only")
    p.add_argument("--address", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--root", type=Path, required=True, help="directory of bare repositories")
    p.add_argument("--tls", type=Path, required=True, help="the directory of tlsindex.ensure_tls")
    args = p.parse_args(argv)
    tls = TlsFiles(args.tls / "ca.pem", args.tls / "server.pem", args.tls / "server.key")
    os.umask(0o022)
    server(args.root, args.address, args.port, tls).serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
