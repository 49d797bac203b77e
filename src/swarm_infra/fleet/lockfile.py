"""Files a policy names besides itself: Ray's lock file and a package index's CA certificate.

A RayCluster names two files of the repository (paths relative to the policy file's
directory): ``spec.lock_file``, the pip requirements every node's Ray environment installs
with ``pip install --require-hashes -r`` (pip's hash-checking mode), and optionally
``spec.package_index.ca_file``, the PEM certificates of a private CA that pip trusts for
the index (``pip --cert``). This module reads them (:func:`read_referenced`: inside the
directories the fleet was read from, like the fleet's YAML), parses the lock
(:func:`parse_lock`) and checks the CA (:func:`ca_problem`). Pure but for reading the file.

The lock's grammar (a strict subset of pip's requirements file format,
https://pip.pypa.io/en/stable/reference/requirements-file-format/ and
https://pip.pypa.io/en/stable/topics/secure-installs/#hash-checking-mode): one requirement
per logical line, ``name==version`` or ``name[extra,...]==version``, followed by one or more
``--hash=sha256:<64 lowercase hex>``; a line may continue on the next with a trailing
``\\``; ``#`` starts a comment (at the start of a line or after whitespace); blank lines
are allowed. Nothing else: no options (``-i``, ``--index-url``, a trusted host, ``-e``,
``-r``, ``-c``), no URLs or paths, no environment markers, no other hash algorithm, no
name twice. Whatever the lock may say, it cannot choose an index or turn a check off.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

MAX_LOCK_BYTES = 1 << 20  # a lock of Ray and its dependencies is about 20 KiB
MAX_CA_BYTES = 64 << 10  # a handful of PEM certificates
HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")
_COMMENT = re.compile(r"(^|\s)#.*$")


def canonical_name(name: str) -> str:
    """PEP 503's normalised project name (lower case, runs of ``-``, ``_``, ``.`` one ``-``):
    ``packaging.utils.canonicalize_name``, as pip compares names."""
    return canonicalize_name(name)


def _pinned(line: str) -> tuple[str, tuple[str, ...], str, tuple[str, ...]] | None:
    """(name, sorted extras, version, sha256 hashes) of one logical line of the lock, None
    when it is not exactly a pin: a PEP 508 requirement (``packaging.requirements``) with no
    URL and no marker, one ``==`` specifier of a PEP 440 version (no wildcard), then one or
    more ``--hash=sha256:<64 lowercase hex>`` and nothing else."""
    words = line.split()
    first = next((i for i, w in enumerate(words) if w.startswith("--hash=")), len(words))
    hashes = words[first:]
    if not first or not hashes or not all(HASH.fullmatch(h) for h in hashes):
        return None
    try:
        requirement = Requirement(" ".join(words[:first]))
    except InvalidRequirement:
        return None
    specifiers = list(requirement.specifier)
    if requirement.url or requirement.marker or len(specifiers) != 1:
        return None
    (pin,) = specifiers
    if pin.operator != "==" or pin.version.endswith(".*"):
        return None
    try:
        Version(pin.version)
    except InvalidVersion:
        return None
    return (
        requirement.name,
        tuple(sorted(requirement.extras)),
        pin.version,
        tuple(h.removeprefix("--hash=sha256:") for h in hashes),
    )


@dataclass(frozen=True, slots=True)
class Pin:
    """One requirement of a lock: the project ``name`` as written, its ``extras`` (sorted),
    the exact ``version``, the sha256 ``hashes`` (hex) pip accepts for its file, and the
    1-based ``line`` it starts on."""

    name: str
    extras: tuple[str, ...]
    version: str
    hashes: tuple[str, ...]
    line: int

    @property
    def requirement(self) -> str:
        """``name[extras]==version``: what pip and ``requirements_missing`` read."""
        extras = f"[{','.join(self.extras)}]" if self.extras else ""
        return f"{self.name}{extras}=={self.version}"


def parse_lock(text: str) -> tuple[list[Pin], list[tuple[int, str]]]:
    """The pins of a lock file's ``text``, and its problems as ``(line, message)`` (1-based
    lines; a lock with problems must not be used). See the module's grammar."""
    pins: list[Pin] = []
    problems: list[tuple[int, str]] = []
    seen: dict[str, int] = {}
    logical: list[tuple[int, str]] = []
    start, buffer = 0, ""
    for number, raw in enumerate(text.splitlines(), start=1):
        line = _COMMENT.sub("", raw).rstrip()
        if not buffer:
            start = number
        if line.endswith("\\"):
            buffer += line[:-1] + " "
            continue
        buffer += line
        logical.append((start, buffer.strip()))
        buffer = ""
    if buffer.strip():
        problems.append((start, "the last line ends with a continuation '\\' and nothing follows"))
    for number, line in logical:
        if not line:
            continue
        pinned = _pinned(line)
        if pinned is None:
            problems.append((number, _why(line)))
            continue
        name, extras, version, hashes = pinned
        key = canonical_name(name)
        if key in seen:
            problems.append((number, f"{name} is pinned twice (also on line {seen[key]})"))
            continue
        seen[key] = number
        pins.append(Pin(name, extras, version, hashes, number))
    if not pins and not problems:
        problems.append((1, "the lock pins nothing"))
    return pins, problems


def lock_text(pins: tuple[Pin, ...] | list[Pin]) -> str:
    """A lock file's text for ``pins`` (one line each, its hashes after it): what pip reads
    in hash-checking mode."""
    return "".join(" ".join([p.requirement, *(f"--hash=sha256:{h}" for h in p.hashes)]) + "\n" for p in pins)


def _why(line: str) -> str:
    shown = line if len(line) <= 80 else line[:77] + "..."
    first = line.split()[0]
    if first.startswith("-"):
        return (
            f"{shown!r}: options are not allowed in a lock (the index, its certificate and "
            "hash checking come from the RayCluster policy, not from the lock)"
        )
    if "://" in line or first.startswith((".", "/")) or "@" in first:
        return (
            f"{shown!r}: only name==version pins from the declared index (no URL, path or direct reference)"
        )
    if ";" in line:
        return f"{shown!r}: no environment markers (the lock is for the nodes' one platform)"
    if "==" not in first:
        return f"{shown!r}: every line pins an exact version (name==version)"
    if "--hash=" not in line:
        return f"{shown!r}: every pin needs --hash=sha256:<64 hex> (pip's hash-checking mode)"
    return f"{shown!r} is not 'name==version --hash=sha256:<64 lowercase hex> ...'"


def ca_problem(data: bytes) -> str | None:
    """Why ``data`` is not a CA file pip can use (``--cert``): None when it is one or more PEM
    X.509 certificates, each a CA (basicConstraints CA:TRUE), and nothing else but
    whitespace between them."""
    from cryptography import x509

    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        return "not a PEM file (not ASCII text)"
    blocks = re.findall(r"-----BEGIN CERTIFICATE-----\r?\n.*?-----END CERTIFICATE-----", text, re.S)
    if not blocks:
        return "holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
    rest = text
    for block in blocks:
        rest = rest.replace(block, "", 1)
    if rest.strip():
        return "holds something besides PEM certificates (a private key must never be in the repository)"
    for i, block in enumerate(blocks, start=1):
        try:
            cert = x509.load_pem_x509_certificate(block.encode())
        except ValueError as exc:
            return f"certificate {i} does not parse: {exc}"
        try:
            ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        except x509.ExtensionNotFound:
            ca = False
        if not ca:
            return f"certificate {i} ({cert.subject.rfc4514_string()}) is not a CA (basicConstraints CA:TRUE)"
    return None


def normalised_pem(data: bytes) -> str:
    """The PEM certificates of a CA file that :func:`ca_problem` accepted, re-encoded one
    after the other (what the node's file holds: nothing of the original but them)."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    return "".join(c.public_bytes(Encoding.PEM).decode() for c in x509.load_pem_x509_certificates(data))


def read_referenced(
    base: Path, name: str, roots: list[str], limit: int
) -> tuple[Path, bytes | None, tuple[str, str] | None]:
    """Read the file ``name`` (relative to the directory ``base`` of the policy naming it),
    which must lie inside one of ``roots`` (real paths of the directories the fleet was
    read from). Returns ``(path, data, None)``, or ``(path, None, (rule, message))`` with
    rule ``file.outside-fleet`` (absolute, or leading out of them through ``..`` or a
    symbolic link), ``file.missing``, ``file.not-regular``, ``file.too-large`` (over
    ``limit`` bytes) or ``file.unreadable``."""
    path = base / name
    if os.path.isabs(name):
        return (
            path,
            None,
            ("file.outside-fleet", f"{name!r} is absolute; name a file of the fleet's directories"),
        )
    real = os.path.realpath(path)
    if not any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in roots):
        return (
            path,
            None,
            (
                "file.outside-fleet",
                f"{name!r} leads out of the fleet's directories; a fleet reads only its own files",
            ),
        )
    try:
        st = os.stat(real)
    except FileNotFoundError:
        return path, None, ("file.missing", f"no such file: {path}")
    except OSError as exc:
        return path, None, ("file.unreadable", f"cannot read {path}: {exc.strerror or exc}")
    if not stat.S_ISREG(st.st_mode):
        return path, None, ("file.not-regular", f"{path} is not a regular file")
    if st.st_size > limit:
        return path, None, ("file.too-large", f"{path} is {st.st_size} bytes; at most {limit}")
    try:
        with open(real, "rb") as fh:
            return path, fh.read(limit + 1)[:limit], None
    except OSError as exc:
        return path, None, ("file.unreadable", f"cannot read {path}: {exc.strerror or exc}")
