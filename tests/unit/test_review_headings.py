"""`swarm review` of a change to two fleets (issue #39, item 8): each fleet's details, the
collapsed ``<details>`` blocks included, say which fleet they are.

The repository holds the example fleet twice (``example`` and ``other``, copies of one
another) as the base commit; the change lowers a power limit of the shared GPU profiles
(every fleet's nodes) and the endpoint of each fleet's tyo1 relay (its peers' entries), so
both fleets have node and peer listings in ``<details>``, and reviews HEAD~1..HEAD.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from swarm_infra.review import review
from swarm_infra.review.markdown import code, render, text

from .test_review import commit, replace

FLEETS = ("example", "other")


def test_each_fleets_details_name_their_fleet(repo: Path) -> None:
    shutil.copytree(repo / "inventory/example", repo / "inventory/other")
    shutil.copytree(repo / "policies/example", repo / "policies/other")
    commit(repo, "a second fleet")
    replace(repo, "policies/shared/gpu-profiles.yaml", "power_limit_w: 650", "power_limit_w: 600")
    for fleet in FLEETS:
        relay = f"inventory/{fleet}/nodes/tyo1.yaml"
        replace(repo, relay, "mesh: {endpoint: 198.51.100.77}", "mesh: {endpoint: 198.51.100.78}")
    commit(repo)
    r = review(repo, "HEAD~1", "HEAD")
    assert [f.fleet for f in r.fleets] == list(FLEETS)
    assert all(f.nodes and f.mesh.peers for f in r.fleets)
    comment = render(r)
    assert "Left out" not in comment  # every block fits: each one is checked
    assert "\n## Details\n" not in comment  # one heading for all would name no fleet
    headings = [f"## Details of fleet {code(f)}" for f in FLEETS]
    at = [comment.index(h) for h in headings]
    assert at == sorted(at) and all(comment.count(h) == 1 for h in headings)
    sections = [comment[a:b] for a, b in zip(at, [*at[1:], len(comment)], strict=True)]
    for fleet, section in zip(FLEETS, sections, strict=True):
        summaries = re.findall(r"<summary>([^<]*)</summary>", section)
        # Its node listing (GPU layer), its peer listing, and nothing that names no fleet.
        assert f"{text(fleet)}: Nodes of each GPU change" in summaries
        assert f"{text(fleet)}: Nodes of each peer change" in summaries
        assert all(s.startswith(f"{text(fleet)}: ") for s in summaries), summaries
    # The same in the full report.
    full = render(r, None)
    assert all(full.count(h) == 1 for h in headings)

    # One fleet of the two reviewed: its details keep the one heading, their summaries as they were.
    one = render(review(repo, "HEAD~1", "HEAD", fleets=["example"]))
    assert "\n## Details\n" in one and "Details of fleet" not in one
    assert "<summary>Nodes of each GPU change</summary>" in one
