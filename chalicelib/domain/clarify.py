"""Clarification bundles: validation of an ask, derived states, and which rows an operation may touch.

Everything here is a pure function of the aggregate; the store turns the same decisions into conditions.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any

from .errors import ValidationError
from .model import Bundle, Option, Question, Row, Session
from .rules import PENDING, bundle_is_active, row_pending, row_status
from .validation import MAX_ID

MAX_QUESTIONS, MIN_OPTIONS, MAX_OPTIONS = 4, 2, 6
MAX_PROMPT, MAX_LABEL, MAX_DESCRIPTION, MAX_CONTEXT = 2000, 200, 1000, 4000
SEPARATOR = "."


def clarification_id(session_id: str, suffix: str) -> str:
    """The id names its session, so every route finds the aggregate without an extra lookup."""
    return f"{session_id}{SEPARATOR}{suffix}"


def session_of(clarification: str) -> str | None:
    session_id, sep, suffix = clarification.partition(SEPARATOR)
    if not sep or not session_id or not suffix or len(clarification) > 2 * MAX_ID:
        return None
    return session_id


def parse_questions(body: Mapping[str, Any]) -> tuple[Question, ...]:
    raw = body.get("questions")
    if not isinstance(raw, list) or not MIN_QUESTIONS <= len(raw) <= MAX_QUESTIONS:
        raise ValidationError("questions", f"questions must be a list of {MIN_QUESTIONS} to {MAX_QUESTIONS}")
    taken = {q.get("question_id") for q in raw if isinstance(q, Mapping)}
    fresh = (f"q{n}" for n in range(1, 100) if f"q{n}" not in taken)
    questions = [_question(q, i, fresh) for i, q in enumerate(raw)]
    ids = [q.question_id for q in questions]
    if len(set(ids)) != len(ids):
        raise ValidationError("questions", "question ids must be unique")
    return tuple(questions)


MIN_QUESTIONS = 1


def _question(raw: Any, index: int, fresh: Iterator[str]) -> Question:
    """Generated ids never collide with ids the agent chose for other questions or options."""
    where = f"questions[{index}]"
    if not isinstance(raw, Mapping):
        raise ValidationError(where, f"{where} must be an object")
    qid = _str(raw, "question_id", where, MAX_ID, required=False) or next(fresh)
    prompt = _str(raw, "prompt", where, MAX_PROMPT, required=True)
    title = _str(raw, "title", where, MAX_LABEL, required=False) or ""
    options_raw = raw.get("options")
    if not isinstance(options_raw, list) or not MIN_OPTIONS <= len(options_raw) <= MAX_OPTIONS:
        raise ValidationError(f"{where}.options", f"options must be a list of {MIN_OPTIONS} to {MAX_OPTIONS}")
    taken = {o.get("option_id") for o in options_raw if isinstance(o, Mapping)}
    fresh_options = (f"{qid}_opt{n}" for n in range(1, 100) if f"{qid}_opt{n}" not in taken)
    options = tuple(_option(o, f"{where}.options[{j}]", fresh_options) for j, o in enumerate(options_raw))
    if len({o.option_id for o in options}) != len(options):
        raise ValidationError(f"{where}.options", "option ids must be unique within a question")
    return Question(question_id=qid, title=title, prompt=prompt or "", options=options)


def _option(raw: Any, where: str, fresh: Iterator[str]) -> Option:
    if not isinstance(raw, Mapping):
        raise ValidationError(where, f"{where} must be an object")
    return Option(option_id=_str(raw, "option_id", where, MAX_ID, required=False) or next(fresh),
                  label=_str(raw, "label", where, MAX_LABEL, required=True) or "",
                  description=_str(raw, "description", where, MAX_DESCRIPTION, required=False) or "")


def _str(raw: Mapping[str, Any], name: str, where: str, max_len: int, *, required: bool) -> str | None:
    value = raw.get(name)
    field = f"{where}.{name}"
    if value is None:
        if required:
            raise ValidationError(field, f"{field} is required")
        return None
    if not isinstance(value, str):
        raise ValidationError(field, f"{field} must be a string")
    if len(value) > max_len:  # checked on the raw input, before trimming
        raise ValidationError(field, f"{field} must be at most {max_len} characters")
    value = value.strip()
    if required and not value:
        raise ValidationError(field, f"{field} must not be empty")
    return value


# ------------------------------------------------------------------ derived state
def derived_state(session: Session, bundle: Bundle, now: str | None = None) -> str:
    """The bundle's state for clients, from the rule; never stored."""
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


def is_detached(bundle: Bundle, now: str | None = None) -> bool:
    """Detached: a pending row carries agent_disconnected, or the waiter let its lease lapse."""
    if any(r.agent_disconnected for r in bundle.rows if row_pending(r)):
        return True
    return bool(now and bundle.waiter_until and bundle.waiter_until < now)


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


__all__ = ["PENDING", "clarification_id", "session_of", "parse_questions", "derived_state", "detachable_rows",
           "pending_rows", "current_turn_pending", "current_turn_detachable", "is_detached"]
