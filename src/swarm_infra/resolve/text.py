"""What every node file's text is made with: values checked for one line, the header, JSON.

The layers' text functions (:mod:`.layers`) use these, so that no declared value can
change a file's structure whatever the schema already refused.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..errors import UnsafeValue as UnsafeValue

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def line_value(value: object, what: str) -> str:
    """``value`` as text for one line of a line-oriented file (wg-quick, systemd units,
    sysctl.d, tmpfiles.d, fstab, apt sources), checked here whatever the schema already
    refused: no line break or other control character can start a new line, section or
    directive. Raises :class:`UnsafeValue` naming ``what``."""
    text = str(value)
    bad = _CONTROL.search(text)
    if bad:
        shown = text[:60].encode("unicode_escape").decode("ascii")
        raise UnsafeValue(f"{what}: refusing to write {shown!r}: a control character ({bad.group()!r}) "
                          "would change the file's structure")  # fmt: skip
    return text


def header(what: str) -> str:
    """The first line of a managed file (comment syntax ``#``): who writes it."""
    return f"# Managed by swarm ({what}). Changes here are overwritten.\n"


def json_text(data: Any) -> str:
    """``data`` as a managed JSON file's text: indented, keys sorted, ending with a newline."""
    return json.dumps(data, indent=4, sort_keys=True) + "\n"
