"""Races with real threads against the serialised emulator (one request at a time, like one DynamoDB item).

Each race runs many rounds on fresh sessions. Whatever order the racers land in, the final aggregate must
obey the repository rule, each writer must report exactly what it wrote, and after the stream functions
ran, the client events must match the writes (one message.updated per change of a bundle, none for a
write that did not happen). Scenario tags name failure scenarios from the requirements.
"""
from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import pytest

from chalicelib import bootstrap
from chalicelib.domain.model import State
from chalicelib.domain.rules import active_bundles, pending_action
from chalicelib.services import clarifications
from scripts.local.emulator import EmulatorThread
from scripts.local.sim_agent import SimAgent
from scripts.local.stack import LocalStack
from tests.support.flow import ONE_QUESTION, QUESTIONS, Flow

ROUNDS = 20


@pytest.fixture(scope="module")
def shared(emulator: EmulatorThread) -> Iterator[LocalStack]:
    agent = SimAgent("http://127.0.0.1:9", port=0).start()
    stack = LocalStack(agentctl_url=agent.url).start(endpoint=emulator.url)
    agent.api_url = stack.url
    yield stack
    agent.stop()
    stack.stop()


@pytest.fixture
def flow(shared: LocalStack) -> Flow:
    return Flow(shared, None, f"ws-{uuid.uuid4().hex[:12]}", questions=ONE_QUESTION)


def race(*racers: Callable[[], Any]) -> list[Any]:
    """Start every racer on its own thread at the same instant; return their results (or exceptions)."""
    barrier = threading.Barrier(len(racers))
    results: list[Any] = [None] * len(racers)

    def run(i: int, racer: Callable[[], Any]) -> None:
        barrier.wait()
        try:
            results[i] = racer()
        except Exception as exc:  # reported to the test, never swallowed
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i, r)) for i, r in enumerate(racers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
        assert not t.is_alive(), "a racer hung"
    for result in results:
        if isinstance(result, Exception):
            raise result
    return results


def completion_frame(flow: Flow, session: str, turn_id: str) -> Callable[[], dict[str, Any]]:
    return lambda: flow.frames(session, {"type": "turn_completed", "execution_id": "x", "turn_id": turn_id})


@dataclass(frozen=True)
class Round:
    task: str
    session: str
    bundle: str
    detach_version: int | None  # the aggregate version a racing detach wrote, if it wrote
    expected_updates: int


def assert_events_match_writes(flow: Flow, rounds: list[Round]) -> None:
    flow.drain()
    events = flow.events()  # one read of the workspace's feed for every round
    assert len({e.id for e in events}) == len(events), "duplicate client events"
    for r in rounds:
        updates = [e.id for e in events
                   if e.type == "message.updated" and e.payload.get("clarification_id") == r.bundle]
        assert len(updates) == r.expected_updates, (r, updates)
        if r.detach_version is not None:
            assert f"message.updated:{r.bundle}:{r.detach_version}" in updates


# ====================================================================== detach racing a newer turn
def detach_vs_newer_turn(flow: Flow) -> Round:
    task = flow.task()
    session = flow.session(task, prompt=None)
    cid = flow.ask(session)
    snapshot = flow.stored(session)  # the detacher's read, taken before the race
    assert snapshot.current_turn is not None
    t1 = snapshot.current_turn.id

    def newer_turn() -> dict[str, Any]:
        completion_frame(flow, session, t1)()
        return flow.send(session)

    (detached_session, detached), admission = race(
        partial(clarifications.detach_bundle, bootstrap.deps(), snapshot, cid), newer_turn)

    stored = flow.stored(session)
    assert admission["admission"] == "sent"
    assert stored.current_turn is not None and stored.current_turn.id == admission["turn_id"] != t1
    assert flow.rows(cid) == {"q1": ("pending", True)}  # detached exactly once, never resolved
    assert active_bundles(stored) == [] and pending_action(stored) is None
    if detached:  # the detach landed first: it wrote while T1 was still current
        assert detached == ["q1"]
        assert detached_session.current_turn is not None and detached_session.current_turn.id == t1
    return Round(task, session, cid, detached_session.version if detached else None, 1)


def test_detach_racing_a_newer_turn__stale_detach_never_writes_over_it(flow: Flow) -> None:
    """D2: the detacher read the aggregate before the race; the agent completes its turn and the user's
    message starts T2 concurrently. Exactly one write detaches the question, never after T2 superseded it."""
    rounds = [detach_vs_newer_turn(flow) for _ in range(ROUNDS)]

    assert_events_match_writes(flow, rounds)


# ====================================================================== detach racing itself
def detach_vs_detach(flow: Flow) -> Round:
    task = flow.task()
    session = flow.session(task, prompt=None)
    cid = flow.ask(session, QUESTIONS)
    before = flow.stored(session)
    assert before.current_turn is not None
    detach = partial(flow.detach, cid)

    *detaches, completion = race(detach, detach, detach, completion_frame(flow, session, before.current_turn.id))

    writers = [d for d in detaches if d]
    assert len(writers) <= 1, detaches
    assert all(sorted(d) == ["q1", "q2"] for d in writers)
    assert completion["applied"] == 1
    stored = flow.stored(session)
    assert flow.rows(cid) == {"q1": ("pending", True), "q2": ("pending", True)}
    assert stored.current_turn is not None and stored.current_turn.completed_at is not None
    assert stored.version == before.version + (2 if writers else 1)  # a detach write only if a route won
    assert pending_action(stored) == "clarification" and stored.state == State.WAITING_FOR_INPUT
    return Round(task, session, cid, None, 1)


def test_detach_racing_itself__one_writer_one_event(flow: Flow) -> None:
    """D1 under concurrency: three detach calls and the turn-completion pass race on one bundle."""
    rounds = [detach_vs_detach(flow) for _ in range(ROUNDS)]

    assert_events_match_writes(flow, rounds)


# ====================================================================== expiry racing a newer turn
def cancel_vs_newer_turn(flow: Flow) -> Round:
    task = flow.task()
    session = flow.session(task, prompt=None)
    cid = flow.ask(session)
    flow.complete_turn(session)  # the agent's turn ended; its question stays answerable, detached
    before = flow.stored(session)
    assert before.current_turn is not None and active_bundles(before) != []

    def message() -> tuple[int, dict[str, Any]]:
        resp = flow.user.post(f"/sessions/{session}/messages",
                              {"client_message_id": f"m-{uuid.uuid4().hex}", "content": "[hang] more"})
        return resp.status_code, resp.json()

    cancelled, (status, body) = race(partial(flow.cancel_session, session), message)

    stored = flow.stored(session)
    assert cancelled["state"] == "CANCELLED" and stored.state == State.CANCELLED
    assert active_bundles(stored) == [] and pending_action(stored) is None
    assert flow.transition(task).status_code == 200
    assert stored.current_turn is not None
    superseded = stored.current_turn.id != before.current_turn.id
    if superseded:  # T2 was accepted first: the cancel found nothing current to expire
        # ... and the message either reached the agent first, or the cancel overtook its dispatch: then the
        # agent refused it (fenced by the cancel) and the user is told the session ended, never "retry".
        sent = status == 201 and body["admission"] == "sent" and body["turn_id"] == stored.current_turn.id
        overtaken = status == 409 and body["error"]["code"] == "session_unavailable" \
            and "not sent" in body["error"]["message"]
        assert sent or overtaken, (status, body)
        assert flow.rows(cid) == {"q1": ("pending", True)}
    else:  # the cancel won: the question expired in the same write and the message was refused
        assert status == 409 and body["error"]["code"] == "session_unavailable", body
        assert flow.rows(cid) == {"q1": ("expired", True)}
    entry = flow.entry(cid)
    assert entry is not None and entry["answerable"] is False
    return Round(task, session, cid, None, 1 if superseded else 2)  # the completion's detach (+ expiry)


def test_session_cancel_racing_a_newer_turn__expires_only_a_current_bundle(flow: Flow) -> None:
    """E1 vs supersession: the user cancels the session while their message starts T2. Either the cancel
    wins (the question expires in the same write, the message is refused) or T2 wins (the question is
    superseded history and the cancel expires nothing of it)."""
    rounds = [cancel_vs_newer_turn(flow) for _ in range(ROUNDS)]

    assert_events_match_writes(flow, rounds)
    started = [(e.session_id, e.payload["turn_id"]) for e in flow.events("turn.started")]
    for r in rounds:
        stored = flow.stored(r.session)
        turns = [turn for session, turn in started if session == r.session]
        assert stored.current_turn is not None and stored.current_turn.id in turns
        assert len(turns) == stored.turn_seq  # one turn.started per accepted turn, no more
