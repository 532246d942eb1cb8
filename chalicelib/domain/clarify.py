"""Clarification bundles: ids, derived states, and which rows an operation may touch.

Everything here is a pure function of the aggregate; the store turns the same decisions into conditions.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import replace

from .model import Bundle, Row, Session
from .rules import PENDING, bundle_is_active, row_pending, row_status
from .validation import MAX_ID

SEPARATOR = "."


def clarification_id(session_id: str, suffix: str) -> str:
    """The id names its session, so every route finds the aggregate without an extra lookup."""
    return f"{session_id}{SEPARATOR}{suffix}"


def session_of(clarification: str) -> str | None:
    session_id, sep, suffix = clarification.partition(SEPARATOR)
    if not sep or not session_id or not suffix or len(clarification) > 2 * MAX_ID:
        return None
    return session_id


# ------------------------------------------------------------------ derived state
def derived_state(session: Session, bundle: Bundle, now: str) -> str:
    """The bundle's state for clients as of `now`, from the rule; never stored."""
    if bundle.delivery is not None and bundle.delivery.pending:
        return "delivery_claimed"
    if any(row_pending(r) for r in bundle.rows):
        if bundle_is_active(session, bundle):
            return "active_detached" if is_detached(bundle, now) else "active_live"
        current = session.current_turn is not None and bundle.turn_id == session.current_turn.id
        return "expired" if session.terminal and current else "superseded"
    statuses = {row_status(r.status) for r in bundle.rows}
    for status in ("answered", "rejected", "expired", "cancelled"):
        if status in statuses:
            return status
    return "superseded"


# States of a question the agent no longer waits for: it moved on (a newer turn), the session ended, or the
# agent withdrew it. An unanswered one may be answered as an ordinary new message.
LATE_STATES = frozenset({"superseded", "expired", "cancelled"})


def late_answer_allowed(session: Session, bundle: Bundle, now: str) -> bool:
    """THE definition of "may be answered late": the transcript offers it, respond's 409 says it, and a
    message's `in_reply_to` is admitted by it."""
    return derived_state(session, bundle, now) in LATE_STATES and all(r.response is None for r in bundle.rows)


def is_detached(bundle: Bundle, now: str) -> bool:
    """Detached: a pending row carries agent_disconnected, or the waiter let its lease lapse by `now`."""
    if any(r.agent_disconnected for r in bundle.rows if row_pending(r)):
        return True
    return bundle.waiter_until is not None and bundle.waiter_until < now


def dismissal_key(user: str) -> str:
    """The map key a user's dismissal is stored under: derived, so no user-controlled text is ever a key."""
    return "u" + hashlib.sha256(user.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def visible_rows(bundle: Bundle) -> tuple[Row, ...]:
    """Rows as clients may see them: a claim whose delivery is not yet confirmed is not published."""
    d = bundle.delivery
    if d is None or not d.pending:
        return bundle.rows
    return tuple(replace(r, status=PENDING, response=None) if r.question.question_id in d.row_ids else r
                 for r in bundle.rows)


def detachable_rows(session: Session, bundle: Bundle) -> list[str]:
    """Pending, not-yet-detached rows of an active bundle: exactly what a detach may change."""
    if not bundle_is_active(session, bundle):
        return []
    return [r.question.question_id for r in bundle.rows if row_pending(r) and not r.agent_disconnected]


def pending_rows(session: Session, bundle: Bundle) -> list[str]:
    if not bundle_is_active(session, bundle):
        return []
    return [r.question.question_id for r in bundle.rows if row_pending(r)]


def _per_bundle(session: Session, rows_of: Callable[[Session, Bundle], list[str]]) -> dict[str, list[str]]:
    return {b.id: rows for b in session.bundles if (rows := rows_of(session, b))}


def current_turn_pending(session: Session) -> dict[str, list[str]]:
    """Pending rows of every active bundle: what a terminal transition expires."""
    return _per_bundle(session, pending_rows)


def current_turn_detachable(session: Session) -> dict[str, list[str]]:
    """What the turn-completion detach pass changes."""
    return _per_bundle(session, detachable_rows)


__all__ = ["PENDING", "LATE_STATES", "clarification_id", "session_of", "derived_state", "late_answer_allowed",
           "detachable_rows", "pending_rows",
           "current_turn_pending", "current_turn_detachable", "is_detached", "dismissal_key"]
