"""PynamoDB models: the single definition of every table, key, index, stream and TTL setting.

The local stack creates tables from these (chalicelib.store.tables) and infra/ derives the AWS template
from them, so there is nothing to keep in step by hand.
"""
from __future__ import annotations

import functools
from typing import Any

import botocore.session
import pynamodb.connection.base
from pynamodb.attributes import (
    BooleanAttribute,
    JSONAttribute,
    MapAttribute,
    NumberAttribute,
    TTLAttribute,
    UnicodeAttribute,
)
from pynamodb.indexes import AllProjection, GlobalSecondaryIndex, KeysOnlyProjection
from pynamodb.models import Model

STREAM = "NEW_AND_OLD_IMAGES"
ON_DEMAND = "PAY_PER_REQUEST"


class TaskByWorkspace(GlobalSecondaryIndex["TaskRecord"]):
    class Meta:
        index_name = "by_workspace"
        projection = AllProjection()

    workspace_id = UnicodeAttribute(hash_key=True)
    created_at = UnicodeAttribute(range_key=True)


class TaskByActivity(GlobalSecondaryIndex["TaskRecord"]):
    """The task list's order (codec.task_list_key), read newest first: one Query serves a page."""

    class Meta:
        index_name = "by_activity"
        projection = AllProjection()

    workspace_id = UnicodeAttribute(hash_key=True)
    list_key = UnicodeAttribute(range_key=True)


class TaskRecord(Model):
    """A task and its persisted status summary (a projection kept by the stream function)."""

    class Meta:
        table_name = "tasks"
        billing_mode = ON_DEMAND
        stream_view_type = STREAM  # task.created and summary revisions are published from it

    task_id = UnicodeAttribute(hash_key=True)
    workspace_id = UnicodeAttribute()
    created_at = UnicodeAttribute()
    title = UnicodeAttribute()
    workflow_step = UnicodeAttribute()
    pending_action = UnicodeAttribute(null=True)
    summary_revision = NumberAttribute(default=0)
    primary_session_id = UnicodeAttribute(null=True)
    summary_at = UnicodeAttribute(null=True)
    activity_at = UnicodeAttribute(null=True)
    list_key = UnicodeAttribute(null=True)
    sessions = MapAttribute(null=True)  # type: ignore[var-annotated]  # session id -> true
    by_workspace = TaskByWorkspace()
    by_activity = TaskByActivity()


class SessionByTask(GlobalSecondaryIndex["SessionRecord"]):
    class Meta:
        index_name = "by_task"
        projection = AllProjection()

    task_id = UnicodeAttribute(hash_key=True)
    created_at = UnicodeAttribute(range_key=True)


class ReconcilerWork(GlobalSecondaryIndex["SessionRecord"]):
    """Sparse: an aggregate is in this index only while it carries an owner deadline.

    The reconciler's cost therefore grows with outstanding work, not with the number of sessions.
    """

    class Meta:
        index_name = "reconciler_work"
        projection = KeysOnlyProjection()

    recon_shard = UnicodeAttribute(hash_key=True)
    recon_due = UnicodeAttribute(range_key=True)


class SessionRecord(Model):
    """The session aggregate: state, turn pointer, bundles, prompt dispatch."""

    class Meta:
        table_name = "sessions"
        billing_mode = ON_DEMAND
        stream_view_type = STREAM

    session_id = UnicodeAttribute(hash_key=True)
    workspace_id = UnicodeAttribute()
    task_id = UnicodeAttribute()
    created_at = UnicodeAttribute()
    updated_at = UnicodeAttribute()
    is_primary = BooleanAttribute(default=False)
    state = UnicodeAttribute()
    version = NumberAttribute(default=0)
    turn_seq = NumberAttribute(default=0)
    current_turn = MapAttribute(null=True)  # type: ignore[var-annotated]
    generation = NumberAttribute(default=0)
    execution_id = UnicodeAttribute(default="")
    prompt = MapAttribute(null=True)  # type: ignore[var-annotated]
    bundles = MapAttribute(null=True)  # type: ignore[var-annotated]
    recon_shard = UnicodeAttribute(null=True)
    recon_due = UnicodeAttribute(null=True)
    by_task = SessionByTask()
    reconciler_work = ReconcilerWork()


class TurnsBySeq(GlobalSecondaryIndex["HistoryRecord"]):
    """Sparse: only turn records carry `turn_order`, so a page of turns never reads past messages."""

    class Meta:
        index_name = "turns"
        projection = AllProjection()

    session_id = UnicodeAttribute(hash_key=True)
    turn_order = NumberAttribute(range_key=True)


class HistoryRecord(Model):
    """Append-mostly history: turn records and transcript messages, ordered by turn then time."""

    class Meta:
        table_name = "history"
        billing_mode = ON_DEMAND
        stream_view_type = STREAM

    session_id = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    kind = UnicodeAttribute()  # turn | message
    item_id = UnicodeAttribute()
    workspace_id = UnicodeAttribute()
    task_id = UnicodeAttribute()
    turn_id = UnicodeAttribute()
    turn_seq = NumberAttribute()
    turn_order = NumberAttribute(null=True)  # turn records only (the `turns` index)
    created_at = UnicodeAttribute()
    completed_at = UnicodeAttribute(null=True)
    author_type = UnicodeAttribute(null=True)
    type = UnicodeAttribute(null=True)
    content = UnicodeAttribute(null=True)
    clarification_id = UnicodeAttribute(null=True)
    meta = JSONAttribute(null=True)
    # A deleted message stays as a tombstone, so a redelivered stream record cannot bring it back.
    deleted = BooleanAttribute(null=True)
    turns = TurnsBySeq()


class EventRecord(Model):
    """The client event feed of one workspace. The sort key derives from the change: redelivery is a no-op."""

    class Meta:
        table_name = "events"
        billing_mode = ON_DEMAND

    workspace_id = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    event_id = UnicodeAttribute()
    type = UnicodeAttribute()
    task_id = UnicodeAttribute()
    session_id = UnicodeAttribute(null=True)
    payload = JSONAttribute()
    at = UnicodeAttribute()
    written_at = UnicodeAttribute()
    expires_at = TTLAttribute()


class IdempotencyRecord(Model):
    """A remembered result of an idempotent request (message admission; respond keeps its key in the claim)."""

    class Meta:
        table_name = "idempotency"
        billing_mode = ON_DEMAND

    key = UnicodeAttribute(hash_key=True)
    fingerprint = UnicodeAttribute()
    response = JSONAttribute()
    expires_at = TTLAttribute()


class MetaRecord(Model):
    """Deployment metadata, e.g. the traffic flag the reconciler sets before the API takes traffic."""

    class Meta:
        table_name = "meta"
        billing_mode = ON_DEMAND

    key = UnicodeAttribute(hash_key=True)
    value = UnicodeAttribute()
    updated_at = UnicodeAttribute()


class DeviceRecord(Model):
    """Push devices of a workspace (`device#<id>`) and the markers that make a push once per question and device
    (`push#<clarification>#<device>`, gone with their TTL). One partition: a push reads the workspace's devices
    with one Query."""

    class Meta:
        table_name = "devices"
        billing_mode = ON_DEMAND

    workspace_id = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    expires_at = TTLAttribute(null=True)  # markers only


ALL_MODELS: tuple[type[Model], ...] = (
    TaskRecord, SessionRecord, HistoryRecord, EventRecord, IdempotencyRecord, MetaRecord, DeviceRecord,
)
BASE_NAMES = {m: m.Meta.table_name for m in ALL_MODELS}

@functools.cache
def _shared_loader() -> Any:
    return botocore.session.get_session().get_component("data_loader")


def _session_with_the_shared_loader() -> botocore.session.Session:
    """PynamoDB gives each model's connection (and each thread) a botocore session of its own, and each would
    read and parse the same service, endpoint and ruleset files from disk again for its client: ~0.2 s of CPU
    a client, six clients per cold start and per `configure`. They share one loader (read-only once loaded)."""
    session = botocore.session.get_session()
    session.register_component("data_loader", _shared_loader())
    return session


pynamodb.connection.base.get_session = _session_with_the_shared_loader  # the one session factory PynamoDB uses


def configure(prefix: str, host: str | None, region: str) -> None:
    """Point every model at `prefix + base name` on `host` (None: AWS). Drops cached connections."""
    for model, base in BASE_NAMES.items():
        model.Meta.table_name = prefix + base
        model.Meta.host = host  # type: ignore[attr-defined]
        model.Meta.region = region
        model._connection = None
