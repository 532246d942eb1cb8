"""The public schema: domain objects to the JSON shapes of the HTTP contract and of every event.

The API and the stream functions both present through this module, and `strip_private` is the one place
private prompt-dispatch and recovery fields are removed from anything public.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from . import clarify
from .model import Bundle, Event, Message, Session, Task, TurnRecord
from .rules import bundle_is_active, input_capable, pending_action, published_turn, row_status

# Private prompt-dispatch and recovery fields: never in a public event. ("prompt" is not among them: a
# question's prompt text is public; the aggregate's prompt slot never reaches a payload, views build them.)
PRIVATE_FIELDS = frozenset({"agent_token", "recon_due", "recon_shard", "reservation", "dispatch", "deadline",
                            "client_message_id", "delivery", "delivery_pending", "recovery", "idempotency_key",
                            "fingerprint", "watchdog", "queue", "prompt_generation", "execution_id"})


# The most JSON one transcript entry can take: a bundle of 4 questions of 6 options at every documented limit,
# answered with the longest custom texts, every character one JSON escapes to 6 bytes (tests/unit/test_bounds.py
# builds it). The transcript's byte bound rests on it.
MAX_ENTRY_BYTES = 330_000


# Events carry ids and a bounded summary, never a whole bundle or message: whatever the API accepted, an event
# (stored in the feed as JSON, sent on the bus) stays a few KB, far inside DynamoDB's 400 KB item and
# EventBridge's 256 KB entry. A client refetches the transcript for the rest.
EVENT_TEXT = 280  # characters of a message's content an event carries


def message_event_view(message: Message) -> dict[str, Any]:
    """message.added: the message's view with its content cut to EVENT_TEXT characters (`truncated` says so)."""
    view = message_view(message)
    view.pop("in_reply_to", None)
    if len(message.content) > EVENT_TEXT:
        view["content"], view["truncated"] = message.content[:EVENT_TEXT], True
    return view


def clarification_event_view(session: Session, bundle: Bundle, *, now: str) -> dict[str, Any]:
    """message.updated of a clarification: its ids, state and each question's status, no texts."""
    full = clarification_view(session, bundle, now=now)
    return {**{k: full[k] for k in ("id", "type", "clarification_id", "turn_id", "session_id", "created_at",
                                    "state", "agent_disconnected", "answerable", "late_answer_allowed",
                                    "late_answer_message_id")},
            "questions": [{"question_id": q["question_id"], "status": q["status"]} for q in full["questions"]]}


def to_json(value: Any) -> str:
    """How every response body and event is serialised: UTF-8 as is (an emoji is 4 bytes, not 12)."""
    return json.dumps(value, ensure_ascii=False)


def entry_bytes(view: Mapping[str, Any]) -> int:
    """The bytes `view` takes in a response body."""
    return len(to_json(view).encode("utf-8", "surrogatepass"))


def strip_private(payload: Mapping[str, Any]) -> dict[str, Any]:
    """Private fields removed, recursively."""
    def clean(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: clean(v) for k, v in value.items() if k not in PRIVATE_FIELDS}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value
    return dict(clean(payload))


def event_view(event: Event) -> dict[str, Any]:
    return {"id": event.id, "type": event.type, "task_id": event.task_id, "session_id": event.session_id,
            "payload": event.payload, "at": event.at}


def task_view(task: Task, last_activity_at: str | None = None) -> dict[str, Any]:
    return {
        "id": task.id, "title": task.title, "workflow_step": task.workflow_step, "created_at": task.created_at,
        "last_activity_at": last_activity_at or task.last_activity_at,
        "status_summary": {"pending_action": task.summary.pending_action, "revision": task.summary.revision,
                           "primary_session_id": task.summary.primary_session_id},
    }


def session_view(session: Session) -> dict[str, Any]:
    turn = published_turn(session)  # a reserved successor stays hidden until the agent acknowledged it
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
    meta = message.meta or {}
    if meta.get("in_reply_to"):
        view["in_reply_to"] = meta["in_reply_to"]
    if meta.get("queued"):
        view["queued"] = True
    if meta.get("not_sent"):
        view["not_sent"] = str(meta["not_sent"])  # session_ended (queued then) | agent_refused
    if meta.get("delivery_unknown"):
        view["delivery_unknown"] = True  # the connection broke while sending: it may not have arrived
    return view


def turn_view(record: TurnRecord) -> dict[str, Any]:
    return {"id": record.id, "seq": record.seq, "started_at": record.started_at,
            "completed_at": record.completed_at}


def clarification_view(session: Session, bundle: Bundle, *, now: str,
                       viewer_key: str | None = None) -> dict[str, Any]:
    """A clarification transcript entry as of `now`; `answerable` is the repository rule, `state` derives
    from it. Rows under an unconfirmed claim show as they were before it: a claim is published once delivered.
    `viewer_key` (a user's dismissal key) personalises `dismissed`.
    """
    state = clarify.derived_state(session, bundle, now)
    rows = clarify.visible_rows(bundle)
    dismissed = viewer_key is not None and viewer_key in bundle.dismissed_by
    return {
        "id": bundle.message_id, "type": "clarification", "clarification_id": bundle.id,
        "turn_id": bundle.turn_id, "session_id": session.id, "created_at": bundle.created_at,
        "context": bundle.context, "state": state, "agent_disconnected": clarify.is_detached(bundle, now),
        "answerable": bundle_is_active(session, bundle) and state != "delivery_claimed",
        # A question the agent no longer waits for can still be answered as an ordinary new message.
        "late_answer_allowed": (clarify.late_answer_allowed(session, bundle, now) and not dismissed
                                and bundle.late_message_id is None),
        "late_answer_message_id": bundle.late_message_id, "dismissed": dismissed,
        "questions": [{
            "question_id": r.question.question_id, "title": r.question.title, "prompt": r.question.prompt,
            "options": [{"option_id": o.option_id, "label": o.label, "description": o.description}
                        for o in r.question.options],
            "status": row_status(r.status), "response": dict(r.response) if r.response is not None else None,
        } for r in rows],
    }


def transcript_view(session: Session, messages: list[Message], *, now: str, viewer_key: str | None = None,
                    older_cursor: str | None = None, pending: tuple[Bundle, ...] = ()) -> dict[str, Any]:
    """A transcript page: messages in order, clarification anchors carrying their bundle's live state from
    the aggregate; `pending_clarifications`: the session's active questions, wherever they are in it (the
    page may not reach back to them); `current_turn_id`: the published turn."""
    out = []
    for m in messages:
        bundle = session.bundle(m.clarification_id) if m.clarification_id else None
        out.append(clarification_view(session, bundle, now=now, viewer_key=viewer_key) if bundle is not None
                   else message_view(m))
    turn = published_turn(session)
    return {"current_turn_id": turn.id if turn else None, "messages": out, "older_cursor": older_cursor,
            "pending_clarifications": [clarification_view(session, b, now=now, viewer_key=viewer_key)
                                       for b in pending]}
