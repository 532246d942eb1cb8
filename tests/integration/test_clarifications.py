"""The active clarification lifecycle over real HTTP against the serialised emulator.

One stack serves the module; every test works in a workspace of its own. The user side uses a user token
for that workspace; the agent side is driven by hand with the session's agent token (the simulated agent
only receives prompts tagged `[hang]`, which keep the turn open without any frames). Stream functions run
only when a test drains the pump, so every event count below is exact.

Expectations come from the requirements and the HTTP contract; scenario tags (O1, D2, E1, G2, P1 ...)
name failure scenarios from the requirements.
"""
from __future__ import annotations

import dataclasses
import itertools
import uuid
from typing import Any

import pytest

from chalicelib import bootstrap
from chalicelib.domain import clarify
from chalicelib.domain.errors import StoreUnavailable
from chalicelib.domain.model import Session
from chalicelib.services import clarifications
from scripts.local.sim_agent import SimAgent
from scripts.local.stack import LocalStack
from tests.support.flow import ONE_QUESTION, QUESTIONS, Flow

_message_ids = itertools.count(1)


def _question(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"prompt": "Pick one", "options": [{"label": "A"}, {"label": "B"}]}
    base.update(overrides)
    return base


@pytest.fixture
def flow(shared: tuple[LocalStack, SimAgent]) -> Flow:
    """A fresh workspace per test: task lists and the event feed hold only this test's objects."""
    return Flow(shared[0], shared[1], f"ws-{uuid.uuid4().hex[:12]}", questions=ONE_QUESTION)


@pytest.fixture
def agent_runtime(shared: tuple[LocalStack, SimAgent]) -> SimAgent:
    return shared[1]


@pytest.fixture
def waiting(flow: Flow) -> tuple[str, str, str]:
    """(task, session, bundle): one question pending, live, in the session's open first turn (the agent's
    ask opened it; tests that need a user prompt first create their session with one)."""
    task = flow.task()
    session = flow.session(task, prompt=None)
    return task, session, flow.ask(session)


@pytest.fixture(scope="module")
def idle_session(shared: tuple[LocalStack, SimAgent]) -> tuple[Flow, str]:
    """A session nobody writes to successfully: refused requests are checked against it."""
    flow = Flow(shared[0], shared[1], f"ws-{uuid.uuid4().hex[:12]}", questions=ONE_QUESTION)
    return flow, flow.session(flow.task(), prompt=None)


# ====================================================================== 1. ask
def test_ask__open_turn__bundle_joins_current_turn_and_session_waits(flow: Flow) -> None:
    session = flow.session(flow.task())
    turn = flow.view(session)["current_turn_id"]

    resp = flow.ask_raw(session, {"questions": QUESTIONS, "context": "planning"})

    assert resp.status_code == 201, resp.text
    body = resp.json()
    assert body["turn_id"] == turn and body["question_ids"] == ["q1", "q2"]
    view = flow.view(session)
    assert (view["state"], view["current_turn_id"], view["pending_action"]) == ("WAITING_FOR_INPUT", turn,
                                                                               "clarification")
    entry = flow.entry(body["clarification_id"])
    assert entry is not None
    assert (entry["state"], entry["answerable"], entry["agent_disconnected"], entry["turn_id"]) == (
        "active_live", True, False, turn)
    assert [(q["question_id"], q["status"], [o["option_id"] for o in q["options"]]) for q in entry["questions"]] == [
        ("q1", "pending", ["pg", "my"]), ("q2", "pending", ["redis", "none"])]


def test_ask__ids_absent__unique_ids_generated(flow: Flow) -> None:
    session = flow.session(flow.task())

    cid = flow.ask(session, [_question(prompt="First?"), _question(prompt="Second?", options=[
        {"label": "A"}, {"label": "B"}, {"label": "C"}])])

    entry = flow.entry(cid)
    assert entry is not None
    question_ids = [q["question_id"] for q in entry["questions"]]
    assert len(set(question_ids)) == 2 and all(question_ids)
    for q in entry["questions"]:
        option_ids = [o["option_id"] for o in q["options"]]
        assert len(set(option_ids)) == len(option_ids) and all(option_ids)
    assert [q["prompt"] for q in entry["questions"]] == ["First?", "Second?"]


@pytest.mark.parametrize("questions", [
    [_question(prompt="Mine?", question_id="q2"), _question(prompt="Generated?")],
    [_question(options=[{"label": "Generated"}, {"label": "Mine", "option_id": "q1_opt1"}])],
], ids=["question-ids", "option-ids"])
def test_ask__some_ids_given_some_absent__generated_ids_never_collide(flow: Flow,
                                                                    questions: list[dict[str, Any]]) -> None:
    """Ids are generated only where absent; a generated id must not clash with one the agent chose."""
    session = flow.session(flow.task(), prompt=None)

    resp = flow.ask_raw(session, {"questions": questions})

    assert resp.status_code == 201, resp.text
    entry = flow.entry(resp.json()["clarification_id"])
    assert entry is not None
    ids = [q["question_id"] for q in entry["questions"]]
    assert len(set(ids)) == len(ids) == len(questions)
    for asked, q in zip(questions, entry["questions"], strict=True):
        if "question_id" in asked:
            assert q["question_id"] == asked["question_id"]  # the agent's own ids are kept
        options = [o["option_id"] for o in q["options"]]
        assert len(set(options)) == len(options)
        for asked_option, option in zip(asked["options"], q["options"], strict=True):
            if "option_id" in asked_option:
                assert option["option_id"] == asked_option["option_id"]


def test_ask__no_turn_yet__starts_the_first_turn(flow: Flow) -> None:
    session = flow.session(flow.task(), prompt=None)
    assert flow.view(session)["current_turn_id"] is None

    resp = flow.ask_raw(session, {"questions": ONE_QUESTION})

    assert resp.status_code == 201, resp.text
    view = flow.view(session)
    assert view["current_turn_id"] == resp.json()["turn_id"] and view["state"] == "WAITING_FOR_INPUT"
    turns = flow.user.get(f"/sessions/{session}/turns").json()["turns"]
    assert [(t["id"], t["seq"], t["completed_at"]) for t in turns] == [(resp.json()["turn_id"], 1, None)]
    assert view["pending_action"] == "clarification"


def test_ask__turn_already_completed__starts_a_newer_turn(flow: Flow) -> None:
    session = flow.session(flow.task())
    first = flow.view(session)["current_turn_id"]
    flow.complete_turn(session)

    resp = flow.ask_raw(session, {"questions": ONE_QUESTION})

    assert resp.status_code == 201, resp.text
    assert resp.json()["turn_id"] != first
    flow.drain()  # turn history is copied by the stream function
    assert [t["seq"] for t in flow.user.get(f"/sessions/{session}/turns").json()["turns"]] == [1, 2]
    assert flow.view(session)["current_turn_id"] == resp.json()["turn_id"]


def test_ask__turn_id_is_current__accepted(flow: Flow) -> None:
    session = flow.session(flow.task())
    turn = flow.view(session)["current_turn_id"]

    resp = flow.ask_raw(session, {"questions": ONE_QUESTION, "turn_id": turn})

    assert resp.status_code == 201 and resp.json()["turn_id"] == turn


@pytest.mark.parametrize("turn", ["older", "unknown"])
def test_ask__turn_id_not_current__conflict_and_nothing_written(flow: Flow, turn: str) -> None:
    session = flow.session(flow.task())
    older = flow.view(session)["current_turn_id"]
    flow.newer_turn(session)
    before = flow.stored(session)
    stale = older if turn == "older" else "no-such-turn"

    resp = flow.ask_raw(session, {"questions": ONE_QUESTION, "turn_id": stale})

    assert resp.status_code == 409, resp.text
    assert flow.stored(session) == before


INVALID_ASKS: list[tuple[str, Any, str]] = [
    ("not an object", [ONE_QUESTION], "body"),
    ("no questions", {}, "questions"),
    ("empty questions", {"questions": []}, "questions"),
    ("five questions", {"questions": [_question(question_id=f"q{i}") for i in range(5)]}, "questions"),
    ("question not an object", {"questions": ["which?"]}, "questions[0]"),
    ("prompt missing", {"questions": [{"options": [{"label": "A"}, {"label": "B"}]}]}, "questions[0].prompt"),
    ("prompt blank", {"questions": [_question(prompt="   ")]}, "questions[0].prompt"),
    ("prompt over cap", {"questions": [_question(prompt="x" * 2001)]}, "questions[0].prompt"),
    ("one option", {"questions": [_question(options=[{"label": "A"}])]}, "questions[0].options"),
    ("seven options", {"questions": [_question(options=[{"label": str(i)} for i in range(7)])]},
     "questions[0].options"),
    ("label missing", {"questions": [_question(options=[{"description": "x"}, {"label": "B"}])]},
     "questions[0].options[0].label"),
    ("label over cap", {"questions": [_question(options=[{"label": "y" * 201}, {"label": "B"}])]},
     "questions[0].options[0].label"),
    ("duplicate question ids", {"questions": [_question(question_id="q"), _question(question_id="q")]},
     "questions"),
    ("duplicate option ids", {"questions": [_question(options=[{"option_id": "o", "label": "A"},
                                                               {"option_id": "o", "label": "B"}])]},
     "questions[0].options"),
    ("second question bad", {"questions": [_question(), _question(options=[])]}, "questions[1].options"),
    ("context over cap", {"questions": [_question()], "context": "c" * 4001}, "context"),
    ("turn id malformed", {"questions": [_question()], "turn_id": "not a turn!"}, "turn_id"),
]


@pytest.mark.parametrize("body, field", [(b, f) for _, b, f in INVALID_ASKS], ids=[n for n, _, _ in INVALID_ASKS])
def test_ask__invalid_body__400_naming_the_field_and_nothing_written(idle_session: tuple[Flow, str], body: Any,
                                                                     field: str) -> None:
    flow, session = idle_session
    before = flow.stored(session)

    resp = flow.ask_raw(session, body)

    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["code"] == "validation_error" and error["details"]["field"] == field
    assert flow.stored(session) == before


def test_ask__texts_at_their_caps__accepted(flow: Flow) -> None:
    session = flow.session(flow.task())
    question = _question(prompt="p" * 2000, options=[{"label": "l" * 200, "description": "d" * 1000},
                                                     {"label": "B"}] + [{"label": str(i)} for i in range(4)])

    resp = flow.ask_raw(session, {"questions": [question, *(_question(question_id=f"extra{i}") for i in range(3))],
                                  "context": "c" * 4000})

    assert resp.status_code == 201, resp.text
    entry = flow.entry(resp.json()["clarification_id"])
    assert entry is not None and len(entry["questions"]) == 4
    assert len(entry["questions"][0]["prompt"]) == 2000 and len(entry["questions"][0]["options"]) == 6


def test_ask__terminal_session__unavailable_and_nothing_written(flow: Flow) -> None:
    session = flow.session(flow.task())
    flow.cancel_session(session)
    before = flow.stored(session)

    resp = flow.ask_raw(session, {"questions": ONE_QUESTION})

    assert resp.status_code == 409 and resp.json()["error"]["code"] == "session_unavailable"
    assert flow.stored(session) == before


def test_ask__other_sessions_agent_token__not_found(flow: Flow) -> None:
    task = flow.task()
    mine, other = flow.session(task), flow.session(task)

    resp = flow.agent(other).post(f"/agent/sessions/{mine}/clarifications", {"questions": ONE_QUESTION})

    assert resp.status_code == 404
    assert flow.stored(mine).bundles == ()


def test_transcript__two_turns_with_questions__entries_in_order(flow: Flow) -> None:
    session = flow.session(flow.task(), prompt="[hang] first")
    first = flow.ask(session, QUESTIONS)
    flow.newer_turn(session, "[hang] second")
    second = flow.ask(session)
    flow.drain()

    messages = flow.transcript(session)["messages"]

    assert [(m["type"], m.get("clarification_id") or m["content"]) for m in messages] == [
        ("message", "[hang] first"), ("clarification", first), ("message", "[hang] second"),
        ("clarification", second)]
    assert [m["state"] for m in messages if m["type"] == "clarification"] == ["superseded", "active_live"]
    assert [q["question_id"] for q in messages[1]["questions"]] == ["q1", "q2"]


# ====================================================================== 2-3. derived states and detach
def test_detach__pending_rows__returned_once_and_published_once(flow: Flow,
                                                                waiting: tuple[str, str, str]) -> None:
    _, session, _ = waiting
    cid = flow.ask(session, QUESTIONS)  # a second, two-question bundle in the same turn
    flow.drain()
    version = flow.stored(session).version

    detached = flow.detach(cid)

    assert sorted(detached) == ["q1", "q2"]
    assert flow.stored(session).version == version + 1
    entry = flow.entry(cid)
    assert entry is not None
    assert (entry["state"], entry["answerable"], entry["agent_disconnected"]) == ("active_detached", True, True)
    flow.drain()
    updates = flow.updates(cid)
    assert len(updates) == 1
    assert sorted(updates[0].payload["changed_question_ids"]) == ["q1", "q2"]
    assert updates[0].payload["state"] == "active_detached"


def test_detach__repeated__writes_nothing_and_publishes_nothing_more(flow: Flow,
                                                                     waiting: tuple[str, str, str]) -> None:
    _, session, cid = waiting
    assert flow.detach(cid) == ["q1"]
    flow.drain()
    before, events = flow.stored(session), flow.events(session=session)

    assert flow.detach(cid) == []
    assert flow.detach(cid) == []

    flow.drain()
    assert flow.stored(session) == before
    assert flow.events(session=session) == events and len(flow.updates(cid)) == 1


def test_detach__one_of_two_bundles__only_that_bundle_changes(flow: Flow, waiting: tuple[str, str, str]) -> None:
    _, session, first = waiting
    second = flow.ask(session, QUESTIONS)
    flow.drain()

    assert flow.detach(first) == ["q1"]

    assert flow.rows(second) == {"q1": ("pending", False), "q2": ("pending", False)}
    flow.drain()
    assert len(flow.updates(first)) == 1 and flow.updates(second) == []


def test_turn_completion__live_bundle__detached_in_the_same_write_and_stays_answerable(
        flow: Flow, waiting: tuple[str, str, str]) -> None:
    task, session, cid = waiting
    flow.drain()
    version = flow.stored(session).version

    result = flow.complete_turn(session)

    assert result["applied"] == 1
    stored = flow.stored(session)
    assert stored.version == version + 1
    assert stored.current_turn is not None and stored.current_turn.completed_at is not None
    assert flow.rows(cid) == {"q1": ("pending", True)}
    view = flow.view(session)
    assert (view["state"], view["pending_action"]) == ("WAITING_FOR_INPUT", "clarification")
    entry = flow.entry(cid)
    assert entry is not None and (entry["state"], entry["answerable"]) == ("active_detached", True)
    assert flow.transition(task).status_code == 409  # G1(b): detached is still a hard barrier
    flow.drain()
    assert len(flow.updates(cid)) == 1


def test_turn_completion__repeated__no_write_and_no_duplicate_event(flow: Flow,
                                                                    waiting: tuple[str, str, str]) -> None:
    _, session, cid = waiting
    turn = flow.view(session)["current_turn_id"]
    completion = {"type": "turn_completed", "execution_id": "x", "turn_id": turn}
    flow.frames(session, completion)
    flow.drain()
    before, events = flow.stored(session), flow.events(session=session)

    again = flow.frames(session, completion, {"type": "ready", "execution_id": "x"})

    assert again["applied"] == 0
    assert flow.detach(cid) == []
    flow.drain()
    assert flow.stored(session) == before and flow.events(session=session) == events


def test_detach__bundle_of_an_older_turn__nothing_written(flow: Flow, waiting: tuple[str, str, str]) -> None:
    _, session, cid = waiting
    flow.newer_turn(session)
    # A pending, never-detached row (an old writer's): only the turn rule can keep a detach away from it.
    flow.raw_update(session, "SET", ["bundles", cid, "rows", "q1", "agent_disconnected"], {"BOOL": False})
    flow.drain()
    before, published = flow.stored(session), flow.updates(cid)

    assert flow.detach(cid) == []

    assert flow.stored(session) == before
    flow.drain()
    assert flow.updates(cid) == published


def test_detach__stale_snapshot_taken_before_a_newer_turn__not_written(flow: Flow,
                                                                       waiting: tuple[str, str, str]) -> None:
    """D2: a detach that read the aggregate before the newer turn was accepted cannot write its stale view."""
    _, session, cid = waiting
    stale = flow.stored(session)
    assert clarify.detachable_rows(stale, stale.bundles[0]) == ["q1"]
    flow.newer_turn(session)  # its completion pass detached the bundle, then T2 superseded it
    flow.raw_update(session, "SET", ["bundles", cid, "rows", "q1", "agent_disconnected"], {"BOOL": False})
    newer = flow.stored(session)  # now only the turn rule keeps the stale write out

    _, detached = clarifications.detach_bundle(bootstrap.deps(), stale, cid)

    assert detached == []
    assert flow.stored(session) == newer


@pytest.mark.parametrize("stored_flag", [{"BOOL": True}, {"S": "true"}, {"S": "1"}, {"N": "1"}],
                         ids=["bool", "string-true", "string-1", "number-1"])
def test_detach__flag_stored_as_a_truthy_variant__already_detached_and_no_write(
        flow: Flow, waiting: tuple[str, str, str], stored_flag: dict[str, Any]) -> None:
    _, session, cid = waiting
    flow.raw_update(session, "SET", ["bundles", cid, "rows", "q1", "agent_disconnected"], stored_flag)
    flow.drain()
    before, published = flow.stored(session), flow.updates(cid)

    assert flow.detach(cid) == []
    flow.complete_turn(session)  # the turn-completion pass must not re-detach it either

    entry = flow.entry(cid)
    assert entry is not None and (entry["state"], entry["agent_disconnected"]) == ("active_detached", True)
    assert flow.stored(session).version == before.version + 1  # the completion only
    flow.drain()
    assert flow.updates(cid) == published


@pytest.mark.parametrize("stored_flag", [{"BOOL": False}, {"S": "false"}, {"S": "0"}, {"N": "0"}, None],
                         ids=["bool", "string-false", "string-0", "number-0", "absent"])
def test_detach__flag_stored_as_a_falsy_variant__detached(flow: Flow, waiting: tuple[str, str, str],
                                                          stored_flag: dict[str, Any] | None) -> None:
    _, session, cid = waiting
    path = ["bundles", cid, "rows", "q1", "agent_disconnected"]
    if stored_flag is None:
        flow.raw_update(session, "REMOVE", path)
    else:
        flow.raw_update(session, "SET", path, stored_flag)

    assert flow.detach(cid) == ["q1"]

    assert flow.rows(cid) == {"q1": ("pending", True)}


# ====================================================================== 4. supersede
@pytest.mark.parametrize("dismiss", ["skip", "delete"])
def test_o1__older_detached_question__never_reappears_after_a_newer_one_is_dismissed(flow: Flow,
                                                                                    dismiss: str) -> None:
    task = flow.task()
    session = flow.session(task, prompt="[hang] first")
    p1 = flow.ask(session)
    assert flow.detach(p1) == ["q1"]  # the wait timed out: P1 detached, still pending
    flow.newer_turn(session, "[hang] second")  # the turn ends; the user's message starts T2
    p2 = flow.ask(session)
    flow.drain()
    if dismiss == "skip":
        assert flow.detach(p2) == ["q1"]
        skipped = flow.skip(p2)
        assert skipped.status_code == 200, skipped.text
        assert skipped.json()["status"] == "rejected"
    else:
        assert flow.delete(session, p2).status_code == 204
    flow.complete_turn(session)  # a later turn completes ...
    flow.newer_turn(session, "[hang] third")
    flow.complete_turn(session)
    flow.drain()

    entry = flow.entry(p1)  # ... and the page is reloaded
    assert entry is not None
    assert (entry["state"], entry["answerable"], entry["late_answer_allowed"]) == ("superseded", False, True)
    newer = flow.entry(p2)
    assert newer is None if dismiss == "delete" else (newer is not None and newer["state"] == "rejected")
    assert flow.view(session)["pending_action"] is None
    assert [s["pending_action"] for s in flow.session_list(task)] == [None]
    assert flow.summary(task)["pending_action"] is None
    assert flow.transition(task).status_code == 200
    assert flow.detach(p1) == []
    assert len(flow.updates(p1)) == 1  # the original detach only: completions never republish P1
    assert flow.rows(p1) == {"q1": ("pending", True)}  # history keeps its status


def test_supersede__newer_turn__older_bundle_stays_history_without_any_projection(
        flow: Flow, waiting: tuple[str, str, str]) -> None:
    task, session, cid = waiting
    flow.drain()
    assert flow.summary(task)["pending_action"] == "clarification"

    flow.newer_turn(session)
    flow.drain()

    entry = flow.entry(cid)
    assert entry is not None
    assert (entry["state"], entry["answerable"], entry["late_answer_allowed"]) == ("superseded", False, True)
    assert entry["questions"][0]["status"] == "pending"
    assert flow.view(session)["pending_action"] is None
    assert flow.summary(task)["pending_action"] is None
    assert flow.transition(task).status_code == 200
    assert flow.withdraw(cid).json()["error"]["details"]["reason"] == "superseded"


def test_o2__every_message_of_the_newer_turn_deleted__older_question_stays_inert(
        flow: Flow, waiting: tuple[str, str, str]) -> None:
    task, session, cid = waiting
    newer_turn = flow.newer_turn(session, "[hang] newer")
    flow.frames(session, {"type": "message", "execution_id": "x", "turn_id": newer_turn, "content": "working"})
    flow.drain()
    newer = [m for m in flow.transcript(session)["messages"] if m["turn_id"] == newer_turn]
    assert len(newer) == 2

    for message in newer:
        assert flow.delete(session, message["id"]).status_code == 204
    flow.drain()

    assert all(m["turn_id"] != newer_turn for m in flow.transcript(session)["messages"])
    assert flow.view(session)["current_turn_id"] == newer_turn
    entry = flow.entry(cid)
    assert entry is not None and (entry["state"], entry["answerable"]) == ("superseded", False)
    assert flow.view(session)["pending_action"] is None
    assert flow.summary(task)["pending_action"] is None
    assert flow.transition(task).status_code == 200
    assert flow.detach(cid) == []


def test_o4__older_turn_row_without_status__stays_inert(flow: Flow, waiting: tuple[str, str, str]) -> None:
    task, session, cid = waiting
    flow.newer_turn(session)
    for attribute in ("status", "agent_disconnected"):  # a legacy row: no status, never detached
        flow.raw_update(session, "REMOVE", ["bundles", cid, "rows", "q1", attribute])

    entry = flow.entry(cid)
    assert entry is not None and entry["answerable"] is False
    assert flow.view(session)["pending_action"] is None
    assert flow.transition(task).status_code == 200
    assert flow.detach(cid) == []


@pytest.mark.parametrize("legacy", ["absent", "empty"])
def test_o4__current_turn_row_without_status__pending_for_reads_and_writes(flow: Flow,
                                                                          waiting: tuple[str, str, str],
                                                                          legacy: str) -> None:
    task, session, cid = waiting
    path = ["bundles", cid, "rows", "q1", "status"]
    if legacy == "absent":
        flow.raw_update(session, "REMOVE", path)
    else:
        flow.raw_update(session, "SET", path, {"S": ""})

    entry = flow.entry(cid)
    assert entry is not None and (entry["state"], entry["answerable"]) == ("active_live", True)
    assert flow.transition(task).status_code == 409
    assert flow.detach(cid) == ["q1"]  # the write's condition agrees with the read


def test_o4__current_turn_row_with_unknown_status__never_pending(flow: Flow,
                                                                waiting: tuple[str, str, str]) -> None:
    task, session, cid = waiting
    flow.raw_update(session, "SET", ["bundles", cid, "rows", "q1", "status"], {"S": "mystery"})
    before = flow.stored(session)

    entry = flow.entry(cid)
    assert entry is not None and entry["answerable"] is False
    assert flow.view(session)["pending_action"] is None
    assert flow.transition(task).status_code == 200
    assert flow.detach(cid) == [] and flow.stored(session) == before


# ====================================================================== 5. terminal expiry
def test_cancel_session__pending_current_turn_bundle__expired_in_the_same_write(
        flow: Flow, waiting: tuple[str, str, str]) -> None:
    task, session, cid = waiting
    assert flow.detach(cid) == ["q1"]
    second = flow.ask(session, QUESTIONS)
    flow.drain()
    version = flow.stored(session).version

    view = flow.cancel_session(session)

    assert view["state"] == "CANCELLED" and view["pending_action"] is None
    stored = flow.stored(session)
    assert stored.version == version + 1  # state and expiry: one write
    assert flow.rows(cid) == {"q1": ("expired", True)}
    assert {q: s for q, (s, _) in flow.rows(second).items()} == {"q1": "expired", "q2": "expired"}
    for bundle in (cid, second):
        entry = flow.entry(bundle)
        assert entry is not None
        assert (entry["state"], entry["answerable"], entry["late_answer_allowed"]) == ("expired", False, True)
    assert flow.transition(task).status_code == 200
    flow.drain()
    assert flow.summary(task)["pending_action"] is None
    expiry = flow.updates(second)
    assert len(expiry) == 1 and expiry[0].payload["state"] == "expired"
    # E1: clients never see the terminal state without the expiry; both come from the same version.
    terminal = [e for e in flow.events("session.updated", session=session) if e.payload["state"] == "CANCELLED"]
    assert [e.id for e in terminal] == [f"session.updated:{session}:{stored.version}"]
    assert expiry[0].id == f"message.updated:{second}:{stored.version}"


@pytest.mark.parametrize("terminal", ["COMPLETED", "FAILED"])
def test_terminal_state_frame__pending_bundle__expired(flow: Flow, waiting: tuple[str, str, str],
                                                       terminal: str) -> None:
    task, session, cid = waiting

    flow.frames(session, {"type": "state", "execution_id": "x", "state": terminal})

    assert flow.view(session)["state"] == terminal
    assert flow.rows(cid) == {"q1": ("expired", True)}
    entry = flow.entry(cid)
    assert entry is not None and (entry["state"], entry["answerable"]) == ("expired", False)
    assert flow.transition(task).status_code == 200


def test_e2__terminal_session_whose_expiry_write_is_missing__rows_quarantined(
        flow: Flow, waiting: tuple[str, str, str]) -> None:
    task, session, cid = waiting
    flow.raw_update(session, "SET", ["state"], {"S": "CANCELLED"})  # terminal, rows still say pending
    before = flow.stored(session)

    entry = flow.entry(cid)
    assert entry is not None and entry["answerable"] is False and entry["state"] == "expired"
    assert flow.view(session)["pending_action"] is None
    assert flow.transition(task).status_code == 200
    assert flow.detach(cid) == []
    assert flow.withdraw(cid).status_code == 409
    assert flow.stored(session) == before


def test_cancel_session__older_superseded_bundle__rows_untouched_and_still_superseded(
        flow: Flow, waiting: tuple[str, str, str]) -> None:
    _, session, older = waiting
    flow.newer_turn(session)
    current = flow.ask(session)
    flow.drain()
    published = flow.updates(older)

    flow.cancel_session(session)

    assert flow.rows(older) == {"q1": ("pending", True)}
    assert flow.rows(current) == {"q1": ("expired", True)}
    flow.drain()
    assert flow.updates(older) == published
    entry = flow.entry(older)
    assert entry is not None and entry["answerable"] is False
    assert entry["state"] == "superseded"  # it was superseded by T2; the cancellation expired only T2's bundle


# ====================================================================== 6. isolation
def test_agent_cancel__one_of_two_bundles__only_that_bundle_cancelled(flow: Flow,
                                                                      waiting: tuple[str, str, str]) -> None:
    task, session, first = waiting
    second = flow.ask(session, QUESTIONS)
    flow.drain()

    resp = flow.withdraw(first)

    assert resp.status_code == 200 and resp.json()["cancelled_question_ids"] == ["q1"]
    assert flow.rows(first) == {"q1": ("cancelled", False)}
    assert flow.rows(second) == {"q1": ("pending", False), "q2": ("pending", False)}
    entries = {cid: flow.entry(cid) for cid in (first, second)}
    assert {cid: e["state"] for cid, e in entries.items() if e} == {first: "cancelled", second: "active_live"}
    assert flow.view(session)["pending_action"] == "clarification"
    assert flow.transition(task).status_code == 409
    flow.drain()
    assert len(flow.updates(first)) == 1 and flow.updates(second) == []


def test_agent_cancel__repeated__inactive_conflict_and_nothing_written(flow: Flow,
                                                                       waiting: tuple[str, str, str]) -> None:
    _, session, cid = waiting
    assert flow.withdraw(cid).status_code == 200
    before = flow.stored(session)

    resp = flow.withdraw(cid)

    assert resp.status_code == 409
    assert resp.json()["error"]["code"] == "clarification_inactive"
    assert resp.json()["error"]["details"]["reason"] == "cancelled"
    assert flow.stored(session) == before


def test_delete_message__one_of_two_bundles__only_that_bundle_removed(flow: Flow,
                                                                      waiting: tuple[str, str, str]) -> None:
    task, session, first = waiting
    second = flow.ask(session, QUESTIONS)
    flow.drain()
    turn = flow.view(session)["current_turn_id"]

    assert flow.delete(session, first).status_code == 204

    stored = flow.stored(session)
    assert [b.id for b in stored.bundles] == [second]
    assert flow.rows(second) == {"q1": ("pending", False), "q2": ("pending", False)}
    assert flow.entry(first) is None
    entry = flow.entry(second)
    assert entry is not None and entry["state"] == "active_live"
    assert flow.view(session)["current_turn_id"] == turn
    assert flow.view(session)["pending_action"] == "clarification"
    flow.drain()
    assert flow.entry(first) is None
    assert flow.updates(second) == []
    assert [e.payload["id"] for e in flow.events("message.deleted", session=session)] == [first]
    assert flow.delete(session, first).status_code == 404


def test_cancel_session__one_of_two_sessions__other_session_untouched(flow: Flow) -> None:
    task = flow.task()
    ended, other = flow.session(task), flow.session(task)
    flow.ask(ended)
    kept = flow.ask(other)
    before = flow.stored(other)

    flow.cancel_session(ended)

    assert flow.stored(other) == before
    assert flow.view(other)["pending_action"] == "clarification"
    entry = flow.entry(kept)
    assert entry is not None and entry["state"] == "active_live"
    assert flow.transition(task).status_code == 409


# ====================================================================== 7. clarification pause
def _silent_cancels(sim: SimAgent, session: str) -> list[dict[str, Any]]:
    return [e for e in sim.events() if e["kind"] == "cancel" and e["session_id"] == session and e["silent"]]


def test_pause_for_input__snapshotted_turn_still_current__detached_then_silently_cancelled(
        flow: Flow, agent_runtime: SimAgent, waiting: tuple[str, str, str]) -> None:
    _, session, cid = waiting
    snapshot = flow.stored(session)
    assert snapshot.current_turn is not None

    cancelled = clarifications.pause_for_input(bootstrap.deps(), snapshot, cid, snapshot.current_turn.id)

    assert cancelled is True
    assert flow.rows(cid) == {"q1": ("pending", True)}
    assert len(_silent_cancels(agent_runtime, session)) == 1
    assert _silent_cancels(agent_runtime, session)[0]["execution_id"] == snapshot.execution_id


def test_pause_for_input__newer_turn_accepted_meanwhile__no_cancel_and_nothing_detached(
        flow: Flow, agent_runtime: SimAgent, waiting: tuple[str, str, str]) -> None:
    """D3: the stale pause must not cancel the turn that was created while it was detaching."""
    _, session, cid = waiting
    snapshot = flow.stored(session)
    assert snapshot.current_turn is not None
    flow.newer_turn(session)
    newer = flow.stored(session)

    cancelled = clarifications.pause_for_input(bootstrap.deps(), snapshot, cid, snapshot.current_turn.id)

    assert cancelled is False
    assert _silent_cancels(agent_runtime, session) == []
    assert flow.stored(session) == newer


# ====================================================================== 8. workflow guard
def test_transition__active_live_question__blocked_with_pending_clarification(
        flow: Flow, waiting: tuple[str, str, str]) -> None:
    task, _, _ = waiting

    resp = flow.transition(task)

    assert resp.status_code == 409 and resp.json()["error"]["code"] == "pending_clarification"
    assert flow.user.get(f"/tasks/{task}").json()["workflow_step"] == "todo"


def test_transition__detached_current_turn_question__still_blocked(flow: Flow,
                                                                   waiting: tuple[str, str, str]) -> None:
    task, _, cid = waiting
    flow.detach(cid)

    resp = flow.transition(task)

    assert resp.status_code == 409 and resp.json()["error"]["code"] == "pending_clarification"


def test_transition__question_in_a_secondary_session__blocked(flow: Flow) -> None:
    task = flow.task()
    flow.session(task, prompt=None)
    secondary = flow.session(task)
    flow.ask(secondary)

    resp = flow.transition(task)

    assert resp.status_code == 409 and resp.json()["error"]["code"] == "pending_clarification"


def test_transition__no_active_question__moves_the_step(flow: Flow, waiting: tuple[str, str, str]) -> None:
    task, session, _ = waiting
    flow.newer_turn(session)

    resp = flow.transition(task, "review")

    assert resp.status_code == 200 and resp.json()["workflow_step"] == "review"


class _SessionsUnreadable:
    """The live store, except that reading a task's sessions fails."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def list_sessions(self, task_id: str) -> list[Session]:
        raise StoreUnavailable("injected: the sessions index is unreachable")


def test_transition__authority_read_fails__blocked_fail_closed(flow: Flow) -> None:
    task = flow.task()
    flow.session(task)  # no question anywhere: only the failed read can block
    real = bootstrap.deps()
    bootstrap.override(dataclasses.replace(real, store=_SessionsUnreadable(real.store)))
    try:
        resp = flow.transition(task)
    finally:
        bootstrap.override(real)

    assert resp.status_code == 409 and resp.json()["error"]["code"] == "pending_clarification"
    assert flow.user.get(f"/tasks/{task}").json()["workflow_step"] == "todo"
    assert flow.transition(task).status_code == 200  # and the read recovering opens it again


# ====================================================================== 9. projections
def test_secondary_session_question__session_and_task_pending_action(flow: Flow) -> None:
    task = flow.task()
    primary = flow.session(task, prompt="[hang] primary")
    secondary = flow.session(task, prompt="[hang] secondary")
    flow.drain()
    clean = flow.summary(task)

    flow.ask(secondary)
    flow.drain()

    assert flow.view(secondary)["pending_action"] == "clarification"
    assert flow.view(primary)["pending_action"] is None
    listed = flow.session_list(task)
    assert [(s["id"], s["is_primary"], s["pending_action"]) for s in listed] == [
        (secondary, False, "clarification"), (primary, True, None)]
    summary = flow.summary(task)
    assert summary["pending_action"] == "clarification" and summary["primary_session_id"] == primary
    assert summary["revision"] > clean["revision"]
    published = [e.payload["status_summary"] for e in flow.events("task.status_summary.updated")
                 if e.task_id == task]
    assert published[-1] == summary


def test_task_summary__question_superseded__cleared_with_a_newer_revision(flow: Flow,
                                                                          waiting: tuple[str, str, str]) -> None:
    task, session, _ = waiting
    flow.drain()
    pending = flow.summary(task)
    assert pending["pending_action"] == "clarification"

    flow.newer_turn(session)
    flow.drain()

    cleared = flow.summary(task)
    assert cleared["pending_action"] is None and cleared["revision"] > pending["revision"]


def test_list_tasks__stored_summary_claims_a_stale_question__repaired_and_published(
        flow: Flow, waiting: tuple[str, str, str]) -> None:
    task, session, _ = waiting
    flow.newer_turn(session)
    flow.drain()
    stored = flow.store.get_task(task)
    assert stored is not None and stored.summary.pending_action is None
    stale = flow.store.set_task_summary(task, pending_action="clarification",
                                        primary_session_id=stored.summary.primary_session_id,
                                        expected_revision=stored.summary.revision, at=stored.created_at)

    summary = flow.summary(task)

    assert summary["pending_action"] is None and summary["revision"] == stale.summary.revision + 1
    published = [e.payload["status_summary"] for e in flow.events("task.status_summary.updated")
                 if e.task_id == task]
    assert published[-1] == summary
    assert flow.summary(task) == summary  # a second read finds nothing to repair
    assert len(flow.events("task.status_summary.updated", task=task)) == len(published)


def test_list_tasks__stored_summary_misses_a_real_question__repaired(flow: Flow,
                                                                     waiting: tuple[str, str, str]) -> None:
    task, _, _ = waiting
    flow.drain()
    stored = flow.store.get_task(task)
    assert stored is not None and stored.summary.pending_action == "clarification"
    flow.store.set_task_summary(task, pending_action=None, primary_session_id=stored.summary.primary_session_id,
                                expected_revision=stored.summary.revision, at=stored.created_at)

    summary = flow.summary(task)

    assert summary["pending_action"] == "clarification"
    assert summary["revision"] == stored.summary.revision + 2


# ====================================================================== the session's byte budget
def _max_bundle() -> dict[str, Any]:
    """The largest bundle validation lets through, in 4-byte emoji: ~166 KB of UTF-8 (41,600 characters)."""
    e = "\U0001F600"
    return {"context": e * 4000, "questions": [
        {"title": e * 200, "prompt": e * 2000,
         "options": [{"label": e * 200, "description": e * 1000} for _ in range(6)]} for _ in range(4)]}


def test_ask__emoji_bundles_past_the_byte_budget__409_session_full_and_every_other_route_still_works(
        flow: Flow) -> None:
    """Was: two maximum bundles of emoji pushed the item to DynamoDB's 400 KB limit; from then on every write,
    cancel included, answered 503 and the reconciler could not repair it."""
    sid = flow.session()
    first = flow.ask_raw(sid, _max_bundle())
    assert first.status_code == 201, first.text
    before = flow.stored(sid)

    refused = flow.ask_raw(sid, _max_bundle())

    error = refused.json()["error"]
    assert (refused.status_code, error["code"], error["details"]["field"]) == (409, "session_full", "questions")
    assert error["retryable"] is False and "budget" in error["message"]
    assert flow.stored(sid).version == before.version  # nothing written
    # Messages queued behind the open turn, 64 KB each: the budget refuses one before the item is full.
    posted = [flow.post(sid, "\U0001F600" * 16_000, cmid=f"big-{n}") for n in range(3)]
    assert [p.status_code for p in posted] == [201, 201, 409], [p.text[:200] for p in posted]
    assert posted[-1].json()["error"]["details"]["field"] == "content"
    # Everything else keeps working on the full session: the agent's calls, the user's answer, cancel.
    cid = first.json()["clarification_id"]
    assert flow.wait(cid, timeout=0).status_code == 200
    assert flow.frame(sid, "message", content="still here")
    assert flow.detach(cid)
    answers = [{"question_id": q["question_id"], "selected_options": [q["options"][0]["option_id"]]}
               for q in flow.entry(cid)["questions"]]  # type: ignore[index]
    assert flow.respond(cid, {"answers": answers}).status_code == 200
    assert flow.transcript(sid)["messages"]
    assert flow.cancel_session(sid)["state"] == "CANCELLED"
    assert flow.user.get("/tasks").status_code == 200


def _answers(flow: Flow, cid: str) -> list[dict[str, Any]]:
    entry = flow.entry(cid)
    assert entry is not None
    return [{"question_id": q["question_id"], "selected_options": [q["options"][0]["option_id"]]}
            for q in entry["questions"]]


def test_ask__answered_maximum_bundles_move_to_history__the_session_keeps_taking_questions(flow: Flow) -> None:
    """Three maximum bundles (~500 KB: past the budget and DynamoDB's item limit) in one session, each answered
    before the next: the closed ones move to history, so no ask is refused, and each still reads, replays,
    refuses and deletes exactly as it did in the aggregate."""
    sid = flow.session()
    cids, bodies, keys = [], [], []
    for n in range(3):
        asked = flow.ask_raw(sid, _max_bundle())
        assert asked.status_code == 201, asked.text[:300]
        cid = asked.json()["clarification_id"]
        assert flow.detach(cid)
        body, key = {"answers": _answers(flow, cid)}, f"archive-{n}-{uuid.uuid4().hex}"
        answered = flow.respond(cid, body, key)
        assert answered.status_code == 200 and answered.json()["delivery"] == "resumed", answered.text[:300]
        cids.append(cid), bodies.append(body), keys.append(key)
    stored = flow.stored(sid)
    assert [stored.bundle(c) is None for c in cids] == [True, True, False] and stored.archived == 2
    assert flow.store.get_archived(sid, cids[0]) is not None
    flow.drain()  # the transcript's anchors are the stream function's copies (it archives the third too)
    # The transcript shows every question answered, wherever it lives.
    for cid, body in zip(cids, bodies, strict=True):
        entry = flow.entry(cid)
        assert entry is not None and entry["state"] == "answered", entry and entry["state"]
        assert [q["response"]["selected_options"] for q in entry["questions"]] == [
            a["selected_options"] for a in body["answers"]]
    # A retry with the original key gets the original result; another answer gets 409 with the winner's.
    replay = flow.respond(cids[0], bodies[0], keys[0])
    assert (replay.status_code, replay.json()["delivery"]) == (200, "resumed"), replay.text[:300]
    loser = flow.respond(cids[0], {"rejected": True})
    error = loser.json()["error"]
    assert (loser.status_code, error["code"], error["details"]["reason"]) == (409, "clarification_inactive",
                                                                               "answered")
    assert [(a["question_id"], a["selected_options"]) for a in error["details"]["response"]["answers"]] == [
        (a["question_id"], a["selected_options"]) for a in bodies[0]["answers"]]
    # A late answer to it is refused as before; the agent's wait learns it is over.
    late = flow.post(sid, "[hang] also", cmid=f"late-{uuid.uuid4().hex}",
                     in_reply_to={"clarification_id": cids[0], **bodies[0]})
    assert (late.status_code, late.json()["error"]["code"]) == (409, "clarification_inactive"), late.text[:300]
    assert flow.wait(cids[0], timeout=0).status_code == 410
    assert flow.user.post(f"/clarifications/{cids[0]}/dismiss").status_code == 200
    # Deleting its message removes it for good.
    assert flow.delete(sid, cids[0]).status_code == 204
    assert flow.entry(cids[0]) is None and flow.store.get_archived(sid, cids[0]) is None
    assert flow.respond(cids[0], bodies[0], keys[0]).status_code == 404
    assert flow.entry(cids[1]) is not None
