"""The host-tool registry (swarm_infra.hosttools) is the whole truth about what the controller
side runs: every command the code starts is in it, install.sh installs exactly its packages,
and on Debian each command is owned by the package it names (a tool installed by hand, or by
another package, fails here; a fresh machine would lack it).
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from swarm_infra import hosttools
from swarm_infra.cli import main

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "swarm_infra"

# Code that runs on a node, not on the controller: its commands come from the node's packages
# (resolve/packages.py) and are checked on the lab's nodes.
NODE_SIDE = ("nodeside/", "agent/")

# Calls that take an argv as their first argument: subprocess's, and the project's runners
# (lab.system.run, lab/join.py's _run, engines.controller's runner and _must, os.execvp).
SINK_NAMES = {"run", "_run", "runner", "_must", "Popen", "check_output", "check_call", "call", "execvp"}

# Commands that start the next argument as a command of their own: (command, words before it).
# `ip netns exec NS CMD`, `setsid -f CMD`; `nsenter ... CMD` enters a node, so what follows
# runs the node's own binaries (not the host's): the scan stops there.
LAUNCHERS = {"setsid"}
ENTERS_NODE = {"nsenter"}


def _first_string(elts: list[ast.expr]) -> str | None:
    if elts and isinstance(elts[0], ast.Constant) and isinstance(elts[0].value, str):
        return elts[0].value
    return None


def _commands_of(elts: list[ast.expr]) -> list[str]:
    """The commands an argv literal starts: its first word, and what a launcher starts."""
    words = [e.value if isinstance(e, ast.Constant) and isinstance(e.value, str) else None for e in elts]
    out: list[str] = []
    i = 0
    while i < len(words) and words[i]:
        cmd = Path(str(words[i])).name
        out.append(cmd)
        if cmd in ENTERS_NODE:
            break
        if cmd == "ip" and words[i + 1 : i + 3] == ["netns", "exec"]:
            i += 4  # ip netns exec NS CMD
            continue
        if cmd in LAUNCHERS:
            i += 1
            while i < len(words) and (words[i] or "").startswith("-"):
                i += 1
            continue
        break
    return out


def _argv_literals(tree: ast.AST) -> list[ast.List | ast.Tuple]:
    """List literals that are an argv: the first argument of a sink call, a name assigned a
    literal and passed to one, a literal returned by an ``*_command``/``*_argv`` builder, and
    the argvs a ``for argv in (...)`` loop runs."""
    found: list[ast.List | ast.Tuple] = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef | ast.Module):
            continue
        assigned: dict[str, list[ast.List | ast.Tuple]] = {}
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.List | ast.Tuple):
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        assigned.setdefault(t.id, []).append(node.value)
            loop = isinstance(node, ast.For) and isinstance(node.target, ast.Name)
            if loop and isinstance(node.iter, ast.List | ast.Tuple):
                assigned.setdefault(node.target.id, []).extend(
                    e for e in node.iter.elts if isinstance(e, ast.List | ast.Tuple)
                )
        for node in ast.walk(fn):
            if isinstance(node, ast.Return) and isinstance(node.value, ast.List | ast.Tuple):
                name = getattr(fn, "name", "")
                if name.endswith(("_command", "_argv", "argv")):
                    found.append(node.value)
            if not isinstance(node, ast.Call) or not node.args:
                continue
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name not in SINK_NAMES:
                continue
            # The argv is the first argument, or the second (`_must(runner, argv)`,
            # `os.execvp(file, argv)`).
            for arg in node.args[:2]:
                if isinstance(arg, ast.Call) and getattr(arg.func, "id", "") == "list" and arg.args:
                    arg = arg.args[0]
                if isinstance(arg, ast.List | ast.Tuple):
                    found.append(arg)
                elif isinstance(arg, ast.Name):
                    found.extend(assigned.get(arg.id, []))
    return found


def _which_calls(tree: ast.AST) -> list[str]:
    return [
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (getattr(node.func, "attr", "") == "which" or getattr(node.func, "id", "") == "which")
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ]


def _builders(tree: ast.Module) -> dict[str, list[ast.expr]]:
    """Module functions that return an argv literal (``def _nsenter(pid): return [...]``)."""
    out: dict[str, list[ast.expr]] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            for ret in ast.walk(node):
                if isinstance(ret, ast.Return) and isinstance(ret.value, ast.List | ast.Tuple):
                    out[node.name] = list(ret.value.elts)
    return out


def _module_constants(tree: ast.Module) -> dict[str, str]:
    """Module-level ``NAME = "/path/to/program"`` constants (a program named by its path)."""
    out: dict[str, str] = {}
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)):
            continue
        value = node.value.value
        for t in node.targets:
            if isinstance(t, ast.Name) and t.id.isupper() and isinstance(value, str):
                out[t.id] = value
    return out


def _scanned_files() -> list[tuple[str, Path]]:
    """(name, path) of the controller side's code and the tests' (which run on the same host:
    a test that skips where its tool is missing would hide the missing install step).
    benchmarks/ are left out: their `run` is swarm's own main, not a program."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if not rel.startswith(NODE_SIDE):
            out.append((rel, path))
    out += [(p.relative_to(ROOT).as_posix(), p) for p in sorted((ROOT / "tests").rglob("*.py"))]
    return out


# Registry commands that the scan cannot see started, and where they are: a shell script, a
# path computed at run time. The test checks each still appears there, so that a tool
# the code stopped using leaves the registry too.
NOT_SCANNED = {
    "systemd-nspawn": "src/swarm_infra/lab/data/node-nspawn.sh",
    "mount": "src/swarm_infra/lab/data/node-nspawn.sh",
    "git-http-backend": "src/swarm_infra/lab/gitserver.py",  # found in `git --exec-path`
    "iperf3": "src/swarm_infra/metrics/probes.py",  # probe commands, run on loopback by tests
    "fio": "src/swarm_infra/metrics/probes.py",
    "pyinfra": "src/swarm_infra/engines/pyinfra/runner.py",  # pyinfra's API, in process
    "renice": ".ci/run",
}


def started_commands() -> dict[str, set[str]]:
    """{command: {file}} of every command the controller-side code and the tests start."""
    out: dict[str, set[str]] = {}
    for rel, path in _scanned_files():
        tree = ast.parse(path.read_text(), filename=rel)
        constants = _module_constants(tree)
        builders = _builders(tree)
        commands: list[str] = list(_which_calls(tree))
        for literal in _argv_literals(tree):
            elts = list(literal.elts)
            head = elts[0] if elts else None
            if isinstance(head, ast.Starred) and isinstance(head.value, ast.Call):
                called = getattr(head.value.func, "id", "")
                if called not in builders:
                    continue  # another module's argv builder: scanned where it is defined
                elts = [*builders[called], *elts[1:]]  # [*_nsenter(pid), ...]
            if elts and isinstance(elts[0], ast.Name) and elts[0].id in constants:
                elts[0] = ast.Constant(constants[elts[0].id])
            if elts and isinstance(elts[0], ast.Attribute) and elts[0].attr == "executable":
                continue  # sys.executable: this interpreter
            commands.extend(_commands_of(elts))
        for cmd in commands:
            out.setdefault(cmd, set()).add(rel)
    return out


def test_the_scan_finds_the_commands_known_to_be_started():
    # The scanner itself: commands started in each way the code starts them (a literal
    # argv, a launcher, `ip netns exec`, a helper's argv builder, a path constant, which()).
    found = started_commands()
    known = ("wg", "wireguard-go", "ip", "iptables", "tc", "ssh", "ssh-keygen", "git", "debootstrap",
             "apt-cacher-ng", "unshare", "setsid", "nsenter", "ansible-playbook")  # fmt: skip
    for cmd in known:
        assert cmd in found, f"the scan no longer finds {cmd!r}: it misses a way commands are started"


def test_every_command_the_controller_side_starts_is_in_the_registry():
    found = started_commands()
    unregistered = {cmd: sorted(mods) for cmd, mods in found.items() if cmd not in hosttools.HOST_TOOLS}
    assert not unregistered, (
        "commands started by the code but not in swarm_infra.hosttools.HOST_TOOLS (add each with "
        f"its Debian package, so scripts/install.sh installs it): {unregistered}"
    )


def test_every_registry_command_is_started_somewhere():
    found = started_commands()
    stale = {}
    for cmd in hosttools.HOST_TOOLS:
        if cmd in found:
            continue
        where = NOT_SCANNED.get(cmd)
        if where is None or cmd not in (ROOT / where).read_text():
            stale[cmd] = where or "not started anywhere the scan reads"
    assert not stale, f"registry commands nothing starts any more (remove them, or say where): {stale}"


def test_a_command_left_out_of_the_registry_fails_the_scan(monkeypatch):
    # The guard guards: without wg in the registry, the scan names it.
    monkeypatch.delitem(hosttools.HOST_TOOLS, "wg")
    with pytest.raises(AssertionError, match="'wg'"):
        test_every_command_the_controller_side_starts_is_in_the_registry()


def test_install_sh_installs_exactly_the_registrys_packages():
    printed = subprocess.run(
        [sys.executable, str(PACKAGE / "hosttools.py"), "packages"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert printed == hosttools.debian_packages()
    script = (ROOT / "scripts" / "install.sh").read_text()
    assert "src/swarm_infra/hosttools.py packages" in script
    # No second list: apt-get installs what the registry's check found missing, and before
    # it python3 alone (where it is absent), which reads the registry.
    installs = [line for line in script.splitlines() if "apt-get install" in line and "echo" not in line]
    ends = ("$missing >/dev/null", '"python3" >/dev/null', " python3 >/dev/null")
    assert len(installs) == 2 and all(line.rstrip().endswith(ends) for line in installs), installs


def _dpkg_owner(path: str) -> str | None:
    """The package dpkg records for ``path``, trying the names usr-merge gives it (Debian 12
    records /sbin/ip for what PATH finds as /usr/sbin/ip, and alternatives resolve to their
    target)."""
    real = os.path.realpath(path)
    candidates: list[str] = []
    for p in (real, path):
        candidates += [p, p.removeprefix("/usr") if p.startswith("/usr/") else "/usr" + p]
    for candidate in dict.fromkeys(candidates):
        proc = subprocess.run(["dpkg-query", "-S", candidate], capture_output=True, text=True, check=False)
        for line in proc.stdout.splitlines() if proc.returncode == 0 else []:
            if not line.startswith("diversion by"):  # "diversion by dash from: /bin/sh"
                return line.split(":", 1)[0].split(",")[0].strip()
    return None


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="not a Debian host (no dpkg)")
def test_each_registry_command_is_installed_from_the_package_it_names():
    wrong = {}
    for cmd, tool in sorted(hosttools.HOST_TOOLS.items()):
        where = hosttools.locate(cmd)
        if where is None and tool.package == hosttools.OPERATOR:
            continue  # asked for only by the fleets that need it
        if where is None:
            wrong[cmd] = f"not installed (expected from {tool.package})"
        elif tool.package == hosttools.OPERATOR:
            continue  # the operator's own, any source
        elif tool.package == hosttools.VENV:
            if Path(where).parent != Path(sys.executable).parent:
                wrong[cmd] = f"{where}: not the project's virtualenv"
        else:
            owner = _dpkg_owner(where)
            if owner != tool.package:
                wrong[cmd] = (
                    f"{where}: owned by {owner or 'no package (installed by hand?)'}, not {tool.package}"
                )
    assert not wrong, f"host tools not from the package the registry names: {wrong}"


def _path_without(tmp_path: Path, absent: str) -> str:
    """A PATH of links to every registry command found here except ``absent``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for cmd in hosttools.HOST_TOOLS:
        where = hosttools.locate(cmd)
        if cmd != absent and where:
            (bin_dir / cmd).symlink_to(where)
    return str(bin_dir)


def test_lab_up_without_a_registry_command_says_which_package_and_does_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", _path_without(tmp_path, "wg"))
    lab_dir = tmp_path / "lab"
    monkeypatch.setenv("SWARM_LAB_DIR", str(lab_dir))
    monkeypatch.chdir(ROOT)
    rc = main(["lab", "up", "--fleet", "lab"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.splitlines() == [
        "swarm lab: 'wg' is not installed (Debian package wireguard-tools): run bash scripts/install.sh"
    ]
    assert not lab_dir.exists()  # nothing was started or written


def test_commands_without_host_tools_do_not_ask_for_them(tmp_path, monkeypatch, capsys):
    # validate runs no host program: a controller without wg still validates.
    monkeypatch.setenv("PATH", _path_without(tmp_path, "wg"))
    monkeypatch.chdir(ROOT)
    assert main(["validate", "--fleet", "lab"]) == 0
    assert "not installed" not in capsys.readouterr().err


def test_converge_whose_rollout_drains_through_kubectl_asks_for_kubectl_first(tmp_path, monkeypatch, capsys):
    # The example fleet's Rollout names a kubeconfig context: without kubectl on this host
    # the drivers' reboot would take every node for "not a Kubernetes node" and reboot it
    # undrained, so converge refuses before any work.
    monkeypatch.setenv("PATH", _path_without(tmp_path, "kubectl"))
    monkeypatch.chdir(ROOT)
    rc = main(["converge", "--fleet", "example", "--limit", "fra1-gpu-01"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "'kubectl' is not installed" in err and "nothing was run" in err, err


def test_userspace_wireguard_is_asked_for_only_where_the_kernel_has_none(tmp_path, monkeypatch):
    loaded, modules = tmp_path / "sys-module-wireguard", tmp_path / "modules"
    modules.mkdir()
    (modules / "modules.dep").write_text("kernel/net/core/pktgen.ko:\n")
    assert not hosttools.kernel_wireguard(loaded, modules)
    (modules / "modules.dep").write_text(
        "kernel/drivers/net/wireguard/wireguard.ko.xz: kernel/net/ipv4/udp_tunnel.ko.xz\n"
    )
    assert hosttools.kernel_wireguard(loaded, modules)  # a module modprobe can load
    loaded.mkdir()
    assert hosttools.kernel_wireguard(loaded, tmp_path / "none")  # loaded or built in
    # The mesh commands: without wireguard-go, refused on a kernel without WireGuard only.
    monkeypatch.setenv("PATH", _path_without(tmp_path, "wireguard-go"))
    monkeypatch.setattr(hosttools, "kernel_wireguard", lambda: False)
    assert hosttools.missing(("mesh",)) == [("wireguard-go", "wireguard-go")]
    monkeypatch.setattr(hosttools, "kernel_wireguard", lambda: True)
    assert hosttools.missing(("mesh",)) == []


def test_the_controllers_key_asks_for_wg_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", _path_without(tmp_path, "ip"))
    assert hosttools.missing(("mesh-key",)) == []
    assert ("ip", "iproute2") in hosttools.missing(("mesh",))
