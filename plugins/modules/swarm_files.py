#!/usr/bin/python
"""Ansible module ``swarm_files``: a layer's managed files and directories in one task."""

from __future__ import annotations

DOCUMENTATION = r"""
module: swarm_files
short_description: Converge a layer's managed files and directories in one call
description:
  # A block scalar: the text holds colon-spaces, which end a plain YAML scalar.
  - >-
    Each item is a path that must be a file with exactly the given content, a file whose
    content the node made (C(content) null: a private key; only owner, group and mode are
    managed), a directory, or absent. Only the differences are applied; files are written
    atomically (a temporary file beside them, renamed).
  - One task per layer instead of one per file (each task is a round trip to the node and a
    Python start there). Full check mode and diff (every file whose content changes).
  - The logic is the node-side file C(swarm_infra/nodeside/files.py).
options:
  items:
    description:
      - The paths, in order (a directory before the files in it).
      - >-
        Each item has C(path) and C(state) (C(file), the default, C(directory) or C(absent));
        unless absent, C(owner), C(group) and C(mode), and for a file C(content) (null: the
        node makes the content).
    type: list
    elements: dict
    required: true
author: Swarm infrastructure team
"""

EXAMPLES = r"""
- name: A layer's files
  swarm_files:
    items:
      - {path: /etc/example, state: directory, owner: root, group: root, mode: "0755"}
      - {path: /etc/example/rules, state: file, content: "...", owner: root, group: root, mode: "0644"}
      - {path: /etc/example/key, state: file, content: null, owner: root, group: root, mode: "0600"}
      - {path: /etc/example/old.conf, state: absent}
  register: example_files
"""

RETURN = r"""
changed_paths:
  description: The paths that changed (or would, in check mode).
  returned: always
  type: list
  elements: str
changes:
  description: Each difference, with path and action (create, update, attributes, remove, missing).
  returned: always
  type: list
  elements: dict
"""

# Ansible modules keep their documentation before the imports (ansible-doc reads it so).
from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.swarm_files import converge  # noqa: E402


def main() -> None:
    module = AnsibleModule(argument_spec={"items": {"type": "list", "elements": "dict", "required": True}},
                           supports_check_mode=True)  # fmt: skip
    items = []
    for raw in module.params["items"]:
        item = {"path": str(raw["path"]), "state": str(raw.get("state", "file"))}
        if item["state"] not in ("file", "directory", "absent"):
            module.fail_json(msg=f"{item['path']}: state must be file, directory or absent")
        if item["state"] != "absent":
            item.update(owner=str(raw["owner"]), group=str(raw["group"]), mode=str(raw["mode"]))
            content = raw.get("content")
            item["content"] = None if content is None else str(content)
        items.append(item)
    try:
        result = converge(items, check_mode=module.check_mode)
    except OSError as exc:
        module.fail_json(msg=f"{exc.filename or ''}: {exc.strerror or exc}")
    diff = [
        {
            "before_header": c["path"],
            "after_header": c["path"],
            "before": c["before"] or "",
            "after": c["after"] or "",
        }
        for c in result["changes"]
        if c["action"] in ("create", "update") and c["after"] is not None
    ]
    module.exit_json(
        changed=result["changed"], changed_paths=result["changed_paths"], changes=result["changes"], diff=diff
    )


if __name__ == "__main__":
    main()
