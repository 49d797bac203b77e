"""Issue #22, supply chain: Ray's environment installs from a lock with hashes, over https
with certificate checks, and the review flags index and package changes.

Oracles: pip's own requirements parser for the lock's grammar (what pip would read is what
the lock says), ``cryptography`` for the CA, and pip itself against the lab's https index.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import shutil
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest

from swarm_infra.fleet.lockfile import ca_problem, parse_lock
from swarm_infra.lab import tlsindex
from swarm_infra.resolve import desired_state, load_fleet, validate
from swarm_infra.resolve.files import layer_files
from swarm_infra.resolve.ray import pip_environment

from .conftest import ROOT

H1, H2 = "a" * 64, "0123456789abcdef" * 4
LAB = [ROOT / "inventory" / "lab", ROOT / "policies" / "lab", ROOT / "policies" / "shared"]


# ------------------------------------------------------------------------ the lock


def test_a_lock_of_pins_with_hashes_parses() -> None:
    text = (
        "# comment\n\n"
        f"ray[tune,default]==2.60.0 \\\n    --hash=sha256:{H1} \\\n    --hash=sha256:{H2}  # two files\n"
        f"scikit_learn==1.9.1 --hash=sha256:{H1}\n"
    )
    pins, problems = parse_lock(text)
    assert problems == []
    assert [(p.requirement, p.hashes, p.line) for p in pins] == [
        ("ray[default,tune]==2.60.0", (H1, H2), 3),
        ("scikit_learn==1.9.1", (H1,), 6),
    ]


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("--index-url http://evil/simple/", "options are not allowed"),
        ("-i https://evil/simple/", "options are not allowed"),
        ("--trusted-host evil", "options are not allowed"),
        ("-e git+https://evil/x.git#egg=x", "options are not allowed"),
        ("-r other.txt", "options are not allowed"),
        (f"x @ https://evil/x.whl --hash=sha256:{H1}", "no URL"),
        ("ray==2.60.0", "needs --hash=sha256"),
        (f"ray>=2.60.0 --hash=sha256:{H1}", "exact version"),
        (f"ray===2.60.0 --hash=sha256:{H1}", "is not 'name==version"),  # PEP 440 arbitrary equality
        (f"ray==2.60.* --hash=sha256:{H1}", "is not 'name==version"),  # a wildcard is no pin
        (f"ray==2.60.0,!=2.59 --hash=sha256:{H1}", "is not 'name==version"),  # one specifier only
        (f"ray==2.60.0 --hash=sha256:{H1} --hash=md5:{H1[:32]}", "is not 'name==version"),
        (f"--hash=sha256:{H1} ray==2.60.0", "options are not allowed"),
        (f"ray==2.60.0; python_version>'3' --hash=sha256:{H1}", "environment markers"),
        ("ray==2.60.0 --hash=md5:0123456789abcdef0123456789abcdef", "is not 'name==version"),
        (f"ray==2.60.0 --hash=sha256:{H1.upper()}", "is not 'name==version"),
    ],
)
def test_a_lock_line_that_is_not_a_hashed_pin_is_refused_at_its_line(line: str, why: str) -> None:
    _, problems = parse_lock(f"# ok\nmsgpack==1.2.4 --hash=sha256:{H1}\n{line}\n")
    assert [n for n, _ in problems] == [3] and why in problems[0][1]


def test_a_name_pinned_twice_and_an_empty_lock_are_refused() -> None:
    _, problems = parse_lock(f"Scikit-Learn==1 --hash=sha256:{H1}\nscikit_learn==2 --hash=sha256:{H1}\n")
    assert problems == [(2, "scikit_learn is pinned twice (also on line 1)")]
    assert parse_lock("# nothing\n")[1] == [(1, "the lock pins nothing")]
    assert parse_lock(f"ray==1 --hash=sha256:{H1} \\\n")[1][0][1].startswith("the last line ends")


def test_the_lab_lock_is_what_pip_reads_it_as() -> None:
    """pip's own parser (the oracle) reads the same pins and hashes from the lab's lock."""
    from pip._internal.network.session import PipSession
    from pip._internal.req.req_file import parse_requirements

    path = ROOT / "policies" / "lab" / "ray-requirements.lock"
    pins, problems = parse_lock(path.read_text())
    assert problems == [] and len(pins) > 20
    theirs = {
        r.requirement.strip(): sorted(r.options["hashes"]["sha256"])
        for r in parse_requirements(str(path), session=PipSession())
    }
    assert theirs == {p.requirement: sorted(p.hashes) for p in pins}


# ------------------------------------------------------------------------ the CA


def _ca(tmp: Path) -> tlsindex.TlsFiles:
    return tlsindex.ensure_tls(tmp / "tls", "127.0.0.1")


def test_a_ca_file_must_hold_ca_certificates_only(tmp_path: Path) -> None:
    tls = _ca(tmp_path)
    assert ca_problem(tls.ca.read_bytes()) is None
    assert ca_problem(tls.ca.read_bytes() * 2) is None
    assert "is not a CA" in (ca_problem(tls.cert.read_bytes()) or "")
    assert "a private key must never" in (ca_problem(tls.ca.read_bytes() + tls.key.read_bytes()) or "")
    assert "no PEM certificate" in (ca_problem(b"hello\n") or "")
    assert (tls.ca.parent / "ca.key").stat().st_mode & 0o777 == 0o600
    assert tls.key.stat().st_mode & 0o777 == 0o600


# ------------------------------------------------------------ the node's Ray state


def _fleet_with_ca(tmp: Path) -> list[Path]:
    for d in ("inventory/lab", "policies/lab", "policies/shared"):
        shutil.copytree(ROOT / d, tmp / d)
    shutil.copy(_ca(tmp).ca, tmp / "policies" / "lab" / "index-ca.pem")
    ray = tmp / "policies" / "lab" / "ray.yaml"
    ray.write_text(
        ray.read_text().replace(
            'package_index: {url: "https://192.0.2.1:8765/simple/"}',
            'package_index: {url: "https://192.0.2.1:8765/simple/", ca_file: index-ca.pem}',
        )
    )
    return [tmp / d for d in ("inventory/lab", "policies/lab", "policies/shared")]


def test_ray_nodes_install_the_lock_with_hashes_and_certificate_checks(tmp_path: Path) -> None:
    nodes = desired_state(load_fleet(LAB))["nodes"]
    node = next(s for _, s in sorted(nodes.items()) if s["ray"])
    ray = node["ray"]
    assert ray is not None and ray["index_ca"] is None
    pins, _ = parse_lock((ROOT / "policies" / "lab" / "ray-requirements.lock").read_text())
    assert ray["requirements"] == [p.requirement for p in pins]  # every pin, not only Ray's
    assert "ray[data,default,serve,tune]==2.60.0" in ray["requirements"]
    env = pip_environment(node)
    assert env == {
        "PIP_INDEX_URL": "https://192.0.2.1:8765/simple/",
        "PIP_REQUIRE_HASHES": "1",
        "PIP_ONLY_BINARY": ":all:",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    files = {i["path"]: i for i in layer_files(node, "ray")}
    paths = node["layout"]["files"]
    lock = files[paths["ray_lock"]["path"]]
    assert (lock["owner"], lock["mode"]) == ("root", "0644")
    written, problems = parse_lock(lock["content"])
    assert problems == [] and [(p.requirement, p.hashes) for p in written] == [
        (p.requirement, p.hashes) for p in pins
    ]
    assert files[paths["ray_index_ca"]["path"]]["state"] == "absent"

    nodes = desired_state(load_fleet(_fleet_with_ca(tmp_path)))["nodes"]
    node = next(s for _, s in sorted(nodes.items()) if s["ray"])
    assert node["ray"] is not None and node["ray"]["index_ca"] is not None
    assert pip_environment(node)["PIP_CERT"] == paths["ray_index_ca"]["path"]
    ca = {i["path"]: i for i in layer_files(node, "ray")}[paths["ray_index_ca"]["path"]]
    assert ca["state"] == "file" and ca["content"] == (tmp_path / "tls" / "ca.pem").read_text()


def test_no_engine_turns_certificate_checks_off() -> None:
    for path in [ROOT / "roles" / "ray" / "tasks" / "main.yml", *(ROOT / "src").rglob("*.py")]:
        text = path.read_text()
        assert "PIP_TRUSTED_HOST" not in text and '--trusted-host"' not in text, path


def test_a_lock_file_in_a_symlink_out_of_the_fleet_is_refused(tmp_path: Path) -> None:
    paths = _fleet_with_ca(tmp_path)
    lock = tmp_path / "policies" / "lab" / "ray-requirements.lock"
    outside = tmp_path / "outside.lock"
    shutil.move(lock, outside)
    lock.symlink_to(outside)
    errors = validate(paths).report.errors
    assert [(e.rule, e.path) for e in errors] == [("file.outside-fleet", "$.spec.lock_file")]


# --------------------------------------------------------------- the lab's index


def _wheel(directory: Path) -> Path:
    """A minimal pure-Python wheel (PEP 427) named swarm_probe 1.0."""
    name = "swarm_probe-1.0-py3-none-any.whl"
    files = {
        "swarm_probe/__init__.py": b"",
        "swarm_probe-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: swarm-probe\nVersion: 1.0\n",
        "swarm_probe-1.0.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = ""
    for n, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{n},sha256={digest},{len(data)}\n"
    record += "swarm_probe-1.0.dist-info/RECORD,,\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for n, data in files.items():
            z.writestr(n, data)
        z.writestr("swarm_probe-1.0.dist-info/RECORD", record)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_bytes(buf.getvalue())
    return directory / name


def test_pip_installs_a_hashed_lock_from_the_lab_index_over_https_and_only_with_its_ca(
    tmp_path: Path,
) -> None:
    """The real pip against the lab's index served by tlsindex: with the lab CA and the
    right hash it downloads; without the CA, or with another hash, it refuses."""
    wheel = _wheel(tmp_path / "wheels")
    tls = _ca(tmp_path)
    assert tlsindex.build_index(tmp_path / "wheels", tmp_path / "root") == 1
    httpd = tlsindex.server(tmp_path / "root", "127.0.0.1", 0, tls)
    port = httpd.server_address[1]
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    # requests lets REQUESTS_CA_BUNDLE (and CURL_CA_BUNDLE) override pip's --cert: a node's
    # pip runs without them, and so does this one.
    env = {k: v for k, v in os.environ.items() if k not in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")}
    try:

        def pip(lock: str, *extra: str) -> subprocess.CompletedProcess[str]:
            (tmp_path / "lock.txt").write_text(lock)
            shutil.rmtree(tmp_path / "dest", ignore_errors=True)
            return subprocess.run(
                [sys.executable, "-m", "pip", "download", "--isolated", "--no-cache-dir", "--quiet",
                 "--require-hashes", "--only-binary=:all:", "--index-url", f"https://127.0.0.1:{port}/simple/",
                 "--dest", str(tmp_path / "dest"), "-r", str(tmp_path / "lock.txt"), *extra],
                capture_output=True, text=True, timeout=120, env=env,
            )  # fmt: skip

        good = f"swarm-probe==1.0 --hash=sha256:{hashlib.sha256(wheel.read_bytes()).hexdigest()}\n"
        ok = pip(good, "--cert", str(tls.ca))
        assert ok.returncode == 0, ok.stderr
        assert (tmp_path / "dest" / wheel.name).read_bytes() == wheel.read_bytes()
        untrusted = pip(good)  # pip's own trust store: the lab CA is not in it
        assert untrusted.returncode != 0 and "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr
        tampered = pip(f"swarm-probe==1.0 --hash=sha256:{H1}\n", "--cert", str(tls.ca))
        assert tampered.returncode != 0 and "DO NOT MATCH THE HASHES" in tampered.stderr
    finally:
        httpd.shutdown()
        httpd.server_close()
