"""``ansible-doc`` documents every plugin of ``plugins/`` (issue #36).

A newcomer's first look at a module or filter is ``ansible-doc``; a DOCUMENTATION block
that is not YAML (a colon-space inside a plain scalar) makes it fail. Each plugin file is
found by globbing, so a new one is covered without editing this file. The real
``ansible-doc`` of this virtualenv runs from the repository root, so the plugin paths are
the ones ansible.cfg sets, and a module's documented options are compared with the
argument_spec it really parses.
"""

from __future__ import annotations

import ast
import fcntl
import functools
import importlib.util
import inspect
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = ROOT / "plugins"
ANSIBLE_DOC = Path(sys.executable).parent / "ansible-doc"
# Directories of plugins/ (collection layout) and the ansible-doc type of their plugins.
DOC_TYPES = {
    "modules": "module",
    "filter": "filter",
    "test": "test",
    "inventory": "inventory",
    "lookup": "lookup",
    "callback": "callback",
    "connection": "connection",
    "become": "become",
    "cache": "cache",
    "vars": "vars",
    "strategy": "strategy",
}
# Directories that hold no documented plugin of their own: code the modules import, and
# action plugins (ansible-doc documents them through the module of the same name).
NOT_DOCUMENTED = {"module_utils", "action", "doc_fragments"}
# Filter and test plugins export several Jinja functions per file; each is documented by a
# sidecar <name>.yml beside the file (ansible-core's convention, ansible/plugins/filter/).
JINJA_TYPES = {"filter": "FilterModule", "test": "TestModule"}
DOC_VARS = ("DOCUMENTATION", "EXAMPLES", "RETURN")
# An option's keys that AnsibleModule reads, with the value each has when left out.
SPEC_KEYS = {"type": "str", "elements": None, "required": False, "default": None, "choices": None}


def _plugin_dirs() -> list[Path]:
    return sorted(p for p in PLUGINS.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))


@functools.cache
def _jinja_functions(path: Path) -> dict[str, Any]:
    """The functions a filter or test plugin file exports (its FilterModule/TestModule)."""
    spec = importlib.util.spec_from_file_location(f"_swarm_doc_{path.parent.name}_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    exporter = getattr(module, JINJA_TYPES[path.parent.name])()
    return dict(exporter.filters() if path.parent.name == "filter" else exporter.tests())


def _plugins() -> list[tuple[str, str, Path]]:
    """Every documented plugin: (ansible-doc type, name, the file that defines it)."""
    found = []
    for directory in _plugin_dirs():
        kind = DOC_TYPES.get(directory.name)
        if kind is None:
            continue
        for path in sorted(directory.glob("*.py")):
            if path.name == "__init__.py":
                continue
            if directory.name in JINJA_TYPES:
                found += [(kind, name, path) for name in sorted(_jinja_functions(path))]
            else:
                found.append((kind, path.stem, path))
    return found


PLUGIN_LIST = _plugins()
MODULES = [p for p in PLUGIN_LIST if p[0] == "module"]
JINJA = [p for p in PLUGIN_LIST if p[0] in ("filter", "test")]


def _id(plugin: tuple[str, str, Path]) -> str:
    return f"{plugin[0]}:{plugin[1]}"


def _doc_sources() -> list[Path]:
    """Every file that carries documentation: plugin files and the Jinja plugins' sidecars."""
    files = {path for _, _, path in PLUGIN_LIST}
    for directory in _plugin_dirs():
        if directory.name in JINJA_TYPES:
            files |= set(directory.glob("*.yml")) | set(directory.glob("*.yaml"))
    return sorted(files)


def _python_docs(path: Path) -> dict[str, str]:
    """The module-level DOCUMENTATION/EXAMPLES/RETURN strings of a Python file, as
    ansible-doc finds them (top-level assignments)."""
    texts = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id in DOC_VARS:
                    texts[target.id] = node.value.value
    return texts


@functools.cache
def _ansible_doc(kind: str, names: tuple[str, ...]) -> tuple[int, str, dict[str, Any]]:
    """``ansible-doc -t KIND --json NAMES...`` from the repository root: (exit status,
    stderr, the parsed JSON; {} when it printed none)."""
    # No ANSIBLE_* variable of the caller's: the plugin paths must come from ansible.cfg,
    # the repository root's, as they do for whoever runs ansible-doc there.
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    proc = subprocess.run(
        [str(ANSIBLE_DOC), "-t", kind, "--json", *names],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    try:
        output = json.loads(proc.stdout) if proc.stdout.strip() else {}
    except ValueError:
        output = {}
    return proc.returncode, proc.stderr, output


@pytest.fixture(scope="session")
def doc_of(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, str], dict[str, Any]]:
    """ansible-doc's JSON for one plugin, asserting it ran clean. All plugins of a type
    share one ansible-doc process (about a second each); only when that one fails does
    the plugin get a process of its own, so the failure names the plugin at fault."""
    # pytest-xdist's workers each have a base temporary directory below the run's: there,
    # the workers share one ansible-doc run per type instead of making one each.
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent

    @functools.cache
    def batch(kind: str) -> tuple[int, str, dict[str, Any]]:
        names = tuple(sorted(n for k, n, _ in PLUGIN_LIST if k == kind))
        path = shared / f"ansible-doc-{kind}.json"
        with path.with_suffix(".lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            if path.exists():
                rc, stderr, output = json.loads(path.read_text())
                return rc, stderr, output
            result = _ansible_doc(kind, names)
            path.write_text(json.dumps(result))
        return result

    def doc(kind: str, name: str) -> dict[str, Any]:
        rc, _, output = batch(kind)
        if rc != 0 or name not in output:
            rc, stderr, output = _ansible_doc(kind, (name,))
            assert rc == 0, f"ansible-doc -t {kind} {name} exited {rc}:\n{stderr}"
        assert name in output, f"ansible-doc -t {kind} {name} printed no documentation for it: {output}"
        return output[name]

    return doc


def test_every_plugin_directory_is_known() -> None:
    # A plugin type this file does not know would be skipped silently.
    unknown = [d.name for d in _plugin_dirs() if d.name not in DOC_TYPES and d.name not in NOT_DOCUMENTED]
    assert not unknown, f"plugins/{unknown}: add the directory to DOC_TYPES or NOT_DOCUMENTED"
    assert MODULES and JINJA, "no module or filter found: the globbing is wrong"


def test_every_sidecar_documents_an_exported_function() -> None:
    # A sidecar left behind by a removed or renamed filter would document nothing.
    exported = {(path.parent, name) for kind, name, path in JINJA}
    orphans = [p for p in _doc_sources() if p.suffix != ".py" and (p.parent, p.stem) not in exported]
    assert not orphans, f"{orphans}: no filter or test of that name is exported"


@pytest.mark.parametrize("path", _doc_sources(), ids=lambda p: str(p.relative_to(PLUGINS)))
def test_documentation_is_yaml(path: Path) -> None:
    """Each DOCUMENTATION, EXAMPLES and RETURN parses as YAML (the message says where)."""
    if path.suffix == ".py":
        texts = _python_docs(path)
    else:
        try:
            sidecar = yaml.safe_load(path.read_text())
        except yaml.YAMLError as exc:
            pytest.fail(f"{path} is not YAML: {exc}")
        assert isinstance(sidecar, dict) and "DOCUMENTATION" in sidecar, f"{path}: no DOCUMENTATION key"
        # Only EXAMPLES is a string of YAML inside the file; the others are parsed already.
        texts = {k: sidecar[k] for k in DOC_VARS if isinstance(sidecar.get(k), str)}
    for var, text in texts.items():
        try:
            yaml.safe_load(text)
        except yaml.YAMLError as exc:
            pytest.fail(f"{path}: {var} is not YAML (quote the value or use a >- block): {exc}")
    if path.suffix == ".py" and path.parent.name in JINJA_TYPES:
        # ansible-doc would show a file's DOCUMENTATION for every function it exports, and
        # never read the sidecars.
        assert "DOCUMENTATION" not in texts, f"{path}: document each function in its <name>.yml"
    elif path.suffix == ".py":
        assert "DOCUMENTATION" in texts, f"{path} has no module-level DOCUMENTATION string"


@pytest.mark.parametrize("plugin", PLUGIN_LIST, ids=_id)
def test_ansible_doc_documents_the_plugin(
    plugin: tuple[str, str, Path], doc_of: Callable[[str, str], dict[str, Any]]
) -> None:
    kind, name, path = plugin
    doc = doc_of(kind, name)["doc"]
    assert str(doc.get("short_description") or "").strip(), f"{kind} {name}: no short_description"
    # A module's doc names it under "module", any other plugin's under "name"; a doc
    # naming another plugin is one file's DOCUMENTATION shown for all its functions.
    assert doc.get("module" if kind == "module" else "name") == name, f"{kind} {name}: documented as {doc}"
    assert Path(doc["filename"]).resolve().parent == path.parent.resolve(), doc["filename"]
    for option, spec in (doc.get("options") or {}).items():
        assert spec.get("description"), f"{kind} {name}: option {option} has no description"


@pytest.mark.parametrize("plugin", MODULES, ids=_id)
def test_module_return_values_are_described(
    plugin: tuple[str, str, Path], doc_of: Callable[[str, str], dict[str, Any]]
) -> None:
    kind, name, _ = plugin
    returned = doc_of(kind, name).get("return") or {}
    for key, spec in returned.items():
        missing = [k for k in ("description", "returned", "type") if not spec.get(k)]
        assert not missing, f"module {name}: RETURN {key} has no {missing}"


def _argument_spec(path: Path) -> dict[str, Any] | None:
    """The module's argument_spec, read from its source: the literal passed as
    ``AnsibleModule(argument_spec=...)``, or the module-level dict of that name (the file
    itself cannot be imported here: it imports ansible.module_utils.swarm_*, which only
    Ansible's module packaging provides). None when it is not a literal."""
    tree = ast.parse(path.read_text())
    assigned = {
        t.id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Name)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "AnsibleModule":
            for keyword in node.keywords:
                if keyword.arg == "argument_spec":
                    value = keyword.value
                    if isinstance(value, ast.Name):
                        value = assigned.get(value.id, value)
                    try:
                        return ast.literal_eval(value)
                    except ValueError:
                        return None
    return None


@pytest.mark.parametrize("plugin", MODULES, ids=_id)
def test_module_options_match_its_argument_spec(
    plugin: tuple[str, str, Path], doc_of: Callable[[str, str], dict[str, Any]]
) -> None:
    kind, name, path = plugin
    spec = _argument_spec(path)
    if spec is None:
        pytest.skip(f"{path}: argument_spec is not a literal; ansible-doc's output alone is checked")
    options = doc_of(kind, name)["doc"].get("options") or {}
    assert set(options) == set(spec), f"module {name}: documented {sorted(options)}, parsed {sorted(spec)}"
    for option, parsed in spec.items():
        documented = options[option]
        for key, absent in SPEC_KEYS.items():
            assert documented.get(key, absent) == parsed.get(key, absent), (
                f"module {name}: option {option} {key}: documented {documented.get(key, absent)!r}, "
                f"argument_spec {parsed.get(key, absent)!r}"
            )
        assert not (documented.get("required") and "default" in documented), (
            f"module {name}: option {option} is required and has a default"
        )


@pytest.mark.parametrize("plugin", JINJA, ids=_id)
def test_filter_options_match_its_signature(
    plugin: tuple[str, str, Path], doc_of: Callable[[str, str], dict[str, Any]]
) -> None:
    """A filter's input is ``_input``; its other parameters are options of the same names
    (Jinja passes them by position or keyword), in ``positional`` order, required when
    they have no default."""
    kind, name, path = plugin
    doc = doc_of(kind, name)["doc"]
    params = list(inspect.signature(_jinja_functions(path)[name]).parameters.values())
    options = doc.get("options") or {}
    expected = ["_input", *(p.name for p in params[1:])]
    assert sorted(options) == sorted(expected), (
        f"{kind} {name}: documented {sorted(options)}, takes {expected}"
    )
    # ansible-core writes it as one string, "_input, a, b"; ansible-doc shows the usage from it.
    positional = doc.get("positional") or []
    if isinstance(positional, str):
        positional = [p.strip().strip("'\"") for p in positional.split(",")]
    assert positional == expected, f"{kind} {name}: positional {positional}, takes {expected}"
    for param, option in zip(params, expected, strict=True):
        required = param.default is inspect.Parameter.empty
        assert bool(options[option].get("required")) == required, f"{kind} {name}: {option} required?"
