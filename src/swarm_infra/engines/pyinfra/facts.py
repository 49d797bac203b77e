"""pyinfra facts the swarm deploys read: what a node holds now, parsed by the library.

Each fact is a :class:`pyinfra.api.FactBase` in the manner of pyinfra's own
(``pyinfra/facts/*.py``): ``command`` builds one shell command from quoted arguments,
``process`` turns its output lines into plain data with the parsers the Ansible roles and
verification share (:mod:`swarm_infra.nodeside.facts`). Commands exit 0 whatever they find,
so "absent" is data (``None``), never a failed fact; a failing node-side program fails its
host, as a failing Ansible task does.

Example::

    from swarm_infra.engines.pyinfra.facts import WireGuardPublicKey
    files = host.data.swarm["layout"]["files"]
    key = host.get_fact(WireGuardPublicKey, path=files["wireguard_key"]["path"])  # str or None
"""

from __future__ import annotations

import json
from typing import Any

from pyinfra.api import FactBase, FactProcessError, QuoteString, StringCommand

from ...nodeside import facts as parse

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


class WireGuardPublicKey(FactBase):
    """The public key of the private key file at ``path`` (``wg pubkey`` reads the file on
    the node, so the private key never leaves it), or None when there is no key yet."""

    def command(self, path: str) -> StringCommand:
        return StringCommand(
            "test", "-r", QuoteString(path), "&&", "wg", "pubkey", "<", QuoteString(path), "||", "true"
        )

    def process(self, output: list[str]) -> str | None:
        return output[0].strip() if output and output[0].strip() else None


class KernelModule(FactBase):
    """Whether the kernel module ``module`` is loaded (``/sys/module/MODULE`` exists)."""

    def command(self, module: str) -> StringCommand:
        return StringCommand(
            "test", "-d", QuoteString(f"/sys/module/{module}"), "&&", "echo", "yes", "||", "echo", "no"
        )

    def process(self, output: list[str]) -> bool:
        return bool(output) and output[0].strip() == "yes"


class WireGuardAllowedIps(FactBase):
    """``wg show IFACE allowed-ips`` as text (one line per running peer), or None when the
    interface is not up."""

    def command(self, interface: str) -> StringCommand:
        return StringCommand(
            "wg", "show", QuoteString(interface), "allowed-ips", "2>/dev/null", "||", "echo", "DOWN"
        )

    def process(self, output: list[str]) -> str | None:
        return None if output == ["DOWN"] else "\n".join(output)

    @staticmethod
    def default() -> str:
        return ""


class InterfaceAddresses(FactBase):
    """``{mtu, inet: [CIDR, ...]}`` of a running interface (``ip -j addr``), {} when absent."""

    def command(self, interface: str) -> StringCommand:
        return StringCommand(
            "ip", "-j", "addr", "show", "dev", QuoteString(interface), "2>/dev/null", "||", "true"
        )

    def process(self, output: list[str]) -> dict[str, Any]:
        try:
            return parse.ip_link("\n".join(output))
        except ValueError as exc:
            raise FactProcessError(f"ip -j printed no JSON: {exc}") from None

    @staticmethod
    def default() -> dict[str, Any]:
        return {}


class BlockDeviceProbe(FactBase):
    """What ``blkid -p`` finds on ``device`` (a low-level probe of the device itself):
    ``{TYPE, LABEL, UUID, PTTYPE, ...}``, {} when blank (blkid exits 2)."""

    def command(self, device: str) -> StringCommand:
        return StringCommand("blkid", "-p", "-o", "export", QuoteString(device), "||", "true")

    def process(self, output: list[str]) -> dict[str, str]:
        return parse.blkid_export("\n".join(output))

    @staticmethod
    def default() -> dict[str, str]:
        return {}


class DiscardMaxBytes(FactBase):
    """The largest discard (TRIM) the block device accepts, in bytes (``lsblk DISC-MAX``);
    0 when it supports none or does not exist."""

    def command(self, device: str) -> StringCommand:
        return StringCommand(
            "lsblk", "--nodeps", "--noheadings", "--bytes", "--output", "DISC-MAX", QuoteString(device),
            "2>/dev/null", "||", "echo", "0",
        )  # fmt: skip

    def process(self, output: list[str]) -> int:
        text = output[0].strip() if output else "0"
        return int(text) if text.isdigit() else 0

    @staticmethod
    def default() -> int:
        return 0


class MdadmBrief(FactBase):
    """``mdadm --detail --brief ARRAY``'s ARRAY line, or None when the array is not assembled."""

    def command(self, array: str) -> StringCommand:
        return StringCommand("mdadm", "--detail", "--brief", QuoteString(array), "2>/dev/null", "||", "true")

    def process(self, output: list[str]) -> str | None:
        lines = [ln for ln in output if ln.startswith("ARRAY ")]
        return lines[0] if lines else None


class Mounted(FactBase):
    """``{source, fstype, options}`` of what is mounted at ``path`` (findmnt), or None."""

    def command(self, path: str) -> StringCommand:
        return StringCommand(
            "findmnt",
            "--json",
            "--output",
            "SOURCE,FSTYPE,OPTIONS",
            "--mountpoint",
            QuoteString(path),
            "||",
            "true",
        )

    def process(self, output: list[str]) -> dict[str, str] | None:
        try:
            found = json.loads("\n".join(output)).get("filesystems", [])
        except ValueError:
            return None
        return {k: found[0][k] for k in ("source", "fstype", "options")} if found else None


class NvidiaPciDevice(FactBase):
    """Whether the node has an NVIDIA PCI device (vendor 0x10de)."""

    command = "grep -qsx 0x10de /sys/bus/pci/devices/*/vendor && echo yes || echo no"

    def process(self, output: list[str]) -> bool:
        return bool(output) and output[0].strip() == "yes"


class InstalledDistributions(FactBase):
    """What the virtualenv ``venv`` holds, as the JSON text its Python prints
    (:func:`swarm_infra.nodeside.facts.installed_distributions_argv`, read with
    ``requirements_missing``); "" when there is no such virtualenv."""

    def command(self, venv: str) -> StringCommand:
        argv = parse.installed_distributions_argv(venv)
        return StringCommand(*(QuoteString(a) for a in argv), "2>/dev/null", "||", "true")

    def process(self, output: list[str]) -> str:
        return "\n".join(output)

    @staticmethod
    def default() -> str:
        return ""


class DpkgSelections(FactBase):
    """``{package: selection}`` (install, hold, deinstall, purge) from ``dpkg --get-selections``."""

    command = "dpkg --get-selections"

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
