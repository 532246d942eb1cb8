"""In-memory store with DynamoStore's contract, for fast service tests and the harnesses.

Every item is kept in its stored shape; every conditional write is the shared definition in
chalicelib.store.writes (the session aggregate, a task's summary) or chalicelib.store.plain (the plain
records), evaluated here under one lock exactly as DynamoDB evaluates it on one item. Reads are the queries
DynamoStore makes, over the same items. tests/contract runs the same suite against both stores.
"""
from __future__ import annotations

import copy
import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from ..domain.errors import AlreadyRemembered, ConditionFailed, StoreRejected
from ..domain.model import Bundle, Event, Message, Session, Task, TurnRecord
from . import codec
from .document import InvalidPath, Write, copied
from .plain import TABLE_KEYS, PlainRecords, RecordWrite, remember_item
from .protocol import Paged, Remembered
from .size import ensure_fits
from .writes import QUARANTINE_SHARD, RECON_SHARD, ConditionalWrites

T = TypeVar("T")


class MemoryStore(ConditionalWrites, PlainRecords):
    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.items: dict[str, dict[str, Any]] = {}  # session aggregates as stored
        self.sessions: dict[str, Session] = {}  # the same, decoded (kept in step)
        # the plain records as stored: base table name -> key values -> item
        self.tables: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {name: {} for name in TABLE_KEYS}
        self.task_items: dict[str, dict[str, Any]] = {}  # the tasks table, by task id alone
        self.writes = 0

    # ---------------------------------------------------------------- the one primitive of the plain records
    def _record(self, write: RecordWrite) -> None:
        with self._lock:
            table = self._table(write.table)
            key: Any = write.key["task_id"] if write.table == "tasks" else tuple(write.key.values())
            item = table.get(key)
            if not all(c.holds(item or {}) for c in write.condition):
                raise ConditionFailed("the record changed or already exists")
            if write.delete:
                table.pop(key, None)
            elif write.item is not None:
                _check_size(write.item)
                table[key] = copied(write.item)
            else:
                table[key] = _applied(write.write, item or dict(write.key))
            self.writes += write.table != "meta"  # deployment metadata is not counted as data written

    def _table(self, name: str) -> dict[Any, dict[str, Any]]:
        return self.task_items if name == "tasks" else self.tables[name]  # type: ignore[return-value]

    def _history(self, session_id: str) -> list[dict[str, Any]]:
        """A session's history items in key order (a Query of its partition)."""
        return [item for (sid, _), item in sorted(list(self.tables["history"].items())) if sid == session_id]

    # ---------------------------------------------------------------- the shared conditional writes
    def _commit(self, session_id: str, write: Write, remember: Remembered | None = None) -> Session:
        with self._lock:
            if remember is not None and (remember.key,) in self.tables["idempotency"]:
                raise AlreadyRemembered("this idempotency key was already used")
            item = self.items.get(session_id)
            if item is None or not write.holds(item):
                raise ConditionFailed("the session changed", current=self.sessions.get(session_id))
            new = _applied(write, item)
            self.items[session_id] = new
            self.sessions[session_id] = session = codec.session_from_item(new)
            if remember is not None:
                self.tables["idempotency"][(remember.key,)] = remember_item(remember)
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
                self.tables["history"][(session_id, record["sk"])] = record
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

    def get_task(self, task_id: str) -> Task | None:
        item = self.task_items.get(task_id)
        return codec.task_from_item(item) if item is not None else None

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
        item = self.tables["idempotency"].get((key,))
        return None if item is None else Remembered(key=item["key"], fingerprint=item["fingerprint"],
                                                    response=json.loads(item["response"]),
                                                    expires_at=int(item["expires_at"]))

    # ---------------------------------------------------------------- history
    def list_history(self, session_id: str) -> tuple[list[TurnRecord], list[Message]]:
        items = [i for i in self._history(session_id) if not i.get("deleted") and i["kind"] != "archive"]
        return ([codec.turn_record_from_history(i) for i in items if i["kind"] == "turn"],
                [codec.message_from_history(i) for i in items if i["kind"] != "turn"])

    def page_messages(self, session_id: str, limit: int, before: str | None) -> Paged[tuple[str, Message]]:
        items = [i for i in reversed(self._history(session_id)) if i["kind"] == "message" and "deleted" not in i
                 and codec.HISTORY_TURNS_FROM <= i["sk"] < (before or codec.HISTORY_TURNS_TO)]
        return _page([((i["sk"],), (i["sk"], codec.message_from_history(i))) for i in items], limit)

    def page_turns(self, session_id: str, limit: int, before: int | None) -> Paged[TurnRecord]:
        items = sorted((i for i in self._history(session_id) if "turn_order" in i
                        and (before is None or i["turn_order"] < before)), key=lambda i: -i["turn_order"])
        return _page([((str(i["turn_seq"]),), codec.turn_record_from_history(i)) for i in items], limit)

    def get_archived_many(self, session_id: str, bundle_ids: Sequence[str]) -> list[Bundle]:
        return [b for b in (self.get_archived(session_id, i) for i in dict.fromkeys(bundle_ids)) if b is not None]

    def get_archived(self, session_id: str, bundle_id: str) -> Bundle | None:
        record = self.tables["history"].get((session_id, codec.history_sk_archive(bundle_id)))
        return codec.archive_from_item(record) if record is not None else None

    def list_archived(self, session_id: str) -> list[Bundle]:
        prefix = codec.history_sk_archive("")
        return [codec.archive_from_item(i) for i in self._history(session_id) if i["sk"].startswith(prefix)]

    # ---------------------------------------------------------------- events
    def list_events(self, workspace_id: str, *, low_sk: str, after_sk: str, written_after: str,
                    limit: int) -> list[tuple[str, str, Event]]:
        found = sorted((i for (ws, _), i in list(self.tables["events"].items()) if ws == workspace_id
                        and i["sk"] > low_sk and (i["sk"] > after_sk or i["written_at"] > written_after)),
                       key=lambda i: i["sk"])
        return [(i["sk"], i["written_at"], codec.event_from_item(i)) for i in found[:limit]]

    def all_events(self) -> list[Event]:
        """Every event in the feed (for tests and harnesses)."""
        return [codec.event_from_item(i) for i in list(self.tables["events"].values())]

    # ---------------------------------------------------------------- meta and reconciler work
    def get_meta(self, key: str) -> str | None:
        item = self.tables["meta"].get((key,))
        return str(item["value"]) if item is not None else None

    def list_meta(self, prefix: str) -> dict[str, str]:
        return {i["key"]: i["value"] for i in list(self.tables["meta"].values()) if i["key"].startswith(prefix)}

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
