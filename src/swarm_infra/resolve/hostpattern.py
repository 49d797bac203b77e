"""``--limit PATTERN``: the one grammar every ``swarm`` command's ``--limit`` takes.

The subset of Ansible's host patterns (``docs/ansible/.../intro_patterns``; ansible-core's
``inventory/manager.py``: ``split_host_pattern``, ``order_patterns``,
``_evaluate_patterns``) that a fleet needs, with Ansible's meaning:

- terms separated by ``,`` or ``:`` (``lab-head-1,lab-gpu-2``, ``site_lab_a:gpu``);
- a term is a node name, a group name (whatever groups the hosts have: the engines'
  inventory gives ``site_<site>``, ``role_<role>``, ``gpu``, ``gpu_<model>``,
  ``simulated_gpu``, ``ray_head``, ``ray_worker``; ``all`` is every host), or a shell-style
  glob (``lab-gpu-*``, ``site_*``, ``lab-gpu-[12]``) matched against node and group names alike;
- ``&TERM`` keeps only the hosts TERM also selects (intersection), ``!TERM`` leaves TERM's
  hosts out (exclusion). As Ansible orders them, the plain terms are joined first, then
  the ``&`` terms intersect, then the ``!`` terms exclude, whatever the order written; a
  pattern of only ``&``/``!`` terms starts from ``all``.

Unlike Ansible, which warns and goes on, a term that selects no host, or a pattern that
leaves none, is an error (:class:`ValueError`, one line): a mistyped name must not narrow
or widen a run silently. Ansible's regular expressions (``~...``) are refused; its
subscripts (``group[0]``) are not taken (``[...]`` is a glob's character class here).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping

ALL = "all"
_GLOB = re.compile(r"[*?\[]")
_SPLIT = re.compile(r"[,:]")
_MOST_NAMED = 12  # names listed in an error before "..."


def terms(pattern: str) -> list[str]:
    """The terms of ``pattern``, each with its ``!``/``&`` prefix; raises ValueError for a
    pattern with no term, or a term that is only a prefix or Ansible syntax not taken here."""
    found = [t.strip() for t in _SPLIT.split(pattern) if t.strip()]
    if not found:
        raise ValueError(f"{pattern!r}: names no node or group")
    for term in found:
        bare = term.lstrip("!&")
        if not bare or len(term) - len(bare) > 1:
            raise ValueError(f"{pattern!r}: {term!r} is not a node, group or glob")
        if bare.startswith("~"):
            raise ValueError(f"{pattern!r}: {term!r}: regular expressions are not taken")
    return found


def _listed(names: Iterable[str]) -> str:
    names = sorted(names)
    return ", ".join(names[:_MOST_NAMED]) + (", ..." if len(names) > _MOST_NAMED else "")


def _matches(term: str, hosts: Mapping[str, Iterable[str]]) -> list[str]:
    """The hosts one bare term selects, in ``hosts``' order."""
    if term in (ALL, "*"):
        return list(hosts)
    if term in hosts:  # a host's own name first, as Ansible's _evaluate_patterns does
        return [term]
    glob = _GLOB.search(term) is not None
    return [
        h
        for h, groups in hosts.items()
        if any(n == term or (glob and fnmatch.fnmatchcase(n, term)) for n in (h, *groups))
    ]


def select(pattern: str, hosts: Mapping[str, Iterable[str]]) -> list[str]:
    """The names of the ``hosts`` (``{name: its groups}``) that ``pattern`` selects, in
    ``hosts``' order.

    Raises ValueError, one line without the option's name, when a term selects no host
    (``no node named X, nor a group (groups: ...)``, or ``'X*' matches no node or group``)
    or the pattern leaves none.
    """
    parts = terms(pattern)
    plain = [t for t in parts if t[0] not in "!&"] or [ALL]
    ordered = plain + [t for t in parts if t[0] == "&"] + [t for t in parts if t[0] == "!"]
    chosen: list[str] = []
    for term in ordered:
        bare = term.lstrip("!&")
        matched = _matches(bare, hosts)
        if not matched:
            if _GLOB.search(bare):
                raise ValueError(f"{bare!r} matches no node or group")
            groups = {g for gs in hosts.values() for g in gs} | {ALL}
            raise ValueError(f"no node named {bare}, nor a group (groups: {_listed(groups)})")
        if term[0] == "!":
            chosen = [h for h in chosen if h not in matched]
        elif term[0] == "&":
            chosen = [h for h in chosen if h in matched]
        else:
            chosen += [h for h in matched if h not in chosen]
    if not chosen:
        raise ValueError(f"{pattern!r} leaves no node")
    return [h for h in hosts if h in chosen]
