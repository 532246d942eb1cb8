"""DynamoDB implementation of the store. The only module (with models.py) that talks to DynamoDB."""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import boto3
from botocore.exceptions import BotoCoreError, ClientError
from pynamodb.exceptions import PutError, PynamoDBException

from ..domain.errors import AlreadyRemembered, ConditionFailed, StoreUnavailable
from ..domain.model import (
    Bundle,
    Delivery,
    Dispatch,
    Event,
    Message,
    Prompt,
    Reservation,
    Session,
    State,
    StatusSummary,
    Task,
    Turn,
    TurnRecord,
    Watchdog,
)
from . import codec
from . import conditions as c
from .expr import Expr, to_attr
from .models import EventRecord, HistoryRecord, IdempotencyRecord, MetaRecord, SessionRecord, TaskRecord
from .protocol import Remembered

IDEMPOTENCY_TTL = timedelta(days=1)
RECON_SHARD = "due"  # one partition of the sparse index; it only ever holds outstanding work
EVENT_TTL = timedelta(days=7)
T = TypeVar("T")


def _translate(fn: Callable[[], T]) -> T:
    """Storage errors become domain errors at this boundary."""
    try:
        return fn()
    except ConditionFailed:
        raise
    except (ClientError, BotoCoreError, PynamoDBException) as exc:
        if _condition_failed(exc):
            raise ConditionFailed("the item changed or already exists") from exc
        raise StoreUnavailable(f"storage error: {exc}") from exc


def _condition_failed(exc: Exception) -> bool:
    if isinstance(exc, ClientError):
        return exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException"
    return getattr(exc, "cause_response_code", None) == "ConditionalCheckFailedException"


class DynamoStore:
    def __init__(self, client: Any | None = None) -> None:
        self._client_override = client
        self._client_cache: Any = None

    @property
    def client(self) -> Any:
        if self._client_override is not None:
            return self._client_override
        if self._client_cache is None:
            meta: Any = SessionRecord.Meta
            self._client_cache = boto3.client("dynamodb", region_name=getattr(meta, "region", None),
                                              endpoint_url=getattr(meta, "host", None))
        return self._client_cache

    @property
    def sessions_table(self) -> str:
        return str(SessionRecord.Meta.table_name)

    # ---------------------------------------------------------------- tasks
    def put_task(self, task: Task) -> None:
        rec = TaskRecord(task.id, workspace_id=task.workspace_id, created_at=task.created_at, title=task.title,
                         workflow_step=task.workflow_step, pending_action=task.summary.pending_action,
                         summary_revision=task.summary.revision,
                         primary_session_id=task.summary.primary_session_id)
        _translate(lambda: rec.save(condition=TaskRecord.task_id.does_not_exist()))

    def get_task(self, task_id: str) -> Task | None:
        def get() -> Task | None:
            try:
                return _task(TaskRecord.get(task_id, consistent_read=True))
            except TaskRecord.DoesNotExist:
                return None
        return _translate(get)

    def list_tasks(self, workspace_id: str) -> list[Task]:
        return _translate(lambda: [_task(r) for r in TaskRecord.by_workspace.query(workspace_id)])

    def set_task_summary(self, task_id: str, *, pending_action: str | None, primary_session_id: str | None,
                         expected_revision: int, at: str = "") -> Task:
        """Compare-and-set on the summary revision: an older computation never overwrites a newer one."""
        e = Expr()
        e.cond(f"attribute_exists({e.path('task_id')})")
        e.cond(f"{e.path('summary_revision')} = {e.value(expected_revision)}")
        if pending_action is None:
            e.remove(e.path("pending_action"))
        else:
            e.set(e.path("pending_action"), pending_action)
        if primary_session_id is None:
            e.remove(e.path("primary_session_id"))
        else:
            e.set(e.path("primary_session_id"), primary_session_id)
        e.set(e.path("summary_revision"), expected_revision + 1)
        if at:
            e.set(e.path("summary_at"), at)
        return self._update_task(task_id, e)

    def set_workflow_step(self, task_id: str, step: str) -> Task:
        e = Expr()
        e.cond(f"attribute_exists({e.path('task_id')})")
        e.set(e.path("workflow_step"), step)
        return self._update_task(task_id, e)

    def rename_task(self, task_id: str, title: str) -> Task:
        e = Expr()
        e.cond(f"attribute_exists({e.path('task_id')})")  # an update must never recreate a deleted task
        e.set(e.path("title"), title)
        return self._update_task(task_id, e)

    def delete_task(self, task_id: str) -> bool:
        try:
            self.client.delete_item(TableName=TaskRecord.Meta.table_name, Key={"task_id": {"S": task_id}},
                                    ConditionExpression="attribute_exists(task_id)")
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                return False
            raise StoreUnavailable(f"storage error: {exc}") from exc
        except BotoCoreError as exc:
            raise StoreUnavailable(f"storage error: {exc}") from exc
        return True

    def _update_task(self, task_id: str, e: Expr) -> Task:
        try:
            resp = self.client.update_item(
                TableName=TaskRecord.Meta.table_name, Key={"task_id": {"S": task_id}}, ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD", **e.update_kwargs())
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                old = exc.response.get("Item")
                raise ConditionFailed("the task changed", current=_task_item(codec.from_attrs(old)) if old
                                      else None) from exc
            raise StoreUnavailable(f"storage error: {exc}") from exc
        return _task_item(codec.from_attrs(resp["Attributes"]))

    # ---------------------------------------------------------------- sessions
    def create_session(self, session: Session) -> None:
        item = {k: to_attr(v) for k, v in codec.session_to_item(session).items()}
        _translate(lambda: self.client.put_item(
            TableName=self.sessions_table, Item=item,
            ConditionExpression="attribute_not_exists(session_id)"))

    def get_session(self, session_id: str) -> Session | None:
        resp = _translate(lambda: self.client.get_item(
            TableName=self.sessions_table, Key={"session_id": {"S": session_id}}, ConsistentRead=True))
        item = resp.get("Item")
        return codec.session_from_item(codec.from_attrs(item)) if item else None

    def list_sessions(self, task_id: str) -> list[Session]:
        def query() -> list[Session]:
            out: list[Session] = []
            kwargs: dict[str, Any] = {
                "TableName": self.sessions_table, "IndexName": SessionRecord.by_task.Meta.index_name,
                "KeyConditionExpression": "task_id = :t", "ExpressionAttributeValues": {":t": {"S": task_id}},
                "ScanIndexForward": False}
            while True:
                resp = self.client.query(**kwargs)
                out.extend(codec.session_from_item(codec.from_attrs(i)) for i in resp.get("Items", []))
                if "LastEvaluatedKey" not in resp:
                    return out
                kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]
        return _translate(query)

    def start_turn(self, session_id: str, *, expected_turn_id: str | None, from_states: Iterable[State],
                   turn: Turn, prompt: Prompt | None, state: State, at: str) -> Session:
        e = Expr()
        e.cond(c.turn_is(e, expected_turn_id))
        # The state machine: only states that can start a turn.
        e.cond(_state_in(e, from_states))
        e.set(e.path("current_turn"), codec.turn_to_item(turn))
        e.set(e.path("turn_seq"), turn.seq)
        e.set(e.path("state"), state.value)
        _touch(e, at)
        if prompt is not None:
            e.set(e.path("generation"), prompt.generation)
            e.set(e.path("prompt"), codec.prompt_to_item(prompt))
            _set_deadline(e, prompt.deadline)
        return self._update(session_id, e)

    def set_dispatch(self, session_id: str, message_id: str, *, expect: Dispatch, to: Dispatch,
                     at: str, deadline: str | None, close_turn_id: str | None = None) -> Session:
        e = Expr()
        # Only the prompt the caller handled, and only from the state it expects (at-most-once markers).
        e.cond(f"{e.path('prompt', 'message_id')} = {e.value(message_id)}")
        e.cond(f"{e.path('prompt', 'dispatch')} = {e.value(expect.value)}")
        e.set(e.path("prompt", "dispatch"), to.value)
        if deadline:
            e.set(e.path("prompt", "deadline"), deadline)
        else:
            e.remove(e.path("prompt", "deadline"))
        if close_turn_id is not None:
            _complete(e, close_turn_id, State.RUNNING, State.IDLE, at)
        _set_deadline(e, deadline)
        _touch(e, at)
        return self._update(session_id, e)

    def complete_turn(self, session_id: str, turn_id: str, *, from_state: State, to_state: State,
                      at: str) -> Session:
        e = Expr()
        _complete(e, turn_id, from_state, to_state, at)
        _touch(e, at)
        return self._update(session_id, e)

    def transition(self, session_id: str, *, to: State, from_states: Iterable[State], at: str,
                   expire: Mapping[str, Sequence[str]] | None = None) -> Session:
        e = Expr()
        e.cond(_state_in(e, from_states))
        e.set(e.path("state"), to.value)
        for bundle_id, rows in (expire or {}).items():
            # Expire exactly the current-turn pending rows the caller saw, in the same write.
            e.cond(c.bundle_current(e, bundle_id))
            for q in rows:
                e.cond(c.row_pending(e, bundle_id, q))
                e.set(e.path("bundles", bundle_id, "rows", q, "status"), "expired")
                e.set(e.path("bundles", bundle_id, "rows", q, "agent_disconnected"), True)
        _touch(e, at)
        return self._update(session_id, e)

    # ---------------------------------------------------------------- clarification bundles
    def add_bundle(self, session_id: str, bundle: Bundle, *, expected_turn_id: str | None, new_turn: Turn | None,
                   from_states: Iterable[State], state: State, at: str) -> Session:
        e = Expr()
        e.cond(c.turn_is(e, expected_turn_id))
        if new_turn is None:
            # The bundle joins the open current turn.
            e.cond(f"attribute_not_exists({e.path('current_turn', 'completed_at')})")
        else:
            e.set(e.path("current_turn"), codec.turn_to_item(new_turn))
            e.set(e.path("turn_seq"), new_turn.seq)
        e.cond(_state_in(e, from_states))
        e.cond(f"attribute_not_exists({e.path('bundles', bundle.id)})")
        e.set(e.path("bundles", bundle.id), codec.bundle_to_item(bundle))
        e.set(e.path("state"), state.value)
        _touch(e, at)
        return self._update(session_id, e)

    def detach_rows(self, session_id: str, rows: Mapping[str, Sequence[str]], *, at: str,
                    complete_turn_id: str | None = None, from_state: State | None = None,
                    to_state: State | None = None) -> Session:
        e = Expr()
        for bundle_id, row_ids in rows.items():
            e.cond(c.bundle_active(e, bundle_id, row_ids))
            for q in row_ids:
                # Exactly these rows: still pending and not yet detached, or the write changes nothing.
                e.cond(c.row_pending(e, bundle_id, q))
                e.cond(c.row_not_detached(e, bundle_id, q))
                e.set(e.path("bundles", bundle_id, "rows", q, "agent_disconnected"), True)
        if complete_turn_id is not None:
            assert from_state is not None and to_state is not None
            _complete(e, complete_turn_id, from_state, to_state, at)
        _touch(e, at)
        return self._update(session_id, e)

    def close_rows(self, session_id: str, bundle_id: str, row_ids: Sequence[str], *, status: str,
                   at: str) -> Session:
        """Pending rows of one active bundle become `status` (cancelled); other bundles are untouched."""
        e = Expr()
        e.cond(c.bundle_active(e, bundle_id, row_ids))
        for q in row_ids:
            e.cond(c.row_pending(e, bundle_id, q))
            e.set(e.path("bundles", bundle_id, "rows", q, "status"), status)
        _touch(e, at)
        return self._update(session_id, e)

    # ---------------------------------------------------------------- responses and delivery
    def renew_waiter(self, session_id: str, bundle_id: str, row_ids: Sequence[str], *, until: str,
                     at: str) -> Session:
        e = Expr()
        e.cond(c.bundle_active(e, bundle_id, row_ids))
        e.set(e.path("bundles", bundle_id, "waiter_until"), until)
        _set_deadline(e, until)
        _touch(e, at)
        return self._update(session_id, e)

    def claim(self, session_id: str, bundle_id: str, responses: Mapping[str, Mapping[str, Any]], *,
              status: str, delivery: Delivery, reservation: Reservation | None, at: str) -> Session:
        """One conditional write: the rule, the exact rows still pending, then outcome + delivery intent."""
        e = Expr()
        e.cond(c.bundle_active(e, bundle_id, list(responses)))
        for q, response in responses.items():
            e.cond(c.row_pending(e, bundle_id, q))
            e.set(e.path("bundles", bundle_id, "rows", q, "status"), status)
            e.set(e.path("bundles", bundle_id, "rows", q, "response"), dict(response))
        e.set(e.path("bundles", bundle_id, "delivery"), codec.delivery_to_item(delivery))
        if reservation is not None:
            e.cond(f"attribute_not_exists({e.path('reservation')})")  # one reservation at a time
            e.set(e.path("reservation"), codec.reservation_to_item(reservation))
        if delivery.pending:
            _set_deadline(e, delivery.deadline)
        _touch(e, at)
        return self._update(session_id, e)

    def confirm_delivery(self, session_id: str, bundle_id: str, delivery_id: str, *, result: str,
                         watchdog: Watchdog | None, at: str) -> Session:
        """Retire the intent: only for this exact, still-unconfirmed claim (a restore can't have won)."""
        e = Expr()
        e.cond(f"{e.path('bundles', bundle_id, 'delivery', 'delivery_id')} = {e.value(delivery_id)}")
        e.cond(f"attribute_not_exists({e.path('bundles', bundle_id, 'delivery', 'confirmed_at')})")
        e.set(e.path("bundles", bundle_id, "delivery", "confirmed_at"), at)
        e.set(e.path("bundles", bundle_id, "delivery", "result"), result)
        if watchdog is not None:
            e.set(e.path("watchdog"), codec.watchdog_to_item(watchdog))
            _set_deadline(e, watchdog.due)
        _touch(e, at)
        return self._update(session_id, e)

    def restore_claim(self, session_id: str, bundle_id: str, delivery_id: str, row_ids: Sequence[str], *,
                      outcome: str, detach: bool, at: str, reservation: Reservation | None = None) -> Session:
        """Put exactly the claimed rows back to pending while the claim is unconfirmed, its turn current
        and the session live; with `reservation`, also undo that (unpublished) reservation."""
        e = Expr()
        b = bundle_id
        e.cond(f"{e.path('bundles', b, 'delivery', 'delivery_id')} = {e.value(delivery_id)}")
        e.cond(f"attribute_not_exists({e.path('bundles', b, 'delivery', 'confirmed_at')})")
        e.cond(c.not_terminal(e))
        if reservation is None:
            e.cond(c.bundle_current(e, b))
        else:
            e.cond(f"{e.path('reservation', 'turn_id')} = {e.value(reservation.turn_id)}")
            if reservation.attempted:  # the successor became current: hand authority back to its predecessor
                e.cond(f"{e.path('current_turn', 'id')} = {e.value(reservation.turn_id)}")
                e.set(e.path("current_turn"), codec.turn_to_item(reservation.predecessor))
                e.set(e.path("turn_seq"), reservation.predecessor.seq)
                e.set(e.path("state"), State.WAITING_FOR_INPUT.value)
                # the predecessor's prompt generation owns the session again (its ready frame completes it)
                e.set(e.path("generation"), reservation.generation - 1)
            else:
                e.cond(f"{e.path('current_turn', 'id')} = {e.path('bundles', b, 'turn_id')}")
            e.remove(e.path("reservation"))
        for q in row_ids:
            e.cond(f"{e.path('bundles', b, 'rows', q, 'status')} = {e.value(outcome)}")
            e.set(e.path("bundles", b, "rows", q, "status"), "pending")
            e.remove(e.path("bundles", b, "rows", q, "response"))
            if detach:
                e.set(e.path("bundles", b, "rows", q, "agent_disconnected"), True)
        e.remove(e.path("bundles", b, "delivery"))
        _touch(e, at)
        return self._update(session_id, e)

    def mark_attempted(self, session_id: str, reservation: Reservation, prompt: Prompt, *, at: str) -> Session:
        """The at-most-once boundary: from this write the successor is the current turn."""
        e = Expr()
        e.cond(f"{e.path('reservation', 'turn_id')} = {e.value(reservation.turn_id)}")
        e.cond(f"NOT ({e.path('reservation', 'attempted')} IN ({e.value(True)}, {e.value('true')}, "
               f"{e.value('1')}, {e.value(1)}))")
        e.cond(f"{e.path('current_turn', 'id')} = {e.value(reservation.bundle_turn_id)}")
        e.cond(c.not_terminal(e))
        e.set(e.path("reservation", "attempted"), True)
        e.set(e.path("current_turn"), {"id": reservation.turn_id, "seq": reservation.seq, "started_at": at})
        e.set(e.path("turn_seq"), reservation.seq)
        e.set(e.path("state"), State.RUNNING.value)
        e.set(e.path("generation"), prompt.generation)
        e.set(e.path("prompt"), codec.prompt_to_item(prompt))
        _set_deadline(e, reservation.deadline)
        _touch(e, at)
        return self._update(session_id, e)

    def finish_reservation(self, session_id: str, reservation: Reservation, *, bundle_id: str, delivery_id: str,
                           result: str, dispatch: Dispatch, at: str) -> Session:
        """Accepted (or ambiguous): clear the recovery metadata, retire the intent; the claim stays terminal.

        Removing the reservation is what publishes the successor: the stream emits its turn.started then.
        """
        e = Expr()
        e.cond(f"{e.path('reservation', 'turn_id')} = {e.value(reservation.turn_id)}")
        e.remove(e.path("reservation"))
        e.set(e.path("bundles", bundle_id, "delivery", "confirmed_at"), at)
        e.set(e.path("bundles", bundle_id, "delivery", "result"), result)
        e.cond(f"{e.path('bundles', bundle_id, 'delivery', 'delivery_id')} = {e.value(delivery_id)}")
        e.set(e.path("prompt", "dispatch"), dispatch.value)
        _touch(e, at)
        return self._update(session_id, e)

    def retire_delivery(self, session_id: str, bundle_id: str, delivery_id: str, *, result: str,
                        at: str) -> Session:
        return self.confirm_delivery(session_id, bundle_id, delivery_id, result=result, watchdog=None, at=at)

    def clear_watchdog(self, session_id: str, clarification_id: str, at: str) -> Session:
        e = Expr()
        e.cond(f"{e.path('watchdog', 'clarification_id')} = {e.value(clarification_id)}")
        e.remove(e.path("watchdog"))
        _touch(e, at)
        return self._update(session_id, e)

    def admit_watchdog_prompt(self, session_id: str, watchdog: Watchdog, prompt: Prompt, *, at: str) -> Session:
        """Serialized admission: the watchdog must still be armed and its turn still current."""
        e = Expr()
        e.cond(f"{e.path('watchdog', 'clarification_id')} = {e.value(watchdog.clarification_id)}")
        e.cond(f"{e.path('current_turn', 'id')} = {e.value(watchdog.turn_id)}")
        e.cond(c.not_terminal(e))
        e.remove(e.path("watchdog"))
        e.set(e.path("prompt"), codec.prompt_to_item(prompt))
        e.set(e.path("generation"), prompt.generation)
        e.set(e.path("state"), State.RUNNING.value)
        _set_deadline(e, prompt.deadline)
        _touch(e, at)
        return self._update(session_id, e)

    def dismiss(self, session_id: str, bundle_id: str, row_ids: Sequence[str], user: str, at: str) -> Session:
        """Only an inactive bundle can be dismissed (an active one is answered or rejected instead)."""
        e = Expr()
        e.cond(f"attribute_exists({e.path('bundles', bundle_id)})")
        e.cond(f"NOT ({c.bundle_active(e, bundle_id, row_ids)})")
        e.set(e.path("bundles", bundle_id, "dismissed_by", user), True)
        _touch(e, at)
        return self._update(session_id, e)

    def reschedule(self, session_id: str, *, expected_due: str | None, next_due: str | None) -> bool:
        """The reconciler's compare-and-set on the owner deadline; False when a writer set a new one."""
        e = Expr()
        if expected_due is None:
            e.cond(f"attribute_not_exists({e.path('recon_due')})")
        else:
            e.cond(f"{e.path('recon_due')} = {e.value(expected_due)}")
        if next_due:
            e.set(e.path("recon_shard"), RECON_SHARD)
            e.set(e.path("recon_due"), next_due)
        else:
            e.remove(e.path("recon_shard"))
            e.remove(e.path("recon_due"))
        try:
            self._update(session_id, e)
            return True
        except ConditionFailed:
            return False

    def remove_bundle(self, session_id: str, bundle_id: str, at: str) -> Session:
        e = Expr()
        e.cond(f"attribute_exists({e.path('bundles', bundle_id)})")
        e.remove(e.path("bundles", bundle_id))
        _touch(e, at)
        return self._update(session_id, e)

    def _update(self, session_id: str, e: Expr) -> Session:
        e.cond(f"attribute_exists({e.path('session_id')})")
        try:
            resp = self.client.update_item(
                TableName=self.sessions_table, Key={"session_id": {"S": session_id}},
                ReturnValues="ALL_NEW", ReturnValuesOnConditionCheckFailure="ALL_OLD",
                **e.update_kwargs())
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                old = exc.response.get("Item")
                current = codec.session_from_item(codec.from_attrs(old)) if old else None
                raise ConditionFailed("the session changed", current=current) from exc
            raise StoreUnavailable(f"storage error: {exc}") from exc
        except BotoCoreError as exc:
            raise StoreUnavailable(f"storage error: {exc}") from exc
        return codec.session_from_item(codec.from_attrs(resp["Attributes"]))

    # ---------------------------------------------------------------- message admission
    def admit(self, session_id: str, prompt: Prompt, *, start: Turn | None, expected_turn_id: str | None,
              from_states: Iterable[State], link_bundle: str | None, remember: Remembered | None,
              queue_cap: int, at: str) -> Session:
        e = Expr()
        e.cond(c.turn_is(e, expected_turn_id))
        e.cond(_state_in(e, from_states))
        if start is not None:
            if expected_turn_id is not None:  # a send never cuts into an open turn
                e.cond(f"attribute_exists({e.path('current_turn', 'completed_at')})")
            e.set(e.path("current_turn"), codec.turn_to_item(start))
            e.set(e.path("turn_seq"), start.seq)
            e.set(e.path("state"), State.RUNNING.value)
            e.set(e.path("generation"), prompt.generation)
            e.set(e.path("prompt"), codec.prompt_to_item(prompt))
            _set_deadline(e, prompt.deadline)
        else:  # queue behind the open turn, bounded so the aggregate stays small
            e.cond(f"attribute_not_exists({e.path('current_turn', 'completed_at')})")
            e.cond(f"attribute_not_exists({e.path('queue')}) OR size({e.path('queue')}) < {e.value(queue_cap)}")
            q = e.path("queue")
            entry = e.value([codec.prompt_to_item(prompt)])
            e.set_raw(f"{q} = list_append(if_not_exists({q}, {e.value([])}), {entry})")
            _set_deadline(e, prompt.deadline)
        if link_bundle is not None:  # a late answer links its (inactive) question to this message
            b = link_bundle
            e.cond(f"attribute_exists({e.path('bundles', b)})")
            e.set(e.path("bundles", b, "late_message_id"), prompt.message_id)
        _touch(e, at)
        update = {"TableName": self.sessions_table, "Key": {"session_id": {"S": session_id}},
                  "ReturnValuesOnConditionCheckFailure": "ALL_OLD", **e.update_kwargs()}
        if remember is None:
            return self._update(session_id, e)
        put = {"TableName": IdempotencyRecord.Meta.table_name,
               "Item": {"key": {"S": remember.key}, "fingerprint": {"S": remember.fingerprint},
                        "status_code": {"N": str(remember.status_code)},
                        "response": {"S": json.dumps(dict(remember.response))},
                        "expires_at": {"N": str(int(time.time() + IDEMPOTENCY_TTL.total_seconds()))}},
               "ConditionExpression": "attribute_not_exists(#k)", "ExpressionAttributeNames": {"#k": "key"}}
        try:
            # The idempotency record and the admission commit together or not at all.
            self.client.transact_write_items(TransactItems=[{"Update": update}, {"Put": put}])
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "TransactionCanceledException":
                raise StoreUnavailable(f"storage error: {exc}") from exc
            reasons = exc.response.get("CancellationReasons", [])
            codes = [r.get("Code") for r in reasons]
            if len(codes) > 1 and codes[1] == "ConditionalCheckFailed":
                raise AlreadyRemembered("this idempotency key was already used") from exc
            if codes and codes[0] == "ConditionalCheckFailed":
                old = reasons[0].get("Item")
                current = codec.session_from_item(codec.from_attrs(old)) if old else None
                raise ConditionFailed("the session changed", current=current) from exc
            raise StoreUnavailable(f"storage error: {exc}") from exc
        session = self.get_session(session_id)
        assert session is not None
        return session

    def start_from_queue(self, session_id: str, *, expected_turn_id: str | None, turn: Turn, head: Prompt,
                         at: str) -> Session:
        e = Expr()
        e.cond(c.turn_is(e, expected_turn_id))
        if expected_turn_id is not None:  # the drain never cuts into an open turn
            e.cond(f"attribute_exists({e.path('current_turn', 'completed_at')})")
        e.cond(c.not_terminal(e))
        e.cond(f"{e.path('queue')}[0].{e.path('message_id')} = {e.value(head.message_id)}")
        e.set(e.path("current_turn"), codec.turn_to_item(turn))
        e.set(e.path("turn_seq"), turn.seq)
        e.set(e.path("state"), State.RUNNING.value)
        e.set(e.path("generation"), head.generation)
        e.set(e.path("prompt"), codec.prompt_to_item(head))
        e.remove(f"{e.path('queue')}[0]")
        _set_deadline(e, head.deadline)
        _touch(e, at)
        return self._update(session_id, e)

    def link_late_message(self, session_id: str, bundle_id: str, message_id: str, at: str) -> Session:
        e = Expr()
        e.cond(f"attribute_exists({e.path('bundles', bundle_id)})")
        e.set(e.path("bundles", bundle_id, "late_message_id"), message_id)
        _touch(e, at)
        return self._update(session_id, e)

    def get_remembered(self, key: str) -> Remembered | None:
        def get() -> Remembered | None:
            try:
                rec = IdempotencyRecord.get(key, consistent_read=True)
            except IdempotencyRecord.DoesNotExist:
                return None
            return Remembered(key=rec.key, fingerprint=rec.fingerprint, status_code=int(rec.status_code),
                              response=rec.response)
        return _translate(get)

    def remember(self, entry: Remembered) -> None:
        rec = IdempotencyRecord(entry.key, fingerprint=entry.fingerprint, status_code=entry.status_code,
                                response=dict(entry.response), expires_at=datetime.now(UTC) + IDEMPOTENCY_TTL)
        try:
            _translate(lambda: rec.save(condition=IdempotencyRecord.key.does_not_exist()))
        except ConditionFailed as exc:
            raise AlreadyRemembered("this idempotency key was already used") from exc

    def update_remembered(self, entry: Remembered) -> None:
        rec = IdempotencyRecord(entry.key, fingerprint=entry.fingerprint, status_code=entry.status_code,
                                response=dict(entry.response),
                                expires_at=datetime.now(UTC) + IDEMPOTENCY_TTL)
        _translate(lambda: rec.save(condition=IdempotencyRecord.key.exists()))

    # ---------------------------------------------------------------- history
    def put_message(self, message: Message) -> bool:
        rec = HistoryRecord(
            message.session_id, codec.history_sk_message(message.turn_seq, message.created_at, message.id),
            kind="message", item_id=message.id, workspace_id=message.workspace_id, task_id=message.task_id,
            turn_id=message.turn_id, turn_seq=message.turn_seq, created_at=message.created_at,
            author_type=message.author_type, type=message.type, content=message.content,
            clarification_id=message.clarification_id, meta=dict(message.meta) if message.meta else None)
        return self._put_once(rec, HistoryRecord.sk.does_not_exist())

    def put_turn_record(self, record: TurnRecord, workspace_id: str, task_id: str) -> None:
        e = Expr()
        for name, value in (("kind", "turn"), ("item_id", record.id), ("workspace_id", workspace_id),
                            ("task_id", task_id), ("turn_id", record.id), ("turn_seq", record.seq),
                            ("created_at", record.started_at)):
            e.set(e.path(name), value)
        if record.completed_at:  # never un-complete a record on redelivery
            e.set(e.path("completed_at"), record.completed_at)
        _translate(lambda: self.client.update_item(
            TableName=HistoryRecord.Meta.table_name,
            Key={"session_id": {"S": record.session_id}, "sk": {"S": codec.history_sk_turn(record.seq)}},
            **e.update_kwargs()))

    def delete_message(self, message: Message) -> bool:
        """Tombstone the message (kept, hidden): put_message never recreates it on a stream redelivery."""
        key = {"session_id": {"S": message.session_id},
               "sk": {"S": codec.history_sk_message(message.turn_seq, message.created_at, message.id)}}
        try:
            _translate(lambda: self.client.update_item(
                TableName=HistoryRecord.Meta.table_name, Key=key, UpdateExpression="SET deleted = :t",
                ConditionExpression="attribute_exists(sk) AND NOT deleted = :t",
                ExpressionAttributeValues={":t": {"BOOL": True}}))
            return True
        except ConditionFailed:
            return False

    def list_history(self, session_id: str) -> tuple[list[TurnRecord], list[Message]]:
        def query() -> tuple[list[TurnRecord], list[Message]]:
            turns, messages = [], []
            for rec in HistoryRecord.query(session_id, consistent_read=True):
                item = codec.plain(rec.attribute_values)
                if item.get("deleted"):
                    continue
                if item["kind"] == "turn":
                    turns.append(codec.turn_record_from_history(item))
                else:
                    messages.append(codec.message_from_history(item))
            return turns, messages
        return _translate(query)

    # ---------------------------------------------------------------- events
    def put_event(self, event: Event, written_at: str) -> bool:
        rec = EventRecord(event.workspace_id, f"{event.at}#{event.id}", event_id=event.id, type=event.type,
                          task_id=event.task_id, session_id=event.session_id, payload=dict(event.payload),
                          at=event.at, written_at=written_at,
                          expires_at=datetime.now(UTC) + EVENT_TTL)
        return self._put_once(rec, EventRecord.sk.does_not_exist())

    def list_events(self, workspace_id: str, *, low_sk: str, after_sk: str, written_after: str,
                    limit: int) -> list[tuple[str, str, Event]]:
        def query() -> list[tuple[str, str, Event]]:
            out = []
            cond = (EventRecord.sk > after_sk) | (EventRecord.written_at > written_after)
            key_cond = EventRecord.sk > low_sk if low_sk else None
            for rec in EventRecord.query(workspace_id, key_cond, filter_condition=cond, consistent_read=True):
                out.append((rec.sk, rec.written_at, Event(
                    id=rec.event_id, workspace_id=rec.workspace_id, type=rec.type, task_id=rec.task_id,
                    session_id=rec.session_id, payload=rec.payload, at=rec.at)))
                if len(out) >= limit:
                    break
            return out
        return _translate(query)

    # ---------------------------------------------------------------- meta and reconciler work
    def get_meta(self, key: str) -> str | None:
        def get() -> str | None:
            try:
                return str(MetaRecord.get(key, consistent_read=True).value)
            except MetaRecord.DoesNotExist:
                return None
        return _translate(get)

    def set_meta(self, key: str, value: str, at: str) -> None:
        _translate(lambda: MetaRecord(key, value=value, updated_at=at).save())

    def due_sessions(self, before: str | None) -> list[str]:
        def query() -> list[str]:
            cond = SessionRecord.recon_due < before if before else None
            return [r.session_id for r in SessionRecord.reconciler_work.query(RECON_SHARD, cond)]
        return _translate(query)

    @staticmethod
    def _put_once(rec: Any, condition: Any) -> bool:
        try:
            rec.save(condition=condition)
            return True
        except PutError as exc:
            if exc.cause_response_code == "ConditionalCheckFailedException":
                return False
            raise StoreUnavailable(f"storage error: {exc}") from exc
        except (PynamoDBException, BotoCoreError) as exc:
            raise StoreUnavailable(f"storage error: {exc}") from exc


def _task_item(item: dict[str, Any]) -> Task:
    return Task(id=item["task_id"], workspace_id=item["workspace_id"], title=item["title"],
                workflow_step=item["workflow_step"], created_at=item["created_at"],
                summary=StatusSummary(pending_action=item.get("pending_action"),
                                      revision=int(item.get("summary_revision", 0)),
                                      primary_session_id=item.get("primary_session_id"),
                                      updated_at=item.get("summary_at") or ""))


def _task(rec: TaskRecord) -> Task:
    return Task(id=rec.task_id, workspace_id=rec.workspace_id, title=rec.title,
                workflow_step=rec.workflow_step, created_at=rec.created_at,
                summary=StatusSummary(pending_action=rec.pending_action, revision=int(rec.summary_revision or 0),
                                      primary_session_id=rec.primary_session_id, updated_at=rec.summary_at or ""))


def _state_in(e: Expr, states: Iterable[State]) -> str:
    values = ", ".join(e.value(s.value) for s in sorted(states))
    return f"{e.path('state')} IN ({values})"


def _touch(e: Expr, at: str) -> None:
    e.set(e.path("updated_at"), at)
    e.set_raw(f"{e.path('version')} = {e.path('version')} + {e.value(1)}")


def _complete(e: Expr, turn_id: str, from_state: State, to_state: State, at: str) -> None:
    """Complete `turn_id` only if it is the open current turn and the session is in `from_state`: once."""
    e.cond(f"{e.path('current_turn', 'id')} = {e.value(turn_id)}")
    e.cond(f"attribute_not_exists({e.path('current_turn', 'completed_at')})")
    e.cond(f"{e.path('state')} = {e.value(from_state.value)}")
    e.set(e.path("current_turn", "completed_at"), at)
    e.set(e.path("state"), to_state.value)


def _set_deadline(e: Expr, deadline: str | None) -> None:
    """Owner deadline: presence puts the aggregate in the reconciler's sparse index.

    Writers only ever set it (a later deadline may postpone an earlier one by at most one owner window);
    only the reconciler removes it, compare-and-set, once it found nothing outstanding.
    """
    if deadline:
        e.set(e.path("recon_shard"), RECON_SHARD)
        e.set(e.path("recon_due"), deadline)
