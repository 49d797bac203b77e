#!/usr/bin/env bash
# Which fleets an apply must converge (.github/workflows/apply.yml).
#
#   scripts/changed-fleets.sh BEFORE AFTER
#     the fleets whose files differ between BEFORE and AFTER (inventory/NAME, policies/NAME,
#     or policies/shared, which counts for every fleet), or every fleet at AFTER when a rule
#     file changed (schemas/, src/, roles/, playbooks/, plugins/, deploys/, stacks/, jobs/,
#     scripts/, .github/, ansible.cfg, Pulumi*.yaml, pyproject.toml, inventory/*.py: the same list as
#     swarm_infra.review.git.RULE_PATTERNS), or BEFORE is unknown (a new branch, a force push).
#
#   scripts/changed-fleets.sh --since-applied AFTER
#     the same, per fleet, from that fleet's apply record: the commit it was last applied at,
#     the ref refs/swarm/applied/NAME (apply.yml moves it after each successful apply). A
#     fleet with no record, or a record that is not an ancestor of AFTER (history rewritten),
#     is listed. So an apply run that GitHub cancelled while it was pending (a concurrency
#     group keeps one pending run and cancels the others) is caught up by the next run:
#     what it would have applied still differs from the record.
#
# Run inside the repository. Prints a JSON list of fleet names, sorted (e.g.
# ["example","lab"]); exit 2 on bad arguments or refs. Fleets removed at AFTER are not
# listed (nothing is left to apply).
set -euo pipefail

usage() {
  echo "usage: $0 BEFORE AFTER | $0 --since-applied AFTER" >&2
  exit 2
}
[ "$#" -eq 2 ] || usage
after=$2
if ! git rev-parse --verify --quiet "$after^{commit}" > /dev/null; then
  echo "changed-fleets: no commit $after" >&2
  exit 2
fi

fleets_at() {  # fleet directories at a commit, one per line
  git ls-tree -d --name-only "$1" -- inventory/ | sed -n 's|^inventory/\([A-Za-z0-9][A-Za-z0-9_.-]*\)$|\1|p'
}

all=$(fleets_at "$after" | sort -u)

changed() {  # changed BEFORE: the fleets of AFTER to apply since BEFORE, one per line
  local before=$1 paths
  if [ -z "$before" ] || [ "$before" = 0000000000000000000000000000000000000000 ] ||
     ! git rev-parse --verify --quiet "$before^{commit}" > /dev/null; then
    printf '%s\n' "$all"
    return
  fi
  paths=$(git diff-tree -r --no-renames --name-only "$before" "$after")
  if grep -qE '^(schemas|src|roles|playbooks|plugins|deploys|stacks|jobs|scripts|\.github)/|^(ansible\.cfg|Pulumi[^/]*\.yaml|pyproject\.toml|inventory/[^/]*\.py)$' <<< "$paths" ||
     grep -q '^policies/shared/' <<< "$paths"; then
    printf '%s\n' "$all"
  else
    sed -nE 's#^(inventory|policies)/([^/]+)/.*#\2#p' <<< "$paths" | sort -u |
      comm -12 - <(printf '%s\n' "$all")
  fi
}

if [ "$1" = --since-applied ]; then
  chosen=""
  for fleet in $all; do
    record=$(git rev-parse --verify --quiet "refs/swarm/applied/$fleet^{commit}" || true)
    if [ -z "$record" ] || ! git merge-base --is-ancestor "$record" "$after"; then
      chosen+="$fleet"$'\n'
    # Not `changed ... | grep -q`: grep -q exits at its first match, bash writes one line per
    # write(2), and under pipefail the writer's SIGPIPE (141) would drop the fleet.
    elif grep -qxF "$fleet" <<< "$(changed "$record")"; then
      chosen+="$fleet"$'\n'
    fi
  done
else
  [[ "$1" != -* ]] || usage
  chosen=$(changed "$1")
fi
python3 -c 'import json, sys; print(json.dumps(sorted(set(sys.stdin.read().split()))))' <<< "$chosen"
