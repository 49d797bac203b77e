"""What the commands share: exit codes, the output path, the parser's error line, the
fleet loader, the ``--limit`` and ``--format`` options, and argument types."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO, cast

from ..engines import controller
from ..engines.inventory import node_groups
from ..fleet.diagnostics import Diagnostic, FleetInvalid, Report
from ..fleet.sources import FleetEscapes, UnknownFleet, named_fleet_paths
from ..fleet.sources import fleet_paths as inventory_fleet_paths
from ..resolve import desired_state, hostpattern, load_fleet, validate
from ..resolve.analysis import Analysis
from ..resolve.controller import controller_key_missing
from ..resolve.types import DesiredState, NodeState
from ..resolve.validate import Validation

EXIT_OK, EXIT_FAILURE, EXIT_INVALID = 0, 1, 2

EXIT_CODES = (
    "Exit codes: 0 ok (warnings allowed); 1 the command ran and found or caused a failure "
    "(drift, a failed converge, a rejected node, a review that blocks, an unexpected failure); "
    "2 nothing was done: invalid input or usage, or a missing host tool (the install step named). "
    "A reader that leaves early (swarm plan | head) ends the output, not the command: the code "
    "is still the command's own."
)
"""The exit codes of every ``swarm`` command, said once (the top-level ``--help``):

====  ==============  ===============================================================
code  name            meaning
====  ==============  ===============================================================
0     EXIT_OK         ok; warnings allowed
1     EXIT_FAILURE    the command ran and found or caused a failure: drift, a failed
                      converge, a rejected node, a review that blocks, an unexpected
                      failure
2     EXIT_INVALID    nothing was done: invalid input or usage (a path that is not what
                      the option expects, an invalid fleet, an unknown name), or a
                      missing host tool (the install step named)
====  ==============  ===============================================================

A subcommand's epilog that restates its codes says what 1 and 2 are for it, never
something else.

A closed output (``swarm render | head -1``: the reader has gone, EPIPE) is no failure of
the command's: writing stops, the command runs to its end and exits with its own code,
without a traceback (:class:`Output`; the way Python's documentation on SIGPIPE
recommends, the stream's descriptor then points at /dev/null, so that the flush at exit
does not fail either).
"""

FLEET_HELP = (
    "PATHS are YAML files or directories (searched recursively). Without PATHS, --fleet NAME "
    "reads inventory/NAME, policies/NAME and policies/shared under the current directory; "
    "NAME is a directory name in inventory/, never a path."
)


class Output:
    """A text stream (stdout, stderr) through which every command writes: once its reader
    has gone (``BrokenPipeError``, EPIPE) the rest is discarded and the descriptor points
    at /dev/null, so that neither a later write nor the flush at exit raises. Every other
    attribute is the stream's."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.gone = False

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                self.stream.write(text)
            except BrokenPipeError:
                self._gone()
        return len(text)

    def writelines(self, lines: Iterator[str] | Sequence[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if not self.gone:
            try:
                self.stream.flush()
            except BrokenPipeError:
                self._gone()

    def _gone(self) -> None:
        self.gone = True
        silence(self.stream)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


@contextlib.contextmanager
def output() -> Iterator[None]:
    """While in it, ``sys.stdout`` and ``sys.stderr`` are :class:`Output` streams (flushed,
    and put back, at its end): the one output path of every command."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = cast(TextIO, Output(saved[0])), cast(TextIO, Output(saved[1]))
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        sys.stdout, sys.stderr = saved


def emit(text: str, stream: TextIO | None = None) -> None:
    """Write ``text`` and a newline to ``stream`` (stdout) and flush it. Inside
    :func:`output` (every command), a reader that has gone ends the output, not the
    command (:data:`EXIT_CODES`)."""
    print(text, file=stream or sys.stdout, flush=True)


def silence(stream: TextIO) -> None:
    """Point ``stream``'s file descriptor at /dev/null (after its reader has gone)."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)


_ARGUMENT = re.compile(r"^argument ([^:]+): (invalid |expected |not allowed |ignored )?")
"""argparse's "argument --opt: ..." and the words its own messages start with."""


class Parser(argparse.ArgumentParser):
    """argparse's parser, with a usage error said as every other refusal is: one line,
    ``swarm COMMAND: --option what is wrong``, exit 2 (no usage block: ``--help`` has it).
    Its subcommands' parsers are of this class too (argparse's ``parser_class``)."""

    def error(self, message: str) -> NoReturn:
        # argparse says "argument --forks: must be at least 1, not 0" for a type's refusal:
        # the option first, as the commands' own refusals read ("--forks must be at least 1,
        # not 0"); its own words keep their colon ("--format: invalid choice: ...").
        said = _ARGUMENT.sub(lambda m: f"{m[1]}: {m[2]}" if m[2] else f"{m[1]} ", message, count=1)
        self.exit(EXIT_INVALID, f"{self.prog}: {said}\n")


def exit_code(exc: SystemExit) -> int:
    """The exit status a :class:`SystemExit` carries (``None``: 0; a message: 1, as Python's)."""
    return exc.code if isinstance(exc.code, int) else (EXIT_OK if exc.code is None else EXIT_FAILURE)


def at_least(lowest: float, kind: Callable[[str], Any] = int, said: str = "") -> Callable[[str], Any]:
    """An argparse ``type``: ``kind`` of the text, refused below ``lowest`` ("must be
    SAID, not VALUE"; SAID by default "at least LOWEST")."""

    def checked(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            what = {"int": "a whole number", "float": "a number"}.get(kind.__name__, kind.__name__)
            raise argparse.ArgumentTypeError(f"{text!r}: expected {what}") from None
        if not value >= lowest:  # NaN too
            raise argparse.ArgumentTypeError(f"must be {said or f'at least {lowest:g}'}, not {text}")
        return value

    checked.__name__ = kind.__name__  # argparse names the type in its messages
    return checked


positive = at_least(1, said="positive")
"""An argparse ``type``: a whole number, 1 or more."""


def fraction(text: str) -> float:
    """An argparse ``type``: a number from 0 to 1."""
    value = at_least(0, float)(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be a fraction from 0 to 1, not {text}")
    return cast(float, value)


FORMATS = {
    "text": "lines and tables for a reader",
    "json": "one JSON document, keys sorted",
    "markdown": "a GitHub comment",
    "prometheus": "Prometheus' text exposition format",
}
"""The one ``--format`` vocabulary: a command takes those of its outputs."""
RENAMED_FORMATS = {"table": "text"}
"""Old spellings still taken, with a warning, until the next release: ``{old: new}``."""


def format_arg(p: argparse.ArgumentParser, *choices: str, default: str = "text") -> None:
    """``--format``, from :data:`FORMATS`; an old spelling of :data:`RENAMED_FORMATS` is
    taken with a warning on stderr."""

    def spelled(text: str) -> str:
        new = RENAMED_FORMATS.get(text)
        if new in choices:
            print(f"{p.prog}: warning: --format {text} is now --format {new}; {text} is taken "
                  "until the next release", file=sys.stderr)  # fmt: skip
            return new
        return text

    spelled.__name__ = "format"
    p.add_argument(
        "--format",
        type=spelled,
        choices=choices,
        default=default,
        help="output format: "
        + ", ".join(f"{c} ({FORMATS[c]})" for c in choices)
        + " (default: %(default)s)",
    )


class Renamed(argparse.Action):
    """An option's old spelling (help hidden): stores into the new one's ``dest`` and warns
    on stderr that it is renamed. ``new``: the new spelling, for the warning."""

    def __init__(self, *args: Any, new: str, why: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.new, self.why = new, why

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: Any = None
    ) -> None:
        print(f"{parser.prog}: warning: {option} is now {self.new}{self.why}; {option} is taken until "
              "the next release", file=sys.stderr)  # fmt: skip
        setattr(namespace, self.dest, values)


LIMIT_HELP = (
    "the nodes to act on: node names, groups (site_SITE, role_ROLE, gpu, gpu_MODEL, simulated_gpu, "
    "ray_head, ray_worker, all) and globs (lab-gpu-*), separated by , or :; &TERM intersects, "
    "!TERM leaves out (Ansible's host patterns; quote ! in a shell); a term that matches nothing "
    "is an error (default: every node)"
)


def _limit_syntax(text: str) -> str:
    try:
        hostpattern.terms(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


_limit_syntax.__name__ = "pattern"


def limit_arg(p: argparse.ArgumentParser, help: str = LIMIT_HELP) -> None:
    """``--limit PATTERN``, the one grammar (:mod:`swarm_infra.resolve.hostpattern`); its
    syntax checked as it is parsed, its names by :func:`limited` once the fleet is read."""
    p.add_argument("--limit", metavar="PATTERN", type=_limit_syntax, help=help)


def limited(pattern: str | None, nodes: Mapping[str, NodeState], command: str) -> list[str] | None:
    """The names of ``nodes`` that ``--limit pattern`` selects, with the groups the engines'
    inventory gives them (:func:`swarm_infra.engines.inventory.node_groups`); None without a
    pattern. A term that selects nothing: one line, exit 2 (SystemExit)."""
    if pattern is None:
        return None
    try:
        return hostpattern.select(pattern, {n: node_groups(s) for n, s in nodes.items()})
    except ValueError as exc:
        print(f"swarm {command}: --limit: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_INVALID) from None


@contextlib.contextmanager
def invalid_fleet_exits(command: str, nothing: str | None, what: str = "the fleet") -> Iterator[None]:
    """The one place a :class:`FleetInvalid` raised in it ends a command: the validator's
    report on stderr, then ``swarm COMMAND: WHAT is invalid; NOTHING`` (not when ``nothing``
    is None: ``swarm plan``'s stderr is the report alone), exit 2 (SystemExit)."""
    try:
        yield
    except FleetInvalid as exc:
        print(exc.report.text(), file=sys.stderr)
        if nothing is not None:
            print(f"swarm {command}: {what} is invalid; {nothing}", file=sys.stderr)
        raise SystemExit(EXIT_INVALID) from None


def load(args: argparse.Namespace, command: str, nothing: str | None) -> Analysis:
    """The checked fleet that PATHS or ``--fleet`` name (:func:`fleet_paths`), or exit 2
    after the report and one line (:func:`invalid_fleet_exits`)."""
    with invalid_fleet_exits(command, nothing):
        return load_fleet(fleet_paths(args))


def validation(args: argparse.Namespace) -> Validation:
    """The validation of the fleet PATHS or ``--fleet`` name; an unknown ``--fleet`` is its
    report's one diagnostic (for the commands whose output the report is)."""
    try:
        return validate(fleet_paths(args))
    except FleetInvalid as exc:
        return Validation(exc.report, None)


def output_problem(option: str, path: str, *, directory: bool) -> str | None:
    """Why ``path`` cannot be written as ``option``'s output, as one line naming both; None
    when it can (as far as can be told before writing).

    ``directory``: the output is a directory, made where absent (its parents too): refused
    when the path or the nearest existing one above it is not a directory. Otherwise a file
    in an existing directory: refused when the path is a directory or its parent is not
    one. Checked before any work, so that a command that would only fail at its end (after
    measuring, rendering or reviewing) says so at once and does nothing (exit 2).
    """
    p = Path(path)
    if directory:
        if p.exists() and not p.is_dir():
            return f"{option} {path}: not a directory (a file is there); expected a directory"
        above = next((a for a in p.parents if a.exists()), None)
        if above is not None and not above.is_dir():
            return f"{option} {path}: {above} is a file; expected a directory there"
        return None
    if p.is_dir():
        return f"{option} {path}: a directory; expected a file name"
    if not p.parent.is_dir():
        what = "is a file" if p.parent.exists() else "does not exist"
        return f"{option} {path}: its directory {p.parent} {what}; expected an existing directory"
    return None


def fleet_args(
    p: argparse.ArgumentParser,
    *formats: str,
    fleet_help: str = "fleet name used when no PATHS are given (default: %(default)s)",
) -> None:
    """PATHS and --fleet, and --format with ``formats`` (:func:`format_arg`) where given."""
    p.add_argument("paths", nargs="*", metavar="PATHS", help="fleet YAML files or directories")
    p.add_argument("--fleet", default="lab", help=fleet_help)
    if formats:
        format_arg(p, *formats)


def fleet_paths(args: argparse.Namespace) -> list[str]:
    """The paths to read: PATHS if given, else the --fleet convention (existing dirs only).

    Raises :class:`FleetInvalid` with one ``fleet.unknown`` diagnostic when --fleet is not
    the name of a directory in ``inventory/`` (the message lists those there are).
    """
    if args.paths:
        return args.paths
    try:
        return [str(p) for p in named_fleet_paths(Path(), args.fleet)]
    except UnknownFleet as exc:
        where = str(Path("inventory") / args.fleet) if "/" not in args.fleet else args.fleet
        raise FleetInvalid(Report([Diagnostic(where, 0, 0, "$", "fleet.unknown", str(exc))])) from None
    except FleetEscapes as exc:
        where = str(Path("inventory") / args.fleet)
        raise FleetInvalid(Report([Diagnostic(where, 0, 0, "$", "file.outside-fleet", str(exc))])) from None


def simulated_nodes(nodes: Mapping[str, NodeState]) -> list[str]:
    """Names of the nodes whose GPUs use the simulated NVML backend (said in every output)."""
    return [n for n, s in nodes.items() if s["gpu"] and s["gpu"]["backend"] == "simulated"]


def fleet_inventory(args: argparse.Namespace, command: str) -> tuple[Path, DesiredState] | int:
    """(inventory path, desired state) for converge/verify, or an exit code after saying why."""
    root = Path.cwd()
    if not (root / "ansible.cfg").is_file() or not (root / "playbooks").is_dir():
        print(f"swarm {command}: run it from the repository root (ansible.cfg, playbooks/)", file=sys.stderr)
        return EXIT_INVALID
    if not args.inventory:
        try:
            named_fleet_paths(root, args.fleet)
        except (UnknownFleet, FleetEscapes) as exc:
            print(f"swarm {command}: {exc}", file=sys.stderr)
            return EXIT_INVALID
    inventory = Path(args.inventory or f"inventory/{args.fleet}")
    try:
        paths = inventory_fleet_paths(inventory) if inventory.exists() else []
    except (OSError, ValueError) as exc:
        print(f"swarm {command}: {exc}", file=sys.stderr)
        return EXIT_INVALID
    if not paths:
        print(
            f"swarm {command}: {inventory} is not a fleet inventory (inventory/NAME, or a *.swarm.yml)",
            file=sys.stderr,
        )
        return EXIT_INVALID
    with invalid_fleet_exits(command, "nothing was run"):
        state = desired_state(load_fleet(paths))
    # A controller the fleet declares without its key: this controller's own (push mode).
    try:
        state = controller.with_own_key(state)
    except controller.ControllerError as exc:
        print(f"swarm {command}: the controller's key: {exc}; nothing was run", file=sys.stderr)
        return EXIT_INVALID
    if command == "converge" and controller_key_missing(state):
        # Written so, every node's peer list would lose the controller: a node behind NAT,
        # reached over the mesh, would be cut off by the very run that reached it.
        print(
            f"swarm {command}: the fleet's Mesh declares the controller without its public key "
            f"(spec.controller.public_key) and this controller has no key at "
            f"{controller.default_key_path()}: make it with `swarm mesh controller-key`, or record "
            "the controller's key in the fleet; nothing was run",
            file=sys.stderr,
        )
        return EXIT_INVALID
    return inventory, state


def inventory_args(p: argparse.ArgumentParser) -> None:
    """--fleet and -i, as converge and verify take them."""
    p.add_argument("--fleet", default="lab", help="fleet name: inventory/NAME (default: %(default)s)")
    p.add_argument("-i", "--inventory", metavar="PATH", help="inventory source (default inventory/FLEET)")
