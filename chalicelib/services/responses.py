"""Answering a bundle: validate, claim in one conditional write, then deliver live or resume detached.

Live: the claim carries a delivery intent; the agent's waiter receives it, durably confirms (arming the
watchdog in the same write) and only then uses it. The responder waits a bounded time for that
confirmation; if none comes it restores exactly the claimed rows (detached: the waiter is evidently gone).
Confirmation and restore are conditional on the same unconfirmed claim, so exactly one of them wins.
"""
from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from .. import observability as obs
from ..auth.tokens import Caller
from ..domain import clarify
from ..domain.commands import Confirm, Respond
from ..domain.errors import (
    ClarificationActive,
    ClarificationInactive,
    ConditionFailed,
    DispatchFailed,
    IdempotencyMismatch,
    NotFound,
)
from ..domain.model import Bundle, Delivery, Session, Watchdog
from ..domain.public import clarification_view
from ..domain.respond import Outcome, outcome, summary_text
from ..domain.rules import bundle_is_active, row_pending
from .clarifications import bundle_for_agent, bundle_for_user, inactive
from .deps import Deps
from .events import emit_for
from .projection import refresh_task_summary
from .results import Responded
from .resume import respond_detached
from .retry import fresh_session, on_conflict

log = logging.getLogger(__name__)


def outcome_payload(bundle: Bundle) -> dict[str, Any]:
    """What a winner answered, for a loser's 409 and for the waiter: clients tell rejection from answers."""
    rows = [r for r in bundle.rows if r.response is not None]
    if any(r.response and r.response.get("rejected") for r in rows):
        reason = next((str(r.response.get("reject_reason", "")) for r in rows if r.response), "")
        return {"status": "rejected", "rejected": True, "reject_reason": reason, "answers": []}
    return {"status": "answered", "rejected": False,
            "answers": [dict(r.response) for r in rows if r.response is not None]}


def _inactive_with_winner(session: Session, bundle: Bundle, now: str) -> ClarificationInactive:
    error = inactive(session, bundle, now)
    if error.details.get("reason") in ("answered", "rejected"):
        error.details["response"] = outcome_payload(bundle)
    return error


def respond(deps: Deps, caller: Caller, clarification_id: str, command: Respond, key: str) -> Responded:
    """Claim the bundle's pending rows with this outcome, then deliver it live or resume the agent.

    `key` is the Idempotency-Key ("" for none): a retry with it gets the original result.
    """
    session, bundle = bundle_for_user(deps, caller, clarification_id)
    pending = [r.question.question_id for r in bundle.rows if row_pending(r)]
    result = outcome(command, bundle, pending or [r.question.question_id for r in bundle.rows])

    def attempt(s: Session) -> Responded:
        b = s.bundle(bundle.id)
        if b is None:
            raise NotFound("clarification not found")
        replay = _replay(b, key, result)
        if replay is not None:
            return replay
        if not bundle_is_active(s, b):
            raise _inactive_with_winner(s, b, deps.now())
        rows = [r.question.question_id for r in b.rows if row_pending(r)]
        return _deliver(deps, s, b, result, rows, key)
    return on_conflict(attempt, session, fresh_session(deps, session.id, "clarification not found"),
                       "the clarification")


def _replay(bundle: Bundle, key: str, outcome: Outcome) -> Responded | None:
    """A retry with the same key gets the original result; the same key with another body is a 422."""
    d = bundle.delivery
    if not key or d is None or d.idempotency_key != key:
        return None
    if d.fingerprint != outcome.fingerprint:
        raise IdempotencyMismatch("this Idempotency-Key was used with a different response")
    if d.pending:
        return None  # still being delivered: fall through, the claim condition decides
    result = {"live": "live", "resumed": "resumed"}.get(d.result or "", "recorded")
    return Responded(bundle.id, d.outcome, result)


def _deliver(deps: Deps, session: Session, bundle: Bundle, outcome: Outcome, rows: list[str],
             key: str) -> Responded:
    responses = {q: outcome.response_for(q) for q in rows}
    now = deps.now()
    detached = clarify.is_detached(bundle, now)
    if detached and outcome.status == "rejected":
        # A rejection of a detached bundle is terminal at once: nobody to deliver to, nothing to resume.
        delivery = Delivery(deps.new_id(), tuple(rows), "rejected", "detached", now, now, key, outcome.fingerprint,
                            confirmed_at=now, result="recorded")
        obs.bind(delivery=delivery.delivery_id)
        deps.store.claim(session.id, bundle.id, responses, status="rejected", delivery=delivery, reservation=None,
                         at=now)
        return Responded(bundle.id, "rejected", "recorded")
    if detached:
        return respond_detached(deps, session, bundle, outcome, rows, key)
    return _deliver_live(deps, session, bundle, outcome, rows, key)


def _deliver_live(deps: Deps, session: Session, bundle: Bundle, outcome: Outcome, rows: list[str],
                  key: str) -> Responded:
    now = deps.now()
    delivery = Delivery(deps.new_id(), tuple(rows), outcome.status, "live", now, deps.deadline(), key,
                        outcome.fingerprint)
    obs.bind(delivery=delivery.delivery_id)
    deps.store.claim(session.id, bundle.id, {q: outcome.response_for(q) for q in rows}, status=outcome.status,
                     delivery=delivery, reservation=None, at=now)
    if _await_confirmation(deps, session.id, bundle.id, delivery.delivery_id):
        return Responded(bundle.id, outcome.status, "live")
    try:
        restored = deps.store.restore_claim(session.id, bundle.id, delivery.delivery_id, rows,
                                            outcome=outcome.status, detach=True, at=deps.now())
    except ConditionFailed as exc:
        # Confirmation won the race (it owns its write to completion), or the turn moved on.
        current = exc.current if isinstance(exc.current, Session) else None
        b = current.bundle(bundle.id) if current else None
        if b and b.delivery and b.delivery.delivery_id == delivery.delivery_id and not b.delivery.pending:
            return Responded(bundle.id, outcome.status, "live")
        raise DispatchFailed("the answer could not be delivered and the question is no longer active") from exc
    obs.count(obs.RESTORES, cause="unconfirmed")
    summary_error = publish_restored(deps, restored, bundle.id, rows)
    raise DispatchFailed("no agent confirmed the answer in time; the question is now detached, so a retry "
                         "resumes the agent", restored=True, **({"summary_error": summary_error}
                                                               if summary_error else {}))


def _await_confirmation(deps: Deps, session_id: str, bundle_id: str, delivery_id: str) -> bool:
    waited = 0.0
    while True:
        s = deps.store.get_session(session_id)
        b = s.bundle(bundle_id) if s else None
        d = b.delivery if b else None
        if d is None or d.delivery_id != delivery_id:
            return False
        if not d.pending:
            return True
        if waited >= deps.settings.confirm_wait:
            return False
        deps.sleep(deps.settings.poll_interval)
        waited += deps.settings.poll_interval


def publish_restored(deps: Deps, session: Session, bundle_id: str, rows: list[str]) -> str | None:
    """Restored rows are published after the commit even if the summary refresh fails (then reported)."""
    bundle = session.bundle(bundle_id)
    if bundle is not None:
        emit_for(deps, session, f"message.updated:{bundle_id}:{session.version}", "message.updated",
                 session.updated_at, {**clarification_view(session, bundle, now=session.updated_at),
                                      "changed_question_ids": rows})
    try:
        refresh_task_summary(deps, session.task_id, fresh=session)
    except Exception as exc:  # durable pending state is authoritative; the retry stays safe
        log.warning("summary refresh after restore of %s failed: %s", bundle_id, exc)
        return str(exc)
    return None


# ------------------------------------------------------------------ the agent's side
@obs.long_poll("waiter")
def wait(deps: Deps, caller: Caller, clarification_id: str, timeout: int) -> tuple[int, dict[str, Any]]:
    """Long-poll for a live outcome. Renews the waiter lease once per poll."""
    session, bundle = bundle_for_agent(deps, caller, clarification_id)
    waited, renewed = 0.0, False
    while True:
        b = session.bundle(bundle.id)
        if b is None:
            raise NotFound("clarification not found")
        d = b.delivery
        if d is not None and d.pending and d.mode == "live":
            return 200, {"state": d.outcome, "response": outcome_payload(b), "delivery_id": d.delivery_id}
        if not bundle_is_active(session, b):
            return 410, {"state": "inactive", "reason": inactive(session, b, deps.now()).details.get("reason")}
        if clarify.is_detached(b, deps.now()):
            return 410, {"state": "inactive", "reason": "detached"}
        if not renewed:
            rows = [r.question.question_id for r in b.rows if row_pending(r)]
            lease = deps.after(timedelta(seconds=timeout) + deps.settings.waiter_lease_margin)
            try:
                session = deps.store.renew_waiter(session.id, b.id, rows, until=lease, at=deps.now())
                renewed = True
                continue
            except ConditionFailed:
                pass
        if waited >= timeout:
            return 200, {"state": "pending"}
        deps.sleep(deps.settings.poll_interval)
        waited += deps.settings.poll_interval
        fresh = deps.store.get_session(session.id)
        if fresh is None:
            raise NotFound("clarification not found")
        session = fresh


def confirm(deps: Deps, caller: Caller, clarification_id: str, command: Confirm) -> dict[str, Any]:
    """Durable delivery confirmation: retires the intent and arms the watchdog in the same write."""
    delivery_id = command.delivery_id
    session, bundle = bundle_for_agent(deps, caller, clarification_id)
    d = bundle.delivery
    if d is None or d.delivery_id != delivery_id or d.mode != "live":
        raise ClarificationInactive("this delivery was restored or lost", reason="delivery_lost")
    responses = {r.question.question_id: dict(r.response) for r in bundle.rows if r.response is not None}
    text = (summary_text(bundle, responses) if d.outcome == "answered"
            else "The user skipped your question. Continue without that information.")
    due = deps.after(deps.settings.watchdog_timeout)
    watchdog = Watchdog(clarification_id=bundle.id, turn_id=bundle.turn_id, execution_id=session.execution_id,
                        prompt_generation=session.generation, due=due, text=text)
    try:
        deps.store.confirm_delivery(session.id, bundle.id, d.delivery_id, result="live", watchdog=watchdog,
                                    at=deps.now())
    except ConditionFailed as exc:
        raise ClarificationInactive("this delivery was restored or lost", reason="delivery_lost") from exc
    return {"confirmed": True, "delivery_id": d.delivery_id}


def dismiss(deps: Deps, caller: Caller, clarification_id: str) -> dict[str, Any]:
    """Hide an inactive question's answer surface for this user everywhere; sends and resumes nothing."""
    session, bundle = bundle_for_user(deps, caller, clarification_id)
    if bundle_is_active(session, bundle):
        raise ClarificationActive("the question is still active: answer it or skip it")
    rows = [r.question.question_id for r in bundle.rows]
    try:
        deps.store.dismiss(session.id, bundle.id, rows, clarify.dismissal_key(caller.sub), deps.now())
    except ConditionFailed as exc:
        raise ClarificationActive("the question is still active: answer it or skip it") from exc
    return {"clarification_id": bundle.id, "dismissed": True}


__all__ = ["respond", "wait", "confirm", "dismiss", "Responded"]
