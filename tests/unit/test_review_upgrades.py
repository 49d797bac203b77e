"""``swarm review`` says what a Ray or driver version change does to running work: a Ray
upgrade stops the whole cluster (Ray refuses mixed versions), a driver change reboots the
nodes that allow it in their batch and leaves the others pending a reboot."""

from __future__ import annotations

from pathlib import Path

from tests.unit.test_review import RAY_LOCK, change, flags, replace, with_ray

# base_repo and repo: tests/unit/conftest.py's (the example fleet committed, a copy per test).

PROFILES = "policies/shared/gpu-profiles.yaml"


def test_a_ray_version_change_says_the_cluster_is_drained_and_stopped(repo: Path) -> None:
    with_ray(repo)

    def edit() -> None:
        replace(repo, "policies/example/cluster.yaml", 'ray_version: "2.60.0"', 'ray_version: "2.61.0"')
        replace(
            repo, RAY_LOCK, "ray[data,default,serve,tune]==2.60.0", "ray[data,default,serve,tune]==2.61.0"
        )

    _, after, r = change(repo, edit)
    (flag,) = flags(r)["ray-version-changed"]
    members = sum(1 for s in after["nodes"].values() if s["ray"])
    grace = after["rollout"]["drain_grace_s"]
    assert flag.action == "warn" and r.exit_code == 0
    assert f"Ray 2.60.0 -> 2.61.0 on the {members} member(s)" in flag.reason
    assert f"{grace} s" in flag.reason and "mixed versions" in flag.reason
    # Another package, same Ray: no such flag.
    _, _, r = change(
        repo, lambda: replace(repo, "policies/example/ray.yaml", "packages: [scikit-learn]", "packages: []")
    )
    assert "ray-version-changed" not in flags(r)


def test_a_driver_change_names_who_reboots_and_who_stays_pending(repo: Path) -> None:
    def edit() -> None:
        text = (repo / PROFILES).read_text()
        at = text.index("name: h100-training")
        old = 'driver: {branch: "570", version: "570.86.15"}'
        at = text.index(old, at)
        new = 'driver: {branch: "570", version: "570.124.06", allow_reboot: true}'
        (repo / PROFILES).write_text(text[:at] + new + text[at + len(old) :])
        # ... and another profile's driver, without allow_reboot.
        text = (repo / PROFILES).read_text()
        at = text.index('driver: {branch: "570"}', text.index("name: l40s-inference"))
        (repo / PROFILES).write_text(text[:at] + 'driver: {branch: "575"}' + text[at + 23 :])

    _, after, r = change(repo, edit)
    (flag,) = flags(r)["driver-reboot"]
    reboot = sorted(
        n for n, s in after["nodes"].items() if s["gpu"] and s["gpu"]["profile"] == "h100-training"
    )
    pending = sorted(
        n for n, s in after["nodes"].items() if s["gpu"] and s["gpu"]["profile"] == "l40s-inference"
    )
    assert reboot and pending
    assert f"{len(reboot)} node(s) are drained" in flag.reason
    assert f"{len(pending)} node(s) are left pending a reboot" in flag.reason
    assert "Kubernetes swarm-example" in flag.reason  # the example Rollout's kubernetes_context
    assert flag.action == "warn"
