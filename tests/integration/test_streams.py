"""Stream consumers are idempotent.

DynamoDB Streams deliver at least once and in order per item only. The raw records are read back from the
emulator's real Streams API (a separate TRIM_HORIZON iterator, the pump's own clients) and handed to the
same Lambda handlers (`app.sessions_stream`, `app.history_stream`) in Lambda's event shape: once, again,
and interleaved across items. Redelivery must publish no duplicate client event and leave every projection
(task status summaries, transcript history) exactly as the first delivery left it.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from chalicelib import bootstrap
from chalicelib.domain.errors import ConditionFailed
from chalicelib.domain.model import Dispatch, Prompt, State, Turn
from chalicelib.services.projection import task_summary
from chalicelib.store.protocol import Remembered
from scripts.local.stack import LocalStack
from tests.support.flow import ONE_QUESTION, QUESTIONS, ApiClient, Flow
from tests.support.streams import Replay, interleave

SEED = 20260814


def snapshot(flow: Flow, task_ids: list[str], session_ids: list[str]) -> dict[str, Any]:
    """Everything the stream functions maintain: the event feed, task summaries and transcript history."""
    store = flow.store
    events = store.list_events(flow.workspace, low_sk="", after_sk="", written_after="", limit=100_000)
    tasks = {t: store.get_task(t) for t in task_ids}
    return {
        "events": [(sk, e.id, e.type, e.session_id, json.dumps(e.payload, sort_keys=True)) for sk, _, e in events],
        "summaries": {t: task.summary if task else None for t, task in tasks.items()},
        "history": {s: store.list_history(s) for s in session_ids},
    }


@dataclass(frozen=True)
class Workload:
    tasks: list[str]
    sessions: list[str]
    updates: dict[str, int]  # message.updated events each bundle must get, delivered in any order
    turns: dict[str, int]  # turn.started events per session


def workload(flow: Flow) -> Workload:
    """Two tasks and three sessions: ask, detach, completion, supersede, agent cancel, a secondary question,
    a terminal expiry."""
    task, other = flow.task("first"), flow.task("second")
    s1 = flow.session(task, prompt="[hang] one")
    s2 = flow.session(task, prompt=None)
    s3 = flow.session(other, prompt=None)
    p1 = flow.ask(s1, QUESTIONS)
    assert flow.detach(p1) == ["q1", "q2"]
    p2 = flow.ask(s2)  # the secondary session's real question: the task shows it
    flow.newer_turn(s1, "[hang] two")  # P1 superseded
    p3 = flow.ask(s1)
    assert flow.withdraw(p3).status_code == 200
    p4 = flow.ask(s3)
    flow.cancel_session(s3)  # expired with the cancellation
    return Workload(tasks=[task, other], sessions=[s1, s2, s3],
                    updates={p1: 1, p2: 0, p3: 1, p4: 1},  # detach; none; agent cancel; expiry
                    turns={s1: 2, s2: 1, s3: 1})


def assert_summaries_follow_the_rule(flow: Flow, task_ids: list[str]) -> None:
    for task_id in task_ids:
        stored = flow.store.get_task(task_id)
        assert stored is not None
        action, primary = task_summary(flow.store.list_sessions(task_id))
        assert (stored.summary.pending_action, stored.summary.primary_session_id) == (action, primary)


def assert_no_duplicate_events(state: dict[str, Any]) -> None:
    ids = [event_id for _, event_id, *_ in state["events"]]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


def assert_events_match_the_workload(flow: Flow, w: Workload) -> None:
    events = [e for _, _, e in flow.store.list_events(flow.workspace, low_sk="", after_sk="", written_after="",
                                                      limit=100_000)]
    updates = {cid: sum(1 for e in events if e.type == "message.updated" and e.payload["clarification_id"] == cid)
               for cid in w.updates}
    assert updates == w.updates
    turns = {sid: sum(1 for e in events if e.type == "turn.started" and e.session_id == sid) for sid in w.turns}
    assert turns == w.turns


# ====================================================================== the same batch twice
def test_stream_batch_delivered_twice__no_duplicate_event_and_same_projections(stack: LocalStack,
                                                                               user: ApiClient) -> None:
    flow = Flow(stack, None, "ws-1", questions=ONE_QUESTION)
    w = workload(flow)
    replay = Replay(stack)
    assert replay.sessions() > 0
    replay.history()
    first = snapshot(flow, w.tasks, w.sessions)
    assert_no_duplicate_events(first)
    assert_events_match_the_workload(flow, w)
    assert_summaries_follow_the_rule(flow, w.tasks)
    assert first["summaries"][w.tasks[0]].pending_action == "clarification"  # the secondary's question
    assert first["summaries"][w.tasks[1]].pending_action is None  # expired with its session

    replay.sessions()
    replay.history()

    second = snapshot(flow, w.tasks, w.sessions)
    assert [e for e in second["events"] if e not in first["events"]] == []  # no event published again
    assert second["summaries"] == first["summaries"]  # no revision moved: nothing changed semantically
    assert second == first


# ====================================================================== interleaved across items
def test_stream_records_interleaved_across_items__same_projections_as_in_order(stack: LocalStack,
                                                                               user: ApiClient) -> None:
    """The first delivery interleaves the items' records (each item's own order kept) in uneven batches;
    then the very same shuffled batches are delivered again."""
    flow = Flow(stack, None, "ws-1", questions=ONE_QUESTION)
    w = workload(flow)
    sizes = [random.Random(SEED).randint(1, 7) for _ in range(300)]
    replay = Replay(stack)

    def shuffled(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return interleave(records, random.Random(SEED))

    replay.sessions(shuffled, sizes)
    replay.history(shuffled, sizes)
    first = snapshot(flow, w.tasks, w.sessions)
    assert_no_duplicate_events(first)
    assert_events_match_the_workload(flow, w)
    assert_summaries_follow_the_rule(flow, w.tasks)

    replay.sessions(shuffled, sizes)
    replay.history(shuffled, sizes)

    second = snapshot(flow, w.tasks, w.sessions)
    assert [e for e in second["events"] if e not in first["events"]] == []
    assert second == first


# ====================================================================== redelivery after a deletion
def test_stream_redelivery__after_a_message_was_deleted__message_stays_deleted(stack: LocalStack,
                                                                               user: ApiClient) -> None:
    flow = Flow(stack, None, "ws-1", questions=ONE_QUESTION)
    task = flow.task()
    session = flow.session(task, prompt="[hang] delete me later")
    flow.ask(session)
    replay = Replay(stack)
    replay.sessions()
    replay.history()
    prompt = [m for m in flow.transcript(session)["messages"] if m["type"] == "message"]
    assert [m["content"] for m in prompt] == ["[hang] delete me later"]
    assert flow.delete(session, prompt[0]["id"]).status_code == 204
    replay.history()
    kept = snapshot(flow, [task], [session])

    replay.sessions()  # an at-least-once redelivery of the batch that first wrote the message
    replay.history()

    assert [m["type"] for m in flow.transcript(session)["messages"]] == ["clarification"]
    assert snapshot(flow, [task], [session]) == kept


# ====================================================================== the local pump itself
def test_pump__after_a_cancelled_transaction__later_records_still_delivered(stack: LocalStack,
                                                                           user: ApiClient) -> None:
    """The local stand-in for Lambda's event source mapping must keep delivering after a write that lost.

    A message admission is one TransactWriteItems (aggregate + idempotency record); losing its condition
    is an ordinary outcome (a concurrent turn, a cancelled session).
    """
    assert stack.pump is not None
    flow = Flow(stack, None, "ws-1", questions=ONE_QUESTION)
    session = flow.session(flow.task(), prompt=None)
    stack.pump.drain()
    deps = bootstrap.deps()
    now = deps.now()
    losing = Prompt(message_id="m-lost", client_message_id="c-lost", turn_id="t-lost", content="x",
                    author_id="user-1", created_at=now, generation=1, dispatch=Dispatch.PENDING)
    try:
        deps.store.admit(session, losing, start=Turn("t-lost", 1, now), expected_turn_id="not-current",
                         from_states=[State.IDLE], link_bundle=None, queue_cap=10, at=now,
                         remember=Remembered("message:lost", "fp", {}))
        raise AssertionError("the admission should have lost its condition")
    except ConditionFailed:
        pass

    cid = flow.ask(session)
    handled = stack.pump.drain()

    assert handled > 0
    anchors = [m for m in flow.store.list_history(session)[1] if m.clarification_id == cid]
    assert len(anchors) == 1
