"""Stream functions: keep history in step with the aggregate and turn changes into client events.

Delivery is at least once and ordered per item. Every write here is idempotent and every event id
derives from the change, so a redelivered batch changes nothing.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..api.views import message_view, session_view
from ..domain.model import Event, Session, TurnRecord
from ..services.deps import Deps
from ..services.history import prompt_message
from ..store import codec

log = logging.getLogger(__name__)
Record = Mapping[str, Any]


def _image(record: Record, name: str) -> dict[str, Any] | None:
    image = record.get("dynamodb", {}).get(name)
    return codec.from_attrs(image) if image else None


def process_batch(records: Iterable[Record], handle: Callable[[Record], None]) -> dict[str, Any]:
    """Handle records in order; on the first failure report it and every later record for retry.

    This is Lambda's partial-batch-failure contract (ReportBatchItemFailures), which keeps per-item order.
    """
    records = list(records)
    for index, record in enumerate(records):
        try:
            handle(record)
        except Exception:
            log.exception("stream record %s failed", record.get("dynamodb", {}).get("SequenceNumber"))
            return {"batchItemFailures": [{"itemIdentifier": r["dynamodb"]["SequenceNumber"]}
                                          for r in records[index:]]}
    return {"batchItemFailures": []}


# ------------------------------------------------------------------ sessions table
def on_session_record(deps: Deps, record: Record) -> None:
    new_item, old_item = _image(record, "NewImage"), _image(record, "OldImage")
    if new_item is None:
        return
    new = codec.session_from_item(new_item)
    old = codec.session_from_item(old_item) if old_item else None
    _turns(deps, old, new)
    _prompt_message(deps, old, new)
    _session_event(deps, old, new)


def _turns(deps: Deps, old: Session | None, new: Session) -> None:
    turn, before = new.current_turn, (old.current_turn if old else None)
    if turn is None:
        return
    started = before is None or before.id != turn.id
    completed = turn.completed_at is not None and (started or before is None or before.completed_at is None)
    if started or completed:
        deps.store.put_turn_record(TurnRecord(id=turn.id, session_id=new.id, seq=turn.seq,
                                              started_at=turn.started_at, completed_at=turn.completed_at),
                                   new.workspace_id, new.task_id)
    payload = {"turn_id": turn.id, "seq": turn.seq, "started_at": turn.started_at}
    if started:
        _emit(deps, new, f"turn.started:{turn.id}", "turn.started", turn.started_at, payload)
    if completed and turn.completed_at:
        _emit(deps, new, f"turn.completed:{turn.id}", "turn.completed", turn.completed_at,
              {**payload, "completed_at": turn.completed_at})


def _prompt_message(deps: Deps, old: Session | None, new: Session) -> None:
    prompt = new.prompt
    if prompt is None or (old is not None and old.prompt is not None
                          and old.prompt.message_id == prompt.message_id):
        return
    seq = new.current_turn.seq if new.current_turn and new.current_turn.id == prompt.turn_id else new.turn_seq
    deps.store.put_message(prompt_message(new, seq))


def _session_event(deps: Deps, old: Session | None, new: Session) -> None:
    view, before = session_view(new), (session_view(old) if old else None)
    relevant = ("state", "pending_action", "current_turn_id")
    if before is not None and all(view[k] == before[k] for k in relevant):
        return
    _emit(deps, new, f"session.updated:{new.id}:{new.version}", "session.updated", new.updated_at, view)


# ------------------------------------------------------------------ history table
def on_history_record(deps: Deps, record: Record) -> None:
    name = record.get("eventName")
    item = _image(record, "NewImage") if name != "REMOVE" else _image(record, "OldImage")
    if item is None or item.get("kind") != "message":
        return
    message = codec.message_from_history(item)
    if name == "INSERT":
        _emit_raw(deps, message.workspace_id, message.task_id, message.session_id,
                  f"message.added:{message.id}", "message.added", message.created_at, message_view(message))
    elif name == "REMOVE":
        at = deps.now()
        _emit_raw(deps, message.workspace_id, message.task_id, message.session_id,
                  f"message.deleted:{message.id}", "message.deleted", message.created_at,
                  {"id": message.id, "deleted_at": at})


# ------------------------------------------------------------------ events
PRIVATE_FIELDS = frozenset({"prompt", "agent_token", "recon_due", "recon_shard", "reservation", "dispatch",
                            "deadline", "client_message_id"})


def public(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The one place private prompt-dispatch fields are stripped from every public event."""
    return {k: (public(v) if isinstance(v, Mapping) else v) for k, v in payload.items() if k not in PRIVATE_FIELDS}


def _emit(deps: Deps, session: Session, event_id: str, kind: str, at: str, payload: Mapping[str, Any]) -> None:
    _emit_raw(deps, session.workspace_id, session.task_id, session.id, event_id, kind, at, payload)


def _emit_raw(deps: Deps, workspace_id: str, task_id: str, session_id: str | None, event_id: str, kind: str,
              at: str, payload: Mapping[str, Any]) -> None:
    event = Event(id=event_id, workspace_id=workspace_id, type=kind, task_id=task_id, session_id=session_id,
                  payload=public(payload), at=at)
    if not deps.store.put_event(event, deps.now()):
        log.debug("event %s already in the feed", event_id)
