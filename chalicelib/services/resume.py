"""A detached affirmative answer resumes the agent exactly once.

claim + reserve (write 1) → mark attempted: the successor becomes current (write 2, the at-most-once
boundary) → agentctl (bounded) → acknowledge: clear the recovery metadata and retire the intent (write 3);
removing the reservation is what publishes the successor's turn.started through the stream.
A failure before the marker rolls back and the answer stays retryable; after agentctl accepted, nothing
reopens the answer.
"""
from __future__ import annotations

import logging

from .. import observability as obs
from ..agentctl.client import AgentctlAmbiguous, PromptOutcome, PromptRequest
from ..domain.errors import DispatchAmbiguous, DispatchFailed, DomainError
from ..domain.model import Bundle, Delivery, Dispatch, Prompt, Reservation, Session
from ..domain.respond import Outcome, summary_text
from .deps import Deps
from .results import Responded

log = logging.getLogger(__name__)
ROLLBACK_ATTEMPTS = 5
SYSTEM_AUTHOR = "system:clarification"


def respond_detached(deps: Deps, session: Session, bundle: Bundle, outcome: Outcome, rows: list[str],
                     key: str) -> Responded:
    now, turn = deps.now(), session.current_turn
    assert turn is not None
    responses = {q: outcome.response_for(q) for q in rows}
    reservation = Reservation(turn_id=deps.new_id(), seq=session.turn_seq + 1, predecessor=turn,
                              bundle_id=bundle.id, bundle_turn_id=bundle.turn_id, row_ids=tuple(rows),
                              generation=session.generation + 1, created_at=now, deadline=deps.deadline())
    delivery = Delivery(deps.new_id(), tuple(rows), outcome.status, "detached", now, reservation.deadline, key,
                        outcome.fingerprint)
    obs.bind(delivery=delivery.delivery_id, successor_turn=reservation.turn_id, generation=reservation.generation)
    session = deps.store.claim(session.id, bundle.id, responses, status=outcome.status, delivery=delivery,
                               reservation=reservation, at=now)
    prompt = Prompt(message_id=deps.new_id(), client_message_id=f"resume-{delivery.delivery_id}",
                    turn_id=reservation.turn_id, content=summary_text(bundle, responses), author_id=SYSTEM_AUTHOR,
                    created_at=now, generation=reservation.generation, dispatch=Dispatch.ATTEMPTED,
                    deadline=reservation.deadline)
    try:
        session = deps.store.mark_attempted(session.id, reservation, prompt, at=deps.now())
    except Exception as exc:
        # No marker, no dispatch. Undo in its own bounded loop, whatever happened to the request.
        rollback(deps, session.id, reservation, bundle.id, delivery, outcome.status)
        raise DispatchFailed("the agent could not be resumed; the answer was kept pending, retry") from exc
    attempted = Reservation(**{**reservation.__dict__, "attempted": True})
    request = PromptRequest(session_id=session.id, execution_id=session.execution_id,
                            prompt_generation=prompt.generation, turn_id=prompt.turn_id, text=prompt.content,
                            agent_token=deps.agent_token(session.workspace_id, session.id))
    try:
        result = deps.agentctl.prompt(request)
    except AgentctlAmbiguous as exc:
        obs.count(obs.AMBIGUOUS_DISPATCHES, path="resume")
        _finish(deps, session.id, attempted, bundle.id, delivery, "ambiguous", Dispatch.ATTEMPTED)
        raise DispatchAmbiguous("the agent may have received the answer; it will not be sent again") from exc
    if result is PromptOutcome.REJECTED:
        rollback(deps, session.id, attempted, bundle.id, delivery, outcome.status)
        raise DispatchFailed("the agent did not accept the answer; it was kept pending, retry")
    try:
        deps.store.finish_reservation(session.id, attempted, bundle_id=bundle.id, delivery_id=delivery.delivery_id,
                                      result="resumed", dispatch=Dispatch.ACCEPTED, at=deps.now())
    except DomainError as exc:
        # Accepted but not finalised: never reopen; the reconciler replaces the reservation by the outbox.
        obs.count(obs.AMBIGUOUS_DISPATCHES, path="resume")
        raise DispatchAmbiguous("the agent accepted the answer, but finalising failed") from exc
    return Responded(bundle.id, outcome.status, "resumed")


def rollback(deps: Deps, session_id: str, reservation: Reservation, bundle_id: str, delivery: Delivery,
             outcome: str) -> bool:
    """Undo a reservation and restore exactly its claimed rows. Bounded; False if it could not."""
    for _ in range(ROLLBACK_ATTEMPTS):
        try:
            deps.store.restore_claim(session_id, bundle_id, delivery.delivery_id, list(reservation.row_ids),
                                     outcome=outcome, detach=False, at=deps.now(), reservation=reservation)
            obs.count(obs.RESTORES, cause="rollback")
            return True
        except DomainError as exc:
            current = deps.store.get_session(session_id)
            if current is None or current.reservation is None or current.reservation.turn_id != reservation.turn_id:
                log.warning("rollback of %s found nothing to undo: %s", reservation.turn_id, exc)
                return False
            reservation = current.reservation
    log.error("rollback of reservation %s failed; the reconciler will repair it", reservation.turn_id)
    return False


def _finish(deps: Deps, session_id: str, reservation: Reservation, bundle_id: str, delivery: Delivery,
            result: str, dispatch: Dispatch) -> None:
    try:
        deps.store.finish_reservation(session_id, reservation, bundle_id=bundle_id,
                                      delivery_id=delivery.delivery_id, result=result, dispatch=dispatch,
                                      at=deps.now())
    except DomainError as exc:
        log.warning("finalising reservation %s failed (the reconciler will): %s", reservation.turn_id, exc)
