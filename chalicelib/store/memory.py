"""In-memory store with DynamoStore's contract, for fast service tests and the harnesses.

Session and task items are kept in their stored shape; every conditional write is the shared definition in
chalicelib.store.writes, evaluated here under one lock exactly as DynamoDB evaluates it on one item.
tests/contract runs the same suite against both stores.
"""
from __future__ import annotations

import copy
import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from ..domain.errors import AlreadyRemembered, ConditionFailed, StoreRejected
from ..domain.model import Bundle, Event, Message, Session, Task, TurnRecord
from . import codec
from .document import InvalidPath, Write
from .protocol import Paged, Remembered
from .size import ensure_fits
from .writes import QUARANTINE_SHARD, RECON_SHARD, ConditionalWrites

T = TypeVar("T")


class MemoryStore(ConditionalWrites):
    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.items: dict[str, dict[str, Any]] = {}  # session aggregates as stored
        self.sessions: dict[str, Session] = {}  # the same, decoded (kept in step)
        self.task_items: dict[str, dict[str, Any]] = {}
        self.history: dict[str, dict[str, Message | TurnRecord]] = {}
        self.tombstones: set[tuple[str, str]] = set()
        self.archive: dict[str, dict[str, dict[str, Any]]] = {}  # session -> bundle id -> archive record
        self.events: dict[str, dict[str, tuple[str, Event]]] = {}
        self.meta: dict[str, str] = {}
        self.remembered: dict[str, Remembered] = {}
        self.writes = 0

    # ---------------------------------------------------------------- the shared conditional writes
    def _commit(self, session_id: str, write: Write, remember: Remembered | None = None) -> Session:
        with self._lock:
            if remember is not None and remember.key in self.remembered:
                raise AlreadyRemembered("this idempotency key was already used")
            item = self.items.get(session_id)
            if item is None or not write.holds(item):
                raise ConditionFailed("the session changed", current=self.sessions.get(session_id))
            new = _applied(write, item)
            self.items[session_id] = new
            self.sessions[session_id] = session = codec.session_from_item(new)
            if remember is not None:
                self.remembered[remember.key] = remember
            self.writes += 1
            return session

    def _commit_archiving(self, session_id: str, write: Write, session: Session,
                          bundles: Sequence[Bundle]) -> Session:
        with self._lock:
            records = [codec.archive_to_item(session, b) for b in bundles]
            for record in records:
                _check_size(record)
            new = self._commit(session_id, write)
            for record in records:
                self.archive.setdefault(session_id, {})[record["item_id"]] = record
            self.writes += len(records)
            return new

    def _apply(self, session_id: str, write: Write) -> None:
        with self._lock:
            item = self.items.get(session_id)
            if item is None or not write.holds(item):
                raise ConditionFailed("the session changed", current=self.sessions.get(session_id))
            self.items[session_id] = new = _applied(write, item)
            try:
                self.sessions[session_id] = codec.session_from_item(new)
            except Exception:
                self.sessions.pop(session_id, None)
            self.writes += 1

    def quarantined_sessions(self) -> list[str]:
        return sorted(sid for sid, item in list(self.items.items()) if item.get("recon_shard") == QUARANTINE_SHARD)

    def _commit_task(self, task_id: str, write: Write, checks: Mapping[str, Write] | None = None) -> Task:
        with self._lock:
            for session_id, check in (checks or {}).items():
                if not check.holds(self.items.get(session_id) or {}):
                    raise ConditionFailed("a checked session changed")
            item = self.task_items.get(task_id)
            if item is None or not write.holds(item):
                raise ConditionFailed("the task changed", current=codec.task_from_item(item) if item else None)
            self.task_items[task_id] = new = _applied(write, item)
            self.writes += 1
            return codec.task_from_item(new)

    def put_raw_session(self, item: Mapping[str, Any]) -> None:
        """Store an aggregate exactly as given (other writers' shapes, broken items, in tests)."""
        with self._lock:
            self.items[item["session_id"]] = copy.deepcopy(dict(item))
            try:
                self.sessions[item["session_id"]] = codec.session_from_item(item)
            except Exception:
                self.sessions.pop(item["session_id"], None)

    # ---------------------------------------------------------------- tasks
    @property
    def tasks(self) -> dict[str, Task]:
        return {task_id: codec.task_from_item(item) for task_id, item in list(self.task_items.items())}

    def put_task(self, task: Task) -> None:
        with self._lock:
            if task.id in self.task_items:
                raise ConditionFailed("task exists", current=codec.task_from_item(self.task_items[task.id]))
            self.task_items[task.id] = codec.task_to_item(task)
            self.writes += 1

    def get_task(self, task_id: str) -> Task | None:
        item = self.task_items.get(task_id)
        return codec.task_from_item(item) if item is not None else None

    def delete_task(self, task_id: str) -> bool:
        with self._lock:
            removed = self.task_items.pop(task_id, None) is not None
            self.writes += removed
            return removed

    def list_tasks(self, workspace_id: str) -> list[Task]:
        tasks = [codec.task_from_item(i) for i in list(self.task_items.values()) if i["workspace_id"] == workspace_id]
        return sorted(tasks, key=lambda t: t.created_at)

    def page_tasks(self, workspace_id: str, limit: int, after: tuple[str, ...] | None) -> Paged[Task]:
        keyed = sorted(((i["list_key"], i["task_id"]), i) for i in list(self.task_items.values())
                       if i["workspace_id"] == workspace_id and "list_key" in i)  # the index is sparse
        return _page([(k, codec.task_from_item(i)) for k, i in reversed(keyed) if after is None or k < after], limit)

    def unlisted_tasks(self, limit: int, after: str | None) -> tuple[list[Task], str | None]:
        ids = sorted(tid for tid in list(self.task_items) if after is None or tid > after)
        step = ids[:limit]
        return ([codec.task_from_item(self.task_items[t]) for t in step if "list_key" not in self.task_items[t]],
                step[-1] if len(ids) > limit else None)

    # ---------------------------------------------------------------- sessions
    def page_sessions(self, task_id: str, limit: int, after: tuple[str, ...] | None) -> Paged[Session]:
        found = [(s.created_at, s.id) for s in self.list_sessions(task_id)]
        keyed = sorted(((k, self.get_session(k[1])) for k in found if after is None or k < after), reverse=True)
        return _page([(k, s) for k, s in keyed if s is not None], limit)

    def get_sessions(self, session_ids: Sequence[str]) -> list[Session]:
        return [s for s in (self.get_session(sid) for sid in dict.fromkeys(session_ids)) if s is not None]

    def create_session(self, session: Session) -> None:
        with self._lock:
            if session.id in self.items:
                raise ConditionFailed("session exists", current=self.sessions[session.id])
            item = codec.session_to_item(session)
            _check_size(item)
            self.items[session.id] = item
            self.sessions[session.id] = codec.session_from_item(item)
            self.writes += 1

    def get_session(self, session_id: str) -> Session | None:
        item = self.items.get(session_id)
        if item is not None and session_id not in self.sessions:
            return codec.session_from_item(item)  # raises, as DynamoStore does, for an item that does not decode
        return self.sessions.get(session_id)

    def list_sessions(self, task_id: str) -> list[Session]:
        found = [self.get_session(sid) for sid, item in list(self.items.items()) if item.get("task_id") == task_id]
        return sorted((s for s in found if s is not None), key=lambda s: s.created_at, reverse=True)

    # ---------------------------------------------------------------- idempotency records
    def get_remembered(self, key: str) -> Remembered | None:
        return self.remembered.get(key)

    def remember(self, entry: Remembered) -> None:
        with self._lock:
            if entry.key in self.remembered:
                raise AlreadyRemembered("this idempotency key was already used")
            self.remembered[entry.key] = entry
            self.writes += 1

    def update_remembered(self, entry: Remembered) -> None:
        with self._lock:
            if entry.key in self.remembered:
                self.remembered[entry.key] = entry
                self.writes += 1

    # ---------------------------------------------------------------- history
    def put_message(self, message: Message) -> bool:
        key = codec.history_sk_message(message.turn_seq, message.created_at, message.id)
        _check_size(codec.message_to_item(message))  # as DynamoDB would count it
        with self._lock:
            items = self.history.setdefault(message.session_id, {})
            if key in items or (message.session_id, key) in self.tombstones:
                return False
            items[key] = message
            self.writes += 1
            return True

    def put_turn_record(self, record: TurnRecord, workspace_id: str, task_id: str) -> None:
        key = codec.history_sk_turn(record.seq)
        with self._lock:
            items = self.history.setdefault(record.session_id, {})
            old = items.get(key)
            completed = record.completed_at or (old.completed_at if isinstance(old, TurnRecord) else None)
            items[key] = replace(record, completed_at=completed)  # never un-complete a record on redelivery
            self.writes += 1

    def delete_message(self, message: Message) -> bool:
        key = codec.history_sk_message(message.turn_seq, message.created_at, message.id)
        with self._lock:
            if (message.session_id, key) in self.tombstones:
                return False
            self.history.get(message.session_id, {}).pop(key, None)
            self.tombstones.add((message.session_id, key))  # recorded or not yet: put_message never recreates it
            self.writes += 1
            return True

    def list_history(self, session_id: str) -> tuple[list[TurnRecord], list[Message]]:
        items = [v for _, v in sorted(self.history.get(session_id, {}).items())]
        return ([i for i in items if isinstance(i, TurnRecord)], [i for i in items if isinstance(i, Message)])

    def page_messages(self, session_id: str, limit: int, before: str | None) -> Paged[tuple[str, Message]]:
        items = sorted(((k, v) for k, v in list(self.history.get(session_id, {}).items())
                        if isinstance(v, Message) and (before is None or k < before)), reverse=True)
        return _page([((k,), (k, m)) for k, m in items], limit)

    def page_turns(self, session_id: str, limit: int, before: int | None) -> Paged[TurnRecord]:
        records = sorted((v for v in list(self.history.get(session_id, {}).values())
                          if isinstance(v, TurnRecord) and (before is None or v.seq < before)),
                         key=lambda r: r.seq, reverse=True)
        return _page([((str(r.seq),), r) for r in records], limit)

    def get_archived_many(self, session_id: str, bundle_ids: Sequence[str]) -> list[Bundle]:
        return [b for b in (self.get_archived(session_id, i) for i in dict.fromkeys(bundle_ids)) if b is not None]

    def get_archived(self, session_id: str, bundle_id: str) -> Bundle | None:
        record = self.archive.get(session_id, {}).get(bundle_id)
        return codec.archive_from_item(record) if record is not None else None

    def list_archived(self, session_id: str) -> list[Bundle]:
        records = sorted(self.archive.get(session_id, {}).values(), key=lambda r: r["sk"])
        return [codec.archive_from_item(r) for r in records]

    def mark_archived(self, session_id: str, bundle_id: str, *, dismissed_by: str | None = None,
                      late_message_id: str | None = None) -> bool:
        with self._lock:
            record = self.archive.get(session_id, {}).get(bundle_id)
            if record is None:
                return False
            bundle = record["bundle"] = dict(record["bundle"])
            if dismissed_by is not None:
                bundle["dismissed_by"] = {**(bundle.get("dismissed_by") or {}), dismissed_by: True}
            if late_message_id is not None:
                bundle["late_message_id"] = late_message_id
            self.writes += 1
            return True

    def delete_archived(self, session_id: str, bundle_id: str) -> bool:
        with self._lock:
            removed = self.archive.get(session_id, {}).pop(bundle_id, None) is not None
            self.writes += removed
            return removed

    # ---------------------------------------------------------------- events
    def put_event(self, event: Event, written_at: str) -> bool:
        key = f"{event.at}#{event.id}"
        _check_size(codec.event_to_item(event, written_at, 0))  # as DynamoDB would count it
        with self._lock:
            feed = self.events.setdefault(event.workspace_id, {})
            if key in feed:
                return False
            feed[key] = (written_at, event)
            self.writes += 1
            return True

    def list_events(self, workspace_id: str, *, low_sk: str, after_sk: str, written_after: str,
                    limit: int) -> list[tuple[str, str, Event]]:
        out = []
        for sk, (written_at, event) in sorted(self.events.get(workspace_id, {}).items()):
            if sk > low_sk and (sk > after_sk or written_at > written_after):
                out.append((sk, written_at, event))
        return out[:limit]

    # ---------------------------------------------------------------- meta and reconciler work
    def get_meta(self, key: str) -> str | None:
        return self.meta.get(key)

    def set_meta(self, key: str, value: str, at: str) -> None:
        self.meta[key] = value

    def list_meta(self, prefix: str) -> dict[str, str]:
        return {k: v for k, v in list(self.meta.items()) if k.startswith(prefix)}

    def due_sessions(self, before: str | None) -> list[str]:
        due = [(item.get("recon_due"), sid) for sid, item in list(self.items.items())
               if item.get("recon_shard") == RECON_SHARD]
        return [sid for when, sid in sorted(due) if when and (before is None or when < before)]


def _page(keyed: list[tuple[tuple[str, ...], T]], limit: int) -> Paged[T]:
    """The first `limit` of `keyed` (already in page order) and the position after them, if more follow."""
    return Paged([v for _, v in keyed[:limit]], keyed[limit - 1][0] if len(keyed) > limit else None)


def _applied(write: Write, item: Mapping[str, Any]) -> dict[str, Any]:
    try:
        new = write.applied(item)
    except InvalidPath as exc:
        raise StoreRejected(str(exc)) from exc
    _check_size(new)
    return new


def _check_size(item: Mapping[str, Any]) -> None:
    ensure_fits(item)
