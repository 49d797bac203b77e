"""The package's one way to run ``git``: :func:`git`, which raises :class:`GitError`.

Used by the review (``review/git.py``: the fleet at two refs, read on the controller or in
CI) and by the pull agent (``agent/git.py``: fetch, verify and check out on a node). Each
command gets a clean environment and a time limit:

- no ``GIT_*`` variable of the caller's environment reaches git (``GIT_DIR``,
  ``GIT_WORK_TREE``, ``GIT_INDEX_FILE``, ``GIT_CONFIG_*``, ``GIT_EXTERNAL_DIFF``,
  ``GIT_SSH_COMMAND`` set by a git hook, a CI step or a user would change which repository is
  read, how, or what runs); only the variables the caller passes (``env``) are added;
- no system or user configuration (``GIT_CONFIG_NOSYSTEM``, ``GIT_CONFIG_GLOBAL=/dev/null``:
  an ``includeIf``, a credential helper, ``url.<base>.insteadOf``, ``core.fsmonitor`` there
  could change what is fetched or run a program), no prompts (``GIT_TERMINAL_PROMPT=0``),
  messages in English (``LC_ALL=C``: the callers read them); the repository's own
  configuration still applies;
- at most :data:`TIMEOUT_S` per command (the caller may give another): a stuck remote or a
  hung process never holds a timer's unit or a CI job.

Standard library only, and nothing of the package but :mod:`swarm_infra.errors` (where
:class:`GitError` is defined): the import-linter contract in ``pyproject.toml`` keeps it at
the bottom layer, beside ``nodeside``, so both the review (a consumer) and the agent (above
the consumers) import it.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence

from .errors import GitError as GitError

TIMEOUT_S = 300  # one git command, in seconds


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment git runs with: this process's without any ``GIT_*`` variable, the
    fixed settings above, then ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    env.update(extra or {})
    return env


def _verb(args: Sequence[str]) -> str:
    """git's subcommand in ``args``: the first word that is not a global option or its value
    (``-C DIR``, ``-c NAME=VALUE``)."""
    words = iter(args)
    for word in words:
        if word in ("-C", "-c"):
            next(words, None)
        elif not word.startswith("-"):
            return word
    return "git"


def git(
    args: Sequence[str],
    *,
    stdin: bytes | None = None,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    timeout_s: float | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """``git ARGS`` (an argv list, never a shell string) with :func:`clean_env` (``env``
    added) and ``stdin`` as its input; stdout and stderr captured as bytes. Raises
    :class:`GitError` when git cannot start, runs longer than ``timeout_s`` seconds
    (default :data:`TIMEOUT_S`), or, with ``check``, exits non-zero."""
    verb = _verb(args)
    timeout_s = TIMEOUT_S if timeout_s is None else timeout_s
    try:
        done = subprocess.run(
            ["git", *args],
            input=stdin,
            capture_output=True,
            env=clean_env(env),
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise GitError(f"git {verb}: no answer in {timeout_s:g} s") from None
    except OSError as exc:
        raise GitError(f"cannot run git: {exc}") from None
    if check and done.returncode != 0:
        lines = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise GitError(f"git {verb} exited {done.returncode}: {(lines or ['(no message)'])[-1][:300]!r}")
    return done
