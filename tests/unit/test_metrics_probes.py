"""The probes' commands run for real on this host (sh, ping, iperf3, fio on loopback and a
temporary directory), and `metrics.fleetrun` drives them through a shell that runs locally:
nodes are loopback addresses, so the orchestration meets the real tools without SSH."""

from __future__ import annotations

import json
import os
import stat
import subprocess

import pytest

from swarm_infra.metrics import fleetrun, probes
from swarm_infra.metrics.acceptance import NOT_SIMULATED
from swarm_infra.metrics.fio import parse_fio
from swarm_infra.metrics.iperf3 import parse_iperf3
from swarm_infra.metrics.measurement import MeasurementParseError
from swarm_infra.metrics.ping import parse_ping
from swarm_infra.metrics.targets import NodeTarget

pytestmark = pytest.mark.skipif(
    not all(os.path.exists(f"/usr/bin/{t}") for t in ("iperf3", "fio", "ping")),
    reason="needs iperf3, fio and ping (scripts/install.sh installs them)",
)


def sh(command: str, timeout: float = 60, stdin: str | None = None) -> fleetrun.Result:
    proc = subprocess.run(["sh", "-c", command], input=stdin, capture_output=True, text=True, timeout=timeout)
    return fleetrun.Result(proc.returncode, proc.stdout, proc.stderr)


def local_shell(node: str, command: str, timeout_s: float, stdin: str | None = None) -> fleetrun.Result:
    return sh(command, timeout_s, stdin)


def test_a_ping_batch_pings_every_address_and_splits_back_in_order():
    addresses = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
    result = sh(probes.ping_batch(addresses, 3, 0.2))
    outputs = probes.split_batch(result.stdout, len(addresses))
    loss = [next(m.value for m in parse_ping(o) if m.field == "packet_loss") for o in outputs]
    assert loss == [0.0, 0.0, 0.0]
    assert [o.split()[1] for o in outputs] == addresses  # "PING 127.0.0.2 (...": each in its place


def test_iperf3_server_listens_before_the_script_returns_and_serves_one_test():
    port = 5299
    assert sh(probes.iperf3_server("127.0.0.1", 20, port)).rc == 0
    client = sh(probes.iperf3_client("127.0.0.1", 1, 2, port=port, omit_s=1))
    got = {m.field: m for m in parse_iperf3(client.stdout)}
    assert (
        got["end.sum_received.bits_per_second"].value > 0
        and got["end.sum_received.bits_per_second"].label("streams") == "2"
    )
    # iperf3's own report of the test: 1 s omitted (-O), then 1 s measured.
    test_start = json.loads(client.stdout)["start"]["test_start"]
    assert (test_start["omit"], test_start["duration"]) == (1, 1)
    # -1: the server served that one test and is gone.
    refused = sh(probes.iperf3_client("127.0.0.1", 1, 1, port=port))
    with pytest.raises(MeasurementParseError, match="unable to"):
        parse_iperf3(refused.stdout)


def test_fio_runs_the_three_jobs_and_leaves_no_file(tmp_path):
    result = sh(probes.fio_command(str(tmp_path), 8, 1, ramp_s=1), timeout=120)
    ms = parse_fio(result.stdout, node="n1")
    jobs = {(m.label("jobname"), m.label("rw"), m.label("bs"), m.label("iodepth"), m.field) for m in ms}
    assert {
        (probes.FIO_JOBS[0], "randread", "4096", "32", "read.iops"),
        (probes.FIO_JOBS[0], "randread", "4096", "32", "read.clat_ns.percentile.99.000000"),
        (probes.FIO_JOBS[1], "read", "1048576", "8", "read.bw_bytes"),
        (probes.FIO_JOBS[2], "write", "1048576", "8", "write.bw_bytes"),
    } <= jobs
    # fio's own report of what it ran: direct I/O for every job (the writes too), a ramp.
    ran = json.loads(result.stdout[result.stdout.index("{") :])["global options"]
    assert (ran["direct"], ran["ramp_time"], ran["ioengine"]) == ("1", "1", "libaio")
    assert list(tmp_path.iterdir()) == []  # --unlink=1


def test_fio_files_take_at_most_a_quarter_of_the_free_space_of_the_mount(tmp_path):
    # A stand-in df reporting 40 MiB free (POSIX `df -P -m` layout): the 1 GiB asked for
    # would not fit (the lab's scratch is 1 GiB), so each job's file is 10 MiB: fio lays out
    # all three jobs' files before the first runs (create_serialize), and at half the free
    # space each the lab's 1 GiB scratch ran out (fio error 28, ENOSPC).
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "df").write_text(
        "#!/bin/sh\necho 'Filesystem 1048576-blocks Used Available Capacity Mounted on'\n"
        "echo '/dev/loop0 1014 974 40 97% /scratch'\n"
    )
    (bin_dir / "df").chmod(0o755)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    command = f"PATH={bin_dir}:$PATH; {probes.fio_command(str(scratch), 1024, 1, ramp_s=0)}"
    result = sh(command, timeout=120)
    assert json.loads(result.stdout)["global options"]["size"] == "10M", result.stderr
    assert sh(probes.fio_command(str(tmp_path / "missing"), 8, 1)).rc == 1  # df fails: fio never runs


def test_fio_command_quotes_the_mount_path(tmp_path):
    odd = tmp_path / "a dir; touch pwned"
    odd.mkdir()
    assert parse_fio(sh(probes.fio_command(str(odd), 4, 1, ramp_s=0), timeout=120).stdout)
    assert not (tmp_path / "pwned").exists() and not os.path.exists("pwned")


def test_textfile_upload_is_atomic_and_world_readable(tmp_path):
    path = tmp_path / "collector" / "swarm_metrics.prom"
    assert sh(probes.textfile_upload(str(path)), stdin="# TYPE a gauge\na 1\n").rc == 0
    assert path.read_text() == "# TYPE a gauge\na 1\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # the temporary file was moved


def test_nvidia_smi_csv_is_read_with_its_field_names_and_na_left_out():
    # nvidia-smi's --format=csv,noheader,nounits layout (no GPU on this machine to produce it).
    text = "0, 1980, 2619, 312.45, 41, 0\n1, 1755, 2619, 98.10, 38, [N/A]\n"
    ms = probes.parse_nvidia_smi(text, node="g1")
    assert len(ms) == 9
    first = {m.field: (m.value, m.unit) for m in ms if m.label("gpu") == "0"}
    assert first["power.draw"] == (312.45, "W") and first["clocks.sm"] == (1980.0, "MHz")
    assert first["ecc.errors.uncorrected.volatile.total"] == (0.0, "count")
    with pytest.raises(MeasurementParseError, match="expected 6 fields"):
        probes.parse_nvidia_smi("0, 1980\n")
    with pytest.raises(MeasurementParseError, match="not a number"):
        probes.parse_nvidia_smi("0, x, 1, 1, 1, 1\n")


def _node(name: str, site: str, underlay: str, mesh: str, **kw) -> NodeTarget:
    defaults = {"nat": False, "scratch": None, "gpu_backend": None, "head": False, "hub": False}
    return NodeTarget(name, site, underlay, mesh, **{**defaults, **kw})


def test_a_run_measures_both_paths_respects_nat_and_reports_what_it_cannot_measure(tmp_path):
    hub = _node("a-hub", "a", "127.0.1.1", "127.0.2.1", hub=True, head=True)
    worker = _node("a-w", "a", "127.0.1.2", "127.0.2.2", scratch=str(tmp_path), gpu_backend="simulated")
    natted = _node("b-n", "b", "127.0.1.3", "127.0.2.3", nat=True)
    options = fleetrun.Options(
        ping_count=2,
        iperf3_duration_s=1,
        iperf3_omit_s=0,
        iperf3_streams=(1,),
        iperf3_repeats=2,
        fio_size_mib=4,
        fio_runtime_s=1,
        fio_ramp_s=0,
    )
    lines: list[str] = []
    out = fleetrun.measure([hub, worker, natted], local_shell, options=options, progress=lines.append)
    assert out.failed == []
    pings = {
        (m.label("src"), m.label("dst"), m.label("path")) for m in out.measurements if m.field == "rtt.p50"
    }
    # Every ordered pair over the mesh; over the underlay except into the NAT'd node from another site.
    names = ["a-hub", "a-w", "b-n"]
    mesh = {(s, d, "mesh") for s in names for d in names if s != d}
    underlay = {(s, d, "underlay") for s in names for d in names if s != d and d != "b-n"}
    assert pings == mesh | underlay
    skipped = {(n.node, n.what) for n in out.not_measured if not n.failed}
    assert ("a-hub", "ping b-n underlay") in skipped and ("a-w", "ping b-n underlay") in skipped
    # Bandwidth: the hub to the other site, and the other node of its own site to the hub;
    # both paths (the NAT'd end receives over the underlay through -R), each test twice
    # (repeats), and the overhead of the mesh on each pair from the two runs of each path.
    bw = [
        (m.label("src"), m.label("dst"), m.label("path"), m.label("repeat"))
        for m in out.measurements
        if m.field == "end.sum_received.bits_per_second"
    ]
    pairs = (("a-w", "a-hub"), ("a-hub", "b-n"))
    assert sorted(bw) == sorted((s, d, p, r) for s, d in pairs for p in ("mesh", "underlay") for r in "12")
    # The paths alternate: underlay, mesh, underlay, mesh (a drift weighs on both alike).
    assert [(p, r) for s, d, p, r in bw if (s, d) == pairs[0]] == [
        ("underlay", "1"), ("mesh", "1"), ("underlay", "2"), ("mesh", "2"),
    ]  # fmt: skip
    overheads = {
        (m.label("src"), m.label("dst"), m.label("repeats"))
        for m in out.measurements
        if m.field == "wireguard.overhead"
    }
    assert overheads == {(s, d, "2") for s, d in pairs}
    assert {m.label("node") for m in out.measurements if m.tool == "fio"} == {"a-w"}
    assert ("a-w", fleetrun.GPU_PROBES, NOT_SIMULATED) in {(n.node, n.what, n.why) for n in out.not_measured}
    assert any("round 1/" in line for line in lines) and lines[-1].startswith("inference: done")
    # Without a RayCluster, training and inference are not applicable, not failures.
    assert {(n.part, n.why) for n in out.not_measured if n.part in ("training", "inference")} == {
        ("training", "the fleet declares no RayCluster"),
        ("inference", "the fleet declares no RayCluster"),
    }


def test_zero_repeats_pings_only_and_names_each_skipped_bandwidth_test():
    """--repeats 0 (what a latency matrix needs): pings every pair, starts no iperf3, and each
    bandwidth test it leaves out is named as not measured (skipped, not failed)."""
    hub = _node("a-hub", "a", "127.0.1.1", "127.0.2.1", hub=True, head=True)
    other = _node("b-hub", "b", "127.0.1.2", "127.0.2.2", hub=True)
    commands: list[str] = []

    def shell(node: str, command: str, timeout_s: float, stdin: str | None = None) -> fleetrun.Result:
        commands.append(command)
        return local_shell(node, command, timeout_s, stdin)

    options = fleetrun.Options(ping_count=2, iperf3_repeats=0)
    out = fleetrun.measure([hub, other], shell, ["network"], options)
    assert out.failed == [] and not any("iperf3" in c for c in commands)
    assert {m.field for m in out.measurements} >= {"rtt.p50"}
    assert not any(m.tool == "iperf3" for m in out.measurements)
    assert [(n.what, n.why) for n in out.not_measured if n.what.startswith("iperf3")] == [
        ("iperf3 a-hub->b-hub", "skipped (--repeats 0)")
    ]


def test_an_unreachable_node_is_a_named_failure_not_an_exception():
    def down(node: str, command: str, timeout_s: float, stdin: str | None = None) -> fleetrun.Result:
        return fleetrun.Result(255, "", "ssh: connect to host 203.0.113.9 port 22: Connection refused")

    n1, n2 = (
        _node("n1", "a", "127.0.1.1", "127.0.2.1"),
        _node("n2", "a", "127.0.1.2", "127.0.2.2", scratch="/s"),
    )
    out = fleetrun.measure([n1, n2], down, ["network", "storage"], fleetrun.Options(iperf3_streams=(1,)))
    assert out.measurements == []
    assert {(n.node, n.part) for n in out.failed} == {("n1", "network"), ("n2", "network"), ("n2", "storage")}
    assert all("Connection refused" in n.why for n in out.failed)
    with pytest.raises(ValueError, match="unknown part"):
        fleetrun.measure([n1], down, ["bogus"])


def test_a_ray_job_script_is_saved_from_stdin_submitted_and_its_directory_removed(tmp_path):
    # A stand-in `ray` in a venv layout: it runs the saved script the way `ray job submit` does.
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    fake = venv / "bin" / "ray"
    fake.write_text(
        "#!/bin/sh\n# ray job submit --address A --working-dir D -- python S ARGS\n"
        # Ray's token authentication reaches the client through its environment (the path).
        'test "$RAY_AUTH_MODE" = token && test "$RAY_AUTH_TOKEN_PATH" = /srv/ray/tok || exit 9\n'
        'cd "$6" && shift 8 && exec python3 "$@"\n'
    )
    fake.chmod(0o755)
    script = "import sys, os; print('TRAINING', sys.argv[1:], os.getcwd())"
    command = probes.ray_job(str(venv), "http://10.0.0.1:8265", "job.py", ["--epochs", "3"], "/srv/ray/tok")
    result = sh(command, stdin=script)
    assert result.rc == 0, result.stderr
    args, cwd = result.stdout.split(" ", 1)[1].rsplit(" ", 1)
    assert args == "['--epochs', '3']" and not os.path.exists(cwd.strip())


def test_the_matmul_probe_says_why_it_cannot_run_and_its_lines_parse():
    # Run for real with this host's python3: no PyTorch (or no CUDA) here, so it says why.
    result = sh(probes.matmul_command("python3", 64, 1))
    assert result.rc == 0 and result.stdout.startswith("MATMUL-UNAVAILABLE")
    with pytest.raises(MeasurementParseError, match=r"matmul: (no torch|torch sees no CUDA)"):
        probes.parse_matmul(result.stdout)
    # The line format the probe prints on a GPU node (no GPU on this machine to produce it).
    line = (
        'MATMUL {"gpu": 0, "n": 8192, "iters": 4200, "seconds": 60.2, "flops": 7.6e14, '
        '"first_window_flops": 7.9e14, "last_window_flops": 6.1e14}\n'
    )
    got = {
        m.field: (m.value, m.unit, m.label("gpu"), m.label("node"))
        for m in probes.parse_matmul(line, node="g1")
    }
    assert got == {
        "matmul.flops": (7.6e14, "FLOP/s", "0", "g1"),
        "matmul.flops.first_window": (7.9e14, "FLOP/s", "0", "g1"),
        "matmul.flops.last_window": (6.1e14, "FLOP/s", "0", "g1"),
        "matmul.seconds": (60.2, "s", "0", "g1"),
    }
    with pytest.raises(MeasurementParseError, match="a GPU failed"):
        probes.parse_matmul(line + 'MATMUL-FAILED {"gpu": 1, "error": "OutOfMemoryError()"}\n')
