"""Screenshot of a `swarm review` comment as GitHub shows it, for the README.

    .venv/bin/python scripts/screenshot_review.py [--out docs/review-comment.png]

Makes a temporary Git repository with the example fleet, commits a realistic change on
top (the H100 profile's power limit 650 -> 600 W, a new NAT'd node in tyo1, and the
community tenant allowed the production priority), runs ``swarm review`` on it, renders
the Markdown to HTML with markdown-it-py (CommonMark with GFM tables, raw HTML for
``<details>``) inside a page with GitHub-like CSS written here, and has headless
Chromium (Debian's ``chromium``) take the screenshot. Not run by CI.
"""

from __future__ import annotations

import argparse
import html
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from markdown_it import MarkdownIt

from swarm_infra.review import review
from swarm_infra.review.markdown import render

ROOT = Path(__file__).resolve().parents[1]
CSS = """
body { margin: 0; background: #ffffff; font: 14px/1.5 -apple-system, "Segoe UI", "Noto Sans",
       Helvetica, Arial, sans-serif; color: #1f2328; }
.comment { width: 1060px; margin: 16px; border: 1px solid #d1d9e0; border-radius: 6px; }
.header { background: #f6f8fa; border-bottom: 1px solid #d1d9e0; padding: 8px 16px;
          border-radius: 6px 6px 0 0; color: #59636e; }
.header b { color: #1f2328; }
.body { padding: 4px 16px 16px; }
h2 { font-size: 1.5em; border-bottom: 1px solid #d1d9e0; padding-bottom: .3em; margin: 24px 0 12px; }
h3 { font-size: 1.25em; margin: 20px 0 10px; }
h4 { font-size: 1em; margin: 16px 0 8px; }
table { border-collapse: collapse; margin: 8px 0 12px; display: block; overflow: auto; }
th, td { border: 1px solid #d1d9e0; padding: 6px 13px; vertical-align: top; }
th { font-weight: 600; background: #f6f8fa; }
tr:nth-child(2n) td { background: #f6f8fa; }
code { font: 85% ui-monospace, SFMono-Regular, "DejaVu Sans Mono", monospace;
       background: rgba(129,139,152,.12); padding: .2em .4em; border-radius: 6px; }
a { color: #0969da; text-decoration: none; }
details { margin: 8px 0; }
summary { cursor: pointer; color: #1f2328; }
p:first-child { font-weight: 600; font-size: 1.05em; }
"""


def git(repo: Path, *args: str) -> None:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "dev",
        "GIT_AUTHOR_EMAIL": "dev@example.invalid",
        "GIT_COMMITTER_NAME": "dev",
        "GIT_COMMITTER_EMAIL": "dev@example.invalid",
    }
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env)


def example_change(repo: Path) -> None:
    """The change the screenshot shows (see the module doc)."""
    for d in ("inventory/example", "policies/example", "policies/shared"):
        shutil.copytree(ROOT / d, repo / d)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "main")
    profiles = repo / "policies/shared/gpu-profiles.yaml"
    profiles.write_text(profiles.read_text().replace("power_limit_w: 650", "power_limit_w: 600", 1))
    nodes = repo / "inventory/example/nodes/tyo1.yaml"
    text = nodes.read_text()
    last = "\n---\n" + text.split("\n---\n")[-1]
    nodes.write_text(
        text + last.replace("tyo1-gpu-08", "tyo1-gpu-09").replace("192.168.50.28", "192.168.50.29")
    )
    alloc = repo / "policies/example/scheduling.yaml"
    alloc.write_text(
        alloc.read_text().replace(
            "queue: community\n      priorities: [spot]", "queue: community\n      priorities: [batch, spot]"
        )
    )
    git(repo, "commit", "-qam", "fra1: H100s at 600 W; tyo1-gpu-09; community may use batch")


def page(markdown: str) -> str:
    md = MarkdownIt("commonmark", {"html": True}).enable("table")
    body = md.render(markdown)
    # Open the first <details> of the node changes, as a reviewer would.
    body = body.replace("<details>", "<details open>", 1)
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><style>{CSS}</style></head><body>"
        f"<div class='comment'><div class='header'><b>github-actions</b> bot commented · "
        f"{html.escape('swarm review')}</div><div class='body'>{body}</div></div></body></html>"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "review-comment.png"))
    ap.add_argument("--height", type=int, default=2400)
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="review-shot-") as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        example_change(repo)
        result = review(repo, "HEAD~1", "HEAD", repo_url="https://github.com/swarm/infra")
        markdown = render(result)
        (Path(tmp) / "comment.md").write_text(markdown)
        index = Path(tmp) / "comment.html"
        index.write_text(page(markdown), encoding="utf-8")
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                args.chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--no-first-run",
                "--disable-component-update",
                "--disable-sync",
                "--hide-scrollbars",
                f"--user-data-dir={tmp}/profile",
                f"--window-size=1100,{args.height}",
                f"--screenshot={Path(args.out).resolve()}",
                index.as_uri(),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
    print(f"{args.out}: {result.summary}")


if __name__ == "__main__":
    main()
