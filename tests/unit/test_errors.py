"""The library's exception classes live in one module, ``swarm_infra.errors`` (issue #37).

Every public exception class of the package is defined there, but for the few that
``errors.py``'s docstring names with their reason; the modules that raise them still
export them under the same names, with the same base classes, so no import or ``except``
of a caller changed. ``nodeside`` is not walked: it ships alone to the nodes and imports
nothing of the package (``test_layout.py`` checks that).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import subprocess
import sys
from collections.abc import Iterator
from types import ModuleType

import pytest

import swarm_infra
from swarm_infra import errors

# Defined elsewhere, each for the reason errors.py's docstring gives.
ELSEWHERE = {
    "swarm_infra.fleet.diagnostics.FleetInvalid",  # carries the fleet layer's Report
    "swarm_infra.fleet.loader.LimitExceeded",  # a yaml.YAMLError
    "swarm_infra.hosttools.HostToolMissing",  # hosttools.py runs as a script, before install
}

# Where each class was defined before it moved: the name callers import it by, and the
# base class their `except` clauses match.
FORMER_HOMES = {
    "swarm_infra.resolve.text": {"UnsafeValue": ValueError},
    "swarm_infra.resolve.host": {"IncludeCycle": ValueError},
    "swarm_infra.resolve.placement": {"PlacementError": ValueError},
    "swarm_infra.metrics.measurement": {"MeasurementParseError": ValueError},
    "swarm_infra.metrics.gpu_health": {"DcgmUnavailable": errors.MeasurementParseError},
    "swarm_infra.gitrun": {"GitError": RuntimeError},
    "swarm_infra.agent.report": {"ReportInvalid": ValueError},
    "swarm_infra.agent.config": {"ConfigInvalid": ValueError},
    "swarm_infra.agent.bootstrap": {"BootstrapError": ValueError},
    "swarm_infra.engines.controller": {"ControllerError": RuntimeError},
    "swarm_infra.engines.inventory": {"InventorySourceError": Exception},
    "swarm_infra.engines.keyrecord": {"KeyRecordInvalid": ValueError},
    "swarm_infra.review.git": {"MergeConflict": errors.GitError, "GitError": RuntimeError},
    "swarm_infra.review.claim": {"ClaimInvalid": ValueError},
    "swarm_infra.lab.system": {"LabError": Exception},
    "swarm_infra.cli.init": {"InitError": ValueError},
    "swarm_infra.cluster.scope": {"ScopeError": ValueError},
    "swarm_infra.cluster.stacks": {"StackFileError": ValueError},
    "swarm_infra.fleet.sources": {"UnknownFleet": ValueError, "FleetEscapes": ValueError},
}


def _modules() -> Iterator[ModuleType]:
    """Every module of the package but nodeside's (and ``__main__``, which runs the CLI)."""
    for info in pkgutil.walk_packages(swarm_infra.__path__, "swarm_infra."):
        if info.name.startswith("swarm_infra.nodeside") or info.name.rsplit(".", 1)[-1] == "__main__":
            continue
        yield importlib.import_module(info.name)


def _exception_classes(module: ModuleType) -> Iterator[type[BaseException]]:
    for obj in vars(module).values():
        if inspect.isclass(obj) and issubclass(obj, BaseException):
            yield obj


def test_every_public_exception_class_is_defined_in_errors() -> None:
    elsewhere = {
        f"{module.__name__}.{cls.__name__}"
        for module in _modules()
        if module.__name__ != errors.__name__
        for cls in _exception_classes(module)
        if cls.__module__ == module.__name__ and not cls.__name__.startswith("_")
    }
    # Equal, not a subset: a class that moved in leaves its entry stale, and that fails too.
    assert elsewhere == ELSEWHERE
    # ...and errors.py says why of each (and of nodeside's GpuError).
    for name in [*ELSEWHERE, "swarm_infra.nodeside.gpu.GpuError"]:
        assert f"``{name}``" in (errors.__doc__ or ""), name


def test_the_modules_that_raise_them_still_export_them_with_their_bases() -> None:
    for name, classes in FORMER_HOMES.items():
        module = importlib.import_module(name)
        for cls_name, base in classes.items():
            cls = getattr(module, cls_name)
            assert cls is getattr(errors, cls_name), f"{name}.{cls_name}"
            assert cls.__bases__ == (base,), f"{name}.{cls_name}"


def test_each_class_says_who_raises_it() -> None:
    classes = list(_exception_classes(errors))
    assert classes
    for cls in classes:
        assert "Raised by" in (cls.__doc__ or ""), cls.__name__


def test_errors_runs_with_the_standard_library_alone() -> None:
    # -I: no PYTHONPATH, no script directory; -S: no site-packages. Run as a file, outside the
    # package: a relative import, the package or a third-party module would not be found.
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", "import runpy, sys; runpy.run_path(sys.argv[1])", errors.__file__],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("cls", "args", "attr", "value", "message"),
    [
        (errors.IncludeCycle, (["a", "b", "a"],), "chain", ["a", "b", "a"], "a -> b -> a"),
        (errors.MergeConflict, ("the head conflicts", ["x.yml"]), "files", ["x.yml"], "the head conflicts"),
    ],
)
def test_the_classes_keep_their_attributes(
    cls: type[Exception], args: tuple[object, ...], attr: str, value: object, message: str
) -> None:
    exc = cls(*args)
    assert getattr(exc, attr) == value and str(exc) == message


def test_a_report_invalid_message_is_printable() -> None:
    assert str(errors.ReportInvalid("bad\nline\x1b[2J")) == "bad?line?[2J"
