"""What a client may learn about a storage failure: whether retrying can help, never the storage's own text."""
from __future__ import annotations

import logging
from typing import Any

from botocore.exceptions import ClientError

from ..domain.errors import StoreUnavailable
from .errors import envelope

log = logging.getLogger(__name__)
# The database refused the request itself (item too large, a key or number it cannot hold): the same request
# fails again, so it is not retryable. Every other failure (throttling, a timeout, a dropped connection) is.
DETERMINISTIC = {"ValidationException", "SerializationException", "ItemCollectionSizeLimitExceededException",
                 "ValidationError"}


def store_failure(exc: StoreUnavailable) -> tuple[int, dict[str, Any]]:
    """Logs the internals and answers 503 store_unavailable (retryable) or 500 internal_error (not)."""
    log.error("storage failure: %s", exc.message, exc_info=exc)
    if _codes(exc.__cause__) & DETERMINISTIC:
        return 500, envelope("internal_error", "the request could not be stored", retryable=False)
    return 503, envelope("store_unavailable", "the database did not answer; retry shortly", retryable=True)


def _codes(cause: BaseException | None) -> set[str]:
    """Error codes of a botocore or PynamoDB failure, including a cancelled transaction's reasons."""
    codes: set[str] = set()
    code = getattr(cause, "cause_response_code", None)  # PynamoDB wraps the ClientError
    if code:
        codes.add(str(code))
    inner = getattr(cause, "cause", None)
    for err in (cause, inner):
        if isinstance(err, ClientError):
            codes.add(str(err.response.get("Error", {}).get("Code", "")))
            codes.update(str(r.get("Code", "")) for r in err.response.get("CancellationReasons", []) or [])
    return codes
