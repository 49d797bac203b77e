"""Risk flags: what a reviewer must not miss, each with a rule id and a one-line reason.

The fleet's ReviewPolicy (of the base: a change cannot relax its own review) makes each
flag ``block`` (exit 1), ``warn`` or ``off``; defaults in
:data:`swarm_infra.fleet.model.REVIEW_FLAG_DEFAULTS`. The rules:

- ``rollout-step-exceeded``: more nodes change than the Rollout converges in one step;
- ``driver-without-canary``: the driver changes on a group of nodes (GPU model, driver
  source) without a canary of that group first;
- ``preemption-gained``: a tenant can preempt another's workloads of a priority that it
  could not before;
- ``quota-over-capacity``: nominalQuota counts on GPUs the fleet does not have yet;
- ``node-removed-backing-quota``: a removed gpu-worker's flavor backs a tenant's quota;
- ``mesh-restart-on-relay-or-hub``: a relay or hub restarts its interface (tunnels drop);
- ``ssh-target-changed``: a node's SSH host, port or user changes;
- ``relay-crosses-provider``: a relay starts carrying a NAT-to-NAT site pair with a site of
  another provider than its own.
- ``ssh-host-key-changed``: a node's declared SSH host keys are added, changed or removed.
- ``package-index-changed``: the Ray cluster's package index (its URL or its CA) changes.
- ``ray-packages-changed``: what the Ray nodes install as root changes: the lock's pins or
  hashes, the Ray version, or the declared packages.
- ``rollout-loosened``: the Rollout's canary or batches grow, or it tolerates more failures.
- ``ray-version-changed``: the fleet's Ray version changes: every member is drained and
  stopped together, then started on the new version (Ray refuses mixed versions).
- ``driver-reboot``: the NVIDIA driver changes: which nodes are drained and rebooted in their
  batch, and which are left pending a reboot.
- ``mesh-key-changed``: a node's WireGuard public key recorded in the fleet (Node
  ``spec.mesh.public_key``) is added, changed or removed.
- ``pull-signers-changed``: who may sign what pull nodes apply changes (a key of the
  Rollout's allowed signers file, or of ``spec.pull.revoked_signers``), shown as its SHA256
  fingerprint with its comment and principals.
- ``pull-source-changed``: where pull nodes fetch the fleet (``spec.pull`` remote, ref, fleet).
- ``mesh-controller-changed``: the Mesh's controller, a peer of every node, is added or
  removed, or its recorded key or its endpoint changes.
- ``drain-grace-lowered``: running work on a drained node gets less time (``drain_grace_s``).
- ``kubernetes-context-changed``: rebooted nodes are no longer drained from their Kubernetes
  cluster, or from another one (``kubernetes_context`` removed or changed).
- ``quota-below-ray-cluster``: a ClusterQueue's nominalQuota of a flavor drops below what its
  tenants' RayClusters hold there.
- ``stack-target-changed`` (raised by :mod:`.stacks`): a Pulumi stack's ``kubernetes:context``
  or ``swarm:fleet`` changes, so an apply updates another cluster.

``driver-without-canary`` also reads the fleet's apply record (:class:`AppliedState`): a
canary in the base that no apply has converged is no canary. Outside the ReviewPolicy, the
review itself raises ``fleet-renamed`` and ``fleet-removed`` (always blocking) and
``base-invalid``.

Every value a flag is about is in its reason whole (keys as fingerprints): the renderer
never cuts a reason.
"""

from __future__ import annotations

import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

from ..fleet.diagnostics import Finding
from ..fleet.lockfile import canonical_name
from ..fleet.marks import locate_all
from ..fleet.model import Mesh, PullSpec, ReviewPolicy
from ..resolve.keys import ssh_host_key_fingerprint
from ..resolve.mesh import controller_endpoint
from ..resolve.rollout import rollout_batches as batches
from ..resolve.types import (
    ClusterState,
    DesiredState,
    GpuState,
    NodeState,
    PriorityState,
    RayNodeState,
    RelayRouteState,
    RolloutState,
)
from .load import Snapshot
from .locate import ChangeIndex, pick
from .model import Action, FieldChange, Flag, Location, MeshImpact, NodeChange


@dataclass(frozen=True)
class Preemption:
    """``preemptor``'s workloads at priority ``high`` may preempt ``victim``'s at ``low``;
    ``how`` says through which Kueue rule."""

    preemptor: str
    victim: str
    high: str
    low: str
    how: str


def _preempts(value: int, other: int, rule: str) -> bool:
    return (
        rule == "Any"
        or (rule == "LowerPriority" and value > other)
        or (rule == "LowerOrNewerEqualPriority" and value >= other)
    )


def preemptions(cluster: ClusterState | None) -> dict[tuple[str, str], Preemption]:
    """(preemptor tenant, victim tenant) -> the first way (by priority) one may preempt the
    other, under Kueue's rules: inside one ClusterQueue by ``withinClusterQueue``; across
    queues of one cohort by ``reclaimWithinCohort`` (``Any``: whatever the priority) or
    ``borrowWithinCohort``. A Priority whose preemption policy is ``Never`` preempts
    nothing. Tenants use the priorities they are allowed."""
    out: dict[tuple[str, str], Preemption] = {}
    if not cluster:
        return out
    queues = {q["name"]: q for q in cluster["cluster_queues"]}
    prios: dict[str, PriorityState] = {p["name"]: p for p in cluster["priorities"]}
    tenants = cluster["tenants"]
    for a in tenants:
        qa = queues.get(a["cluster_queue"])
        if qa is None:
            continue
        for b in tenants:
            qb = queues.get(b["cluster_queue"])
            if a is b or qb is None:
                continue
            same_queue = qa["name"] == qb["name"]
            same_cohort = qa["cohort"] is not None and qa["cohort"] == qb["cohort"]
            if not (same_queue or same_cohort):
                continue
            found = None
            for hi in sorted(a["priorities"], key=lambda p: -prios[p]["value"] if p in prios else 0):
                ph = prios.get(hi)
                if ph is None or ph["preemption_policy"] == "Never":
                    continue
                for lo in b["priorities"]:
                    pl = prios.get(lo)
                    if pl is None:
                        continue
                    pre = qa["preemption"]
                    if same_queue and _preempts(ph["value"], pl["value"], pre["within_cluster_queue"]):
                        found = (
                            f"in ClusterQueue {qa['name']}: withinClusterQueue {pre['within_cluster_queue']}"
                        )
                    elif not same_queue and _preempts(ph["value"], pl["value"], pre["reclaim_within_cohort"]):
                        found = (
                            f"in cohort {qa['cohort']}: reclaimWithinCohort {pre['reclaim_within_cohort']}"
                        )
                    elif not same_queue and _preempts(ph["value"], pl["value"], pre["borrow_within_cohort"]):
                        found = f"in cohort {qa['cohort']}: borrowWithinCohort {pre['borrow_within_cohort']}"
                    if found:
                        out[(a["name"], b["name"])] = Preemption(a["name"], b["name"], hi, lo, found)
                        break
                if found:
                    break
    return out


def _way(qa: Any, hi: PriorityState, lo: PriorityState, same_queue: bool) -> str | None:
    """How a workload of priority ``hi`` in queue ``qa`` may preempt one of ``lo`` (in the
    same ClusterQueue, or another queue of its cohort), by Kueue's rules; None: it may not."""
    pre = qa["preemption"]
    if same_queue:
        rule = pre["within_cluster_queue"]
        if _preempts(hi["value"], lo["value"], rule):
            return f"in ClusterQueue {qa['name']}: withinClusterQueue {rule}"
        return None
    for field, name in (
        ("reclaim_within_cohort", "reclaimWithinCohort"),
        ("borrow_within_cohort", "borrowWithinCohort"),
    ):
        if _preempts(hi["value"], lo["value"], pre[field]):
            return f"in cohort {qa['cohort']}: {name} {pre[field]}"
    return None


def preemption_ways(cluster: ClusterState | None) -> dict[tuple[str, str, str], Preemption]:
    """(preemptor tenant, victim tenant, victim's priority) -> how the preemptor may
    preempt the victim's workloads of that priority (with its highest priority that can),
    under the rules of :func:`preemptions`. Unlike :func:`preemptions`, every priority of
    the victim counts: a pair that could preempt spot and now also reaches production is a
    new way. Time: tenants squared times their priorities."""
    out: dict[tuple[str, str, str], Preemption] = {}
    if not cluster:
        return out
    queues = {q["name"]: q for q in cluster["cluster_queues"]}
    prios: dict[str, PriorityState] = {p["name"]: p for p in cluster["priorities"]}
    tenants = [t for t in cluster["tenants"] if t["cluster_queue"] in queues]
    highs = {
        t["name"]: sorted(
            (prios[p] for p in t["priorities"] if p in prios and prios[p]["preemption_policy"] != "Never"),
            key=lambda p: -p["value"],
        )
        for t in tenants
    }
    by_cohort: dict[str, list[Any]] = {}
    by_queue: dict[str, list[Any]] = {}
    for t in tenants:
        q = queues[t["cluster_queue"]]
        by_queue.setdefault(q["name"], []).append(t)
        if q["cohort"] is not None:
            by_cohort.setdefault(q["cohort"], []).append(t)
    for a in tenants:
        qa = queues[a["cluster_queue"]]
        if not highs[a["name"]]:
            continue
        others = {id(t): t for t in (*by_queue[qa["name"]], *by_cohort.get(qa["cohort"] or "", ()))}
        for b in others.values():
            if b is a:
                continue
            same_queue = b["cluster_queue"] == qa["name"]
            for lo in b["priorities"]:
                pl = prios.get(lo)
                if pl is None:
                    continue
                for ph in highs[a["name"]]:
                    how = _way(qa, ph, pl, same_queue)
                    if how:
                        out[(a["name"], b["name"], lo)] = Preemption(
                            a["name"], b["name"], ph["name"], lo, how
                        )
                        break
    return out


def _gpu(node: NodeState) -> GpuState:
    """The node's GpuState, asked of nodes with GPUs only."""
    gpu = node["gpu"]
    assert gpu is not None
    return gpu


def _fmt_counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{n} {k}" for k, n in counts.items())


@dataclass(frozen=True)
class AppliedState:
    """What the fleet's apply record says of the base (``refs/swarm/applied/<fleet>``,
    moved by apply.yml after an apply whose converge and ``pulumi up`` succeeded):
    ``record`` its commit (None: the fleet has none, or no record was read at all), and
    ``base_applied`` whether the record contains the base commit (True: everything merged
    in the base has converged; False: not yet; None: cannot be known, no record was read)."""

    record: str | None
    base_applied: bool | None


class FlagRaiser:
    """Raises the flags of one fleet's change (see the module doc)."""

    def __init__(
        self,
        base: DesiredState,
        head: DesiredState,
        policy: ReviewPolicy,
        index: ChangeIndex,
        node_changes: list[NodeChange],
        applied: AppliedState | None = None,
    ) -> None:
        self.base, self.head, self.policy, self.index = base, head, policy, index
        self.node_changes = node_changes
        self.applied = applied or AppliedState(None, None)
        self.flags: list[Flag] = []
        self.notes: list[str] = []  # what the reader must know that is no flag (plain text)

    def raise_flag(self, rule: str, reason: str, where: list[Location]) -> None:
        action = self.policy.flags[rule]
        if action != "off":  # else block or warn: all the policy's schema allows
            self.flags.append(Flag(rule, cast(Action, action), reason, where))

    def _node_where(self, nodes: set[str]) -> list[Location]:
        return pick(
            [loc for c in self.node_changes if not nodes.isdisjoint(c.nodes) for loc in c.where],
            fallback=self.index.all(),
        )

    def rollout(self, touched: Mapping[str, set[str]]) -> None:
        """``rollout-step-exceeded``: nodes of the head that change (mesh peers aside) vs
        the largest batch of the head's Rollout over the whole fleet."""
        rollout: RolloutState | None = self.head.get("rollout")
        names = list(self.head["nodes"])
        if not rollout or not names:
            return
        changed = sorted(n for n in touched if n in self.head["nodes"])
        step = max(len(b) for b in batches(names, rollout))
        if len(changed) <= step:
            return
        canary, pct = rollout["serial"][0], rollout["serial"][-1]
        self.raise_flag(
            "rollout-step-exceeded",
            f"the change touches {len(changed)} of {len(names)} nodes "
            f"({100 * len(changed) // len(names)}%); the Rollout converges at most {step} in one step "
            f"(canary {canary}, then batches of {pct}): split it, or accept that a failure "
            "is found only after a whole batch",
            self._node_where(set(changed)),
        )

    def driver(self) -> None:
        """``driver-without-canary``, judged per group: the nodes whose driver changes are
        grouped by GPU model(s) and by where their driver came from in the base (the
        GpuProfile, or the driver itself when no profile names it). A group passes when
        the new driver lands first on a canary of its own: at most ``canary_hosts`` of
        its nodes change (this change is the group's canary: an Assignment of higher
        precedence for one node), or a node of the same GPU model(s) already runs the new
        driver in the base (the canary went before), or one of its changed nodes is in
        the drivers play's canary batch (the first ``canary_hosts`` GPU nodes in name
        order). Each group that fails raises one flag."""
        rollout = self.head.get("rollout")
        before, after = self.base["nodes"], self.head["nodes"]
        changed = sorted(
            n
            for n, s in after.items()
            if n in before
            and s["gpu"]
            and before[n]["gpu"]
            and _gpu(s)["driver"] != _gpu(before[n])["driver"]
        )
        if not changed or not rollout:
            return
        canary_hosts = int(rollout["serial"][0]) if rollout["serial"] else 1
        plan = batches([n for n, s in after.items() if s["gpu"]], rollout)
        canary_batch = set(plan[0])

        def models(state: NodeState) -> tuple[str, ...]:
            return tuple(sorted({g["model"] for g in state["hardware"]["gpus"]}))

        def source(n: str) -> str:
            gpu = _gpu(before[n])
            return gpu["profile"] or json.dumps(gpu["driver"], sort_keys=True)

        groups: dict[tuple[tuple[str, ...], str], list[str]] = {}
        for n in changed:
            groups.setdefault((models(after[n]), source(n)), []).append(n)
        running = {
            (models(s), json.dumps(_gpu(s)["driver"], sort_keys=True)) for s in before.values() if s["gpu"]
        }
        for (group_models, _), nodes in sorted(groups.items()):
            new = {json.dumps(_gpu(after[n])["driver"], sort_keys=True) for n in nodes}
            if len(nodes) <= canary_hosts or not canary_batch.isdisjoint(nodes):
                continue
            if all((group_models, d) in running for d in new):
                # The canary went before, in the base: merged. Whether it converged is the
                # apply record's to say (a merged canary that never applied proves nothing).
                self._canary_converged(group_models, nodes)
                continue
            profiles = sorted({_gpu(after[n])["profile"] or "" for n in nodes})
            old_from = sorted({_gpu(before[n])["profile"] or "(no profile)" for n in nodes})
            where = [loc for p in profiles for loc in self.index.where("GpuProfile", p, ("spec", "driver"))]
            first = next(i for i, b in enumerate(plan) if not set(nodes).isdisjoint(b))
            landing = sorted(set(nodes).intersection(plan[first]))
            self.raise_flag(
                "driver-without-canary",
                f"the NVIDIA driver changes on {len(nodes)} {', '.join(group_models)} node(s) (driver "
                f"of GpuProfile {', '.join(old_from)}) at once: none of them is in the canary batch "
                f"({', '.join(plan[0])}), none of this group runs the new driver yet, and more than "
                f"{canary_hosts} change; it first lands on {len(landing)} node(s) in batch "
                f"{first + 1} of {len(plan)}. Roll it out on this group's canary first "
                f"({', '.join(nodes[:canary_hosts])}: an Assignment with a higher precedence for it), "
                "then on the rest",
                pick(where, fallback=self._node_where(set(nodes))),
            )

    def _canary_converged(self, group_models: tuple[str, ...], nodes: list[str]) -> None:
        """A group's driver passes because a canary of its GPU model runs the new driver in
        the base: flag ``driver-without-canary`` when the apply record says the base has not
        converged, and say so plainly when no record could be read."""
        models, base = ", ".join(group_models), self.index.base.commit
        if self.applied.base_applied is None:
            self.notes.append(
                f"the new driver of {len(nodes)} {models} node(s) is judged on its canary in the base, "
                "but whether that canary converged cannot be known: no apply record "
                "(refs/swarm/applied/<fleet>) was read; fetch them "
                "(git fetch origin 'refs/swarm/applied/*:refs/swarm/applied/*') or check swarm status"
            )
        elif not self.applied.base_applied:
            record = self.applied.record
            said = f"the last apply was at {record[:12]}, which" if record else "it was never applied, and"
            self.raise_flag(
                "driver-without-canary",
                f"the NVIDIA driver changes on {len(nodes)} {models} node(s) after its canary, but the "
                f"canary is only merged, not converged: {said} does not contain the base {base[:12]} "
                "(refs/swarm/applied/<fleet>, moved when an apply's converge succeeds); wait for the "
                "canary's apply to succeed, then re-run this review",
                self._node_where(set(nodes)),
            )

    def rollout_loosened(self, changes: list[FieldChange]) -> None:
        """``rollout-loosened``: the Rollout's canary or batch grows, or it tolerates more
        failed hosts (``changes`` from :func:`~.diff.rollout_fields`): a bad change reaches
        more nodes before the rollout stops."""
        looser = [
            c
            for c in changes
            if isinstance(c.before, int) and isinstance(c.after, int) and c.after > c.before
        ]
        if not looser:
            return
        what = "; ".join(f"{c.path} {c.before} -> {c.after}" for c in looser)
        nodes = len(self.head["nodes"])
        self.raise_flag(
            "rollout-loosened",
            f"the Rollout is loosened ({what}) on a fleet of {nodes} nodes: a bad change reaches "
            "more nodes at once, or more of them may fail, before the rollout stops",
            pick(self.index.where("Rollout"), fallback=self.index.all()),
        )

    def preemption(self) -> None:
        """``preemption-gained``: a tenant can now preempt another tenant's workloads of a
        priority that it could not preempt before (:func:`preemption_ways`): a new pair, or
        a pair that already could preempt some of the victim's priorities and now reaches
        another (a Priority's value raised, a priority allowed, a preemption rule changed).
        Both tenants present on both sides, or a new tenant and an existing victim, and a
        priority the victim had before; one flag per pair, naming every newly reachable
        priority of the victim."""
        cb, ca = self.base.get("cluster"), self.head.get("cluster")
        if (
            cb
            and ca
            and cb["priorities"] == ca["priorities"]
            and cb["tenants"] == ca["tenants"]
            and cb["cluster_queues"] == ca["cluster_queues"]
        ):
            return  # nothing preemption depends on changes
        before = preemption_ways(self.base.get("cluster"))
        after = preemption_ways(self.head.get("cluster"))
        old_prios = {
            t["name"]: set(t["priorities"]) for t in ((self.base.get("cluster") or {}).get("tenants") or [])
        }
        old_tenants = set(old_prios)
        gained: dict[tuple[str, str], list[Preemption]] = {}
        for key, p in sorted(after.items()):
            # A victim's priority new to it holds no workload yet: nothing it had is exposed.
            if key in before or p.victim not in old_tenants or key[2] not in old_prios[p.victim]:
                continue
            gained.setdefault((p.preemptor, p.victim), []).append(p)
        could = {(a, b) for a, b, _ in before}
        for (preemptor, victim), ways in sorted(gained.items()):
            p = ways[0]
            new = "" if preemptor in old_tenants else "new tenant "
            where = [
                *[loc for w in ways for loc in self.index.where("Priority", w.high)],
                *[loc for w in ways for loc in self.index.where("Priority", w.low)],
                *self._allocation_where("tenants", preemptor),
                *self._allocation_where("tenants", victim),
                *self.index.where("Allocation"),
            ]
            more = "".join(
                f"; its {w.high} ones may evict {victim}'s {w.low} ones ({w.how})" for w in ways[1:]
            )
            also = (
                f" (it could already preempt {victim}'s "
                f"{', '.join(sorted({lo for a, b, lo in before if (a, b) == (preemptor, victim)}))})"
                if (preemptor, victim) in could
                else ""
            )
            self.raise_flag(
                "preemption-gained",
                f"{new}{preemptor} can now preempt {victim}: its {p.high} workloads may evict "
                f"{victim}'s {p.low} ones ({p.how}){more}{also}",
                pick(where, fallback=self.index.all()),
            )

    def _allocation_where(self, list_name: str, item: str) -> list[Location]:
        alloc = next((n for k, n in self.index.head.documents if k == "Allocation"), None)
        if alloc is None:
            return []
        i = self.index.index_of("Allocation", alloc, ("spec", list_name), item)
        return [] if i is None else self.index.where("Allocation", alloc, ("spec", list_name, i))

    def quota(self, base_exists: bool) -> None:
        """``quota-over-capacity``: a flavor's nominalQuota (head) above its GPUs before the
        change. Above its GPUs after the change is ``allocation.quota-exceeds-capacity``."""
        if not base_exists:
            return
        cb = (self.base.get("cluster") or {}).get("capacity") or {}
        ca = (self.head.get("cluster") or {}).get("capacity") or {}
        for flavor, cap in sorted(ca.items()):
            had = cb[flavor]["gpus"] if flavor in cb else 0
            if cap["nominal_quota"] > had:
                where = [*self.index.where("Allocation"), *self.index.where("Node")]
                self.raise_flag(
                    "quota-over-capacity",
                    f"nominalQuota of {flavor} adds up to {cap['nominal_quota']} GPUs, above the {had} "
                    f"the fleet has before this change ({cap['gpus']} after): until the new nodes are "
                    "converged and join the cluster, Kueue admits workloads that no node can run",
                    pick(where, fallback=self.index.all()),
                )

    def removed_nodes(self) -> None:
        """``node-removed-backing-quota``: a removed gpu-worker whose GPU flavor holds
        nominalQuota of some tenant's queue after the change."""
        cb, ca = self.base.get("cluster"), self.head.get("cluster")
        if not cb or not ca:
            return
        flavor_of = {f["gpu_model"]: f["name"] for f in cb["flavors"]}
        holders: dict[str, list[str]] = {}
        for q in ca["cluster_queues"]:
            for x in q["quotas"]:
                if x["nominal_quota"] > 0:
                    tenants = [t["name"] for t in ca["tenants"] if t["cluster_queue"] == q["name"]]
                    holders.setdefault(x["flavor"], []).extend(tenants or [f"queue {q['name']}"])
        for name, node in sorted(self.base["nodes"].items()):
            if name in self.head["nodes"] or "gpu-worker" not in node["roles"]:
                continue
            for slot in node["hardware"]["gpus"]:
                flavor = flavor_of.get(slot["model"])
                if flavor not in holders:
                    continue
                cap_b = cb["capacity"][flavor]["gpus"]
                cap_a = ca["capacity"].get(flavor, {"gpus": 0, "nominal_quota": 0})
                self.raise_flag(
                    "node-removed-backing-quota",
                    f"{name} ({slot['count']} x {slot['model']}) is removed while {flavor} backs the "
                    f"nominalQuota of {', '.join(sorted(set(holders[flavor])))}: "
                    f"{cap_a['nominal_quota']} GPUs of quota on {cap_a['gpus']} GPUs (was {cap_b}); "
                    "workloads running on it lose their node",
                    pick(self.index.where("Node", name), fallback=self.index.all()),
                )

    def mesh(self, impact: MeshImpact) -> None:
        """``mesh-restart-on-relay-or-hub``: a node that is a relay or hub before or after the
        change restarts its interface."""
        routers: dict[str, str] = {}
        for cluster in (self.base.get("cluster"), self.head.get("cluster")):
            topo: Mapping[str, Any] = (cluster or {}).get("mesh") or {}
            for r in topo.get("relays", ()):
                routers.setdefault(r, "relay")
            for site, hub in (topo.get("hubs") or {}).items():
                routers[hub] = f"hub of {site}"
        for name in impact.restart:
            if name not in routers:
                continue
            b, a = self.base["nodes"][name]["mesh"], self.head["nodes"][name]["mesh"]
            assert b is not None and a is not None  # a restart: in the mesh before and after
            what = (
                f"address {b['address']} → {a['address']}"
                if b["address"] != a["address"]
                else (f"interface {b['interface']} → {a['interface']}")
            )
            peers = len(a["peers"])
            self.raise_flag(
                "mesh-restart-on-relay-or-hub",
                f"{name} ({routers[name]}) restarts its WireGuard interface ({what}): the tunnels of its "
                f"{peers} peers drop, and every node routed through it loses the mesh until they "
                "handshake again",
                pick(self.index.where("Node", name), self.index.where("Mesh"), fallback=self.index.all()),
            )

    def ssh_targets(self) -> None:
        """``ssh-target-changed``: a node's SSH host, port or user changes (the controller
        would take the operator's key, and the node's state, to whatever answers there)."""
        for name, node in sorted(self.head["nodes"].items()):
            before = self.base["nodes"].get(name)
            if before is None:
                continue
            b, a = before["ssh"], node["ssh"]
            if (b["host"], b["port"], b["user"]) == (a["host"], a["port"], a["user"]):
                continue
            self.raise_flag(
                "ssh-target-changed",
                f"{name}'s SSH target changes from {b['user']}@{b['host']}:{b['port']} to "
                f"{a['user']}@{a['host']}:{a['port']}: the controller will apply {name}'s state there "
                "with the operator's key; check that this machine is the node",
                pick(self.index.where("Node", name), fallback=self.index.all()),
            )

    def relays(self) -> None:
        """``relay-crosses-provider``: a relay route of the head (one per NAT-to-NAT site pair,
        ``ClusterState.mesh.relay_routes``) whose relay's provider is not the provider of
        both sites, and which the base did not have with the same relay and providers (a
        new pair, a pair moved to this relay, or a provider that changed). WireGuard
        decrypts at the relay: its provider can read, delay or drop the pair's traffic."""

        def crossing(state: DesiredState) -> dict[tuple[str, ...], RelayRouteState]:
            topo: Mapping[str, Any] = (state.get("cluster") or {}).get("mesh") or {}
            out: dict[tuple[str, ...], RelayRouteState] = {}
            for r in topo.get("relay_routes", ()):
                if any(p != r["relay_provider"] for p in r["providers"]):
                    out[(r["relay"], r["relay_provider"], *r["sites"], *r["providers"])] = r
            return out

        before = crossing(self.base)
        for key, r in sorted(crossing(self.head).items()):
            if key in before:
                continue
            (a, b), (pa, pb) = r["sites"], r["providers"]
            why = (
                "no measured path: chosen by the fallback order (own sites, own providers, hash)"
                if r["path_rtt_ms"] is None
                else f"measured path {r['path_rtt_ms']:g} ms"
            )
            self.raise_flag(
                "relay-crosses-provider",
                f"{r['relay']} (site {r['relay_site']}, provider {r['relay_provider']}) would relay the "
                f"NAT-to-NAT traffic between {a} ({pa}) and {b} ({pb}) ({why}): WireGuard decrypts "
                f"at the relay, so {r['relay_provider']} can read, delay or drop it; check that both "
                "providers accept this relay",
                pick(
                    self.index.where("Node", r["relay"]),
                    self.index.where("LatencyMatrix"),
                    [*self.index.where("Site", a), *self.index.where("Site", b)],
                    self.index.where("Site", r["relay_site"]),
                    self.index.where("Mesh"),
                    fallback=self.index.all(),
                ),
            )

    def ssh_host_keys(self) -> None:
        """``ssh-host-key-changed``: a node of both sides whose declared SSH host keys
        differ (added, changed or removed), shown as fingerprints. The keys decide which
        machine the controller accepts as the node: a changed key is also exactly what
        another machine answering in its place looks like. A new node's keys come with the
        node, which the review shows as added."""
        for name, node in sorted(self.head["nodes"].items()):
            before = self.base["nodes"].get(name)
            if before is None:
                continue
            old, new = before["ssh"]["host_keys"], node["ssh"]["host_keys"]
            if set(old) == set(new):  # the order of the keys accepts nothing more or less
                continue
            gone = [ssh_host_key_fingerprint(k) for k in old if k not in new]
            added = [ssh_host_key_fingerprint(k) for k in new if k not in old]
            if not old:
                what = (
                    f"{name} now declares its SSH host key(s) ({', '.join(added)}): the controller will "
                    f"connect to {name} only if it proves it holds one (before: whatever the operator's "
                    "known_hosts held)"
                )
            elif not new:
                what = (
                    f"{name}'s declared SSH host key(s) are removed ({', '.join(gone)}): the controller "
                    "will check it against the operator's own known_hosts instead"
                )
            else:
                change = "; ".join(
                    [
                        *([f"added {', '.join(added)}"] if added else []),
                        *([f"removed {', '.join(gone)}"] if gone else []),
                    ]
                )
                what = (
                    f"{name}'s SSH host keys change ({change}): the controller will accept only the "
                    "new set, and a key that changes is also what another machine answering in its "
                    "place looks like"
                )
            self.raise_flag(
                "ssh-host-key-changed",
                f"{what}; check the fingerprints on the node itself (ssh-keygen -lf "
                "/etc/ssh/ssh_host_*_key.pub on its console)",
                pick(
                    self.index.where("Node", name, ("spec", "ssh")),
                    self.index.where("Node", name),
                    fallback=self.index.all(),
                ),
            )

    def mesh_keys(self) -> None:
        """``mesh-key-changed``: a node of both sides whose WireGuard public key recorded in
        the fleet (NodeState ``mesh.public_key``) is added, changed or removed. Every peer
        trusts that key as the node (its peers' configuration comes from it, in push and pull
        mode), so a changed key is also what another machine taking the node's place looks
        like. A new node's key comes with the node, which the review shows as added."""
        for name, node in sorted(self.head["nodes"].items()):
            before = self.base["nodes"].get(name)
            if before is None:
                continue
            old = before["mesh"]["public_key"] if before["mesh"] else None
            new = node["mesh"]["public_key"] if node["mesh"] else None
            if old == new:
                continue
            if not old:
                what = (
                    f"{name}'s WireGuard public key is now recorded ({new}): every peer uses it, and "
                    f"{name} is refused while it holds another"
                )
            elif not new:
                what = (
                    f"{name}'s recorded WireGuard public key ({old}) is removed: its peers learn its key "
                    "from the node again, trusted on first use by the controller (a pull node's peers "
                    "have none)"
                )
            else:
                what = (
                    f"{name}'s recorded WireGuard public key changes ({old} → {new}): every peer will "
                    "trust the new key as this node, and a key that changes is also what another "
                    "machine taking its place looks like"
                )
            self.raise_flag(
                "mesh-key-changed",
                f"{what}; check it on the node itself (wg pubkey < its key file, on its console)",
                pick(
                    self.index.where("Node", name, ("spec", "mesh", "public_key")),
                    self.index.where("Node", name),
                    fallback=self.index.all(),
                ),
            )

    def ray_supply(self) -> None:
        """``package-index-changed`` and ``ray-packages-changed``: the bare-node Ray cluster
        of both sides (NodeState.ray of any member: every member installs the same) differs
        in where pip installs from (``package_index``, ``index_ca``) or in what it installs
        (the lock's pins and hashes, which hold the Ray version and the packages). Every
        Ray node installs them as root. A Ray cluster added or removed is a visible change
        of its own."""
        old, new = _ray(self.base), _ray(self.head)
        if old is None or new is None:
            return
        name = new["cluster"]
        if (old["package_index"], old["index_ca"]) != (new["package_index"], new["index_ca"]):
            parts = []
            if old["package_index"] != new["package_index"]:
                parts.append(f"index {old['package_index']} -> {new['package_index']}")
            if old["index_ca"] != new["index_ca"]:
                parts.append(
                    "its CA "
                    + (
                        "added"
                        if old["index_ca"] is None
                        else "removed"
                        if new["index_ca"] is None
                        else "replaced"
                    )
                )
            self.raise_flag(
                "package-index-changed",
                f"the Ray nodes of {name} install as root from another source ({'; '.join(parts)}): "
                "check who runs that index and who holds its CA's key",
                pick(
                    [
                        *self.index.where("RayCluster", name, ("spec", "package_index")),
                        *(self._ray_file("index_ca_file") if old["index_ca"] != new["index_ca"] else []),
                    ],
                    self.index.where("RayCluster", name),
                    fallback=self.index.all(),
                ),
            )
        if old["lock"] != new["lock"]:
            self.raise_flag(
                "ray-packages-changed",
                f"what the Ray nodes of {name} install as root changes: {_lock_change(old, new)}; "
                "check where the new pins and hashes come from (scripts/ray-lock.py)",
                pick(
                    [
                        *self.index.where("RayCluster", name, ("spec", "lock_file")),
                        *self.index.where("Cluster", None, ("spec", "ray_version")),  # the fleet's Ray
                        *self.index.where("RayCluster", name, ("spec", "packages")),
                        *self._ray_file("lock_file"),
                    ],
                    self.index.where("RayCluster", name),
                    fallback=self.index.all(),
                ),
            )

    def upgrades(self) -> None:
        """``ray-version-changed`` and ``driver-reboot``: what the converge of a Ray or
        driver version change does to running work (``swarm_infra.resolve.rollout``)."""
        rollout = self.head.get("rollout") or {}
        grace = rollout.get("drain_grace_s", 600)
        old, new = _ray(self.base), _ray(self.head)
        if old is not None and new is not None and old["version"] != new["version"]:
            members = sum(1 for s in self.head["nodes"].values() if s["ray"])
            self.raise_flag(
                "ray-version-changed",
                f"Ray {old['version']} -> {new['version']} on the {members} member(s) of {new['cluster']}: "
                f"Ray refuses mixed versions, so the converge drains every member (running work gets "
                f"{grace} s), stops them all, then starts the head and the workers on the new version; "
                "the cluster takes no work meanwhile",
                pick(self.index.where("Cluster", None, ("spec", "ray_version")), fallback=self.index.all()),
            )
        before, after = self.base["nodes"], self.head["nodes"]
        changed = sorted(
            n
            for n, s in after.items()
            if n in before
            and s["gpu"]
            and before[n]["gpu"]
            and _gpu(s)["driver"] != _gpu(before[n])["driver"]
        )
        if not changed:
            return
        reboot = [n for n in changed if (d := _gpu(after[n])["driver"]) is not None and d["allow_reboot"]]
        pending = [n for n in changed if n not in reboot]
        parts = []
        if reboot:
            kube = rollout.get("kubernetes_context")
            drained = "Ray" + (f", Kubernetes {kube}" if kube else "")
            parts.append(
                f"{len(reboot)} node(s) are drained ({drained}; running work "
                f"gets {grace} s), rebooted and verified in their batch ({', '.join(reboot[:10])})"
            )
        if pending:
            parts.append(
                f"{len(pending)} node(s) are left pending a reboot, their GPU settings waiting for it "
                f"(allow_reboot is false: {', '.join(pending[:10])})"
            )
        profiles = sorted({_gpu(after[n])["profile"] or "" for n in changed} - {""})
        where = [loc for p in profiles for loc in self.index.where("GpuProfile", p, ("spec", "driver"))]
        self.raise_flag(
            "driver-reboot",
            "the NVIDIA driver changes: " + "; ".join(parts),
            pick(where, fallback=self._node_where(set(changed))),
        )

    def pull_signers(self) -> None:
        """``pull-signers-changed``: the keys that may sign what pull nodes apply (the
        Rollout's allowed signers file: :attr:`~swarm_infra.fleet.model.PullSpec.
        allowed_signers`) or that may no longer (``spec.pull.revoked_signers``) differ
        between base and head: one flag per key added, removed, or given other principals
        or options, the key shown as ``ssh-keygen -lf`` prints it (``SHA256:`` and the
        unpadded base64 of the SHA-256 of its blob) with its comment. A pull node verifies a
        new commit against the signers of the last one it applied, so a key added here may
        sign every later commit the nodes run as root. Lines: the key's line of the signers
        file (at base for a key removed), or the Rollout's ``spec.pull``."""
        old, new = _pull(self.index.base), _pull(self.index.head)
        if old == new:  # both None, or the same settings and signers' text
            return
        nodes = self._pull_nodes()
        before = _signers(old.allowed_signers) if old else {}
        after = _signers(new.allowed_signers) if new else {}
        for key in sorted(before.keys() | after.keys()):
            b, a = before.get(key), after.get(key)
            if b is not None and a is not None and (b.principals, b.options) == (a.principals, a.options):
                continue
            if b is None:
                assert a is not None  # a key of either side
                what = (
                    f"the pull nodes' allowed signers gain {a.shown}: once merged, a commit this key "
                    f"signs is applied as root by {nodes}"
                )
            elif a is None:
                what = (
                    f"the pull nodes' allowed signers lose {b.shown}: commits it signs are refused "
                    "once the nodes apply this one"
                )
            else:
                what = (
                    f"{a.shown} signs for other principals or options "
                    f"(principals {b.principals} -> {a.principals}; options {b.options or 'none'} -> "
                    f"{a.options or 'none'}): which commits of {nodes} it may sign changes"
                )
            # The key's line: at head where it is listed there, else at base (a key removed).
            where = (
                self._signers_line(self.index.head, new, a.line)
                if a is not None and new is not None
                else self._signers_line(self.index.base, old, b.line)
                if b is not None and old is not None
                else []
            )
            self.raise_flag(
                "pull-signers-changed",
                f"{what}; check the fingerprint with the key's holder (ssh-keygen -lf on the .pub "
                "file) before this merges",
                pick(where, self.index.where("Rollout", None, ("spec", "pull")), fallback=self.index.all()),
            )
        revoked_b = set(old.revoked_signers) if old else set()
        revoked_a = set(new.revoked_signers) if new else set()
        for key in sorted(revoked_b ^ revoked_a):
            shown = _fingerprint(key)
            what = (
                f"{shown} is revoked (spec.pull.revoked_signers): {nodes} refuse commits it signs"
                if key in revoked_a
                else f"{shown} is no longer revoked (spec.pull.revoked_signers): {nodes} accept commits "
                "it signs again wherever their allowed signers still list it"
            )
            self.raise_flag(
                "pull-signers-changed",
                f"{what}; check the fingerprint with the key's holder (ssh-keygen -lf)",
                pick(
                    self.index.where("Rollout", None, ("spec", "pull", "revoked_signers")),
                    self.index.where("Rollout", None, ("spec", "pull")),
                    fallback=self.index.all(),
                ),
            )

    def pull_source(self) -> None:
        """``pull-source-changed``: the Rollout's ``spec.pull`` remote, ref or fleet differs
        (or ``spec.pull`` is added or removed): where pull nodes fetch the commits they
        verify and apply. Whoever serves the remote decides which signed commits the nodes
        see (holding an older one back, or offering another branch's)."""
        old, new = _pull(self.index.base), _pull(self.index.head)
        fields = ("remote", "ref", "fleet")

        def source(p: PullSpec | None) -> str:
            return "none" if p is None else ", ".join(f"{f} {getattr(p, f)}" for f in fields)

        if old == new or (old is not None and new is not None and source(old) == source(new)):
            return
        if old is None or new is None:
            what = f"pull convergence is {'declared' if old is None else 'removed'} ({source(new or old)})"
        else:
            what = "; ".join(
                f"{f} {getattr(old, f)} -> {getattr(new, f)}"
                for f in fields
                if getattr(old, f) != getattr(new, f)
            )
        self.raise_flag(
            "pull-source-changed",
            f"where the pull nodes fetch the fleet changes ({what}): "
            + (
                f"{self._pull_nodes()} will fetch from there; check who serves that remote and who "
                "may push to that ref"
                if new is not None
                else "no node may converge by pull any more"
            ),
            pick(
                [
                    *(self._base_line("Rollout", ("spec", "pull")) if new is None else []),
                    *(loc for f in fields for loc in self.index.where("Rollout", None, ("spec", "pull", f))),
                ],
                self.index.where("Rollout", None, ("spec", "pull")),
                self.index.where("Rollout"),
                fallback=self.index.all(),
            ),
        )

    def _pull_nodes(self) -> str:
        """``the N pull node(s) (a, b, ...)`` of the head (and base), or that none is yet."""
        names = sorted({n for s in (self.base, self.head) for n, node in s["nodes"].items() if node["pull"]})
        if not names:
            return "every node that converges by pull (none does yet)"
        shown = ", ".join(names[:10]) + (f", and {len(names) - 10} more" if len(names) > 10 else "")
        return f"the {len(names)} pull node(s) ({shown})"

    def _signers_line(self, side: Snapshot, pull: PullSpec, line: int) -> list[Location]:
        """``line`` of ``pull``'s allowed signers file at ``side``, as a location."""
        analysis = side.analysis
        rollout = analysis.fleet.rollout if analysis is not None else None
        if rollout is None or rollout.source is None:
            return []
        path = str(Path(rollout.source.file).parent / pull.allowed_signers_file)
        ref: Literal["base", "head"] = "head" if side is self.index.head else "base"
        return [Location(side.rel(path), line, ref, side.commit)]

    def mesh_controller(self) -> None:
        """``mesh-controller-changed``: the Mesh's controller (``spec.controller``) is added
        or removed, or its recorded WireGuard public key or its endpoint (``host:port`` as
        the nodes reach it: :func:`~swarm_infra.resolve.mesh.controller_endpoint`) differs.
        Every node peers with the controller and lets it in over the mesh; the controller
        reaches nodes there with the operator's SSH key. Keys are shown whole (44 base64
        characters: a WireGuard key has no other form)."""
        old, new = _mesh(self.index.base), _mesh(self.index.head)
        was = old.controller if old is not None else None
        now = new.controller if new is not None else None
        if was is None and now is None:
            return

        def key(k: str | None) -> str:
            return k or "not recorded (push mode writes the running controller's own key)"

        def endpoint(m: Mesh | None) -> str:
            return (controller_endpoint(m) if m is not None else None) or "none"

        parts = []
        if was is None or now is None:
            ctl, mesh = (now, new) if now is not None else (was, old)
            assert ctl is not None
            parts.append(
                f"the controller {ctl.name} is {'added' if was is None else 'removed'} (public key "
                f"{key(ctl.public_key)}, endpoint {endpoint(mesh)})"
            )
        else:
            if was.public_key != now.public_key:
                parts.append(f"its public key {key(was.public_key)} -> {key(now.public_key)}")
            if endpoint(old) != endpoint(new):
                parts.append(f"its endpoint {endpoint(old)} -> {endpoint(new)}")
        if not parts:
            return
        nodes = len(self.head["nodes"])
        self.raise_flag(
            "mesh-controller-changed",
            f"the mesh's controller changes ({'; '.join(parts)}): every one of the {nodes} node(s) "
            "peers with it and lets it in over the mesh, where it reaches nodes with the "
            "operator's SSH key; check the key on the controller itself (swarm mesh controller-key)",
            pick(
                [
                    # Removed: where it was, at the base (the head has only the Mesh's spec).
                    *(self._base_line("Mesh", ("spec", "controller")) if now is None else []),
                    *self.index.where("Mesh", None, ("spec", "controller")),
                ],
                self.index.where("Mesh"),
                fallback=self.index.all(),
            ),
        )

    def drain(self) -> None:
        """``drain-grace-lowered`` and ``kubernetes-context-changed``: the Rollout gives running
        work on a drained node less time (``drain_grace_s``), or no longer drains rebooted
        nodes from the nodes' Kubernetes cluster, or drains them from another one
        (``kubernetes_context`` removed or changed; one added only drains more). Defaults as
        the resolver's (600 s, none) where a side has no Rollout."""
        rb, ra = self.base.get("rollout") or {}, self.head.get("rollout") or {}
        gb, ga = rb.get("drain_grace_s", 600), ra.get("drain_grace_s", 600)
        if ga < gb:
            self.raise_flag(
                "drain-grace-lowered",
                f"drain_grace_s {gb} -> {ga}: running work on a node that a batch reboots (a new "
                f"driver) or a Ray upgrade drains gets {ga} s instead of {gb} s before it is stopped"
                + (" (none at all)" if ga == 0 else "")
                + "; the Kubernetes drain (kubectl drain --timeout) waits as long",
                pick(
                    self.index.where("Rollout", None, ("spec", "drain_grace_s")),
                    self.index.where("Rollout"),
                    fallback=self.index.all(),
                ),
            )
        kb, ka = rb.get("kubernetes_context"), ra.get("kubernetes_context")
        if kb is not None and kb != ka:
            what = (
                f"kubernetes_context {kb} is removed: a node that a batch reboots is no longer "
                "drained from the nodes' Kubernetes cluster first (its pods die with the reboot, "
                "PodDisruptionBudgets unasked, and the node is not cordoned)"
                if ka is None
                else f"kubernetes_context {kb} -> {ka}: rebooted nodes are drained from the cluster of "
                f"context {ka}, not {kb}; check that it is the nodes' cluster"
            )
            # Removed: the line it was on (at the base) comes first; the head has only its spec.
            gone = self._base_line("Rollout", ("spec", "kubernetes_context")) if ka is None else []
            self.raise_flag(
                "kubernetes-context-changed",
                what,
                pick(
                    [*gone, *self.index.where("Rollout", None, ("spec", "kubernetes_context"))],
                    self.index.where("Rollout"),
                    fallback=self.index.all(),
                ),
            )

    def _base_line(self, kind: str, path: tuple[str, ...]) -> list[Location]:
        """The line of ``path`` in the base's document of ``kind`` (Rollout, Mesh: one per
        fleet), composed from the base's file for its marks: what a change removed has no
        line at the head."""
        analysis = self.index.base.analysis
        doc = {"Rollout": analysis.fleet.rollout, "Mesh": analysis.fleet.mesh}.get(kind) if analysis else None
        source = doc.source if doc is not None else None
        if source is None:
            return []
        (diag,) = locate_all([Finding(source, path, "review.change", "")])
        base = self.index.base
        return [Location(base.rel(diag.file), diag.line, "base", base.commit)]

    def ray_quota(self) -> None:
        """``quota-below-ray-cluster``: a ClusterQueue's nominalQuota of a GPU flavor drops, for
        some resource (``nvidia.com/gpu`` in device units, ``cpu`` in millicores, ``memory`` in
        MiB), below what the RayClusters of its tenants hold there: each worker group's
        declared ``replicas`` times its pod's requests, of the clusters that run now (in the
        base), at their size in the head (a cluster shrunk with the cut is the smaller
        workload). Kueue keeps an admitted workload admitted when nominalQuota drops
        (kubernetes-sigs/kueue#5176) and counts the excess as borrowed (#746): in a cohort
        the other queues may reclaim it, and once evicted the cluster is admitted again only
        if it fits (nominalQuota plus borrowingLimit; without a cohort, nominalQuota)."""
        cb, ca = self.base.get("cluster"), self.head.get("cluster")
        if not cb or not ca:
            return
        running = {(c["namespace"], c["name"]) for c in cb["ray_clusters"]}
        held = _ray_held(ca, running)
        queue_of = {t["name"]: t["cluster_queue"] for t in ca["tenants"]}
        before = {q["name"]: {x["flavor"]: x for x in q["quotas"]} for q in cb["cluster_queues"]}
        for q in ca["cluster_queues"]:
            for quota in q["quotas"]:
                was = before.get(q["name"], {}).get(quota["flavor"])
                if was is None:
                    continue
                olds = {r["name"]: r["nominal_quota"] for r in was["resources"]}
                short, never = [], False
                clusters: set[str] = set()
                for r in quota["resources"]:
                    amounts = {
                        c: v
                        for (t, c, f, res), v in held.items()
                        if queue_of.get(t) == q["name"] and f == quota["flavor"] and res == r["name"]
                    }
                    total, now = sum(amounts.values()), r["nominal_quota"]
                    if not (now < olds.get(r["name"], 0) and now < total):
                        continue
                    short.append(
                        f"{r['name']} {_amount(r['name'], olds[r['name']])} -> {_amount(r['name'], now)}, "
                        f"below the {_amount(r['name'], total)} they hold"
                    )
                    clusters |= set(amounts)
                    limit = r["borrowing_limit"]
                    never |= q["cohort"] is None or (limit is not None and total > now + limit)
                if not short:
                    continue
                if never:
                    room = (
                        "once evicted (preempted, a node lost, a restart) it is not admitted again until "
                        "the quota is raised: it needs more than "
                        + ("the queue's nominalQuota, with no cohort to borrow from" if q["cohort"] is None
                           else "nominalQuota and borrowingLimit together")
                    )  # fmt: skip
                else:
                    room = (
                        f"the excess counts as borrowed from cohort {q['cohort']}, which its other queues "
                        "may reclaim (preempting the cluster); once evicted it is admitted again only if "
                        "the cohort has room"
                    )
                self.raise_flag(
                    "quota-below-ray-cluster",
                    f"ClusterQueue {q['name']}'s quota of {quota['flavor']} drops below what its "
                    f"RayCluster(s) {', '.join(sorted(clusters))} hold there ({'; '.join(short)}; their "
                    "declared replicas times each worker's requests): Kueue keeps them admitted, over "
                    f"quota; {room}",
                    pick(
                        self._allocation_where("queues", q["name"]),
                        self.index.where("Allocation"),
                        fallback=self.index.all(),
                    ),
                )

    def _ray_file(self, field: str) -> list[Location]:
        """The head's file named by the RayCluster's ``field`` (``lock_file``,
        ``index_ca_file``), as a whole-file location (its text is not YAML)."""
        analysis = self.index.head.analysis
        ray = analysis.fleet.ray if analysis is not None else None
        name = getattr(ray, field, None) if ray is not None else None
        if ray is None or name is None:
            return []
        path = str(Path(ray.source.file).parent / name)
        return [Location(self.index.head.rel(path), 0, "head", self.index.head.commit)]


@dataclass(frozen=True)
class _Signer:
    """One key of an allowed signers file: its line (1-based), principals, options (None:
    none) and how a review shows it (fingerprint, comment, principals)."""

    line: int
    principals: str
    options: str | None
    shown: str


def _fingerprint(key: str, comment: str = "") -> str:
    """``ssh-ed25519 SHA256:... (comment "c")``: ``keytype base64`` as ``ssh-keygen -lf``
    identifies it (:func:`~swarm_infra.resolve.keys.ssh_host_key_fingerprint`), the comment
    whole; a value that does not decode is shown as it is (it passed no validation)."""
    try:
        shown = ssh_host_key_fingerprint(key)
    except (ValueError, binascii.Error):
        shown = key
    return shown + (f' (comment "{comment}")' if comment else "")


def _signers(text: str) -> dict[str, _Signer]:
    """The keys (``keytype base64``) of an allowed signers file's ``text``. The text was
    validated (:func:`swarm_infra.resolve.pull.allowed_signers_problems`: ``principals
    [options] keytype base64 [comment]`` per line, option values without spaces), so its
    fields split at spaces (ssh-keygen(1), ALLOWED SIGNERS). A key listed twice keeps its
    first line."""
    out: dict[str, _Signer] = {}
    for number, raw in enumerate(text.split("\n"), 1):
        line = raw.rstrip("\r")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split(" ")
        options = parts[1] if len(parts) > 1 and '="' in parts[1] else None
        rest = parts[2:] if options is not None else parts[1:]
        if len(rest) < 2:
            continue
        key, comment = f"{rest[0]} {rest[1]}", " ".join(rest[2:])
        shown = _fingerprint(key, comment) + f" for principals {parts[0]}"
        out.setdefault(key, _Signer(number, parts[0], options, shown))
    return out


def _pull(side: Snapshot) -> PullSpec | None:
    """The Rollout's ``spec.pull`` of ``side`` (its allowed signers read), or None."""
    rollout = side.analysis.fleet.rollout if side.analysis is not None else None
    return rollout.pull if rollout is not None else None


def _mesh(side: Snapshot) -> Mesh | None:
    return side.analysis.fleet.mesh if side.analysis is not None else None


def _ray_held(cluster: ClusterState, running: set[tuple[str, str]]) -> dict[tuple[str, str, str, str], int]:
    """(tenant, RayCluster, flavor, resource) -> what the tenant's RayCluster, one of
    ``running`` (namespace, name), holds of that flavor's quota: each worker group's
    ``replicas`` times its pod's requests, in a quota's units (``nvidia.com/gpu`` device
    units, ``cpu`` millicores, ``memory`` MiB). The head is left out: its quota is its
    site's CPU flavor, made for the heads themselves."""
    out: dict[tuple[str, str, str, str], int] = {}
    for rc in cluster["ray_clusters"]:
        if rc["tenant"] is None or (rc["namespace"], rc["name"]) not in running:
            continue
        for w in rc["workers"]:
            if w["flavor"] is None or not w["replicas"]:
                continue
            for res, each in (
                ("nvidia.com/gpu", w["gpus"]),
                ("cpu", w["cpus"] * 1000),
                ("memory", w["memory_gib"] * 1024),
            ):
                key = (rc["tenant"], rc["name"], w["flavor"], res)
                out[key] = out.get(key, 0) + w["replicas"] * each
    return out


def _amount(resource: str, value: int) -> str:
    """A quota amount in its resource's unit (``8``, ``96 CPUs``, ``512 GiB``)."""
    if resource == "cpu":
        return f"{value / 1000:g} CPUs"
    if resource == "memory":
        return f"{value / 1024:g} GiB"
    return str(value)


def _ray(state: DesiredState) -> RayNodeState | None:
    return next((s["ray"] for _, s in sorted(state["nodes"].items()) if s["ray"]), None)


def _lock_change(old: RayNodeState, new: RayNodeState) -> str:
    """``ray 2.59.0 -> 2.60.0; changed numpy 2.4.5 -> 2.4.6; added x 1.0; removed y 2.0;
    new hashes for z 3.0`` (at most 10 names in each part)."""

    def pins(ray: RayNodeState) -> dict[str, tuple[str, list[str]]]:
        out = {}
        for pin in ray["lock"]:
            name, _, version = pin["requirement"].partition("==")
            out[canonical_name(name.split("[")[0])] = (version, pin["hashes"])
        return out

    def some(items: list[str]) -> str:
        return ", ".join(items[:10]) + (f", and {len(items) - 10} more" if len(items) > 10 else "")

    a, b = pins(old), pins(new)
    parts = []
    if old["version"] != new["version"]:
        parts.append(f"Ray {old['version']} -> {new['version']}")
    changed = [f"{n} {a[n][0]} -> {b[n][0]}" for n in sorted(a.keys() & b.keys()) if a[n][0] != b[n][0]]
    added = [f"{n} {b[n][0]}" for n in sorted(b.keys() - a.keys())]
    removed = [f"{n} {a[n][0]}" for n in sorted(a.keys() - b.keys())]
    rehashed = [
        f"{n} {b[n][0]}" for n in sorted(a.keys() & b.keys()) if a[n][0] == b[n][0] and a[n][1] != b[n][1]
    ]
    for label, items in (("changed", changed), ("added", added), ("removed", removed),
                         ("other hashes for", rehashed)):  # fmt: skip
        if items:
            parts.append(f"{label} {some(items)}")
    return "; ".join(parts) or "the lock's order"


def gpu_nodes(state: Mapping[str, NodeState]) -> list[str]:
    """The drivers play's hosts (group ``gpu``: nodes with GPUs), in inventory (name) order."""
    return [n for n, s in state.items() if s["gpu"]]
