"""CORS for the configured origins only (CLARIFY_CORS_ORIGINS, comma-separated; empty by default).

The client itself needs none: CloudFront serves it and the API from one origin. Another web origin (a company
portal, a phone app's web view) is allowed by listing it: the stack parameter AllowedOrigins in AWS, the
environment locally. Any other origin gets no Access-Control-Allow-Origin, so its browser keeps the answer
from it. Preflights are answered by API Gateway (infra/hosting.py renders them from these constants) and
locally by the API server; the functions add the allow header to their own answers (app.py's middleware).
"""
from __future__ import annotations

import os

ENV = "CLARIFY_CORS_ORIGINS"
METHODS = ("GET", "POST", "PATCH", "DELETE")
HEADERS = ("Authorization", "Content-Type", "Idempotency-Key")
MAX_AGE = 600  # seconds a browser may reuse a preflight


def origins(value: str | None = None) -> frozenset[str]:
    raw = os.environ.get(ENV, "") if value is None else value
    return frozenset(o.strip() for o in raw.split(",") if o.strip())


def allowed(origin: str | None, configured: frozenset[str] | None = None) -> bool:
    return bool(origin) and "," not in str(origin) and origin in (origins() if configured is None else configured)


def response_headers(origin: str | None) -> dict[str, str]:
    """For an actual request: the allow header for a configured origin, nothing for any other."""
    if not allowed(origin):
        return {}
    return {"Access-Control-Allow-Origin": str(origin), "Vary": "Origin"}


def preflight_headers(origin: str | None) -> dict[str, str]:
    """For a preflight (OPTIONS) of a known route: what may be sent, for a configured origin only."""
    if not allowed(origin):
        return {}
    return {**response_headers(origin), "Access-Control-Allow-Methods": ", ".join(METHODS),
            "Access-Control-Allow-Headers": ", ".join(HEADERS), "Access-Control-Max-Age": str(MAX_AGE)}
