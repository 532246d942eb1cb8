"""One domain error hierarchy; chalicelib.api.errors maps it to the HTTP envelope."""
from __future__ import annotations

from typing import Any


class DomainError(Exception):
    code = "internal_error"
    status = 500
    retryable = False

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


class ValidationError(DomainError):
    code, status = "validation_error", 400

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message, field=field)
        self.field = field


class Unauthorized(DomainError):
    code, status = "unauthorized", 401


class NotFound(DomainError):
    code, status = "not_found", 404


class SessionUnavailable(DomainError):
    code, status = "session_unavailable", 409


class TurnConflict(DomainError):
    code, status = "turn_conflict", 409


class ClarificationInactive(DomainError):
    code, status = "clarification_inactive", 409


class PendingClarification(DomainError):
    code, status = "pending_clarification", 409


class IdempotencyMismatch(DomainError):
    code, status = "idempotency_mismatch", 422


class DispatchFailed(DomainError):
    code, status, retryable = "dispatch_failed", 502, True


class DispatchAmbiguous(DomainError):
    code, status, retryable = "dispatch_ambiguous", 502, False


class NotReady(DomainError):
    code, status, retryable = "not_ready", 503, True


class ConditionFailed(DomainError):
    """A conditional write lost: the store's view of the item at failure time is attached."""

    code, status = "conflict", 409

    def __init__(self, message: str, current: Any = None) -> None:
        super().__init__(message)
        self.current = current


class StoreUnavailable(DomainError):
    code, status, retryable = "store_unavailable", 503, True


class AlreadyRemembered(DomainError):
    """An idempotency key was already used: the caller reads the remembered outcome."""

    code, status = "idempotency_conflict", 409


class ClarificationActive(DomainError):
    code, status = "clarification_active", 409


class QueueFull(DomainError):
    code, status = "queue_full", 409  # not retryable: the same request fails until the agent's turn ends
