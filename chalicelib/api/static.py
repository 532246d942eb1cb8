"""The web client's files, served by the app itself (deployed with it, no bundler)."""
from __future__ import annotations

import re
from pathlib import Path

from chalice import Response

WEB_ROOT = Path(__file__).resolve().parent.parent / "web"
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml", ".json": "application/json",
         ".webmanifest": "application/manifest+json"}
# Bounded: a name longer than the file system allows makes is_file() raise instead of answering False.
SAFE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}\.(html|js|css|svg|json|webmanifest)$")


def serve(name: str) -> Response:
    """One flat directory, names checked against a strict pattern: no traversal is possible."""
    if not SAFE_NAME.match(name) or not (WEB_ROOT / name).is_file():
        return Response(body='{"error": {"code": "not_found", "message": "no such file", "retryable": false}}',
                        status_code=404, headers={"Content-Type": "application/json"})
    body = (WEB_ROOT / name).read_text(encoding="utf-8")
    return Response(body=body, status_code=200,
                    headers={"Content-Type": TYPES[Path(name).suffix], "Cache-Control": "no-cache"})
