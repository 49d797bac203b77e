"""The shell commands `swarm metrics run` sends to nodes, and the readers of what they print.

Every value from the fleet (addresses, mount paths) reaches the node's shell quoted
(``shlex.quote``); the numbers are the run's options. The tools are the ones the node layer
installs: ``ping`` (iputils), ``iperf3`` (with the mesh), ``fio`` (with scratch storage), and
``nvidia-smi`` (with the NVIDIA driver).
"""

from __future__ import annotations

import json
import re
import shlex

from swarm_infra.metrics.measurement import Measurement, MeasurementParseError, make_labels
from swarm_infra.resolve.ray import client_env_prefix

IPERF3_PORT = 5201
"""iperf3's default port; two tests of a round never share a node, so one port serves all."""

_MARK = "@@swarm-metrics "


def ping_batch(addresses: list[str], count: int, interval_s: float) -> str:
    """A script that pings every address at once (``ping -n -c COUNT -i INTERVAL -W 1``) and
    then prints each output after a marker line; read it back with :func:`split_batch`.

    ``interval_s`` below 0.2 needs root on the node (iputils).
    """
    lines = ["d=$(mktemp -d) || exit 1", "trap 'rm -rf \"$d\"' EXIT"]
    for i, address in enumerate(addresses):
        lines.append(
            f'ping -n -c {int(count)} -i {float(interval_s):g} -W 1 {shlex.quote(address)} >"$d/{i}" 2>&1 &'
        )
    lines.append("wait")
    lines += [f'echo "{_MARK}{i}"; cat "$d/{i}"' for i in range(len(addresses))]
    return "\n".join(lines) + "\n"


def split_batch(stdout: str, n: int) -> list[str]:
    """The ``n`` outputs of a :func:`ping_batch` script, in address order ("" for one that is missing)."""
    parts = {}
    for chunk in stdout.split(_MARK)[1:]:
        index, _, body = chunk.partition("\n")
        if index.strip().isdigit():
            parts[int(index)] = body
    return [parts.get(i, "") for i in range(n)]


def iperf3_server(bind: str, timeout_s: int, port: int = IPERF3_PORT) -> str:
    """Start one iperf3 server for a single test (``-s -1``), bound to ``bind``, detached from
    the SSH session and ended by ``timeout`` at the latest; the script returns once the port
    listens (it polls ``ss`` for up to 5 s) and exits 1 if it never does."""
    return (
        f"setsid -f timeout {int(timeout_s)} iperf3 -s -1 -B {shlex.quote(bind)} -p {int(port)} "
        ">/dev/null 2>&1 </dev/null\n"
        "for _ in $(seq 100); do\n"
        f"  ss -Hltn 'sport = :{int(port)}' | grep -q . && exit 0\n"
        "  sleep 0.05\n"
        "done\n"
        "echo 'iperf3 server did not start listening' >&2; exit 1\n"
    )


def iperf3_client(
    server: str, duration_s: int, streams: int, reverse: bool = False, port: int = IPERF3_PORT
) -> str:
    """``iperf3 -c SERVER -J -t DURATION -P STREAMS`` (``-R``: the server sends), giving up on
    an unreachable server after 3 s."""
    reverse_flag = " -R" if reverse else ""
    return (
        f"iperf3 -c {shlex.quote(server)} -p {int(port)} -J -t {int(duration_s)} -P {int(streams)}"
        f"{reverse_flag} --connect-timeout 3000"
    )


FIO_JOBS = ("randread-4k-qd32", "seqread-1m", "seqwrite-1m")
"""fio's job names, run one after the other (``--stonewall``)."""


def fio_command(directory: str, size_mib: int, runtime_s: int) -> str:
    """fio on ``directory`` with JSON output: 4 KiB random read at queue depth 32, then 1 MiB
    sequential read, then 1 MiB sequential write; each ``runtime_s`` seconds over a
    ``size_mib`` MiB file, direct I/O (libaio), files removed afterwards (``--unlink=1``)."""
    common = (
        f"--output-format=json --directory={shlex.quote(directory)} --size={int(size_mib)}M "
        f"--runtime={int(runtime_s)} --time_based --ioengine=libaio --direct=1 --unlink=1"
    )
    return (
        f"fio {common} "
        f"--name={FIO_JOBS[0]} --rw=randread --bs=4k --iodepth=32 "
        f"--name={FIO_JOBS[1]} --stonewall --rw=read --bs=1M --iodepth=8 "
        f"--name={FIO_JOBS[2]} --stonewall --rw=write --bs=1M --iodepth=8"
    )


NVIDIA_SMI_FIELDS = {
    "clocks.sm": "MHz",
    "clocks.mem": "MHz",
    "power.draw": "W",
    "temperature.gpu": "C",
    "ecc.errors.uncorrected.volatile.total": "count",
}
"""NVML telemetry as nvidia-smi names it (``nvidia-smi --help-query-gpu``), with its units."""


def nvidia_smi_command() -> str:
    """nvidia-smi's CSV query of :data:`NVIDIA_SMI_FIELDS` per GPU, without header or units."""
    return f"nvidia-smi --query-gpu=index,{','.join(NVIDIA_SMI_FIELDS)} --format=csv,noheader,nounits"


_NA = re.compile(r"^\[?N/A\]?$|^\[Not Supported\]$")


def parse_nvidia_smi(text: str, **labels: str | int | None) -> list[Measurement]:
    """Measurements from :func:`nvidia_smi_command` output: one line per GPU,
    ``index, clocks.sm, clocks.mem, power.draw, temperature.gpu, ecc...`` (e.g.
    ``0, 1980, 2619, 312.45, 41, 0``). A field nvidia-smi reports as ``[N/A]`` or
    ``[Not Supported]`` (no ECC on the board, say) is left out. Each record has the label
    ``gpu`` (the index). Raises MeasurementParseError on a line with the wrong number of
    fields or a value that is not a number.
    """
    out: list[Measurement] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 1 + len(NVIDIA_SMI_FIELDS):
            raise MeasurementParseError(f"nvidia-smi: expected {1 + len(NVIDIA_SMI_FIELDS)} fields: {line!r}")
        lab = make_labels(gpu=cells[0], **labels)
        for (field, unit), cell in zip(NVIDIA_SMI_FIELDS.items(), cells[1:], strict=True):
            if _NA.match(cell):
                continue
            try:
                out.append(Measurement("nvidia-smi", field, float(cell), unit, lab))
            except ValueError:
                raise MeasurementParseError(f"nvidia-smi: {field} is not a number: {cell!r}") from None
    if not out:
        raise MeasurementParseError("nvidia-smi: no GPU reported")
    return out


def textfile_upload(path: str) -> str:
    """Write stdin to ``path`` atomically (a temporary file beside it, then ``mv``), mode 0644,
    as node_exporter's textfile collector asks (it must never read a half-written file)."""
    directory, _, name = path.rpartition("/")
    tmp = f"{directory}/.{name}.tmp"
    return (
        f"mkdir -p {shlex.quote(directory)} && cat > {shlex.quote(tmp)} && "
        f"chmod 0644 {shlex.quote(tmp)} && mv -f {shlex.quote(tmp)} {shlex.quote(path)}"
    )


def ray_job(venv: str, dashboard: str, script: str, args: list[str], token: str) -> str:
    """Submit the job script read from stdin (saved as ``script`` in a temporary working
    directory, removed afterwards) with ``VENV/bin/ray job submit``, waiting for its end; the
    job's log comes back on stdout and the exit status is the job's. ``token``: the path of
    the cluster's token on the node (Ray's token authentication; the job API refuses a
    client without it)."""
    argv = " ".join(shlex.quote(a) for a in args)
    return (
        "d=$(mktemp -d) || exit 1\n"
        f'cat > "$d"/{shlex.quote(script)}\n'
        f"{client_env_prefix(token)} {shlex.quote(venv)}/bin/ray job submit "
        f"--address {shlex.quote(dashboard)} "
        f'--working-dir "$d" -- python {shlex.quote(script)} {argv}\n'
        'rc=$?; rm -rf "$d"; exit $rc\n'
    )


MATMUL_SCRIPT = """
import json, sys, time
try:
    import torch
except ImportError:
    print("MATMUL-UNAVAILABLE no torch in this python"); sys.exit(0)
if not torch.cuda.is_available():
    print("MATMUL-UNAVAILABLE torch sees no CUDA device"); sys.exit(0)
n, iters = int(sys.argv[1]), int(sys.argv[2])
for gpu in range(torch.cuda.device_count()):
    with torch.cuda.device(gpu):
        a = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
        b = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
        for _ in range(3):
            a @ b
        torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(iters):
            a @ b
        torch.cuda.synchronize()
        seconds = time.perf_counter() - started
    tflops = 2 * n**3 * iters / seconds / 1e12
    print("MATMUL " + json.dumps({"gpu": gpu, "n": n, "iters": iters, "tflops": tflops}))
"""
"""A short dense bf16 matmul on each GPU (PyTorch), timed with CUDA synchronisation:
``2 n^3 iters / seconds`` FLOP/s. Run only where the node's GPUs are real (nvml backend)."""


def matmul_command(python: str = "python3", n: int = 8192, iters: int = 50) -> str:
    """Run :data:`MATMUL_SCRIPT` with ``python`` (one that has PyTorch with CUDA); it prints one
    ``MATMUL {json}`` line per GPU, or ``MATMUL-UNAVAILABLE <why>``."""
    return f"{shlex.quote(python)} -c {shlex.quote(MATMUL_SCRIPT)} {int(n)} {int(iters)}"


def parse_matmul(text: str, **labels: str | int | None) -> list[Measurement]:
    """``matmul.tflops`` (TFLOP/s, label ``gpu``) per ``MATMUL {json}`` line. Raises
    MeasurementParseError with the probe's reason when it printed ``MATMUL-UNAVAILABLE``, or
    when no line came."""
    out = []
    for line in text.splitlines():
        if line.startswith("MATMUL-UNAVAILABLE"):
            raise MeasurementParseError(f"matmul: {line.partition(' ')[2] or 'unavailable'}")
        if line.startswith("MATMUL "):
            try:
                run = json.loads(line[len("MATMUL ") :])
                lab = make_labels(gpu=int(run["gpu"]), **labels)
                out.append(Measurement("torch", "matmul.tflops", float(run["tflops"]), "TFLOP/s", lab))
            except (ValueError, KeyError, TypeError) as exc:
                raise MeasurementParseError(f"matmul: unreadable line ({exc}): {line[:200]!r}") from None
    if not out:
        raise MeasurementParseError("matmul: the probe printed nothing")
    return out
