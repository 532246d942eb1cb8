"""A detached affirmative answer resumes the agent exactly once.

claim + reserve (one write; or a live claim nobody confirmed falls through to this) → mark attempted: the
successor becomes current (the at-most-once boundary) → agentctl (bounded) → on acceptance publish the
successor's turn.started on the event bus while the reservation (the recovery metadata) is still durable →
acknowledge: clear the reservation and retire the intent. HTTP success needs both the publication and the
acknowledgement. A failure before the marker rolls back and the answer stays retryable; after agentctl may
have it, nothing reopens the answer.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from .. import observability as obs
from ..agentctl.client import AgentctlAmbiguous, PromptOutcome, PromptRequest
from ..domain.errors import (
    ClarificationInactive,
    DispatchAmbiguous,
    DispatchFailed,
    DomainError,
    NotFound,
    SessionUnavailable,
)
from ..domain.model import Bundle, Delivery, Dispatch, Prompt, Reservation, Session, StartEvent, Turn
from ..domain.public import clarification_event_view
from ..domain.respond import Outcome, summary_text
from ..domain.rules import bundle_is_active, moved_on
from . import archive
from .deps import Deps
from .events import emit_for, turn_completed, turn_started
from .lifecycle import settle_deferred_ready
from .projection import refresh_task_summary
from .publication import publish_now
from .results import Responded

log = logging.getLogger(__name__)
ROLLBACK_ATTEMPTS = 5
SYSTEM_AUTHOR = "system:clarification"


def respond_detached(deps: Deps, session: Session, bundle: Bundle, outcome: Outcome, rows: list[str],
                     key: str) -> Responded:
    """Claim the rows and reserve the successor in one write, then resume."""
    reservation = _reservation(deps, session, bundle, rows)
    delivery = Delivery(deps.new_id(), tuple(rows), outcome.status, "detached", deps.now(), reservation.deadline,
                        key, outcome.fingerprint)
    responses = {q: outcome.response_for(q) for q in rows}
    deps.store.claim(session.id, bundle.id, responses, status=outcome.status, delivery=delivery,
                     reservation=reservation, at=deps.now())
    return resume(deps, session.id, bundle, responses, reservation, delivery)


def fall_through(deps: Deps, session: Session, bundle: Bundle, delivery: Delivery) -> Responded:
    """A live claim nobody confirmed: the same claim becomes detached with a reserved successor (one write,
    racing the waiter's confirmation), then the agent is resumed exactly once."""
    reservation = _reservation(deps, session, bundle, list(delivery.row_ids))
    deps.store.fall_through(session.id, bundle.id, delivery.delivery_id, reservation, at=deps.now())
    obs.count(obs.LIVE_FALL_THROUGHS)
    responses = {r.question.question_id: dict(r.response) for r in bundle.rows
                 if r.question.question_id in reservation.row_ids and r.response is not None}
    return resume(deps, session.id, bundle, responses, reservation,
                  replace(delivery, mode="detached", deadline=reservation.deadline))


def _reservation(deps: Deps, session: Session, bundle: Bundle, rows: list[str]) -> Reservation:
    turn = session.current_turn
    assert turn is not None
    return Reservation(turn_id=deps.new_id(), seq=session.turn_seq + 1, predecessor=turn, bundle_id=bundle.id,
                       bundle_turn_id=bundle.turn_id, row_ids=tuple(rows), generation=session.generation + 1,
                       created_at=deps.now(), deadline=deps.deadline())


def resume(deps: Deps, session_id: str, bundle: Bundle, responses: Mapping[str, Mapping[str, Any]],
           reservation: Reservation, delivery: Delivery) -> Responded:
    """From a claim of `responses` with its reservation: mark attempted, call agentctl once, publish,
    acknowledge."""
    obs.bind(delivery=delivery.delivery_id, successor_turn=reservation.turn_id, generation=reservation.generation)
    prompt = Prompt(message_id=deps.new_id(), client_message_id=f"resume-{delivery.delivery_id}",
                    turn_id=reservation.turn_id, content=summary_text(bundle, responses), author_id=SYSTEM_AUTHOR,
                    created_at=deps.now(), generation=reservation.generation, dispatch=Dispatch.ATTEMPTED,
                    deadline=reservation.deadline)
    try:
        session = deps.store.mark_attempted(session_id, reservation, prompt, at=deps.now())
    except Exception as exc:
        # No marker, no dispatch. Undo in its own bounded loop, whatever happened to the request.
        raise _handed_back(deps, session_id, reservation, bundle.id, delivery,
                           "the agent could not be resumed; the answer was kept pending, retry") from exc
    attempted = replace(reservation, attempted=True)
    request = PromptRequest(session_id=session.id, execution_id=session.execution_id,
                            prompt_generation=prompt.generation, turn_id=prompt.turn_id, text=prompt.content,
                            agent_token=deps.agent_token(session.workspace_id, session.id))
    try:
        result = deps.agentctl.prompt(request)
    except AgentctlAmbiguous as exc:
        obs.count(obs.AMBIGUOUS_DISPATCHES, path="resume")
        recover(deps, session, attempted, "ambiguous")
        raise DispatchAmbiguous("the agent may have received the answer; it will not be sent again") from exc
    if result is PromptOutcome.REJECTED:
        raise _handed_back(deps, session.id, attempted, bundle.id, delivery,
                           "the agent did not accept the answer; it was kept pending, retry")
    successor = session.current_turn
    assert successor is not None and successor.id == attempted.turn_id
    try:
        # The bus must accept turn.started while the recovery metadata is still durable.
        published = publish_now(deps, [turn_started(session, successor)])
    except DomainError:
        published = False
    if not published:
        raise DispatchAmbiguous("the agent accepted the answer, but its turn could not be announced yet; it will "
                                "be, and the answer will not be sent again")
    try:
        deps.store.finish_reservation(session.id, attempted, result="resumed", dispatch=Dispatch.ACCEPTED,
                                      at=deps.now())
    except DomainError as exc:
        # Accepted but not acknowledged: never reopen; the reconciler replaces the reservation by the outbox.
        obs.count(obs.AMBIGUOUS_DISPATCHES, path="resume")
        raise DispatchAmbiguous("the agent accepted the answer, but finalising failed") from exc
    return Responded(bundle.id, delivery.outcome, "resumed")


def _handed_back(deps: Deps, session_id: str, reservation: Reservation, bundle_id: str, delivery: Delivery,
                 message: str) -> DomainError:
    """Undo the claim and publish its rows at once: the error to raise. Restored, the answer is retryable;
    retired (the question moved on meanwhile), the user is told so and may send it as a new message; when
    nothing could be undone the answer stays recorded, nothing is resumed, and the error says so."""
    undone = rollback(deps, session_id, reservation, bundle_id, delivery)
    if undone.session is not None:
        rows = list(reservation.row_ids)
        summary_error = publish_restored(deps, undone.session, bundle_id, rows)
        settle_deferred_ready(deps, undone.session)  # a predecessor's ready that waited on the reservation
        extra = {"summary_error": summary_error} if summary_error else {}
        if undone.retired:
            ended = undone.session.terminal
            return ClarificationInactive("the question moved on before the answer could be delivered; send it as "
                                         "a new message", reason="session_terminal" if ended else "superseded",
                                         **extra)
        return DispatchFailed(message, restored=True, **extra)
    session = deps.store.get_session(session_id)
    found = archive.find(deps, session, bundle_id) if session is not None else None
    if found is None or found[1].delivery is None or found[1].delivery.delivery_id != delivery.delivery_id:
        return _taken_back(found, message)
    if session is not None and session.terminal:
        return SessionUnavailable(f"the session ended ({session.state.value}) while the answer was delivered; "
                                  "it was recorded, and the agent was not resumed")
    return DispatchAmbiguous("the answer could not be handed back for a retry; it will not be sent again")


def _taken_back(found: tuple[Session, Bundle] | None, message: str) -> DomainError:
    """Someone else (the reconciler, past this claim's owner deadline) undid the claim first: the answer was
    not taken, and the user is told what the question is now, never that it may have been delivered."""
    if found is None:
        return NotFound("the question was deleted before the answer could be delivered")
    session, bundle = found
    if bundle_is_active(session, bundle):
        return DispatchFailed(message, restored=True)
    return ClarificationInactive("the question moved on before the answer could be delivered; send it as a new "
                                 "message", reason="session_terminal" if session.terminal else "superseded")


@dataclass(frozen=True)
class Undone:
    """What a rollback did: `session` as written (None: nothing undone, the reconciler will), and whether the
    claim was retired (its question had moved on) rather than restored to answerable."""
    session: Session | None
    retired: bool = False


def rollback(deps: Deps, session_id: str, reservation: Reservation, bundle_id: str,
             delivery: Delivery) -> Undone:
    """Undo a reservation and exactly its claimed rows, bounded: restored to pending while the question is
    still current; retired (unanswered history, never reactivated) when a newer turn or the end of the
    session overtook a reservation that was never attempted."""
    for _ in range(ROLLBACK_ATTEMPTS):
        try:
            restored = deps.store.restore_claim(session_id, bundle_id, delivery.delivery_id,
                                                list(reservation.row_ids), outcome=delivery.outcome, detach=False,
                                                at=deps.now(), reservation=reservation)
            obs.count(obs.RESTORES, cause="rollback")
            return Undone(restored)
        except DomainError as exc:
            current = deps.store.get_session(session_id)
            if current is None or current.reservation is None or current.reservation.turn_id != reservation.turn_id:
                log.warning("rollback of %s found nothing to undo: %s", reservation.turn_id, exc)
                return Undone(None)
            reservation = current.reservation
            bundle = current.bundle(bundle_id)
            if not reservation.attempted and bundle is not None and moved_on(current, bundle):
                return _retire(deps, current, reservation, bundle_id, delivery)
            if current.terminal:
                log.warning("rollback of %s: the session ended meanwhile", reservation.turn_id)
                return Undone(None)
    log.error("rollback of reservation %s failed; the reconciler will repair it", reservation.turn_id)
    return Undone(None)


def _retire(deps: Deps, session: Session, reservation: Reservation, bundle_id: str, delivery: Delivery) -> Undone:
    try:
        retired = deps.store.retire_claim(session.id, bundle_id, delivery.delivery_id, list(reservation.row_ids),
                                          outcome=delivery.outcome, at=deps.now(), reservation=reservation)
    except DomainError as exc:
        log.warning("retiring reservation %s failed (the reconciler will): %s", reservation.turn_id, exc)
        return Undone(None)
    obs.count(obs.RESTORES, cause="retired")
    return Undone(retired, retired=True)


def publish_restored(deps: Deps, session: Session, bundle_id: str, rows: list[str]) -> str | None:
    """Restored rows are published after the commit even if the summary refresh fails (then reported)."""
    bundle = session.bundle(bundle_id)
    if bundle is not None:
        emit_for(deps, session, f"message.updated:{bundle_id}:{session.version}", "message.updated",
                 session.updated_at, {**clarification_event_view(session, bundle, now=session.updated_at),
                                      "changed_question_ids": rows})
    try:
        refresh_task_summary(deps, session.task_id, fresh=session)
    except Exception as exc:  # durable pending state is authoritative; the retry stays safe
        log.warning("summary refresh after restore of %s failed: %s", bundle_id, exc)
        return str(exc)
    return None


def recover(deps: Deps, session: Session, reservation: Reservation, result: str) -> Session:
    """An attempted reservation whose outcome is known (ambiguous, or accepted but not acknowledged): replace
    it by the start-event outbox marker (the successor and the terminal claim stay), then publish the
    successor's turn events and clear the marker. A bus that does not accept leaves the marker for the next
    reconciler run. Returns the session as last written."""
    successor = Turn(reservation.turn_id, reservation.seq, session.current_turn.started_at
                     if session.current_turn and session.current_turn.id == reservation.turn_id else deps.now())
    marker = StartEvent(successor.id, successor.seq, successor.started_at)
    try:
        session = deps.store.to_start_event(session.id, reservation, marker, result=result, at=deps.now())
    except DomainError as exc:
        log.warning("replacing reservation %s by its outbox marker failed (the reconciler will): %s",
                    reservation.turn_id, exc)
        return session
    replay_start_event(deps, session)
    return deps.store.get_session(session.id) or session


def replay_start_event(deps: Deps, session: Session) -> bool:
    """Publish the marker's turn.started, then turn.completed when the turn already completed; clear the
    marker only once the bus accepted every one. False: the marker stays for the next attempt."""
    marker = session.start_event
    if marker is None:
        return True
    turn = Turn(marker.turn_id, marker.seq, marker.started_at)
    events = [turn_started(session, turn)]
    current = session.current_turn
    if current is not None and current.id == marker.turn_id and current.completed_at:
        events.append(turn_completed(session, turn, current.completed_at))
    try:
        if not publish_now(deps, events):
            return False
        deps.store.clear_start_event(session.id, marker.turn_id, deps.now())
    except DomainError as exc:
        log.warning("start event of %s not published yet: %s", marker.turn_id, exc)
        return False
    return True
