"""Ray across the WAN (issue #26): the bare-node Ray cluster's health check and GCS
connection settings follow the RTT between the head's site and its members' sites, so a
worker 250 ms from the head joins and stays.

Ray's rules are restated here from ray-project/ray's source, not from ``resolve.ray``:

- src/ray/gcs/gcs_health_check_manager.cc, ``HealthCheckContext::StartHealthCheck``: a check
  passes when a SERVING reply arrives before ``health_check_timeout_ms``; a failure
  decrements a counter a success resets to ``health_check_failure_threshold``; the next
  check starts ``health_check_period_ms`` after one ends; at 0 the node is dead. A node that
  answers nothing is dead after ``threshold * timeout + (threshold - 1) * period``.
- src/ray/common/ray_config_def.h (commit 0006bd6c): ``gcs_grpc_min_reconnect_backoff_ms``
  "is (mis)used by gRPC as the connection timeout. If your cluster has a high latency, make
  it to > 4x the latency"; ``gcs_rpc_server_reconnect_timeout_s``: how long a raylet tries
  to reach the GCS again before it gives up.
- Every Ray process reads ``RAY_<name>`` from its environment (RayConfig::initialize): run
  here against the installed Ray 2.60.0's ``ray._raylet.Config``, in a child process.

Fleets: the lab's, copied, with lab-b's declared one-way latency set so that head (lab-a,
0 ms) and lab-gpu-2 (lab-b) are 250 ms apart, or with a LatencyMatrix measuring more.
"""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from swarm_infra.resolve import desired_state, load_fleet
from swarm_infra.resolve.files import static_file
from swarm_infra.resolve.ray import RAY_DEFAULTS

from .conftest import ROOT, fleet_dirs

RTT_MS = 250  # head <-> worker, as the issue states it


def _lab(
    tmp_path: Path,
    one_way_b: float,
    jitter_b: float = 0,
    measured: float | None = None,
    health_check: dict[str, int] | None = None,
) -> dict[str, Any]:
    """The lab fleet's desired nodes, with lab-b's wan declared as given (lab-a declares 0),
    when ``measured`` is set a LatencyMatrix holding that RTT between lab-a and lab-b, and the
    RayCluster's ``health_check`` as given (None: none declared, Ray's defaults; the lab's
    own declaration is replaced)."""
    dirs = []
    for d in fleet_dirs("lab"):
        copy = tmp_path / d.relative_to(ROOT)
        shutil.copytree(d, copy)
        dirs.append(copy)
    sites_file = tmp_path / "inventory" / "lab" / "sites.yaml"
    docs = list(yaml.safe_load_all(sites_file.read_text()))
    for doc in docs:
        if doc and doc["metadata"]["name"] == "lab-b":
            doc["spec"]["wan"] = {"latency_ms": one_way_b, "jitter_ms": jitter_b}
    sites_file.write_text(yaml.safe_dump_all(docs))
    if measured is not None:
        matrix = {
            "apiVersion": "swarm.io/v1alpha1",
            "kind": "LatencyMatrix",
            "metadata": {"name": "measured"},
            "spec": {"pairs": [{"a": "lab-a", "b": "lab-b", "rtt_ms": measured}]},
        }
        (tmp_path / "policies" / "lab" / "latency.yaml").write_text(yaml.safe_dump(matrix))
    ray_file = tmp_path / "policies" / "lab" / "ray.yaml"
    ray = yaml.safe_load(ray_file.read_text())
    ray["spec"].pop("health_check", None)
    if health_check is not None:
        ray["spec"]["health_check"] = health_check
    ray_file.write_text(yaml.safe_dump(ray))
    return desired_state(load_fleet([str(p) for p in dirs]))["nodes"]


def _stays(config: dict[str, int], rtt_ms: float) -> list[str]:
    """Ray's rules (restated in the module's docstring) that ``config`` breaks for a member
    ``rtt_ms`` from the head; empty: it joins and stays."""
    broken = []
    if not config["gcs_grpc_min_reconnect_backoff_ms"] > 4 * rtt_ms:
        broken.append("gRPC's connect timeout to the GCS is not above 4x the latency (ray_config_def.h)")
    # A check that meets a dropped channel: connect (up to the connect timeout), then the call.
    if not config["gcs_grpc_min_reconnect_backoff_ms"] + rtt_ms < config["health_check_timeout_ms"]:
        broken.append("a health check after a reconnect cannot finish within its timeout")
    threshold = config["health_check_failure_threshold"]
    silence_ms = (
        threshold * config["health_check_timeout_ms"] + (threshold - 1) * config["health_check_period_ms"]
    )
    if config["gcs_rpc_server_reconnect_timeout_s"] * 1000 < silence_ms:
        broken.append("the raylet gives up on the GCS before the GCS gives up on the raylet")
    return broken


def test_a_worker_250_ms_from_the_head_stays_where_rays_defaults_do_not(tmp_path: Path) -> None:
    nodes = _lab(tmp_path, one_way_b=RTT_MS / 2)  # lab-a declares 0: RTT 2 x (0 + 125)
    members = [n for n in nodes.values() if n["ray"]]
    assert {n["ray"]["wan_rtt_ms"] for n in members} == {RTT_MS}
    config = members[0]["ray"]["config"]
    assert all(n["ray"]["config"] == config for n in members)  # the GCS judges all alike
    assert _stays(config, RTT_MS) == []
    assert _stays(dict(RAY_DEFAULTS), RTT_MS)  # Ray's own defaults break its rules at 250 ms
    # Never below Ray's defaults: a WAN only lengthens what a data centre needs.
    assert all(config[k] >= v for k, v in RAY_DEFAULTS.items())


@pytest.mark.parametrize("rtt", [0, 44, 250, 600, 2000])
def test_every_rtt_gets_settings_that_keep_its_workers(tmp_path: Path, rtt: float) -> None:
    nodes = _lab(tmp_path, one_way_b=rtt / 2)
    config = next(n["ray"]["config"] for n in nodes.values() if n["ray"])
    assert _stays(config, rtt) == []


def test_the_higher_of_measured_and_declared_rtt_counts(tmp_path: Path) -> None:
    """Jitter counts as latency both ways; a measured RTT above the declared one wins, and a
    measured one below it does not shorten the timeouts (a site's nodes are judged by the
    worse of the two figures)."""
    declared = _lab(tmp_path / "d", one_way_b=100, jitter_b=25)  # 2 x (100 + 25)
    assert next(n["ray"]["wan_rtt_ms"] for n in declared.values() if n["ray"]) == 250
    above = _lab(tmp_path / "m", one_way_b=100, measured=400)
    assert next(n["ray"]["wan_rtt_ms"] for n in above.values() if n["ray"]) == 400
    below = _lab(tmp_path / "b", one_way_b=125, measured=30)
    assert next(n["ray"]["wan_rtt_ms"] for n in below.values() if n["ray"]) == 250


def _read_by_ray(env: dict[str, str]) -> dict[str, int]:
    """The health check settings the installed Ray reads with ``env`` (RayConfig::initialize
    with no system config, in a child process: RayConfig is a process-wide singleton)."""
    program = (
        "import json; from ray._raylet import Config; Config.initialize('{}'); "
        "print(json.dumps({k: getattr(Config, k)() for k in ("
        "'health_check_initial_delay_ms', 'health_check_period_ms', "
        "'health_check_timeout_ms', 'health_check_failure_threshold')}))"
    )
    clean = {k: v for k, v in __import__("os").environ.items() if not k.startswith("RAY_")}
    out = subprocess.run(
        [sys.executable, "-c", program], env={**clean, **env}, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.splitlines()[-1])


def test_the_pinned_rays_defaults_and_environment_are_what_the_decision_assumes(tmp_path: Path) -> None:
    """The installed Ray is the fleets' (policies' ray_version); with no environment it holds
    the defaults ``resolve.ray`` restates, and it reads the unit's Environment= lines as the
    desired state's config (every RAY_* line of the unit, none other than the config's, the
    token's and usage stats')."""
    assert importlib.metadata.version("ray") == "2.60.0"
    defaults = _read_by_ray({})
    assert defaults == {k: RAY_DEFAULTS[k] for k in defaults}
    nodes = _lab(tmp_path, one_way_b=600)  # RTT 1200 ms: the timeout leaves Ray's default
    for node in (n for n in nodes.values() if n["ray"]):
        unit = static_file(node, "ray_unit").splitlines()
        env = dict(
            ln.removeprefix("Environment=").split("=", 1) for ln in unit if ln.startswith("Environment=RAY_")
        )
        config = node["ray"]["config"]
        assert config["health_check_timeout_ms"] > RAY_DEFAULTS["health_check_timeout_ms"]
        assert {
            k for k in env if k not in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", "RAY_USAGE_STATS_ENABLED")
        } == {f"RAY_{k}" for k in config}
        read = _read_by_ray({k: v for k, v in env.items() if k.startswith("RAY_health_check")})
        assert read == {k: config[k] for k in read}


def _silence_ms(config: dict[str, int]) -> int:
    """How long the GCS keeps a member that answers nothing (gcs_health_check_manager.cc, as
    restated in the module's docstring)."""
    threshold = config["health_check_failure_threshold"]
    return threshold * config["health_check_timeout_ms"] + (threshold - 1) * config["health_check_period_ms"]


def _config(nodes: dict[str, Any]) -> dict[str, int]:
    return next(n["ray"]["config"] for n in nodes.values() if n["ray"])


def test_a_declared_health_check_shortens_detection_on_a_lan_and_is_raised_on_a_wan(tmp_path: Path) -> None:
    """A RayCluster's declared health check replaces Ray's defaults where the WAN allows it
    (the lab's three nodes share one host: a lost node is dead after 14 s, not 62 s); across a
    WAN too long for the declared timeout, the timeout is raised until the members stay, and
    the period and threshold stay as declared."""
    declared = {"period_ms": 1000, "timeout_ms": 4000, "failure_threshold": 3}
    assert _silence_ms(dict(RAY_DEFAULTS)) == 62_000  # Ray 2.60's: 5 x 10 s + 4 x 3 s
    near = _config(_lab(tmp_path / "n", 2, health_check=declared))
    assert {k: near[f"health_check_{k}"] for k in declared} == declared
    assert _silence_ms(near) == 3 * 4000 + 2 * 1000
    assert _stays(near, 4) == []
    far = _config(_lab(tmp_path / "f", 1000, health_check=declared))
    assert far["health_check_timeout_ms"] > declared["timeout_ms"]
    assert far["health_check_period_ms"] == 1000 and far["health_check_failure_threshold"] == 3
    assert _stays(far, 2000) == []
    # The lab fleet declares it; a fleet that declares none keeps Ray's defaults.
    lab = desired_state(load_fleet([str(d) for d in fleet_dirs("lab")]))["nodes"]
    assert _silence_ms(_config(lab)) < 20_000
    undeclared = _config(_lab(tmp_path / "u", 2))
    assert {k: undeclared[k] for k in RAY_DEFAULTS if k.startswith("health_check")} == {
        k: v for k, v in RAY_DEFAULTS.items() if k.startswith("health_check")
    }
