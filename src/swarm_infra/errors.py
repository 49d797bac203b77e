"""The library's exception classes, in one module: what each is, who raises it, what its
message names.

Standard library only, and nothing of the package: the import-linter contract in
``pyproject.toml`` keeps it the lowest layer, so every module (``gitrun`` too) imports its
errors from here. The module that raises a class still imports it back under the same name
(``from swarm_infra.resolve.text import UnsafeValue`` still works), and the base classes are
the ones each always had (``ValueError``, ``RuntimeError``, ``Exception``), so every
``except`` matches what it matched before. Messages are one line unless a class says
otherwise, and quote untrusted text only cut short and escaped (the raiser does that).

Public exception classes defined elsewhere, each for a reason
(``tests/unit/test_errors.py`` fails on any other):

- ``swarm_infra.nodeside.gpu.GpuError``: ``nodeside`` is standard library only and imports
  nothing of the package: its files ship alone to the nodes (Ansible ``module_utils``;
  pyinfra sends a file's code to the node's ``python3``).
- ``swarm_infra.fleet.diagnostics.FleetInvalid``: it carries the validator's
  :class:`~swarm_infra.fleet.diagnostics.Report`, whose methods its catchers call
  (``text()``, ``errors``); typing it from here would import the fleet layer.
- ``swarm_infra.fleet.loader.LimitExceeded``: a ``yaml.YAMLError`` (PyYAML's loader raises
  and catches it among its own errors), and this module imports no third-party package.
- ``swarm_infra.hosttools.HostToolMissing``: ``hosttools.py`` also runs as a script
  (``scripts/install.sh``, before the package is installed), so it imports nothing of the
  package.

Private classes (``agent.report._Refused``) stay in the one module that raises and catches
them.
"""

from __future__ import annotations

# --- git (gitrun, review, agent) --------------------------------------------------------


class GitError(RuntimeError):
    """A git command failed, could not start or did not end in time; the message holds its
    verb and git's last line on stderr (quoted, at most 300 characters).

    Raised by :func:`swarm_infra.gitrun.git`, and by the review's and the agent's git
    (``review/git.py``, ``agent/git.py``) with a message saying what they asked for."""


class MergeConflict(GitError):
    """The head cannot be merged into the base without conflicts: there is no merge result
    to review. ``files``: the conflicted paths (repository-relative, sorted).

    Raised by :func:`swarm_infra.review.git.merge_commit`; the message names both commits
    (12 hex digits), up to ten of the files (excerpts) and the way out (merge or rebase)."""

    def __init__(self, message: str, files: list[str]) -> None:
        super().__init__(message)
        self.files = files


# --- fleet (declare) --------------------------------------------------------------------


class UnknownFleet(ValueError):
    """A fleet name that is not a plain name, or names no directory in ``inventory/``;
    the message lists the fleets there are.

    Raised by :func:`swarm_infra.fleet.sources.named_fleet_paths`."""


class FleetEscapes(ValueError):
    """A fleet directory that is a link leaving the repository, or a ``*.swarm.yml`` inside
    a fleet directory (it would point the inventory at other files than the fleet's own).

    Raised by :func:`swarm_infra.fleet.sources.fleet_paths`; the message names the path."""


# --- resolve (decide) -------------------------------------------------------------------


class UnsafeValue(ValueError):
    """A value that would change the structure of the file it is written into (a line
    break or another control character; in an INI-style file, a section header).

    Raised by :func:`swarm_infra.resolve.text.line_value` and the writers built on it (the
    mesh's wg-quick files, the controller's files); the message names the field and shows
    the value's start, escaped."""


class IncludeCycle(ValueError):
    """A HostProfile includes itself, directly or through others. ``chain`` lists the names.

    Raised by :func:`swarm_infra.resolve.host.flatten`; the message is the chain joined
    with `` -> ``."""

    def __init__(self, chain: list[str]) -> None:
        self.chain = chain
        super().__init__(" -> ".join(chain))


class PlacementError(ValueError):
    """No group can be chosen: too few candidates, an unmeasured pair in every group, or a
    search larger than :data:`swarm_infra.resolve.placement.MAX_GROUPS`. The message says
    which.

    Raised by :func:`swarm_infra.resolve.placement.closest_group`."""


# --- cluster (shape) --------------------------------------------------------------------


class ScopeError(ValueError):
    """The sites asked for cannot form a cluster of their own (see
    :mod:`swarm_infra.cluster.scope`).

    Raised by :func:`swarm_infra.cluster.scope.scope`; the message names the sites asked
    for that have no node (and the fleet's sites), or the flavors and Ray clusters that
    have workers inside and outside them."""


class StackFileError(ValueError):
    """A ``Pulumi.<stack>.yaml`` (or ``Pulumi.yaml``) that is not YAML, or whose ``swarm:``
    keys do not have their types; the message starts with the file's name.

    Raised by :func:`swarm_infra.cluster.stacks.parse_stack`,
    :func:`~swarm_infra.cluster.stacks.default_fleet` and the readers built on them."""


# --- metrics ----------------------------------------------------------------------------


class MeasurementParseError(ValueError):
    """A tool's output could not be read: not JSON, an error report, or a field missing.

    Raised by the parsers of :mod:`swarm_infra.metrics` (ping, iperf3, fio, the probes, the
    Ray jobs, DCGM); the message names the tool and the JSON path (or line) that was
    expected."""


class DcgmUnavailable(MeasurementParseError):
    """dcgmi is not installed on the node: DCGM diagnostics are not applicable there.

    Raised by :mod:`swarm_infra.metrics.gpu_health`'s DCGM parser; the message is
    ``dcgmi: `` and what the node said (or ``not installed``)."""


# --- review -----------------------------------------------------------------------------


class ClaimInvalid(ValueError):
    """A claim file that is not one this module writes: not JSON, too large, or of
    another shape. The message says what was expected (and never quotes the file).

    Raised by :func:`swarm_infra.review.claim.read_claim`."""


# --- engines ----------------------------------------------------------------------------


class ControllerError(RuntimeError):
    """A step failed or is refused; the message says which and why.

    Raised by :mod:`swarm_infra.engines.controller` (the controller's WireGuard key and
    tunnel: ``read_private_key``, ``public_key``, ``own_public_key``, ``ensure_key``,
    ``up``)."""


class InventorySourceError(Exception):
    """An inventory source that gives no hosts: not a fleet, an invalid fleet (the message
    holds the validator's report, one ``file:line:col`` line per problem), or a failure to
    resolve it. The message is what the engine shows; no traceback is due.

    Raised by :func:`swarm_infra.engines.inventory.fleet_state`."""


class KeyRecordInvalid(ValueError):
    """The record file is not a JSON object of node names to WireGuard public keys.

    Raised by :func:`swarm_infra.engines.keyrecord.load`; the message starts with the
    file's path (and the node's entry, ``$["name"]``, when one key is wrong) and says what
    is wrong."""


# --- lab --------------------------------------------------------------------------------


class LabError(Exception):
    """The lab could not be brought to the asked state; the message says what and why.

    Raised by :mod:`swarm_infra.lab` (the image, the mirror, the nodes, their network,
    services and join) and ``swarm lab``."""


# --- agent ------------------------------------------------------------------------------


class ReportInvalid(ValueError):
    """A node's page is no agent report; the message says what is wrong, in one line of
    printable characters: it quotes the node's words (an HTTP reason, a label, the parser's
    complaint about the page) and goes to a terminal (``swarm status``) or the journal (the
    agent), so a control character or line break of the node's is shown as ``?``.

    Raised by :func:`swarm_infra.agent.report.read_node_report` and
    :func:`~swarm_infra.agent.report.parse_node_report`."""

    def __init__(self, message: str) -> None:
        super().__init__("".join(c if c.isprintable() else "?" for c in message))


class ConfigInvalid(ValueError):
    """The settings file cannot be used; the message names the file and the field.

    Raised by :func:`swarm_infra.agent.config.load_config` and
    :func:`~swarm_infra.agent.config.parse_config`."""


class BootstrapError(ValueError):
    """An argument or a file that bootstrap cannot use; nothing more was written.

    Raised by :mod:`swarm_infra.agent.bootstrap` (the request's checks and the WireGuard
    key); the message names the option (``--address``, ``--allowed-signers``...) or the
    file."""


# --- cli --------------------------------------------------------------------------------


class InitError(ValueError):
    """Input ``swarm init`` refuses (a bad NAME or ROOT, a target that exists): the
    message is one line, safe to print.

    Raised by :mod:`swarm_infra.cli.init` (``check_name``, ``check_targets``)."""
