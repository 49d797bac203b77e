"""No shell script of the project pipes into ``grep -q`` where ``pipefail`` is on.

``grep -q`` exits at its first selected line (GNU grep manual, "-q: Exit immediately with
zero status if any match is found"); bash line-buffers a builtin's standard output, so
``printf '%s\n' "$list"`` writes one line per write(2); a line written after grep exited
raises SIGPIPE in the writer, which exits 141, and ``set -o pipefail`` makes the whole
pipeline fail although grep matched. Whether it does depends on scheduling: CI lost a
fleet this way in ``scripts/changed-fleets.sh --since-applied`` (``changed | grep -qxF``)
on a machine where it never failed here. GitHub's ``shell: bash`` runs steps with
``bash --noprofile --norc -eo pipefail {0}`` (docs.github.com, "Workflow syntax", jobs.
<job_id>.steps[*].shell), so the workflows count too.
"""

from __future__ import annotations

import re
from pathlib import Path

from .conftest import ROOT

PIPE_INTO_GREP_Q = re.compile(r"\|\s*[ef]?grep\s+(-[A-Za-z]*q|--quiet|--silent)")


def shell_files() -> list[Path]:
    files = [*sorted((ROOT / "scripts").glob("*.sh")), ROOT / ".ci/run"]
    files += sorted((ROOT / ".github").rglob("*.yml"))
    return files


def offending(text: str) -> list[str]:
    return [
        line.strip()
        for line in text.splitlines()
        if not line.lstrip().startswith("#") and PIPE_INTO_GREP_Q.search(line)
    ]


def test_the_check_sees_the_pattern_it_names() -> None:
    assert offending('    elif changed "$record" | grep -qxF "$fleet"; then\n')
    assert offending("x | grep --quiet y\n")
    assert not offending('    elif grep -qxF "$fleet" <<< "$(changed "$record")"; then\n')
    assert not offending("# not `changed | grep -q`\n")


def test_no_script_or_workflow_pipes_into_grep_q() -> None:
    found = {str(p.relative_to(ROOT)): offending(p.read_text()) for p in shell_files()}
    assert {k: v for k, v in found.items() if v} == {}
