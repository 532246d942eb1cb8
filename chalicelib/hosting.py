"""How the web client is served, defined once: the security headers, the files, their types and caching.

In AWS the client lives in a private S3 bucket behind CloudFront: infra/hosting.py renders the response
headers policy from security_headers' parts, and scripts/deploy-client uploads `objects()`. Locally the
API server serves the same files with the same headers (scripts/local/api_server.py). The API function never
serves them.

Versioned assets: every file but the two fixed entry points is uploaded under `web/<version>/`, `version`
being a hash of the whole client, and cached for a year; `index.html` (served at "/") and `sw.js` (at
"/sw.js", whose scope is the whole client) are revalidated on every load and point at that version.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from . import aws

WEB_ROOT = Path(__file__).resolve().parent / "web"

# ------------------------------------------------------------------ security headers (every answer, API too)
def csp(identity: str) -> str:
    """The page's policy. `identity` is the one other origin it may call: the user pool's Cognito endpoint
    (the sign-in form talks to Cognito directly), the emulator's locally."""
    return "; ".join([
        "default-src 'self'",  # nothing inline, nothing from another origin
        f"connect-src 'self' {identity}".strip(),
        "base-uri 'none'",
        "object-src 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",  # the page holds a token: it is never framed
    ])


COGNITO_AWS = "https://cognito-idp.${AWS::Region}.amazonaws.com"  # rendered with Fn::Sub by infra/hosting.py
CSP_AWS = csp(COGNITO_AWS)
REFERRER_POLICY = "no-referrer"
FRAME_OPTION = "DENY"  # frame-ancestors for browsers that predate it
HSTS_MAX_AGE = 63_072_000  # two years


def security_headers(identity: str) -> dict[str, str]:
    return {
        "Content-Security-Policy": csp(identity),
        "X-Content-Type-Options": "nosniff",
        "X-Frame-Options": FRAME_OPTION,
        "Referrer-Policy": REFERRER_POLICY,
        "Strict-Transport-Security": f"max-age={HSTS_MAX_AGE}; includeSubDomains",
    }


NOSNIFF = {"X-Content-Type-Options": "nosniff"}  # on every API answer too


def local_headers() -> dict[str, str]:
    """What the local server sends: the same policy, the emulator's Cognito as the identity origin."""
    endpoint = aws.emulator_endpoint()
    parts = urlsplit(endpoint) if endpoint else None
    return security_headers(f"{parts.scheme}://{parts.netloc}" if parts else "")

# ------------------------------------------------------------------ files
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml", ".png": "image/png",
         ".webmanifest": "application/manifest+json"}
TEXT = (".html", ".js", ".css", ".svg", ".webmanifest")
ENTRY_POINTS = {"/": "index.html", "/sw.js": "sw.js"}  # fixed URLs, revalidated on every load
ASSET_PREFIX = "/web/"
REVALIDATE = "no-cache"
IMMUTABLE = "public, max-age=31536000, immutable"


@dataclass(frozen=True)
class ClientObject:
    key: str  # the S3 key: the URL path without its leading "/"
    body: bytes
    content_type: str
    cache_control: str


def client_files() -> list[str]:
    """The client's file names (one flat directory)."""
    return sorted(p.name for p in WEB_ROOT.iterdir() if p.is_file() and p.suffix in TYPES)


def version() -> str:
    """A hash of every file's name and content: a new client gets new asset URLs."""
    digest = hashlib.sha256()
    for name in client_files():
        digest.update(name.encode() + b"\0" + (WEB_ROOT / name).read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def _body(name: str, prefix: str) -> bytes:
    raw = (WEB_ROOT / name).read_bytes()
    if name.endswith((".js", ".css")):
        raw = without_comments(raw.decode(), line_comments=name.endswith(".js")).encode()
    if prefix == ASSET_PREFIX or not name.endswith(TEXT):
        return raw
    return raw.replace(ASSET_PREFIX.encode(), prefix.encode())


def without_comments(source: str, *, line_comments: bool = True) -> str:
    """The source as served: whole-line comments (`//` lines, `/* ... */` blocks that start a line) and blank
    lines left out, code untouched (a comment after code stays: telling it from a string needs a parser). The
    client's sources never start a line of a multi-line string or template with `//` or `/*` (such a line would
    go too); tests/unit/test_served_client.py parses every file as served.
    The files keep their comments for people; what a browser downloads does not pay for them. Not a minifier
    library: rjsmin 1.3.0 (tried) drops the space after `${n}` in a template literal nested in another's
    expression, changing text a user reads."""
    out: list[str] = []
    in_block = False
    for line in source.splitlines():
        text = line.strip()
        if in_block:
            end = text.find("*/")
            if end < 0:
                continue
            in_block, line, text = False, text[end + 2:], text[end + 2:].strip()
        if text.startswith("/*"):
            end = text.find("*/", 2)
            if end < 0:
                in_block = True
                continue
            line = text = text[end + 2:].strip()
        if text and not (line_comments and text.startswith("//")):
            out.append(line)
    return "\n".join(out) + "\n"


def objects() -> list[ClientObject]:
    """What the deploy uploads: versioned assets first, the entry points last (they reference the assets)."""
    v = version()
    prefix = f"{ASSET_PREFIX}{v}/"
    entries = set(ENTRY_POINTS.values())
    assets = [ClientObject(f"{prefix[1:]}{name}", _body(name, prefix), TYPES[Path(name).suffix], IMMUTABLE)
              for name in client_files() if name not in entries]
    return assets + [ClientObject(name, _body(name, prefix), TYPES[Path(name).suffix], REVALIDATE)
                     for name in sorted(entries)]


def is_client_path(path: str) -> bool:
    """The client's part of the URL space (CloudFront sends the rest, /api/*, to the API)."""
    return path in ENTRY_POINTS or path.startswith(ASSET_PREFIX)


def local_file(path: str) -> tuple[str, bytes, str] | None:
    """The file the local server answers `path` (no query) with, as (content type, body, cache control):
    an exact match only, so `/web/app.js/` or `/web/app.js;.html` is no file."""
    name = ENTRY_POINTS.get(path)
    if name is None and path.startswith(ASSET_PREFIX):
        candidate = path[len(ASSET_PREFIX):]
        if candidate in client_files() and candidate not in ENTRY_POINTS.values():
            name = candidate
    if name is None:
        return None
    return TYPES[Path(name).suffix], _body(name, ASSET_PREFIX), REVALIDATE
