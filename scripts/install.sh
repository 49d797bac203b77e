#!/usr/bin/env bash
# Install what the project needs on Debian 12 (as root): the host tools from apt (only the
# missing ones) and the project, with its Python dependencies, into .venv (kept if there).
# Used by `make demo` and by .ci/run (which removes .venv first).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
# python3 itself is Priority optional in Debian: a minimal server may lack it, and the
# registry below is read with it.
if ! command -v "$PY" >/dev/null; then
  echo "== apt-get install python3"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3 >/dev/null
fi
# The host's packages are the registry's (src/swarm_infra/hosttools.py: every command the
# controller side runs, with its Debian package), read with the standard library only, before
# the project is installed; a tool a change adds joins the registry, and so this list.
APT_PKGS=$("$PY" src/swarm_infra/hosttools.py packages)
missing=""
for p in $APT_PKGS; do
  [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" == *"ok installed" ]] || missing="$missing $p"
done
# `python3 -m venv --help` passes where the venv itself then fails: Debian moves ensurepip,
# which venv runs, into python3.X-venv (pulled in by python3-venv).
"$PY" -c 'import ensurepip, venv' >/dev/null 2>&1 || missing="$missing python3-venv"
if [ -n "${missing// /}" ]; then
  echo "== apt-get install$missing"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
# A .venv left without pip (a venv that failed half-way) is made again, not reused.
if ! .venv/bin/python -m pip --version >/dev/null 2>&1; then
  rm -rf .venv
  "$PY" -m venv .venv
fi
# promtool, Prometheus's linter, checks the textfiles `swarm metrics run` writes
# (tests/unit/test_metrics_prometheus.py). It comes from Debian's prometheus package,
# unpacked into .venv/bin: installing the package would also enable and start a Prometheus
# server (port 9090) and pull in its web assets.
# Always the virtualenv's (the registry says so), even where a promtool is on PATH.
if [ ! -x .venv/bin/promtool ]; then
  echo "== promtool from Debian's prometheus package, into .venv/bin"
  tmp=$(mktemp -d)
  (cd "$tmp" && { apt-get download -qq prometheus 2>/dev/null || { apt-get update -qq && apt-get download -qq prometheus; }; })
  dpkg-deb --fsys-tarfile "$tmp"/prometheus_*.deb | tar -x -C "$tmp" ./usr/bin/promtool
  install -m 0755 "$tmp/usr/bin/promtool" .venv/bin/promtool
  rm -rf "$tmp"
fi
echo "== install -e '.[dev]' into .venv (uv; pip if uv cannot)"
# uv resolves the same ranges as pip, with parallel downloads: about 6 s here where pip takes
# about 50 s (the dev extra includes Ray). Where uv cannot be had or fails, pip does the work.
# uv trusts its own bundled roots unless told to use the system's store, which pip uses: a
# site's own CA (an egress proxy's) is only there (UV_SYSTEM_CERTS; UV_NATIVE_TLS before 0.9).
export UV_SYSTEM_CERTS=1 UV_NATIVE_TLS=1
if .venv/bin/python -m pip install -q "uv>=0.5,<1" && .venv/bin/uv pip install -q --python .venv/bin/python -e '.[dev]'; then
  :
else
  echo "uv failed: installing with pip"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[dev]'
fi
