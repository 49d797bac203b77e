"""Which GpuProfile and HostProfile each node gets (Assignment precedence).

Precedence: for each node and each profile kind, among the Assignments whose selector
matches the node and that give that kind, the highest ``precedence`` wins. Equal
precedence with different profiles is ambiguous and an error; equal precedence with the
same profile is fine. A node no Assignment gives a kind to has none of it (its GPUs or
host are left as they are).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from ..fleet.diagnostics import Finding
from ..fleet.model import Assignment, Fleet

KINDS = ("gpu_profile", "host_profile")


@dataclass(frozen=True, slots=True)
class Choice:
    profile: str
    assignment: str


def assign_profiles(fleet: Fleet) -> tuple[dict[str, dict[str, Choice]], list[Finding]]:
    """``{node: {"gpu_profile": Choice, "host_profile": Choice}}`` (kinds absent when none).

    Findings: ``assignment.matches-nothing`` (a selector that selects no node),
    ``assignment.ambiguous`` (one per pair of Assignments in conflict, naming the first
    node and how many more are affected).
    """
    findings: list[Finding] = []
    matched: dict[str, list[str]] = {}
    for a in fleet.assignments.values():
        matched[a.name] = [n.name for n in fleet.nodes.values() if a.selector.matches(n)]
        if not matched[a.name] and fleet.complete("Node"):
            findings.append(
                Finding(
                    a.source, ("spec", "selector"), "assignment.matches-nothing", "selector matches no node"
                )
            )
    per_node: dict[str, list[Assignment]] = defaultdict(list)
    for a in fleet.assignments.values():
        for node in matched[a.name]:
            per_node[node].append(a)
    result: dict[str, dict[str, Choice]] = {}
    conflicts: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for node in fleet.nodes:
        choices: dict[str, Choice] = {}
        for kind in KINDS:
            candidates = [a for a in per_node.get(node, ()) if getattr(a, kind)]
            if not candidates:
                continue
            top = max(a.precedence for a in candidates)
            winners = [a for a in candidates if a.precedence == top]
            first = winners[0]
            for other in winners[1:]:
                if getattr(other, kind) != getattr(first, kind):
                    conflicts[(kind, first.name, other.name)].append(node)
            choices[kind] = Choice(getattr(first, kind), first.name)
        result[node] = choices
    for (kind, a_name, b_name), nodes in sorted(conflicts.items()):
        a, b = fleet.assignments[a_name], fleet.assignments[b_name]
        more = f" and {len(nodes) - 1} more" if len(nodes) > 1 else ""
        findings.append(
            Finding(
                b.source,
                ("spec", kind),
                "assignment.ambiguous",
                f"Assignments {a.name!r} ({kind} {getattr(a, kind)!r}) and {b.name!r} "
                f"({kind} {getattr(b, kind)!r}) both match node {nodes[0]!r}{more} with "
                f"precedence {b.precedence}; raise one's precedence or narrow a selector",
            )
        )
    return result, findings
