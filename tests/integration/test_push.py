"""Web Push end to end on the emulator: a device registered over HTTP, an agent's question, the stream
functions putting `message.added` on the local bus, the pending-question rule's queue, the push function, and a
local push service (tests/support/push_service.py) that checks VAPID and decrypts what arrives."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from chalicelib import bootstrap
from scripts.local.bus import receive
from scripts.local.handlers import LambdaContext
from scripts.local.push_relay import relay_once
from scripts.local.stack import LocalStack
from tests.support.flow import ONE_QUESTION, QUESTIONS, ApiClient, Flow
from tests.support.push_service import PushService, Subscription


@pytest.fixture
def push() -> Iterator[PushService]:
    service = PushService().start()
    yield service
    service.stop()


def register(client: ApiClient, sub: Subscription, label: str | None = "phone") -> str:
    resp = client.post("/devices", sub.json(label))
    assert resp.status_code == 201, resp.text
    return str(resp.json()["device_id"])


def asked(flow: Flow, questions: list[dict[str, Any]] | None = None) -> tuple[str, str, str]:
    """(task, session, clarification): a question asked and its events on the bus."""
    task = flow.task("Move the billing service")
    sid = flow.session(task)
    cid = flow.ask(sid, questions or ONE_QUESTION)
    flow.drain()
    return task, sid, cid


def pending_events(stack: LocalStack) -> list[dict[str, Any]]:
    assert stack.bus is not None
    return receive(stack.bus.question_queue)


def invoke(stack: LocalStack, event: dict[str, Any]) -> Any:
    return stack.app.push_delivery(event, LambdaContext("push_delivery"))


def test_ask__pushed_encrypted_to_the_workspace_devices_only__payload_has_no_answer(
        stack: LocalStack, push: PushService) -> None:
    flow = Flow(stack, None, "ws-1")
    mine, colleague, outsider = push.subscribe(), push.subscribe(), push.subscribe()
    register(flow.user, mine)
    register(flow.other_user(), colleague)  # another user of the same workspace
    register(ApiClient(stack.url, stack.user_token(workspace="ws-2", sub="user-9")), outsider)
    task, sid, cid = asked(flow)

    assert stack.bus is not None
    assert relay_once(stack.bus.question_queue, stack.app.push_delivery) == 1  # as `make run` relays it

    expected = {"type": "clarification", "clarification_id": cid, "session_id": sid, "task_id": task,
                "title": "Move the billing service", "question": "Which database?", "question_id": "q1",
                "options": [{"option_id": "pg", "label": "Postgres"}, {"option_id": "my", "label": "MySQL"}]}
    assert mine.delivered() == [expected]
    assert colleague.delivered() == [expected]
    assert outsider.received == []  # ws-2 is not the question's workspace
    assert push.errors == []
    headers = {k.lower(): v for k, v in mine.received[0].headers.items()}
    assert headers["urgency"] == "high" and int(headers["ttl"]) > 0 and len(headers["topic"]) <= 32


def test_bundle_of_two_questions__no_options_in_the_payload(stack: LocalStack, push: PushService) -> None:
    flow = Flow(stack, None, "ws-1")
    mine = push.subscribe()
    register(flow.user, mine)
    asked(flow, QUESTIONS)
    for event in pending_events(stack):
        invoke(stack, event)
    [payload] = mine.delivered()
    assert payload["question"] == "Which database?" and "options" not in payload and "question_id" not in payload


def test_redelivered_event__one_push(stack: LocalStack, push: PushService) -> None:
    flow = Flow(stack, None, "ws-1")
    mine = push.subscribe()
    register(flow.user, mine)
    asked(flow)
    [event] = pending_events(stack)
    first = invoke(stack, event)
    again = invoke(stack, event)  # EventBridge and Lambda deliver at least once
    assert (first["sent"], again["sent"], again["skipped"]) == (1, 0, 1)
    assert len(mine.received) == 1


def test_gone_subscription__410__device_removed(stack: LocalStack, push: PushService) -> None:
    flow = Flow(stack, None, "ws-1")
    gone, kept = push.subscribe(), push.subscribe()
    gone_id = register(flow.user, gone)
    register(flow.user, kept)
    gone.answer(410)
    asked(flow)
    [event] = pending_events(stack)
    report = invoke(stack, event)
    assert (report["sent"], report["expired"]) == (1, 1)
    listed = flow.user.get("/devices").json()["devices"]
    assert gone_id not in [d["device_id"] for d in listed] and len(listed) == 1
    assert len(gone.received) == 1  # not retried


def test_throttled__429_then_accepted__retried_once(stack: LocalStack, push: PushService) -> None:
    flow = Flow(stack, None, "ws-1")
    mine = push.subscribe()
    register(flow.user, mine)
    mine.answer(429, **{"Retry-After": "0"})
    asked(flow)
    [event] = pending_events(stack)
    assert invoke(stack, event)["sent"] == 1
    assert [r.status for r in mine.received] == [429, 201]
    assert len(mine.delivered()) == 1


def test_push_service_down__invocation_fails__redelivery_sends_once(stack: LocalStack, push: PushService) -> None:
    flow = Flow(stack, None, "ws-1")
    mine = push.subscribe()
    register(flow.user, mine)
    pusher = bootstrap.deps().pusher
    assert pusher is not None
    mine.answer(503, times=pusher.attempts)
    asked(flow)
    [event] = pending_events(stack)
    with pytest.raises(Exception, match="not reached"):
        invoke(stack, event)  # Lambda retries a failed asynchronous invocation
    assert invoke(stack, event)["sent"] == 1
    assert [r.status for r in mine.received].count(201) == 1


def test_question_answered_before_the_event__nothing_pushed(stack: LocalStack, push: PushService) -> None:
    flow = Flow(stack, None, "ws-1")
    mine = push.subscribe()
    register(flow.user, mine)
    _, _, cid = asked(flow)
    assert flow.skip(cid).status_code == 200
    [event] = pending_events(stack)
    assert invoke(stack, event)["sent"] == 0
    assert mine.received == []


def test_push_marker__dynamodb__one_claim_a_dead_ones_taken_over_sent_never_again(stack: LocalStack) -> None:
    devices = bootstrap.deps().devices
    assert devices is not None

    def claim(now: str, cid: str = "c1") -> bool:
        return devices.claim_push("ws-1", cid, "dev-1", now=now, until="2026-01-01T00:01:00Z", expires_at=1)

    assert claim("2026-01-01T00:00:00Z")
    assert not claim("2026-01-01T00:00:30Z")  # its invocation may still be sending
    assert claim("2026-01-01T00:02:00Z")  # that invocation died (its deadline passed): this one sends
    devices.finish_push("ws-1", "c1", "dev-1", sent=True)
    assert not claim("2027-01-01T00:00:00Z")  # sent: never again
    assert claim("2026-01-01T00:00:00Z", "c2")
    devices.finish_push("ws-1", "c2", "dev-1", sent=False)  # not sent: a redelivery may try again
    assert claim("2026-01-01T00:00:01Z", "c2")
