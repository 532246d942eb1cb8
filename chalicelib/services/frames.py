"""Agent frames: transcript output, turn completion and state reports from the agent runtime."""
from __future__ import annotations

import logging
from dataclasses import dataclass

from ..auth.tokens import Caller
from ..domain.commands import Frame
from ..domain.errors import ConditionFailed, SessionUnavailable
from ..domain.model import (
    TERMINAL_STATES,
    TURN_START_STATES,
    DeferredReady,
    Dispatch,
    Message,
    Session,
    State,
    Turn,
)
from ..domain.rules import allowed_sources
from . import watchdog
from .access import session_for_agent
from .deps import Deps
from .lifecycle import complete_turn, end_session
from .polling import poll

log = logging.getLogger(__name__)

OUTPUT_TYPES = ("message", "thinking", "tool")


@dataclass(frozen=True)
class FrameResult:
    applied: int
    ignored: int


def apply_frames(deps: Deps, caller: Caller, session_id: str, frames: tuple[Frame, ...]) -> FrameResult:
    session = session_for_agent(deps, caller, session_id)
    applied = 0
    for frame in frames:
        session, ok = _apply(deps, session, frame)
        applied += ok
    return FrameResult(applied=applied, ignored=len(frames) - applied)


def _apply(deps: Deps, session: Session, frame: Frame) -> tuple[Session, bool]:
    if session.state in TERMINAL_STATES:
        return session, False
    if frame.type in OUTPUT_TYPES:
        # Activity disarms the watchdog even when the frame's identity is that of a cancelled prompt.
        return _output(deps, watchdog.on_activity(deps, session), frame)
    if frame.type in ("turn_completed", "ready"):
        if session.reservation is not None and not _of_attempted_successor(session, frame):
            return _after_reservation(deps, session, frame)
        return _complete(deps, session, frame)
    if frame.type == "state" and frame.state is not None:
        return _state(deps, session, frame.state)
    # cancel_ack: no transcript or turn change. Only the acknowledgement of the very prompt the watchdog
    # cancelled is part of its recovery; any other one is agent activity.
    if session.watchdog is not None and not watchdog.own_cancel_ack(session.watchdog, frame):
        return watchdog.on_activity(deps, session), False
    return session, False


def _of_attempted_successor(session: Session, frame: Frame) -> bool:
    """A frame of the resumed successor itself (its generation, its turn, now current): the agent accepted
    the resume and worked on it. Only a predecessor's delayed frame waits for the reservation to resolve."""
    r = session.reservation
    return (r is not None and r.attempted and frame.prompt_generation == r.generation
            and session.current_turn is not None and session.current_turn.id == r.turn_id)


def _stale(session: Session, frame: Frame) -> bool:
    """A frame of an older prompt generation or turn must not touch the current one."""
    if frame.prompt_generation is not None and frame.prompt_generation != session.generation:
        return True
    return frame.turn_id is not None and (session.current_turn is None or frame.turn_id != session.current_turn.id)


def _output(deps: Deps, session: Session, frame: Frame) -> tuple[Session, bool]:
    session = _evidence(deps, session, frame)
    turn = session.current_turn
    if turn is None or not turn.open:
        if frame.turn_id is not None and not _of_latest_prompt(session, frame):
            return session, False  # output for a turn that is over
        if frame.turn_id is None:
            session, turn = _start_agent_turn(deps, session)  # agent activity with no open turn starts one
        # else: the latest prompt's turn was closed as ambiguous, yet the agent has it: its output is kept
    elif _stale(session, frame):
        return session, False
    assert turn is not None  # _of_latest_prompt needs one
    message = Message(id=deps.new_id(), session_id=session.id, workspace_id=session.workspace_id,
                      task_id=session.task_id, turn_id=turn.id, turn_seq=turn.seq, author_type="agent",
                      type=frame.type, content=frame.content, created_at=deps.now())
    deps.store.put_message(message)
    return session, True


def _evidence(deps: Deps, session: Session, frame: Frame) -> Session:
    """Output carrying the generation of a prompt whose dispatch is ambiguous proves the agent has it: the
    prompt is accepted, so the reconciler never closes its turn as undelivered."""
    p = session.prompt
    if p is None or p.dispatch != Dispatch.ATTEMPTED or frame.prompt_generation != p.generation:
        return session
    try:
        return deps.store.set_dispatch(session.id, p.message_id, expect=Dispatch.ATTEMPTED, to=Dispatch.ACCEPTED,
                                       at=deps.now(), deadline=None)
    except ConditionFailed as exc:
        return exc.session or session


def _of_latest_prompt(session: Session, frame: Frame) -> bool:
    """The frame belongs to the session's latest prompt and its turn, and nothing newer has started."""
    p, turn = session.prompt, session.current_turn
    return (p is not None and turn is not None and frame.prompt_generation == p.generation == session.generation
            and frame.turn_id == turn.id == p.turn_id)


def _start_agent_turn(deps: Deps, session: Session) -> tuple[Session, Turn]:
    now = deps.now()
    turn = Turn(id=deps.new_id(), seq=session.turn_seq + 1, started_at=now)
    try:
        session = deps.store.start_turn(
            session.id, expected_turn_id=session.current_turn.id if session.current_turn else None,
            from_states=TURN_START_STATES | {State.RUNNING, State.CREATED, State.STARTING},
            turn=turn, prompt=None, state=State.RUNNING, at=now)
    except ConditionFailed as exc:
        current = exc.session or session
        if current.current_turn is None:
            raise
        return current, current.current_turn
    assert session.current_turn is not None
    return session, session.current_turn


def _after_reservation(deps: Deps, session: Session, frame: Frame) -> tuple[Session, bool]:
    """A delayed completion overlapping a reservation waits for it to resolve, then revalidates its prompt
    generation: it can never complete the reserved successor. A generationless frame is dropped. One that
    outlasts the bounded wait (the reservation's owner died) is kept on the aggregate and settled when the
    reservation resolves (lifecycle.settle_deferred_ready), so its predecessor is never stranded."""
    def resolved() -> Session | None:
        current = deps.store.get_session(session.id) or session
        return current if current.reservation is None else None
    settled = poll(deps, resolved, deps.settings.reservation_wait)
    if frame.prompt_generation is None:
        return session, False
    if settled is not None:
        return _complete(deps, settled, frame)
    current = deps.store.get_session(session.id) or session
    r = current.reservation
    if r is None:
        return _complete(deps, current, frame)
    ready = DeferredReady(frame.prompt_generation, frame.turn_id or r.predecessor.id, deps.now())
    try:
        return deps.store.defer_ready(session.id, r.turn_id, ready), True
    except ConditionFailed as exc:  # resolved just now: decide on what it left
        fresh = exc.session or deps.store.get_session(session.id) or current
        return _complete(deps, fresh, frame) if fresh.reservation is None else (fresh, False)


def _complete(deps: Deps, session: Session, frame: Frame) -> tuple[Session, bool]:
    turn = session.current_turn
    if turn is None or not turn.open or _stale(session, frame):
        return session, False
    completed = complete_turn(deps, session, turn.id)
    return (completed, True) if completed is not None else (session, False)


def _state(deps: Deps, session: Session, target: State) -> tuple[Session, bool]:
    if target == session.state or session.state not in allowed_sources(target):
        return session, False
    if target in TERMINAL_STATES:
        try:
            return end_session(deps, session, target), True
        except SessionUnavailable:
            return session, False
    try:
        return deps.store.transition(session.id, to=target, from_states=allowed_sources(target),
                                     at=deps.now()), True
    except ConditionFailed as exc:
        return exc.session or session, False
