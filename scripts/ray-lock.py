#!/usr/bin/env python3
"""Write a RayCluster's lock file (spec.lock_file): Ray with its extras, the packages, and
every dependency, each ``name==version --hash=sha256:...``, for the nodes' platform
(Debian 12: CPython 3.11, manylinux x86_64, wheels only).

Two sources of the pins and hashes:

* pip's resolver (default): ``pip install --dry-run --report`` for the nodes' Python and
  platform against the index pip is configured with (PyPI, or ``--index-url``); the hash of
  each pin is the sha256 of the wheel pip chose, as the index publishes it. Nothing is
  installed, and wheels are not downloaded where the index serves their metadata (PEP 658).
* ``--wheelhouse DIR``: the wheels already in DIR (``pip download``), hashed here; the pins
  are their file names' project and version.

    scripts/ray-lock.py --ray-version 2.60.0 --package scikit-learn \\
        --output policies/lab/ray-requirements.lock

Check the result against the index it names with ``pip download --require-hashes
--only-binary=:all: --python-version 3.11 --platform manylinux2014_x86_64 -r LOCK``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from swarm_infra.fleet.lockfile import canonical_name, parse_lock  # noqa: E402
from swarm_infra.lab.mirror import NODE_PLATFORMS, NODE_PYTHON  # noqa: E402
from swarm_infra.resolve.ray import RAY_EXTRAS  # noqa: E402


def resolved(requirements: list[str], index_url: str | None) -> list[tuple[str, str, list[str], str]]:
    """(name, version, extras, sha256) of every distribution pip's resolver picks."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        platforms = [arg for p in NODE_PLATFORMS for arg in ("--platform", p)]
        index = ["--index-url", index_url] if index_url else []
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
             "--report", str(report), "--only-binary=:all:", "--python-version", NODE_PYTHON,
             "--implementation", "cp", *platforms, "--target", str(Path(tmp) / "target"), *index,
             *requirements],
            check=True,
        )  # fmt: skip
        data = json.loads(report.read_text())
    out = []
    for item in data["install"]:
        meta, info = item["metadata"], item["download_info"]
        digest = (info.get("archive_info") or {}).get("hashes", {}).get("sha256")
        if not digest:
            raise SystemExit(f"ray-lock: the index gave no sha256 for {meta['name']} {meta['version']}")
        out.append((meta["name"], meta["version"], sorted(item.get("requested_extras") or []), digest))
    return out


def from_wheelhouse(directory: Path, extras: dict[str, list[str]]) -> list[tuple[str, str, list[str], str]]:
    """(name, version, extras, sha256) of each wheel in ``directory`` (one per project)."""
    out = []
    for wheel in sorted(directory.glob("*.whl")):
        name, version = wheel.name.split("-")[:2]
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        out.append((name, version, extras.get(canonical_name(name), []), digest))
    return out


def render(pins: list[tuple[str, str, list[str], str]], command: str) -> str:
    lines = [
        "# Ray's environment on every Ray node: pip install --require-hashes --only-binary=:all: -r",
        f"# For CPython {NODE_PYTHON}, manylinux x86_64 (Debian 12). Made by: {command}",
    ]
    for name, version, extras, digest in sorted(pins, key=lambda p: canonical_name(p[0])):
        extra = f"[{','.join(extras)}]" if extras else ""
        lines.append(f"{name}{extra}=={version} \\\n    --hash=sha256:{digest}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--ray-version", required=True, help="the fleet's Ray version (Cluster spec.ray_version), e.g. 2.60.0"
    )
    p.add_argument("--package", action="append", default=[], help="an entry of spec.packages (repeatable)")
    p.add_argument("--index-url", help="resolve against this index instead of pip's configured one")
    p.add_argument("--wheelhouse", type=Path, help="hash the wheels of this directory instead of resolving")
    p.add_argument("--output", type=Path, required=True, help="the lock file to write")
    args = p.parse_args(argv)
    ray = f"ray[{RAY_EXTRAS}]=={args.ray_version}"
    if args.wheelhouse:
        pins = from_wheelhouse(args.wheelhouse, {"ray": sorted(RAY_EXTRAS.split(","))})
    else:
        pins = resolved([ray, *args.package], args.index_url)
    command = (
        "scripts/ray-lock.py --ray-version "
        + args.ray_version
        + "".join(f" --package {x}" for x in args.package)
    )
    text = render(pins, command)
    _, problems = parse_lock(text)
    if problems:
        raise SystemExit(f"ray-lock: the lock would not validate: {problems[:3]}")
    args.output.write_text(text)
    print(f"ray-lock: {len(pins)} pins written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
