"""/health: readiness, quarantined sessions, and stream processing (lag and set-aside records, from the
status its poller publishes).

Locally the stream pump publishes this meta item. In AWS the event source mapping does the polling, retrying
and parking, out of the functions' sight: nothing publishes it there, and IteratorAge and the stream failure
queue (with their alarms) are the report instead.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from . import readiness
from .deps import Deps, parse_iso

STATUS_KEY = "stream#status"
SET_ASIDE_PREFIX = "stream#set-aside#"  # one metadata entry per record the stream functions set aside
OPERATOR_ACTION = (
    "Stream records that failed deterministically were set aside at once (never retried, so no other workspace "
    "waited). Each is a meta-table entry stream#set-aside#<table>#<sequence> naming its item, change and error; "
    "its log line carries the same sequence number. Fix the cause (a defect, or data another writer stored); "
    "the item's projections and events are derived again from its current state by its next write. Then delete "
    "the entry: while any is left, /health stays degraded.")
STALE = timedelta(seconds=30)  # the poller publishes at least every few seconds while it runs
LAGGING_SECONDS = 60.0  # the same threshold as the AWS iterator-age alarm


def stream_status(deps: Deps) -> dict[str, Any] | None:
    """None where no poller publishes; else its report with `healthy` (fresh, not lagging, nothing set aside)."""
    raw = deps.store.get_meta(STATUS_KEY)
    if not raw:
        return None
    try:
        status = dict(json.loads(raw))
        stale = deps.clock() - parse_iso(str(status["checked_at"])) > STALE
        healthy = not stale and status.get("set_aside") == 0 and float(status["lag_seconds"]) < LAGGING_SECONDS
    except (ValueError, KeyError, TypeError):
        return {"healthy": False, "error": "unreadable stream status"}
    return {**status, "stale": stale, "healthy": healthy}


def set_aside(deps: Deps, record: Mapping[str, Any], exc: Exception) -> None:
    """Remember a record set aside for the operator: its table, item keys, sequence number and error (not the
    record itself, which may be as large as the item limit)."""
    dynamodb = record.get("dynamodb", {})
    table = str(record.get("eventSourceARN", "")).split("/")[1] if "/" in str(record.get("eventSourceARN", "")) \
        else "unknown"
    key = f"{SET_ASIDE_PREFIX}{table}#{dynamodb.get('SequenceNumber')}"
    value = json.dumps({"keys": dynamodb.get("Keys"), "event": record.get("eventName"),
                        "error": type(exc).__name__, "message": str(exc)[:500], "at": deps.now()}, default=str)
    deps.store.set_meta(key, value, deps.now())


def set_aside_records(deps: Deps) -> dict[str, str]:
    return deps.store.list_meta(SET_ASIDE_PREFIX)


def health(deps: Deps) -> tuple[int, dict[str, Any]]:
    """GET /health: 503 not_ready until the reconciler succeeded for this deployment; then 200, "degraded"
    while stream processing lags or set records aside, or sessions are quarantined for repair."""
    if not readiness.is_ready(deps):
        return 503, {"status": "reconciling", "ready": False,
                     "error": {"code": "not_ready", "message": "reconciliation has not succeeded yet",
                               "retryable": True}}
    body: dict[str, Any] = {"status": "ok", "ready": True}
    stream = stream_status(deps)
    if stream is not None:  # still serving: a lagging or stuck stream delays projections and events
        body["stream"] = stream
    quarantined = len(deps.store.quarantined_sessions())
    body["quarantined_sessions"] = quarantined
    aside = len(set_aside_records(deps))
    body["set_aside_records"] = aside
    if aside:
        body["operator_action"] = OPERATOR_ACTION
    if (stream is not None and not stream["healthy"]) or quarantined or aside:
        body["status"] = "degraded"
    return 200, body
