"""Answering a bundle: validate, claim in one conditional write, then deliver live or resume detached.

Live: the claim carries a delivery intent; the agent's waiter receives it, durably confirms (arming the
watchdog in the same write) and only then uses it. The responder waits a bounded time for that
confirmation; if none comes the waiter is evidently gone, and the same claim continues as a detached answer
in the same request. Confirmation and that fall-through are conditional on the same unconfirmed claim, so
exactly one of them wins.
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
    Contended,
    DispatchAmbiguous,
    IdempotencyMismatch,
    NotFound,
)
from ..domain.model import Bundle, Delivery, Session, Watchdog
from ..domain.respond import Outcome, outcome, skip_text, summary_text
from ..domain.rules import bundle_is_active, moved_on, row_pending
from . import archive
from .clarifications import bundle_for_agent, bundle_for_user, inactive, located_for_user
from .deps import Deps
from .polling import poll
from .results import Responded
from .resume import fall_through, publish_restored, respond_detached
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
        found = archive.find(deps, s, bundle.id)  # a retry may find it settled and moved to history
        if found is None:
            raise NotFound("clarification not found")
        s, b = found
        replay = _replay(deps, s.id, b, key, result)
        if replay is not None:
            return replay
        if not bundle_is_active(s, b):
            raise _inactive_with_winner(s, b, deps.now())
        rows = [r.question.question_id for r in b.rows if row_pending(r)]
        return _deliver(deps, s, b, result, rows, key)
    return on_conflict(attempt, session, fresh_session(deps, session.id, "clarification not found"),
                       "the clarification")


def _replay(deps: Deps, session_id: str, bundle: Bundle, key: str, outcome: Outcome) -> Responded | None:
    """A retry with the same key gets the original result; the same key with another body is a 422."""
    d = bundle.delivery
    if not key or d is None or d.idempotency_key != key:
        return None
    if d.fingerprint != outcome.fingerprint:
        raise IdempotencyMismatch("this Idempotency-Key was used with a different response")
    if d.pending:  # the original request is still delivering it: its result is this request's result
        settled = _settled(deps, session_id, bundle.id, d.delivery_id, deps.settings.max_waiter_poll)
        if settled is None:
            raise Contended("the original request is still delivering this answer; retry")
        if settled is _GONE:
            return None  # it was handed back (restored): this retry answers anew
        d = settled
    return _result(bundle.id, d)


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
    """Claim with a live delivery intent and wait (bounded) for the waiter's durable confirmation. Nobody
    confirming means the waiter is gone: the same claim then continues as a detached answer in this request
    (a rejection is recorded terminal, an answer resumes the agent), so the user never has to resend."""
    now = deps.now()
    delivery = Delivery(deps.new_id(), tuple(rows), outcome.status, "live", now, deps.deadline(), key,
                        outcome.fingerprint)
    obs.bind(delivery=delivery.delivery_id)
    deps.store.claim(session.id, bundle.id, {q: outcome.response_for(q) for q in rows}, status=outcome.status,
                     delivery=delivery, reservation=None, at=now)
    settled = _settled(deps, session.id, bundle.id, delivery.delivery_id, deps.settings.confirm_wait)
    if settled is not None:
        return _result(bundle.id, settled)

    def settle(current: Session) -> Responded:
        """Decide on the freshest aggregate; a lost conditional write decides again."""
        b = _located(deps, current, bundle.id)  # settled and moved to history meanwhile: its record tells
        d = b.delivery if b else None
        if b is None:
            raise NotFound("clarification not found")  # deleted meanwhile: it no longer exists
        if d is None or d.delivery_id != delivery.delivery_id:
            # The claim was handed back (restored past its owner deadline) or replaced: the question exists,
            # so the answer was not taken and the same request may be made again.
            raise Contended("the answer was handed back before the agent took it; send it again")
        if not d.pending:  # the waiter's confirmation won the race (it owns its write to completion)
            return _result(bundle.id, d)
        if outcome.status == "rejected":
            deps.store.confirm_delivery(session.id, bundle.id, delivery.delivery_id, result="recorded",
                                        watchdog=None, at=deps.now())
            return Responded(bundle.id, "rejected", "recorded")
        if moved_on(current, b):
            # The question moved on (a newer turn, an ended session) before anyone took the answer: retire
            # the claim, as the reconciler would, and say why the question is no longer answerable.
            retired = deps.store.retire_claim(session.id, bundle.id, delivery.delivery_id, rows,
                                              outcome=outcome.status, at=deps.now())
            publish_restored(deps, retired, bundle.id, rows)
            raise ClarificationInactive("the question moved on before the answer could be delivered; send it as "
                                        "a new message",
                                        reason="session_terminal" if retired.terminal else "superseded")
        return fall_through(deps, current, b, delivery)

    first = deps.store.get_session(session.id)
    if first is None:
        raise NotFound("clarification not found")
    return on_conflict(settle, first, fresh_session(deps, session.id, "clarification not found"))


def _settled(deps: Deps, session_id: str, bundle_id: str, delivery_id: str, timeout: float) -> Delivery | None:
    """Wait (backing off) until this claim is confirmed or settled otherwise; None if it is still pending."""
    def probe() -> Delivery | None:
        s = deps.store.get_session(session_id)
        b = _located(deps, s, bundle_id) if s else None
        d = b.delivery if b else None
        if d is None or d.delivery_id != delivery_id or not d.pending:
            return d or _GONE
        return None
    found = poll(deps, probe, timeout)
    return None if found is None or found is _GONE else found


_GONE = Delivery("", (), "", "", "", "")  # the claim was restored or replaced: nothing of it left to report


def _located(deps: Deps, session: Session, bundle_id: str) -> Bundle | None:
    """The bundle in the aggregate, else in its history record (a settled one moves there right after)."""
    found = archive.find(deps, session, bundle_id)
    return found[1] if found else None


def _result(bundle_id: str, d: Delivery) -> Responded:
    """What the request that made this (settled) claim answered, for it and for its retries."""
    if d.result == "ambiguous":
        raise DispatchAmbiguous("the agent may have received the answer; it will not be sent again")
    return Responded(bundle_id, d.outcome, d.result if d.result in ("live", "resumed") else "recorded")


# ------------------------------------------------------------------ the agent's side
@obs.long_poll("waiter")
def wait(deps: Deps, caller: Caller, clarification_id: str, timeout: int) -> tuple[int, dict[str, Any]]:
    """Long-poll for a live outcome, reading the aggregate with back-off. Renews the waiter lease once."""
    session, bundle = bundle_for_agent(deps, caller, clarification_id)
    b = session.bundle(bundle.id)
    if b is not None and bundle_is_active(session, b) and not clarify.is_detached(b, deps.now()):
        rows = [r.question.question_id for r in b.rows if row_pending(r)]
        lease = deps.after(timedelta(seconds=timeout) + deps.settings.waiter_lease_margin)
        try:
            session = deps.store.renew_waiter(session.id, b.id, rows, until=lease, at=deps.now())
        except ConditionFailed as exc:
            session = exc.session or session
    first = [session]

    def probe() -> tuple[int, dict[str, Any]] | None:
        current = first.pop() if first else deps.store.get_session(session.id)
        located = archive.find(deps, current, bundle.id) if current else None  # moved to history once settled
        if located is None:
            raise NotFound("clarification not found")
        return _waiter_view(deps, *located)
    return poll(deps, probe, timeout) or (200, {"state": "pending"})


def _waiter_view(deps: Deps, session: Session, b: Bundle) -> tuple[int, dict[str, Any]] | None:
    """What the waiter learns now: a live claim to confirm, the end of its wait, or nothing yet (None)."""
    d = b.delivery
    if d is not None and d.pending and d.mode == "live":
        return 200, {"state": d.outcome, "response": outcome_payload(b), "delivery_id": d.delivery_id}
    if not bundle_is_active(session, b):
        return 410, {"state": "inactive", "reason": inactive(session, b, deps.now()).details.get("reason")}
    if clarify.is_detached(b, deps.now()):
        return 410, {"state": "inactive", "reason": "detached"}
    return None


def confirm(deps: Deps, caller: Caller, clarification_id: str, command: Confirm) -> dict[str, Any]:
    """Durable delivery confirmation: retires the intent and arms the watchdog in the same write."""
    delivery_id = command.delivery_id
    session, bundle = bundle_for_agent(deps, caller, clarification_id)
    d = bundle.delivery
    if d is None or d.delivery_id != delivery_id or d.mode != "live":
        raise ClarificationInactive("this delivery was restored or lost", reason="delivery_lost")
    responses = {r.question.question_id: dict(r.response) for r in bundle.rows if r.response is not None}
    text = (summary_text(bundle, responses) if d.outcome == "answered"
            else skip_text(str(outcome_payload(bundle).get("reject_reason", ""))))
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
    """Hide an inactive question's answer surface for this user everywhere; sends and resumes nothing. It is
    marked wherever it lives (the aggregate, or its history record once archived)."""
    session, bundle, _ = located_for_user(deps, caller, clarification_id)
    if bundle_is_active(session, bundle):
        raise ClarificationActive("the question is still active: answer it or skip it")
    try:
        archive.mark(deps, session, bundle, dismissed_by=clarify.dismissal_key(caller.sub))
    except ConditionFailed as exc:
        raise ClarificationActive("the question is still active: answer it or skip it") from exc
    return {"clarification_id": bundle.id, "dismissed": True}


__all__ = ["respond", "wait", "confirm", "dismiss", "Responded"]
