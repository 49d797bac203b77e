"""The pull agent's package for a lab node, laid out from this controller's environment.

A provider installs the agent's package into the virtualenv at layout ``agent_venv``
(``swarm_infra.resolve.layout.AGENT_LOCAL``) before ``swarm node bootstrap``: a virtualenv
of the node's own Python with ``swarm-infra`` and what the agent runs (git verification
needs nothing from Python; resolving the fleet needs PyYAML, jsonschema and jsonschema-rs,
and paramiko for the host keys the inventory lists; gating on the earlier batches' reports
needs prometheus-client's text parser; applying needs ansible-core and the
``ansible.posix`` and ``community.general`` collections the roles name). The lab's
nodes have no package index for those (only Ray's wheelhouse) and must not reach PyPI on
each run, so the lab lays the same files out from the controller's own environment
(:func:`stage`): the installed distributions' files as their RECORD lists them, the
project's ``src/swarm_infra`` with ``schemas`` inside it as the wheel puts them
(pyproject's ``force-include``), and the console scripts for the node's interpreter. The
controller and the lab image are Debian 12 with Python 3.11 on x86_64, so the compiled
extension modules (cp311 manylinux) load in the node's Python as in the controller's. A lab
shortcut, like the Ray layer (:mod:`.rayvenv`): the node still makes its own virtualenv
(``python3 -m venv``) and runs everything with its own Python.
"""

from __future__ import annotations

import importlib.metadata as md
import io
import re
import tarfile
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

# What the agent imports or runs, by distribution; their requirements follow
# (:func:`closure`). ``ansible`` is the collections' distribution: only the collections
# below are taken from it (it holds a hundred).
ROOTS = (
    "PyYAML",
    "jsonschema",
    "jsonschema-rs",
    "cryptography",
    "paramiko",
    "ansible-core",
    "prometheus-client",
)
COLLECTIONS = ("ansible_collections/ansible/posix", "ansible_collections/community/general")
# Console scripts the agent runs: ``swarm`` (the service's ExecStart) and the Ansible CLI.
SCRIPTS = {
    "swarm": ("swarm_infra.cli", "main"),
    "ansible-playbook": ("ansible.cli.playbook", "main"),
    "ansible-galaxy": ("ansible.cli.galaxy", "main"),
}
NODE_PYTHON = "python3.11"


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(roots: Iterable[str]) -> list[str]:
    """The installed distributions ``roots`` need (themselves included), by name, sorted:
    each requirement without an extra whose environment marker holds here (this Python is
    the node's version), followed through the installed metadata. Raises
    PackageNotFoundError for one that is not installed."""
    from packaging.requirements import Requirement

    seen: dict[str, str] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        if _normal(name) in seen:
            continue
        dist = md.distribution(name)
        seen[_normal(name)] = dist.metadata["Name"]
        for line in dist.requires or ():
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            todo.append(req.name)
    return sorted(seen.values(), key=_normal)


def _dist_files(name: str, prefixes: tuple[str, ...] = ()) -> list[tuple[Path, str]]:
    """(installed file, path under site-packages) of distribution ``name``'s RECORD, its
    scripts and byte code left out; with ``prefixes``, only the files under them."""
    dist = md.distribution(name)
    out = []
    for f in dist.files or ():
        rel = PurePosixPath(str(f))
        if rel.parts[0] == ".." or "__pycache__" in rel.parts or rel.suffix == ".pyc":
            continue  # a console script (bin/) or byte code: made for the node below or by it
        if prefixes and not any(str(rel).startswith(p + "/") for p in prefixes):
            continue
        path = Path(str(dist.locate_file(f)))
        if path.is_file():
            out.append((path, str(rel)))
    return out


def _script(module: str, func: str, venv: str) -> str:
    return (
        f"#!{venv}/bin/python\n"
        "import sys\n"
        f"from {module} import {func}\n"
        "if __name__ == '__main__':\n"
        f"    sys.exit({func}())\n"
    )


def stage(project: Path, venv: str) -> bytes:
    """A tar archive (uncompressed) of the agent's package for a virtualenv at ``venv``
    on the node, paths relative to ``venv``: ``lib/python3.11/site-packages/...`` and
    ``bin/`` scripts (0755). ``project``: the checkout whose ``src/swarm_infra`` and
    ``schemas`` are installed."""
    site = f"lib/{NODE_PYTHON}/site-packages"
    files: list[tuple[Path, str]] = []
    for name in closure(ROOTS):
        files += _dist_files(name)
    files += _dist_files("ansible", COLLECTIONS)
    package = project / "src" / "swarm_infra"
    for path in sorted(package.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            files.append((path, f"swarm_infra/{path.relative_to(package)}"))
    for path in sorted((project / "schemas").glob("*.json")):
        files.append((path, f"swarm_infra/schemas/{path.name}"))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, rel in files:
            info = tar.gettarinfo(str(path), f"{site}/{rel}")
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mode = 0o644
            with open(path, "rb") as fh:
                tar.addfile(info, fh)
        for script, (module, func) in SCRIPTS.items():
            data = _script(module, func, venv).encode()
            info = tarfile.TarInfo(f"bin/{script}")
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def install_commands(venv: str) -> list[list[str]]:
    """What the node runs before the archive is unpacked into ``venv``: its own Python
    makes the virtualenv (no pip: nothing is installed from an index)."""
    return [["rm", "-rf", venv], ["python3", "-m", "venv", "--without-pip", venv]]


def unpack_locally(archive: bytes, venv: Path) -> None:
    """Unpack :func:`stage`'s archive into ``venv`` on this machine (tests)."""
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(venv, filter="data")
    for script in SCRIPTS:
        (venv / "bin" / script).chmod(0o755)
