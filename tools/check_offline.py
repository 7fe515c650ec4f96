"""Fail when the built site would fetch anything from another host at view time.

Run after `mkdocs build` (make docs does): every <script src>, <img src>, <iframe src>,
<link href> and CSS url() in site/ must be relative. Plain links to other sites (<a href>)
are fine: they load nothing until clicked.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

TAGS = re.compile(r"<(?:script|img|iframe|source|audio|video)\b[^>]*\ssrc=[\"']((?:https?:)?//[^\"']+)", re.I)
LINKS = re.compile(r"<link\b[^>]*\shref=[\"']((?:https?:)?//[^\"']+)", re.I)
CSS = re.compile(r"url\([\"']?((?:https?:)?//[^)\"']+)", re.I)


def main(site: str = "site") -> int:
    found = []
    for path in sorted(Path(site).rglob("*")):
        if path.suffix not in (".html", ".css", ".js") or not path.is_file():
            continue
        text = path.read_text(errors="replace")
        patterns = (CSS,) if path.suffix != ".html" else (TAGS, LINKS, CSS)
        found += [f"{path}: {m}" for pattern in patterns for m in pattern.findall(text)]
    for line in found:
        print(f"error: the site loads from another host: {line}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
