#!/usr/bin/env bash
# Review a pull request for CI (.github/workflows/review.yml): run the TRUSTED reviewer
# (`swarm` installed from the base branch's code) on the head commit, which it reads from
# Git as data only, and always leave a comment body behind, even when the head is invalid
# or the review itself could not run, so that a stale comment (a green check of an earlier
# push) never stays up.
#
# Usage: scripts/review-pr.sh BASE_SHA HEAD_SHA OUT_DIR
#   run inside the Git repository that holds both commits.
# Environment:
#   SWARM     the reviewer's swarm command (default: swarm on PATH)
#   REPO_URL  https://github.com/OWNER/REPO, to make locations links (optional)
#   GITHUB_OUTPUT  when set, gets exit_code=N (the review's exit code)
# Writes OUT_DIR/review.md (the comment, with the <!-- swarm-review --> marker),
# OUT_DIR/review-full.md (the whole report) and OUT_DIR/exit_code.
# Exit status: always 0 once the files are written (the workflow fails the job after
# posting, from exit_code); 2 for bad arguments.
set -uo pipefail

if [ "$#" -ne 3 ]; then
  echo "usage: $0 BASE_SHA HEAD_SHA OUT_DIR" >&2
  exit 2
fi
base=$1 head=$2 out=$3
swarm=${SWARM:-swarm}
mkdir -p "$out"
rm -f "$out/review.md" "$out/review-full.md" "$out/exit_code"

args=(review --base "$base" --head "$head" --out "$out/review.md" --full "$out/review-full.md")
if [ -n "${REPO_URL:-}" ]; then
  args+=(--repo-url "$REPO_URL")
fi
# The review compares the head with its merge base with the base (swarm review's default),
# validates the head (its diagnostics are the comment when it is invalid: exit 2) and lists
# changed rule files. 0: no blocking flag, 1: blocking flags, 2: invalid head or bad ref.
"$swarm" "${args[@]}" 2> "$out/review.err"
code=$?
cat "$out/review.err" >&2

if [ ! -s "$out/review.md" ] || ! grep -qF '<!-- swarm-review -->' "$out/review.md"; then
  # The review did not produce a comment (an unknown commit, a crash): say so in the comment
  # that replaces the previous one, and fail.
  [ "$code" -eq 0 ] && code=2
  {
    printf '❌ swarm review could not run (exit %s); see the job log\n' "$code"
    printf '<!-- swarm-review -->\n\n'
    printf 'Base `%s` → head `%s`. The previous review of this pull request no longer applies.\n\n' \
      "${base:0:12}" "${head:0:12}"
    printf '```text\n'
    tail -c 4000 "$out/review.err" | sed 's/```/` ` `/g'
    printf '\n```\n'
  } > "$out/review.md"
  cp "$out/review.md" "$out/review-full.md"
fi

echo "$code" > "$out/exit_code"
if [ -n "${GITHUB_OUTPUT:-}" ]; then
  echo "exit_code=$code" >> "$GITHUB_OUTPUT"
fi
exit 0
