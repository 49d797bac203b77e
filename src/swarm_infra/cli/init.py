"""``swarm init NAME``: a new fleet to start from, as Kubespray's ``inventory/sample``.

Writes ``inventory/NAME/`` (one Site, one GPU Node) and ``policies/NAME/`` (the Mesh, the
host and GPU profiles, their Assignments, a Priority and an Allocation, the Cluster and a
Rollout) under ROOT, from the templates in ``swarm_infra/data/init/``. Every value a
newcomer must replace is commented ``CHANGE`` in the files. The fleet carries its own
profiles (named after it), so it validates and plans at once whether or not ROOT has a
``policies/shared``: ``swarm validate --fleet NAME`` reads that too when it is there, and
no name of the new fleet's can clash with it.

NAME is checked before anything is read or written: a DNS-1123 label short enough that
every name made from it is one too, and not ``shared``. It then replaces the placeholder
of the templates; each rendered file is parsed back and must hold exactly the template's
documents with the placeholder replaced, so no NAME could add a key, a document or a line.
Nothing is overwritten: every target is checked before the first file is written.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shlex
import sys
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from ..errors import InitError as InitError
from ..fleet.diagnostics import excerpt, one_line
from .common import EXIT_INVALID, EXIT_OK, emit

PLACEHOLDER = "__FLEET__"
# The templates, by directory ("inventory" or "policies", each written to DIR/NAME/) and
# file name, in the order the files are written and listed: explicit, so that a stray file
# in the package never ships into a user's fleet (a test keeps the list and the directory
# equal).
TEMPLATES: tuple[tuple[str, str], ...] = (
    ("inventory", "sites.yaml"),
    ("inventory", "nodes.yaml"),
    ("policies", "mesh.yaml"),
    ("policies", "profiles.yaml"),
    ("policies", "assignments.yaml"),
    ("policies", "scheduling.yaml"),
    ("policies", "cluster.yaml"),
    ("policies", "rollout.yaml"),
)
# NAME becomes metadata.name (Cluster, Mesh, Allocation, Rollout), a label value and the
# prefix of the profiles' names, so it is a DNS-1123 label, as the schemas' names are
# (schemas/common.schema.json $defs/name); every such name is also a --fleet name
# (fleet/sources.py FLEET_NAME).
NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
NAME_MAX = 63  # characters of a DNS-1123 label
# policies/shared is read by every fleet (fleet/sources.py convention_paths): a fleet of
# that name would be read twice.
RESERVED = frozenset({"shared"})
# A name made from the placeholder in the templates: the placeholder and what follows it.
_DERIVED = re.compile(re.escape(PLACEHOLDER) + r"[-a-z0-9]*")


def template_texts() -> dict[tuple[str, str], str]:
    """``{(directory, file name): template text}`` for every entry of :data:`TEMPLATES`,
    read from the package (``swarm_infra/data/init/``). Raises ``OSError`` when one is
    missing (a broken installation)."""
    base = resources.files("swarm_infra") / "data" / "init"
    return {(d, f): (base / d / f).read_text("utf-8") for d, f in TEMPLATES}


def longest_name(texts: dict[tuple[str, str], str]) -> int:
    """The longest NAME the templates take: every name they make from the placeholder
    (``__FLEET__-gpu-node``) must stay within a DNS-1123 label's 63 characters."""
    suffix = max(len(m[0]) - len(PLACEHOLDER) for t in texts.values() for m in _DERIVED.finditer(t))
    return NAME_MAX - suffix


def check_name(name: str, longest: int) -> None:
    """Raise :class:`InitError` unless ``name`` is a DNS-1123 label of at most ``longest``
    characters and not reserved. The message echoes the name escaped (``repr``, clipped)."""
    shown = excerpt(name)
    if not NAME.fullmatch(name):
        raise InitError(
            f"{shown} is not a fleet name: lower-case letters, digits and '-', starting and "
            "ending with a letter or digit (a DNS-1123 label, such as my-fleet)"
        )
    if len(name) > longest:
        raise InitError(
            f"{shown} is {len(name)} characters; a fleet name here is at most {longest} "
            f"(the profiles' names add to it and must stay within {NAME_MAX})"
        )
    if name in RESERVED:
        raise InitError(f"{shown} is reserved: policies/{name} is read by every fleet")


def _replaced(value: Any, name: str) -> Any:
    """``value`` (parsed YAML) with the placeholder replaced by ``name`` in every string,
    keys included: what the rendered file must parse to."""
    if isinstance(value, str):
        return value.replace(PLACEHOLDER, name)
    if isinstance(value, dict):
        return {_replaced(k, name): _replaced(v, name) for k, v in value.items()}
    if isinstance(value, list):
        return [_replaced(v, name) for v in value]
    return value


def render(texts: dict[tuple[str, str], str], name: str) -> dict[Path, str]:
    """``{path relative to ROOT: text}``: each template with the placeholder replaced by
    ``name`` (checked by :func:`check_name` first), as ``inventory/NAME/sites.yaml`` etc.

    Raises ``RuntimeError`` when a rendered file does not parse to the template's documents
    with the placeholder replaced (the name changed the YAML's structure: a template that
    does not quote it, since a checked name cannot).
    """
    out: dict[Path, str] = {}
    for (directory, file), text in texts.items():
        rendered = text.replace(PLACEHOLDER, name)
        expected = [_replaced(d, name) for d in yaml.safe_load_all(text)]
        try:
            same = list(yaml.safe_load_all(rendered)) == expected
        except yaml.YAMLError:
            same = False
        if not same:
            raise RuntimeError(f"template {directory}/{file}: the name {name!r} changes its YAML")
        out[Path(directory) / name / file] = rendered
    return out


def _shown(path: Path) -> str:
    """A path as one printable line: control characters and undecodable bytes escaped."""
    text = os.fspath(path)
    return one_line(text.encode("utf-8", "backslashreplace").decode("utf-8"))


def check_targets(root: Path, files: dict[Path, str]) -> None:
    """Raise :class:`InitError`, naming the first path in the way, unless ``root`` is a
    directory, ``inventory`` and ``policies`` in it are directories or absent, and each
    fleet directory (``inventory/NAME``, ``policies/NAME``) is absent or an empty directory.
    Nothing is written: all is checked before the first write."""
    if not root.is_dir():
        raise InitError(f"{_shown(root)} is not a directory (--dir ROOT: where inventory/ and policies/ are)")
    for directory in sorted({p.parent for p in files}):
        above, target = root / directory.parent, root / directory
        if os.path.lexists(above) and not above.is_dir():
            raise InitError(f"{_shown(above)} is not a directory; nothing was written")
        if not os.path.lexists(target):  # lexists: a dangling link is in the way too
            continue
        # A link could point the fleet outside ROOT, and a fleet directory with other files
        # in it would validate as one fleet with them: only an empty directory is taken.
        if target.is_symlink() or not target.is_dir() or any(target.iterdir()):
            raise InitError(f"{_shown(target)} already exists; nothing was written (choose another NAME)")


def write(root: Path, files: dict[Path, str]) -> None:
    """Write ``files`` under ``root``, each created exclusively (a file that appeared since
    :func:`check_targets` is never overwritten), with ``\\n`` line ends whatever the platform.
    On ``OSError``, removes what it wrote and the directories it made, then re-raises."""
    written: list[Path] = []
    made: list[Path] = []
    try:
        for path, text in files.items():
            for parent in reversed((root / path).parents):
                if not parent.exists():
                    parent.mkdir()
                    made.append(parent)
            with open(root / path, "x", encoding="utf-8", newline="\n") as f:
                written.append(root / path)
                f.write(text)
    except OSError:
        for p in written:
            p.unlink(missing_ok=True)
        for d in reversed(made):
            with contextlib.suppress(OSError):  # not empty: another writer's files are in it
                d.rmdir()
        raise


def _next_steps(root: Path, name: str) -> Iterator[str]:
    """The lines printed after the files: what to edit, then validate, plan, converge."""
    yield "next:"
    if root.resolve() != Path.cwd().resolve():
        yield f"  cd {shlex.quote(_shown(root))}"
    yield f"  grep -rn CHANGE inventory/{name} policies/{name}   # the values to replace with yours"
    yield f"  swarm validate --fleet {name}"
    yield f"  swarm plan --fleet {name}"
    yield f"  swarm converge --fleet {name} --check   # from a checkout of this repository (playbooks/)"


def cmd_init(args: argparse.Namespace) -> int:
    root = Path(args.dir)
    try:
        texts = template_texts()
        check_name(args.name, longest_name(texts))
        files = render(texts, args.name)
        check_targets(root, files)
    except InitError as exc:
        emit(f"swarm init: {exc}", sys.stderr)
        return EXIT_INVALID
    except OSError as exc:  # the package's templates, or ROOT, unreadable
        emit(f"swarm init: {one_line(str(exc))}; nothing was written", sys.stderr)
        return EXIT_INVALID
    try:
        write(root, files)
    except OSError as exc:  # what it wrote is removed again: nothing was done
        emit(f"swarm init: {one_line(str(exc))}; nothing was written", sys.stderr)
        return EXIT_INVALID
    emit(f"swarm init: wrote fleet {args.name} under {_shown(root)}:")
    for path in files:
        emit(f"  {path.as_posix()}")
    for line in _next_steps(root, args.name):
        emit(line)
    return EXIT_OK


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "init",
        help="write a new, small fleet to start from (inventory/NAME, policies/NAME)",
        description="Write a small, commented fleet that validates and plans at once: "
        "inventory/NAME (one Site, one GPU Node with its hardware and SSH target) and "
        "policies/NAME (the Mesh, host and GPU profiles and their Assignments, a Priority, an "
        "Allocation, the Cluster and a Rollout) under ROOT. The values to replace with yours "
        "are marked CHANGE. The fleet holds every profile it uses, so it needs no "
        "policies/shared. Nothing is overwritten: when a file or a non-empty directory is in "
        "the way, nothing is written.",
        epilog="Exit codes: 0 written; 2 a bad NAME or ROOT, or a target that exists (nothing "
        "written); 1 a write failed (what was written is removed). Example: swarm init my-fleet "
        "&& swarm validate --fleet my-fleet",
    )
    p.add_argument("name", metavar="NAME", help="the fleet's name: a DNS-1123 label, such as my-fleet")
    p.add_argument(
        "--dir", default=".", metavar="ROOT", help="where inventory/ and policies/ are (default: .)"
    )
    p.set_defaults(func=cmd_init)
