"""The one translation of storage errors into domain outcomes. Storage internals are logged, never returned.

Every DynamoDB call of the store runs inside `storage_errors` (or `guarded`, its one-call form): a failed
condition becomes ConditionFailed carrying the item as it was (decoded by the caller's `current`), a cancelled
transaction is read by its reasons (in request order), a refused size becomes ItemTooLarge, any other refusal
StoreRejected, and everything else (throttling, a conflicting transaction, the network) StoreUnavailable,
which callers may retry. PynamoDB's exceptions (PutError, UpdateError, TransactWriteError, ...) are read
through the ClientError they wrap.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

from botocore.exceptions import BotoCoreError, ClientError
from pynamodb.exceptions import PynamoDBException

from ..domain.errors import AlreadyRemembered, ConditionFailed, ItemTooLarge, StoreRejected, StoreUnavailable

log = logging.getLogger(__name__)
T = TypeVar("T")
CONDITION_FAILED = "ConditionalCheckFailedException"
CANCELLED = "TransactionCanceledException"
Decode = Callable[[Mapping[str, Any]], Any]


def _unwrapped(exc: BaseException) -> BaseException:
    cause = getattr(exc, "cause", None) if isinstance(exc, PynamoDBException) else None
    return cause if isinstance(cause, (ClientError, BotoCoreError)) else exc


def _code(exc: BaseException) -> str:
    return str(exc.response.get("Error", {}).get("Code", "")) if isinstance(exc, ClientError) else ""


def _message(exc: BaseException) -> str:
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Message", ""))
    return str(exc)


def _current(decode: Decode | None, item: Mapping[str, Any] | None) -> Any:
    """The item at failure, if the caller wants it and it decodes (a quarantined aggregate may not)."""
    if decode is None or not item:
        return None
    try:
        return decode(item)
    except Exception:
        return None


def _refused(message: str) -> Exception:
    if "size" in message.lower():
        return ItemTooLarge("the item would exceed the 400 KB item size limit")
    log.error("the database refused a request: %s", message)
    return StoreRejected("the database refused the request")


def _cancelled(exc: ClientError, decode: Decode | None, remembered: int | None) -> Exception:
    """A cancelled transaction, by its reasons: `remembered` is the position of an idempotency record's
    creation (its failed condition: the key was used); `decode` reads the first item's current value."""
    reasons = exc.response.get("CancellationReasons", [])
    codes = [r.get("Code") for r in reasons]
    if remembered is not None and len(codes) > remembered and codes[remembered] == "ConditionalCheckFailed":
        return AlreadyRemembered("this idempotency key was already used")
    if "ConditionalCheckFailed" in codes:
        first = reasons[0] if codes[0] == "ConditionalCheckFailed" else {}
        return ConditionFailed("the item changed", current=_current(decode, first.get("Item")))
    invalid = next((r for r in reasons if r.get("Code") == "ValidationError"), None)
    if invalid is not None:
        return _refused(str(invalid.get("Message", "")))
    log.warning("transaction cancelled: %s", codes)
    return StoreUnavailable("the database did not answer; retry")


def translate(exc: BaseException, *, current: Decode | None = None, remembered: int | None = None) -> Exception:
    """The domain outcome of a storage exception (see the module's docstring)."""
    exc = _unwrapped(exc)
    code = _code(exc)
    if code == CONDITION_FAILED:
        item = exc.response.get("Item") if isinstance(exc, ClientError) else None
        return ConditionFailed("the item changed or already exists", current=_current(current, item))
    if code == CANCELLED and isinstance(exc, ClientError):
        return _cancelled(exc, current, remembered)
    if code == "ValidationException":
        return _refused(_message(exc))
    log.warning("storage error: %s", exc)
    return StoreUnavailable("the database did not answer; retry")


@contextmanager
def storage_errors(*, current: Decode | None = None, remembered: int | None = None) -> Iterator[None]:
    """Storage calls inside leave with domain outcomes only. `current` decodes the stored item a failed
    condition returns (ReturnValuesOnConditionCheckFailure); `remembered`: see `_cancelled`."""
    try:
        yield
    except (ClientError, BotoCoreError, PynamoDBException) as exc:
        raise translate(exc, current=current, remembered=remembered) from exc


def guarded(fn: Callable[[], T], *, current: Decode | None = None) -> T:
    """Run one storage call inside `storage_errors`."""
    with storage_errors(current=current):
        return fn()
