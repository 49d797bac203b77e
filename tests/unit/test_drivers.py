"""The drivers layer's decisions (swarm_infra.resolve.drivers) against real oracles.

* Debian's package set against Debian 12's real archive metadata:
  ``tests/data/debian/bookworm-nvidia.Packages`` holds the stanzas (Package, Source, Version,
  Section, Depends, Provides) of the dependency closure of the declared packages, cut
  unchanged from http://deb.debian.org/debian/dists/bookworm/{non-free,contrib,
  non-free-firmware}/binary-amd64/Packages.xz (read 2026-11-26; packages of ``main`` left
  out).
* Source adoption against Debian 12's own apt (2.6, the binary on this machine): the node's
  source files after our plan are read by ``apt-get indextargets``, which refuses two
  entries for one repository with different Signed-By ("Conflicting values set for option
  Signed-By", apt-pkg/deb/debmetaindex.cc) exactly as on a node.
* Secure Boot, kernels, the GPU layer's pending-reboot marker and pynvml's absence.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from swarm_infra.nodeside import gpu as G
from swarm_infra.resolve import drivers as D
from swarm_infra.resolve.drivers import driver_plan, driver_state
from swarm_infra.resolve.layout import node_layout

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ROOT / "tests/data/debian/bookworm-nvidia.Packages"
CUDA_URI = "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/"
# As NVIDIA's instructions (cuda-keyring) leave a node.
NVIDIA_OWN = f"deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] {CUDA_URI} /\n"
DEBIAN_822 = (
    "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\n"
    "Components: main non-free-firmware\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
)


def _archive() -> dict[str, dict[str, str]]:
    out = {}
    for stanza in PACKAGES.read_text().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.strip().splitlines())
        out[fields["Package"]] = fields
    return out


def probe(
    sources: dict[str, str],
    kernel: str = "6.1.0-28-amd64",
    sb: str = "6 0 0 0 0",
    key: str = "",
    module: str = "loaded",
) -> str:
    text = f"@@ kernel\n{kernel}\n@@ module\n{module}\n@@ secure-boot\n{sb}\n@@ dkms-key\n{key}\n"
    text += "@@ sources\n"
    return text + "".join(f"@@@ {path}\n{body}\n" for path, body in sources.items())


# ------------------------------------------------------------------ package sets


def test_debian_set_is_the_archives_driver_at_one_version() -> None:
    archive = _archive()
    version = archive["nvidia-kernel-dkms"]["Version"].removesuffix("-1")
    assert version.split(".")[0] == D.DEBIAN_BRANCH  # what the validator allows
    driver = driver_state({"source": "debian", "branch": version.split(".")[0], "version": version})
    # Every pinned package exists at the pinned version (else apt-get install name=glob fails).
    for name in driver["packages"]:
        assert name in archive, name
        assert archive[name]["Version"].startswith(version + "-"), name
        assert archive[name].get("Source") == "nvidia-graphics-drivers", name
    # persistenced has its own version line in bookworm: pinning it would make apt fail.
    assert archive["nvidia-persistenced"]["Version"].split("-")[0] != version
    assert "nvidia-persistenced" in driver["extra_packages"]
    assert "nvidia-persistenced" not in driver["packages"]
    # Every component the closure comes from is one the node's Debian source is given.
    sections = {archive[n]["Section"].split("/")[0] for n in archive if "/" in archive[n]["Section"]}
    assert sections <= set(driver["debian_components"]), sections
    # pynvml for the node-side GPU code, satisfied by the archive's libnvidia-ml1.
    assert "python3-pynvml" in driver["extra_packages"]
    assert archive["python3-pynvml"]["Depends"].startswith("libnvidia-ml1 |")
    assert "libnvidia-ml1" in driver["packages"]
    assert not any("nvidia.com" in s["repo"] for s in driver["apt_sources"])


def test_nvidia_set_is_the_guides_compute_only_set_with_open_modules() -> None:
    driver = driver_state({"branch": "570", "version": "570.86.15"})
    assert driver["source"] == "nvidia-cuda"
    assert {"nvidia-driver-cuda", "nvidia-kernel-open-dkms", "nvidia-persistenced"} <= set(driver["packages"])
    # nvidia-driver-cuda carries nvidia-smi and conflicts with a separate one.
    assert "nvidia-smi" not in driver["packages"] + driver["extra_packages"]
    assert "python3-pynvml" in driver["extra_packages"]
    assert driver["debian_components"] == ["contrib"]  # python3-pynvml's component
    assert "nvidia-fabricmanager" not in driver["packages"]


@pytest.mark.parametrize(
    ("gpus", "fabric"),
    [
        ([{"model": "H100-SXM5-80GB", "count": 8}], True),
        ([{"model": "H200-SXM-141GB", "count": 8}], True),
        ([{"model": "A100-SXM4-80GB", "count": 8}], True),
        ([{"model": "H100-PCIE-80GB", "count": 8}], False),
        ([{"model": "L40S", "count": 8}], False),
        ([{"model": "H100-SXM5-80GB", "count": 4}], False),  # HGX 4-GPU: NVLink, no NVSwitch
    ],
)
def test_fabric_manager_at_the_drivers_version_on_nvswitch_boards(
    gpus: list[dict[str, Any]], fabric: bool
) -> None:
    driver = driver_state({"branch": "570", "version": "570.86.15"}, gpus)
    assert driver["fabric_manager"] is fabric
    # Pinned packages are installed at apt_version: Fabric Manager at exactly the driver's.
    assert ("nvidia-fabricmanager" in driver["packages"]) is fabric


# ------------------------------------------------------------------- apt sources


def _apt_reads(tmp: Path, files: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Debian's apt reading ``files`` as its sources (``update --print-uris``: the index
    files it would fetch, nothing fetched)."""
    parts = tmp / "sources.list.d"
    parts.mkdir(parents=True, exist_ok=True)
    for path, text in files.items():
        (parts / Path(path).name).write_text(text)
    for d in ("state/lists/partial", "cache/archives/partial"):
        (tmp / d).mkdir(parents=True, exist_ok=True)
    (tmp / "sources.list").write_text("")
    return subprocess.run(
        ["apt-get", f"-oDir::Etc::SourceList={tmp}/sources.list", f"-oDir::Etc::SourceParts={parts}",
         f"-oDir::State={tmp}/state", f"-oDir::Cache={tmp}/cache", "-oDebug::NoLocking=1",
         "update", "--print-uris"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip


def _after(files: dict[str, str], plan: D.DriverPlan) -> dict[str, str]:
    """The node's source files after the role applied ``plan`` (apt_repository's files)."""
    out = dict(files)
    for src in plan["remove"]:
        path = f"/etc/apt/sources.list.d/{src['name']}.list"
        out[path] = out.get(path, "").replace(src["repo"] + "\n", "")
    for src in plan["add"]:
        path = f"/etc/apt/sources.list.d/{src['name']}.list"
        out[path] = out.get(path, "") + src["repo"] + "\n"
    return out


needs_apt = pytest.mark.skipif(shutil.which("apt-get") is None, reason="Debian's apt-get is not here")


@needs_apt
def test_a_node_set_up_by_nvidias_instructions_is_adopted_and_apt_reads_it(tmp_path: Path) -> None:
    files = {"/etc/apt/sources.list.d/debian.sources": DEBIAN_822,
             "/etc/apt/sources.list.d/cuda-debian12-x86_64.list": NVIDIA_OWN}  # fmt: skip
    driver = driver_state({"branch": "570", "version": "570.86.15"})
    # What adding ours regardless did: apt itself refuses the node's sources.
    naive = _apt_reads(
        tmp_path / "naive", {**files, "nvidia-cuda.list": driver["apt_sources"][0]["repo"] + "\n"}
    )
    assert naive.returncode != 0 and "Conflicting values set for option Signed-By" in naive.stderr
    plan = driver_plan(driver, probe(files))
    assert plan["problems"] == []
    assert "nvidia-cuda" not in [s["name"] for s in plan["add"]]
    assert any("adopted /etc/apt/sources.list.d/cuda-debian12-x86_64.list" in n for n in plan["notes"])
    after = _after(files, plan)
    proc = _apt_reads(tmp_path / "plan", after)
    assert proc.returncode == 0, proc.stderr
    # contrib (python3-pynvml) is read from the node's own mirror; apt accepting the added
    # entry beside debian.sources means its Signed-By is the same.
    assert "/debian/dists/bookworm/contrib/binary-amd64/Packages" in proc.stdout
    assert "developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/InRelease" in proc.stdout


@needs_apt
def test_our_entry_beside_a_foreign_one_is_dropped(tmp_path: Path) -> None:
    driver = driver_state({"branch": "570"})
    ours = driver["apt_sources"][0]
    files = {"/etc/apt/sources.list": "deb http://deb.debian.org/debian bookworm main contrib\n",
             "/etc/apt/sources.list.d/cuda-debian12-x86_64.list": NVIDIA_OWN,
             f"/etc/apt/sources.list.d/{ours['name']}.list": ours["repo"] + "\n"}  # fmt: skip
    plan = driver_plan(driver, probe(files))
    assert [s["name"] for s in plan["remove"]] == [ours["name"]]
    assert _apt_reads(tmp_path, _after(files, plan)).returncode == 0


@needs_apt
@pytest.mark.parametrize("source", ["nvidia-cuda", "debian"])
def test_the_debian_components_are_added_to_a_one_line_source(tmp_path: Path, source: str) -> None:
    """The lab's nodes (debootstrap): one-line entries, main only, no Signed-By."""
    files = {"/etc/apt/sources.list": "deb http://deb.debian.org/debian bookworm main\n"
             "deb http://deb.debian.org/debian bookworm-updates main\n"}  # fmt: skip
    driver = driver_state({"source": source, "branch": "535"})
    plan = driver_plan(driver, probe(files))
    assert plan["problems"] == []
    proc = _apt_reads(tmp_path, _after(files, plan))
    assert proc.returncode == 0, proc.stderr
    for component in driver["debian_components"]:
        assert f"/debian/dists/bookworm/{component}/binary-amd64/Packages" in proc.stdout


@needs_apt
def test_the_container_toolkits_own_source_is_adopted_too(tmp_path: Path) -> None:
    """NVIDIA's container toolkit guide writes the same file name ours has, another Signed-By."""
    own = (
        "deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] "
        "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH) /\n"
    )
    files = {"/etc/apt/sources.list.d/debian.sources": DEBIAN_822,
             "/etc/apt/sources.list.d/cuda-debian12-x86_64.list": NVIDIA_OWN,
             "/etc/apt/sources.list.d/nvidia-container-toolkit.list": own}  # fmt: skip
    plan = driver_plan(driver_state({"branch": "570"}), probe(files))
    assert plan["problems"] == [] and [s["name"] for s in plan["add"]] == ["swarm-debian-nvidia"]
    assert _apt_reads(tmp_path, _after(files, plan)).returncode == 0


def test_no_container_toolkit_on_the_nodes_and_our_old_source_goes() -> None:
    """Issue #23: one owner of the container runtime, the GPU Operator's toolkit
    (D.CONTAINER_RUNTIME_OWNER). Neither source installs the toolkit or adds its repository;
    both remove the toolkit's packages; the repository entry an earlier converge wrote is
    dropped (not refused as another NVIDIA source), a provider's own entry is left, noted."""
    toolkit = {"nvidia-container-toolkit", "nvidia-container-toolkit-base",
               "libnvidia-container-tools", "libnvidia-container1"}  # fmt: skip
    for source, branch in (("nvidia-cuda", "570"), ("debian", "535")):
        driver = driver_state({"source": source, "branch": branch})
        assert not toolkit & {*driver["packages"], *driver["extra_packages"]}
        assert set(driver["absent_packages"]) == toolkit
        assert not any("nvidia.github.io" in s["repo"] for s in driver["apt_sources"])
    keyrings = node_layout()["files"]["apt_keyrings_dir"]["path"]
    ours = (
        f"deb [signed-by={keyrings}/nvidia-container-toolkit.asc] "
        "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH) /\n"
    )
    debian = {"/etc/apt/sources.list": "deb http://deb.debian.org/debian bookworm main contrib\n"}
    driver = driver_state({"branch": "570"})
    plan = driver_plan(
        driver, probe({**debian, "/etc/apt/sources.list.d/nvidia-container-toolkit.list": ours})
    )
    assert plan["problems"] == []
    assert [s["name"] for s in plan["remove"]] == ["nvidia-container-toolkit"]
    assert plan["remove"][0]["repo"] + "\n" == ours
    theirs = ours.replace(
        f"{keyrings}/nvidia-container-toolkit.asc", "/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg"
    )
    plan = driver_plan(
        driver, probe({**debian, "/etc/apt/sources.list.d/nvidia-container-toolkit.list": theirs})
    )
    assert plan["problems"] == [] and plan["remove"] == []
    assert any("container toolkit repository left in place" in n for n in plan["notes"])


def test_the_runtime_owner_check_flags_two_owners_and_none() -> None:
    with_toolkit = {**driver_state({"branch": "570"}), "absent_packages": []}
    with_toolkit["extra_packages"] = [*with_toolkit["extra_packages"], "nvidia-container-toolkit"]
    without = driver_state({"branch": "570"})
    on, off = {"toolkit": {"enabled": True}}, {"toolkit": {"enabled": False}}
    assert D.container_runtime_problems({"a": without, "b": None}, on) == []
    assert D.container_runtime_problems({"a": without}, {}) == []  # the chart's default: on
    assert D.container_runtime_problems({"a": without}, None) == []  # no Operator deployed
    (two,) = D.container_runtime_problems({"a": with_toolkit}, on)
    assert two.startswith("a: ") and "two owners" in two
    assert D.container_runtime_problems({"a": with_toolkit}, off) == []
    (none,) = D.container_runtime_problems({"a": without}, off)
    assert "nothing configures containerd" in none
    both = {**with_toolkit, "absent_packages": ["nvidia-container-toolkit"]}
    assert any("installs and removes" in p for p in D.container_runtime_problems({"a": both}, off))


def test_another_nvidia_source_is_refused() -> None:
    files = {"/etc/apt/sources.list": "deb http://deb.debian.org/debian bookworm main contrib\n",
             "/etc/apt/sources.list.d/cuda.list":
             "deb https://developer.download.nvidia.com/compute/cuda/repos/debian11/x86_64/ /\n"}  # fmt: skip
    plan = driver_plan(driver_state({"branch": "570"}), probe(files))
    assert any("cuda.list has another NVIDIA apt source" in p for p in plan["problems"])
    # Debian's packages declared while NVIDIA's CUDA repository is on the node: refused too.
    nvidia = {"/etc/apt/sources.list.d/cuda-debian12-x86_64.list": NVIDIA_OWN, **files}
    del nvidia["/etc/apt/sources.list.d/cuda.list"]
    plan = driver_plan(driver_state({"source": "debian", "branch": "535"}), probe(nvidia))
    assert any("declared driver source debian" in p for p in plan["problems"])


def test_a_debian_source_with_an_inline_key_is_refused_not_doubled() -> None:
    inline = DEBIAN_822.replace(
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n",
        "Signed-By:\n -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n mQINBGPL0BUBEADmW5NdOOHwPIJ\n",
    )
    plan = driver_plan(
        driver_state({"branch": "570"}), probe({"/etc/apt/sources.list.d/debian.sources": inline})
    )
    assert any("embeds its Signed-By key inline: add contrib" in p for p in plan["problems"])
    assert not [s for s in plan["add"] if s["name"] == "swarm-debian-nvidia"]


def test_a_debian_source_that_would_change_our_line_is_not_copied() -> None:
    odd = DEBIAN_822.replace("debian-archive-keyring.gpg", "k.gpg]trusted=yes")
    plan = driver_plan(
        driver_state({"branch": "570"}), probe({"/etc/apt/sources.list.d/debian.sources": odd})
    )
    assert any("not one plain word" in p for p in plan["problems"])
    assert not [s for s in plan["add"] if s["name"] == "swarm-debian-nvidia"]


def test_no_debian_source_is_refused_and_a_complete_one_is_left_alone() -> None:
    driver = driver_state({"source": "debian", "branch": "535"})
    assert driver_plan(driver, probe({}))["problems"]
    full = {
        "/etc/apt/sources.list": "deb http://deb.debian.org/debian bookworm main contrib non-free "
        "non-free-firmware\n"
    }
    plan = driver_plan(driver, probe(full))
    assert plan["problems"] == [] and plan["add"] == []


# --------------------------------------------------------- Secure Boot, kernels


@pytest.mark.parametrize(
    ("sb", "key", "refused"),
    [
        ("   6   0   0   0   1", "/var/lib/dkms/mok.pub is not enrolled", True),
        ("   6   0   0   0   1", "", True),  # mokutil absent: enrolment unknown
        ("   6   0   0   0   1", "/var/lib/dkms/mok.pub is already enrolled", False),
        ("   6   0   0   0   0", "", False),
        ("", "", False),  # no UEFI
    ],
)
def test_secure_boot_without_an_enrolled_key_is_refused_first(sb: str, key: str, refused: bool) -> None:
    files = {"/etc/apt/sources.list": "deb http://deb.debian.org/debian bookworm main contrib\n"}
    plan = driver_plan(driver_state({"branch": "570"}), probe(files, sb=sb, key=key))
    assert bool(plan["problems"]) is refused
    if refused:
        assert plan["problems"][0].startswith("Secure Boot is on")


def test_the_probe_reads_efivarfs_and_mokutil() -> None:
    assert D.SECURE_BOOT_VAR in D.NODE_PROBE and "mokutil --test-key" in D.NODE_PROBE
    out = subprocess.run(["sh", "-c", D.NODE_PROBE], capture_output=True, text=True, check=True).stdout
    facts = D.probe_sections(out)
    assert facts["kernel"] == subprocess.run(["uname", "-r"], capture_output=True, text=True).stdout.strip()


@pytest.mark.parametrize(
    ("release", "headers"),
    [
        ("6.1.0-28-amd64", ["linux-headers-6.1.0-28-amd64", "linux-headers-amd64"]),
        ("6.1.0-28-cloud-amd64", ["linux-headers-6.1.0-28-cloud-amd64", "linux-headers-cloud-amd64"]),
        ("6.8.0-1021-azure", []),  # Ubuntu's: no Debian headers package
        ("6.1.0-28-amd64; rm -rf /", []),
    ],
)
def test_headers_for_the_running_and_future_kernels(release: str, headers: list[str]) -> None:
    got, why = D.kernel_headers(release)
    assert got == headers
    assert (why is None) is bool(headers)


# ---------------------------------------------------------------- the GPU layer


def test_the_gpu_layer_waits_while_the_driver_reboot_is_pending(tmp_path: Path) -> None:
    marker = tmp_path / "reboot-required"
    marker.write_text("*** System restart required: NVIDIA driver 570.86.15-* (swarm) ***\n")
    spec = {"backend": "nvml", "devices": [], "limits": {}, "reboot_marker": str(marker)}
    result = G.converge_spec(spec)
    assert "pending_reboot" in result and result["changes"] == []
    assert G.run_spec(spec)["pending_reboot"]


def test_a_missing_pynvml_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    with pytest.raises(G.GpuError) as err:
        G.NvmlBackend()
    assert err.value.code == "PYNVML_MISSING"
    assert "python3-pynvml" in str(err.value) and sys.executable in str(err.value)


def test_gpu_nodes_name_their_mig_holders_and_marker() -> None:
    from swarm_infra.resolve import desired_state, load_fleet
    from tests.unit.cluster_support import fleet_dirs

    state = desired_state(load_fleet(fleet_dirs("example")))
    gpus = [n["gpu"] for n in state["nodes"].values() if n["gpu"]]
    assert gpus
    for gpu in gpus:
        assert gpu["mig_holders"] == ["dcgm-exporter.service", "nvidia-dcgm.service"]
        # The drivers layer's marker (the layout's, where Debian's tools look for it too).
        assert gpu["reboot_marker"] == node_layout()["files"]["reboot_required"]["path"]


# ------------------------------------------------------------ both engines alike


@pytest.mark.parametrize(
    ("sources", "secure_boot", "module", "expect"),
    [
        ({"/etc/apt/sources.list.d/cuda-debian12-x86_64.list": NVIDIA_OWN}, "6 0 0 0 0", "loaded", "adopted"),
        ({}, "6 0 0 0 1", "loaded", "Secure Boot is on"),
        ({}, "6 0 0 0 0", "", "enabled only"),
    ],
    ids=["adopts-nvidias-source", "secure-boot-refused", "module-not-loaded"],
)
def test_both_engines_adopt_and_refuse_alike(
    sources: dict[str, str], secure_boot: str, module: str, expect: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The drivers layer of both engines on the example fleet's real-NVML GPU nodes, with
    the node probe given: the same sources, packages, notes and refusal (the parity test's
    recorders: the role read by role_reader, the pyinfra layer with operations recorded)."""
    import json

    from tests.unit import test_engine_parity as P

    files = {"/etc/apt/sources.list.d/debian.sources": DEBIAN_822, **sources}
    monkeypatch.setattr(P, "DRIVER_PROBE", probe(files, sb=secure_boot, module=module))
    inv = P._inventory(ROOT / "inventory/example")
    groups = P._groups(inv)
    seen = 0
    for host, hostvars in sorted(inv["_meta"]["hostvars"].items()):
        node = json.loads(json.dumps(hostvars["swarm"]))
        if not node["gpu"] or not node["gpu"]["driver"] or node["gpu"]["backend"] != "nvml":
            continue
        seen += 1
        ansible = P._ansible("drivers", {**hostvars, "inventory_hostname": host}, groups[host], node)
        pyinfra = P._pyinfra("drivers", node, monkeypatch)
        for key in ansible:
            assert P._norm(ansible[key]) == P._norm(pyinfra[key]), f"{host}: {key} differ"
        if expect == "adopted":
            assert ansible["refused"] is None
            assert not [s for s in ansible["sources"] if s[0] == "nvidia-cuda"]
            assert any(expect in n for n in ansible["notes"])
            assert "python3-pynvml" in ansible["packages"] and "linux-headers-amd64" in ansible["packages"]
            assert ansible["units"]["nvidia-persistenced.service"] == {"enabled": True, "running": True}
        elif expect == "enabled only":
            # A driver installed, its module not loaded yet (the reboot to come): the daemons
            # would fail to start; they are enabled and start with the module.
            assert ansible["refused"] is None
            assert ansible["units"]["nvidia-persistenced.service"] == {"enabled": True}
        else:
            assert ansible["refused"] and ansible["refused"].startswith(expect)
    assert seen
