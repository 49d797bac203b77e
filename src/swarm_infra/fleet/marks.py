"""Line and column for a JSON path inside a YAML document, computed only on demand.

:func:`locate_all` composes (parses to a node graph with marks) each file that has
findings, once, and walks each finding's path down the graph. When a path goes past
what the document holds (a *missing* required key), the deepest existing node is used,
which is where the user has to add it. Files are read and composed with the loader's
limits (:mod:`swarm_infra.fleet.loader`), as when they were first parsed.
"""

from __future__ import annotations

from collections.abc import Iterable

import yaml

from .diagnostics import Diagnostic, Finding, PathPart, json_path
from .loader import FleetLoader, read


def _node_mark(node: yaml.Node, path: tuple[PathPart, ...]) -> tuple[int, int]:
    mark = node.start_mark
    for part in path:
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                if key_node.value == str(part):
                    # Point at the key: that is the line a user reads as "the field".
                    mark = key_node.start_mark
                    node = value_node
                    break
            else:
                break
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if not 0 <= part < len(node.value):
                break
            node = node.value[part]
            mark = node.start_mark
        else:
            break
    return mark.line + 1, mark.column + 1


def _compose(file: str) -> list[yaml.Node | None]:
    data, _ = read(file)
    if data is None:
        return []
    loader = FleetLoader(data)
    docs: list[yaml.Node | None] = []
    try:
        while loader.check_node():
            docs.append(loader.get_node())
    except yaml.YAMLError:
        return docs
    finally:
        loader.dispose()
    return docs


def locate_all(findings: Iterable[Finding]) -> list[Diagnostic]:
    """Turn findings into diagnostics with 1-based line/column; each file is read once."""
    findings = list(findings)
    graphs: dict[str, list[yaml.Node | None]] = {}
    out: list[Diagnostic] = []
    for f in findings:
        if f.source.file not in graphs:
            graphs[f.source.file] = _compose(f.source.file)
        docs = graphs[f.source.file]
        node = docs[f.source.index] if f.source.index < len(docs) else None
        line, col = _node_mark(node, f.path) if node is not None else (0, 0)
        out.append(Diagnostic(f.source.file, line, col, json_path(f.path), f.rule, f.message, f.severity))
    return out
