"""DynamoDB store: the session aggregate's write path (every decision one conditional UpdateItem) plus the
plain records (chalicelib.store.records). The writes themselves are defined in chalicelib.store.writes."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from botocore.config import Config

from .. import aws
from ..domain.model import Bundle, Session, Task
from . import codec
from .document import Write
from .errors import guarded, storage_errors
from .expr import to_attr
from .models import SessionRecord, TaskRecord
from .protocol import Remembered
from .records import DynamoRecords, archive_put, query_all, reconciler_work, remember_put
from .writes import QUARANTINE_SHARD, ConditionalWrites

# Clarify builds every request from typed values and DynamoDB validates each one anyway: botocore checking the
# parameters against the service model first cost about a tenth of a request's client time.
CLIENT_CONFIG = Config(parameter_validation=False)


class DynamoStore(ConditionalWrites, DynamoRecords):
    def __init__(self, client: Any | None = None) -> None:
        self._client_override = client
        self._client_cache: Any = None

    @property
    def client(self) -> Any:
        if self._client_override is not None:
            return self._client_override
        if self._client_cache is None:
            meta: Any = SessionRecord.Meta
            self._client_cache = aws.client("dynamodb", region_name=getattr(meta, "region", None),
                                            endpoint_url=getattr(meta, "host", None), config=CLIENT_CONFIG)
        return self._client_cache

    @property
    def sessions_table(self) -> str:
        return str(SessionRecord.Meta.table_name)

    # ---------------------------------------------------------------- the session aggregate
    def create_session(self, session: Session) -> None:
        item = {k: to_attr(v) for k, v in codec.session_to_item(session).items()}
        guarded(lambda: self.client.put_item(TableName=self.sessions_table, Item=item,
                                             ConditionExpression="attribute_not_exists(session_id)"))

    def get_session(self, session_id: str) -> Session | None:
        resp = guarded(lambda: self.client.get_item(
            TableName=self.sessions_table, Key={"session_id": {"S": session_id}}, ConsistentRead=True))
        item = resp.get("Item")
        return codec.session_from_item(codec.from_attrs(item)) if item else None

    def list_sessions(self, task_id: str) -> list[Session]:
        return query_all(self.client, lambda i: codec.session_from_item(codec.from_attrs(i)),
                         TableName=self.sessions_table, IndexName=SessionRecord.by_task.Meta.index_name,
                         KeyConditionExpression="task_id = :t", ExpressionAttributeValues={":t": {"S": task_id}},
                         ScanIndexForward=False)

    def _commit(self, session_id: str, write: Write, remember: Remembered | None = None) -> Session:
        """One UpdateItem; with `remember`, one transaction with the idempotency record's creation."""
        if remember is not None:
            self._transact(self._update(session_id, write), [remember_put(remember)], remembering=True)
            return self._read_back(session_id)
        resp = self._update_item(self._update(session_id, write), ReturnValues="ALL_NEW")
        return codec.session_from_item(codec.from_attrs(resp["Attributes"]))

    def _commit_archiving(self, session_id: str, write: Write, session: Session,
                          bundles: Sequence[Bundle]) -> Session:
        self._transact(self._update(session_id, write), [archive_put(session, b) for b in bundles])
        return self._read_back(session_id)

    def _apply(self, session_id: str, write: Write) -> None:
        self._update_item(self._update(session_id, write))

    def _update(self, session_id: str, write: Write) -> dict[str, Any]:
        return {"TableName": self.sessions_table, "Key": {"session_id": {"S": session_id}},
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD", **write.render()}

    def _update_item(self, update: dict[str, Any], **extra: Any) -> dict[str, Any]:
        """The one UpdateItem of the aggregate's write path; a failed condition carries the current item."""
        with storage_errors(current=_session):
            return dict(self.client.update_item(**update, **extra))

    def _read_back(self, session_id: str) -> Session:
        session = self.get_session(session_id)  # a transaction returns no item
        assert session is not None
        return session

    def quarantined_sessions(self) -> list[str]:
        return reconciler_work(self.client, QUARANTINE_SHARD)

    def _transact(self, update: dict[str, Any], puts: list[dict[str, Any]], *, remembering: bool = False) -> None:
        """The aggregate's update and plain records' creation in one transaction; with `remembering`, the
        first record is the idempotency record, whose failed condition means the key was used."""
        with storage_errors(current=_session, remembered=1 if remembering else None):  # in request order
            self.client.transact_write_items(TransactItems=[{"Update": update}, *({"Put": p} for p in puts)])

    # ---------------------------------------------------------------- task updates
    def _commit_task(self, task_id: str, write: Write, checks: Mapping[str, Write] | None = None) -> Task:
        if checks:
            self._transact_checked(task_id, write, checks)
            task = self.get_task(task_id)
            assert task is not None
            return task
        with storage_errors(current=_task):
            resp = self.client.update_item(
                TableName=TaskRecord.Meta.table_name, Key={"task_id": {"S": task_id}}, ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD", **write.render())
        return _task(resp["Attributes"])

    def _transact_checked(self, task_id: str, write: Write, checks: Mapping[str, Write]) -> None:
        items: list[dict[str, Any]] = [
            {"ConditionCheck": {"TableName": self.sessions_table, "Key": {"session_id": {"S": sid}},
                                **check.render_check()}} for sid, check in checks.items()]
        items.append({"Update": {"TableName": TaskRecord.Meta.table_name, "Key": {"task_id": {"S": task_id}},
                                 **write.render()}})
        with storage_errors():  # a failed check or update: ConditionFailed, decided again by the caller
            self.client.transact_write_items(TransactItems=items)


def _session(item: Mapping[str, Any]) -> Session:
    return codec.session_from_item(codec.from_attrs(item))


def _task(item: Mapping[str, Any]) -> Task:
    return codec.task_from_item(codec.from_attrs(item))
