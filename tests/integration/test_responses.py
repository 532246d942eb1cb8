"""Answering clarifications over real HTTP against the serialised emulator.

The user side talks through the user routes; the agent side is driven by hand with the session's agent
token (the simulated agent receives only prompts tagged `[hang]`, which it accepts and then leaves alone;
answers carry `[hang]` in their text so the prompts that hand them over keep the agent quiet too).
Stream functions run only when a test drains the pump, and the scheduled reconciler runs only when a test
calls it (scoped to that test's sessions, with the clock moved past the deadlines), so every count is exact.
Scenario tags (C1, C2, L1, L2, WD1 ...) name failure scenarios from the requirements.
"""
from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

import pytest
import requests

from chalicelib import bootstrap
from scripts.local.sim_agent import SimAgent
from scripts.local.stack import LocalStack
from tests.support.flow import ANSWER, SKIP, ApiClient, Flow, answer, error, in_thread, session_of


def stored_answers(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The normalised form the claim stores (and a loser is told about)."""
    return [{"question_id": a["question_id"], "selected_options": a.get("selected_options", []),
             "custom_text": a.get("custom_text", "")} for a in body["answers"]]


@pytest.fixture
def flow(shared: tuple[LocalStack, SimAgent]) -> Flow:
    stack, sim = shared
    return Flow(stack, sim, f"ws-{uuid.uuid4().hex[:12]}")


# ====================================================================== validation before anything else
@pytest.mark.parametrize(("body", "field"), [
    ({"answers": answer()["answers"][:1]}, "answers"),
    ({"answers": [{"question_id": "q1", "selected_options": ["oracle"]}, answer()["answers"][1]]},
     "answers[0].selected_options"),
    ({"answers": [*answer()["answers"], answer()["answers"][0]]}, "answers[2].question_id"),
    ({"rejected": True, **answer()}, "answers"),
    ({"answers": [answer()["answers"][0], {"question_id": "q2", "custom_text": "x" * 2000 + " "}]},
     "answers[1].custom_text"),
], ids=["row-unanswered", "unknown-option", "row-answered-twice", "rejected-with-answers", "text-over-cap"])
def test_respond__invalid_body__400_naming_the_field_and_nothing_written(flow: Flow, body: Any,
                                                                         field: str) -> None:
    sid, cid = flow.waiting()
    before, prompts = flow.stored(sid), len(flow.prompts(sid))

    resp = flow.respond(cid, body)

    assert resp.status_code == 400, resp.text
    assert error(resp)["code"] == "validation_error" and error(resp)["details"]["field"] == field
    assert flow.stored(sid).version == before.version and len(flow.prompts(sid)) == prompts


# ====================================================================== live delivery
def test_respond__live_waiter_confirms__200_live_and_terminal_update_published_only_after_delivery(
        flow: Flow) -> None:
    sid, cid = flow.waiting()
    flow.drain()
    responder = in_thread(lambda: flow.respond(cid, ANSWER))

    claim = flow.take_claim(cid)
    flow.drain()  # the claim's stream record is processed while the delivery is still unconfirmed
    during = flow.entry(cid)
    published_during = list(flow.updates(cid))
    confirmed = flow.confirm(cid, claim["delivery_id"])
    resp = responder.result(timeout=30)
    flow.drain()

    assert claim["state"] == "answered" and claim["response"]["answers"] == stored_answers(ANSWER)
    assert confirmed.status_code == 200, confirmed.text
    assert resp.status_code == 200, resp.text
    assert resp.json() == {"clarification_id": cid, "status": "answered", "delivery": "live"}
    assert during["state"] == "delivery_claimed" and during["answerable"] is False
    assert [q["status"] for q in during["questions"]] == ["pending", "pending"]  # not published yet
    assert published_during == []
    terminal = flow.updates(cid)
    assert len(terminal) == 1 and [q["status"] for q in terminal[0].payload["questions"]] == ["answered"] * 2
    assert flow.entry(cid)["state"] == "answered"
    assert len(flow.prompts(sid)) == 1  # live: nothing was prompted


def test_confirm__unknown_delivery_id__409_and_nothing_confirmed(flow: Flow) -> None:
    sid, cid = flow.waiting()
    with flow.settings(confirm_wait=1.0):
        responder = in_thread(lambda: flow.respond(cid, ANSWER))
        flow.take_claim(cid)
        stray = flow.confirm(cid, "not-the-delivery")
        resp = responder.result(timeout=30)
    assert stray.status_code == 409, stray.text
    assert resp.status_code == 200 and resp.json()["delivery"] == "resumed", resp.text  # nobody confirmed it
    assert flow.stored(sid).watchdog is None


def test_respond__waiter_never_confirms__the_same_request_resumes_the_agent_once(flow: Flow) -> None:
    """The waiter took the claim and vanished: the user is not asked to resend; the same request continues
    as a detached answer and the agent is resumed exactly once."""
    sid, cid = flow.waiting()
    with flow.settings(confirm_wait=0.5):
        responder = in_thread(lambda: flow.respond(cid, ANSWER))
        claim = flow.take_claim(cid)
        resp = responder.result(timeout=30)

    assert resp.status_code == 200, resp.text
    assert resp.json() == {"clarification_id": cid, "status": "answered", "delivery": "resumed"}
    assert flow.rows(cid) == {"q1": ("answered", True), "q2": ("answered", True)}  # exactly the claim, detached
    late = flow.confirm(cid, claim["delivery_id"])
    assert late.status_code == 409, late.text  # the fall-through won: the old delivery cannot be confirmed
    resumed = [p for p in flow.prompts(sid) if "Which database?" in p["text"]]
    assert len(resumed) == 1 and "Postgres" in resumed[0]["text"] and "Redis" in resumed[0]["text"]
    assert resumed[0]["turn_id"] == flow.stored(sid).current_turn.id  # type: ignore[union-attr]
    assert flow.respond(cid, ANSWER).status_code == 409  # answered: a second answer resumes nothing


def test_confirm_and_fall_through__raced_at_the_deadline_many_rounds__exactly_one_lands(flow: Flow) -> None:
    """L2: confirmation and the responder's fall-through are conditional on the same claim: exactly one lands.

    The first round confirms well inside a long wait, the last only after the responder gave up; the rounds
    between confirm around a short deadline, where either may win but never both.
    """
    task = flow.task()
    rounds: list[tuple[float, float | None]] = [(30.0, 0.0), *[(0.4, d) for d in (0.2, 0.3, 0.4, 0.5)],
                                                (0.4, None)]
    outcomes = []
    for confirm_wait, delay in rounds:
        sid, cid = flow.waiting(task)
        with flow.settings(confirm_wait=confirm_wait):
            responder = in_thread(lambda cid=cid: flow.respond(cid, ANSWER))  # type: ignore[misc]
            claim = flow.take_claim(cid)
            if delay is None:
                responder.result(timeout=30)  # confirm only once the responder has answered
            else:
                time.sleep(delay)  # the race itself: confirm around the responder's deadline
            confirmed = flow.confirm(cid, claim["delivery_id"])
            resp = responder.result(timeout=30)
        bundle = flow.stored(sid).bundle(cid)
        assert bundle is not None and bundle.delivery is not None
        resumes = [p for p in flow.prompts(sid) if "Which database?" in p["text"]]
        if confirmed.status_code == 200:
            assert resp.status_code == 200 and resp.json()["delivery"] == "live", (delay, resp.text)
            assert flow.rows(cid) == {"q1": ("answered", False), "q2": ("answered", False)}
            assert bundle.delivery.result == "live" and flow.stored(sid).watchdog is not None
            assert resumes == []  # delivered live: nothing prompted
        else:
            assert confirmed.status_code == 409, confirmed.text
            assert resp.status_code == 200 and resp.json()["delivery"] == "resumed", (delay, resp.text)
            assert flow.rows(cid) == {"q1": ("answered", True), "q2": ("answered", True)}
            assert bundle.delivery.result == "resumed" and flow.stored(sid).watchdog is None
            assert len(resumes) == 1  # resumed exactly once
        outcomes.append(confirmed.status_code)
    assert outcomes[0] == 200 and outcomes[-1] == 409


# ====================================================================== two devices at once (C2)
def _race(flow: Flow, cid: str, first: dict[str, Any], second: dict[str, Any],
          ) -> tuple[requests.Response, requests.Response]:
    other = flow.other_user()
    gate = threading.Barrier(2)

    def device(body: dict[str, Any], client: ApiClient) -> requests.Response:
        gate.wait(timeout=10)
        return flow.respond(cid, body, client=client)
    with ThreadPoolExecutor(max_workers=2) as pool:
        a = pool.submit(device, first, flow.user)
        b = pool.submit(device, second, other)
        return a.result(timeout=60), b.result(timeout=60)


def test_respond__two_devices_race_a_detached_bundle_many_rounds__one_claim_and_loser_told_the_winner(
        flow: Flow) -> None:
    task = flow.task()
    device_a, device_b = answer("pg", "redis", "[hang] from A"), answer("my", "none", "[hang] from B")
    for round_no in range(20):
        sid, cid = flow.detached(task)

        a, b = _race(flow, cid, device_a, device_b)

        assert sorted((a.status_code, b.status_code)) == [200, 409], (round_no, a.text, b.text)
        winner, loser = (a, b) if a.status_code == 200 else (b, a)
        won = device_a if winner is a else device_b
        assert winner.json() == {"clarification_id": cid, "status": "answered", "delivery": "resumed"}
        lost = error(loser)
        assert lost["code"] == "clarification_inactive" and lost["details"]["reason"] == "answered", lost
        assert lost["details"]["response"]["answers"] == stored_answers(won), (round_no, lost)
        bundle = flow.stored(sid).bundle(cid)
        assert bundle is not None and [dict(r.response or {}) for r in bundle.rows] == stored_answers(won)
        resumes = [p for p in flow.prompts(sid) if "Which database?" in p["text"]]
        assert len(resumes) == 1, (round_no, resumes)  # the agent is resumed exactly once
        assert won["answers"][1]["custom_text"] in resumes[-1]["text"]
        assert resumes[-1]["turn_id"] == flow.stored(sid).current_turn.id  # type: ignore[union-attr]


def test_respond__two_devices_race_a_live_bundle__one_delivery_and_loser_told_the_winner(flow: Flow) -> None:
    task = flow.task()
    device_a, device_b = answer("pg", "redis", "from A"), answer("my", "none", "from B")
    for round_no in range(5):
        sid, cid = flow.waiting(task)
        delivered: list[dict[str, Any]] = []

        def waiter(cid: str = cid, delivered: list[dict[str, Any]] = delivered) -> requests.Response:
            claim = flow.take_claim(cid)
            delivered.append(claim)
            return flow.confirm(cid, claim["delivery_id"])
        confirming = in_thread(waiter)

        a, b = _race(flow, cid, device_a, device_b)

        assert confirming.result(timeout=30).status_code == 200
        assert sorted((a.status_code, b.status_code)) == [200, 409], (round_no, a.text, b.text)
        winner, loser = (a, b) if a.status_code == 200 else (b, a)
        won = device_a if winner is a else device_b
        assert winner.json()["delivery"] == "live"
        lost = error(loser)
        assert lost["details"]["reason"] == "answered"
        assert lost["details"]["response"]["answers"] == stored_answers(won)
        assert len(delivered) == 1 and delivered[0]["response"]["answers"] == stored_answers(won)
        assert len(flow.prompts(sid)) == 1  # a live delivery never prompts


# ====================================================================== inactive bundles
def test_respond__superseded_bundle__409_superseded_no_write_no_prompt(flow: Flow) -> None:
    """C1: a stale device answers after a newer turn was accepted."""
    sid, cid = flow.detached()
    flow.newer_turn(sid)
    for body in (ANSWER, SKIP):
        before, prompts = flow.stored(sid), len(flow.prompts(sid))

        resp = flow.respond(cid, body)

        assert resp.status_code == 409, resp.text
        assert error(resp)["code"] == "clarification_inactive"
        assert error(resp)["details"] == {"reason": "superseded", "late_answer_allowed": True}
        after = flow.stored(sid)
        assert after.version == before.version and len(flow.prompts(sid)) == prompts
        assert after.bundle(cid) == before.bundle(cid)


@pytest.mark.parametrize("ending", ["session_cancelled", "agent_withdrew"])
def test_respond__bundle_ended__409_with_the_reason(flow: Flow, ending: str) -> None:
    sid, cid = flow.waiting()
    if ending == "session_cancelled":
        assert flow.user.post(f"/sessions/{sid}/cancel").status_code == 200
    else:
        assert flow.agent(sid).post(f"/agent/clarifications/{cid}/cancel").status_code == 200
    version = flow.stored(sid).version

    resp = flow.respond(cid, ANSWER)

    assert resp.status_code == 409, resp.text
    assert error(resp)["details"] == {"reason": {"session_cancelled": "expired", "agent_withdrew": "cancelled"}[ending],
                                      "late_answer_allowed": True}
    assert flow.stored(sid).version == version


@pytest.mark.parametrize(("first", "reason", "response"), [
    (ANSWER, "answered", {"status": "answered", "rejected": False, "answers": stored_answers(ANSWER)}),
    (SKIP, "rejected", {"status": "rejected", "rejected": True, "reject_reason": "not now", "answers": []}),
], ids=["answered", "rejected"])
def test_respond__already_resolved__409_with_the_winners_outcome(flow: Flow, first: dict[str, Any], reason: str,
                                                                 response: dict[str, Any]) -> None:
    sid, cid = flow.detached()
    assert flow.respond(cid, first).status_code == 200
    version, prompts = flow.stored(sid).version, len(flow.prompts(sid))

    resp = flow.respond(cid, answer("my", "none"), client=flow.other_user())

    assert resp.status_code == 409, resp.text
    assert error(resp)["details"] == {"reason": reason, "response": response, "late_answer_allowed": False}
    assert flow.stored(sid).version == version and len(flow.prompts(sid)) == prompts


# ====================================================================== idempotency
def test_respond__idempotency_key_replayed__original_result_and_one_resume(flow: Flow) -> None:
    sid, cid = flow.detached()
    first = flow.respond(cid, ANSWER, key="key-1")
    version = flow.stored(sid).version

    again = flow.respond(cid, {"answers": list(reversed(ANSWER["answers"]))}, key="key-1")

    assert first.status_code == again.status_code == 200
    assert again.json() == first.json() == {"clarification_id": cid, "status": "answered", "delivery": "resumed"}
    assert flow.stored(sid).version == version
    assert len([p for p in flow.prompts(sid) if "Which database?" in p["text"]]) == 1


def test_respond__idempotency_key_with_another_body__422_and_nothing_written(flow: Flow) -> None:
    sid, cid = flow.detached()
    assert flow.respond(cid, ANSWER, key="key-1").status_code == 200
    version = flow.stored(sid).version

    resp = flow.respond(cid, answer("my"), key="key-1")

    assert resp.status_code == 422, resp.text
    assert error(resp)["code"] == "idempotency_mismatch" and flow.stored(sid).version == version


# ====================================================================== Skip
def test_respond__skip_live__waiter_receives_the_rejection_in_the_same_turn(flow: Flow) -> None:
    sid, cid = flow.waiting()
    turn = flow.stored(sid).current_turn
    responder = in_thread(lambda: flow.respond(cid, SKIP))

    claim = flow.take_claim(cid)
    assert flow.confirm(cid, claim["delivery_id"]).status_code == 200
    resp = responder.result(timeout=30)

    assert resp.json() == {"clarification_id": cid, "status": "rejected", "delivery": "live"}
    assert claim["state"] == "rejected" and claim["response"]["rejected"] is True
    assert claim["response"]["reject_reason"] == "not now" and claim["response"]["answers"] == []
    assert flow.rows(cid) == {"q1": ("rejected", False), "q2": ("rejected", False)}
    assert flow.stored(sid).current_turn == turn and len(flow.prompts(sid)) == 1


def test_respond__skip_detached__persisted_rejected_without_resuming(flow: Flow) -> None:
    sid, cid = flow.detached()
    turn = flow.stored(sid).current_turn

    resp = flow.respond(cid, SKIP)

    assert resp.status_code == 200, resp.text
    assert resp.json() == {"clarification_id": cid, "status": "rejected", "delivery": "recorded"}
    assert flow.rows(cid) == {"q1": ("rejected", True), "q2": ("rejected", True)}
    assert flow.stored(sid).current_turn == turn
    assert len(flow.prompts(sid)) == 1 and flow.cancels(sid) == []
    assert flow.entry(cid)["state"] == "rejected"


# ====================================================================== dismiss
def test_dismiss__active_bundle__409_and_nothing_written(flow: Flow) -> None:
    sid, cid = flow.waiting()
    version = flow.stored(sid).version
    resp = flow.user.post(f"/clarifications/{cid}/dismiss")
    assert resp.status_code == 409, resp.text
    assert flow.stored(sid).version == version and flow.entry(cid)["dismissed"] is False


def test_dismiss__superseded_bundle__hidden_for_this_user_on_every_device_and_nothing_sent(flow: Flow) -> None:
    sid, cid = flow.detached()
    flow.newer_turn(sid)
    prompts, rows = len(flow.prompts(sid)), flow.rows(cid)
    assert flow.entry(cid)["late_answer_allowed"] is True

    resp = flow.user.post(f"/clarifications/{cid}/dismiss")

    assert resp.status_code == 200, resp.text
    mine, theirs = flow.entry(cid), flow.entry(cid, flow.other_user())
    assert mine["dismissed"] is True and mine["late_answer_allowed"] is False and mine["state"] == "superseded"
    assert theirs["dismissed"] is False and theirs["late_answer_allowed"] is True
    assert flow.rows(cid) == rows and len(flow.prompts(sid)) == prompts and flow.cancels(sid) == []


# ====================================================================== waiter lease and the reconciler
def test_wait__each_poll__renews_the_waiter_lease(flow: Flow) -> None:
    _, cid = flow.waiting()
    start = datetime.now(tz=bootstrap.deps().clock().tzinfo)
    assert flow.wait(cid, timeout=0).json() == {"state": "pending"}
    first = flow.stored(session_of(cid)).bundle(cid).waiter_until  # type: ignore[union-attr]
    assert flow.wait(cid, timeout=0).json() == {"state": "pending"}
    second = flow.stored(session_of(cid)).bundle(cid).waiter_until  # type: ignore[union-attr]

    margin = bootstrap.deps().settings.waiter_lease_margin
    assert first is not None and second is not None and second > first
    assert first > (start + margin).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert flow.entry(cid)["agent_disconnected"] is False


def test_wait__lease_lapsed__reads_as_detached_and_the_reconciler_detaches_durably_and_pauses_the_agent(
        flow: Flow) -> None:
    sid, cid = flow.waiting()
    assert flow.wait(cid, timeout=0).json() == {"state": "pending"}
    lapse = bootstrap.deps().settings.waiter_lease_margin.total_seconds() + 30
    not_yet = flow.reconcile_later(5, sid)
    assert not_yet.waiters_detached == 0 and flow.rows(cid)["q1"] == ("pending", False)

    report = flow.reconcile_later(lapse, sid)

    assert report.waiters_detached == 1
    assert flow.rows(cid) == {"q1": ("pending", True), "q2": ("pending", True)}
    session = flow.stored(sid)
    assert [(c["execution_id"], c["prompt_generation"], c["silent"]) for c in flow.cancels(sid)] == [
        (session.execution_id, session.generation, True)]
    assert flow.entry(cid)["state"] == "active_detached"
    assert flow.wait(cid, timeout=0).status_code == 410  # the waiter is gone for good
    resp = flow.respond(cid, ANSWER)
    assert resp.status_code == 200 and resp.json()["delivery"] == "resumed", resp.text


# ====================================================================== the watchdog over HTTP
def _live_answered(flow: Flow) -> tuple[str, str]:
    sid, cid = flow.waiting()
    responder = in_thread(lambda: flow.respond(cid, ANSWER))
    claim = flow.take_claim(cid)
    assert flow.confirm(cid, claim["delivery_id"]).status_code == 200
    assert responder.result(timeout=30).json()["delivery"] == "live"
    return sid, cid


def _watchdog_late(flow: Flow) -> float:
    s = bootstrap.deps().settings
    return (s.watchdog_timeout + s.owner_window).total_seconds() + 5


def test_confirm__arms_the_watchdog_with_the_clarification_turn_execution_and_generation(flow: Flow) -> None:
    sid, cid = flow.waiting()
    before = flow.stored(sid)
    responder = in_thread(lambda: flow.respond(cid, ANSWER))
    claim = flow.take_claim(cid)
    assert flow.stored(sid).watchdog is None  # not before the confirmation
    flow.confirm(cid, claim["delivery_id"])
    responder.result(timeout=30)

    armed = flow.stored(sid).watchdog
    assert armed is not None and before.current_turn is not None
    assert (armed.clarification_id, armed.turn_id, armed.execution_id, armed.prompt_generation) == (
        cid, before.current_turn.id, before.execution_id, before.generation)


def test_watchdog__agent_silent__fires_once_silent_cancel_then_the_answer_in_the_same_turn(flow: Flow) -> None:
    sid, _ = _live_answered(flow)
    armed = flow.stored(sid).watchdog
    assert armed is not None
    assert flow.reconcile_later(1, sid).watchdogs_fired == 0  # not due yet

    report = flow.reconcile_later(_watchdog_late(flow), sid)

    assert report.watchdogs_fired == 1
    assert [(c["prompt_generation"], c["silent"]) for c in flow.cancels(sid)] == [(armed.prompt_generation, True)]
    handed = flow.prompts(sid)[1:]
    assert [(p["turn_id"], p["text"]) for p in handed] == [(armed.turn_id, armed.text)]
    assert flow.reconcile_later(2 * _watchdog_late(flow), sid).watchdogs_fired == 0
    assert len(flow.prompts(sid)) == 2  # never a second delivery into the same turn


def test_watchdog__cancel_ack_keeps_it_armed_but_a_tool_frame_disarms_it(flow: Flow) -> None:
    sid, _ = _live_answered(flow)
    armed = flow.stored(sid).watchdog
    assert armed is not None

    flow.frame(sid, "cancel_ack", execution_id=armed.execution_id, prompt_generation=armed.prompt_generation)
    assert flow.stored(sid).watchdog == armed
    flow.frame(sid, "tool", content="running the migration")
    assert flow.stored(sid).watchdog is None

    assert flow.reconcile_later(_watchdog_late(flow), sid).watchdogs_fired == 0
    assert len(flow.prompts(sid)) == 1 and flow.cancels(sid) == []


def test_watchdog__clarification_turn_superseded__no_cancel_and_no_prompt(flow: Flow) -> None:
    """WD1: the stale answer is never prompted into the successor turn, nor is the successor cancelled."""
    sid, _ = _live_answered(flow)
    newer = flow.newer_turn(sid)
    prompts = len(flow.prompts(sid))

    report = flow.reconcile_later(_watchdog_late(flow), sid)

    assert report.watchdogs_fired == 0
    assert len(flow.prompts(sid)) == prompts and flow.cancels(sid) == []
    session = flow.stored(sid)
    assert session.watchdog is None and session.current_turn is not None and session.current_turn.id == newer


@pytest.mark.parametrize("where", ["detached", "live"])
def test_respond__20_concurrent_retries_with_one_idempotency_key__all_get_the_original_result(
        flow: Flow, where: str) -> None:
    """Was 7 × 200 and 13 × 409: a retry racing the in-flight claim waits for it and gets its result."""
    sid, cid = flow.detached() if where == "detached" else flow.waiting()
    confirmer = None
    if where == "live":  # the agent's waiter takes the claim and confirms it
        confirmer = threading.Thread(target=lambda: flow.confirm(cid, flow.take_claim(cid)["delivery_id"]),
                                     daemon=True)
        confirmer.start()
    gate = threading.Barrier(20)

    def retry(_: int) -> requests.Response:
        gate.wait(timeout=30)
        return flow.respond(cid, ANSWER, key="same-key")
    with ThreadPoolExecutor(max_workers=20) as pool:
        told = list(pool.map(retry, range(20), timeout=120))
    if confirmer is not None:
        confirmer.join(60)

    assert {r.status_code for r in told} == {200}, sorted({(r.status_code, r.text[:160]) for r in told})
    expected = {"clarification_id": cid, "status": "answered",
                "delivery": "resumed" if where == "detached" else "live"}
    assert all(r.json() == expected for r in told), {r.text for r in told}
    if where == "detached":
        assert len([p for p in flow.prompts(sid) if "Which database?" in p["text"]]) == 1
