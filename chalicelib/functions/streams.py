"""Stream functions: keep history in step with the aggregate, refresh projections, and publish events.

Delivery is at least once and ordered per item. Every write here is idempotent, projections are
compare-and-set from the repository rule, and every event id derives from the change, so a redelivered or
interleaved batch yields the same projections and no duplicate event.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from .. import observability as obs
from ..domain.clarify import visible_rows
from ..domain.errors import ConditionFailed, DomainError
from ..domain.model import Bundle, Session, Turn, TurnRecord
from ..domain.public import clarification_event_view, message_event_view, session_view, task_view
from ..domain.rules import pending_action, published_turn
from ..services import archive, stream_health
from ..services.deps import Deps, iso
from ..services.events import emit, emit_event, emit_for, turn_completed, turn_started
from ..services.history import anchor_seq, bundle_message, prompt_message
from ..services.outbox import Outbox
from ..services.projection import publish_summary, refresh_task_summary
from ..services.publication import flush
from ..store import codec

log = logging.getLogger(__name__)
Record = Mapping[str, Any]


def _image(record: Record, name: str) -> dict[str, Any] | None:
    image = record.get("dynamodb", {}).get(name)
    return codec.from_attrs(image) if image else None


def process_batch(deps: Deps, records: Iterable[Record], handle: Callable[[Deps, Record], None]) -> dict[str, Any]:
    """Handle records in order, then publish their events together (bus, then feed).

    A record that fails, or whose events the bus did not accept, is reported with every later record of the
    same item (Lambda's ReportBatchItemFailures: the retry starts at the lowest reported record, so per-item
    order holds). Order matters only within an item, so one item's bad record does not hold back the other
    items of the batch; their redelivery is harmless (handlers are idempotent, and events already in the feed
    are not put on the bus again), and once the event source sets the bad record aside the shard moves on.
    """
    records = list(records)
    outbox = Outbox()
    batch = replace(deps, outbox=outbox)
    failed: set[int] = set()
    blocked: set[str] = set()
    for index, record in enumerate(records):
        if _item(record) in blocked:
            failed.add(index)
            continue
        outbox.record = index
        try:
            with obs.scope(stream_record=_sequence(record), **_keys(record)):
                handle(batch, record)
        except Exception as exc:
            if deterministic(exc):  # a retry cannot help, and would hold up every later record of the shard
                log.exception("stream record %s fails deterministically: set aside", _sequence(record))
                outbox.discard({index})
                stream_health.set_aside(deps, record, exc)
                continue
            log.exception("stream record %s failed", _sequence(record))
            failed.add(index)
            blocked.add(_item(record))
    outbox.discard(failed)
    for index in sorted(flush(deps, outbox)):
        log.error("stream record %s: its events were not published; retrying it", _sequence(records[index]))
        item = _item(records[index])
        failed.update(i for i in range(index, len(records)) if _item(records[i]) == item)
    if failed:
        obs.count(obs.STREAM_RECORD_FAILURES, len(failed))
    return {"batchItemFailures": [{"itemIdentifier": _sequence(records[i])} for i in sorted(failed)]}


def deterministic(exc: Exception) -> bool:
    """A failure the same record meets again on every retry: a refused write (too large, invalid), an image
    that does not decode. Anything else (the store or the bus not answering) is transient: retried."""
    if isinstance(exc, DomainError):
        return not exc.retryable and not isinstance(exc, ConditionFailed)
    return isinstance(exc, (KeyError, ValueError, TypeError, AttributeError))


def _item(record: Record) -> str:
    return json.dumps(record.get("dynamodb", {}).get("Keys"), sort_keys=True, default=str)


def _keys(record: Record) -> dict[str, object]:
    """The changed item's ids for the log: sessions and tasks by key, history items by their session."""
    image = record.get("dynamodb", {})
    keys = {**(image.get("Keys") or {}), **(image.get("NewImage") or image.get("OldImage") or {})}
    return {name: (keys.get(f"{name}_id") or {}).get("S") for name in ("workspace", "task", "session")}


def _sequence(record: Record) -> str:
    return str(record.get("dynamodb", {}).get("SequenceNumber"))


# ------------------------------------------------------------------ sessions table
def on_session_record(deps: Deps, record: Record) -> None:
    new_item, old_item = _image(record, "NewImage"), _image(record, "OldImage")
    if new_item is None:
        return
    new = codec.session_from_item(new_item)
    old = codec.session_from_item(old_item) if old_item else None
    obs.bind_session(new)
    _turns(deps, old, new)
    _prompt_message(deps, old, new)
    _bundles(deps, old, new)
    moved = _session_event(deps, old, new)
    if moved or old is None or pending_action(old) != pending_action(new) or old.is_primary != new.is_primary:
        # a new turn, state or pending question is the task's activity: it moves up the task list
        refresh_task_summary(deps, new.task_id, fresh=new, republish=True, activity=new.updated_at if moved else None)
    archive.settle(deps, new)  # its anchor is in history now: what can no longer be answered leaves the aggregate


def _turns(deps: Deps, old: Session | None, new: Session) -> None:
    turn, before = published_turn(new), published_turn(old)
    if turn is None:
        return
    started = before is None or before.id != turn.id
    completed = turn.completed_at is not None and (started or before is None or before.completed_at is None)
    if started or completed:
        deps.store.put_turn_record(TurnRecord(id=turn.id, session_id=new.id, seq=turn.seq,
                                              started_at=turn.started_at, completed_at=turn.completed_at),
                                   new.workspace_id, new.task_id)
    if started and before is not None and before.open:
        _abandon(deps, new, before, turn.started_at)
    if started:
        emit_event(deps, turn_started(new, turn))
    if completed and turn.completed_at:
        emit_event(deps, turn_completed(new, turn, turn.completed_at))


def _abandon(deps: Deps, session: Session, turn: Turn, at: str) -> None:
    """A newer turn replaced one that never completed: its history closes when the successor started."""
    deps.store.put_turn_record(TurnRecord(id=turn.id, session_id=session.id, seq=turn.seq,
                                          started_at=turn.started_at, completed_at=at),
                               session.workspace_id, session.task_id)
    emit_event(deps, turn_completed(session, turn, at, abandoned=True))


def _prompt_message(deps: Deps, old: Session | None, new: Session) -> None:
    prompt = new.prompt
    if prompt is None or prompt.author_id.startswith("system:") or prompt.hidden or (
            old is not None and old.prompt is not None and old.prompt.message_id == prompt.message_id):
        return  # system prompts (resume, watchdog) hand an answer over; they are not user messages
    seq = new.current_turn.seq if new.current_turn and new.current_turn.id == prompt.turn_id else new.turn_seq
    deps.store.put_message(prompt_message(new, seq))


def _bundles(deps: Deps, old: Session | None, new: Session) -> None:
    """New bundles get their transcript anchor; changed rows are published as message.updated."""
    before = {b.id: b for b in (old.bundles if old else ())}
    for bundle in new.bundles:
        previous = before.get(bundle.id)
        if previous is None:
            deps.store.put_message(bundle_message(new, bundle.id, anchor_seq(new, bundle)))
            continue
        changed = changed_rows(previous, bundle) if not _claim_unconfirmed(bundle) else []
        if changed:
            emit_for(deps, new, f"message.updated:{bundle.id}:{new.version}", "message.updated", new.updated_at,
                     {**clarification_event_view(new, bundle, now=new.updated_at), "changed_question_ids": changed})


def _claim_unconfirmed(bundle: Bundle) -> bool:
    return bundle.delivery is not None and bundle.delivery.pending


def changed_rows(old: Bundle, new: Bundle) -> list[str]:
    """Rows whose visible status, detach flag or response changed between two images of one bundle.

    A claim is invisible until its delivery is confirmed: terminal updates are published only after
    delivery succeeded, and a restored claim never showed as answered.
    """
    before = {r.question.question_id: r for r in visible_rows(old)}
    out = []
    for row in visible_rows(new):
        prev = before.get(row.question.question_id)
        if prev is None or (prev.status, prev.agent_disconnected, prev.response) != (
                row.status, row.agent_disconnected, row.response):
            out.append(row.question.question_id)
    return out


def _session_event(deps: Deps, old: Session | None, new: Session) -> bool:
    """session.updated when the state, the pending action or the turn changed; True then."""
    view, before = session_view(new), (session_view(old) if old else None)
    relevant = ("state", "pending_action", "current_turn_id")
    if before is not None and all(view[k] == before[k] for k in relevant):
        return False
    emit_for(deps, new, f"session.updated:{new.id}:{new.version}", "session.updated", new.updated_at, view)
    return True


# ------------------------------------------------------------------ history table
def on_history_record(deps: Deps, record: Record) -> None:
    name = record.get("eventName")
    item = _image(record, "OldImage") if name == "REMOVE" else _image(record, "NewImage")
    if item is None or item.get("kind") != "message":
        return
    old = _image(record, "OldImage") or {}
    if item.get("deleted") and (name == "INSERT" or not old.get("deleted")):
        name = "REMOVE"  # a tombstone is how a message is deleted (even one deleted before it was recorded)
    message = codec.message_from_history(item)
    common = {"workspace_id": message.workspace_id, "task_id": message.task_id, "session_id": message.session_id}
    if name == "INSERT" and not item.get("deleted"):
        emit(deps, **common, event_id=f"message.added:{message.id}", kind="message.added",
             at=message.created_at, payload=message_event_view(message))
    elif name == "REMOVE":
        emit(deps, **common, event_id=f"message.deleted:{message.id}", kind="message.deleted",
             at=_record_time(record, deps), payload={"id": message.id, "turn_id": message.turn_id})


def _record_time(record: Record, deps: Deps) -> str:
    """When the change happened, from the record itself, so a redelivery yields the same event key."""
    created = record.get("dynamodb", {}).get("ApproximateCreationDateTime")
    if isinstance(created, (int, float)):
        return iso(datetime.fromtimestamp(created, tz=UTC))
    return deps.now()


# ------------------------------------------------------------------ tasks table
def on_task_record(deps: Deps, record: Record) -> None:
    """A new task is announced, a renamed or moved one updated, a deleted one removed; a new summary
    revision is published again, with the id its refresh used, so a refresh outside a stream (a task-list
    read) whose publication failed is still published. Ids derive from the record: a redelivery repeats them."""
    new_item, old_item = _image(record, "NewImage"), _image(record, "OldImage")
    if new_item is None:
        if old_item is not None:
            gone, at = codec.task_from_item(old_item), _record_time(record, deps)
            emit(deps, workspace_id=gone.workspace_id, task_id=gone.id, session_id=None,
                 event_id=f"task.deleted:{gone.id}", kind="task.deleted", at=at,
                 payload={"id": gone.id, "deleted_at": at})
        return
    task = codec.task_from_item(new_item)
    if old_item is None:
        emit(deps, workspace_id=task.workspace_id, task_id=task.id, session_id=None,
             event_id=f"task.created:{task.id}", kind="task.created", at=task.created_at, payload=task_view(task))
        return
    old = codec.task_from_item(old_item)
    if (task.title, task.workflow_step) != (old.title, old.workflow_step):
        emit(deps, workspace_id=task.workspace_id, task_id=task.id, session_id=None,
             event_id=f"task.updated:{task.id}:{_sequence(record)}", kind="task.updated",
             at=_record_time(record, deps), payload=task_view(task))
    if task.summary.revision > old.summary.revision:
        publish_summary(deps, task)
