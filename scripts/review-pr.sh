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
#   REVIEW_MODE  merge (default): review the merge result of HEAD_SHA into BASE_SHA (the base
#             branch's tip): what the base will hold once the pull request merges, so a clash
#             with what merged since the pull request branched is judged; a head that
#             conflicts has no merge result (exit 2, said in the comment).
#             exact: HEAD_SHA is already the merge result (a merge queue's merge_group
#             commit) and BASE_SHA the commit it was made on.
#   REPO_URL  https://github.com/OWNER/REPO, to make locations links (optional)
#   CLAIM     the head's claim file (head-plan.yml's artifact), when there is one (optional)
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

case "${REVIEW_MODE:-merge}" in
  merge) mode=--merge ;;
  exact) mode=--exact-base ;;
  *) echo "REVIEW_MODE must be merge or exact, not '${REVIEW_MODE}'" >&2; exit 2 ;;
esac
args=(review --base "$base" --head "$head" "$mode" --out "$out/review.md" --full "$out/review-full.md")
if [ -n "${REPO_URL:-}" ]; then
  args+=(--repo-url "$REPO_URL")
fi
if [ -n "${CLAIM:-}" ] && [ -f "$CLAIM" ]; then
  args+=(--claim "$CLAIM")  # the head's claim (head-plan.yml): data, shown, never judged
fi
# The review compares the merge result with the base's tip (or, in exact mode, the merge
# queue's commit with its base), validates it (its diagnostics are the comment when it is
# invalid: exit 2) and lists changed rule files. 0: no blocking flag, 1: blocking flags,
# 2: an invalid merge result, a conflict, or a bad ref.
"$swarm" "${args[@]}" 2> "$out/review.err"
code=$?
cat "$out/review.err" >&2

if [ ! -s "$out/review.md" ] || ! grep -qF '<!-- swarm-review -->' "$out/review.md"; then
  # The review did not produce a comment (an unknown commit, a crash): say so in the comment
  # that replaces the previous one, and fail.
  [ "$code" -eq 0 ] && code=2
  if grep -qF 'there is no merge result to review' "$out/review.err"; then
    headline="❌ this pull request conflicts with its base: there is no merge result to review; merge or rebase the base into it"
  else
    headline="❌ swarm review could not run (exit $code); see the job log"
  fi
  {
    printf '%s\n' "$headline"
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
