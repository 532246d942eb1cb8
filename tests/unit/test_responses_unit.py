"""Answering a clarification at the service layer over the in-memory store.

The agent runtime is a scripted fake, the clock is fixed and moves only when a test (or an injected
`sleep`) moves it, and everything the responder does while it "waits" runs from that injected sleep, so
each interleaving below is exact. Scenario tags (C1, C5, L2, R3 ...) name failure scenarios from the requirements.
"""
from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from chalicelib.agentctl.client import PromptRequest
from chalicelib.domain import clarify
from chalicelib.domain.errors import (
    ClarificationActive,
    ClarificationInactive,
    Contended,
    DispatchAmbiguous,
    DispatchFailed,
    IdempotencyMismatch,
    StoreUnavailable,
    ValidationError,
)
from chalicelib.domain.model import Dispatch, Session
from chalicelib.domain.public import clarification_view
from chalicelib.domain.rules import bundle_is_active
from chalicelib.functions.reconciler import reconcile
from chalicelib.services import clarifications, responses, sessions
from chalicelib.services.deps import iso
from tests.support.fakes import START
from tests.support.world import ANSWER, OTHER_DEVICE_USER, SKIP, USER, HookedStore, World, agent_of

OTHER_ANSWER = {"answers": [{"question_id": "q1", "selected_options": ["my"]},
                            {"question_id": "q2", "selected_options": ["none"]}]}


@pytest.fixture
def w() -> World:
    return World(HookedStore())


def _answer_prompts(w: World) -> list[PromptRequest]:
    return [p for p in w.agent.prompts if "Which database?" in p.text]


# ====================================================================== validation comes first
BAD_BODIES: list[tuple[str, Any, str]] = [
    ("not an object", None, "body"),
    ("no answers", {}, "answers"),
    ("empty answers", {"answers": []}, "answers"),
    ("a pending row unanswered", {"answers": ANSWER["answers"][:1]}, "answers"),
    ("a row answered twice", {"answers": [*ANSWER["answers"], ANSWER["answers"][0]]}, "answers[2].question_id"),
    ("unknown question", {"answers": [{"question_id": "q9", "selected_options": ["pg"]}]}, "answers[0].question_id"),
    ("unknown option", {"answers": [{"question_id": "q1", "selected_options": ["oracle"]},
                                    ANSWER["answers"][1]]}, "answers[0].selected_options"),
    ("option of the other question", {"answers": [{"question_id": "q1", "selected_options": ["redis"]},
                                                  ANSWER["answers"][1]]}, "answers[0].selected_options"),
    ("options not a list", {"answers": [{"question_id": "q1", "selected_options": "pg"},
                                        ANSWER["answers"][1]]}, "answers[0].selected_options"),
    ("neither option nor text", {"answers": [{"question_id": "q1", "selected_options": []},
                                             ANSWER["answers"][1]]}, "answers[0]"),
    ("text over the cap once the trailing space counts", {"answers": [
        ANSWER["answers"][0], {"question_id": "q2", "custom_text": "x" * 2000 + " "}]}, "answers[1].custom_text"),
    ("text not a string", {"answers": [ANSWER["answers"][0], {"question_id": "q2", "custom_text": 7}]},
     "answers[1].custom_text"),
    ("rejection carrying answers", {"rejected": True, **ANSWER}, "answers"),
    ("rejected not a boolean", {"rejected": "yes"}, "rejected"),
    ("reject reason over the cap", {"rejected": True, "reject_reason": "r" * 2001}, "reject_reason"),
]


@pytest.mark.parametrize(("body", "field"), [b[1:] for b in BAD_BODIES], ids=[b[0] for b in BAD_BODIES])
def test_respond__invalid_body__validation_error_naming_the_field_and_nothing_written(
        w: World, body: Any, field: str) -> None:
    _, cid = w.waiting()
    writes, prompts = w.store.writes, len(w.agent.prompts)

    with pytest.raises(ValidationError) as err:
        w.respond(cid, body)

    assert err.value.field == field
    assert w.store.writes == writes and len(w.agent.prompts) == prompts and w.sleeper.calls == 0
    assert w.bundle(cid).delivery is None


def test_respond__bad_idempotency_key__validation_error_and_nothing_written(w: World) -> None:
    _, cid = w.waiting()
    writes = w.store.writes
    with pytest.raises(ValidationError) as err:
        w.respond(cid, ANSWER, key="has spaces")
    assert err.value.field == "Idempotency-Key" and w.store.writes == writes


def test_respond__malformed_answer_to_an_answered_bundle__validation_error_not_the_winner(w: World) -> None:
    """C6: validation runs before the loser branch, so a malformed request never reads as accepted."""
    _, cid = w.detached()
    w.respond(cid, ANSWER)
    writes = w.store.writes

    with pytest.raises(ValidationError) as err:
        w.respond(cid, {"answers": [{"question_id": "q1", "selected_options": ["oracle"]}]})

    assert err.value.field == "answers[0].selected_options" and w.store.writes == writes


def test_respond__text_exactly_at_the_cap__accepted_and_stored_trimmed(w: World) -> None:
    _, cid = w.detached()
    text = "  " + "y" * 1996 + "  "
    w.respond(cid, {"answers": [ANSWER["answers"][0], {"question_id": "q2", "custom_text": text}]})
    assert w.rows(cid)["q2"][2] == {"question_id": "q2", "selected_options": [], "custom_text": "y" * 1996}


def test_respond__answers_and_options_in_another_order__claim_stores_the_normalised_form(w: World) -> None:
    _, cid = w.detached()
    w.respond(cid, {"answers": [{"question_id": "q2", "selected_options": ["none", "redis", "none"]},
                                {"question_id": "q1", "selected_options": ["my", "pg"]}]})
    bundle = w.bundle(cid)
    assert [r.response for r in bundle.rows] == [
        {"question_id": "q1", "selected_options": ["pg", "my"], "custom_text": ""},
        {"question_id": "q2", "selected_options": ["redis", "none"], "custom_text": ""}]
    assert bundle.delivery is not None and bundle.delivery.row_ids == ("q1", "q2")


# ====================================================================== live delivery
def test_respond__live_waiter_confirms__one_claim_write_then_live_with_watchdog_armed(w: World) -> None:
    sid, cid = w.waiting()
    before = w.get(sid)
    w.sleeper.at(1, w.agent_confirms(cid))

    result = w.respond(cid, ANSWER)

    assert result.as_dict() == {"clarification_id": cid, "status": "answered", "delivery": "live"}
    assert w.received[0]["state"] == "answered" and w.received[0]["response"]["answers"] == [
        {"question_id": "q1", "selected_options": ["pg"], "custom_text": ""},
        {"question_id": "q2", "selected_options": ["redis"], "custom_text": "v7"}]
    bundle = w.bundle(cid)
    assert [r.status for r in bundle.rows] == ["answered", "answered"]
    assert bundle.delivery is not None and bundle.delivery.mode == "live"
    assert bundle.delivery.result == "live" and not bundle.delivery.pending
    after = w.get(sid)
    assert after.current_turn == before.current_turn and w.agent.prompts[1:] == []  # no prompt: it was live
    assert after.watchdog is not None and after.watchdog.turn_id == before.current_turn.id  # type: ignore[union-attr]


def test_respond__claim__rows_outcome_and_delivery_intent_in_one_write(w: World) -> None:
    sid, cid = w.waiting()
    versions: list[Session] = []
    w.sleeper.at(1, lambda: versions.append(w.get(sid)))
    w.sleeper.at(2, w.agent_confirms(cid))
    version = w.get(sid).version

    w.respond(cid, ANSWER)

    claimed = versions[0]
    assert claimed.version == version + 1  # the claim is exactly one write
    bundle = claimed.bundle(cid)
    assert bundle is not None and [r.status for r in bundle.rows] == ["answered", "answered"]
    assert bundle.delivery is not None and bundle.delivery.pending and bundle.delivery.row_ids == ("q1", "q2")


def test_wait__claim_unconfirmed__answer_with_delivery_id_and_nothing_confirmed_yet(w: World) -> None:
    _, cid = w.waiting()
    seen: list[tuple[int, dict[str, Any]]] = []
    w.sleeper.at(1, lambda: seen.append(w.wait(cid)))
    w.sleeper.at(2, w.agent_confirms(cid))

    w.respond(cid, ANSWER)

    status, body = seen[0]
    assert status == 200 and body["state"] == "answered" and body["delivery_id"]
    assert body["delivery_id"] == w.bundle(cid).delivery.delivery_id  # type: ignore[union-attr]


def test_wait__nothing_answered__pending_after_its_timeout(w: World) -> None:
    _, cid = w.waiting()
    assert w.wait(cid, timeout=1) == (200, {"state": "pending"})
    assert w.sleeper.slept == pytest.approx(1.0)  # bounded by the timeout in time, not in polls


def test_wait__each_poll__renews_the_waiter_lease(w: World) -> None:
    _, cid = w.waiting()
    margin = w.deps.settings.waiter_lease_margin.total_seconds()

    w.wait(cid, timeout=3)
    first = w.bundle(cid).waiter_until
    w.wait(cid, timeout=5)
    second = w.bundle(cid).waiter_until

    assert first == iso(START + timedelta(seconds=3 + margin))
    assert second == iso(START + timedelta(seconds=3 + 5 + margin))  # the second poll starts at +3 s


def test_wait__question_superseded__inactive_410(w: World) -> None:
    sid, cid = w.waiting()
    w.report(sid, "turn_completed")
    w.send(sid, "newer work", "m1")
    assert w.wait(cid) == (410, {"state": "inactive", "reason": "superseded"})


def test_respond__no_confirmation_within_confirm_wait__same_claim_resumes_the_agent_once(w: World) -> None:
    """The waiter is gone (nobody confirmed in time): the same request continues as a detached answer."""
    sid, cid = w.waiting()
    delivery_turn = w.get(sid).current_turn

    result = w.respond(cid, ANSWER)

    assert result.delivery == "resumed"
    assert w.sleeper.slept == pytest.approx(w.deps.settings.confirm_wait)  # a bounded wait, then on
    rows = w.rows(cid)
    assert [(s, d) for s, d, _ in rows.values()] == [("answered", True), ("answered", True)]
    resumed = _answer_prompts(w)
    assert len(resumed) == 1 and "Postgres" in resumed[0].text
    after = w.get(sid)
    assert after.reservation is None and after.current_turn is not None and delivery_turn is not None
    assert after.current_turn.seq == delivery_turn.seq + 1 and resumed[0].turn_id == after.current_turn.id
    d = w.bundle(cid).delivery
    assert d is not None and (d.mode, d.result) == ("detached", "resumed")


def test_respond__skip_with_nobody_confirming__recorded_terminal_without_resuming(w: World) -> None:
    sid, cid = w.waiting()
    turn = w.get(sid).current_turn

    result = w.respond(cid, SKIP)

    assert result.as_dict() == {"clarification_id": cid, "status": "rejected", "delivery": "recorded"}
    assert [s for s, _, _ in w.rows(cid).values()] == ["rejected", "rejected"]
    assert w.get(sid).current_turn == turn and _answer_prompts(w) == [] and w.agent.prompts[1:] == []


def test_confirm__after_the_responder_fell_through__delivery_lost_conflict(w: World) -> None:
    """L2: the fall-through won, so the late confirmation cannot land as well; the answer reaches the agent
    once, by the resume prompt."""
    _, cid = w.waiting()
    taken: list[dict[str, Any]] = []
    w.sleeper.at(1, lambda: taken.append(w.wait(cid)[1]))
    assert w.respond(cid, ANSWER).delivery == "resumed"
    writes = w.store.writes

    with pytest.raises(ClarificationInactive) as err:
        w.confirm(cid, taken[0]["delivery_id"])

    assert err.value.details["reason"] == "delivery_lost" and w.store.writes == writes
    assert len(_answer_prompts(w)) == 1


def test_respond__confirmation_lands_as_the_wait_runs_out__live_and_no_fall_through(w: World) -> None:
    """L2: the confirmation won the race with the fall-through, so only the confirmation lands."""
    sid, cid = w.waiting()
    w.store.before["fall_through"] = w.agent_confirms(cid)

    result = w.respond(cid, ANSWER)

    assert result.delivery == "live"
    assert [s for s, _, _ in w.rows(cid).values()] == ["answered", "answered"]
    bundle = w.bundle(cid)
    assert bundle.delivery is not None and bundle.delivery.result == "live"
    assert w.get(sid).watchdog is not None and w.get(sid).reservation is None and _answer_prompts(w) == []


def test_respond__skip_confirmation_races_the_recording__one_winner(w: World) -> None:
    sid, cid = w.waiting()
    w.store.before["confirm_delivery"] = w.agent_confirms(cid)  # the waiter confirms first

    result = w.respond(cid, SKIP)

    assert result.delivery == "live" and w.received[0]["state"] == "rejected"
    assert w.bundle(cid).delivery.result == "live"  # type: ignore[union-attr]


def test_respond__partially_terminal_bundle__answers_only_the_pending_row_and_keeps_the_sibling(
        w: World) -> None:
    """C5: an earlier partial write answered q1; the claim covers q2 only, and only q2 is resumed."""
    _, cid = w.waiting()
    old = {"question_id": "q1", "selected_options": ["my"], "custom_text": "earlier"}
    w.set_row(cid, "q1", status="answered", response=old)

    with pytest.raises(ValidationError) as err:
        w.respond(cid, ANSWER)  # q1 is not pending any more
    assert err.value.field == "answers[0].question_id"

    assert w.respond(cid, {"answers": [ANSWER["answers"][1]]}).delivery == "resumed"  # nobody confirms

    rows = w.rows(cid)
    assert rows["q1"] == ("answered", False, old) and rows["q2"][:2] == ("answered", True)
    assert w.bundle(cid).delivery.row_ids == ("q2",)  # type: ignore[union-attr]
    [resumed] = [p for p in w.agent.prompts if "Which cache?" in p.text]
    assert "Which database?" not in resumed.text


def test_respond__newer_turn_accepted_during_the_live_wait__not_resumed_into_it(w: World) -> None:
    """L4: the fall-through re-checks turn ownership in the write itself; the unhanded claim is retired."""
    sid, cid = w.waiting()

    def newer_turn() -> None:
        w.report(sid, "turn_completed")
        w.send(sid, "newer work", "m-newer")
    w.sleeper.at(1, newer_turn)

    with pytest.raises(ClarificationInactive) as err:
        w.respond(cid, ANSWER)

    assert err.value.details["reason"] == "superseded"
    session = w.get(sid)
    assert session.reservation is None and _answer_prompts(w) == []
    assert session.current_turn is not None and session.current_turn.id != w.bundle(cid).turn_id
    # Retired, not recorded: the question is unanswered history the user can send as a new message.
    b = w.bundle(cid)
    assert b.delivery is None and {r.status for r in b.rows} == {"pending"}
    view = clarification_view(w.get(sid), b, now=w.deps.now())
    assert view["state"] == "superseded" and view["late_answer_allowed"] and not view["answerable"]


# ====================================================================== Skip
def test_respond__skip_live__waiter_receives_the_rejection(w: World) -> None:
    sid, cid = w.waiting()
    w.sleeper.at(1, w.agent_confirms(cid))

    result = w.respond(cid, SKIP)

    assert result.as_dict() == {"clarification_id": cid, "status": "rejected", "delivery": "live"}
    assert w.received[0]["state"] == "rejected"
    assert w.received[0]["response"] == {"status": "rejected", "rejected": True, "reject_reason": "not now",
                                         "answers": []}
    assert [s for s, _, _ in w.rows(cid).values()] == ["rejected", "rejected"]
    assert w.agent.prompts[1:] == []


def test_respond__skip_detached__persisted_rejected_without_resuming(w: World) -> None:
    sid, cid = w.detached()
    before = w.get(sid)

    result = w.respond(cid, SKIP)

    assert result.as_dict() == {"clarification_id": cid, "status": "rejected", "delivery": "recorded"}
    after = w.get(sid)
    assert [s for s, _, _ in w.rows(cid).values()] == ["rejected", "rejected"]
    assert after.current_turn == before.current_turn and after.reservation is None
    assert w.agent.prompts[1:] == [] and w.agent.cancels == [] and w.sleeper.calls == 0


# ====================================================================== detached resume (R1-R4)
def test_respond__detached_answer__reserved_successor_marked_attempted_before_the_agent_call(w: World) -> None:
    sid, cid = w.detached()
    predecessor = w.get(sid).current_turn
    assert predecessor is not None

    result = w.respond(cid, ANSWER)

    assert result.as_dict() == {"clarification_id": cid, "status": "answered", "delivery": "resumed"}
    prompt = _answer_prompts(w)[0]
    after = w.get(sid)
    assert after.current_turn is not None and after.current_turn.seq == predecessor.seq + 1
    assert w.agent.seen[-1] == (Dispatch.ATTEMPTED, after.current_turn.id)  # the marker came first
    assert prompt.turn_id == after.current_turn.id and after.reservation is None
    assert after.bundle(cid).delivery.result == "resumed"  # type: ignore[union-attr]
    assert w.sleeper.calls == 0  # dispatch acknowledgement, not agent-turn completion


def test_respond__agent_rejects_the_resume__restored_and_a_retry_resumes_exactly_once(w: World) -> None:
    """R3: synchronous rejection rolls back; the answer stays retryable."""
    sid, cid = w.detached()
    predecessor = w.get(sid).current_turn
    w.agent.outcomes = ["reject"]

    with pytest.raises(DispatchFailed) as err:
        w.respond(cid, ANSWER)

    assert err.value.retryable
    session = w.get(sid)
    assert session.current_turn == predecessor and session.reservation is None
    assert w.rows(cid) == {"q1": ("pending", True, None), "q2": ("pending", True, None)}

    assert w.respond(cid, ANSWER).delivery == "resumed"
    assert len(_answer_prompts(w)) == 2 and w.agent.outcomes == []  # one rejected, one accepted


def test_respond__attempt_marker_write_fails__agent_never_called_and_answer_retryable(w: World) -> None:
    """R3: no external call without the durable marker."""
    sid, cid = w.detached()
    predecessor = w.get(sid).current_turn
    w.store.fail.add("mark_attempted")

    with pytest.raises(DispatchFailed):
        w.respond(cid, ANSWER)

    assert _answer_prompts(w) == []
    session = w.get(sid)
    assert session.reservation is None and session.current_turn == predecessor
    assert all(s == "pending" for s, _, _ in w.rows(cid).values())
    w.store.fail.clear()
    assert w.respond(cid, ANSWER).delivery == "resumed" and len(_answer_prompts(w)) == 1


def test_respond__resume_ambiguous__not_retryable_and_never_sent_again(w: World) -> None:
    """R4 / U2: after the marker, an unknown outcome keeps the claim terminal."""
    sid, cid = w.detached()
    w.agent.outcomes = ["ambiguous"]

    with pytest.raises(DispatchAmbiguous) as err:
        w.respond(cid, ANSWER)

    assert not err.value.retryable
    assert [s for s, _, _ in w.rows(cid).values()] == ["answered", "answered"]
    with pytest.raises(ClarificationInactive) as again:
        w.respond(cid, ANSWER)
    assert again.value.details["reason"] == "answered" and len(_answer_prompts(w)) == 1


def test_respond__agent_accepted_but_finalising_failed__terminal_and_reconciler_keeps_the_successor(
        w: World) -> None:
    """R4: accepted means the answer is never reopened nor redispatched."""
    sid, cid = w.detached()
    w.store.fail.add("finish_reservation")

    with pytest.raises(DispatchAmbiguous):
        w.respond(cid, ANSWER)
    w.store.fail.clear()
    successor = w.get(sid).current_turn
    w.clock.advance(3600)
    report = reconcile(w.deps, before_traffic=False)

    assert report.reservations_kept == 1 and report.reservations_rolled_back == 0
    session = w.get(sid)
    assert successor is not None and session.reservation is None
    assert session.current_turn is not None and session.current_turn.id == successor.id  # never rolled back
    assert [s for s, _, _ in w.rows(cid).values()] == ["answered", "answered"]
    assert len(_answer_prompts(w)) == 1


# ====================================================================== inactive bundles (C1, C3)
def _unchanged(w: World, sid: str, action: Callable[[], Any]) -> ClarificationInactive:
    version, prompts = w.get(sid).version, len(w.agent.prompts)
    with pytest.raises(ClarificationInactive) as err:
        action()
    assert w.get(sid).version == version and len(w.agent.prompts) == prompts and w.agent.cancels == []
    return err.value


@pytest.mark.parametrize("body", [ANSWER, SKIP], ids=["answer", "skip"])
def test_respond__superseded_bundle__conflict_and_no_write_no_resume(w: World, body: dict[str, Any]) -> None:
    """C1: a stale tab answering after a newer turn was accepted."""
    sid, cid = w.detached()
    w.report(sid, "turn_completed")
    w.send(sid, "newer work", "m1")

    error = _unchanged(w, sid, lambda: w.respond(cid, body))

    assert error.details == {"reason": "superseded", "late_answer_allowed": True}


def test_respond__session_cancelled__conflict_expired(w: World) -> None:
    sid, cid = w.waiting()
    sessions.cancel_session(w.deps, USER, sid)
    w.agent.cancels.clear()
    assert _unchanged(w, sid, lambda: w.respond(cid, ANSWER)).details == {"reason": "expired",
                                                                           "late_answer_allowed": True}


def test_respond__agent_withdrew_the_question__conflict_cancelled(w: World) -> None:
    sid, cid = w.waiting()
    clarifications.cancel(w.deps, agent_of(sid), cid)
    assert _unchanged(w, sid, lambda: w.respond(cid, ANSWER)).details == {"reason": "cancelled",
                                                                           "late_answer_allowed": True}


def test_respond__agent_withdrew_then_the_session_ended__conflict_session_terminal(w: World) -> None:
    sid, cid = w.waiting()
    clarifications.cancel(w.deps, agent_of(sid), cid)
    sessions.cancel_session(w.deps, USER, sid)
    w.agent.cancels.clear()
    assert _unchanged(w, sid, lambda: w.respond(cid, ANSWER)).details == {"reason": "session_terminal",
                                                                           "late_answer_allowed": True}


def test_respond__already_answered__conflict_with_the_winners_answers(w: World) -> None:
    sid, cid = w.detached()
    w.respond(cid, ANSWER)

    error = _unchanged(w, sid, lambda: w.respond(cid, OTHER_ANSWER, caller=OTHER_DEVICE_USER))

    assert error.details["reason"] == "answered"
    assert error.details["response"] == {"status": "answered", "rejected": False, "answers": [
        {"question_id": "q1", "selected_options": ["pg"], "custom_text": ""},
        {"question_id": "q2", "selected_options": ["redis"], "custom_text": "v7"}]}


def test_respond__already_rejected__conflict_with_the_rejection(w: World) -> None:
    sid, cid = w.detached()
    w.respond(cid, SKIP)

    error = _unchanged(w, sid, lambda: w.respond(cid, ANSWER, caller=OTHER_DEVICE_USER))

    assert error.details == {"reason": "rejected", "late_answer_allowed": False, "response": {
        "status": "rejected", "rejected": True, "reject_reason": "not now", "answers": []}}


def test_respond__live_skip_awaiting_confirmation__loser_told_rejected_not_answered(w: World) -> None:
    """The loser facing an unconfirmed claim learns the claim's real outcome (a rejection here)."""
    sid, cid = w.waiting()
    losers: list[ClarificationInactive] = []

    def second_device() -> None:
        with pytest.raises(ClarificationInactive) as err:
            w.respond(cid, ANSWER, caller=OTHER_DEVICE_USER)
        losers.append(err.value)
    w.sleeper.at(1, second_device)
    w.sleeper.at(2, w.agent_confirms(cid))

    assert w.respond(cid, SKIP).status == "rejected"

    assert losers[0].details["response"]["status"] == "rejected"
    assert losers[0].details["reason"] == "rejected"


# ====================================================================== idempotency
def test_respond__same_key_same_body__original_result_without_a_second_write_or_resume(w: World) -> None:
    sid, cid = w.detached()
    first = w.respond(cid, ANSWER, key="k-1")
    writes = w.store.writes

    again = w.respond(cid, ANSWER, key="k-1")

    assert again == first and again.delivery == "resumed"
    assert w.store.writes == writes and len(_answer_prompts(w)) == 1


def test_respond__same_key_reordered_answers__same_response(w: World) -> None:
    _, cid = w.detached()
    first = w.respond(cid, ANSWER, key="k-1")
    assert w.respond(cid, {"answers": list(reversed(ANSWER["answers"]))}, key="k-1") == first


def test_respond__same_key_live_result__replayed_as_live(w: World) -> None:
    _, cid = w.waiting()
    w.sleeper.at(1, w.agent_confirms(cid))
    first = w.respond(cid, ANSWER, key="k-live")
    assert w.respond(cid, ANSWER, key="k-live") == first and first.delivery == "live"


@pytest.mark.parametrize("other", [OTHER_ANSWER, SKIP], ids=["other-answer", "skip"])
def test_respond__same_key_different_body__idempotency_mismatch_and_nothing_written(
        w: World, other: dict[str, Any]) -> None:
    _, cid = w.detached()
    w.respond(cid, ANSWER, key="k-1")
    writes = w.store.writes

    with pytest.raises(IdempotencyMismatch):
        w.respond(cid, other, key="k-1")

    assert w.store.writes == writes


def test_respond__other_key_after_answer__conflict_not_replay(w: World) -> None:
    _, cid = w.detached()
    w.respond(cid, ANSWER, key="k-1")
    with pytest.raises(ClarificationInactive) as err:
        w.respond(cid, ANSWER, key="k-2")
    assert err.value.details["reason"] == "answered"


# ====================================================================== waiter lease and the reconciler
def test_respond__waiter_lease_lapsed__detached_path_without_waiting(w: World) -> None:
    sid, cid = w.waiting()
    w.wait(cid, timeout=1)  # lease until +1 s + margin
    w.clock.advance(1 + w.deps.settings.waiter_lease_margin.total_seconds() + 1)
    sleeps = w.sleeper.calls

    result = w.respond(cid, ANSWER)

    assert result.delivery == "resumed" and w.sleeper.calls == sleeps and len(_answer_prompts(w)) == 1


def test_respond__waiter_lease_current__live_path(w: World) -> None:
    _, cid = w.waiting()
    w.wait(cid, timeout=20)
    w.clock.advance(5)
    w.sleeper.at(w.sleeper.calls + 1, w.agent_confirms(cid))
    assert w.respond(cid, ANSWER).delivery == "live" and _answer_prompts(w) == []


def test_reconcile__scheduled_after_the_lease_lapsed__detached_durably_and_agent_silently_paused(
        w: World) -> None:
    sid, cid = w.waiting()
    w.wait(cid, timeout=1)
    w.clock.advance(60)

    report = reconcile(w.deps, before_traffic=False)

    assert report.waiters_detached == 1
    assert w.rows(cid) == {"q1": ("pending", True, None), "q2": ("pending", True, None)}
    session = w.get(sid)
    assert [(c.execution_id, c.prompt_generation, c.silent) for c in w.agent.cancels] == [
        (session.execution_id, session.generation, True)]
    assert reconcile(w.deps, before_traffic=False).waiters_detached == 0  # durable: nothing left to do


def test_reconcile__scheduled_while_the_lease_holds__nothing_detached(w: World) -> None:
    _, cid = w.waiting()
    w.wait(cid, timeout=20)
    w.clock.advance(5)
    assert reconcile(w.deps, before_traffic=False).waiters_detached == 0
    assert w.rows(cid)["q1"] == ("pending", False, None) and w.agent.cancels == []


def test_reconcile_before_traffic__live_claim_within_its_owner_deadline__left_to_its_owner(w: World) -> None:
    """A deploy's reconciler runs while traffic flows: a live answer waiting for the agent's confirmation is
    not taken back; the agent confirms and the user is told `live`."""
    sid, cid = w.waiting()
    seen: dict[str, Any] = {}

    def deploy_then_agent_confirms() -> None:
        seen["report"] = reconcile(w.deps, before_traffic=True)
        w.agent_confirms(cid)()
    w.sleeper.at(1, deploy_then_agent_confirms)

    result = w.respond(cid, ANSWER)

    assert (result.status, result.delivery) == ("answered", "live")
    assert seen["report"].intents_restored == 0 and len(w.received) == 1
    assert w.bundle(cid).delivery is not None and not w.bundle(cid).delivery.pending  # type: ignore[union-attr]


def test_respond__claim_handed_back_under_a_responder_past_its_deadline__conflict_never_404(w: World) -> None:
    """The claim was restored (its owner deadline passed) while this responder still waited: the question
    exists and is answerable again, so the reply is a retryable 409 conflict, never 404; a retry answers."""
    sid, cid = w.waiting()

    def deadline_passes_and_the_scheduled_reconciler_restores() -> None:
        w.clock.advance(w.deps.settings.owner_window.total_seconds() + 1)
        assert reconcile(w.deps, before_traffic=False).intents_restored == 1
    w.sleeper.at(1, deadline_passes_and_the_scheduled_reconciler_restores)

    with pytest.raises(Contended) as refused:
        w.respond(cid, ANSWER, key="k1")

    assert refused.value.retryable and refused.value.code == "conflict"
    assert all(status == "pending" for status, _, _ in w.rows(cid).values())
    assert w.respond(cid, ANSWER, key="k1").status == "answered"  # (its waiter's lease lapsed: resumed)


def test_reconcile__unconfirmed_current_claim_past_its_deadline__restored_to_pending(w: World) -> None:
    """L1: a claim nobody confirmed (the responder died) goes back to pending, to be answered again."""
    sid, cid = w.waiting()

    def responder_dies() -> None:
        raise SystemExit("the responder's invocation died")
    w.sleeper.at(1, responder_dies)
    with pytest.raises(SystemExit):
        w.respond(cid, ANSWER)
    assert w.bundle(cid).delivery is not None
    w.clock.advance(w.deps.settings.owner_window.total_seconds() + 1)

    report = reconcile(w.deps, before_traffic=False)

    assert report.intents_restored == 1
    assert all(s == "pending" for s, _, _ in w.rows(cid).values()) and w.bundle(cid).delivery is None


def test_reconcile__unconfirmed_claim_of_a_superseded_turn__claim_retired_history_inactive(w: World) -> None:
    sid, cid = w.waiting()

    def responder_dies_after_a_newer_turn() -> None:
        w.report(sid, "turn_completed")
        w.send(sid, "newer work", "m-newer")
        raise SystemExit("the responder's invocation died")
    w.sleeper.at(1, responder_dies_after_a_newer_turn)
    with pytest.raises(SystemExit):
        w.respond(cid, ANSWER)
    w.clock.advance(w.deps.settings.owner_window.total_seconds() + 1)

    report = reconcile(w.deps, before_traffic=False)

    assert (report.intents_restored, report.intents_retired) == (0, 1)
    # History is not reactivated (the bundle stays superseded) and the answer is not shown as delivered.
    assert [s for s, _, _ in w.rows(cid).values()] == ["pending", "pending"]
    b = w.bundle(cid)
    assert b.delivery is None and not bundle_is_active(w.get(sid), b)
    assert clarification_view(w.get(sid), b, now=w.deps.now())["late_answer_allowed"]


# ====================================================================== dismiss
def test_dismiss__active_bundle__conflict_and_nothing_written(w: World) -> None:
    sid, cid = w.waiting()
    writes = w.store.writes
    with pytest.raises(ClarificationActive):
        responses.dismiss(w.deps, USER, cid)
    assert w.store.writes == writes and w.bundle(cid).dismissed_by == ()


def test_dismiss__superseded_bundle__hidden_for_this_user_only_and_nothing_sent(w: World) -> None:
    sid, cid = w.detached()
    w.report(sid, "turn_completed")
    w.send(sid, "newer work", "m1")
    prompts, rows = len(w.agent.prompts), w.rows(cid)

    assert responses.dismiss(w.deps, USER, cid) == {"clarification_id": cid, "dismissed": True}
    responses.dismiss(w.deps, USER, cid)  # every device, any number of times

    assert w.bundle(cid).dismissed_by == (clarify.dismissal_key("user-1"),)
    assert w.rows(cid) == rows and len(w.agent.prompts) == prompts and w.agent.cancels == []


def test_respond__restore_then_summary_refresh_fails__rows_still_published_and_error_reported(w: World) -> None:
    """Restored rows are published after the commit even when the task-summary acknowledgement fails."""
    sid, cid = w.waiting()

    def summary_down(*args: Any, **kwargs: Any) -> Any:
        raise StoreUnavailable("summary table unavailable")
    w.store.set_task_summary = summary_down  # type: ignore[method-assign]
    w.agent.script("reject")  # nobody confirms; the resume it falls through to is refused: restored, detached

    with pytest.raises(DispatchFailed) as failed:
        w.respond(cid, ANSWER)

    assert failed.value.retryable and failed.value.details["restored"] is True
    assert "summary table unavailable" in failed.value.details["summary_error"]
    assert w.rows(cid) == {"q1": ("pending", True, None), "q2": ("pending", True, None)}
    published = [e for _, _, e in w.store.list_events("ws-1", low_sk="", after_sk="", written_after="",
                                                       limit=500) if e.type == "message.updated"]
    assert published and published[-1].payload["clarification_id"] == cid
    assert published[-1].payload["state"] == "active_detached"
