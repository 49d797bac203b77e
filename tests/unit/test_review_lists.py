"""Lists in the plan diff are compared by what their items are, not where they sit (issue
#39, item 8): a node renamed is the changes of that one name, not every later entry of
local-path's ``nodePathMap`` "changed" to its neighbour's name; the same items in another
order are one change that says so.

The rename is a real Git commit on the example fleet; the expected changes are derived from
the fleet (the renamed node's scratch mount path), and the reorderings from the example
fleet's own objects.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

from swarm_infra.cluster import build
from swarm_infra.cluster.core import LOCAL_PATH_CONFIGMAP
from swarm_infra.review import review
from swarm_infra.review.diff import object_changes
from swarm_infra.review.load import object_key
from swarm_infra.review.model import ABSENT

from .test_review import FLEET_DIRS, commit, state

ORDER = "order"  # a reordering's before and after: {"order": [...]} (review/diff.py)


def scratch_nodes(repo: Path) -> list[str]:
    """The nodes of local-path's ``nodePathMap``, in its order."""
    config = next(o for o in build(state(repo)).all() if o["metadata"]["name"] == LOCAL_PATH_CONFIGMAP)
    return [e["node"] for e in json.loads(config["data"]["config.json"])["nodePathMap"]]


def rename(repo: Path, old: str, new: str) -> None:
    """Rename node ``old`` to ``new`` everywhere in the fleet's files (whole names only)."""
    pattern = re.compile(rf"(?<![-\w]){re.escape(old)}(?![-\w])")
    for d in FLEET_DIRS:
        for f in (repo / d).rglob("*.yaml"):
            text = f.read_text()
            if pattern.search(text):
                f.write_text(pattern.sub(new, text))


def test_renaming_one_node_changes_only_that_name(repo: Path) -> None:
    nodes = scratch_nodes(repo)
    old = nodes[0]  # the first entry: by position, every later one would shift
    new = f"zz-{old}"  # sorts after every other node
    storage = state(repo)["nodes"][old]["storage"]
    assert storage is not None  # a node of nodePathMap has scratch
    mount = storage["scratch"]["mount_path"]
    rename(repo, old, new)
    assert scratch_nodes(repo) == [*nodes[1:], new]  # the entries do move
    commit(repo, "rename a node")
    r = review(repo, "HEAD~1")
    (fr,) = r.fleets
    config = next(o for o in fr.objects if o.name == LOCAL_PATH_CONFIGMAP)
    assert [(f.path, f.before, f.after) for f in config.fields] == [
        (f"data.config.json.nodePathMap[{old}]", {"node": old, "paths": [mount]}, ABSENT),
        (f"data.config.json.nodePathMap[{new}]", ABSENT, {"node": new, "paths": [mount]}),
    ]
    # No object's change is about another node: each field names the old or the new name.
    others = [o for o in fr.objects if o.kind != "Node" and o.change == "changed"]
    assert others
    for o in others:
        for f in o.fields:
            shown = f.path + json.dumps([f.before, f.after], default=str)
            assert old in shown or new in shown, (o.kind, o.name, f)


def _objects(repo: Path) -> dict[Any, Any]:
    return {object_key(o): o for o in build(state(repo)).all()}


def test_the_same_entries_in_another_order_are_one_reordering(repo: Path) -> None:
    before = _objects(repo)
    key = next(k for k in before if k[1] == "ConfigMap" and k[3] == LOCAL_PATH_CONFIGMAP)
    config = json.loads(before[key]["data"]["config.json"])
    entries = config["nodePathMap"]
    assert len(entries) > 2
    after = dict(before)
    moved = copy.deepcopy(before[key])
    moved["data"]["config.json"] = json.dumps({**config, "nodePathMap": entries[::-1]})
    after[key] = moved
    (change,) = object_changes(before, after)
    names = [e["node"] for e in entries]
    assert [(f.path, f.before, f.after) for f in change.fields] == [
        ("data.config.json.nodePathMap", {ORDER: names}, {ORDER: names[::-1]})
    ]


def test_a_long_list_of_names_reordered_or_with_a_repeat(repo: Path) -> None:
    before = _objects(repo)
    key, sc = next(
        (k, o)
        for k, o in before.items()
        if k[1] == "StorageClass"
        and len(o.get("allowedTopologies", [{}])[0].get("matchLabelExpressions", [{}])[0].get("values", []))
        >= 6
    )
    values = sc["allowedTopologies"][0]["matchLabelExpressions"][0]["values"]
    expression = sc["allowedTopologies"][0]["matchLabelExpressions"][0]["key"]
    path = f"allowedTopologies[0].matchLabelExpressions[{expression}].values"

    def with_values(new: list[str]) -> Any:
        obj = copy.deepcopy(sc)
        obj["allowedTopologies"][0]["matchLabelExpressions"][0]["values"] = new
        return object_changes(before, {**before, key: obj})

    (change,) = with_values(values[::-1])
    assert [(f.path, f.before, f.after) for f in change.fields] == [
        (path, {ORDER: values}, {ORDER: values[::-1]})
    ]
    (change,) = with_values([*values, values[0]])
    assert [(f.path, f.before, f.after) for f in change.fields] == [
        (path, {"removed": []}, {"added": [values[0]]})
    ]
