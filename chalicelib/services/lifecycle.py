"""Session-level transitions that touch bundles in the same write: terminal expiry and turn completion."""
from __future__ import annotations

from ..domain import clarify
from ..domain.errors import ConditionFailed, SessionUnavailable
from ..domain.model import TERMINAL_STATES, Session, State
from ..domain.rules import active_bundles, allowed_sources
from .deps import Deps
from .messages import drain
from .retry import with_session


def end_session(deps: Deps, session: Session, to: State) -> Session:
    """Enter a terminal state; the current turn's pending rows expire in the same write.

    Raises SessionUnavailable when the session already ended (in another terminal state).
    """
    assert to in TERMINAL_STATES

    def attempt(s: Session) -> Session:
        if s.terminal:
            if s.state == to:
                return s
            raise SessionUnavailable(f"the session already ended as {s.state.value}")
        return deps.store.transition(s.id, to=to, from_states=allowed_sources(to), at=deps.now(),
                                     expire=clarify.current_turn_pending(s))
    return with_session(deps, session, attempt)


def complete_turn(deps: Deps, session: Session, turn_id: str) -> Session | None:
    """Complete `turn_id` if it is the open current turn, detaching its live bundles in the same write.

    An agent that completes its turn is no longer waiting; its questions stay answerable (detached), and
    the session keeps WAITING_FOR_INPUT while one is active. Returns None when the turn was not current.
    """
    def attempt(s: Session) -> Session | None:
        turn = s.current_turn
        if s.terminal or turn is None or turn.id != turn_id or not turn.open:
            return None
        target = State.WAITING_FOR_INPUT if active_bundles(s) else State.IDLE
        detach = clarify.current_turn_detachable(s)
        if detach:
            return deps.store.detach_rows(s.id, detach, at=deps.now(), complete_turn_id=turn.id,
                                          from_state=s.state, to_state=target, version=s.version)
        return deps.store.complete_turn(s.id, turn.id, from_state=s.state, to_state=target, at=deps.now(),
                                        version=s.version)
    completed = with_session(deps, session, attempt)
    return drain(deps, completed) if completed is not None else None


def settle_deferred_ready(deps: Deps, session: Session) -> Session:
    """Once no reservation overlaps a deferred ready: a generation that still owns the session completes its
    turn normally (the predecessor and its queue are not stranded); any other is dropped. The marker goes
    last, so a crash in between only repeats a completion that is then a no-op."""
    ready = session.deferred_ready
    if ready is None or session.reservation is not None:
        return session
    turn = session.current_turn
    if session.generation == ready.generation and turn is not None and turn.id == ready.turn_id and turn.open:
        session = complete_turn(deps, session, ready.turn_id) or session
    try:
        return deps.store.clear_deferred_ready(session.id, ready.generation, deps.now())
    except ConditionFailed as exc:
        return exc.session or session
