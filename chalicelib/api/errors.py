"""The one mapping from domain errors to the HTTP error envelope."""
from __future__ import annotations

import json
from typing import Any

from ..domain.errors import DomainError


def envelope(code: str, message: str, *, retryable: bool = False, **details: Any) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message, "retryable": retryable}
    if details:
        error["details"] = details
    return {"error": error}


def error_payload(exc: DomainError) -> tuple[int, dict[str, Any]]:
    return exc.status, envelope(exc.code, exc.message, retryable=exc.retryable, **exc.details)


def error_json(status: int, code: str, message: str, **details: Any) -> bytes:
    """For responses produced outside the app (the gateway's 401/404), in the same envelope."""
    return json.dumps(envelope(code, message, **details)).encode()
