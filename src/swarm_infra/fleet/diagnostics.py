"""Diagnostics: the one shape every validation finding takes.

A diagnostic names the file, the 1-based line and column, the JSON path inside the
document (``$.spec.mesh.address``), the rule that fired and a message saying what was
expected. Text form is ``file:line:col: severity[rule]: $.path: message``, the form
compilers and linters use so that editors and CI annotate the right line. It is always one
line: control characters in a file name, a path or a message are escaped (``\\n``,
``\\x00``), so no input can forge a second diagnostic line. Values echoed in messages go
through :func:`excerpt`, so no input can make a message long. Line 0 (column 0) means the
whole file: it could not be read, or it breaks a limit that no single line does.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Literal

Severity = Literal["error", "warning"]
PathPart = str | int

EXCERPT_CHARS = 80  # the most of a value a message echoes
MESSAGE_CHARS = 400  # the most of a message a diagnostic keeps
PATH_CHARS = 300  # the most of a JSON path a diagnostic keeps
SHOWN_PER_FILE = 200  # the most diagnostics of one file a report prints (all are counted)
# C0 and C1 control characters, DEL, and Unicode's line and paragraph separators: anything
# a terminal, an editor or a CI log could take as the end of a line or a control sequence.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def one_line(text: str) -> str:
    """``text`` with every control character escaped (``\\n``, ``\\x00``, ``\\u2028``)."""
    if not _CONTROL.search(text):
        return text
    return _CONTROL.sub(lambda m: _ESCAPES.get(m[0]) or m[0].encode("unicode_escape").decode("ascii"), text)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[: limit - 1]}… ({len(text)} characters)"


def excerpt(value: object, limit: int = EXCERPT_CHARS) -> str:
    """A value as a message shows it: its ``repr`` on one line, at most ``limit`` characters
    (a longer one is cut and says how long it was). Floats that JSON cannot hold are named as
    YAML spells them (``.nan``, ``.inf``); containers are never rendered whole."""
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if value != value else (".inf" if value > 0 else "-.inf")
    if isinstance(value, (list, tuple, dict, set)) and len(value) > limit:
        return f"<{type(value).__name__} of {len(value)} items>"
    if isinstance(value, (str, bytes)) and len(value) > limit:
        # repr the head only: the value may be megabytes
        return f"{one_line(repr(value[:limit]))[: limit - 1]}… ({len(value)} characters)"
    return _clip(one_line(repr(value)), limit)


def close_names(word: str, names: Iterable[str], n: int = 1) -> list[str]:
    """The ``names`` closest to ``word`` (a misspelt key or kind), best first; none when no
    name is close. Case is ignored (``node`` is close to ``Node``); a long ``word`` is not
    compared (it is no typo, and comparing costs its length squared)."""
    if len(word) > 64:
        return []
    by_folded: dict[str, str] = {}
    for name in names:
        by_folded.setdefault(name.casefold(), name)
    return [by_folded[m] for m in difflib.get_close_matches(word.casefold(), by_folded, n=n, cutoff=0.7)]


def json_path(parts: Sequence[PathPart]) -> str:
    """Render a path as JSONPath: ``("spec", "gpus", 0, "model")`` → ``$.spec.gpus[0].model``.

    Keys that are not plain identifiers (sysctl names, labels) are bracket-quoted:
    ``$.spec.sysctls['net.core.rmem_max']``; a key longer than 64 characters is cut short
    (see :func:`excerpt`), so no input can make a path long.
    """
    out = ["$"]
    for part in parts:
        if isinstance(part, int):
            out.append(f"[{part}]")
        elif len(part) > 64:
            out.append("[" + excerpt(part, 64) + "]")
        elif part.replace("_", "a").replace("-", "a").isalnum():
            out.append(f".{part}")
        else:
            out.append("[" + repr(part) + "]")
    return "".join(out)


@dataclass(frozen=True, slots=True)
class Source:
    """Where a document came from: file path, 0-based index among its ``---`` documents,
    and the 1-based line it starts on (0 when not known)."""

    file: str
    index: int
    line: int = 0


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
        """``file:line:col: severity[rule]: $.path: message`` on one line (see the module doc)."""
        return (
            f"{one_line(self.file)}:{self.line}:{self.col}: {self.severity}[{self.rule}]: "
            f"{_clip(one_line(self.path), PATH_CHARS)}: {_clip(one_line(self.message), MESSAGE_CHARS)}"
        )


@dataclass(slots=True)
class Finding:
    """A diagnostic before its line/column is known: the document source and path parts.

    Checks produce findings; :func:`swarm_infra.marks.locate_all` turns them into
    diagnostics by composing only the files that have findings.

    ``reword``: for a message that depends on how the value was written (an unquoted
    ``off`` that YAML read as the boolean false), a function that :func:`locate_all` calls
    with the source text of the plain scalar at ``path`` and the message, and whose result
    is the message; not called when the value there is not a plain scalar.
    """

    source: Source
    path: tuple[PathPart, ...]
    rule: str
    message: str
    severity: Severity = "error"
    reword: Callable[[str, str], str] | None = None


@dataclass
class Report:
    """All diagnostics of one validation run, errors and warnings kept apart.

    The text and JSON forms show at most :data:`SHOWN_PER_FILE` diagnostics of one file (in
    line order) and count the rest, so that no input can make the output large; the error
    and warning counts are always the totals.
    """

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

    def shown(self) -> tuple[list[Diagnostic], dict[str, int]]:
        """(diagnostics shown, in order; {file: how many more it has that are not shown})."""
        shown: list[Diagnostic] = []
        per_file: dict[str, int] = {}
        omitted: dict[str, int] = {}
        for d in self.sorted():
            n = per_file[d.file] = per_file.get(d.file, 0) + 1
            if n <= SHOWN_PER_FILE:
                shown.append(d)
            else:
                omitted[d.file] = omitted.get(d.file, 0) + 1
        return shown, omitted

    def text(self) -> str:
        shown, omitted = self.shown()
        lines = [d.text() for d in shown]
        lines += [f"{one_line(f)}: {n} more diagnostic(s) in this file not shown" for f, n in omitted.items()]
        lines.append(f"{len(self.errors)} error(s), {len(self.warnings)} warning(s)")
        return "\n".join(lines)

    def json(self) -> str:
        shown, omitted = self.shown()
        return json.dumps(
            {
                "ok": self.ok,
                "error_count": len(self.errors),
                "warning_count": len(self.warnings),
                "errors": [_clipped(d) for d in shown if d.severity == "error"],
                "warnings": [_clipped(d) for d in shown if d.severity == "warning"],
                "omitted": omitted,
            },
            indent=2,
            sort_keys=True,
        )


def _clipped(d: Diagnostic) -> dict[str, object]:
    """A diagnostic as a JSON object, its path and message cut as in the text form."""
    return {**asdict(d), "path": _clip(d.path, PATH_CHARS), "message": _clip(d.message, MESSAGE_CHARS)}


class FleetInvalid(Exception):
    """Raised by :func:`swarm_infra.fleet.load_fleet` when any error was found.

    ``report`` holds every diagnostic (errors and warnings); nothing was resolved.
    """

    def __init__(self, report: Report) -> None:
        self.report = report
        super().__init__(f"fleet is invalid: {len(report.errors)} error(s)")
