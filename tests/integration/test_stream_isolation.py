"""One record the stream function cannot process never stops stream processing (the emulator's real streams).

A poison record (a session item the codec cannot read, written straight to the table as a foreign or broken
writer would) sits in the same shard as another workspace's ordinary changes. The pump retries it a bounded
number of times, sets it aside where the operator can list and replay it, and the shard moves on: the other
workspace's events are published, and /health reports the set-aside record.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from chalicelib import bootstrap
from chalicelib.functions import streams
from chalicelib.store.models import SessionRecord
from scripts.local.handlers import stream_handlers
from scripts.local.pump import StreamPump
from scripts.local.stack import LocalStack, make_pump
from scripts.local.stream_failures import FailureStore
from tests.support.flow import ApiClient

MAX_ATTEMPTS = 3


@pytest.fixture
def pump(stack: LocalStack, tmp_path: Path) -> Iterator[StreamPump]:
    stack.pump = make_pump(stack.endpoint, failures=FailureStore(tmp_path), max_attempts=MAX_ATTEMPTS,
                           retry_delay=0.0)
    yield stack.pump


def inject_poison(stack: LocalStack) -> None:
    """A session item no handler can decode (no state, bundles of the wrong type) in workspace ws-bad."""
    assert stack.pump is not None
    stack.pump.dynamodb.put_item(TableName=SessionRecord.Meta.table_name, Item={
        "session_id": {"S": "poison-1"}, "workspace_id": {"S": "ws-bad"}, "task_id": {"S": "t-bad"},
        "bundles": {"S": "not a map"}, "version": {"N": "1"}})


def events(user: ApiClient) -> list[dict[str, Any]]:
    resp = user.get("/events", params={"wait": "0"})
    assert resp.status_code == 200, resp.text
    return list(resp.json()["events"])


def pump_until(pump: StreamPump, done: Any, timeout: float = 60.0) -> None:
    """Poll like the worker does until `done()` (a generous deadline for a loaded machine)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pump.poll_once()
        if done():
            return
    raise AssertionError("the pump did not get there in time")


def test_poison_record__retried_then_set_aside__other_workspace_still_processed(
        stack: LocalStack, pump: StreamPump, monkeypatch: pytest.MonkeyPatch) -> None:
    good = ApiClient(stack.url, stack.user_token(workspace="ws-good", sub="user-good"))
    pump.drain()
    calls: list[str] = []
    real = streams.on_session_record

    def counting(deps: Any, record: Any) -> None:
        calls.append(record["dynamodb"]["SequenceNumber"])
        real(deps, record)

    inject_poison(stack)
    # After the poison, in the same shard: another workspace's ordinary work.
    task = good.post("/tasks", {"title": "still processed"}).json()
    session = good.post(f"/tasks/{task['id']}/sessions", {}).json()
    monkeypatch.setattr(streams, "on_session_record", counting)
    pump_until(pump, lambda: any(e["session_id"] == session["id"] for e in events(good)))
    pump_until(pump, lambda: pump.failures.count() == 1)

    parked = pump.failures.list()
    assert [p.record["dynamodb"]["Keys"] for p in parked] == [{"session_id": {"S": "poison-1"}}]
    poison_seq = parked[0].sequence_number
    assert calls.count(poison_seq) == MAX_ATTEMPTS, "retried a bounded number of times, then set aside"
    pump.drain()
    assert calls.count(poison_seq) == MAX_ATTEMPTS, "never retried after that"
    # The other workspace's task summary and events are there: the shard moved on.
    assert good.get(f"/tasks/{task['id']}/sessions").json()["sessions"][0]["id"] == session["id"]

    health = requests.get(stack.url + "/api/v1/health", timeout=30)
    assert health.status_code == 200
    body = health.json()
    assert body["status"] == "degraded" and body["ready"] is True
    assert body["stream"]["set_aside"] == 1 and body["stream"]["stale"] is False


def test_set_aside_record__listed_and_replayed(stack: LocalStack, pump: StreamPump,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    pump.drain()
    inject_poison(stack)
    pump_until(pump, lambda: pump.failures.count() == 1)
    (entry,) = pump.failures.list()
    assert entry.summary()["keys"] == {"session_id": {"S": "poison-1"}} and entry.attempts == MAX_ATTEMPTS

    # Still unprocessable: a replay reports it and keeps it.
    assert pump.failures.replay(entry.id, stream_handlers()) is False
    assert [e.id for e in pump.failures.list()] == [entry.id]

    # The operator repaired the item and the cause; the replay hands the very record to the handler again.
    handled: list[Any] = []
    monkeypatch.setattr(streams, "on_session_record", lambda deps, record: handled.append(record))
    assert pump.failures.replay(entry.id, stream_handlers()) is True
    assert [r["dynamodb"]["SequenceNumber"] for r in handled] == [entry.sequence_number]
    assert pump.failures.list() == []
    pump.poll_once()  # the pump publishes the new count
    body = requests.get(stack.url + "/api/v1/health", timeout=30).json()
    assert body["stream"]["set_aside"] == 0 and body["status"] == "ok"


def test_health__no_stream_status_published__plain_ok(stack: LocalStack) -> None:
    """In AWS nothing publishes the pump's status: /health reports readiness only (README)."""
    store = bootstrap.deps().store
    assert store.get_meta("stream#status") is None
    assert requests.get(stack.url + "/api/v1/health", timeout=30).json() == {"status": "ok", "ready": True,
                                                                              "quarantined_sessions": 0}
