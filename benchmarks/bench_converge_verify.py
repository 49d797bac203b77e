"""Convergence and verification timings on the 3-node lab, side by side in one run.

    sudo .venv/bin/python benchmarks/bench_converge_verify.py

Needs root and no lab up; brings one up and takes it down at the end. Measures:
  * `swarm converge --check --diff` on the fresh fleet, the first `swarm converge`, a
    second one (changed=0) and `--check --diff` on the converged fleet;
  * `swarm verify` (every check of every node) with ansible.cfg's shared SSH control path,
    against the same run with an ansible.cfg without it (what testinfra does by default:
    one new SSH connection per command), and the ratio.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def swarm(*args: str, env: dict[str, str] | None = None, ok: tuple[int, ...] = (0,)) -> tuple[float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "swarm_infra.cli", *args], cwd=ROOT, capture_output=True, text=True, env=env
    )
    took = time.perf_counter() - t0
    if proc.returncode not in ok:
        sys.exit(f"swarm {' '.join(args)} exited {proc.returncode}:\n{proc.stdout[-3000:]}{proc.stderr}")
    return took, proc.stdout


def changed(output: str) -> int:
    return sum(int(m) for m in re.findall(r"^\S+\s+(?:ok|changed)\s+\d+\s+(\d+)", output, re.M))


def main() -> None:
    swarm("lab", "up", "--fleet", "lab")
    try:
        rows = []
        for label, args in (
            ("converge --check --diff (fresh)", ("converge", "--check", "--diff")),
            ("converge (first)", ("converge",)),
            ("converge (second)", ("converge",)),
            ("converge --check --diff (converged)", ("converge", "--check", "--diff")),
        ):
            took, out = swarm(*args)
            rows.append((label, took, f"changed={changed(out)}"))
        shared, out = swarm("verify", "--junit-xml", os.devnull)
        checks = re.search(r"(\d+) passed", out).group(1)
        # Beside the real one, so its relative plugin paths still resolve; removed after.
        cfg = ROOT / "ansible-bench-no-control-path.cfg"
        try:
            cfg.write_text(re.sub(r"^control_path = .*$", "", (ROOT / "ansible.cfg").read_text(), flags=re.M))
            env = {**os.environ, "ANSIBLE_CONFIG": str(cfg)}
            alone, _ = swarm("verify", "--junit-xml", os.devnull, env=env)
        finally:
            cfg.unlink(missing_ok=True)
        rows.append((f"verify, {checks} checks, shared SSH masters", shared, ""))
        rows.append((f"verify, {checks} checks, one SSH connection per command", alone, ""))
    finally:
        swarm("lab", "down")
    width = max(len(r[0]) for r in rows)
    for label, took, note in rows:
        print(f"{label:<{width}}  {took:7.1f} s  {note}")
    print(f"shared SSH masters are {alone / shared:.1f}x faster for verify")


if __name__ == "__main__":
    main()
