"""The lab's package index over https: a static PEP 503 simple index, served with TLS.

pip installs a RayCluster's lock only from an https index with its certificate checked
(no pip "trusted host" ever), so the lab's index speaks TLS too. The lab keeps a CA of
its own in its cache (:func:`ensure_tls`: made once per machine; the keys are 0600 and never
leave the cache, nor enter Git) and issues the index a certificate for the service address
(an IP subjectAltName). The nodes trust that CA through pip's configuration
(``/etc/pip.conf``, written into each lab node by ``lab.node.prepare``), as a provider's
machines trust their own CA.

The index is a directory the wheelhouse is laid out into (:func:`build_index`:
``simple/index.html``, ``simple/<project>/index.html`` linking each wheel with its
``#sha256=`` fragment, PEP 503) and served read-only by Python's ``http.server`` wrapped in
``ssl`` (:func:`main`, run as ``python -m swarm_infra.lab.tlsindex``): no upload, no
dependency beyond the standard library.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import html
import ipaddress
import os
import re
import shutil
import ssl
import sys
from dataclasses import dataclass
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from ..nodeside.atomic import write_atomic

CA_NAME = "swarm lab package index CA"
CA_DAYS = 3650
SERVER_DAYS = 825


@dataclass(frozen=True)
class TlsFiles:
    """The lab index's TLS material in its directory: the CA's certificate (public, PEM),
    the server's certificate and its key (0600)."""

    ca: Path
    cert: Path
    key: Path


def ensure_tls(directory: Path, address: str) -> TlsFiles:
    """The CA and a server certificate for ``address`` (an IP address) in ``directory``
    (0700), made once: the CA (P-256, CA:TRUE, pathlen 0, keyCertSign) and the server's
    (subjectAltName IP ``address``, serverAuth). An existing CA is kept; the server's
    certificate is made again when it is missing or was issued for another address."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    files = TlsFiles(directory / "ca.pem", directory / "server.pem", directory / "server.key")
    ca_key_path = directory / "ca.key"
    now = datetime.datetime.now(datetime.UTC)
    pem = serialization.Encoding.PEM
    if not (files.ca.exists() and ca_key_path.exists()):
        ca_key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CA_NAME)])
        ca = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        private = ca_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        write_atomic(ca_key_path, private, 0o600)
        files.ca.write_bytes(ca.public_bytes(pem))
        files.cert.unlink(missing_ok=True)
    ca = x509.load_pem_x509_certificate(files.ca.read_bytes())
    loaded = serialization.load_pem_private_key(ca_key_path.read_bytes(), None)
    assert isinstance(loaded, ec.EllipticCurvePrivateKey)
    ip = ipaddress.ip_address(address)
    if files.cert.exists() and files.key.exists():
        current = x509.load_pem_x509_certificate(files.cert.read_bytes())
        sans = current.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        if ip in sans.get_values_for_type(x509.IPAddress) and current.issuer == ca.subject:
            return files
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, str(ip))]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=SERVER_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ip)]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(loaded, hashes.SHA256())
    )
    private = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    write_atomic(files.key, private, 0o600)
    files.cert.write_bytes(cert.public_bytes(pem))
    return files


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def build_index(wheels: Path, root: Path) -> int:
    """Lay the wheels of ``wheels`` out as a PEP 503 simple index under ``root`` (replaced):
    ``simple/index.html`` naming every project, ``simple/<project>/index.html`` linking
    ``/files/<wheel>#sha256=<hex>``, and ``files`` the wheelhouse itself (a symbolic link).
    Returns the number of wheels."""
    shutil.rmtree(root, ignore_errors=True)
    (root / "simple").mkdir(parents=True)
    (root / "files").symlink_to(wheels.resolve())
    projects: dict[str, list[Path]] = {}
    for wheel in sorted(wheels.glob("*.whl")):
        projects.setdefault(_canonical(wheel.name.split("-")[0]), []).append(wheel)
    page = "<!DOCTYPE html>\n<html><body>\n{}</body></html>\n"
    links = "".join(f'<a href="{html.escape(p)}/">{html.escape(p)}</a>\n' for p in sorted(projects))
    (root / "simple" / "index.html").write_text(page.format(links))
    for project, files in projects.items():
        (root / "simple" / project).mkdir()
        entries = "".join(
            f'<a href="/files/{html.escape(w.name)}#sha256={hashlib.sha256(w.read_bytes()).hexdigest()}">'
            f"{html.escape(w.name)}</a>\n"
            for w in files
        )
        (root / "simple" / project / "index.html").write_text(page.format(entries))
    return sum(len(f) for f in projects.values())


class _Handler(SimpleHTTPRequestHandler):
    def list_directory(self, path: str | os.PathLike[str]) -> None:
        self.send_error(404, "no listing")  # only index.html pages and files
        return None


def with_tls(httpd: ThreadingHTTPServer, files: TlsFiles) -> ThreadingHTTPServer:
    """``httpd`` serving https with the certificate in ``files`` (TLS 1.2 at least): the
    lab's package index and its Git server alike."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(files.cert), str(files.key))
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    return httpd


def server(root: Path, address: str, port: int, files: TlsFiles) -> ThreadingHTTPServer:
    """An https server of ``root`` on ``address:port`` with the certificate in ``files``
    (TLS 1.2 at least); not yet serving."""
    return with_tls(ThreadingHTTPServer((address, port), partial(_Handler, directory=str(root))), files)


def main(argv: list[str] | None = None) -> int:
    """``python -m swarm_infra.lab.tlsindex --address A --port P --root DIR --tls DIR``."""
    p = argparse.ArgumentParser(description="serve the lab's package index over https")
    p.add_argument("--address", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--root", type=Path, required=True, help="the index laid out by build_index")
    p.add_argument("--tls", type=Path, required=True, help="the directory of ensure_tls")
    args = p.parse_args(argv)
    tls = TlsFiles(args.tls / "ca.pem", args.tls / "server.pem", args.tls / "server.key")
    server(args.root, args.address, args.port, tls).serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
