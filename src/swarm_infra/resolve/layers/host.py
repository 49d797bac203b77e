"""The host layer: the HostProfile's sysctls, hugepages, transparent hugepages and CPU
governor; apt through the site's package cache; the pull agent's timer on pull nodes.

Three parts, each written and removed on its own: the HostProfile's files (written, and
once undeclared removed with the recorded values restored, by the node-side tunables code:
:func:`tunables`), the package cache's (the site declares one), the pull agent's (the node
converges by pull; its state directory, deploy key, known hosts and pause file are the
node's own: :data:`..paths.AGENT_LOCAL`, never written nor removed here).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ...fleet.diagnostics import PathPart, Source, json_path
from ...fleet.schemas import AGENT_SETTINGS, check_file
from ..paths import AGENT_DIR, AGENT_LOCAL, LIB_DIR, STATE_DIR, UNIT_DIR
from ..text import UnsafeValue, header, json_text, line_value
from ..types import LayoutState, NodeState
from .base import File, Layer

TUNABLES = "the node-side tunables code (swarm_tunables_spec, tunables_spec)"


def tunables(node: NodeState) -> dict[str, Any]:
    """What the node-side tunables code (:mod:`swarm_infra.nodeside.tunables` SPEC)
    converges for this layer: the HostProfile's sysctls and sysfs values (none when the
    node has no profile: its files go and the recorded values come back)."""
    host, files = node["host"], node["layout"]["files"]
    return {
        "sysctls": dict(host["sysctl_text"]) if host else {},
        "sysfs": [dict(i) for i in host["sysfs"]] if host else [],
        "sysctl_conf": files["sysctl_conf"]["path"],
        "tmpfiles_conf": files["tmpfiles_conf"]["path"],
        "record": files["host_tunables_record"]["path"],
        "label": f"HostProfile {host['profile'] if host else '(none)'}",
    }


# ----------------------------------------------------------------------- package cache


def apt_cache_detect(node: NodeState) -> str:
    """The program apt runs before each http fetch (apt.conf(5), ``Acquire::http::
    Proxy-Auto-Detect``, its argument the URI): it prints the site's package cache when the
    cache accepts a connection within 2 s, else ``DIRECT`` (the mirror itself), so a cache
    that is down costs a converge 2 s per fetch, not a failure."""
    cache = node["package_cache"]
    assert cache is not None
    host, port = line_value(cache["host"], "package cache host"), int(cache["port"])
    proxy = line_value(cache["apt_proxy"], "package cache")
    return (
        "#!/bin/bash\n"
        + header("host layer, package cache")
        + "# apt asks which proxy to use for the URI in $1: the site's cache while it answers.\n"
        f"if timeout 2 bash -c 'exec 3<>/dev/tcp/{host}/{port}' 2>/dev/null; then\n"
        f"  echo {proxy}\n"
        "else\n"
        "  echo DIRECT\n"
        "fi\n"
    )


def apt_cache_conf(node: NodeState) -> str:
    """apt.conf(5) drop-in sending apt's http fetches through the detect program above."""
    detect = node["layout"]["files"]["apt_cache_detect"]["path"]
    return (
        header("host layer, package cache")
        + "// The site's package cache while it answers, else the mirror itself.\n"
        f'Acquire::http::Proxy-Auto-Detect "{line_value(detect, "detect program")}";\n'
    )


# --------------------------------------------------------------------------- pull agent

# The agent's first run after boot (the timer's OnBootSec), before the jitter.
AGENT_BOOT_DELAY_S = 120
# The longest one agent run may take (fetch, verify, a whole site converge with a driver
# install); systemd stops it after that (TimeoutStartSec of a oneshot service).
AGENT_RUN_TIMEOUT_S = 3600


def agent_config(node: NodeState) -> str:
    """The agent's settings (layout ``agent_config``), JSON: the node's name and the
    ``pull`` slice without the signers' text (that is its own file). ``swarm node
    bootstrap`` writes the same file before the node is in the fleet
    (:func:`agent_config_text`)."""
    pull = node["pull"]
    assert pull is not None  # rendered for pull nodes only
    return agent_config_text(
        node["name"], pull["fleet"], pull["remote"], pull["ref"], pull["status_port"], pull["engine"]
    )


def agent_settings(
    node: str, fleet: str, remote: str, ref: str, status_port: int, engine: str = "ansible"
) -> dict[str, Any]:
    """The agent's settings for ``node`` as data: ``{"node", "fleet", "remote", "ref",
    "engine", "status_port"}`` (``schemas/agentsettings.schema.json``)."""
    return {
        "node": node,
        "fleet": fleet,
        "remote": remote,
        "ref": ref,
        "engine": engine,  # PullState.engine; the schema allows only "ansible"
        "status_port": status_port,
    }


def agent_settings_problems(settings: Mapping[str, Any]) -> list[tuple[tuple[PathPart, ...], str]]:
    """(path, message) of each way ``settings`` breaks the settings' schema
    (``schemas/agentsettings.schema.json``, the fleet's validator:
    :func:`swarm_infra.fleet.schemas.check_file`); empty when the agent would read them."""
    return [(f.path, f.message) for f in check_file(AGENT_SETTINGS, settings, Source("agent_config", 0))]


def agent_config_text(
    node: str, fleet: str, remote: str, ref: str, status_port: int, engine: str = "ansible"
) -> str:
    """The agent's settings file for ``node`` (see :func:`agent_config`), checked against
    the settings' schema before it is written: a file the agent would refuse is never
    rendered. Raises :class:`~..text.UnsafeValue` naming each ``$.field``."""
    text = json_text(agent_settings(node, fleet, remote, ref, status_port, engine))
    # The text as the agent parses it: what is written is what is checked (the values may
    # be str subclasses, Ansible's unsafe text, which the validator does not take).
    problems = agent_settings_problems(json.loads(text))
    if problems:
        raise UnsafeValue(
            f"{node}: the agent's settings would be refused: "
            + "; ".join(f"{json_path(path)}: {message}" for path, message in problems)
        )
    return text


def agent_allowed_signers(node: NodeState) -> str:
    """The allowed signers file the agent verifies the next commit with: the fleet's, as
    reviewed (validated line by line: :func:`swarm_infra.resolve.pull.allowed_signers_problems`)."""
    pull = node["pull"]
    assert pull is not None
    text = pull["allowed_signers"]
    return text if text.endswith("\n") else text + "\n"


def agent_revoked_signers(node: NodeState) -> str:
    """The revoked signers file (git's ``gpg.ssh.revocationFile``, read by ``ssh-keygen -Y
    verify -r``: one public key per line): the fleet's ``spec.pull.revoked_signers``, a
    commit signed by one of them is refused whatever the allowed signers say."""
    pull = node["pull"]
    assert pull is not None
    lines = "".join(f"{key}\n" for key in pull["revoked_signers"])
    comment = "# Signers' keys revoked (Rollout spec.pull.revoked_signers).\n"
    return header("host layer: pull agent") + comment + lines


def agent_service(node: NodeState) -> str:
    """systemd service (Type=oneshot) running one agent run (:func:`agent_service_text`)."""
    return agent_service_text(node["layout"])


def agent_service_text(layout: LayoutState) -> str:
    """The agent's service: ``swarm agent run`` of the package installed in layout
    ``agent_venv``, one run per start (the timer starts it)."""
    files = layout["files"]
    program = f"{AGENT_LOCAL['agent_venv']['path']}/bin/swarm"
    return (
        header("host layer: pull agent")
        + "# One run: fetch the fleet's ref, verify its signature, apply this node's state.\n"
        "[Unit]\n"
        "Description=Swarm pull agent: converge this node from the fleet's signed commit\n"
        "Wants=network-online.target\n"
        "After=network-online.target\n"
        f"ConditionPathExists={files['agent_config']['path']}\n"
        "\n"
        "[Service]\n"
        "Type=oneshot\n"
        f"ExecStart={program} agent run --config {files['agent_config']['path']}\n"
        f"TimeoutStartSec={AGENT_RUN_TIMEOUT_S}\n"
        "UMask=0077\n"
    )


def agent_timer(node: NodeState) -> str:
    """systemd timer of the agent (:func:`agent_timer_text`) at the fleet's interval and jitter."""
    pull = node["pull"]
    assert pull is not None  # rendered for pull nodes only
    return agent_timer_text(node["layout"], pull["interval_s"], pull["randomized_delay_s"])


def agent_timer_text(layout: LayoutState, interval_s: int, randomized_delay_s: int) -> str:
    """systemd timer starting the agent's service every ``interval_s`` (OnUnitActiveSec),
    each start delayed by up to ``randomized_delay_s`` at random (RandomizedDelaySec), the
    first :data:`AGENT_BOOT_DELAY_S` after boot (systemd.timer(5)). ``AccuracySec=1s``:
    systemd's default (1 min) lets each start slip by up to a minute more, which the
    benchmark saw (benchmarks/bench_pull.py); the random delay already spreads the load."""
    units = layout["units"]
    return (
        header("host layer: pull agent") + "[Unit]\n"
        f"Description=Run {units['agent_service']} on a jittered interval\n"
        "\n"
        "[Timer]\n"
        f"OnBootSec={AGENT_BOOT_DELAY_S}\n"
        f"OnUnitActiveSec={int(interval_s)}\n"
        f"RandomizedDelaySec={int(randomized_delay_s)}\n"
        "AccuracySec=1s\n"
        f"Unit={units['agent_service']}\n"
        "\n"
        "[Install]\n"
        "WantedBy=timers.target\n"
    )


def _host(node: NodeState) -> bool:
    return bool(node["host"])


def _cache(node: NodeState) -> bool:
    return bool(node["package_cache"])


def _pull(node: NodeState) -> bool:
    return bool(node["pull"])


LAYER = Layer(
    name="host",
    role="host_tuning",
    hosts="all",
    state=("host",),
    title="Host",
    sources=("HostProfile", "Assignment"),
    files={
        # The HostProfile: sysctl.d(5) and tmpfiles.d(5) (hugepages, THP, CPU governor), and
        # each managed key's value before the project first set it, restored when undeclared.
        "sysctl_conf": File(
            path="/etc/sysctl.d/90-swarm.conf", task=TUNABLES, wanted=_host, removed=True, task_removes=True
        ),
        "tmpfiles_conf": File(
            path="/etc/tmpfiles.d/swarm-host-tuning.conf",
            task=TUNABLES,
            wanted=_host,
            removed=True,
            task_removes=True,
        ),
        "state_dir": File(path=STATE_DIR, directory=True, task=TUNABLES),
        "host_tunables_record": File(path=f"{STATE_DIR}/tunables-host.json", task=TUNABLES),
        # apt.conf(5): the site's package cache, used while it answers (the detect program).
        "lib_dir": File(path=LIB_DIR, directory=True, wanted=_cache),
        "apt_cache_detect": File(
            path=f"{LIB_DIR}/apt-proxy-detect",
            mode="0755",
            text=apt_cache_detect,
            wanted=_cache,
            removed=True,
        ),
        "apt_cache_conf": File(
            path="/etc/apt/apt.conf.d/80swarm-package-cache", text=apt_cache_conf, wanted=_cache, removed=True
        ),
        # The pull agent (the directory stays on a push node: the deploy key lives there).
        "agent_dir": File(path=AGENT_DIR, mode="0700", directory=True, wanted=_pull),
        "agent_config": File(path=f"{AGENT_DIR}/agent.json", text=agent_config, wanted=_pull, removed=True),
        "agent_allowed_signers": File(
            path=f"{AGENT_DIR}/allowed_signers", text=agent_allowed_signers, wanted=_pull, removed=True
        ),
        "agent_revoked_signers": File(
            path=f"{AGENT_DIR}/revoked_signers", text=agent_revoked_signers, wanted=_pull, removed=True
        ),
        "agent_service": File(
            path=f"{UNIT_DIR}/swarm-agent.service", text=agent_service, wanted=_pull, removed=True
        ),
        "agent_timer": File(
            path=f"{UNIT_DIR}/swarm-agent.timer", text=agent_timer, wanted=_pull, removed=True
        ),
    },
    units={"agent_service": "swarm-agent.service", "agent_timer": "swarm-agent.timer"},
    tunables=tunables,
)
