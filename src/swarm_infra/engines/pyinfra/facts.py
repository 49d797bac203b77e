"""pyinfra facts the swarm deploys read: what a node holds now.

Each fact is a :class:`pyinfra.api.FactBase` in the manner of pyinfra's own
(``pyinfra/facts/*.py``): ``command`` builds one shell command from quoted arguments,
``process`` turns its output lines into plain data. The main one, :class:`NodesideCall`,
runs a function of a node-side file (:mod:`swarm_infra.nodeside`) with code and arguments
on stdin: the node's snapshot (every managed path, unit, package, interface... in one round
trip), the tunables plan, the GPU diff. A failing node-side program fails its host, as a
failing Ansible task does.

Example::

    from swarm_infra.engines.pyinfra.facts import NodesideCall, nodeside_payload
    plan = host.get_fact(NodesideCall, label="tunables", _stdin=nodeside_payload(
        source, "tunables.py", "plan", spec))
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from pyinfra.api import FactBase, FactProcessError, QuoteString, StringCommand

from ...resolve.drivers import NODE_PROBE
from ..nodeside_call import BOOTSTRAP
from ..nodeside_call import nodeside_payload as nodeside_payload  # re-exported: its callers import it here


class NodesideCall(FactBase):
    """The JSON result of a function of a node-side file (:mod:`swarm_infra.nodeside`), run
    by the node's ``python3`` with code and arguments on stdin (``_stdin=`` a
    :func:`nodeside_payload`). Used read-only: the diff of the tunables and GPU layers.

    Example::

        plan = host.get_fact(NodesideCall, label="tunables", _stdin=nodeside_payload(
            source, "tunables.py", "converge", spec, check_mode=True))
    """

    def command(self, label: str) -> StringCommand:
        # ``label`` names the call in pyinfra's logs; the payload is on stdin.
        return StringCommand("python3", "-c", QuoteString(BOOTSTRAP))

    def process(self, output: list[str]) -> Any:
        try:
            return json.loads("\n".join(output))
        except ValueError as exc:
            raise FactProcessError(f"node-side program printed no JSON: {exc}") from None


class MdadmBrief(FactBase):
    """``mdadm --detail --brief ARRAY``'s ARRAY line, or None when the array is not assembled."""

    def command(self, array: str) -> StringCommand:
        return StringCommand("mdadm", "--detail", "--brief", QuoteString(array), "2>/dev/null", "||", "true")

    def process(self, output: list[str]) -> str | None:
        lines = [ln for ln in output if ln.startswith("ARRAY ")]
        return lines[0] if lines else None


class NvidiaPciDevice(FactBase):
    """Whether the node has an NVIDIA PCI device (vendor 0x10de)."""

    # pyinfra takes a command string as well as a method (api/facts.py: _make_command); its
    # FactBase annotates only the method.
    command = "grep -qsx 0x10de /sys/bus/pci/devices/*/vendor && echo yes || echo no"  # type: ignore[assignment]

    def process(self, output: list[str]) -> bool:
        return bool(output) and output[0].strip() == "yes"


class DriverProbe(FactBase):
    """The drivers layer's probe of the node (kernel, Secure Boot, DKMS key, apt source
    files): :data:`swarm_infra.resolve.drivers.NODE_PROBE`'s output, as one text."""

    command = f"sh -c {shlex.quote(NODE_PROBE)}"  # type: ignore[assignment]

    def process(self, output: list[str]) -> str:
        return "\n".join(output)


class DpkgSelections(FactBase):
    """``{package: selection}`` (install, hold, deinstall, purge) from ``dpkg --get-selections``."""

    command = "dpkg --get-selections"  # type: ignore[assignment]  # a string is taken too (see above)

    def process(self, output: list[str]) -> dict[str, str]:
        out = {}
        for line in output:
            fields = line.split()
            if len(fields) == 2:
                out[fields[0].split(":")[0]] = fields[1]
        return out

    @staticmethod
    def default() -> dict[str, str]:
        return {}
