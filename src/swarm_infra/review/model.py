"""What a review finds, as plain data: the Markdown and JSON forms both render these.

Values (``before``/``after``) are JSON values taken from the desired state or the cluster
objects; ``ABSENT`` stands for a key or entry that one side does not have. Every list is
sorted, so the same refs give the same review.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from ..resolve.layers import LAYERS as NODE_LAYERS

Change = Literal["added", "removed", "changed"]
Action = Literal["block", "warn"]
ABSENT: dict[str, bool] = {"absent": True}  # a value one side does not have (JSON: {"absent": true})
# The review's layers: "node" (site, roles, labels, SSH, hardware, layout) and the node
# layers, in registry order, each named after its NodeState slice (the drivers layer's is
# the GPU slice's "driver").
LAYERS = ("node", *(x.state[-1] for x in NODE_LAYERS))
LAYER_TITLES = {"node": "Node", **{x.state[-1]: x.title for x in NODE_LAYERS}}


@dataclass(frozen=True, order=True)
class Location:
    """A line of a fleet file: repository-relative ``file``, 1-based ``line`` (0: the whole
    file), at the head commit (or the merge result) or, for what the change removed, at the
    base commit."""

    file: str
    line: int
    # ``merge``: a line of the merge result (``swarm review --merge``) in a file the merge
    # took from both sides; its commit was made only for the review, so it is never a link.
    ref: Literal["base", "head", "merge"]
    commit: str


@dataclass
class NodeChange:
    """One change of the desired state, folded over every node it applies to: ``field`` of
    ``layer`` goes from ``before`` to ``after`` (``field`` is ``""`` for a node added or
    removed). ``sites`` and ``gpu_models`` count the nodes per site and per GPU model."""

    layer: str
    field: str
    change: Change
    before: Any
    after: Any
    nodes: list[str]
    sites: dict[str, int]
    gpu_models: dict[str, int]
    where: list[Location] = dataclasses.field(default_factory=list)  # `field` is a member here


@dataclass
class PeerChange:
    """A WireGuard peer entry changed the same way on ``nodes``. ``what``: ``added``
    (``after``: the entry, ``{"allowed_ips": [CIDR, ...], "endpoint": "host:port" or None,
    "persistent_keepalive_s": seconds}``; ``before``: ABSENT), ``removed`` (both ABSENT),
    ``endpoint``, ``allowed_ips`` (``before``: the CIDRs no longer routed through
    the peer, ``after``: those now routed), ``keepalive``, ``public_key`` (the peer's key
    recorded in the fleet, None where none is)."""

    what: str
    peer: str
    before: Any
    after: Any
    nodes: list[str]
    sites: dict[str, int]
    where: list[Location] = field(default_factory=list)


@dataclass
class MeshImpact:
    """The mesh's change: peers, and how each node applies it (see
    :class:`swarm_infra.resolve.mesh.MeshApply`). Node lists are sorted; ``hubs_*`` are
    ``site: hub`` entries."""

    peerings_changed: int = 0  # node pairs whose peering is added, removed or changed (either side)
    peers: list[PeerChange] = field(default_factory=list)
    syncconf: list[str] = field(default_factory=list)  # wg syncconf: tunnels stay up
    restart: list[str] = field(default_factory=list)  # interface restart: tunnels drop
    mtu: list[str] = field(default_factory=list)  # MTU set on the running interface, no drop
    joining: list[str] = field(default_factory=list)  # nodes new to the mesh (interface comes up)
    leaving: list[str] = field(default_factory=list)  # nodes that leave it
    relays_gained: list[str] = field(default_factory=list)
    relays_lost: list[str] = field(default_factory=list)
    hubs_gained: list[str] = field(default_factory=list)
    hubs_lost: list[str] = field(default_factory=list)


@dataclass
class FieldChange:
    """One changed leaf of an object: ``path`` (``spec.resourceGroups[0].flavors[l40s]
    .resources[nvidia.com/gpu].nominalQuota``), its JSON value ``before`` and ``after``
    (ABSENT where one side has no such leaf)."""

    path: str
    before: Any
    after: Any


@dataclass
class ObjectChange:
    """A Kubernetes, Kueue or KubeRay object added, removed or changed (with its fields)."""

    change: Change
    api_version: str
    kind: str
    namespace: str
    name: str
    fields: list[FieldChange] = field(default_factory=list)
    where: list[Location] = field(default_factory=list)


@dataclass
class StackSettings:
    """One side of a Pulumi stack's settings (``Pulumi.<stack>.yaml``, read as data by
    :mod:`swarm_infra.cluster.stacks`): its ``fleet`` (``swarm:fleet``), ``sites``
    (``swarm:sites``, None: every site of the fleet) and ``context``
    (``kubernetes:context``, None: the kubeconfig's current context)."""

    fleet: str
    sites: list[str] | None
    context: str | None


@dataclass
class StackChange:
    """One Pulumi stack of the fleet (at either side): ``stack`` (``<stack>`` of ``file``,
    ``Pulumi.<stack>.yaml``), its settings ``before`` and ``after`` (None: no such stack,
    or of another fleet, on that side), and the changes of the objects it holds for this
    fleet (those built for its sites at each side; a side without the stack holds none).
    ``every_site``: the stack holds every site of the fleet at both sides, so its objects
    are the fleet's own (:attr:`FleetReview.objects`), not listed again. ``error``: why its
    objects could not be compared (plain text; its sites cannot form a cluster at a side).
    ``where``: the lines of the stack file that change."""

    stack: str
    file: str
    before: StackSettings | None
    after: StackSettings | None
    objects: list[ObjectChange] = field(default_factory=list)
    every_site: bool = False
    error: str | None = None
    where: list[Location] = field(default_factory=list)


@dataclass
class CapacityRow:
    """One GPU flavor's capacity before and after, as ``[before, after]`` pairs (None when
    that side has no such flavor or cohort). ``cohort`` None: the whole fleet (``gpus``,
    ``nominal_quota``, ``unallocated``); else the cohort's ClusterQueues (``nominal_quota``,
    ``lendable``: what they may lend, ``borrowable``: the most they may borrow from each
    other, None inside the pair when some queue's borrowing is unlimited). GPU counts are
    physical GPUs; on fleet rows ``units_per_gpu`` is how many ``nvidia.com/gpu`` the
    device plugin advertises per GPU (MIG instances, time-slicing replicas; None: not one
    number) and ``device_units`` the flavor's GPUs in those units, what Kueue admits against
    (nominalQuota in the ClusterQueues is ``nominal_quota`` times ``units_per_gpu``)."""

    flavor: str
    cohort: str | None
    gpus: list[int | None]
    nominal_quota: list[int | None]
    unallocated: list[int | None]
    lendable: list[int | None]
    borrowable: list[int | str | None]
    units_per_gpu: list[int | None] = field(default_factory=lambda: [None, None])
    device_units: list[int | None] = field(default_factory=lambda: [None, None])


@dataclass
class Flag:
    """A risk flag: ``rule`` id, what the policy makes it, a one-line reason (plain text:
    the renderer escapes it) and the lines of the change that caused it."""

    rule: str
    action: Action
    reason: str
    where: list[Location] = field(default_factory=list)


@dataclass
class Problem:
    """A validator diagnostic of the head (the review stops there: exit 2)."""

    location: Location
    col: int
    severity: str
    rule: str
    path: str
    message: str


@dataclass
class ClaimDiff:
    """What the head's own code claims beyond the base's code, for one fleet
    (:mod:`swarm_infra.review.claim`): node and object changes from the base code's
    resolution of the merge result to the claim's, and ``error`` (the claim's own, or why
    it could not be compared). ``stale``: the claim is of another merge result (its tree
    differs: the base moved since head-plan ran), so it is not compared."""

    nodes: list[NodeChange] = field(default_factory=list)
    objects: list[ObjectChange] = field(default_factory=list)
    error: str | None = None
    stale: bool = False

    @property
    def nodes_changed(self) -> int:
        """The nodes the claim's changes touch, each once."""
        return len({n for c in self.nodes for n in c.nodes})


@dataclass
class FleetReview:
    """The review of one fleet between two commits."""

    fleet: str
    base: str  # commit ids
    head: str
    base_exists: bool
    head_exists: bool
    problems: list[Problem] = field(default_factory=list)  # the head's validator errors (and warnings)
    base_invalid: int = 0  # errors in the base (its diagnostics: base_problems)
    base_problems: list[Problem] = field(default_factory=list)  # the base's validator errors
    # With an invalid base: whether it still resolved (from the documents without errors),
    # so that the plan diff and the other flags compare the head with that; else none.
    base_resolved: bool = False
    nodes_changed: int = 0  # nodes whose desired state changes, peer lists aside (added and removed too)
    layers: list[str] = field(default_factory=list)  # layers with changes, in LAYERS order
    nodes: list[NodeChange] = field(default_factory=list)
    mesh: MeshImpact = field(default_factory=MeshImpact)
    objects: list[ObjectChange] = field(default_factory=list)
    objects_error: str | None = None
    capacity: list[CapacityRow] = field(default_factory=list)
    # The Rollout's changes: ``canary_hosts``, ``batch_percent``, ``max_fail_percentage``
    # (ints, before -> after; ABSENT where a side has no such step).
    rollout: list[FieldChange] = field(default_factory=list)
    flags: list[Flag] = field(default_factory=list)
    policy_changed: bool = False  # the head changes the ReviewPolicy (it applies after merge)
    base_fleet: str = ""  # the fleet's name at the base, when the change renames it
    claim: ClaimDiff | None = None  # the head's claim (None: none read)
    # Every Pulumi stack of the fleet at either side, by name (review.stacks.stack_changes).
    stacks: list[StackChange] = field(default_factory=list)

    @property
    def invalid(self) -> bool:
        return any(p.severity == "error" for p in self.problems)

    @property
    def blocking(self) -> list[Flag]:
        return [f for f in self.flags if f.action == "block"]

    @property
    def warnings(self) -> list[Flag]:
        return [f for f in self.flags if f.action == "warn"]


@dataclass
class Review:
    """A whole review: one entry per fleet the change touches, the summary line and the
    exit code (0 clean, 1 blocking flags, 2 an invalid head)."""

    base: str
    head: str
    fleets: list[FleetReview]
    summary: str = ""
    exit_code: int = 0
    repo_url: str | None = None
    # How ``base`` was chosen: the ref given (``--base``), the commit it names, and whether
    # ``base`` is the merge base of that commit and ``head`` (the default) or that commit.
    base_ref: str = ""
    base_tip: str = ""
    merge_base: bool = False
    rules_changed: list[str] = field(default_factory=list)  # rule files the change touches
    notes: list[str] = field(default_factory=list)  # what the reader must know (plain text)
    # Fleet and rule files with uncommitted edits when the head is the checked-out commit:
    # what this review did not read (``swarm review --worktree`` reads them).
    uncommitted: list[str] = field(default_factory=list)
    # With ``swarm review --merge``: the pull request's own head (``head`` is then the merge
    # result of it into ``base_tip``, a commit made only for this review).
    pr_head: str = ""
    # Rule files that are code (the library, roles, inventory scripts...): their effect is
    # the head's claim's to show (``swarm review --claim``), never the reviewer's.
    code_changed: list[str] = field(default_factory=list)
    claim_read: bool = False  # whether a claim was read (``--claim``)

    def as_json(self) -> dict[str, Any]:
        """The review as JSON data (``swarm review --format json``)."""
        out = asdict(self)
        for fleet, data in zip(self.fleets, out["fleets"], strict=True):
            data["invalid"] = fleet.invalid
        return out
