"""systemd units: their state from the snapshot, and enabled, running, restarted or
reloaded (pyinfra's ``systemd.service`` where something differs)."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from pyinfra.api import operation

from .run import changing, snapshot
from .util import unit_name


def unit_state(service: str) -> dict[str, bool]:
    """``{"exists", "enabled", "running"}`` of a systemd unit, from the snapshot."""
    state = snapshot()["units"].get(unit_name(service)) or {"enabled": "", "active": ""}
    return {
        "exists": state["enabled"] not in ("", "not-found") or state["active"] not in ("", "inactive"),
        "enabled": state["enabled"] in ("enabled", "enabled-runtime", "static", "alias", "linked"),
        "running": state["active"] in ("active", "activating", "reloading"),
    }


@operation()
def unit(
    service: str,
    running: bool | None = None,
    enabled: bool | None = None,
    restarted: bool = False,
    daemon_reload: bool = False,
    reloaded: bool = False,
) -> Generator[Any, None, None]:
    """A systemd unit enabled or not, running or not, restarted or reloaded (when running):
    nothing when the snapshot shows it so, else pyinfra's ``systemd.service``
    (``daemon_reload`` first when asked).

    **Example:** ``unit(name="Start Ray", service="ray-head.service", running=True, enabled=True)``"""
    from pyinfra.operations import systemd

    now = unit_state(service)
    if (
        not restarted
        and not reloaded
        and not daemon_reload
        and (running is None or running == now["running"])
        and (enabled is None or enabled == now["enabled"])
    ):
        return
    changing()
    yield from systemd.service._inner(
        service=unit_name(service),
        running=running,
        enabled=enabled,
        restarted=restarted,
        reloaded=reloaded,
        daemon_reload=daemon_reload,
    )
