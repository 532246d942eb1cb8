"""Every write of the plain records (tasks, history, the event feed, idempotency records, metadata), defined
once: the item or the changes, and the condition that makes it idempotent.

A store provides one primitive, `_record(write)`: DynamoStore renders a RecordWrite as one PutItem, UpdateItem
or DeleteItem, MemoryStore evaluates the same clauses on its stored item and applies the same changes. Both
raise ConditionFailed when the condition does not hold. The session aggregate's writes are in
chalicelib.store.writes.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ..domain.errors import AlreadyRemembered, ConditionFailed
from ..domain.model import Event, Message, Task, TurnRecord
from ..domain.time import parse_iso
from . import codec
from .document import Clause, Equals, Exists, Missing, Not, Put, Write
from .protocol import Remembered
from .size import ensure_fits

EVENT_TTL = timedelta(days=7)
TABLE_KEYS = {"tasks": ("task_id",), "history": ("session_id", "sk"), "events": ("workspace_id", "sk"),
              "idempotency": ("key",), "meta": ("key",)}  # base table name -> key attributes


@dataclass(frozen=True)
class RecordWrite:
    """One conditional write of a plain record: `item` put whole (PutItem), or `changes` applied to the item
    (UpdateItem: a missing item starts as its key), or (`delete`) the item removed; only if `condition`."""

    table: str  # base name (TABLE_KEYS)
    key: dict[str, Any]
    condition: tuple[Clause, ...] = ()
    item: dict[str, Any] | None = None
    changes: tuple[Put, ...] = ()
    delete: bool = False

    @property
    def write(self) -> Write:
        return Write(self.condition, self.changes)


def _key(table: str, item: dict[str, Any]) -> dict[str, Any]:
    return {name: item[name] for name in TABLE_KEYS[table]}


def _create(table: str, item: dict[str, Any]) -> RecordWrite:
    """Create-if-absent: the item's last key attribute must not exist yet."""
    return RecordWrite(table, _key(table, item), (Missing((TABLE_KEYS[table][-1],)),), item=item)


def _set(table: str, key: dict[str, Any], fields: dict[str, Any], *condition: Clause) -> RecordWrite:
    return RecordWrite(table, key, condition, changes=tuple(Put((name,), value) for name, value in fields.items()))


class PlainRecords(ABC):
    """The plain records' writes: a store executes each RecordWrite; the decisions are all here."""

    @abstractmethod
    def _record(self, write: RecordWrite) -> None:
        """Execute `write` atomically; ConditionFailed when its condition does not hold."""
        ...

    def _done(self, write: RecordWrite) -> bool:
        """False when the condition did not hold (already created, already gone, never created)."""
        try:
            self._record(write)
            return True
        except ConditionFailed:
            return False

    # ---------------------------------------------------------------- tasks
    def put_task(self, task: Task) -> None:
        """Raises ConditionFailed when the task exists."""
        self._record(_create("tasks", codec.task_to_item(task)))

    def delete_task(self, task_id: str) -> bool:
        return self._done(RecordWrite("tasks", {"task_id": task_id}, (Exists(("task_id",)),), delete=True))

    # ---------------------------------------------------------------- idempotency records
    def remember(self, entry: Remembered) -> None:
        if not self._done(_create("idempotency", remember_item(entry))):
            raise AlreadyRemembered("this idempotency key was already used")

    def update_remembered(self, entry: Remembered) -> None:
        item = remember_item(entry)
        self._done(RecordWrite("idempotency", _key("idempotency", item), (Exists(("key",)),), item=item))

    # ---------------------------------------------------------------- history
    def put_message(self, message: Message) -> bool:
        """Create-if-absent: a tombstone is present, so a deleted message is never recreated."""
        item = codec.message_to_item(message)
        ensure_fits(item)
        return self._done(_create("history", item))

    def put_turn_record(self, record: TurnRecord, workspace_id: str, task_id: str) -> None:
        fields: dict[str, Any] = {"kind": "turn", "item_id": record.id, "workspace_id": workspace_id,
                                  "task_id": task_id, "turn_id": record.id, "turn_seq": record.seq,
                                  "turn_order": record.seq, "created_at": record.started_at}
        if record.completed_at:  # never un-complete a record on redelivery
            fields["completed_at"] = record.completed_at
        self._record(_set("history", {"session_id": record.session_id, "sk": codec.history_sk_turn(record.seq)},
                          fields))

    def delete_message(self, message: Message) -> bool:
        """Tombstone the message (kept, hidden), recorded or not yet: put_message never recreates it."""
        item = codec.message_to_item(message)
        fields = {k: v for k, v in item.items() if k not in ("session_id", "sk")}
        return self._done(_set("history", _key("history", item), {**fields, "deleted": True},
                               Not(Equals(("deleted",), True))))

    def mark_archived(self, session_id: str, bundle_id: str, *, dismissed_by: str | None = None,
                      late_message_id: str | None = None) -> bool:
        changes = []
        if dismissed_by is not None:
            changes.append(Put(("bundle", "dismissed_by", dismissed_by), True))
        if late_message_id is not None:
            changes.append(Put(("bundle", "late_message_id"), late_message_id))
        return self._done(RecordWrite("history", {"session_id": session_id, "sk": codec.history_sk_archive(bundle_id)},
                                      (Exists(("sk",)),), changes=tuple(changes)))

    def delete_archived(self, session_id: str, bundle_id: str) -> bool:
        return self._done(RecordWrite("history", {"session_id": session_id, "sk": codec.history_sk_archive(bundle_id)},
                                      (Exists(("sk",)),), delete=True))

    # ---------------------------------------------------------------- events and metadata
    def put_event(self, event: Event, written_at: str) -> bool:
        item = codec.event_to_item(event, written_at, int((parse_iso(written_at) + EVENT_TTL).timestamp()))
        ensure_fits(item)
        return self._done(_create("events", item))

    def set_meta(self, key: str, value: str, at: str) -> None:
        self._record(RecordWrite("meta", {"key": key}, item={"key": key, "value": value, "updated_at": at}))


def remember_item(entry: Remembered) -> dict[str, Any]:
    """The idempotency record (alone, or inside the admission's transaction)."""
    return {"key": entry.key, "fingerprint": entry.fingerprint, "response": codec.stored_json(dict(entry.response)),
            "expires_at": entry.expires_at}
