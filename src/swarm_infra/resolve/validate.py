"""declare → load → schema → model → semantic checks: the validator.

``validate(paths)`` reports every problem at once; ``load_fleet(paths)`` is the entry
point for consumers (CLI, inventory plugin, stacks): it returns the checked fleet or
raises :class:`~swarm_infra.diagnostics.FleetInvalid` carrying the same report.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..fleet.diagnostics import Diagnostic, Finding, FleetInvalid, Report
from ..fleet.loader import RawDocument, find_files, load_documents
from ..fleet.marks import locate_all
from ..fleet.model import build_fleet
from ..fleet.schemas import check_document
from . import checks
from .analysis import Analysis
from .assign import assign_profiles
from .checks.pull import read_pull_files
from .checks.ray import read_ray_files
from .mesh import Topology, assign_addresses, plan_topology


@dataclass(frozen=True)
class Validation:
    """A validation run: the report, and the analysed fleet (also when it has errors)."""

    report: Report
    analysis: Analysis | None


# Reads and parses the fleet's files: documents in file order, and the loader's diagnostics.
DocumentLoader = Callable[[Sequence[Path]], tuple[list[RawDocument], list[Diagnostic]]]


def validate(paths: Iterable[str | os.PathLike[str]], load: DocumentLoader = load_documents) -> Validation:
    """Validate the fleet declared in ``paths`` (YAML files or directories, recursively).

    ``load`` parses the files found (default :func:`~swarm_infra.fleet.loader.load_documents`);
    ``swarm review`` passes one that reuses the documents of files identical at both refs.

    Never raises for bad content: every problem is a diagnostic in the report. A path
    that does not exist is a ``file.missing`` diagnostic, a file that cannot be read a
    ``file.*`` one (see :func:`swarm_infra.fleet.loader.find_files`). Documents that fail
    their schema (or hold a duplicate key) are left out of the semantic checks (their names
    still count as declared, so one mistake is not reported twice); every other document is
    checked. A check over a whole kind waits only while a document of that kind is left out
    (one of a misspelt kind counts as the kind it is close to, else as any kind), and only
    where the left-out document could change its finding.
    """
    paths = list(paths)
    files, unreadable = find_files(paths)
    if not files:
        if unreadable:
            return Validation(Report(unreadable), None)
        where = str(paths[0]) if paths else "."
        return Validation(
            Report([Diagnostic(where, 0, 0, "$", "file.none", "no .yaml or .yml files found")]), None
        )
    docs, syntax = load(files)
    syntax = unreadable + syntax
    findings: list[Finding] = []
    valid: list[RawDocument] = []
    invalid: list[RawDocument] = []
    for doc in docs:
        doc_findings = list(check_document(doc))
        (invalid if doc_findings or doc.loader_errors else valid).append(doc)
        findings.extend(doc_findings)
    # A file that could not be read or parsed hides documents of any kind.
    unread = any(d.rule != "yaml.duplicate-key" and d.severity == "error" for d in syntax)
    fleet, built = build_fleet(valid, invalid, unread)
    findings.extend(built)
    # Files the policies name (Ray's lock and CA): read inside the directories given.
    roots = [os.path.realpath(p if Path(p).is_dir() else Path(p).parent) for p in paths]
    fleet, file_findings, file_problems = read_ray_files(fleet, roots)
    findings.extend(file_findings)
    fleet, pull_findings, pull_problems = read_pull_files(fleet, roots)
    findings.extend(pull_findings)
    file_problems += pull_problems
    choices, assigned = assign_profiles(fleet)
    findings.extend(assigned)
    addresses: dict[str, ipaddress.IPv4Address] = {}
    controller_address: ipaddress.IPv4Address | None = None
    topology: Topology | None = None
    if fleet.mesh is not None:
        addresses, addr_findings = assign_addresses(
            fleet.mesh, fleet.nodes, fleet.mesh_addresses, lambda name: fleet.may_declare("Node", name)
        )
        # The controller's address was assigned with the nodes'; it is not a node's.
        ctl = fleet.mesh.controller
        if ctl is not None and ctl.name not in fleet.nodes:
            controller_address = addresses.pop(ctl.name, None)
        topology, topo_findings = plan_topology(fleet)
        findings.extend(addr_findings)
        findings.extend(topo_findings)
    analysis = Analysis(fleet, choices, addresses, topology, controller_address)
    for check in checks.ALL:
        findings.extend(check(analysis))
    return Validation(Report([*syntax, *file_problems, *locate_all(findings)]), analysis)


def load_fleet(paths: Iterable[str | os.PathLike[str]]) -> Analysis:
    """The checked fleet of ``paths``; raises ``FleetInvalid`` (with the report) on any error."""
    result = validate(paths)
    if not result.report.ok or result.analysis is None:
        raise FleetInvalid(result.report)
    return result.analysis
