"""Presenters: domain objects to the JSON shapes of API.md. Public payloads carry no private dispatch fields."""
from __future__ import annotations

from typing import Any

from ..domain.model import Message, Session, Task, TurnRecord
from ..domain.rules import input_capable, pending_action


def task_view(task: Task) -> dict[str, Any]:
    return {
        "id": task.id, "title": task.title, "workflow_step": task.workflow_step, "created_at": task.created_at,
        "status_summary": {"pending_action": task.summary.pending_action, "revision": task.summary.revision,
                           "primary_session_id": task.summary.primary_session_id},
    }


def session_view(session: Session) -> dict[str, Any]:
    turn = session.current_turn
    return {
        "id": session.id, "task_id": session.task_id, "state": session.state.value,
        "is_primary": session.is_primary, "input_capable": input_capable(session.state),
        "pending_action": pending_action(session),
        # The aggregate's version orders every change of the session, so it orders this projection too.
        "pending_action_revision": session.version,
        "current_turn_id": turn.id if turn else None, "created_at": session.created_at,
        "updated_at": session.updated_at,
    }


def message_view(message: Message) -> dict[str, Any]:
    view: dict[str, Any] = {
        "id": message.id, "type": message.type, "author_type": message.author_type, "content": message.content,
        "turn_id": message.turn_id, "session_id": message.session_id, "created_at": message.created_at,
    }
    if message.clarification_id:
        view["clarification_id"] = message.clarification_id
    return view


def turn_view(record: TurnRecord) -> dict[str, Any]:
    return {"id": record.id, "seq": record.seq, "started_at": record.started_at,
            "completed_at": record.completed_at}
