"""One domain error hierarchy. Each error has a stable code and says whether the same request can succeed
later unchanged (`retryable`); chalicelib.api.errors alone maps them to HTTP statuses."""
from __future__ import annotations

from typing import Any

from .model import Session, Task


class DomainError(Exception):
    code = "internal_error"
    retryable = False

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


class PayloadTooLarge(DomainError):
    code = "payload_too_large"


class ValidationError(DomainError):
    code = "validation_error"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message, field=field)
        self.field = field


class Unauthorized(DomainError):
    code = "unauthorized"


class NotFound(DomainError):
    code = "not_found"


class SessionUnavailable(DomainError):
    code = "session_unavailable"


class Contended(DomainError):
    """Conditional writes kept losing to concurrent changes: the race settles, so a retry can succeed."""

    code, retryable = "conflict", True


class TurnConflict(DomainError):
    code = "turn_conflict"


class ClarificationInactive(DomainError):
    code = "clarification_inactive"


class ClarificationActive(DomainError):
    code = "clarification_active"


class PendingClarification(DomainError):
    code = "pending_clarification"


class QueueFull(DomainError):
    """The session's message queue is full; the same message fits once the agent's turn ends."""

    code = "queue_full"


class IdempotencyMismatch(DomainError):
    code = "idempotency_mismatch"


class DispatchFailed(DomainError):
    """The agent did not accept; the state was restored, so the same request can succeed later."""

    code, retryable = "dispatch_failed", True


class DispatchAmbiguous(DomainError):
    """The agent may have it: never sent again."""

    code = "dispatch_ambiguous"


class NotReady(DomainError):
    code, retryable = "not_ready", True


class ConditionFailed(DomainError):
    """A conditional write lost; `current` is the stored item (a Session or Task) as it was then."""

    code = "conflict"

    def __init__(self, message: str, current: Session | Task | None = None) -> None:
        super().__init__(message)
        self.current = current

    @property
    def session(self) -> Session | None:
        return self.current if isinstance(self.current, Session) else None


class StoreUnavailable(DomainError):
    code, retryable = "store_unavailable", True


class StoreRejected(DomainError):
    """The database refused the request itself (a malformed write): a defect, not a transient fault."""


class ItemTooLarge(DomainError):
    """A write would take a stored item past DynamoDB's 400 KB item limit; nothing was written."""

    code = "session_full"


class AlreadyRemembered(DomainError):
    """An idempotency key was already used: the caller reads the remembered outcome."""

    code = "idempotency_conflict"


def by_code(code: str) -> type[DomainError]:
    """The error class behind a stored code (a remembered outcome is replayed as the same error)."""
    classes: list[type[DomainError]] = [DomainError]
    i = 0
    while i < len(classes):
        classes.extend(classes[i].__subclasses__())
        i += 1
    return next((c for c in classes if c.code == code), DomainError)
