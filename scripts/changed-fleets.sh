#!/usr/bin/env bash
# Which fleets an apply must converge after a push (.github/workflows/apply.yml): the fleets
# whose files differ between BEFORE and AFTER (inventory/NAME, policies/NAME, or
# policies/shared, which counts for every fleet), or every fleet at AFTER when a rule file
# changed (schemas/, src/, roles/, playbooks/, plugins/, deploys/, stacks/, jobs/, scripts/,
# .github/, ansible.cfg, Pulumi*.yaml, pyproject.toml: the same list as
# swarm_infra.review.git.RULE_PATTERNS), or BEFORE is unknown (a new branch, a force push).
#
# Usage: scripts/changed-fleets.sh BEFORE AFTER   (inside the repository)
# Prints a JSON list of fleet names, sorted (e.g. ["example","lab"]); exit 2 on bad refs.
# Fleets removed at AFTER are not listed (nothing is left to apply).
set -euo pipefail

if [ "$#" -ne 2 ]; then
  echo "usage: $0 BEFORE AFTER" >&2
  exit 2
fi
before=$1 after=$2
if ! git rev-parse --verify --quiet "$after^{commit}" > /dev/null; then
  echo "changed-fleets: no commit $after" >&2
  exit 2
fi

fleets_at() {  # fleet directories at a commit, one per line
  git ls-tree -d --name-only "$1" -- inventory/ | sed -n 's|^inventory/\([A-Za-z0-9][A-Za-z0-9_.-]*\)$|\1|p'
}

all=$(fleets_at "$after" | sort -u)
if [ -z "$before" ] || [ "$before" = 0000000000000000000000000000000000000000 ] ||
   ! git rev-parse --verify --quiet "$before^{commit}" > /dev/null; then
  chosen=$all
else
  changed=$(git diff-tree -r --no-renames --name-only "$before" "$after")
  if grep -qE '^(schemas|src|roles|playbooks|plugins|deploys|stacks|jobs|scripts|\.github)/|^(ansible\.cfg|Pulumi[^/]*\.yaml|pyproject\.toml)$' <<< "$changed" ||
     grep -q '^policies/shared/' <<< "$changed"; then
    chosen=$all
  else
    chosen=$(sed -nE 's#^(inventory|policies)/([^/]+)/.*#\2#p' <<< "$changed" | sort -u |
      comm -12 - <(printf '%s\n' "$all"))
  fi
fi
python3 -c 'import json, sys; print(json.dumps(sorted(set(sys.stdin.read().split()))))' <<< "$chosen"
