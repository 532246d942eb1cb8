"""DynamoDB plain records: tasks, history, the event feed, idempotency records and deployment metadata.

None of them carries operational truth of a session: they are append-mostly, idempotent by key, and the
session aggregate's write path (chalicelib.store.dynamo) never depends on them.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ..domain.errors import StoreUnavailable
from ..domain.model import Bundle, Event, Message, Session, Task, TurnRecord
from . import codec
from .document import Write
from .errors import guarded, storage_errors
from .expr import to_attr
from .models import (
    BASE_NAMES,
    EventRecord,
    HistoryRecord,
    IdempotencyRecord,
    MetaRecord,
    SessionRecord,
    TaskRecord,
)
from .plain import PlainRecords, RecordWrite, remember_item
from .protocol import Paged, Remembered
from .writes import RECON_SHARD

T = TypeVar("T")


class DynamoRecords(PlainRecords):
    """The plain records on DynamoDB: every write (chalicelib.store.plain) one request, and the reads."""

    client: Any

    def _record(self, write: RecordWrite) -> None:
        table = str(MODELS[write.table].Meta.table_name)
        key = _attrs(write.key)
        condition = _condition(write)
        with storage_errors():
            if write.delete:
                self.client.delete_item(TableName=table, Key=key, **condition)
            elif write.item is not None:
                self.client.put_item(TableName=table, Item=_attrs(write.item), **condition)
            else:
                self.client.update_item(TableName=table, Key=key, **write.write.render())

    # ---------------------------------------------------------------- tasks
    def get_task(self, task_id: str) -> Task | None:
        resp = guarded(lambda: self.client.get_item(TableName=TaskRecord.Meta.table_name,
                                                    Key={"task_id": {"S": task_id}}, ConsistentRead=True))
        item = resp.get("Item")
        return codec.task_from_item(codec.from_attrs(item)) if item else None

    def list_tasks(self, workspace_id: str) -> list[Task]:
        return query_all(self.client, lambda i: codec.task_from_item(codec.from_attrs(i)),
                         TableName=TaskRecord.Meta.table_name, IndexName=TaskRecord.by_workspace.Meta.index_name,
                         KeyConditionExpression="workspace_id = :w",
                         ExpressionAttributeValues={":w": {"S": workspace_id}})

    def page_tasks(self, workspace_id: str, limit: int, after: tuple[str, ...] | None) -> Paged[Task]:
        start = ({"workspace_id": {"S": workspace_id}, "list_key": {"S": after[0]}, "task_id": {"S": after[1]}}
                 if after else None)
        items, more = _one_page(self.client, limit, start, TableName=TaskRecord.Meta.table_name,
                                IndexName=TaskRecord.by_activity.Meta.index_name,
                                KeyConditionExpression="workspace_id = :w",
                                ExpressionAttributeValues={":w": {"S": workspace_id}}, ScanIndexForward=False)
        tasks = [codec.task_from_item(i) for i in items]
        last = items[-1] if items else None
        return Paged(tasks, (last["list_key"], last["task_id"]) if more and last else None)

    def unlisted_tasks(self, limit: int, after: str | None) -> tuple[list[Task], str | None]:
        kwargs: dict[str, Any] = {"TableName": TaskRecord.Meta.table_name, "Limit": limit,
                                  "FilterExpression": "attribute_not_exists(list_key)"}
        if after is not None:
            kwargs["ExclusiveStartKey"] = {"task_id": {"S": after}}
        resp = guarded(lambda: self.client.scan(**kwargs))
        last = resp.get("LastEvaluatedKey")
        return ([codec.task_from_item(codec.from_attrs(i)) for i in resp.get("Items", [])],
                last["task_id"]["S"] if last else None)

    def page_sessions(self, task_id: str, limit: int, after: tuple[str, ...] | None) -> Paged[Session]:
        start = ({"task_id": {"S": task_id}, "created_at": {"S": after[0]}, "session_id": {"S": after[1]}}
                 if after else None)
        items, more = _one_page(self.client, limit, start, TableName=SessionRecord.Meta.table_name,
                                IndexName=SessionRecord.by_task.Meta.index_name,
                                KeyConditionExpression="task_id = :t",
                                ExpressionAttributeValues={":t": {"S": task_id}}, ScanIndexForward=False)
        last = items[-1] if items else None
        return Paged([codec.session_from_item(i) for i in items],
                     (last["created_at"], last["session_id"]) if more and last else None)

    def get_sessions(self, session_ids: Sequence[str]) -> list[Session]:
        keys = [{"session_id": {"S": sid}} for sid in dict.fromkeys(session_ids)]
        return [codec.session_from_item(i) for i in batch_get(self.client, SessionRecord.Meta.table_name, keys)]

    # ---------------------------------------------------------------- idempotency records
    def get_remembered(self, key: str) -> Remembered | None:
        item = _get(self.client, IdempotencyRecord.Meta.table_name, {"key": {"S": key}})
        if item is None:
            return None
        return Remembered(key=item["key"], fingerprint=item["fingerprint"], response=json.loads(item["response"]),
                          expires_at=int(item.get("expires_at") or 0))

    # ---------------------------------------------------------------- history
    def list_history(self, session_id: str) -> tuple[list[TurnRecord], list[Message]]:
        items = query_all(self.client, codec.from_attrs, TableName=HistoryRecord.Meta.table_name,
                          ConsistentRead=True, KeyConditionExpression="session_id = :s",
                          ExpressionAttributeValues={":s": {"S": session_id}})
        turns, messages = [], []
        for item in items:
            if item.get("deleted") or item["kind"] == "archive":
                continue
            if item["kind"] == "turn":
                turns.append(codec.turn_record_from_history(item))
            else:
                messages.append(codec.message_from_history(item))
        return turns, messages

    def page_messages(self, session_id: str, limit: int, before: str | None) -> Paged[tuple[str, Message]]:
        kwargs: dict[str, Any] = {
            "TableName": HistoryRecord.Meta.table_name, "ConsistentRead": True, "ScanIndexForward": False,
            "KeyConditionExpression": "session_id = :s AND sk BETWEEN :lo AND :hi",
            "FilterExpression": "#k = :m AND attribute_not_exists(#d)",
            "ExpressionAttributeNames": {"#k": "kind", "#d": "deleted"},
            "ExpressionAttributeValues": {":s": {"S": session_id}, ":m": {"S": "message"},
                                          ":lo": {"S": codec.HISTORY_TURNS_FROM},
                                          ":hi": {"S": before or codec.HISTORY_TURNS_TO}},
            "Limit": limit + 2}  # BETWEEN includes `before` itself: it is read and left out
        out: list[tuple[str, Message]] = []
        for _ in range(PAGE_QUERIES):  # turn records and tombstones between messages are read, not returned
            resp = guarded(lambda: self.client.query(**kwargs))
            out.extend((i["sk"], codec.message_from_history(i)) for i in map(codec.from_attrs, resp["Items"])
                       if i["sk"] != before)
            if len(out) > limit:
                return Paged(out[:limit], (out[limit - 1][0],))
            if "LastEvaluatedKey" not in resp:
                return Paged(out, None)
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]
        return Paged(out, (kwargs["ExclusiveStartKey"]["sk"]["S"],))  # short: the next page goes on from here

    def page_turns(self, session_id: str, limit: int, before: int | None) -> Paged[TurnRecord]:
        cond, values = "session_id = :s", {":s": {"S": session_id}}
        if before is not None:
            cond, values[":b"] = cond + " AND turn_order < :b", {"N": str(before)}
        items, more = _one_page(self.client, limit, None, TableName=HistoryRecord.Meta.table_name,
                                IndexName=HistoryRecord.turns.Meta.index_name, KeyConditionExpression=cond,
                                ExpressionAttributeValues=values, ScanIndexForward=False)
        turns = [codec.turn_record_from_history(i) for i in items]
        return Paged(turns, (str(turns[-1].seq),) if more and turns else None)

    def get_archived_many(self, session_id: str, bundle_ids: Sequence[str]) -> list[Bundle]:
        keys = [{"session_id": {"S": session_id}, "sk": {"S": codec.history_sk_archive(b)}}
                for b in dict.fromkeys(bundle_ids)]
        return [codec.archive_from_item(i) for i in batch_get(self.client, HistoryRecord.Meta.table_name, keys)]

    # ---------------------------------------------------------------- archived bundles (history records)
    def get_archived(self, session_id: str, bundle_id: str) -> Bundle | None:
        resp = guarded(lambda: self.client.get_item(
            TableName=HistoryRecord.Meta.table_name, ConsistentRead=True,
            Key={"session_id": {"S": session_id}, "sk": {"S": codec.history_sk_archive(bundle_id)}}))
        item = resp.get("Item")
        return codec.archive_from_item(codec.from_attrs(item)) if item else None

    def list_archived(self, session_id: str) -> list[Bundle]:
        return query_all(self.client, lambda i: codec.archive_from_item(codec.from_attrs(i)),
                         TableName=HistoryRecord.Meta.table_name, ConsistentRead=True,
                         KeyConditionExpression="session_id = :s AND begins_with(sk, :a)",
                         ExpressionAttributeValues={":s": {"S": session_id},
                                                    ":a": {"S": codec.history_sk_archive("")}})

    # ---------------------------------------------------------------- events
    def list_events(self, workspace_id: str, *, low_sk: str, after_sk: str, written_after: str,
                    limit: int) -> list[tuple[str, str, Event]]:
        kwargs: dict[str, Any] = {
            "TableName": EventRecord.Meta.table_name, "ConsistentRead": True, "Limit": limit,
            "KeyConditionExpression": "workspace_id = :w" + (" AND sk > :low" if low_sk else ""),
            "FilterExpression": "sk > :after OR written_at > :written",
            "ExpressionAttributeValues": {":w": {"S": workspace_id}, ":after": {"S": after_sk},
                                          ":written": {"S": written_after},
                                          **({":low": {"S": low_sk}} if low_sk else {})}}
        out: list[tuple[str, str, Event]] = []
        while len(out) < limit:  # one Query when the page is all news
            resp = guarded(lambda: self.client.query(**kwargs))
            out.extend((i["sk"], i["written_at"], codec.event_from_item(i))
                       for i in map(codec.from_attrs, resp.get("Items", [])))
            if "LastEvaluatedKey" not in resp:
                break
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]
        return out[:limit]

    # ---------------------------------------------------------------- meta and reconciler work
    def get_meta(self, key: str) -> str | None:
        item = _get(self.client, MetaRecord.Meta.table_name, {"key": {"S": key}})
        return str(item["value"]) if item is not None else None

    def list_meta(self, prefix: str) -> dict[str, str]:
        kwargs: dict[str, Any] = {"TableName": MetaRecord.Meta.table_name, "FilterExpression": "begins_with(#k, :p)",
                                  "ExpressionAttributeNames": {"#k": "key"},
                                  "ExpressionAttributeValues": {":p": {"S": prefix}}}
        out: dict[str, str] = {}
        while True:
            resp = guarded(lambda: self.client.scan(**kwargs))
            out.update((i["key"]["S"], i["value"]["S"]) for i in resp.get("Items", []))
            if "LastEvaluatedKey" not in resp:
                return out
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]

    def due_sessions(self, before: str | None) -> list[str]:
        return reconciler_work(self.client, RECON_SHARD, before)


def reconciler_work(client: Any, shard: str, before: str | None = None) -> list[str]:
    """The session ids in one partition of the sparse reconciler index (due before `before`, if given)."""
    values = {":s": {"S": shard}, **({":b": {"S": before}} if before else {})}
    return query_all(client, lambda i: i["session_id"]["S"], TableName=SessionRecord.Meta.table_name,
                     IndexName=SessionRecord.reconciler_work.Meta.index_name, ExpressionAttributeValues=values,
                     KeyConditionExpression="recon_shard = :s" + (" AND recon_due < :b" if before else ""))


def _get(client: Any, table: str, key: dict[str, Any]) -> dict[str, Any] | None:
    """One strongly consistent GetItem, decoded (None: no such item)."""
    item = guarded(lambda: client.get_item(TableName=table, Key=key, ConsistentRead=True)).get("Item")
    return codec.from_attrs(item) if item else None


PAGE_QUERIES = 4  # a transcript page reads at most this many Query pages


def _one_page(client: Any, limit: int, start: dict[str, Any] | None,
              **kwargs: Any) -> tuple[list[dict[str, Any]], bool]:
    """One Query for `limit` items (and one more, to know whether another page follows)."""
    if start:
        kwargs["ExclusiveStartKey"] = start
    resp = guarded(lambda: client.query(Limit=limit + 1, **kwargs))
    items = [codec.from_attrs(i) for i in resp.get("Items", [])]
    return items[:limit], len(items) > limit


def batch_get(client: Any, table: str, keys: list[dict[str, Any]], projection: str = "") -> list[dict[str, Any]]:
    """BatchGetItem (strongly consistent) in requests of 100 keys, unprocessed keys asked again; with
    `projection`, only those attributes come back."""
    out: list[dict[str, Any]] = []
    for start in range(0, len(keys), 100):
        request: dict[str, Any] = {table: {"Keys": keys[start:start + 100], "ConsistentRead": True,
                                           **({"ProjectionExpression": projection} if projection else {})}}
        for _ in range(10):
            resp = guarded(lambda r=request: client.batch_get_item(RequestItems=r))  # type: ignore[misc]
            out.extend(codec.from_attrs(i) for i in resp.get("Responses", {}).get(table, []))
            request = resp.get("UnprocessedKeys") or {}
            if not request:
                break
        else:
            raise StoreUnavailable("the database kept leaving keys of a batch read unprocessed")
    return out


def remember_put(entry: Remembered) -> dict[str, Any]:
    """PutItem arguments creating the idempotency record inside the admission's transaction."""
    return {"TableName": IdempotencyRecord.Meta.table_name, "Item": _attrs(remember_item(entry)),
            "ConditionExpression": "attribute_not_exists(#k)", "ExpressionAttributeNames": {"#k": "key"}}


def query_all(client: Any, decode: Callable[[dict[str, Any]], T], **kwargs: Any) -> list[T]:
    """Every item a Query finds, page after page, decoded."""
    def pages() -> list[T]:
        out: list[T] = []
        while True:
            resp = client.query(**kwargs)
            out.extend(decode(i) for i in resp.get("Items", []))
            if "LastEvaluatedKey" not in resp:
                return out
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]
    return guarded(pages)


def archive_put(session: Session, bundle: Bundle) -> dict[str, Any]:
    """PutItem arguments of a closed bundle's history record (inside the archiving transaction)."""
    return {"TableName": HistoryRecord.Meta.table_name, "Item": _attrs(codec.archive_to_item(session, bundle))}


def _attrs(item: dict[str, Any]) -> dict[str, Any]:
    return {k: to_attr(v) for k, v in item.items()}


def _condition(write: RecordWrite) -> dict[str, Any]:
    return Write(write.condition, ()).render_check() if write.condition else {}


MODELS = {base: model for model, base in BASE_NAMES.items()}  # base table name -> model (its configured name)
