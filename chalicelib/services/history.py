"""Transcript and turn history: durable history merged with the aggregate, never staler than it."""
from __future__ import annotations

from dataclasses import dataclass

from ..auth.tokens import Caller
from ..domain.model import Message, Session, TurnRecord
from .access import session_for_user
from .deps import Deps


@dataclass(frozen=True)
class Transcript:
    session: Session
    messages: list[Message]


def transcript(deps: Deps, caller: Caller, session_id: str) -> Transcript:
    session = session_for_user(deps, caller, session_id)
    _, messages = deps.store.list_history(session.id)
    return Transcript(session, _with_latest_prompt(session, messages))


def turns(deps: Deps, caller: Caller, session_id: str) -> list[TurnRecord]:
    session = session_for_user(deps, caller, session_id)
    records, _ = deps.store.list_history(session.id)
    by_id = {r.id: r for r in records}
    current = session.current_turn
    if current is not None:  # the stream may not have copied the newest turn yet
        by_id[current.id] = TurnRecord(id=current.id, session_id=session.id, seq=current.seq,
                                       started_at=current.started_at, completed_at=current.completed_at)
    return sorted(by_id.values(), key=lambda r: r.seq)


def _with_latest_prompt(session: Session, messages: list[Message]) -> list[Message]:
    prompt = session.prompt
    if prompt is None or any(m.id == prompt.message_id for m in messages):
        return messages
    seq = session.current_turn.seq if session.current_turn and session.current_turn.id == prompt.turn_id else 0
    pending = prompt_message(session, seq)
    return sorted([*messages, pending], key=lambda m: (m.turn_seq, m.created_at, m.id))


def prompt_message(session: Session, turn_seq: int) -> Message:
    """The transcript message of the session's latest prompt (the stream function stores the same one)."""
    assert session.prompt is not None
    p = session.prompt
    return Message(id=p.message_id, session_id=session.id, workspace_id=session.workspace_id,
                   task_id=session.task_id, turn_id=p.turn_id, turn_seq=turn_seq, author_type="user",
                   type="message", content=p.content, created_at=p.created_at)
