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

from swarm_infra.metrics import gpu_health
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


VERSIONED_TOOLS = {"fio": "fio --version", "iperf3": "iperf3 --version", "ping": "ping -V"}
"""The measuring tools whose versions a run records, with the command that prints each one's
version on its first line (``fio-3.33``, ``iperf 3.12 (cJSON 1.7.15)``, ``ping from iputils
20221126``)."""


def tool_versions_command() -> str:
    """A script printing ``TOOL VERSION-LINE`` for each of :data:`VERSIONED_TOOLS` (an empty
    version where the tool is missing); read it back with :func:`parse_tool_versions`."""
    return "".join(
        f"printf '%s %s\\n' {tool} \"$({command} 2>/dev/null | head -n 1)\"\n"
        for tool, command in VERSIONED_TOOLS.items()
    )


def parse_tool_versions(text: str) -> dict[str, str]:
    """``{tool: version line}`` from :func:`tool_versions_command` output, leaving out the tools
    that printed nothing (not installed) and any line naming another tool."""
    out = {}
    for line in text.splitlines():
        tool, _, version = line.partition(" ")
        if tool in VERSIONED_TOOLS and version.strip():
            out[tool] = version.strip()[:200]
    return out


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


IPERF3_OMIT_S = 3
"""Seconds at the start of each iperf3 test left out of its figures (``-O``): TCP's slow start
and the first congestion-window growth, as benchmarks/bench_wan_tuning.py does."""


def iperf3_client(
    server: str,
    duration_s: int,
    streams: int,
    reverse: bool = False,
    port: int = IPERF3_PORT,
    omit_s: int = IPERF3_OMIT_S,
) -> str:
    """``iperf3 -c SERVER -J -t DURATION -O OMIT -P STREAMS`` (``-R``: the server sends), giving
    up on an unreachable server after 3 s. The test lasts ``omit_s + duration_s`` seconds; its
    ``end`` sums cover the last ``duration_s`` only (iperf3's ``-O``: "omit the first n seconds")."""
    reverse_flag = " -R" if reverse else ""
    return (
        f"iperf3 -c {shlex.quote(server)} -p {int(port)} -J -t {int(duration_s)} -O {int(omit_s)} "
        f"-P {int(streams)}{reverse_flag} --connect-timeout 3000"
    )


FIO_JOBS = ("randread-4k-qd32", "seqread-1m", "seqwrite-1m")
"""fio's job names, run one after the other (``--stonewall``)."""

FIO_RAMP_S = 3
"""Seconds each fio job runs before its figures start (``--ramp_time``)."""


def fio_command(directory: str, size_mib: int, runtime_s: int, ramp_s: int = FIO_RAMP_S) -> str:
    """fio on ``directory`` with JSON output: 4 KiB random read at queue depth 32, then 1 MiB
    sequential read, then 1 MiB sequential write, one after the other (``--stonewall``).

    Each job has its own file of ``size_mib`` MiB, or a quarter of the space free on the mount
    when that is less (read on the node with ``df``; fio's ``global options`` in the JSON say
    the size used): fio lays out every job's file before the first job starts (its default
    ``create_serialize``), so the three files exist at once, and a half each ran a 1 GiB scratch
    out of space (fio error 28, ENOSPC, in the lab). Each job runs ``ramp_s`` seconds unmeasured
    (``--ramp_time``) then ``runtime_s`` seconds measured (``--time_based``), with direct I/O
    (``--direct=1``, libaio) for reads and writes alike: neither the page cache nor its
    write-back is measured, whatever the file's size. Preconditioning: before a read job starts,
    fio lays its file out (writes it in full), so reads hit allocated blocks, never a sparse
    file's holes; there is no device-wide preconditioning to steady state (SNIA PTS), so an
    SSD's figures are those of a file on the device as it is. The files are removed after each
    job (``--unlink=1``). The run takes about ``3 * (ramp_s + runtime_s)`` seconds plus the
    layout of the files."""
    quoted = shlex.quote(directory)
    common = (
        f'--output-format=json --directory={quoted} --size="$size"M '
        f"--ramp_time={int(ramp_s)} --runtime={int(runtime_s)} --time_based "
        "--ioengine=libaio --direct=1 --unlink=1"
    )
    return (
        f"size=$(df -Pm -- {quoted} | awk -v want={int(size_mib)} "
        "'NR == 2 { part = int($4 / 4); print (part < want ? (part > 0 ? part : 1) : want) }')\n"
        '[ -n "$size" ] || exit 1\n'
        f"exec fio {common} "
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
import json, os, subprocess, sys, threading, time
# CUDA numbers devices fastest first unless told otherwise; nvidia-smi samples by UUID below.
os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
try:
    import torch
except ImportError:
    print("MATMUL-UNAVAILABLE no torch in this python"); sys.exit(0)
if not torch.cuda.is_available():
    print("MATMUL-UNAVAILABLE torch sees no CUDA device"); sys.exit(0)
n, seconds, queries = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
lock = threading.Lock()

def emit(tag, record):
    with lock:
        print(tag + " " + json.dumps(record), flush=True)

def gpu_uuid(gpu):
    uuid = getattr(torch.cuda.get_device_properties(gpu), "uuid", None)  # where PyTorch has it
    return f"GPU-{uuid}" if uuid is not None else None

def sample(gpu, uuid):
    # nvidia-smi while this GPU's queue is full: by UUID, else by index (PCI bus order, as
    # CUDA_DEVICE_ORDER above), with the first field list the driver accepts.
    error = "no field list"
    for ident in [x for x in (uuid, str(gpu)) if x]:
        for fields in queries:
            try:
                r = subprocess.run(["nvidia-smi", "-i", ident, "--query-gpu=" + fields,
                                    "--format=csv,noheader,nounits"],
                                   capture_output=True, text=True, timeout=30)
            except (OSError, subprocess.SubprocessError) as exc:
                error = str(exc)
                continue
            if r.returncode == 0:
                emit("MATMUL-SAMPLE", {"gpu": gpu, "uuid": uuid, "fields": fields, "csv": r.stdout.strip()})
                return
            error = (r.stderr or r.stdout).strip()[-200:]
    emit("MATMUL-SAMPLE", {"gpu": gpu, "uuid": uuid, "error": error})

def run(gpu):
    device, uuid = torch.device("cuda", gpu), gpu_uuid(gpu)
    a = torch.randn(n, n, dtype=torch.bfloat16, device=device)
    b = torch.randn(n, n, dtype=torch.bfloat16, device=device)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize(device)
    t = time.perf_counter()
    a @ b
    torch.cuda.synchronize(device)
    batch = max(1, int(1.0 / max(time.perf_counter() - t, 1e-6)))  # about 1 s of work per window
    windows, iters, started = [], 0, time.perf_counter()
    while True:
        t0 = time.perf_counter()
        for _ in range(batch):
            a @ b
        if queries and len(windows) % 5 == 1:
            sample(gpu, uuid)
        torch.cuda.synchronize(device)
        t1 = time.perf_counter()
        windows.append(2 * n**3 * batch / (t1 - t0))
        iters += batch
        if t1 - started >= seconds:
            break
    elapsed = t1 - started
    emit("MATMUL", {"gpu": gpu, "uuid": uuid, "n": n, "iters": iters, "seconds": elapsed,
                    "flops": 2 * n**3 * iters / elapsed,
                    "first_window_flops": windows[0], "last_window_flops": windows[-1]})

def guarded(gpu):
    try:
        run(gpu)
    except Exception as exc:  # one GPU that cannot run the matmul fails the probe, named
        emit("MATMUL-FAILED", {"gpu": gpu, "error": repr(exc)[-200:]})

threads = [threading.Thread(target=guarded, args=(g,)) for g in range(torch.cuda.device_count())]
for t in threads:
    t.start()
for t in threads:
    t.join()
"""
"""A dense bf16 matmul on every GPU at once (one thread per GPU, PyTorch), for a target
duration rather than an iteration count, so that heat and power limits have time to act:
windows of about 1 s of queued work, each timed with CUDA synchronisation (``2 n^3 batch /
seconds`` FLOP/s); every fifth window, while the queue runs, one nvidia-smi sample of the
field lists given after the duration (the first the driver accepts:
:data:`swarm_infra.metrics.gpu_health.LOAD_FIELDS`, then its pre-R535 names). Run only where
the node's GPUs are real (nvml backend)."""

MATMUL_SECONDS = 60.0
"""Default probe duration per run (all GPUs at once): GPU boost clocks settle and thermal or
power slowdowns appear within tens of seconds of full load; a 0.1 s burst shows none of it."""


def matmul_command(python: str = "python3", n: int = 8192, seconds: float = MATMUL_SECONDS) -> str:
    """Run :data:`MATMUL_SCRIPT` with ``python`` (one that has PyTorch with CUDA) for ``seconds``;
    it prints one ``MATMUL {json}`` line per GPU (``flops``, ``first_window_flops``,
    ``last_window_flops`` in FLOP/s, ``seconds``, ``iters``, ``n``), ``MATMUL-SAMPLE {json}``
    lines (read by :func:`swarm_infra.metrics.gpu_health.parse_load_samples`),
    ``MATMUL-FAILED {json}`` for a GPU whose run raised, or ``MATMUL-UNAVAILABLE <why>``."""
    fields = [",".join(gpu_health.LOAD_FIELDS), ",".join(gpu_health.LOAD_FIELDS_LEGACY)]
    argv = " ".join(shlex.quote(a) for a in [str(int(n)), f"{float(seconds):g}", *fields])
    return f"{shlex.quote(python)} -c {shlex.quote(MATMUL_SCRIPT)} {argv}"


def parse_matmul(text: str, **labels: str | int | None) -> list[Measurement]:
    """Per ``MATMUL {json}`` line (labels ``gpu``, and ``uuid`` where PyTorch reports it):
    ``matmul.flops`` (FLOP/s over the whole timed run), ``matmul.flops.first_window`` and
    ``matmul.flops.last_window`` (FLOP/s of its first and last ~1 s window: a drop from first
    to last is throttling) and ``matmul.seconds`` (s, the timed run's length). Raises
    MeasurementParseError with the probe's reason when it printed ``MATMUL-UNAVAILABLE`` or
    ``MATMUL-FAILED`` (a GPU that cannot run it), or when no line came."""
    out = []
    for line in text.splitlines():
        if line.startswith("MATMUL-UNAVAILABLE"):
            raise MeasurementParseError(f"matmul: {line.partition(' ')[2] or 'unavailable'}")
        if line.startswith("MATMUL-FAILED "):
            raise MeasurementParseError(f"matmul: a GPU failed: {line[len('MATMUL-FAILED ') :][:200]}")
        if line.startswith("MATMUL "):
            try:
                run = json.loads(line[len("MATMUL ") :])
                lab = make_labels(gpu=int(run["gpu"]), uuid=run.get("uuid"), **labels)
                out += [
                    Measurement("torch", "matmul.flops", float(run["flops"]), "FLOP/s", lab),
                    Measurement(
                        "torch", "matmul.flops.first_window", float(run["first_window_flops"]), "FLOP/s", lab
                    ),
                    Measurement(
                        "torch", "matmul.flops.last_window", float(run["last_window_flops"]), "FLOP/s", lab
                    ),
                    Measurement("torch", "matmul.seconds", float(run["seconds"]), "s", lab),
                ]
            except (ValueError, KeyError, TypeError) as exc:
                raise MeasurementParseError(f"matmul: unreadable line ({exc}): {line[:200]!r}") from None
    if not out:
        raise MeasurementParseError("matmul: the probe printed nothing")
    return out
