"""The event bus end to end on the emulator: the stream functions put every client event on the local
EventBridge bus, whose rules copy them to SQS queues (as `make run` sets up), and the tests read those
queues. Redelivered stream records put nothing again; a bus that rejects leaves the records to be retried.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

from chalicelib import bootstrap
from chalicelib.bus.eventbridge import EventBridgeBus
from chalicelib.domain.model import Event
from chalicelib.store.models import TaskRecord
from scripts.local.bus import receive
from scripts.local.stack import LocalStack, make_pump
from tests.support.flow import ONE_QUESTION, Flow
from tests.support.streams import deliver, history_table, read_stream, sessions_table

ROOT = Path(__file__).resolve().parents[2]
# "[hang]" in the answer keeps the simulated agent silent after its resume prompt, so every count is exact.
ANSWER = {"answers": [{"question_id": "q1", "selected_options": ["pg"], "custom_text": "[hang] go"}]}


def drain(stack: LocalStack) -> None:
    # A fresh pump per drain, from the stored checkpoints (as in test_responses.py).
    stack.pump = make_pump(stack.endpoint)
    stack.pump.drain()


def redeliver_everything(stack: LocalStack) -> None:
    """Every record of every stream, from TRIM_HORIZON, handed to its handler again (Lambda's redelivery)."""
    for table, handler in ((sessions_table(), stack.app.sessions_stream),
                           (history_table(), stack.app.history_stream),
                           (str(TaskRecord.Meta.table_name), stack.app.tasks_stream)):
        records, arn = read_stream(stack, table)
        assert records, table
        deliver(handler, records, arn)


def answered_detached_question(flow: Flow) -> tuple[str, str, str]:
    """(task, session, bundle): a question asked in a session's first turn, detached, then answered."""
    task = flow.task()
    sid = flow.session(task)
    cid = flow.ask(sid, ONE_QUESTION)
    assert flow.detach(cid) == ["q1"]
    resp = flow.user.post(f"/clarifications/{cid}/respond", ANSWER, headers={"Idempotency-Key": "k1"})
    assert resp.status_code == 200 and resp.json()["delivery"] == "resumed", resp.text
    return task, sid, cid


def as_bus_detail(e: Event) -> dict[str, Any]:
    return {"id": e.id, "type": e.type, "workspace_id": e.workspace_id, "task_id": e.task_id,
            "session_id": e.session_id, "at": e.at, "payload": dict(e.payload)}


def test_answered_detached_question__each_event_on_the_bus_once__even_after_redelivery(stack: LocalStack) -> None:
    assert stack.bus is not None
    flow = Flow(stack, None, "ws-1", questions=ONE_QUESTION)
    task, sid, cid = answered_detached_question(flow)
    drain(stack)

    delivered = receive(stack.bus.tail_queue)
    questions = receive(stack.bus.question_queue)

    feed = {e.id: e for e in flow.events()}
    ids = Counter(e["detail"]["id"] for e in delivered)
    assert [i for i, n in ids.items() if n > 1] == []  # once each
    assert set(ids) == set(feed)  # exactly the events the client feed received
    for envelope in delivered:
        assert envelope["source"] == "clarify" and envelope["detail-type"] == envelope["detail"]["type"]
        assert envelope["detail"] == as_bus_detail(feed[envelope["detail"]["id"]])
    types = Counter(e["detail-type"] for e in delivered)
    assert {t: n for t, n in types.items() if t != "session.updated"} == {
        "task.created": 1, "task.status_summary.updated": 1, "turn.started": 2, "turn.completed": 1,
        "message.added": 2, "message.updated": 2}
    started = {e["detail"]["payload"]["turn_id"] for e in delivered if e["detail-type"] == "turn.started"}
    current = flow.stored(sid).current_turn
    assert current is not None and current.id in started  # the question's turn, and the successor it resumed
    [closed] = [e["detail"]["payload"] for e in delivered if e["detail-type"] == "turn.completed"]
    assert closed["turn_id"] != current.id and closed["turn_id"] in started and closed["abandoned"] is True
    updates = [e["detail"]["payload"] for e in delivered if e["detail-type"] == "message.updated"]
    assert sorted(u["state"] for u in updates) == ["active_detached", "answered"]
    assert {u["clarification_id"] for u in updates} == {cid}
    assert all(e["detail"]["task_id"] == task for e in delivered)
    # The example rule's pattern (the deployed SNS topic's feed): the question, once, when it was asked.
    assert [e["detail"]["id"] for e in questions] == [f"message.added:{cid}"]

    redeliver_everything(stack)
    drain(stack)

    assert receive(stack.bus.tail_queue) == [] and receive(stack.bus.question_queue) == []
    assert {e.id for e in flow.events()} == set(feed)


def test_bus_rejects__stream_records_retried__published_once_when_it_accepts(stack: LocalStack) -> None:
    assert stack.bus is not None
    flow = Flow(stack, None, "ws-1", questions=ONE_QUESTION)
    working = bootstrap.deps()
    # The same EventBridge API on the emulator, but a bus that does not exist: every PutEvents fails.
    bootstrap.override(replace(working, bus=EventBridgeBus("no-such-bus"),
                               settings=replace(working.settings, bus_backoff=0.0)))
    task = flow.task()
    drain(stack)

    assert stack.pump is not None and stack.pump.failed_batches > 0
    assert flow.events() == []  # not in the feed: nothing claims it was published
    assert receive(stack.bus.tail_queue, wait=0) == []

    bootstrap.override(working)
    drain(stack)

    delivered = receive(stack.bus.tail_queue)
    assert [e["detail"]["id"] for e in delivered] == [f"task.created:{task}"]
    assert [e.id for e in flow.events()] == [f"task.created:{task}"]


def test_bus_tail__prints_what_arrived(stack: LocalStack) -> None:
    assert stack.bus is not None
    flow = Flow(stack, None, "ws-1", questions=ONE_QUESTION)
    task = flow.task()
    sid = flow.session(task)
    cid = flow.ask(sid, ONE_QUESTION)
    drain(stack)
    env = {**os.environ, "AWS_ENDPOINT_URL": stack.endpoint, "CLARIFY_EVENT_BUS": stack.bus.name}

    def tail(*args: str) -> list[str]:
        result = subprocess.run([sys.executable, str(ROOT / "scripts" / "bus-tail"), "--once", *args], env=env,
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        return result.stdout.splitlines()

    questions = [json.loads(line) for line in tail("--questions", "--json")]
    lines = tail()

    assert [(q["detail-type"], q["detail"]["id"]) for q in questions] == [("message.added", f"message.added:{cid}")]
    assert any("task.created" in line and f"task.created:{task}" in line for line in lines)
    assert any("turn.started" in line and f"session {sid}" in line for line in lines)
    assert tail() == []  # the queue was consumed
