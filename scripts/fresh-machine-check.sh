#!/usr/bin/env bash
# The fresh-machine proof (issue: a tool installed by hand hides a missing install step):
# a new Debian 12 tree made with debootstrap, holding only what a bare server has (python3,
# git, make, ca-certificates; no python3-venv, no WireGuard), gets a clean clone of this
# repository's HEAD; inside it, under systemd-nspawn, `bash scripts/install.sh` runs, then the
# host-tool tests: every command of the registry (src/swarm_infra/hosttools.py) must be
# found there, owned by the Debian package the registry names. Nothing of this host's own
# installs reaches the tree. Root; about 5 minutes here (debootstrap about 1, the project's
# Python dependencies most of the rest). Not part of CI (its time): run it when install.sh
# or the registry changes; the figure is in docs/benchmarks.md.
#
# Usage: sudo bash scripts/fresh-machine-check.sh [WORKDIR]   (default: a new temporary one,
# removed at the end; a given one is kept afterwards for a look, and made anew each run)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
work=${1:-}
if [ -z "$work" ]; then
  work=$(mktemp -d /var/tmp/swarm-fresh.XXXXXX)
  trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work"
tree="$work/root"
rm -rf "$tree"  # always a new tree: install.sh has put WireGuard and ensurepip into an old one
mirror=$(PYTHONPATH="$repo/src" python3 -c 'from swarm_infra.lab.image import host_mirror; print(host_mirror())' 2>/dev/null \
  || echo http://deb.debian.org/debian)
started=$(date +%s)
echo "== debootstrap bookworm (minbase + python3 git make ca-certificates) from $mirror"
debootstrap --variant=minbase --include=python3,git,make,ca-certificates bookworm "$tree" "$mirror" \
  >"$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log"; exit 1; }
rm -rf "$tree/root/swarm"
git clone -q "$repo" "$tree/root/swarm"
# The site's own certificate authorities (an egress proxy's, say), as a new server of this
# network would be given them: network configuration, not a project tool.
mkdir -p "$tree/usr/local/share/ca-certificates"
cp /usr/local/share/ca-certificates/*.crt "$tree/usr/local/share/ca-certificates/" 2>/dev/null || true
echo "== inside the fresh tree: bash scripts/install.sh, then the host-tool tests"
# --pipe: no console; the host's network (apt and pip reach their registries as here); the
# host's resolv.conf copied in. PIP_* of this host stay outside (a clean environment).
# --register=no --keep-unit: this host's PID 1 need not be systemd (as lab/node.py runs them).
trap 'rm -rf /run/systemd/nspawn/propagate/swarm-fresh' EXIT
[ -z "${1:-}" ] && trap 'rm -rf "$work" /run/systemd/nspawn/propagate/swarm-fresh' EXIT
systemd-nspawn --quiet --pipe --register=no --keep-unit --machine=swarm-fresh --resolv-conf=copy-host -D "$tree" \
  --setenv=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --chdir=/root/swarm \
  /bin/bash -c 'set -e
    update-ca-certificates >/dev/null
    for c in wg wireguard-go; do ! command -v $c >/dev/null || { echo "$c is already in the fresh tree"; exit 1; }; done
    ! python3 -c "import ensurepip" 2>/dev/null || { echo "python3-venv is already in the fresh tree"; exit 1; }
    bash scripts/install.sh
    .venv/bin/python -m pytest -q -p no:cacheprovider tests/unit/test_host_tools.py'
echo "fresh-machine check passed in $(( $(date +%s) - started )) s"
