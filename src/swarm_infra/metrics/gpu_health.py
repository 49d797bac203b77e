"""GPU acceptance on a node: identity, health and DCGM diagnostics; the commands and their readers.

What is read, and from where (the sources each parser is written against):

- **Identity and memory health** (:func:`inventory_command`): ``nvidia-smi --query-gpu`` with
  :data:`IDENTITY_FIELDS` and ``nvidia-smi --query-remapped-rows`` with
  :data:`REMAPPED_ROWS_FIELDS`. Field names and meanings: ``nvidia-smi --help-query-gpu``
  (the list NVIDIA's driver prints, R550 series, restated in the nvidia-smi man page's
  "SELECTIVE QUERY OPTIONS"): ``name`` "the official product name", ``uuid`` "globally
  unique immutable alphanumeric identifier", ``memory.total`` "total installed GPU memory"
  (MiB with ``nounits``; "affected by ECC state"), ``pci.bus_id`` "domain:bus:device.function,
  in hex", ``retired_pages.pending`` "pages pending retirement on the next reboot". Row
  remapping (Ampere and later): NVIDIA GPU Memory Error Management, "User Visible
  Statistics" (remapped rows correctable/uncorrectable, "row remapping pending" and
  "row remapping failure" booleans) and NVML ``nvmlDeviceGetRemappedRows`` (isPending: "a
  reset will be required"; failureOccurred: "a row remapping ever failed").
- **XID errors**: nvidia-smi has no query field for them (DCGM exposes
  ``DCGM_FI_DEV_XID_ERRORS``); the driver prints them to the kernel log. NVIDIA's "Xid
  Errors" document, "Viewing Xid Messages": grep for ``NVRM: Xid``; its example
  ``NVRM: Xid (0000:03:00): 14, Channel 00000001``; the newer form with ``PCI:`` and a MIG
  instance, ``NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, ...``, is the GPU Memory
  Error Management document's Table 3 ("Uncorrectable ECC Errors XID Log Examples").
- **Under load** (sampled by the matmul probe, :func:`swarm_infra.metrics.probes.matmul_command`):
  :data:`LOAD_FIELDS` (``--help-query-gpu``: ``pcie.link.gen.current`` / ``.max`` and
  ``pcie.link.width.current`` / ``.max``, which "may be reduced when the GPU is not in use",
  hence sampled under load; ``clocks_event_reasons.*``, called ``clocks_throttle_reasons.*``
  by drivers before R535 (the rename shows in driver 535.113.01's output:
  utkuozdemir/nvidia_gpu_exporter issue #123; the R550 help lists both spellings),
  :data:`LOAD_FIELDS_LEGACY`).
- **DCGM diagnostics** (:func:`dcgm_diag_command`): ``dcgmi diag -r LEVEL -j``; the JSON
  shape is NVIDIA/DCGM v4.5.3 ``dcgmi/Diag.cpp`` ``HelperJsonBuildOutput`` /
  ``HelperJsonAddResult`` with the keys of ``nvvs/include/NvvsJsonStrings.h`` (top key
  ``"DCGM Diagnostic"``; DCGM 3.x, v3.3.9, wrote ``"DCGM GPU Diagnostic"`` and ``gpu_id``).

Values nvidia-smi prints as ``[N/A]`` or ``[Not Supported]`` (a field the board or the
configuration does not have, e.g. remapped rows on a GPU with active MIG instances) are left
out; any other bracketed value (``[Unknown Error]``, ``[GPU requires reset]``...) is an error.
"""

from __future__ import annotations

import json
import re
import shlex
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from swarm_infra.errors import DcgmUnavailable as DcgmUnavailable
from swarm_infra.metrics.measurement import Measurement, MeasurementParseError, make_labels
from swarm_infra.resolve.catalog import gpu_catalog

IDENTITY_FIELDS = ("index", "uuid", "name", "memory.total", "pci.bus_id", "retired_pages.pending")
"""``nvidia-smi --query-gpu`` fields of :func:`inventory_command`, in column order."""

REMAPPED_ROWS_FIELDS = (
    "gpu_uuid",
    "remapped_rows.correctable",
    "remapped_rows.uncorrectable",
    "remapped_rows.pending",
    "remapped_rows.failure",
)
"""``nvidia-smi --query-remapped-rows`` fields, in column order."""

SLOWDOWN_REASONS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown")
"""Clock event reasons that mean the GPU is slowed by heat or by its power supply, not by its
configured limits (``--help-query-gpu``: HW Slowdown "reducing the core clocks by a factor of
2 or more", HW Thermal, HW Power Brake, SW Thermal "temperature is higher than Max Operating
Temp"). ``sw_power_cap`` (clocks held at the power limit) is reported but not counted: a dense
matmul at the configured power limit is the GPU working as set."""

REPORTED_REASONS = (*SLOWDOWN_REASONS, "sw_power_cap")

LOAD_FIELDS = (
    "pcie.link.gen.current",
    "pcie.link.gen.max",
    "pcie.link.width.current",
    "pcie.link.width.max",
    *(f"clocks_event_reasons.{r}" for r in REPORTED_REASONS),
)
"""``nvidia-smi --query-gpu`` fields the matmul probe samples on each GPU while it is loaded."""

LOAD_FIELDS_LEGACY = tuple(
    f.replace("clocks_event_reasons.", "clocks_throttle_reasons.") for f in LOAD_FIELDS
)
"""The same fields under the names of drivers before ``clocks_event_reasons`` (tried second)."""

UUID = re.compile(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
"""An NVML GPU UUID as nvidia-smi prints it (the Xid document's example:
``GPU-b850f46d-d5ea-c752-ddf3-c4453e44d3f7``)."""

MEMORY_TOLERANCE = 0.01
"""How far below the catalog's ``memory_mib`` a GPU's ``memory.total`` may be and still be
the declared model: drivers reserve slightly different amounts (``--help-query-gpu``: "The
driver may also reserve a small amount of memory"); a smaller board is far below 99%."""

_NOT_AVAILABLE = frozenset({"[N/A]", "N/A", "[Not Supported]"})
_MARK = "@@swarm-gpu "
_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<domain>[0-9a-fA-F]{4,8}):(?P<bus>[0-9a-fA-F]{2}):(?P<device>[0-9a-fA-F]{2})"
    r"[^)]*\): (?P<xid>\d+)"
)


def _csv_list(fields: Iterable[str]) -> str:
    return ",".join(fields)


def inventory_command() -> str:
    """A POSIX sh script printing three sections, each ``@@swarm-gpu NAME`` then its output
    then ``@@swarm-gpu-rc NAME STATUS``: ``identity`` (``nvidia-smi --query-gpu`` with
    :data:`IDENTITY_FIELDS`), ``remapped-rows`` (``--query-remapped-rows``) and ``xid`` (the
    ``NVRM: Xid`` lines of this boot's kernel log: ``journalctl -k -b``, else ``dmesg``).
    Read it back with :func:`parse_inventory`. Needs read access to the kernel log (root, or
    the ``adm``/``systemd-journal`` group) for the XID section; it keeps the last 100,000
    XID lines."""
    fmt = "--format=csv,noheader,nounits"
    # stderr is shown only when a command fails: a warning nvidia-smi prints beside a good
    # answer must not become a CSV line.
    return (
        "d=$(mktemp -d) || exit 1\n"
        "trap 'rm -rf \"$d\"' EXIT\n"
        f"echo '{_MARK}identity'\n"
        f'nvidia-smi --query-gpu={_csv_list(IDENTITY_FIELDS)} {fmt} 2>"$d/err"; rc=$?\n'
        '[ $rc -eq 0 ] || cat "$d/err"\n'
        f'echo "{_MARK.strip()}-rc identity $rc"\n'
        f"echo '{_MARK}remapped-rows'\n"
        f'nvidia-smi --query-remapped-rows={_csv_list(REMAPPED_ROWS_FIELDS)} {fmt} 2>"$d/err"; rc=$?\n'
        '[ $rc -eq 0 ] || cat "$d/err"\n'
        f'echo "{_MARK.strip()}-rc remapped-rows $rc"\n'
        f"echo '{_MARK}xid'\n"
        # An empty log is unreadable, not clean: journalctl without the right to read the
        # journal prints nothing and exits 0; this boot's kernel log is never empty.
        'if { journalctl -k -b -q --no-pager >"$d/k" 2>/dev/null && [ -s "$d/k" ]; } ||\n'
        '   { dmesg >"$d/k" 2>/dev/null && [ -s "$d/k" ]; }; then\n'
        "  grep -F 'NVRM: Xid' \"$d/k\" | tail -n 100000; rc=0\n"
        "else\n"
        "  echo 'neither journalctl -k nor dmesg could read the kernel log'; rc=1\n"
        "fi\n"
        f'echo "{_MARK.strip()}-rc xid $rc"\n'
    )


def split_sections(text: str) -> dict[str, tuple[int | None, str]]:
    """The sections of :func:`inventory_command`'s output: name -> (exit status or None when
    the section did not finish, its output)."""
    out: dict[str, tuple[int | None, str]] = {}
    name: str | None = None
    body: list[str] = []
    for line in text.splitlines():
        if line.startswith(f"{_MARK.strip()}-rc "):
            parts = line.split()
            if name is not None and len(parts) == 3 and parts[1] == name:
                out[name] = (int(parts[2]) if parts[2].isdigit() else None, "\n".join(body))
                name = None
            continue
        if line.startswith(_MARK):
            if name is not None:
                out[name] = (None, "\n".join(body))
            name, body = line[len(_MARK) :].strip(), []
            continue
        if name is not None:
            body.append(line)
    if name is not None:
        out[name] = (None, "\n".join(body))
    return out


def _cells(line: str, fields: tuple[str, ...], tool: str) -> dict[str, str | None]:
    """A CSV line as field -> value (None for ``[N/A]`` / ``[Not Supported]``)."""
    cells = [c.strip() for c in line.split(",")]
    if len(cells) != len(fields):
        raise MeasurementParseError(f"{tool}: expected {len(fields)} fields ({', '.join(fields)}): {line!r}")
    out: dict[str, str | None] = {}
    for field, cell in zip(fields, cells, strict=True):
        if cell in _NOT_AVAILABLE:
            out[field] = None
        elif cell.startswith("["):
            raise MeasurementParseError(f"{tool}: {field} is {cell}")
        else:
            out[field] = cell
    return out


def _number(field: str, cell: str, tool: str = "nvidia-smi") -> float:
    try:
        return float(cell)
    except ValueError:
        raise MeasurementParseError(f"{tool}: {field} is not a number: {cell!r}") from None


def _flag(field: str, cell: str, tool: str = "nvidia-smi") -> float:
    """1.0 / 0.0 for nvidia-smi's Yes/No (and NVML's 1/0, which some drivers print)."""
    value = {"yes": 1.0, "no": 0.0, "1": 1.0, "0": 0.0}.get(cell.lower())
    if value is None:
        raise MeasurementParseError(f"{tool}: {field} is neither Yes nor No: {cell!r}")
    return value


def _event(field: str, cell: str) -> float:
    """1.0 / 0.0 for a clock event reason's ``Active`` / ``Not Active``."""
    value = {"active": 1.0, "not active": 0.0}.get(cell.lower())
    if value is None:
        raise MeasurementParseError(f"nvidia-smi: {field} is neither Active nor Not Active: {cell!r}")
    return value


def pci_key(bus_id: str) -> tuple[int, int, int]:
    """(domain, bus, device) of a PCI address in nvidia-smi's ``00000000:18:00.0`` or the
    kernel log's ``0000:18:00`` form, so the two compare."""
    parts = bus_id.split(".")[0].split(":")
    if len(parts) != 3:
        raise MeasurementParseError(f"not a PCI address: {bus_id!r}")
    try:
        return int(parts[0], 16), int(parts[1], 16), int(parts[2], 16)
    except ValueError:
        raise MeasurementParseError(f"not a PCI address: {bus_id!r}") from None


def parse_identity(text: str, **labels: str | int | None) -> list[Measurement]:
    """Per GPU, ``memory.total`` (MiB) labelled with its identity (``gpu`` index, ``uuid``,
    ``name``, ``pci_bus_id``), and ``retired_pages.pending`` (bool 1/0) where the board
    reports it. Raises MeasurementParseError on a malformed line, or when no GPU is listed."""
    out: list[Measurement] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        c = _cells(line, IDENTITY_FIELDS, "nvidia-smi")
        if c["index"] is None or c["uuid"] is None or c["name"] is None or c["memory.total"] is None:
            raise MeasurementParseError(
                f"nvidia-smi: a GPU without index, uuid, name or memory.total: {line!r}"
            )
        lab = make_labels(
            gpu=c["index"], uuid=c["uuid"], name=c["name"], pci_bus_id=c["pci.bus_id"], **labels
        )
        out.append(
            Measurement("nvidia-smi", "memory.total", _number("memory.total", c["memory.total"]), "MiB", lab)
        )
        if c["retired_pages.pending"] is not None:
            value = _flag("retired_pages.pending", c["retired_pages.pending"])
            out.append(Measurement("nvidia-smi", "retired_pages.pending", value, "bool", lab))
    if not out:
        raise MeasurementParseError("nvidia-smi: no GPU reported")
    return out


def parse_remapped_rows(
    text: str, gpus: Mapping[str, str] | None = None, **labels: str | int | None
) -> list[Measurement]:
    """Per GPU, ``remapped_rows.correctable`` / ``.uncorrectable`` (count) and ``.pending`` /
    ``.failure`` (bool 1/0), from ``--query-remapped-rows`` output (one line per GPU,
    :data:`REMAPPED_ROWS_FIELDS`). ``gpus`` maps a UUID to its index (label ``gpu``). A GPU
    without row remapping (before Ampere) prints ``[N/A]`` and gives nothing."""
    out: list[Measurement] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        c = _cells(line, REMAPPED_ROWS_FIELDS, "nvidia-smi --query-remapped-rows")
        uuid = c["gpu_uuid"]
        lab = make_labels(gpu=(gpus or {}).get(uuid or ""), uuid=uuid, **labels)
        for field in REMAPPED_ROWS_FIELDS[1:]:
            cell = c[field]
            if cell is None:
                continue
            if field.endswith(("pending", "failure")):
                out.append(Measurement("nvidia-smi", field, _flag(field, cell), "bool", lab))
            else:
                out.append(Measurement("nvidia-smi", field, _number(field, cell), "count", lab))
    return out


def parse_xid(
    text: str, gpus: Mapping[tuple[int, int, int], tuple[str, str]], **labels: str | int | None
) -> list[Measurement]:
    """``xid.errors`` (count of ``NVRM: Xid`` lines in the kernel log since boot) per GPU:
    ``gpus`` maps each GPU's PCI (domain, bus, device) to its (index, uuid); every GPU gets a
    record, 0 when it has none. A line for a PCI address nvidia-smi no longer lists (Xid 79,
    "GPU has fallen off the bus") gets its own record labelled with that address only. Label
    ``xids``: the distinct Xid codes seen, comma-separated, ascending."""
    seen: dict[tuple[int, int, int], list[int]] = {key: [] for key in gpus}
    for line in text.splitlines():
        m = _XID.search(line)
        if not m:
            continue
        key = (int(m["domain"], 16), int(m["bus"], 16), int(m["device"], 16))
        seen.setdefault(key, []).append(int(m["xid"]))
    out = []
    for key, codes in sorted(seen.items()):
        index, uuid = gpus.get(key, (None, None))
        address = f"{key[0]:08X}:{key[1]:02X}:{key[2]:02X}.0"
        xids = ",".join(str(x) for x in sorted(set(codes))) or None
        lab = make_labels(gpu=index, uuid=uuid, pci_bus_id=address, xids=xids, **labels)
        out.append(Measurement("kernel-log", "xid.errors", float(len(codes)), "count", lab))
    return out


def parse_inventory(text: str, **labels: str | int | None) -> tuple[list[Measurement], dict[str, str]]:
    """The measurements of :func:`inventory_command`'s output, and per section that could not
    be read, why ({"identity" | "remapped-rows" | "xid": reason}). Without the identity
    section nothing else can be placed on a GPU, so its failure fails all three."""
    sections = split_sections(text)
    problems: dict[str, str] = {}

    def body(name: str) -> str | None:
        rc, out = sections.get(name, (None, ""))
        if rc != 0:
            last = out.strip().splitlines()[-1:] or ["no output"]
            problems[name] = f"exit status {rc}: {last[0][:200]}" if rc is not None else "did not finish"
            return None
        return out

    identity_text = body("identity")
    if identity_text is None:
        reason = f"nvidia-smi: {problems['identity']}"
        return [], {"identity": reason, "remapped-rows": reason, "xid": reason}
    try:
        identity = parse_identity(identity_text, **labels)
    except MeasurementParseError as exc:
        return [], {"identity": str(exc), "remapped-rows": str(exc), "xid": str(exc)}
    out = list(identity)
    by_uuid = {str(m.label("uuid")): str(m.label("gpu")) for m in identity if m.field == "memory.total"}
    by_pci = {
        pci_key(str(m.label("pci_bus_id"))): (str(m.label("gpu")), str(m.label("uuid")))
        for m in identity
        if m.field == "memory.total" and m.label("pci_bus_id")
    }
    remapped = body("remapped-rows")
    if remapped is not None:
        try:
            out += parse_remapped_rows(remapped, by_uuid, **labels)
        except MeasurementParseError as exc:
            problems["remapped-rows"] = str(exc)
    xid = body("xid")
    if xid is not None:
        out += parse_xid(xid, by_pci, **labels)
    return out, problems


def parse_load_samples(text: str, **labels: str | int | None) -> list[Measurement]:
    """What the matmul probe's ``MATMUL-SAMPLE {json}`` lines (``{"gpu": i, "uuid": "GPU-...",
    "fields": "a,b", "csv": "..."}``, one nvidia-smi sample of :data:`LOAD_FIELDS` taken while
    GPU ``i`` ran the matmul; ``uuid`` where PyTorch reports it) say, per GPU (labels ``gpu``
    and ``uuid``): ``pcie.link.gen.current`` / ``pcie.link.width.current`` (the lowest
    sampled), ``pcie.link.gen.max`` / ``pcie.link.width.max`` (the highest), the derived
    ``pcie.link.gen.downgrade`` (generations) and ``pcie.link.width.downgrade`` (lanes): max -
    lowest current; per reason of :data:`REPORTED_REASONS`, ``clocks_event_reasons.<reason>``
    (ratio: the share of samples in which it was Active), and ``clocks_event_reasons.slowdown``
    (ratio: samples with any of :data:`SLOWDOWN_REASONS` Active). A sample whose nvidia-smi
    call failed (``{"gpu": i, "error": "..."}``) raises MeasurementParseError."""
    per_gpu: dict[int, list[dict[str, str | None]]] = {}
    uuids: dict[int, str] = {}
    for line in text.splitlines():
        if not line.startswith("MATMUL-SAMPLE "):
            continue
        try:
            sample = json.loads(line[len("MATMUL-SAMPLE ") :])
            gpu = int(sample["gpu"])
            if "error" in sample:
                raise MeasurementParseError(f"nvidia-smi during the matmul: {str(sample['error'])[:200]}")
            if sample.get("uuid"):
                uuids[gpu] = str(sample["uuid"])
            fields = tuple(str(sample["fields"]).split(","))
            csv = str(sample["csv"]).strip()
        except (ValueError, KeyError, TypeError) as exc:
            raise MeasurementParseError(f"matmul: unreadable sample ({exc}): {line[:200]!r}") from None
        if fields not in (LOAD_FIELDS, LOAD_FIELDS_LEGACY):
            raise MeasurementParseError(f"matmul: a sample of unexpected fields {','.join(fields)[:200]}")
        cells = _cells(csv, fields, "nvidia-smi")
        per_gpu.setdefault(gpu, []).append(
            {f.replace("clocks_throttle_reasons.", "clocks_event_reasons."): v for f, v in cells.items()}
        )
    out: list[Measurement] = []
    for gpu, samples in sorted(per_gpu.items()):
        lab = make_labels(gpu=gpu, uuid=uuids.get(gpu), **labels)

        def values(field: str, read: Any, samples: list[dict[str, str | None]] = samples) -> list[float]:
            return [read(field, s[field]) for s in samples if s[field] is not None]

        for what, unit in (("gen", "generation"), ("width", "lanes")):
            current = values(f"pcie.link.{what}.current", _number)
            top = values(f"pcie.link.{what}.max", _number)
            if current:
                out.append(Measurement("nvidia-smi", f"pcie.link.{what}.current", min(current), unit, lab))
            if top:
                out.append(Measurement("nvidia-smi", f"pcie.link.{what}.max", max(top), unit, lab))
            if current and top:
                down = max(0.0, max(top) - min(current))
                out.append(Measurement("nvidia-smi", f"pcie.link.{what}.downgrade", down, unit, lab))
        slowed = [0.0] * len(samples)
        known = [False] * len(samples)
        for reason in REPORTED_REASONS:
            field = f"clocks_event_reasons.{reason}"
            column = [(i, s[field]) for i, s in enumerate(samples)]
            flags = [(i, _event(field, cell)) for i, cell in column if cell is not None]
            if not flags:
                continue
            out.append(Measurement("nvidia-smi", field, sum(f for _, f in flags) / len(flags), "ratio", lab))
            if reason in SLOWDOWN_REASONS:
                for i, f in flags:
                    known[i] = True
                    slowed[i] = max(slowed[i], f)
        counted = [s for s, k in zip(slowed, known, strict=True) if k]
        if counted:
            ratio = sum(counted) / len(counted)
            out.append(Measurement("nvidia-smi", "clocks_event_reasons.slowdown", ratio, "ratio", lab))
    return out


DCGM_DIAG_TIMEOUT_S = {1: 300, 2: 1200, 3: 3600, 4: 3 * 3600}
"""How long ``dcgmi diag -r LEVEL`` may take before the run gives up on it. NVIDIA's
``dcgmi diag`` reference (DCGM documentation, "dcgmi diag", ``--run``): level 1 "quick
deployment checks, normally lasting seconds", 2 "approximately two minutes", 3
"approximately 15 minutes", 4 "extended, longer-running"; the limits leave room for a slow
node. Non-datacenter GPUs (GeForce) support level 1 only (same page)."""


def dcgm_diag_command(level: int) -> str:
    """``dcgmi diag -r LEVEL -j`` where ``dcgmi`` is installed; without it the script prints
    ``DCGMI-UNAVAILABLE dcgmi is not installed`` and exits 0. ``dcgmi`` exits non-zero when a
    test fails, so the script always ends with ``@@swarm-gpu-rc dcgmi STATUS``."""
    if level not in DCGM_DIAG_TIMEOUT_S:
        raise ValueError(f"dcgmi diag level must be 1..4, not {level!r}")
    return (
        "command -v dcgmi >/dev/null 2>&1 || { echo 'DCGMI-UNAVAILABLE dcgmi is not installed'; exit 0; }\n"
        f"dcgmi diag -r {shlex.quote(str(int(level)))} -j 2>&1\n"
        f'echo "{_MARK.strip()}-rc dcgmi $?"\n'
    )


def parse_dcgm_diag(text: str, level: int, **labels: str | int | None) -> list[Measurement]:
    """Measurements of ``dcgmi diag -r LEVEL -j`` output (DCGM 4.x: ``{"DCGM Diagnostic":
    {"test_categories": [{"category", "tests": [{"name", "results": [{"entity_group",
    "entity_id", "status", "warnings": [{"warning", "error_id"}]}]}]}]}}``; DCGM 3.x: top key
    ``"DCGM GPU Diagnostic"``, results with ``gpu_id``). Status strings: ``Pass``, ``Skip``,
    ``Fail`` (dcgmi's JSON prints a warning as ``Fail``: ``HelperDisplayDiagResult`` without
    ``DDR_DISPLAY_WARN``); tests not run are left out by dcgmi.

    Gives, labelled ``level``: per test (label ``test``) ``diag.failures`` (count of results
    with status Fail; label ``warning`` with the first failure's message); and
    ``diag.passed_level`` (level): LEVEL when no test failed, else 0. Raises
    :class:`DcgmUnavailable` when dcgmi is absent, MeasurementParseError when the output is
    not that JSON or reports a ``runtime_error`` (the diagnostic did not run)."""
    if text.startswith("DCGMI-UNAVAILABLE"):
        raise DcgmUnavailable(f"dcgmi: {text.partition(' ')[2].strip() or 'not installed'}")
    start, end = text.find("{"), text.rfind("}")
    try:
        doc = json.loads(text[start : end + 1]) if start >= 0 else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        lines = [ln for ln in text.strip().splitlines() if not ln.startswith(_MARK.strip())]
        raise MeasurementParseError(f"dcgmi diag: no JSON report: {(lines[-1:] or ['no output'])[0][:200]!r}")
    body = doc.get("DCGM Diagnostic", doc.get("DCGM GPU Diagnostic"))
    if not isinstance(body, dict):
        raise MeasurementParseError("dcgmi diag: no 'DCGM Diagnostic' object in the report")
    if body.get("runtime_error"):
        raise MeasurementParseError(f"dcgmi diag: {str(body['runtime_error'])[:200]}")
    out: list[Measurement] = []
    failed = 0
    try:
        for category in body["test_categories"]:
            for test in category.get("tests", []):
                name = str(test["name"])
                bad = [r for r in test.get("results", []) if str(r["status"]) == "Fail"]
                failed += len(bad)
                warnings = [w.get("warning", "") for r in bad for w in r.get("warnings", []) or []]
                lab = make_labels(
                    test=name, level=level, warning=(warnings[0][:200] if warnings else None), **labels
                )
                out.append(Measurement("dcgmi", "diag.failures", float(len(bad)), "count", lab))
    except (KeyError, TypeError, AttributeError) as exc:
        raise MeasurementParseError(f"dcgmi diag: unexpected report shape ({exc!r})") from None
    if not out:
        raise MeasurementParseError("dcgmi diag: the report lists no test")
    passed = float(level) if failed == 0 else 0.0
    out.append(Measurement("dcgmi", "diag.passed_level", passed, "level", make_labels(level=level, **labels)))
    return out


# ------------------------------------------------------------------ acceptance

THRESHOLDS = (
    "max_gpu_xid_errors",
    "max_gpus_memory_repair_pending",
    "max_gpus_row_remap_failure",
    "max_gpu_slowdown_ratio",
    "max_gpu_pcie_link_gen_downgrade",
    "max_gpu_pcie_link_width_downgrade",
    "min_dcgm_diag_level",
)
"""The NodeAcceptance thresholds this module measures (schemas/nodeacceptance.schema.json)."""


def threshold_value(name: str, node: str, ms: list[Measurement]) -> float | None:
    """The node's value for one of :data:`THRESHOLDS` from a run's measurements; None when
    the run has none (not measured).

    - ``max_gpu_xid_errors``: the sum of the node's ``xid.errors`` (all its GPUs).
    - ``max_gpus_memory_repair_pending``: how many GPUs have ``remapped_rows.pending`` or
      ``retired_pages.pending`` set (a reset or reboot is needed to repair their memory).
    - ``max_gpus_row_remap_failure``: how many GPUs have ``remapped_rows.failure`` set.
    - ``max_gpu_slowdown_ratio``: the worst GPU's ``clocks_event_reasons.slowdown``.
    - ``max_gpu_pcie_link_{gen,width}_downgrade``: the worst GPU's ``pcie.link.*.downgrade``.
    - ``min_dcgm_diag_level``: the highest ``diag.passed_level``.
    """
    mine = [m for m in ms if m.label("node") == node]

    def of(field: str) -> list[Measurement]:
        return [m for m in mine if m.field == field]

    if name == "max_gpu_xid_errors":
        xids = of("xid.errors")
        return sum(m.value for m in xids) if xids else None
    if name == "max_gpus_memory_repair_pending":
        flags = of("remapped_rows.pending") + of("retired_pages.pending")
        return float(len({m.label("uuid") for m in flags if m.value})) if flags else None
    if name == "max_gpus_row_remap_failure":
        flags = of("remapped_rows.failure")
        return float(len({m.label("uuid") for m in flags if m.value})) if flags else None
    field = {
        "max_gpu_slowdown_ratio": "clocks_event_reasons.slowdown",
        "max_gpu_pcie_link_gen_downgrade": "pcie.link.gen.downgrade",
        "max_gpu_pcie_link_width_downgrade": "pcie.link.width.downgrade",
        "min_dcgm_diag_level": "diag.passed_level",
    }.get(name)
    if field is None:
        raise ValueError(f"unknown GPU threshold {name!r}")
    values = [m.value for m in of(field)]
    return max(values) if values else None


def failed_tests(node: str, ms: list[Measurement]) -> list[str]:
    """The DCGM tests that failed on the node, as ``name (level N): first warning``."""
    return [
        f"{m.label('test')} (level {m.label('level')})"
        + (f": {m.label('warning')}" if m.label("warning") else "")
        for m in ms
        if m.label("node") == node and m.field == "diag.failures" and m.value > 0
    ]


def identity_problems(
    node: str, declared: Iterable[tuple[str, int]], ms: list[Measurement]
) -> list[str] | None:
    """Why the GPUs nvidia-smi reported on ``node`` are not the ones it declares, one line per
    problem ([] when they are); None when the run has no identity for the node (not measured).

    ``declared``: (GPU catalog model, count) pairs. Checked: the count of GPUs; each GPU's
    ``name`` against the catalog's ``product_name`` of a declared model (the multiset must
    match); each GPU's ``memory.total`` against that model's ``memory_mib`` (at least
    1 - :data:`MEMORY_TOLERANCE` of it); each UUID's form (:data:`UUID`), uniqueness on the
    node, and that no other node of the run reports the same GPU (``ms`` holds every node's
    measurements: a GPU is in one node only).
    """
    reported = sorted(
        (m for m in ms if m.field == "memory.total" and m.tool == "nvidia-smi" and m.label("node") == node),
        key=lambda m: int(str(m.label("gpu"))) if str(m.label("gpu")).isdigit() else 0,
    )
    if not reported:
        return None
    catalog = gpu_catalog()
    declared = [(model, count) for model, count in declared if count > 0]
    problems: list[str] = []
    unknown = [model for model, _ in declared if model not in catalog]
    if unknown:
        return [f"declared model {', '.join(unknown)} is not in the GPU catalog"]
    want = Counter({catalog[model]["product_name"]: 0 for model, _ in declared})
    for model, count in declared:
        want[catalog[model]["product_name"]] += count
    got = Counter(str(m.label("name")) for m in reported)
    if got != want:
        problems.append(f"declared {_models(declared)} ({_names(want)}); nvidia-smi reports {_names(got)}")
    memory = {catalog[model]["product_name"]: (model, catalog[model]["memory_mib"]) for model, _ in declared}
    for m in reported:
        name = str(m.label("name"))
        if name in memory and m.value < memory[name][1] * (1 - MEMORY_TOLERANCE):
            model, mib = memory[name]
            problems.append(
                f"GPU {m.label('gpu')} ({m.label('uuid')}) has {m.value:g} MiB; {model} has {mib} MiB"
            )
    uuids = Counter(str(m.label("uuid")) for m in reported)
    for uuid, n in sorted(uuids.items()):
        if not UUID.fullmatch(uuid):
            problems.append(f"{uuid!r} is not a GPU UUID")
        elif n > 1:
            problems.append(f"{uuid} is reported {n} times")
    others = sorted(
        {
            (str(m.label("uuid")), str(m.label("node")))
            for m in ms
            if m.field == "memory.total"
            and m.tool == "nvidia-smi"
            and m.label("node") != node
            and m.label("uuid") in uuids
        }
    )
    problems += [f"{uuid} is also reported by {other}" for uuid, other in others]
    return problems


def _models(declared: list[tuple[str, int]]) -> str:
    return " + ".join(f"{count} x {model}" for model, count in declared) or "no GPU"


def _names(counts: Counter[str]) -> str:
    return " + ".join(f"{n} x {name}" for name, n in sorted(counts.items()) if n) or "no GPU"
