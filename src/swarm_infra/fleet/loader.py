"""Read fleet files: find them, parse YAML fast, refuse what could exhaust the machine.

Parsing uses libyaml (``yaml.CSafeLoader``): its C parser and composer build the node graph
and Python builds the values. The limits are enforced where libyaml calls back into Python
(the resolver's ``descend_resolver``/``ascend_resolver`` hooks run for every node it
composes), so a hostile file is refused *before* its value is built, at the line concerned:

* ``file.too-large``: more than :data:`MAX_FILE_BYTES` bytes (checked before reading);
* ``yaml.depth``: collections nested deeper than :data:`MAX_DEPTH` (libyaml's composer
  recurses in C: 100,000 levels overflow its stack);
* ``yaml.nodes``: more than :data:`MAX_NODES` nodes in one file;
* ``yaml.documents``: more than :data:`MAX_DOCUMENTS` documents (``---``) in one file;
* ``yaml.alias-budget``: aliases that stand for more than :data:`MAX_ALIAS_NODES` nodes, or
  :data:`MAX_ALIAS_BYTES` characters of scalar text, in all (an alias bomb is a few lines
  that expand to billions of nodes, or one long scalar used a hundred thousand times);
* ``yaml.alias-cycle``: an alias inside the node it names (a value that contains itself);
* ``yaml.duplicate-key``: a mapping key given twice (YAML forbids it; PyYAML keeps the last);
* ``yaml.syntax`` and ``yaml.encoding`` (not UTF-8, or a control character such as NUL), at
  the character's line and column.

Files are found by :func:`find_files`; what cannot be read is an error naming the path
(``file.dangling-symlink``, ``file.symlink-loop``, ``file.not-regular``,
``file.unreadable``, ``file.outside-fleet``), never skipped. Parsing runs in a process
pool when the fleet is large (the parse is CPU-bound and the GIL would serialise threads).
"""

from __future__ import annotations

import contextlib
import errno
import gc
import math
import os
import re
import stat
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from .diagnostics import Diagnostic, PathPart, Source, excerpt, json_path

try:
    _Base: type = yaml.CSafeLoader
except AttributeError:  # PyYAML built without libyaml: correct, only slower
    _Base = yaml.SafeLoader

YAML_SUFFIXES = (".yaml", ".yml")
# Below this many bytes a process pool costs more (fork + pickling) than it saves.
PARALLEL_MIN_BYTES = 2 * 1024 * 1024

MAX_FILE_BYTES = 16 * 2**20  # a 10,000-node fleet is 3.7 MiB in all
MAX_DEPTH = 64  # fleet documents nest about 8 levels
MAX_NODES = 250_000  # per file: ~4,500 fleet nodes (one site is ~200); ~100 MiB of node graph at most
MAX_ALIAS_NODES = 100_000  # per file: nodes that aliases stand for, counted at every use
MAX_ALIAS_BYTES = MAX_FILE_BYTES  # per file: scalar text that aliases stand for, at every use
MAX_DOCUMENTS = 20_000  # per file: four times the documents of a file at MAX_NODES

_STR = "tag:yaml.org,2002:str"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_MERGE = "tag:yaml.org,2002:merge"
# A plain decimal integer that int() reads exactly as YAML 1.1 does: no sign, '_', base
# prefix or leading zero (YAML 1.1 reads 010 as octal); the rest go through PyYAML.
_DECIMAL = re.compile(r"[1-9][0-9]{0,17}|0").fullmatch
_PLAIN_TAGS: dict[str, str] = {}  # plain scalar text -> resolved tag (see FleetLoader.resolve)
_PLAIN_TAGS_MAX = 100_000
_SPECIAL_KEYS = (_MERGE, "tag:yaml.org,2002:value")  # keys PyYAML's flatten_mapping rewrites


@dataclass(frozen=True, slots=True)
class RawDocument:
    """One parsed YAML document and where it came from. ``data`` is untrusted.

    ``odd_numbers``: the document holds a float that is integral (``2.0``) or not finite
    (``.nan``, ``.inf``), which the schema step checks against what each field expects.
    ``loader_errors``: the loader reported an error inside it (a duplicate key); its name
    counts as declared but it takes no part in the semantic checks.
    """

    source: Source
    data: Any
    odd_numbers: bool = False
    loader_errors: bool = False


class LimitExceeded(yaml.YAMLError):
    """A file breaks one of the limits: ``rule``, ``message``, where (``mark``, ``path``)."""

    def __init__(self, rule: str, message: str, mark: Any, path: tuple[PathPart, ...] = ()) -> None:
        super().__init__(message)
        self.rule, self.message, self.mark, self.path = rule, message, mark, path


def _hint(parent: Node | None, index: Any) -> Any:
    """The mark nearest to the node about to be composed under ``parent`` at ``index``: its
    key for a mapping value, else the end of the previous sibling, else the parent's start."""
    if isinstance(index, Node):
        return index.start_mark
    if parent is None:
        return None
    if parent.value:
        last = parent.value[-1]
        return (last[1] if isinstance(last, tuple) else last).end_mark
    return parent.start_mark


class FleetLoader(_Base):  # type: ignore[misc]  # _Base is picked at run time: mypy sees a plain type
    """``CSafeLoader`` with this module's limits, duplicate-key detection and a record of
    integral and non-finite floats. Give it the file's bytes (libyaml decodes them)."""

    def __init__(self, stream: bytes | str) -> None:
        super().__init__(stream)
        self.depth = 0
        self.nodes = 0
        self.duplicates: list[tuple[MappingNode, Node, Node]] = []  # mapping, repeated key, first
        self.odd_numbers = False

    # -- composition (called by libyaml's C composer for every node it builds) --------------

    def descend_resolver(self, parent: Node | None, index: Any) -> None:
        self.depth += 1
        self.nodes += 1
        if self.depth > MAX_DEPTH or self.nodes > MAX_NODES:
            self._refuse(parent, index)

    def ascend_resolver(self) -> None:
        self.depth -= 1

    def _refuse(self, parent: Node | None, index: Any) -> None:
        if self.depth > MAX_DEPTH:
            raise LimitExceeded(
                "yaml.depth",
                f"collections nest deeper than {MAX_DEPTH} levels here; fleet documents need about 8",
                _hint(parent, index),
            )
        raise LimitExceeded(
            "yaml.nodes",
            f"the file holds more than {MAX_NODES:,} YAML nodes; split it (one file per site, say)",
            _hint(parent, index),
        )

    def resolve(self, kind: type, value: Any, implicit: tuple[bool, bool]) -> str:
        """The tag of a node without one (``yaml.resolver.BaseResolver.resolve``, memoised).

        With no path resolvers (none in a safe loader) a plain scalar's tag depends only on
        its text, and every other node's on its kind; fleet files repeat the same keys and
        values thousands of times, and the resolver's regular expressions were a fifth of
        the parse.
        """
        if kind is ScalarNode:
            if not implicit[0]:
                return _STR
            tag = _PLAIN_TAGS.get(value)
            if tag is None:
                if len(_PLAIN_TAGS) >= _PLAIN_TAGS_MAX:
                    _PLAIN_TAGS.clear()
                tag = _PLAIN_TAGS[value] = super().resolve(kind, value, implicit)
            return tag
        return cast(str, super().resolve(kind, value, implicit))

    # -- construction ------------------------------------------------------------------------

    def construct_sequence(self, node: Node, deep: bool = False) -> list[Any]:
        if not isinstance(node, SequenceNode):
            return cast("list[Any]", super().construct_sequence(node, deep))
        construct = self.construct_object
        out = []
        for child in node.value:
            tag = child.tag
            if tag == _STR and type(child) is ScalarNode:
                out.append(child.value)
            elif tag == _INT and type(child) is ScalarNode and _DECIMAL(child.value):
                out.append(int(child.value))
            else:
                out.append(construct(child, deep=deep))
        return out

    def construct_mapping(self, node: Node, deep: bool = False) -> dict[Any, Any]:
        """A mapping's value; a key given twice is recorded (and the later value kept, as
        YAML loaders do), merge keys (``<<``) are applied like PyYAML's ``SafeLoader``."""
        if not isinstance(node, MappingNode):
            return cast("dict[Any, Any]", super().construct_mapping(node, deep))
        pairs = node.value
        mapping = {}
        construct = self.construct_object
        for key_node, value_node in pairs:
            if key_node.tag == _STR and type(key_node) is ScalarNode:
                key = key_node.value
            elif key_node.tag in _SPECIAL_KEYS:
                return self._construct_merged(node, deep)
            else:
                key = construct(key_node, deep=deep)
                try:
                    hash(key)
                except TypeError:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        "found a key that is a collection; keys must be strings",
                        key_node.start_mark,
                    ) from None
            tag = value_node.tag
            if tag == _STR and type(value_node) is ScalarNode:
                mapping[key] = value_node.value
            elif tag == _INT and type(value_node) is ScalarNode and _DECIMAL(value_node.value):
                mapping[key] = int(value_node.value)
            else:
                mapping[key] = construct(value_node, deep=deep)
        if len(mapping) != len(pairs):
            self._record_duplicates(node, pairs)
        return mapping

    def _construct_merged(self, node: MappingNode, deep: bool) -> dict[Any, Any]:
        explicit = [(k, v) for k, v in node.value if k.tag != _MERGE]
        mapping: dict[Any, Any] = super().construct_mapping(node, deep)  # flattens the merge into node.value
        keys = [_hashable(self.construct_object(k, deep=deep)) for k, _ in explicit]
        if len(set(keys)) != len(keys):
            self._record_duplicates(node, explicit)
        return mapping

    def _record_duplicates(self, node: MappingNode, pairs: list[tuple[Node, Node]]) -> None:
        seen: dict[Any, Node] = {}
        for key_node, _ in pairs:
            key = _hashable(self.construct_object(key_node))
            if key in seen:
                self.duplicates.append((node, key_node, seen[key]))
            else:
                seen[key] = key_node

    def construct_yaml_float(self, node: Node) -> float:
        value: float = _explicit(super().construct_yaml_float, node, "a float")
        if not math.isfinite(value) or value.is_integer():
            self.odd_numbers = True
        return value

    # PyYAML's scalar constructors raise ValueError, KeyError, IndexError or AttributeError
    # for a value an explicit tag (!!int x, !!bool x, !!timestamp 2020-13-45) cannot hold.
    def construct_yaml_int(self, node: Node) -> int:
        return cast(int, _explicit(super().construct_yaml_int, node, "an integer"))

    def construct_yaml_bool(self, node: Node) -> bool:
        return cast(bool, _explicit(super().construct_yaml_bool, node, "a boolean"))

    def construct_yaml_timestamp(self, node: Node) -> Any:
        return _explicit(super().construct_yaml_timestamp, node, "a timestamp")


def _explicit(construct: Any, node: Node, what: str) -> Any:
    """``construct(node)``, with a failure to read the text as ``what`` a ConstructorError
    at the node (a diagnostic, not a traceback)."""
    try:
        return construct(node)
    except (ValueError, KeyError, IndexError, AttributeError, TypeError, OverflowError):
        raise yaml.constructor.ConstructorError(
            None, None, f"{excerpt(node.value)} is not {what} ({node.tag})", node.start_mark
        ) from None


for _tag, _method in (
    (_FLOAT, FleetLoader.construct_yaml_float),
    ("tag:yaml.org,2002:int", FleetLoader.construct_yaml_int),
    ("tag:yaml.org,2002:bool", FleetLoader.construct_yaml_bool),
    ("tag:yaml.org,2002:timestamp", FleetLoader.construct_yaml_timestamp),
):
    FleetLoader.add_constructor(_tag, _method)


class _TracingLoader(FleetLoader):
    """:class:`FleetLoader` that also keeps the JSON path of the node being composed; used
    only to name the path of a ``yaml.depth`` error (the fast loader keeps no path)."""

    _KEY = object()

    def __init__(self, stream: bytes | str) -> None:
        super().__init__(stream)
        self.path: list[Any] = []

    def descend_resolver(self, parent: Node | None, index: Any) -> None:
        if isinstance(index, Node):
            self.path.append(index.value if isinstance(index, ScalarNode) else "?")
        elif isinstance(index, int):
            self.path.append(index)
        else:
            self.path.append(self._KEY if parent is not None else None)
        try:
            super().descend_resolver(parent, index)
        except LimitExceeded as exc:
            exc.path = tuple(p for p in self.path[1:] if p is not self._KEY)
            raise

    def ascend_resolver(self) -> None:
        self.path.pop()
        super().ascend_resolver()


def _hashable(key: Any) -> Any:
    try:
        hash(key)
    except TypeError:
        return id(key)
    return key


def _children(node: Node) -> Iterable[tuple[Node, PathPart | None, Any]]:
    """(child, its path part or None for a key, the mark nearest to where it is used)."""
    # An alias's node is the anchored one, whose marks lie where it was anchored (earlier in
    # the file): the nearest mark only moves forward.
    if isinstance(node, SequenceNode):
        prev = node.start_mark
        for i, child in enumerate(node.value):
            yield child, i, prev
            prev = max(prev, child.end_mark, key=lambda m: m.index)
    elif isinstance(node, MappingNode):
        prev = node.start_mark
        for key, value in node.value:
            yield key, None, prev
            yield value, key.value if isinstance(key, ScalarNode) else "?", key.start_mark
            prev = max(prev, value.end_mark, key=lambda m: m.index)


def _text_len(node: Node) -> int:
    return len(node.value) if isinstance(node, ScalarNode) else 0


def check_aliases(root: Node) -> None:
    """Refuse a document whose aliases expand too far: raise :class:`LimitExceeded`
    (``yaml.alias-budget``, ``yaml.alias-cycle`` or ``yaml.depth``) at the alias.

    The composed graph shares an anchored node among its aliases; a node met again in a
    depth-first walk is an alias use and costs the size of what it stands for.
    """
    size: dict[int, int] = {}  # id -> nodes in the expanded subtree
    height: dict[int, int] = {}  # id -> levels in the expanded subtree
    weight: dict[int, int] = {}  # id -> characters of scalar text in the expanded subtree
    open_: set[int] = set()
    spent = spent_bytes = 0
    # frames: node, depth, path, children iterator, [size, height, weight] so far
    stack: list[
        tuple[Node, int, tuple[PathPart, ...], Iterator[tuple[Node, PathPart | None, Any]], list[int]]
    ]
    stack = [(root, 1, (), iter(_children(root)), [1, 1, _text_len(root)])]
    open_.add(id(root))
    while stack:
        node, depth, path, children, acc = stack[-1]
        for child, part, mark in children:
            where = path if part is None else (*path, part)
            cid = id(child)
            if cid in size:
                spent += size[cid]
                spent_bytes += weight[cid]
                if spent_bytes > MAX_ALIAS_BYTES:
                    # A few nodes can stand for gigabytes: one long anchored scalar, used often.
                    raise LimitExceeded(
                        "yaml.alias-budget",
                        f"aliases in this file stand for more than {MAX_ALIAS_BYTES // 2**20} MiB of text "
                        "(an alias bomb?); write the values out or use fewer aliases",
                        mark,
                        where,
                    )
                if spent > MAX_ALIAS_NODES:
                    raise LimitExceeded(
                        "yaml.alias-budget",
                        f"aliases in this file stand for more than {MAX_ALIAS_NODES:,} nodes "
                        "(an alias bomb?); write the values out or use fewer aliases",
                        mark,
                        where,
                    )
                if depth + height[cid] > MAX_DEPTH:
                    raise LimitExceeded(
                        "yaml.depth",
                        f"this alias makes collections nest deeper than {MAX_DEPTH} levels",
                        mark,
                        where,
                    )
                acc[0] += size[cid]
                acc[1] = max(acc[1], height[cid] + 1)
                acc[2] += weight[cid]
            elif cid in open_:
                raise LimitExceeded(
                    "yaml.alias-cycle",
                    "this alias names a collection that contains it: the value would contain itself",
                    mark,
                    where,
                )
            else:
                open_.add(cid)
                stack.append((child, depth + 1, where, iter(_children(child)), [1, 1, _text_len(child)]))
                break
        else:
            stack.pop()
            open_.discard(id(node))
            size[id(node)], height[id(node)], weight[id(node)] = acc
            if stack:
                parent_acc = stack[-1][4]
                parent_acc[0] += acc[0]
                parent_acc[1] = max(parent_acc[1], acc[1] + 1)
                parent_acc[2] += acc[2]


def _node_paths(root: Node, wanted: set[int]) -> dict[int, tuple[PathPart, ...]]:
    """JSON paths of the nodes whose ids are in ``wanted`` (first occurrence)."""
    found: dict[int, tuple[PathPart, ...]] = {}
    seen: set[int] = set()
    stack: list[tuple[Node, tuple[PathPart, ...]]] = [(root, ())]
    while stack and len(found) < len(wanted):
        node, path = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if id(node) in wanted:
            found[id(node)] = path
        stack.extend((c, path if p is None else (*path, p)) for c, p, _ in _children(node))
    return found


def _position(data: bytes, offset: int) -> tuple[int, int]:
    """1-based line and column (in characters) of byte ``offset`` in ``data``."""
    offset = max(0, min(offset, len(data)))
    start = data.rfind(b"\n", 0, offset) + 1
    return data.count(b"\n", 0, offset) + 1, len(data[start:offset].decode("utf-8", "replace")) + 1


def _diagnostic(name: str, data: bytes, exc: yaml.YAMLError) -> Diagnostic:
    if isinstance(exc, LimitExceeded):
        mark = exc.mark
        line, col = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        return Diagnostic(name, line, col, json_path(exc.path), exc.rule, exc.message)
    if isinstance(exc, yaml.reader.ReaderError):
        line, col = _position(data, exc.position)
        rule = "yaml.encoding" if "UTF" in exc.reason or "Unicode" in exc.reason else "yaml.syntax"
        char = exc.character
        shown = f"byte 0x{char:02x}" if isinstance(char, int) else f"character {excerpt(char)}"
        return Diagnostic(name, line, col, "$", rule, f"{shown}: {exc.reason}; a fleet file is UTF-8 text")
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    line, col = (mark.line + 1, mark.column + 1) if mark else (0, 0)
    problem = getattr(exc, "problem", None) or str(exc)
    return Diagnostic(name, line, col, "$", "yaml.syntax", f"invalid YAML: {problem}")


def parse(name: str, data: bytes) -> tuple[list[RawDocument], list[Diagnostic]]:
    """The documents of one file's bytes, and its diagnostics.

    A file that breaks a limit or the YAML syntax contributes no documents and one
    diagnostic at the place concerned. Duplicate keys are diagnostics too (one per
    repeated key, at the repeated key); their documents are returned, marked.
    Empty documents (a trailing ``---``) are skipped.
    """
    loader = FleetLoader(data)
    docs: list[RawDocument] = []
    diags: list[Diagnostic] = []
    aliases = b"&" in data and b"*" in data  # an alias needs an anchor (and a '*')
    try:
        index = 0
        while loader.check_node():
            if index == MAX_DOCUMENTS:
                mark = loader.get_node().start_mark
                raise LimitExceeded(
                    "yaml.documents",
                    f"the file holds more than {MAX_DOCUMENTS:,} documents; split it (one file per site)",
                    mark,
                )
            node = loader.get_node()
            if aliases:
                check_aliases(node)
            loader.odd_numbers = False
            dupes_before = len(loader.duplicates)
            value = loader.construct_document(node)
            dupes = loader.duplicates[dupes_before:]
            if dupes:
                paths = _node_paths(node, {id(m) for m, _, _ in dupes})
                for mapping, key, first in dupes:
                    where = (*paths.get(id(mapping), ()), key.value if isinstance(key, ScalarNode) else "?")
                    diags.append(
                        Diagnostic(
                            name,
                            key.start_mark.line + 1,
                            key.start_mark.column + 1,
                            json_path(where),
                            "yaml.duplicate-key",
                            f"key {excerpt(key.value if isinstance(key, ScalarNode) else '?')} is "
                            f"given twice in this mapping (first at line {first.start_mark.line + 1}); "
                            "YAML forbids it and the later value would win silently: keep one",
                        )
                    )
            if value is not None:
                source = Source(name, index, node.start_mark.line + 1)
                docs.append(RawDocument(source, value, loader.odd_numbers, bool(dupes)))
            index += 1
    except LimitExceeded as exc:
        if exc.rule == "yaml.depth" and not exc.path:
            exc = _trace_depth(data) or exc
        return [], [_diagnostic(name, data, exc)]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        if mark is not None and "nesting depth" in str(getattr(exc, "problem", "")):
            # The libyaml that PyYAML bundles since 6.0.3 refuses 1,000 levels in its scanner,
            # which reads a flow collection's brackets ahead of the composer that counts to
            # MAX_DEPTH. The text before that mark nests less, so composing it finds the path.
            traced = _trace_depth(_before(data, mark))
            if traced is not None:
                return [], [_diagnostic(name, data, traced)]
        return [], [_diagnostic(name, data, exc)]
    except RecursionError:  # a safety net: the limits keep every walk shallow
        return [], [Diagnostic(name, 0, 0, "$", "yaml.depth", "values nest too deeply to be read")]
    except Exception as exc:  # a safety net: PyYAML failing in a way not foreseen above
        problem = f"cannot read the file: {type(exc).__name__}: {excerpt(str(exc))}"
        return [], [Diagnostic(name, 0, 0, "$", "yaml.syntax", problem)]
    finally:
        loader.dispose()
    return docs, diags


def _before(data: bytes, mark: Any) -> bytes:
    """The bytes of ``data`` before a libyaml mark (0-based line, column in characters)."""
    lines = data.split(b"\n", mark.line + 1)
    if len(lines) <= mark.line:
        return data
    last = lines[mark.line].decode("utf-8", "replace")[: mark.column].encode()
    return b"\n".join([*lines[: mark.line], last])


def _trace_depth(data: bytes) -> LimitExceeded | None:
    """Compose again, keeping paths, to name where a ``yaml.depth`` limit was hit."""
    loader = _TracingLoader(data)
    try:
        while loader.check_node():
            loader.get_node()
    except LimitExceeded as exc:
        return exc
    except yaml.YAMLError:
        return None
    return None


def read(path: str) -> tuple[bytes | None, Diagnostic | None]:
    """The bytes of one fleet file, or a ``file.*`` diagnostic saying why not.

    Opens without blocking and checks that it is a regular file of at most
    :data:`MAX_FILE_BYTES` before reading (a FIFO or a device named ``x.yaml`` is refused,
    not read forever).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        return None, _os_problem(path, exc)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None, _not_regular(path)
        if st.st_size > MAX_FILE_BYTES:
            return None, _too_large(path, st.st_size)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:  # it grew, or its size was not known (procfs)
            return None, _too_large(path, len(data))
        return data, None
    except OSError as exc:
        return None, _os_problem(path, exc)
    finally:
        os.close(fd)


def _not_regular(path: str) -> Diagnostic:
    return Diagnostic(path, 0, 0, "$", "file.not-regular", "not a regular file (a FIFO, socket or device?)")


def _too_large(path: str, size: int) -> Diagnostic:
    return Diagnostic(
        path,
        0,
        0,
        "$",
        "file.too-large",
        f"{size:,} bytes is above the limit of {MAX_FILE_BYTES:,} bytes ({MAX_FILE_BYTES // 2**20} MiB) "
        "for one fleet file; split it",
    )


def _os_problem(path: str, exc: OSError) -> Diagnostic:
    if exc.errno == errno.ELOOP:
        return Diagnostic(path, 0, 0, "$", "file.symlink-loop", "symbolic links loop; it names no file")
    if exc.errno == errno.ENOENT and os.path.islink(path):
        target = os.readlink(path)
        return Diagnostic(
            path, 0, 0, "$", "file.dangling-symlink", f"symbolic link to {target!r}, which does not exist"
        )
    return Diagnostic(path, 0, 0, "$", "file.unreadable", f"cannot read: {exc.strerror or exc}")


def _parse_file(path: str) -> tuple[list[RawDocument], list[Diagnostic]]:
    # The parse allocates hundreds of thousands of small objects that all survive;
    # the cyclic GC would rescan them repeatedly for nothing.
    gc.disable()
    data, problem = read(path)
    if data is None:
        return [], [problem] if problem else []
    return parse(path, data)


def parse_file(path: str) -> tuple[list[RawDocument], list[Diagnostic]]:
    """One file's part of :func:`load_documents` (for a worker process: it leaves the
    cyclic GC off, as the loader's own workers do)."""
    return _parse_file(path)


def find_files(paths: Iterable[str | os.PathLike[str]]) -> tuple[list[Path], list[Diagnostic]]:
    """Expand files and directories (recursively) into a sorted list of YAML files, and
    diagnostics for what is there but cannot be read.

    A directory contributes its ``*.yaml``/``*.yml`` files, following symbolic links that
    stay inside the directories given. A link that leads out of them
    (``file.outside-fleet``: a fleet in a pull request must not make CI read
    ``/etc/shadow`` and echo it), names nothing (``file.dangling-symlink``) or loops
    (``file.symlink-loop``, also a directory link back to one of its parents), and a
    ``.yaml`` that is not a regular file (``file.not-regular``), are diagnostics, as is a
    path given that does not exist (``file.missing``). Entries whose name has another
    suffix (``README.md``) are not looked at.
    """
    found: set[Path] = set()
    problems: list[Diagnostic] = []
    given = [Path(p) for p in paths]
    roots = [os.path.realpath(p) for p in given if p.is_dir()]
    for p in given:
        try:
            st = p.stat()
        except OSError as exc:
            if exc.errno == errno.ENOENT and not p.is_symlink():
                problems.append(
                    Diagnostic(str(p), 0, 0, "$", "file.missing", f"no such file or directory: {p}")
                )
            else:
                problems.append(_os_problem(str(p), exc))
            continue
        if stat.S_ISDIR(st.st_mode):
            _walk(p, found, problems, roots)
        else:
            found.add(p)  # named explicitly: read it whatever its suffix (read() checks it)
    return sorted(found), problems


def _walk(root: Path, found: set[Path], problems: list[Diagnostic], roots: Sequence[str]) -> None:
    stack: list[tuple[Path, frozenset[tuple[int, int]]]] = [(root, frozenset())]
    while stack:
        directory, ancestors = stack.pop()
        try:
            st = directory.stat()
            key = (st.st_dev, st.st_ino)
            if key in ancestors:
                problems.append(
                    Diagnostic(
                        str(directory),
                        0,
                        0,
                        "$",
                        "file.symlink-loop",
                        "symbolic link to a directory that contains it; the walk would never end",
                    )
                )
                continue
            with os.scandir(directory) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            problems.append(_os_problem(str(directory), exc))
            continue
        inside = ancestors | {key}
        for entry in entries:
            path = Path(entry.path)
            wanted = path.suffix in YAML_SUFFIXES
            if not (wanted or not path.suffix or entry.is_dir()):
                continue  # README.md, notes.txt: not fleet files
            try:
                if entry.is_symlink():
                    target = os.path.realpath(path)
                    if os.path.exists(target) and not _within(target, roots):
                        problems.append(_outside(str(path), target))
                        continue
                if entry.is_dir():
                    stack.append((path, inside))
                elif wanted and entry.is_file():
                    found.add(path)
                else:
                    os.stat(path)  # raises for a link that names nothing, or loops
                    if wanted:
                        problems.append(_not_regular(str(path)))
            except OSError as exc:
                problems.append(_os_problem(str(path), exc))


def _within(target: str, roots: Sequence[str]) -> bool:
    return any(target == r or target.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def _outside(path: str, target: str) -> Diagnostic:
    return Diagnostic(
        path,
        0,
        0,
        "$",
        "file.outside-fleet",
        f"symbolic link to {excerpt(target)}, outside the directories given; a fleet reads "
        "only its own files (name a file elsewhere as a path to read it)",
    )


def load_documents(files: Sequence[Path]) -> tuple[list[RawDocument], list[Diagnostic]]:
    """Parse every file; return documents in file order and the loader's diagnostics
    (see :func:`parse` and :func:`read`)."""
    names = [str(f) for f in files]
    total = 0
    for f in files:
        with contextlib.suppress(OSError):
            total += f.stat().st_size
    gc_was_enabled = gc.isenabled()
    try:
        if total >= PARALLEL_MIN_BYTES and len(files) > 1 and (os.cpu_count() or 1) > 1:
            workers = min(os.cpu_count() or 1, len(files))
            with ProcessPoolExecutor(workers) as pool:
                results = list(pool.map(_parse_file, names, chunksize=max(1, len(names) // 64)))
        else:
            results = [_parse_file(n) for n in names]
    finally:
        if gc_was_enabled:
            gc.enable()
    docs: list[RawDocument] = []
    diags: list[Diagnostic] = []
    for parsed, found in results:
        docs.extend(parsed)
        diags.extend(found)
    return docs, diags
