"""One record the stream function cannot process never stops stream processing (the emulator's real streams).

A poison record (a session item the codec cannot read, written straight to the table as a foreign or broken
writer would) sits in the same shard as another workspace's ordinary changes. It fails deterministically, so
the stream function sets it aside at once (issue 26: retrying it held every workspace up) and /health says
what the operator does; a record that keeps failing transiently is retried a bounded number of times by the
pump, then set aside where the operator can list and replay it. Either way the shard moves on.
"""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from chalicelib import bootstrap
from chalicelib.domain.errors import StoreUnavailable
from chalicelib.functions import streams
from chalicelib.services import stream_health
from chalicelib.store.models import SessionRecord
from scripts.local.handlers import stream_handlers
from scripts.local.pump import StreamPump
from scripts.local.sim_agent import SimAgent
from scripts.local.stack import LocalStack, make_pump
from scripts.local.stream_failures import FailureStore
from tests.support.flow import ApiClient, Flow
from tests.support.wait import eventually

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


def test_poison_record__set_aside_at_once__other_workspace_still_processed(
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
    pump.drain()

    (key,) = stream_health.set_aside_records(bootstrap.deps())
    poison_seq = key.rsplit("#", 1)[1]
    assert calls.count(poison_seq) == 1, "a deterministic failure is set aside at once, never retried"
    assert pump.failures.count() == 0 and pump.failed_batches == 0
    assert good.get(f"/tasks/{task['id']}/sessions").json()["sessions"][0]["id"] == session["id"]

    health = requests.get(stack.url + "/api/v1/health", timeout=30)
    assert health.status_code == 200
    body = health.json()
    assert body["status"] == "degraded" and body["ready"] is True and body["set_aside_records"] == 1
    assert "stream#set-aside#" in body["operator_action"]


def test_transient_failure__retried_then_set_aside__listed_and_replayed(stack: LocalStack, pump: StreamPump,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    pump.drain()
    real = streams.on_session_record

    def unavailable(deps: Any, record: Any) -> None:
        if record["dynamodb"]["Keys"] == {"session_id": {"S": "poison-1"}}:
            raise StoreUnavailable("the store keeps timing out for this item")
        real(deps, record)

    monkeypatch.setattr(streams, "on_session_record", unavailable)
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
    assert requests.get(stack.url + "/api/v1/health", timeout=30).json() == {
        "status": "ok", "ready": True, "quarantined_sessions": 0, "set_aside_records": 0}


EMOJI = "\U0001F600"


def _max_bundle() -> dict[str, Any]:
    """An ask at every documented limit, written in emoji (4 UTF-8 bytes, 12 JSON-escaped bytes each)."""
    return {"context": EMOJI * 4000, "questions": [
        {"question_id": f"q{q}", "title": EMOJI * 200, "prompt": EMOJI * 2000,
         "options": [{"option_id": f"o{o}", "label": EMOJI * 200, "description": EMOJI * 1000} for o in range(6)]}
        for q in range(4)]}


def test_canary_workspace__beside_one_trying_every_poison__its_events_arrive_within_5_s(
        stack: LocalStack, sim: SimAgent, tmp_path: Path) -> None:
    """Issue 26's third observed case: one workspace's oversized change held every other workspace's events
    up (110 s instead of ~2 s) while the pump retried it. Now the poisoner does everything it can (an item no
    handler reads, the largest asks and messages the API accepts, in emoji, then the writes that follow them)
    and after each attempt a canary workspace's new task is in its feed within 5 s (polled, never timed)."""
    pump = stack.pump = make_pump(stack.endpoint, failures=FailureStore(tmp_path))  # AWS-like retry settings
    pump.drain()
    canary = ApiClient(stack.url, stack.user_token(workspace="ws-canary", sub="canary"))
    bad = Flow(stack, sim, "ws-poisoner")
    runner = threading.Thread(target=pump.run, kwargs={"interval": 0.05}, daemon=True)
    runner.start()
    try:
        state: dict[str, str] = {}

        def ask_max() -> None:
            state["sid"] = bad.session()
            resp = bad.ask_raw(state["sid"], _max_bundle())
            assert resp.status_code == 201, resp.text[:300]
            state["cid"] = resp.json()["clarification_id"]

        poisons = [
            lambda: inject_poison(stack),
            ask_max,
            lambda: bad.detach(state["cid"]),  # the write after the big ask (its event no longer fit)
            lambda: bad.post(state["sid"], EMOJI * 16_000, delivery="queue"),
            lambda: bad.respond(state["cid"], {"rejected": True, "reject_reason": EMOJI * 2000}),
            lambda: bad.post(state["sid"], EMOJI * 16_000),
            lambda: bad.cancel_session(state["sid"]),
        ]
        for n, poison in enumerate(poisons):
            poison()
            task = canary.post("/tasks", {"title": f"canary {n}"}).json()
            eventually(lambda t=task: any(e["task_id"] == t["id"] for e in events(canary)) or None,
                       f"the canary's task.created after poison {n}", timeout=5.0)
    finally:
        pump.stop()
        runner.join(timeout=30)
    assert pump.failures.count() == 0  # nothing needed the pump's bounded retries
    aside = stream_health.set_aside_records(bootstrap.deps())
    assert [json.loads(v)["keys"] for v in aside.values()] == [{"session_id": {"S": "poison-1"}}]
