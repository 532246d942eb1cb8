"""The reconciler's cost grows with outstanding work, not with the number of sessions.

10,000 idle aggregates are bulk-inserted next to 10 broken ones (a live answer claimed, its delivery intent
never confirmed: the responder died). One before-traffic reconcile must find the broken ones through the
sparse reconciler index, repair them, and make a number of DynamoDB requests bounded by a small constant
times the broken ones. Requests are counted with botocore event hooks on every client the store uses: its
own boto3 client and the PynamoDB models' connections.
"""
from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from chalicelib.auth.tokens import Caller
from chalicelib.domain import commands
from chalicelib.domain.model import Delivery
from chalicelib.domain.rules import bundle_is_active
from chalicelib.functions.reconciler import reconcile
from chalicelib.services import clarifications, sessions, tasks
from chalicelib.services.deps import Deps, Settings
from chalicelib.store.dynamo import DynamoStore
from chalicelib.store.models import ALL_MODELS, SessionRecord
from scripts.local.emulator import EmulatorThread
from scripts.local.stack import LocalStack
from tests.support.fakes import CounterIds, FakeAgentctl, StepClock, agent_token

IDLE = 10_000
BROKEN = 10
PER_BROKEN = 6  # get, restore, get, reschedule (+ slack): the per-session repair is a handful of requests
FIXED = 4  # the sparse-index query (and a page), the traffic flag, the task backfill's done flag
USER = Caller(sub="user-1", role="user", workspace_id="ws-scale")
QUESTIONS = [{"question_id": "q1", "prompt": "Which database?",
              "options": [{"option_id": "pg", "label": "Postgres"}, {"option_id": "my", "label": "MySQL"}]}]


class RequestCounter:
    """Counts DynamoDB API calls (by operation) on every client it is attached to."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.counting = False

    def attach(self, client: Any) -> None:
        client.meta.events.register("after-call.dynamodb", self._after_call,
                                    unique_id=f"reconciler-scale-{id(self)}-{id(client)}")

    def _after_call(self, model: Any = None, **_: Any) -> None:
        if self.counting:
            self.calls[model.name if model is not None else "?"] += 1

    @property
    def total(self) -> int:
        return sum(self.calls.values())


@pytest.fixture
def local(emulator: EmulatorThread) -> Iterator[LocalStack]:
    stack = LocalStack().start(endpoint=emulator.url)
    try:
        yield stack
    finally:
        stack.stop()
        client = DynamoStore().client
        names = [n for page in client.get_paginator("list_tables").paginate() for n in page["TableNames"]]
        for name in names:  # 10,000 items: do not keep them in the shared emulator
            if name.startswith(stack.prefix):
                client.delete_table(TableName=name)


def _bulk_insert_idle(client: Any, table: str, count: int) -> None:
    at = "2025-01-01T00:00:00.000000Z"
    items = [{"session_id": {"S": f"idle-{i:05d}"}, "workspace_id": {"S": "ws-idle"},
              "task_id": {"S": f"idle-task-{i % 200:03d}"}, "created_at": {"S": at}, "updated_at": {"S": at},
              "state": {"S": "IDLE"}, "version": {"N": "1"}, "bundles": {"M": {}}} for i in range(count)]

    def write(start: int) -> None:
        pending: dict[str, Any] = {table: [{"PutRequest": {"Item": item}} for item in items[start:start + 25]]}
        while pending:
            pending = client.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}
    # The emulator serialises requests; a few in flight only hide the per-request round trip.
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(write, range(0, count, 25)))


def _broken_session(deps: Deps, store: DynamoStore, task_id: str) -> tuple[str, str]:
    """A session whose live answer was claimed (delivery intent set) and whose responder then died."""
    session_id = sessions.create_session(deps, USER, task_id, commands.create_session({})).session.id
    agent = Caller(sub=f"agent:{session_id}", role="agent", workspace_id=USER.workspace_id, session_id=session_id)
    bundle_id = clarifications.ask(deps, agent, session_id, commands.ask({"questions": QUESTIONS})).id
    clarifications.detach(deps, agent, bundle_id)  # its waiter is gone too: no lease left to watch
    now = deps.now()
    delivery = Delivery(deps.new_id(), ("q1",), "answered", "live", now, deps.deadline())
    store.claim(session_id, bundle_id, {"q1": {"question_id": "q1", "selected_options": ["pg"], "custom_text": ""}},
                status="answered", delivery=delivery, reservation=None, at=now)
    return session_id, bundle_id


def test_reconcile_before_traffic__10k_idle_and_10_broken__requests_bounded_by_the_broken(local: LocalStack) -> None:
    started = time.perf_counter()
    store = DynamoStore()
    counter = RequestCounter()
    counter.attach(store.client)
    for model in ALL_MODELS:
        counter.attach(model._get_connection().connection.client)
    clock = StepClock()
    deps = Deps(store=store, agentctl=FakeAgentctl(), clock=clock, new_id=CounterIds("scale"),
                agent_token=agent_token, settings=Settings(deployment_id=f"scale-{local.prefix}"))

    _bulk_insert_idle(store.client, str(SessionRecord.Meta.table_name), IDLE)
    inserted = time.perf_counter() - started
    task_id = tasks.create_task(deps, USER, commands.create_task({"title": "Broken ones"})).id
    broken = [_broken_session(deps, store, task_id) for _ in range(BROKEN)]
    assert sorted(deps.store.due_sessions(None)) == sorted(sid for sid, _ in broken)  # only work is indexed

    clock.advance(deps.settings.owner_window.total_seconds() + 1)  # the deploy comes after the responders died
    counter.counting = True
    report = reconcile(deps, before_traffic=True)
    counter.counting = False
    repair_calls, repair = dict(counter.calls), counter.total

    assert (report.examined, report.intents_restored, report.errors) == (BROKEN, BROKEN, [])
    for session_id, bundle_id in broken:
        s = store.get_session(session_id)
        assert s is not None
        b = s.bundle(bundle_id)
        assert b is not None and b.delivery is None and bundle_is_active(s, b)  # restored: answerable again
        assert [r.status for r in b.rows] == ["pending"]
    assert store.due_sessions(None) == []
    assert "Scan" not in repair_calls, repair_calls  # the task backfill finished at the stack's start
    assert repair <= PER_BROKEN * BROKEN + FIXED, (repair, repair_calls)

    counter.calls.clear()
    counter.counting = True
    quiet = reconcile(deps, before_traffic=True)  # nothing outstanding: cost independent of the 10,000
    counter.counting = False
    assert quiet.examined == 0 and counter.total <= FIXED and "Scan" not in counter.calls, dict(counter.calls)
    print(f"reconciler scale: {IDLE} idle + {BROKEN} broken sessions: {repair} requests {repair_calls} to "
          f"repair, {counter.total} with nothing to do; insert {inserted:.1f} s, "
          f"total {time.perf_counter() - started:.1f} s")
