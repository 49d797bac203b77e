"""Hostile and careless input (issue #11): whatever the input, ``swarm validate`` exits 2
with one ``file:line:col: error[rule]: $.path: message`` line per problem and never a
traceback; resource exhaustion is refused within time and memory bounds.

``tests/data/hostile/`` holds one file per case, each with a ``# <- RULE PATH`` marker on
the line the error must name (as ``tests/data/invalid/``; validated with
``tests/data/base`` unless it starts with ``# standalone``). Cases that need the file
system (links, FIFOs, odd names) or megabytes are made here, in a temporary directory.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from swarm_infra import cli
from swarm_infra.fleet.diagnostics import SHOWN_PER_FILE
from swarm_infra.fleet.loader import MAX_DOCUMENTS, MAX_FILE_BYTES, MAX_NODES

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parents[1] / "data"
CORPUS = sorted((DATA / "hostile").glob("*.yaml"))
MARKER = re.compile(r"#\s*<-\s*(?P<rule>\S+)\s+(?P<path>\S+)\s*$")
DIAGNOSTIC = re.compile(
    r"^(?P<file>.+?):(?P<line>\d+):(?P<col>\d+): (?P<severity>error|warning)\[(?P<rule>[A-Za-z0-9.-]+)\]: "
    r"(?P<path>\$\S*): (?P<message>.+)$"
)
SUMMARY = re.compile(r"^\d+ error\(s\), \d+ warning\(s\)$")
OMITTED = re.compile(r"^.+: \d+ more diagnostic\(s\) in this file not shown$")
# Targets of issue #11 for any single hostile file of at most 64 MiB.
MAX_SECONDS = 5.0
MAX_PEAK_MIB = 512
MiB = 2**20


def expectation(path: Path) -> tuple[int, str, str, bool]:
    text = path.read_bytes().decode("utf-8", "replace")
    for number, line in enumerate(text.splitlines(), start=1):
        m = MARKER.search(line)
        if m:
            return number, m["rule"], m["path"], text.startswith("# standalone")
    raise AssertionError(f"{path} has no '# <- rule path' marker")


def inputs(path: Path, standalone: bool) -> list[str]:
    return [str(path)] if standalone else [str(DATA / "base"), str(path)]


def parse_output(out: str) -> list[re.Match[str]]:
    """The diagnostics of a text report; asserts that every line is one (or the summary)."""
    found = []
    for line in out.splitlines():
        m = DIAGNOSTIC.match(line)
        assert m or SUMMARY.match(line) or OMITTED.match(line), f"not a diagnostic line: {line[:300]!r}"
        assert len(line) <= 1000, f"a {len(line)}-character line"
        if m:
            found.append(m)
    return found


# ------------------------------------------------------------------------- the corpus


def test_corpus_is_broad() -> None:
    rules = {expectation(p)[1] for p in CORPUS}
    assert len(CORPUS) >= 60
    for rule in (
        "yaml.alias-budget",
        "yaml.alias-cycle",
        "yaml.depth",
        "yaml.duplicate-key",
        "yaml.encoding",
        "yaml.syntax",
        "schema.kind",
        "schema.type",
        "schema.pattern",
        "schema.maxLength",
        "sysctl.key-invalid",
        "sysctl.value-invalid",
        "gpu.clocks-unsupported",
        "mesh.endpoint-invalid",
        "mesh.endpoint-duplicate",
        "mesh.cidr-unusable",
        "network.underlay-overlap",
        "network.address-not-host",
        "network.cidr-unusable",
        "label.reserved",
        "name.reserved",
        "hardware.nvme-duplicate",
        "storage.mount-path-invalid",
    ):
        assert rule in rules, rule


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_hostile_file_is_one_error_at_its_line(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line, rule, json_path, standalone = expectation(path)
    code = cli.main(["validate", *inputs(path, standalone)])
    out, err = capsys.readouterr()
    assert code == 2
    assert "Traceback" not in out + err
    errors = [m for m in parse_output(out) if m["severity"] == "error"]
    assert [(m["file"], int(m["line"]), m["rule"], m["path"]) for m in errors] == [
        (str(path), line, rule, json_path)
    ]
    assert int(errors[0]["col"]) >= 1


def test_json_report_names_the_nul_byte(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    path = DATA / "hostile" / "yaml-nul-byte.yaml"
    line, rule, _, _ = expectation(path)
    assert cli.main(["validate", "--format", "json", str(DATA / "base"), str(path)]) == 2
    report = json.loads(capsys.readouterr().out)
    [error] = report["errors"]
    data = path.read_bytes()
    col = len(data.splitlines()[line - 1].split(b"\x00")[0]) + 1
    assert (error["file"], error["line"], error["col"], error["rule"]) == (str(path), line, col, rule)
    assert "\x00" not in error["message"] and "0x00" in error["message"]


# ------------------------------------------------------------ cases made on the spot


def measured(
    *args: str, cwd: Path | None = None, wrap: tuple[str, ...] = ()
) -> tuple[int, str, str, float, float, float]:
    """``swarm ARGS`` in a child waited for with wait4: its own CPU time and peak RSS;
    ``wrap`` is an argv prefix (``setpriv ...``)."""
    env = {**os.environ, "PYTHONPATH": str(Path(cli.__file__).resolve().parents[2])}
    out_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"swarm-hostile-{os.getpid()}"
    start = time.perf_counter()
    with open(f"{out_path}.out", "w+") as out_f, open(f"{out_path}.err", "w+") as err_f:
        proc = subprocess.Popen(
            [*wrap, sys.executable, "-m", "swarm_infra.cli", *args],
            cwd=cwd,
            env=env,
            stdout=out_f,
            stderr=err_f,
        )
        deadline = start + 60
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                raise AssertionError(f"swarm {' '.join(args)} ran over 60 s")
            time.sleep(0.02)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - start
        out_f.seek(0)
        err_f.seek(0)
        out, err = out_f.read(), err_f.read()
    os.unlink(f"{out_path}.out")
    os.unlink(f"{out_path}.err")
    cpu = usage.ru_utime + usage.ru_stime
    return proc.returncode, out, err, wall, cpu, usage.ru_maxrss / 1024


def write_chunks(path: Path, head: str, unit: str, size: int, tail: str = "") -> None:
    """A file of about ``size`` bytes: ``head``, ``unit`` repeated, ``tail`` (written in chunks)."""
    count = max(0, (size - len(head) - len(tail)) // len(unit))
    with path.open("w") as fh:
        fh.write(head)
        block = unit * 65536
        for _ in range(count // 65536):
            fh.write(block)
        fh.write(unit * (count % 65536))
        fh.write(tail)


BOMB = DATA / "hostile" / "yaml-alias-bomb.yaml"
SITE = "apiVersion: swarm.io/v1alpha1\nkind: Site\nmetadata: {name: s9}\nspec:\n  region: r9\n"
NODE = (
    "---\napiVersion: swarm.io/v1alpha1\nkind: Node\nmetadata: {{name: n{i}}}\n"
    "spec: {{site: nowhere, address: 10.1.0.50, roles: [cpu-worker],\n"
    "  hardware: {{cpus: 4, memory_gib: 16}}}}\n"
)


def _flow_list(p: Path, size: int) -> None:
    write_chunks(p, "a: [", "0, ", size, "]\n")


def _deep(p: Path, levels: int) -> None:
    write_chunks(p, "a: ", "[", len("a: ") + levels)
    with p.open("a") as fh:
        fh.write("]" * min(levels, 1000) + "\n")


def _last_line(p: Path) -> int:
    with p.open("rb") as fh:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(MiB), b""))


# name: (writer, expected rule, expected line); the line is a number or a function of the file
RESOURCE_CASES: dict[str, tuple[Callable[[Path], None], str, int | Callable[[Path], int]]] = {
    "flow-list-50mb": (lambda p: _flow_list(p, 50_000_000), "file.too-large", 0),
    "file-64mib": (lambda p: write_chunks(p, "# ", "x", 64 * MiB, "\n"), "file.too-large", 0),
    "flow-list-just-under-the-cap": (lambda p: _flow_list(p, MAX_FILE_BYTES - 16), "yaml.nodes", 1),
    "scalar-15mib": (
        lambda p: write_chunks(
            p, SITE + "  provider: ", "a", 15 * MiB, "\n  underlay: {cidr: 10.99.0.0/24}\n"
        ),
        "schema.maxLength",
        6,
    ),
    "depth-100k": (lambda p: _deep(p, 100_000), "yaml.depth", 1),
    "depth-7m": (lambda p: _deep(p, 7 * MiB), "yaml.depth", 1),
    "alias-bomb": (lambda p: p.write_bytes(BOMB.read_bytes()), "yaml.alias-budget", expectation(BOMB)[0]),
    # Issue #22: few nodes, many bytes. A 10 MB anchored scalar used 100,000 times stands for
    # 1 TB of text while counting 100,000 nodes; refused at the alias that crosses 16 MiB.
    "alias-scalar-10mb-x-100k": (
        lambda p: write_chunks(
            p,
            SITE + "  provider: &big ",
            "a",
            10_000_000,
            "\n  underlay: {cidr: 10.99.0.0/24}\n  labels: [" + ", ".join(["*big"] * 100_000) + "]\n",
        ),
        "yaml.alias-budget",
        8,  # the labels line, where the aliases are
    ),
    "documents-over-the-limit": (
        lambda p: write_chunks(p, "", "--- 1\n", 6 * (MAX_DOCUMENTS + 5)),
        "yaml.documents",
        MAX_DOCUMENTS + 1,
    ),
    "keys-125k": (
        lambda p: p.write_text(
            "apiVersion: swarm.io/v1alpha1\nkind: Priority\nmetadata: {name: p}\nspec:\n  value: 1\n"
            + "".join(f"  k{i}: 1\n" for i in range(MAX_NODES // 2 - 10))
        ),
        "schema.additionalProperties",
        4,
    ),
    "comments-then-a-mistake": (
        lambda p: write_chunks(p, "", "# a comment line...\n", 15 * MiB, "--- [not, a, document]\n"),
        "schema.type",
        _last_line,
    ),
}


@pytest.mark.parametrize("case", list(RESOURCE_CASES))
def test_resource_case_is_refused_within_bounds(case: str, tmp_path: Path) -> None:
    writer, rule, line = RESOURCE_CASES[case]
    path = tmp_path / f"{case}.yaml"
    writer(path)
    line = line if isinstance(line, int) else line(path)
    assert path.stat().st_size <= 64 * MiB
    code, out, err, wall, cpu, peak = measured("validate", str(path))
    assert code == 2, out[-2000:] + err[-2000:]
    assert "Traceback" not in out + err
    errors = [m for m in parse_output(out) if m["severity"] == "error"]
    assert [(m["file"], m["rule"]) for m in errors] == [(str(path), rule)]
    assert int(errors[0]["line"]) == line
    assert len(out) < 10_000
    assert cpu <= MAX_SECONDS, f"{cpu:.2f} s of CPU (wall {wall:.2f} s)"
    assert peak <= MAX_PEAK_MIB, f"peak {peak:.0f} MiB"


def test_thousands_of_errors_print_a_bounded_report(tmp_path: Path) -> None:
    count = 10_000
    path = tmp_path / "nodes.yaml"
    path.write_text("".join(NODE.format(i=i) for i in range(count)))
    code, out, err, _, cpu, peak = measured("validate", str(path))
    assert code == 2 and "Traceback" not in out + err
    diagnostics = parse_output(out)
    # every node names a site that does not exist, and there is no Mesh: count + 1 errors
    assert out.splitlines()[-1] == f"{count + 1} error(s), 0 warning(s)"
    assert len(diagnostics) == SHOWN_PER_FILE
    assert f"{path}: {count + 1 - SHOWN_PER_FILE} more diagnostic(s) in this file not shown" in out
    lines = [int(m["line"]) for m in diagnostics]
    assert lines == sorted(lines) and lines[-1] < path.read_text().count("\n") // 10
    assert cpu <= MAX_SECONDS and peak <= MAX_PEAK_MIB, (cpu, peak)


# --------------------------------------------------------------------- the file system


def fleet_dir(tmp_path: Path) -> Path:
    d = tmp_path / "fleet"
    d.mkdir()
    (d / "base.yaml").write_bytes((DATA / "base" / "fleet.yaml").read_bytes())
    return d


def only_error(out: str) -> re.Match[str]:
    errors = [m for m in parse_output(out) if m["severity"] == "error"]
    assert len(errors) == 1, out
    return errors[0]


@pytest.mark.parametrize(
    ("case", "rule"),
    [
        ("dangling-symlink", "file.dangling-symlink"),
        ("symlink-to-itself", "file.symlink-loop"),
        ("directory-link-to-parent", "file.symlink-loop"),
        ("fifo", "file.not-regular"),
        ("symlink-to-a-fifo", "file.not-regular"),
        ("symlink-out-of-the-fleet", "file.outside-fleet"),
        ("directory-link-out-of-the-fleet", "file.outside-fleet"),
        ("directory-named-yaml", None),
    ],
)
def test_unreadable_fleet_entries_are_errors_naming_the_path(
    tmp_path: Path, case: str, rule: str | None
) -> None:
    d = fleet_dir(tmp_path)
    if case == "dangling-symlink":
        bad = d / "nodes.yaml"
        bad.symlink_to(d / "gone.yaml")
    elif case == "symlink-to-itself":
        bad = d / "loop.yaml"
        bad.symlink_to(bad)
    elif case == "directory-link-to-parent":
        (d / "sub").mkdir()
        bad = d / "sub" / "up"
        bad.symlink_to(d)
    elif case == "fifo":
        bad = d / "pipe.yaml"
        os.mkfifo(bad)
    elif case == "symlink-to-a-fifo":
        os.mkfifo(d / "pipe")
        bad = d / "pipe.yaml"
        bad.symlink_to(d / "pipe")
    elif case == "symlink-out-of-the-fleet":
        secret = tmp_path / "secret.txt"  # not in the fleet directory: it must not be read
        secret.write_text("root:$y$not-for-your-eyes:19000:0:99999:7:::\n")
        bad = d / "hosts.yaml"
        bad.symlink_to(secret)
    elif case == "directory-link-out-of-the-fleet":
        (tmp_path / "elsewhere").mkdir()
        (tmp_path / "elsewhere" / "x.yaml").write_text("root:$y$not-for-your-eyes\n")
        bad = d / "more"
        bad.symlink_to(tmp_path / "elsewhere")
    else:  # a directory named like a file is walked, not read
        bad = d / "more.yaml"
        bad.mkdir()
    code, out, err, *_ = measured("validate", str(d))
    assert "Traceback" not in out + err
    if rule is None:
        assert code == 0, out
        return
    assert code == 2
    m = only_error(out)
    assert (m["file"], int(m["line"]), m["rule"]) == (str(bad), 0, rule)
    assert "not-for-your-eyes" not in out


def test_unreadable_file_is_an_error(tmp_path: Path) -> None:
    d = fleet_dir(tmp_path)
    bad = d / "secret.yaml"
    bad.write_text("a: 1\n")
    bad.chmod(0)
    # root reads files whatever their mode: its child runs without the capabilities that let it
    wrap = ("setpriv", "--bounding-set", "-dac_override,-dac_read_search") if os.geteuid() == 0 else ()
    code, out, err, *_ = measured("validate", str(d), wrap=wrap)
    assert code == 2 and "Traceback" not in out + err
    assert only_error(out)["rule"] == "file.unreadable"


def test_a_file_name_cannot_forge_a_diagnostic_line(tmp_path: Path) -> None:
    name = "x.yaml\nfleet.yaml:1:1: error[fake]: $: forged.yaml"
    bad = tmp_path / name
    bad.write_text("apiVersion: swarm.io/v1alpha1\nkind: Site\nmetadata: {name: BAD}\nspec: {}\n")
    code, out, err, *_ = measured("validate", str(tmp_path))
    assert code == 2 and "Traceback" not in out + err
    lines = out.splitlines()
    escaped = str(bad).replace("\n", "\\n")
    # two errors (the name's pattern, the spec's required fields) and the summary: three lines
    assert len(lines) == 3 and lines[-1] == "2 error(s), 0 warning(s)"
    assert [line.startswith(f"{escaped}:3:") for line in lines[:2]] == [True, False]
    assert [line.startswith(f"{escaped}:4:") for line in lines[:2]] == [False, True]
    assert "error[schema.pattern]: $.metadata.name:" in lines[0]
    assert "error[schema.required]: $.spec:" in lines[1]


# --------------------------------------------------------------- fleet names, exit codes


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository layout with fleets alpha and beta (copies of the base fleet)."""
    for name in ("alpha", "beta"):
        (tmp_path / "inventory" / name).mkdir(parents=True)
        (tmp_path / "inventory" / name / "fleet.yaml").write_bytes(
            (DATA / "base" / "fleet.yaml").read_bytes()
        )
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")
    (tmp_path / "playbooks").mkdir()
    return tmp_path


def test_a_known_fleet_validates(repo: Path) -> None:
    code, out, err, *_ = measured("validate", "--fleet", "alpha", cwd=repo)
    assert code == 0, out + err


@pytest.mark.parametrize("name", ["alhpa", "../../../../usr/share", "/etc", "alpha/../beta", ".", ".."])
@pytest.mark.parametrize("command", ["validate", "plan"])
def test_an_unknown_fleet_exits_2_and_lists_the_fleets(repo: Path, name: str, command: str) -> None:
    code, out, err, *_ = measured(command, "--fleet", name, cwd=repo)
    assert code == 2 and "Traceback" not in out + err
    text = out if command == "validate" else err
    m = only_error(text)
    assert m["rule"] == "fleet.unknown" and "alpha, beta" in m["message"]
    if command == "plan":
        assert out == ""


@pytest.mark.parametrize("command", ["converge", "verify"])
def test_converge_and_verify_refuse_an_unknown_fleet(repo: Path, command: str) -> None:
    code, out, err, *_ = measured(command, "--fleet", "../alpha", cwd=repo)
    assert code == 2 and "Traceback" not in out + err
    assert "not a fleet name" in err and "alpha, beta" in err


# Issue #22: a fleet directory that is a link out of the repository, and a *.swarm.yml
# inside a fleet directory, are refused by every entry point, and nothing is echoed.
SECRET = "root:$6$not-a-real-hash:19000:0:99999:7:::"


def _escaping_fleet(repo: Path, tmp_path: Path) -> str:
    outside = Path(tempfile.mkdtemp(prefix="outside-the-repo-"))  # not under the repository
    (outside / "shadow.yaml").write_text(SECRET + "\n")
    (repo / "inventory" / "gamma").symlink_to(outside, target_is_directory=True)
    return "gamma"


@pytest.mark.parametrize("command", ["validate", "plan"])
def test_a_fleet_directory_linking_out_of_the_repository_is_refused_unread(
    repo: Path, tmp_path: Path, command: str
) -> None:
    name = _escaping_fleet(repo, tmp_path)
    code, out, err, *_ = measured(command, "--fleet", name, cwd=repo)
    assert code == 2 and "Traceback" not in out + err
    assert "not-a-real-hash" not in out + err
    m = only_error(out if command == "validate" else err)
    assert m["rule"] == "file.outside-fleet" and "leaving the repository" in m["message"]


@pytest.mark.parametrize("command", ["converge", "verify"])
def test_converge_and_verify_refuse_a_fleet_directory_linking_out(
    repo: Path, tmp_path: Path, command: str
) -> None:
    name = _escaping_fleet(repo, tmp_path)
    code, out, err, *_ = measured(command, "--fleet", name, cwd=repo)
    assert code == 2 and "Traceback" not in out + err and "not-a-real-hash" not in out + err
    assert "leaving the repository" in err


def test_a_swarm_yml_inside_a_fleet_directory_is_refused(repo: Path) -> None:
    """The inventory plugin takes every file of inventory/NAME; a config there would point it
    at other files (another provider's fleet) while validate reads this one."""
    from swarm_infra.engines.inventory import InventorySourceError, fleet_state

    other = repo / "elsewhere"
    other.mkdir()
    config = repo / "inventory" / "alpha" / "redirect.swarm.yml"
    config.write_text(f"plugin: swarm\nfleet_paths: [{other}]\n")
    with pytest.raises(InventorySourceError, match="inside a fleet directory"):
        fleet_state(config)
    # Read as the fleet directory, the config is no fleet document: the fleet is invalid.
    with pytest.raises(InventorySourceError, match=r"redirect\.swarm\.yml:1:1: error\[schema\.kind\]"):
        fleet_state(repo / "inventory" / "alpha")


@pytest.mark.parametrize(("args", "expected"), [(["validate"], 2), (["plan"], 0)])
def test_a_closed_pipe_keeps_the_exit_code(args: list[str], expected: int) -> None:
    """``swarm validate BAD | head -c 100`` exited 0: a BrokenPipeError was a success."""
    bad = DATA / "hostile" / "schema-unknown-fields.yaml"
    paths = [str(DATA / "base"), str(bad)] if expected == 2 else [str(DATA / "base")]
    env = {**os.environ, "PYTHONPATH": str(Path(cli.__file__).resolve().parents[2])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "swarm_infra.cli", *args, *paths],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first byte
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == expected
    assert "Traceback" not in err and "Exception ignored" not in err


def test_echoed_values_and_paths_are_cut_short() -> None:
    from swarm_infra.fleet.diagnostics import Diagnostic, Report, excerpt, json_path

    key = "k" * 100_000
    path = json_path(("metadata", "annotations", key))
    assert path.startswith("$.metadata.annotations['kkk") and "100000 characters" in path and len(path) < 120
    assert len(excerpt("v" * 10**6)) < 120 and "1000000 characters" in excerpt("v" * 10**6)
    assert excerpt(list(range(10**5))) == "<list of 100000 items>"
    report = Report([Diagnostic("f.yaml", 1, 1, "$." + "x" * 10**5, "r", "m\n" * 10**5)])
    [line, summary] = report.text().splitlines()
    assert len(line) < 1000 and summary == "1 error(s), 0 warning(s)"
    import json

    [error] = json.loads(report.json())["errors"]
    assert len(error["path"]) < 400 and len(error["message"]) < 500


MUTATIONS = [
    *(b"{", b"}", b"[", b"]", b": ", b"- ", b"&a ", b"*a", b"<<: ", b"!!int ", b"!!bool "),
    *(b"!!timestamp ", b"? ", b"---\n", b"\x00", b"\xff", b"\t", b"'", b'"', b".nan", b"2.0", b"~"),
    *(b"yes", b"\n", b"#", b"|", b"%YAML 1.1\n", b"0x1F", b"-1", b"99999999999999999999", b"{{ x }}"),
    b"\x1b[2J",
]


def test_mutated_fleets_never_crash(tmp_path: Path) -> None:
    """400 random edits (seeded, so the same every run) of the corpora and shipped fleets:
    validation never raises, every diagnostic is one line, and a fleet that validates resolves."""
    import random

    from swarm_infra import validate
    from swarm_infra.resolve import desired_state

    rng = random.Random(11)
    root = DATA.parent.parent
    sources = sorted(DATA.rglob("*.yaml")) + sorted((root / "inventory").rglob("*.yaml"))
    target = tmp_path / "mutated.yaml"
    outcomes = {"valid": 0, "invalid": 0}
    for _ in range(400):
        data = bytearray(rng.choice(sources).read_bytes())
        for _ in range(rng.randint(1, 5)):
            at = rng.randint(0, len(data))
            if rng.random() < 0.5:
                data[at:at] = rng.choice(MUTATIONS)
            else:
                del data[at : at + rng.randint(1, 12)]
        target.write_bytes(bytes(data))
        result = validate([DATA / "base", target])
        for d in result.report.diagnostics:
            assert "\n" not in d.text() and len(d.text()) < 1000
        if result.report.ok:
            desired_state(result.analysis)
        outcomes["valid" if result.report.ok else "invalid"] += 1
    assert outcomes["invalid"] > 300  # the edits do break files (the test is not vacuous)


def test_a_full_mesh_too_large_is_refused_before_its_peer_lists_are_built(tmp_path: Path) -> None:
    """Issue #22: 1,500 extra full-mesh nodes made `swarm plan` die of a MemoryError (peer
    lists grow with the square of the fleet). The generated 2,000-node fleet with its mesh
    switched to full-mesh is refused with the rule that names the way out, in bounds."""
    spec = importlib.util.spec_from_file_location("gen_fleet", ROOT / "benchmarks" / "gen_fleet.py")
    assert spec and spec.loader
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    gen.generate(tmp_path / "fleet", 2000, 10)
    mesh_files = [
        p for p in (tmp_path / "fleet").rglob("*.yaml") if "topology: hub-and-spoke" in p.read_text()
    ]
    assert len(mesh_files) == 1
    mesh_files[0].write_text(
        mesh_files[0].read_text().replace("topology: hub-and-spoke", "topology: full-mesh")
    )
    for command in ("validate", "plan"):
        code, out, err, _wall, cpu, peak = measured(command, str(tmp_path / "fleet"))
        assert code == 2 and "Traceback" not in out + err and "MemoryError" not in out + err
        m = only_error(out if command == "validate" else err)
        assert m["rule"] == "mesh.full-mesh-too-large" and "hub-and-spoke" in m["message"]
        assert cpu <= MAX_SECONDS and peak <= MAX_PEAK_MIB, (command, cpu, peak)
