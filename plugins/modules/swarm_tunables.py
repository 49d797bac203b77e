#!/usr/bin/python
"""Ansible module ``swarm_tunables``: sysctls and sysfs values, converged to exactly what is declared."""

from __future__ import annotations

DOCUMENTATION = r"""
module: swarm_tunables
short_description: Converge a node's sysctls and sysfs tuning to exactly the declared set
description:
  - Renders one managed sysctl.d file and one managed tmpfiles.d file from the declared
    values (absent when nothing is declared), writes only the live values that differ, and
    records each key's value before the project first set it; a key no longer declared
    leaves the file and gets its recorded value back.
  - Keys the node cannot set (read-only in a container, absent from its network namespace,
    refused by the kernel) are persisted and returned in C(not_applied); any other error
    fails. Full check mode and diff (the files' before and after).
  - The logic is the node-side file C(swarm_infra/nodeside/tunables.py), shared with pyinfra.
options:
  sysctls:
    description: Key to value as sysctl.d writes it (NodeState.host.sysctl_text); {} for none.
    type: dict
    default: {}
  sysfs:
    description: Sysfs items (NodeState.host.sysfs) with name, path, glob and value; [] for none.
    type: list
    elements: dict
    default: []
  sysctl_conf:
    description: The managed sysctl.d file.
    type: path
    required: true
  tmpfiles_conf:
    description: The managed tmpfiles.d file (omit when this caller manages no sysfs values).
    type: path
  record:
    description: Where the values before the project first set them are kept (JSON).
    type: path
    required: true
  label:
    description: Why these values, for the managed files' header (e.g. the HostProfile).
    type: str
    default: ""
author: Swarm infrastructure team
"""

EXAMPLES = r"""
- name: Converge host tuning
  swarm_tunables:
    sysctls: "{{ swarm.host.sysctl_text }}"
    sysfs: "{{ swarm.host.sysfs }}"
    sysctl_conf: "{{ swarm.layout.files.sysctl_conf.path }}"
    tmpfiles_conf: "{{ swarm.layout.files.tmpfiles_conf.path }}"
    record: "{{ swarm.layout.files.host_tunables_record.path }}"
"""

RETURN = r"""
writes:
  description: Live values set (or that would be set in check mode), each key, before, after.
  returned: always
  type: list
  elements: dict
restores:
  description: Keys no longer declared, set back to the value recorded before the project set them.
  returned: always
  type: list
  elements: dict
not_applied:
  description: Keys persisted but not set on this node, each with the reason.
  returned: always
  type: list
  elements: dict
"""

# Ansible modules keep their documentation before the imports (ansible-doc reads it so).
from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.swarm_tunables import converge  # noqa: E402


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "sysctls": {"type": "dict", "default": {}},
            "sysfs": {"type": "list", "elements": "dict", "default": []},
            "sysctl_conf": {"type": "path", "required": True},
            "tmpfiles_conf": {"type": "path"},
            "record": {"type": "path", "required": True},
            "label": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    spec = dict(module.params)
    spec["sysctls"] = {str(k): str(v) for k, v in spec["sysctls"].items()}
    try:
        result = converge(spec, check_mode=module.check_mode)
    except OSError as exc:
        module.fail_json(msg=f"{exc.filename or ''}: {exc.strerror or exc}")
    diff = [
        {
            "before_header": f["path"],
            "after_header": f["path"],
            "before": f["before"] or "",
            "after": f["after"] or "",
        }
        for f in result["files"]
    ]
    module.exit_json(
        changed=result["changed"],
        writes=[{k: w[k] for k in ("key", "before", "after")} for w in result["writes"]],
        restores=[{k: w[k] for k in ("key", "before", "after")} for w in result["restores"]],
        not_applied=result["not_applied"],
        diff=diff,
    )


if __name__ == "__main__":
    main()
