"""The ``ray start`` command KubeRay runs in a RayCluster's pods, restated from KubeRay's
source, split as bash splits it, and parsed by the pinned Ray's own ``ray start``.

KubeRay is not run here; what it does with a group is restated from ray-project/kuberay at
tag v1.6.0 (the pinned release, ``engines/pulumi/config.py``), file
``ray-operator/controllers/ray/common/pod.go``:

- ``DefaultHeadPodTemplate`` / ``DefaultWorkerPodTemplate``: ``updateRayStartParamsResources``
  (the group's ``resources`` field: ``cpu``/``memory``/GPU keys become ``num-cpus``/``memory``/
  ``num-gpus``, the rest ``resources='<json.Marshal>'``, single-quoted), then
  ``updateRayStartParamsLabels`` (the group's ``labels`` become ``labels=k1=v1,k2=v2``, keys
  sorted), then ``setMissingRayStartParams`` (workers: ``address=<head service FQDN>:<port>``;
  head: ``dashboard-host=0.0.0.0``; both: ``metrics-export-port=8080``, ``block=true``,
  ``dashboard-agent-listen-port=52365``), then on the head ``no-monitor=true`` when in-tree
  autoscaling is on;
- ``BuildPod`` / ``generateRayStartCommand``: ``num-cpus`` from the Ray container's CPU limit
  (else request), ``memory`` from its memory limit, ``num-gpus`` from a GPU limit
  (``utils.IsGPUResourceKey``: a key ending in ``gpu`` or ``nvidia.com/mig-*``), all as
  ``Quantity.Value()`` (rounded up); then ``ray start [--head] `` + ``convertParamMap``
  (keys sorted; a value ``true``/``false`` (any case) is a bare ``--key`` or nothing, except
  for ``log-color`` and ``include-dashboard``; anything else `` --key=value `` pasted
  unquoted); the container runs ``/bin/bash -c -- "ulimit -n 65536; <that>"``
  (``utils.GetContainerCommand``; ``-l`` too when the operator's ENABLE_LOGIN_SHELL is true).

Not restated (this project renders none of it, and :func:`ray_start_command` refuses a
RayCluster that uses it): GCS fault tolerance (``configureGCSFaultTolerance``), a custom head
service name, the custom accelerators (``google.com/tpu``, ``aws.amazon.com/neuroncore``),
a container ``command``/``args`` or the ``ray.io/overwrite-container-cmd`` annotation, token
auth, TLS.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from typing import Any

from click import Context
from ray._private.label_utils import parse_node_labels_string
from ray._private.utils import parse_resources_json
from ray.autoscaler._private.cli_logger import cf, cli_logger
from ray.scripts.scripts import start

from swarm_infra.cluster.rules import quantity

KUBERAY_TAG = "v1.6.0"
# ray-operator/controllers/ray/utils/constant.go (v1.6.0)
DEFAULT_GCS_SERVER_PORT = "6379"
DEFAULT_METRICS_PORT = "8080"
DEFAULT_DASHBOARD_AGENT_LISTEN_PORT = "52365"
DEFAULT_DOMAIN_NAME = "cluster.local"  # utils/util.go DefaultDomainName
ULIMIT = "ulimit -n 65536"  # common/pod.go BuildPod
BOOLEAN_EXCEPTIONS = ("log-color", "include-dashboard")  # convertParamMap specialParameterOptions


def quantity_value(text: str) -> int:
    """``Quantity.Value()``: the quantity rounded up to an integer."""
    return math.ceil(quantity(text))


def _go_float(x: float) -> str:
    """Go's encoding/json of a float64 for the values met here (integers print bare)."""
    if x.is_integer() and abs(x) < 1e21:
        return str(int(x))
    return repr(x)


def _go_json_object(values: dict[str, float]) -> str:
    """``json.Marshal(map[string]float64)``: keys sorted, no spaces, HTML characters escaped."""
    items = []
    for k in sorted(values):
        key = json.dumps(k, ensure_ascii=False)
        key = key.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
        items.append(f"{key}:{_go_float(values[k])}")
    return "{" + ",".join(items) + "}"


def _is_gpu_key(key: str) -> bool:
    """utils/resources.go IsGPUResourceKey (v1.6.0)."""
    return key.endswith("gpu") or re.search(r"nvidia\.com/mig-\d+g\.\d+gb$", key) is not None


def _update_resources(params: dict[str, str], resources: dict[str, str]) -> None:
    """pod.go updateRayStartParamsResources."""
    custom: dict[str, float] = {}
    for name, text in resources.items():
        low = name.lower()
        if low == "cpu":
            params["num-cpus"] = str(quantity_value(text))
        elif low == "memory":
            params["memory"] = str(quantity_value(text))
        elif _is_gpu_key(low):
            params["num-gpus"] = str(quantity_value(text))
        else:
            custom[name] = float(quantity(text))
    if custom:
        params["resources"] = f"'{_go_json_object(custom)}'"


def _update_labels(params: dict[str, str], labels: dict[str, str]) -> None:
    """pod.go updateRayStartParamsLabels."""
    if labels:
        params["labels"] = ",".join(f"{k}={labels[k]}" for k in sorted(labels))


def _convert_param_map(params: dict[str, str]) -> str:
    """pod.go convertParamMap."""
    out = ""
    for option in sorted(params):
        argument = params[option]
        if argument.lower() in ("true", "false") and option not in BOOLEAN_EXCEPTIONS:
            if argument.lower() == "true":
                out += f" --{option} "
        else:
            out += f" --{option}={argument} "
    return out


def ray_start_command(rc: dict[str, Any], group: int | None) -> str:
    """The ``ray start`` command KubeRay v1.6.0 generates for the head (``group`` None) or
    worker group ``group`` (an index into workerGroupSpecs) of the RayCluster ``rc``."""
    spec, meta = rc["spec"], rc["metadata"]
    if "gcsFaultToleranceOptions" in spec:
        raise NotImplementedError("GCS fault tolerance is not restated")
    # Token auth (authOptions.mode token) changes the containers' environment, not the
    # command: pod.go configureTokenAuth sets RAY_AUTH_MODE and RAY_AUTH_TOKEN (from the
    # Secret KubeRay makes) on the Ray container and the wait-gcs-ready init container.
    # Kubernetes token auth (enableK8sTokenAuth) also mounts a volume: not restated.
    if (spec.get("authOptions") or {}).get("enableK8sTokenAuth"):
        raise NotImplementedError("Kubernetes token auth is not restated")
    head_spec = spec["headGroupSpec"]
    g = head_spec if group is None else spec["workerGroupSpecs"][group]
    pod = g["template"]["spec"]
    container = pod["containers"][0]  # utils.RayContainerIndex
    if "command" in container or "args" in container or head_spec.get("headService", {}).get("name"):
        raise NotImplementedError("a container command or a custom head service is not restated")
    params = {str(k): str(v) for k, v in (g.get("rayStartParams") or {}).items()}
    _update_resources(params, g.get("resources") or {})
    _update_labels(params, g.get("labels") or {})
    # setMissingRayStartParams (headPort: GetHeadPort of the head's params).
    if group is not None:
        port = (head_spec.get("rayStartParams") or {}).get("port", DEFAULT_GCS_SERVER_PORT)
        fqdn = f"{meta['name']}-head-svc.{meta['namespace']}.svc.{DEFAULT_DOMAIN_NAME}"
        params.setdefault("address", f"{fqdn}:{port}")
    else:
        params.setdefault("dashboard-host", "0.0.0.0")
    params.setdefault("metrics-export-port", DEFAULT_METRICS_PORT)
    params["block"] = "true"
    params.setdefault("dashboard-agent-listen-port", DEFAULT_DASHBOARD_AGENT_LISTEN_PORT)
    if group is None and spec.get("enableInTreeAutoscaling") is True:
        params["no-monitor"] = "true"
    # generateRayStartCommand
    limits = container.get("resources", {}).get("limits", {})
    requests = container.get("resources", {}).get("requests", {})
    if "num-cpus" not in params:
        cpu = limits.get("cpu") or requests.get("cpu")
        if cpu and quantity(cpu):
            params["num-cpus"] = str(quantity_value(cpu))
    if "memory" not in params and limits.get("memory") and quantity(limits["memory"]):
        params["memory"] = str(quantity_value(limits["memory"]))
    for key in sorted(limits):  # addWellKnownAcceleratorResources
        if key in ("google.com/tpu", "aws.amazon.com/neuroncore"):
            raise NotImplementedError(f"custom accelerator {key} is not restated")
        if "num-gpus" not in params and _is_gpu_key(key) and quantity(limits[key]):
            params["num-gpus"] = str(quantity_value(limits[key]))
    return ("ray start --head " if group is None else "ray start ") + _convert_param_map(params)


def container_args(rc: dict[str, Any], group: int | None) -> list[str]:
    """The Ray container's args KubeRay sets (command ``/bin/bash -c --``): BuildPod."""
    return [f"{ULIMIT}; {ray_start_command(rc, group)}"]


# What bash treats specially outside quotes, beyond blanks and quotes (which shlex models).
_OPERATORS = set(";&|<>()\n")
_EXPANDING = set("$`*?[]{}")


def shell_problems(command: str) -> list[str]:
    """The constructs of ``command`` where bash would do more than POSIX word splitting and
    quote removal, which is all :func:`shlex.split` models: operators and redirections
    (``; & | < > ( )``, newline), parameter/command/arithmetic expansion (``$``, backquote),
    pathname expansion (``* ? [``), brace expansion (``{ }``: refused whenever unquoted, a
    little more than bash expands), tilde expansion (``~`` starting a word), comments (``#``
    starting a word). Inside double quotes ``$`` and backquote still expand. [] when none."""
    out = []
    quote = ""
    word_start = True
    i = 0
    while i < len(command):
        c = command[i]
        if quote == "'":
            quote = "" if c == "'" else quote
        elif quote == '"':
            if c == "\\":
                i += 1
            elif c == '"':
                quote = ""
            elif c in "$`":
                out.append(f"{c!r} at {i} expands inside double quotes")
        elif c == "\\":
            i += 1
        elif c in "'\"":
            quote = c
        elif c in _OPERATORS:
            out.append(f"{c!r} at {i} is a shell operator")
        elif c in _EXPANDING:
            out.append(f"{c!r} at {i} is a shell expansion")
        elif word_start and c in "~#":
            out.append(f"{c!r} at {i} starts a word (tilde expansion or comment)")
        word_start = quote == "" and c in " \t"
        i += 1
    if quote:
        out.append("an unterminated quote")
    return out


def bash_words(command: str) -> list[str]:
    """``command`` split into words as bash splits it: :func:`shlex.split` (POSIX word
    splitting and quote removal), after :func:`shell_problems` found nothing that shlex
    does not model (ValueError otherwise)."""
    problems = shell_problems(command)
    if problems:
        raise ValueError(f"{command!r}: {'; '.join(problems)}")
    return shlex.split(command)


def parse_ray_start(words: list[str]) -> dict[str, Any]:
    """``words`` (``ray start ...``) parsed by the installed Ray's own ``ray start`` (the
    click command ray.scripts.scripts.start: ``make_context`` parses and never invokes the
    command, so nothing starts), then the callback's first steps with Ray's own parsers:
    ``--resources`` as JSON (ray._private.utils.parse_resources_json) and ``--labels`` in
    the ``k=v,...`` form (ray._private.label_utils.parse_node_labels_string; Ray falls back
    to JSON with a DeprecationWarning, which this refuses). Raises click's UsageError (or
    ValueError/SystemExit from Ray's parsers) on what Ray refuses."""
    if words[:2] != ["ray", "start"]:
        raise ValueError(f"not a ray start command: {words[:2]}")
    ctx: Context = start.make_context("start", list(words[2:]))
    params = dict(ctx.params)
    params["resources"] = parse_resources_json(params["resources"], cli_logger, cf)
    params["labels"] = parse_node_labels_string(params["labels"])
    return params
