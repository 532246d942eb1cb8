"""The one translation of storage errors into domain errors. Storage internals are logged, never returned."""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from botocore.exceptions import BotoCoreError, ClientError
from pynamodb.exceptions import PynamoDBException

from ..domain.errors import ConditionFailed, ItemTooLarge, StoreRejected, StoreUnavailable

log = logging.getLogger(__name__)
T = TypeVar("T")
CONDITION_FAILED = "ConditionalCheckFailedException"


def error_code(exc: BaseException) -> str:
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code", ""))
    return str(getattr(exc, "cause_response_code", "") or "")


def _message(exc: BaseException) -> str:
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Message", ""))
    return str(getattr(exc, "cause_response_message", "") or exc)


def translate(exc: BaseException, *, current: Any = None) -> Exception:
    """The domain error for a storage exception (ConditionFailed carries `current`, the item at failure)."""
    code = error_code(exc)
    if code == CONDITION_FAILED:
        return ConditionFailed("the item changed or already exists", current=current)
    if code == "ValidationException":
        if "size" in _message(exc).lower():
            return ItemTooLarge("the item would exceed the 400 KB item size limit")
        log.error("the database refused a request: %s", _message(exc))
        return StoreRejected("the database refused the request")
    log.warning("storage error: %s", exc)
    return StoreUnavailable("the database did not answer; retry")


def guarded(fn: Callable[[], T]) -> T:
    """Run a storage call; its errors leave as domain errors."""
    try:
        return fn()
    except (ClientError, BotoCoreError, PynamoDBException) as exc:
        raise translate(exc) from exc
