#!/usr/bin/env bash
# Copy the apply records (refs/swarm/applied/FLEET: the commit each fleet was last applied
# at, moved by .github/workflows/apply.yml) into the repository this runs in, from lines
# "SHA REF" on stdin (what GitHub's "List matching references" API returns, written by the
# workflow step before this one). The lines are data from an API: only a 40-hex commit id
# that exists here and a ref of exactly that shape are written; anything else is skipped
# with a warning.
#
# Usage: scripts/apply-records.sh < records.txt   (inside the repository)
# Exit status: 0; 2 for arguments.
set -euo pipefail
[ "$#" -eq 0 ] || { echo "usage: $0 < records.txt" >&2; exit 2; }
while read -r sha ref; do
  [ -n "${sha}${ref:-}" ] || continue
  if [[ "$sha" =~ ^[0-9a-f]{40}$ && "${ref:-}" =~ ^refs/swarm/applied/[A-Za-z0-9][A-Za-z0-9_.-]*$ ]] &&
     git rev-parse --verify --quiet "$sha^{commit}" > /dev/null; then
    git update-ref "$ref" "$sha"
  else
    echo "apply-records: skipped a record that is not a known commit and an apply ref" >&2
  fi
done
