"""Asking, detaching, cancelling and pausing clarification bundles.

Each operation decides from a read which rows it may touch, then makes ONE conditional write whose
condition re-checks exactly that decision (the repository rule plus the row states). A lost race re-reads
and decides again, so no stale read is ever written back.
"""
from __future__ import annotations

import logging

from .. import observability as obs
from ..agentctl.client import AgentctlAmbiguous, CancelRequest
from ..auth.tokens import Caller
from ..domain import clarify
from ..domain.commands import Ask
from ..domain.errors import ClarificationInactive, NotFound, SessionUnavailable, TurnConflict
from ..domain.model import TERMINAL_STATES, Bundle, Row, Session, State, Turn
from . import archive
from .access import session_for_agent, session_for_user
from .budget import ensure_room
from .deps import Deps
from .retry import with_session

log = logging.getLogger(__name__)
LIVE_STATES = frozenset(State) - TERMINAL_STATES


def bundle_for_agent(deps: Deps, caller: Caller, clarification_id: str) -> tuple[Session, Bundle]:
    session_id = clarify.session_of(clarification_id)
    if session_id is None:
        raise NotFound("clarification not found")
    session, bundle, _ = _located(deps, session_for_agent(deps, caller, session_id), clarification_id)
    return session, bundle


def bundle_for_user(deps: Deps, caller: Caller, clarification_id: str) -> tuple[Session, Bundle]:
    session, bundle, _ = located_for_user(deps, caller, clarification_id)
    return session, bundle


def located_for_user(deps: Deps, caller: Caller, clarification_id: str) -> tuple[Session, Bundle, bool]:
    """The caller's bundle, the session holding it, and whether it was found in history (archived)."""
    session_id = clarify.session_of(clarification_id)
    if session_id is None:
        raise NotFound("clarification not found")
    return _located(deps, session_for_user(deps, caller, session_id), clarification_id)


def _located(deps: Deps, session: Session, clarification_id: str) -> tuple[Session, Bundle, bool]:
    found = archive.find(deps, session, clarification_id)
    if found is None:
        raise NotFound("clarification not found")
    holding, bundle = found
    obs.bind(clarification=bundle.id, turn=bundle.turn_id)
    return holding, bundle, holding is not session


# ------------------------------------------------------------------ ask
def ask(deps: Deps, caller: Caller, session_id: str, command: Ask) -> Bundle:
    """Create a bundle in the current turn (starting one when no turn is open) in one write."""
    turn_id = command.turn_id
    session = session_for_agent(deps, caller, session_id)
    suffix = deps.new_id()

    def attempt(s: Session) -> Bundle:
        if s.terminal:
            raise SessionUnavailable(f"the session is {s.state.value}")
        turn, now = s.current_turn, deps.now()
        if turn_id is not None and (turn is None or turn.id != turn_id or not turn.open):
            raise TurnConflict("turn_id is not the session's current open turn",
                               current_turn_id=turn.id if turn and turn.open else None)
        new_turn = None if turn is not None and turn.open else Turn(deps.new_id(), s.turn_seq + 1, now)
        owner = new_turn or turn
        assert owner is not None
        cid = clarify.clarification_id(s.id, suffix)
        # The ask opens the waiter lease: an agent that never waits leaves a question that detaches when it
        # lapses; its first wait renews it.
        bundle = Bundle(id=cid, turn_id=owner.id, message_id=cid, created_at=now, context=command.context,
                        rows=tuple(Row(question=q, status=clarify.PENDING) for q in command.questions),
                        waiter_until=deps.after(deps.settings.ask_lease), turn_seq=owner.seq)
        ensure_room(deps, s, "questions", bundle)
        deps.store.add_bundle(s.id, bundle, expected_turn_id=turn.id if turn else None, new_turn=new_turn,
                              from_states=LIVE_STATES, state=State.WAITING_FOR_INPUT, at=now)
        return bundle
    return with_session(deps, session, attempt)


# ------------------------------------------------------------------ detach
def detach_bundle(deps: Deps, session: Session, bundle_id: str) -> tuple[Session, list[str]]:
    """Set agent_disconnected on this bundle's pending, not-yet-detached rows; returns exactly those.

    A repeat finds no rows and writes nothing, so it publishes nothing either.
    """
    def attempt(s: Session) -> tuple[Session, list[str]]:
        bundle = s.bundle(bundle_id)
        rows = clarify.detachable_rows(s, bundle) if bundle else []
        if not rows:
            return s, []
        return deps.store.detach_rows(s.id, {bundle_id: rows}, at=deps.now()), rows
    return with_session(deps, session, attempt)


def detach(deps: Deps, caller: Caller, clarification_id: str) -> list[str]:
    """The agent stops waiting. When its turn is already over, a message queued behind the question goes
    out now (the question no longer holds the queue)."""
    session, bundle = bundle_for_agent(deps, caller, clarification_id)
    session, rows = detach_bundle(deps, session, bundle.id)
    if rows:
        from . import messages  # messages -> dispatch -> ...: imported where used

        messages.drain(deps, session)
    return rows


def pause_for_input(deps: Deps, session: Session, bundle_id: str, expected_turn_id: str | None) -> bool:
    """The agent's wait ended without an answer: detach, then silently cancel the agent's turn only if the
    turn snapshotted before detaching (None: no turn at all) is still current. Runs no completion actions.

    Returns whether the agent was cancelled.
    """
    session, detached = detach_bundle(deps, session, bundle_id)
    if not detached:  # nothing written: decide on the durable aggregate, never on the caller's copy
        session = deps.store.get_session(session.id) or session
    current = session.current_turn.id if session.current_turn else None
    if current != expected_turn_id or session.terminal:
        log.info("pause for %s skipped the cancel: turn %s is not the snapshotted %s",
                 session.id, current, expected_turn_id)
        return False
    try:
        deps.agentctl.cancel(CancelRequest(session_id=session.id, execution_id=session.execution_id,
                                           prompt_generation=session.generation, silent=True))
    except AgentctlAmbiguous as exc:
        log.warning("silent cancel of %s failed: %s", session.id, exc)
    return True


# ------------------------------------------------------------------ agent cancel
def cancel(deps: Deps, caller: Caller, clarification_id: str) -> list[str]:
    """The agent withdraws its own question: that bundle's pending rows become cancelled."""
    session, bundle = bundle_for_agent(deps, caller, clarification_id)

    def attempt(s: Session) -> list[str]:
        b = s.bundle(bundle.id)
        rows = clarify.pending_rows(s, b) if b else []
        if not rows or b is None:
            raise inactive(s, b or bundle, deps.now())
        deps.store.close_rows(s.id, b.id, rows, status="cancelled", at=deps.now())
        return rows
    return with_session(deps, session, attempt)


def inactive(session: Session, bundle: Bundle, now: str) -> ClarificationInactive:
    state = clarify.derived_state(session, bundle, now)
    # A claim still being delivered is already the winner: report its outcome (answered or rejected).
    reason = bundle.delivery.outcome if state == "delivery_claimed" and bundle.delivery else state
    if session.terminal and reason not in ("answered", "rejected"):
        reason = "session_terminal" if state != "expired" else "expired"
    return ClarificationInactive("the clarification is no longer active", reason=reason,
                                 late_answer_allowed=clarify.late_answer_allowed(session, bundle, now))
