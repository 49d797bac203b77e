"""Running a function of a node-side file (:mod:`swarm_infra.nodeside`) on a node, for
both engines: the bootstrap the node's Python runs and the stdin it reads (pyinfra's
:class:`~.pyinfra.facts.NodesideCall` and operations; the Ansible roles' commands through
the ``swarm`` filters). No engine is imported here.
"""

from __future__ import annotations

import json
from typing import Any

# A node-side program sent on stdin: the envelope ``{"code": source, "call": function name,
# "args": [...], "kwargs": {...}}`` is read by this bootstrap, which runs the code as a module
# and prints the function's result as JSON. Code and data travel on stdin, never in argv.
# A result that is a dict with an "error" also goes to stderr, and the exit status is 1.
BOOTSTRAP = (
    "import json,sys,types;e=json.load(sys.stdin);m=types.ModuleType('swarm_nodeside');"
    "m.__file__=e['file'];sys.modules[m.__name__]=m;exec(compile(e['code'],e['file'],'exec'),m.__dict__);"
    "r=getattr(m,e['call'])(*e['args'],**e['kwargs']);print(json.dumps(r,sort_keys=True));"
    "bad=isinstance(r,dict) and r.get('error');bad and print(bad,file=sys.stderr);sys.exit(1 if bad else 0)"
)


def nodeside_payload(code: str, file: str, call: str, *args: Any, **kwargs: Any) -> str:
    """The stdin of :class:`NodesideCall`: ``code`` (a node-side file's source), the
    function to call in it and its JSON-serialisable arguments."""
    return json.dumps({"code": code, "file": file, "call": call, "args": list(args), "kwargs": kwargs})
