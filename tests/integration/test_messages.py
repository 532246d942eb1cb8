"""Ordinary messages and late answers over real HTTP against the serialised emulator.

Every prompt the simulated agent receives here carries `[hang]`, so it accepts and stays silent; the tests
play the agent's side (turn completion, questions) by hand with the session's agent token. Stream functions
run only when a test drains the pump; the scheduled reconciler runs only when a test calls it.
Scenario tags (F10 ...) name failure scenarios; AC-… name acceptance criteria of the requirements.
"""
from __future__ import annotations

import itertools
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest
import requests

from chalicelib import bootstrap
from chalicelib.domain.model import State
from chalicelib.domain.time import iso
from scripts.local.sim_agent import SimAgent
from scripts.local.stack import LocalStack, make_pump
from tests.support.flow import Flow, answer, error

_ids = itertools.count(1)


def late(cid: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"clarification_id": cid, "answers": (body or answer("pg", "redis", "v7"))["answers"]}


@pytest.fixture
def flow(shared: tuple[LocalStack, SimAgent]) -> Flow:
    stack, sim = shared
    return Flow(stack, sim, f"ws-{uuid.uuid4().hex[:12]}")


# ====================================================================== admission outcomes
def test_send_message__no_turn_yet__sent_as_a_new_turn_and_the_agent_prompted_once(flow: Flow) -> None:
    sid = flow.idle_session()

    resp = flow.post(sid, "[hang] hello")

    assert resp.status_code == 201, resp.text
    body = resp.json()
    assert body["admission"] == "sent" and body["turn_id"] and body["message_id"]
    view = flow.view(sid)
    assert view["state"] == "RUNNING" and view["current_turn_id"] == body["turn_id"]
    assert [(p["text"], p["turn_id"]) for p in flow.prompts(sid)] == [("[hang] hello", body["turn_id"])]
    assert [m["id"] for m in flow.user_messages(sid)] == [body["message_id"]]


def test_send_message__previous_turn_completed__sent_as_the_next_turn(flow: Flow) -> None:
    sid = flow.session()
    first = flow.view(sid)["current_turn_id"]
    flow.end_turn(sid)

    resp = flow.post(sid, "[hang] next")

    assert resp.status_code == 201 and resp.json()["admission"] == "sent", resp.text
    assert resp.json()["turn_id"] not in (None, first)
    assert [p["text"] for p in flow.prompts(sid)] == ["[hang] start", "[hang] next"]


@pytest.mark.parametrize("delivery", [None, "auto", "queue", "steer"])
def test_send_message__agent_mid_turn_and_runtime_cannot_steer__queued_and_not_dispatched(
        flow: Flow, delivery: str | None) -> None:
    sid = flow.session()
    turn = flow.view(sid)["current_turn_id"]

    resp = flow.post(sid, "[hang] meanwhile", **({"delivery": delivery} if delivery else {}))

    assert resp.status_code == 201, resp.text
    assert resp.json()["admission"] == "queued" and resp.json()["turn_id"] is None
    assert flow.view(sid)["current_turn_id"] == turn and len(flow.prompts(sid)) == 1
    last = flow.transcript(sid)["messages"][-1]
    assert (last["id"], last["content"], last.get("queued")) == (resp.json()["message_id"], "[hang] meanwhile", True)


def test_send_message__steer_asked_and_supported__steered_into_the_running_turn(flow: Flow) -> None:
    sid = flow.session()
    turn = flow.view(sid)["current_turn_id"]
    with flow.steering() as runtime:
        resp = flow.post(sid, "also use tabs", cmid="steer-1", delivery="steer")
        retry = flow.post(sid, "also use tabs", cmid="steer-1", delivery="steer")

    assert resp.status_code == 201, (resp.text, f"steered {len(runtime.steered)} times")
    assert resp.json()["admission"] == "steered" and resp.json()["turn_id"] == turn
    assert [(r.text, r.turn_id) for r in runtime.steered] == [("also use tabs", turn)]
    assert retry.status_code == 200 and retry.json() == resp.json(), retry.text  # no second steer
    assert flow.view(sid)["current_turn_id"] == turn and len(flow.prompts(sid)) == 1
    assert [m["content"] for m in flow.user_messages(sid)] == ["[hang] start", "also use tabs"]


def test_send_message__supported_runtime_but_queue_or_auto_asked__queued_without_steering(flow: Flow) -> None:
    sid = flow.session()
    with flow.steering() as runtime:
        auto = flow.post(sid, "[hang] a")
        queued = flow.post(sid, "[hang] b", delivery="queue")
    assert (auto.json()["admission"], queued.json()["admission"]) == ("queued", "queued")
    assert runtime.steered == []


@pytest.mark.parametrize("ending", ["cancelled", "failed"])
def test_send_message__session_ended__409_session_unavailable_and_nothing_stored(flow: Flow,
                                                                                 ending: str) -> None:
    sid = flow.session()
    if ending == "cancelled":
        assert flow.user.post(f"/sessions/{sid}/cancel").status_code == 200
    else:
        flow.frame(sid, "state", state="FAILED")
    assert flow.stored(sid).state == State(ending.upper())
    flow.drain()
    before, messages, prompts = flow.stored(sid), flow.user_messages(sid), len(flow.prompts(sid))

    resp = flow.post(sid, "[hang] anyone there?", cmid="late-1")

    assert resp.status_code == 409, resp.text
    assert error(resp)["code"] == "session_unavailable"
    assert flow.stored(sid).version == before.version and len(flow.prompts(sid)) == prompts
    assert flow.user_messages(sid) == messages
    again = flow.post(sid, "[hang] a different text", cmid="late-1")
    assert again.status_code == 409 and error(again)["code"] == "session_unavailable"  # nothing was remembered


# ====================================================================== the queue
def test_queue__several_messages__dispatched_in_order_one_per_turn_end(flow: Flow) -> None:
    sid = flow.session()
    queued = [flow.post(sid, f"[hang] message {n}").json() for n in (1, 2, 3)]
    assert [q["admission"] for q in queued] == ["queued"] * 3
    turns = [flow.view(sid)["current_turn_id"]]

    for n in (1, 2, 3):
        flow.end_turn(sid)
        prompts = flow.prompts(sid)
        assert [p["text"] for p in prompts] == ["[hang] start"] + [f"[hang] message {k}" for k in range(1, n + 1)]
        turns.append(flow.view(sid)["current_turn_id"])
        assert prompts[-1]["turn_id"] == turns[-1]
        still = [m["id"] for m in flow.transcript(sid)["messages"] if m.get("queued")]
        assert still == [q["message_id"] for q in queued[n:]]

    assert len(set(turns)) == 4
    flow.end_turn(sid)  # nothing left: the session goes idle and nothing more is sent
    assert flow.view(sid)["state"] == "IDLE" and len(flow.prompts(sid)) == 4
    assert [m["id"] for m in flow.user_messages(sid)][1:] == [q["message_id"] for q in queued]


def test_queue__detached_clarification__does_not_block_the_drain(flow: Flow) -> None:
    sid, cid = flow.waiting()
    queued = flow.post(sid, "[hang] queued behind the question").json()
    assert queued["admission"] == "queued"

    flow.end_turn(sid)  # the turn-completion pass detaches the question; the queue then drains

    assert [p["text"] for p in flow.prompts(sid)][-1] == "[hang] queued behind the question"
    assert flow.entry(cid)["state"] == "superseded"
    assert not any(m.get("queued") for m in flow.transcript(sid)["messages"])


def test_drain__live_clarification__blocks_the_queue_until_it_is_detached(flow: Flow) -> None:
    """The drain refuses while a live (not detached) clarification is active; once detached it proceeds."""
    sid, cid = flow.waiting()
    assert flow.post(sid, "[hang] queued behind the question").json()["admission"] == "queued"
    s = flow.stored(sid)
    assert s.current_turn is not None
    # The agent's turn is over but its question is still live (its waiter holds on): close the turn alone.
    flow.store.complete_turn(sid, s.current_turn.id, from_state=s.state, to_state=s.state,
                             at=bootstrap.deps().now())
    later = (bootstrap.deps().settings.owner_window.total_seconds()) + 5
    holds_on = iso(bootstrap.deps().clock() + timedelta(hours=1))  # the waiter keeps renewing its lease
    flow.raw_update(sid, "SET", ["bundles", cid, "waiter_until"], {"S": holds_on})

    blocked = flow.reconcile_later(later, sid)

    assert blocked.queue_drained == 0 and len(flow.prompts(sid)) == 1
    assert flow.entry(cid)["state"] == "active_live"

    assert flow.agent(sid).post(f"/agent/clarifications/{cid}/detach").status_code == 200  # drains at once

    assert [p["text"] for p in flow.prompts(sid)][-1] == "[hang] queued behind the question"
    assert flow.reconcile_later(later, sid).queue_drained == 0  # nothing left to drain


# ====================================================================== client_message_id idempotency
def test_send_message__retried_with_the_same_body__original_outcome_and_no_second_dispatch(flow: Flow) -> None:
    sid = flow.idle_session()
    first = flow.post(sid, "[hang] once", cmid="same-1")
    queued_first = flow.post(sid, "[hang] behind", cmid="same-2")

    again = flow.post(sid, "[hang] once", cmid="same-1")
    queued_again = flow.post(sid, "[hang] behind", cmid="same-2")

    assert first.status_code == queued_first.status_code == 201
    assert again.status_code == queued_again.status_code == 200
    assert again.json() == first.json() and queued_again.json() == queued_first.json()
    assert [p["text"] for p in flow.prompts(sid)] == ["[hang] once"]
    assert len(flow.stored(sid).queue) == 1


def test_send_message__same_client_message_id_other_body__422_and_nothing_stored(flow: Flow) -> None:
    sid = flow.idle_session()
    assert flow.post(sid, "[hang] original", cmid="same-1").status_code == 201
    version = flow.stored(sid).version

    for other in ({"content": "[hang] edited"}, {"content": "[hang] original", "delivery": "queue"}):
        resp = flow.user.post(f"/sessions/{sid}/messages", {"client_message_id": "same-1", **other})
        assert resp.status_code == 422, resp.text
        assert error(resp)["code"] == "idempotency_mismatch"
    assert flow.stored(sid).version == version and len(flow.prompts(sid)) == 1


def _five_at_once(flow: Flow, sid: str, content: str) -> list[requests.Response]:
    gate = threading.Barrier(5)

    def attempt() -> requests.Response:
        gate.wait(timeout=10)
        return flow.post(sid, content, cmid="retry-storm")
    with ThreadPoolExecutor(max_workers=5) as pool:
        return [f.result(timeout=60) for f in [pool.submit(attempt) for _ in range(5)]]


@pytest.mark.parametrize("round_no", range(3))
def test_send_message__same_message_retried_5_times_concurrently__one_message_one_dispatch(
        flow: Flow, round_no: int) -> None:
    sid = flow.idle_session()

    results = _five_at_once(flow, sid, "[hang] exactly once")

    assert sorted(r.status_code for r in results) == [200, 200, 200, 200, 201], [r.text for r in results]
    bodies = {(r.json()["message_id"], r.json()["admission"], r.json()["turn_id"]) for r in results}
    assert len(bodies) == 1 and next(iter(bodies))[1] == "sent"
    assert [p["text"] for p in flow.prompts(sid)] == ["[hang] exactly once"]
    assert [m["content"] for m in flow.user_messages(sid)] == ["[hang] exactly once"]


def test_send_message__queued_message_retried_5_times_concurrently__queued_once(flow: Flow) -> None:
    sid = flow.session()

    results = _five_at_once(flow, sid, "[hang] queue me once")

    assert sorted(r.status_code for r in results) == [200, 200, 200, 200, 201], [r.text for r in results]
    assert len({r.json()["message_id"] for r in results}) == 1
    assert [p.content for p in flow.stored(sid).queue] == ["[hang] queue me once"]
    flow.end_turn(sid)
    assert [p["text"] for p in flow.prompts(sid)] == ["[hang] start", "[hang] queue me once"]


def _told(resp: requests.Response) -> tuple[str, ...] | None:
    """The outcome a reply tells (None: a retryable conflict, which tells nothing yet)."""
    if resp.status_code in (200, 201):
        body = resp.json()
        return ("admitted", body["message_id"], body["admission"])
    code = error(resp)["code"]
    return None if code == "conflict" and error(resp)["retryable"] else ("refused", code)


@pytest.mark.parametrize("round_no", range(3))
def test_send_message__20_retries_racing_a_cancel__every_reply_tells_one_outcome(flow: Flow, round_no: int) -> None:
    """A replay never contradicts the original: no device is told `sent` for a message the agent never got."""
    sid = flow.idle_session()
    gate = threading.Barrier(21)

    def send() -> requests.Response:
        gate.wait(timeout=10)
        return flow.post(sid, "[hang] raced", cmid="race-1")

    def cancel() -> requests.Response:
        gate.wait(timeout=10)
        return flow.user.post(f"/sessions/{sid}/cancel")
    with ThreadPoolExecutor(max_workers=21) as pool:
        sends = [pool.submit(send) for _ in range(20)]
        cancelled = pool.submit(cancel)
        replies = [f.result(timeout=120) for f in sends]
    assert cancelled.result(timeout=120).status_code == 200
    replies += [flow.post(sid, "[hang] raced", cmid="race-1") for _ in range(3)]  # later retries

    told = {_told(r) for r in replies} - {None}
    assert len(told) == 1, [(r.status_code, r.text[-300:]) for r in replies if _told(r) is not None]
    took = [p for p in flow.prompts(sid) if p["text"] == "[hang] raced" and p.get("accepted", True)]
    if next(iter(told))[0] == "admitted":
        assert len(took) == 1  # told sent: the agent has it, once
    else:
        assert took == []  # told refused: the agent never took it


# ====================================================================== late answers
def test_late_answer__superseded_question__sent_with_its_context_and_the_question_stays_superseded(
        flow: Flow) -> None:
    sid, cid = flow.superseded()
    flow.end_turn(sid)  # the agent is idle: a late answer starts a turn of its own
    task = flow.stored(sid).task_id
    before = flow.entry(cid)
    assert before["late_answer_allowed"] is True and before["late_answer_message_id"] is None
    rows = flow.rows(cid)

    resp = flow.post(sid, "[hang] sorry, I was away", in_reply_to=late(cid))

    assert resp.status_code == 201, resp.text
    sent = resp.json()
    assert sent["admission"] == "sent" and sent["turn_id"]
    prompt = flow.prompts(sid)[-1]
    assert prompt["turn_id"] == sent["turn_id"]
    for part in ("[hang] sorry, I was away", "Which database?", "Postgres", "Which cache?", "Redis", "v7"):
        assert part in prompt["text"], (part, prompt["text"])
    message = next(m for m in flow.user_messages(sid) if m["id"] == sent["message_id"])
    assert message["in_reply_to"] == {"clarification_id": cid, "questions": [
        {"question_id": "q1", "prompt": "Which database?", "selected_labels": ["Postgres"], "custom_text": ""},
        {"question_id": "q2", "prompt": "Which cache?", "selected_labels": ["Redis"], "custom_text": "v7"}]}
    after = flow.entry(cid)
    assert after["state"] == "superseded" and after["answerable"] is False
    assert after["late_answer_allowed"] is False and after["late_answer_message_id"] == sent["message_id"]
    assert flow.rows(cid) == rows  # never reopened, never resolved
    assert flow.view(sid)["pending_action"] is None
    assert flow.user.post(f"/tasks/{task}/workflow/transition", {"to_step": "review"}).status_code == 200
    assert flow.respond(cid, answer()).status_code == 409  # the tool request stays closed


def test_late_answer__question_the_agent_withdrew__offered_refused_by_respond_then_sent_as_a_message(
        flow: Flow) -> None:
    """Client and server share one definition of "may be answered late": the transcript offers it, respond's
    409 says it, and the message route admits it (it used to refuse a withdrawn question's late answer)."""
    sid, cid = flow.waiting()
    assert flow.withdraw(cid).status_code == 200
    flow.end_turn(sid)
    assert flow.entry(cid)["state"] == "cancelled" and flow.entry(cid)["late_answer_allowed"] is True

    refused = flow.respond(cid, answer())
    assert refused.status_code == 409
    assert error(refused)["details"] == {"reason": "cancelled", "late_answer_allowed": True}

    resp = flow.post(sid, "[hang] here is my answer anyway", in_reply_to=late(cid))

    assert resp.status_code == 201, resp.text
    assert "Which database?" in flow.prompts(sid)[-1]["text"]
    assert flow.entry(cid)["late_answer_message_id"] == resp.json()["message_id"]
    assert {r["status"] for r in flow.entry(cid)["questions"]} == {"cancelled"}  # never reopened


def test_late_answer__another_pending_question_in_the_session__left_untouched(flow: Flow) -> None:
    sid, old = flow.superseded()
    current = flow.ask(sid)  # the agent asks again in the newer, still running turn
    current_rows = flow.rows(current)
    task = flow.stored(sid).task_id

    resp = flow.post(sid, "[hang] about the earlier one", in_reply_to=late(old))

    assert resp.status_code == 201 and resp.json()["admission"] == "queued", resp.text
    entry = flow.entry(current)
    assert flow.rows(current) == current_rows and entry["state"] == "active_live" and entry["answerable"] is True
    assert flow.view(sid)["pending_action"] == "clarification"  # that question's own barrier, unchanged
    blocked = flow.user.post(f"/tasks/{task}/workflow/transition", {"to_step": "review"})
    assert blocked.status_code == 409 and error(blocked)["code"] == "pending_clarification"
    assert flow.entry(old)["late_answer_message_id"] == resp.json()["message_id"]

    flow.end_turn(sid)  # the queued late answer goes out when the agent's turn ends

    prompt = flow.prompts(sid)[-1]
    assert "about the earlier one" in prompt["text"] and "Postgres" in prompt["text"]
    assert all(s == "pending" for s, _ in flow.rows(current).values())  # never resolved by the late answer
    assert flow.stored(sid).bundle(current).rows[0].response is None  # type: ignore[union-attr]


def test_late_answer__question_of_another_session__400_and_nothing_stored(flow: Flow) -> None:
    _, foreign = flow.superseded()
    sid = flow.idle_session()
    version = flow.stored(sid).version

    resp = flow.post(sid, "[hang] wrong place", in_reply_to=late(foreign))

    assert resp.status_code == 400, resp.text
    assert error(resp)["details"]["field"] == "in_reply_to.clarification_id"
    assert flow.stored(sid).version == version and flow.prompts(sid) == []
    assert flow.entry(foreign)["late_answer_message_id"] is None


@pytest.mark.parametrize("detached", [False, True], ids=["live", "detached"])
def test_late_answer__question_still_active__409_answer_it_through_respond(flow: Flow, detached: bool) -> None:
    """F10: a detached current-turn question is still the tool request's to answer."""
    sid, cid = flow.detached() if detached else flow.waiting()
    version = flow.stored(sid).version

    resp = flow.post(sid, "[hang] too early", in_reply_to=late(cid))

    assert resp.status_code == 409, resp.text
    assert "respond" in error(resp)["message"]
    assert flow.stored(sid).version == version and len(flow.prompts(sid)) == 1
    assert flow.entry(cid)["answerable"] is True


def test_late_answer__question_already_answered__409_clarification_inactive(flow: Flow) -> None:
    sid, cid = flow.detached()
    assert flow.respond(cid, answer()).status_code == 200
    version = flow.stored(sid).version

    resp = flow.post(sid, "[hang] again", in_reply_to=late(cid))

    assert resp.status_code == 409, resp.text
    assert error(resp)["code"] == "clarification_inactive" and error(resp)["details"]["reason"] == "answered"
    assert flow.stored(sid).version == version


def test_late_answer__expired_question_of_an_ended_session__409_session_unavailable(flow: Flow) -> None:
    sid, cid = flow.waiting()
    assert flow.user.post(f"/sessions/{sid}/cancel").status_code == 200
    assert flow.entry(cid)["state"] == "expired"
    version = flow.stored(sid).version

    resp = flow.post(sid, "[hang] too late", in_reply_to=late(cid))

    assert resp.status_code == 409 and error(resp)["code"] == "session_unavailable", resp.text
    assert flow.stored(sid).version == version


def test_late_answer__unknown_option__400_naming_the_field(flow: Flow) -> None:
    sid, cid = flow.superseded()
    version = flow.stored(sid).version

    resp = flow.post(sid, "[hang] x", in_reply_to=late(cid, answer("oracle")))

    assert resp.status_code == 400, resp.text
    assert error(resp)["details"]["field"] == "in_reply_to.answers[0].selected_options"
    assert flow.stored(sid).version == version


def test_late_answer__retried__one_message_linked_once(flow: Flow) -> None:
    sid, cid = flow.superseded()
    flow.end_turn(sid)

    first = flow.post(sid, "[hang] late", cmid="late-7", in_reply_to=late(cid))
    again = flow.post(sid, "[hang] late", cmid="late-7", in_reply_to=late(cid))

    assert (first.status_code, again.status_code) == (201, 200) and again.json() == first.json()
    assert len([p for p in flow.prompts(sid) if "Which database?" in p["text"]]) == 1
    assert flow.entry(cid)["late_answer_message_id"] == first.json()["message_id"]


def test_late_answer__steered_into_the_running_turn__linked_to_its_question(flow: Flow) -> None:
    sid, cid = flow.superseded()  # turn 2 is running: steering is possible
    with flow.steering() as runtime:
        resp = flow.post(sid, "fyi", delivery="steer", in_reply_to=late(cid))

    assert resp.status_code == 201 and resp.json()["admission"] == "steered", (resp.text, len(runtime.steered))
    assert len(runtime.steered) == 1 and "Postgres" in runtime.steered[0].text
    assert flow.entry(cid)["late_answer_message_id"] == resp.json()["message_id"]


# ====================================================================== the local stack's stream pump
def test_local_stream_pump__a_cancelled_transaction_in_between__later_records_still_delivered(
        flow: Flow) -> None:
    """The local stack must keep publishing history after a lost idempotent admission (a cancelled
    transaction, e.g. one of five concurrent retries); here the stack's own long-lived pump is used."""
    from chalicelib.domain.errors import ConditionFailed
    from chalicelib.domain.model import Dispatch, Prompt
    from chalicelib.store.protocol import Remembered

    pump = make_pump(flow.stack.endpoint)
    pump.drain()  # a running pump: its shard iterators now exist
    sid = flow.idle_session()
    stray = Prompt(message_id="stray", client_message_id="stray", turn_id="t", content="x", author_id="user-1",
                   created_at=bootstrap.deps().now(), generation=1, dispatch=Dispatch.PENDING)
    with pytest.raises(ConditionFailed):  # the transaction is cancelled (its session condition fails)
        flow.store.admit(sid, stray, start=None, expected_turn_id="not-the-turn", from_states=[State.IDLE],
                         link_bundle=None, remember=Remembered("message:stray", "f", {}), queue_cap=10,
                         at=bootstrap.deps().now())
    sent = flow.post(sid, "[hang] after the cancelled transaction").json()

    pump.drain()

    _, history = flow.store.list_history(sid)
    assert [m.id for m in history] == [sent["message_id"]]
