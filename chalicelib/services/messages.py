"""Ordinary user messages: admission starts a new turn (one conditional write), then dispatch."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..auth.tokens import Caller
from ..domain import validation as v
from ..domain.errors import ConditionFailed, SessionUnavailable
from ..domain.model import TURN_START_STATES, Dispatch, Prompt, Session, State, Turn
from ..domain.rules import can_start_turn, input_capable
from .access import session_for_user
from .deps import Deps
from .dispatch import dispatch_prompt


@dataclass(frozen=True)
class Admission:
    message_id: str
    admission: str  # sent | queued | steered
    turn_id: str | None


def send_message(deps: Deps, caller: Caller, session_id: str, body: Any) -> Admission:
    data = v.body_object(body)
    client_message_id = v.identifier(data, "client_message_id")
    content = v.text(data, "content", max_len=v.MAX_CONTENT)
    v.choice(data, "delivery", ("auto", "steer", "queue"), "auto")
    assert client_message_id is not None and content is not None
    session = session_for_user(deps, caller, session_id)
    return admit_message(deps, caller, session, client_message_id=client_message_id, content=content)


def admit_message(deps: Deps, caller: Caller, session: Session, *, client_message_id: str,
                  content: str) -> Admission:
    """Start a new turn carrying the prompt (the pointer moves in the same write), then dispatch it."""
    if not input_capable(session.state):
        raise SessionUnavailable(f"the session is {session.state.value} and cannot take input")
    if not can_start_turn(session.state):
        raise SessionUnavailable("the agent is in the middle of a turn; try again when it is idle")
    now = deps.now()
    turn = Turn(id=deps.new_id(), seq=session.turn_seq + 1, started_at=now)
    prompt = Prompt(message_id=deps.new_id(), client_message_id=client_message_id, turn_id=turn.id,
                    content=content, author_id=caller.sub, created_at=now, generation=session.generation + 1,
                    dispatch=Dispatch.PENDING, deadline=deps.deadline())
    try:
        session = deps.store.start_turn(
            session.id, expected_turn_id=session.current_turn.id if session.current_turn else None,
            from_states=TURN_START_STATES, turn=turn, prompt=prompt, state=State.RUNNING, at=now)
    except ConditionFailed as exc:
        raise SessionUnavailable("the session changed while the message was admitted; retry") from exc
    dispatch_prompt(deps, session, prompt)
    return Admission(message_id=prompt.message_id, admission="sent", turn_id=turn.id)
