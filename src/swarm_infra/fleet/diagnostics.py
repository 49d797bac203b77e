"""Diagnostics: the one shape every validation finding takes.

A diagnostic names the file, the 1-based line and column, the JSON path inside the
document (``$.spec.mesh.address``), the rule that fired and a message saying what was
expected. Text form is ``file:line:col: severity[rule]: $.path: message``, the form
compilers and linters use so that editors and CI annotate the right line.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Literal

Severity = Literal["error", "warning"]
PathPart = str | int


def json_path(parts: Sequence[PathPart]) -> str:
    """Render a path as JSONPath: ``("spec", "gpus", 0, "model")`` → ``$.spec.gpus[0].model``.

    Keys that are not plain identifiers (sysctl names, labels) are bracket-quoted:
    ``$.spec.sysctls['net.core.rmem_max']``.
    """
    out = ["$"]
    for part in parts:
        if isinstance(part, int):
            out.append(f"[{part}]")
        elif part.replace("_", "a").replace("-", "a").isalnum():
            out.append(f".{part}")
        else:
            out.append("[" + repr(part) + "]")
    return "".join(out)


@dataclass(frozen=True, slots=True)
class Source:
    """Where a document came from: file path and 0-based index among its ``---`` documents."""

    file: str
    index: int


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One finding.

    ``line`` and ``col`` are 1-based (0 when unknown); ``path`` is a JSONPath string;
    ``rule`` is a stable identifier (``schema.required``, ``reference.unresolved``, ...)
    that tests and tools can match on; ``severity`` is ``error`` or ``warning``.
    """

    file: str
    line: int
    col: int
    path: str
    rule: str
    message: str
    severity: Severity = "error"

    def text(self) -> str:
        return (
            f"{self.file}:{self.line}:{self.col}: {self.severity}[{self.rule}]: {self.path}: {self.message}"
        )


@dataclass(slots=True)
class Finding:
    """A diagnostic before its line/column is known: the document source and path parts.

    Checks produce findings; :func:`swarm_infra.marks.locate_all` turns them into
    diagnostics by composing only the files that have findings.
    """

    source: Source
    path: tuple[PathPart, ...]
    rule: str
    message: str
    severity: Severity = "error"


@dataclass
class Report:
    """All diagnostics of one validation run, errors and warnings kept apart."""

    diagnostics: list[Diagnostic] = field(default_factory=list)

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"]

    @property
    def warnings(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "warning"]

    @property
    def ok(self) -> bool:
        return not self.errors

    def sorted(self) -> list[Diagnostic]:
        return sorted(self.diagnostics, key=lambda d: (d.file, d.line, d.col, d.path, d.rule))

    def text(self) -> str:
        lines = [d.text() for d in self.sorted()]
        lines.append(f"{len(self.errors)} error(s), {len(self.warnings)} warning(s)")
        return "\n".join(lines)

    def json(self) -> str:
        return json.dumps(
            {
                "ok": self.ok,
                "errors": [asdict(d) for d in self.sorted() if d.severity == "error"],
                "warnings": [asdict(d) for d in self.sorted() if d.severity == "warning"],
            },
            indent=2,
            sort_keys=True,
        )


class FleetInvalid(Exception):
    """Raised by :func:`swarm_infra.fleet.load_fleet` when any error was found.

    ``report`` holds every diagnostic (errors and warnings); nothing was resolved.
    """

    def __init__(self, report: Report) -> None:
        self.report = report
        super().__init__(f"fleet is invalid: {len(report.errors)} error(s)")
