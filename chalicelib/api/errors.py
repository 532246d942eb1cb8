"""The one mapping from domain errors to HTTP statuses and the error envelope."""
from __future__ import annotations

import json
from typing import Any

from ..domain import errors as e

# Most specific first: a subclass maps before its base.
STATUS: tuple[tuple[type[e.DomainError], int], ...] = (
    (e.ValidationError, 400),
    (e.Unauthorized, 401),
    (e.NotFound, 404),
    (e.SessionUnavailable, 409),
    (e.TurnConflict, 409),
    (e.ClarificationInactive, 409),
    (e.ClarificationActive, 409),
    (e.PendingClarification, 409),
    (e.QueueFull, 409),
    (e.ItemTooLarge, 409),
    (e.ConditionFailed, 409),
    (e.Contended, 409),
    (e.AlreadyRemembered, 409),
    (e.IdempotencyMismatch, 422),
    (e.PayloadTooLarge, 413),
    (e.DispatchFailed, 502),
    (e.DispatchAmbiguous, 502),
    (e.NotReady, 503),
    (e.StoreUnavailable, 503),
)


def status_of(exc: e.DomainError) -> int:
    return next((status for cls, status in STATUS if isinstance(exc, cls)), 500)


def envelope(code: str, message: str, *, retryable: bool = False, **details: Any) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message, "retryable": retryable}
    if details:
        error["details"] = details
    return {"error": error}


def error_payload(exc: e.DomainError) -> tuple[int, dict[str, Any]]:
    return status_of(exc), envelope(exc.code, exc.message, retryable=exc.retryable, **exc.details)


def error_json(status: int, code: str, message: str, **details: Any) -> bytes:
    """For responses produced outside the app (the gateway's 401/404), in the same envelope."""
    return json.dumps(envelope(code, message, **details)).encode()
