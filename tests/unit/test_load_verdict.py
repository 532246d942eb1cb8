"""The load run's verdict explains a failed request only by a fault that really explains it."""
from __future__ import annotations

import json

from chalicelib.services import watchdog
from scripts.loadtest.journal import AnswerOp, Attempt, Fault, Journal, Request
from scripts.loadtest.verdict import CONFIRMED_UNRECORDED, AgentRecord, classify, fate
from tests.support.harness import World

CID = "s1.c1"


def journal_with_answer(first_attempt_at: float) -> Journal:
    j = Journal()
    op = AnswerOp("mk1", "answer", "s1", CID)
    op.attempts.append(Attempt(0, None, None, first_attempt_at, first_attempt_at + 0.3))
    j.answers.append(op)
    return j


def ambiguous_retry(at: float) -> Request:
    return Request("respond (detached question)", at, at + 1.5, 502, "dispatch_ambiguous",
                   context={"clarification_id": CID, "marker": "mk1"})


def test_respond_retry__first_attempt_cut_by_an_api_kill__told_ambiguous__explained() -> None:
    """The API died mid-resume (the agent had the prompt, the acknowledgement was never written); the
    reconciler made the dispatch ambiguous and the retry with the same Idempotency-Key is told so."""
    j = journal_with_answer(100.0)
    j.faults.append(Fault("api", killed=100.1, pid=1, back=110.0))
    assert classify(ambiguous_retry(109.0), j, {}) == \
        "502 dispatch_ambiguous: an earlier attempt met a kill (its retry is told the same)"


def test_respond__ambiguous_with_no_kill_since_its_first_attempt__unexplained() -> None:
    j = journal_with_answer(100.0)
    j.faults.append(Fault("api", killed=50.0, pid=1, back=60.0))  # before the answer was ever sent
    assert classify(ambiguous_retry(109.0), j, {}) is None


def test_answer_fate__confirm_landed__agent_killed_before_logging_it__delivered_live() -> None:
    """The agent logged the answer it received, the confirm's 200 was written by Clarify, then kill -9 cut the
    agent's own "confirmed" line: the server's durable confirmation and the agent's receipt are the evidence."""
    w = World()
    session_id = w.new_session()
    w.running(session_id)
    a = w.confirmed_live(session_id)
    # the agent died: its watchdog fires and the restarted agent refuses the replacement prompt (as in the run)
    w.clock.advance(w.deps.settings.watchdog_timeout.total_seconds() + 1)
    w.agent.script("reject")
    assert watchdog.fire(w.deps, w.store.get_session(session_id))
    session = w.store.get_session(session_id)
    assert session is not None and session.watchdog is None and a.bundle_id is not None
    delivery = session.bundle(a.bundle_id).delivery
    assert delivery is not None and delivery.confirmed_at
    op = AnswerOp(a.marker, "answer", session_id, a.bundle_id)
    received = AgentRecord([{"kind": "answer_received", "delivery_id": delivery.delivery_id,
                             "response": json.loads(w.handoffs[-1])}])
    assert fate(op, received, received.handoffs(), {session_id: session}) == CONFIRMED_UNRECORDED
    # without the agent's receipt nothing says it had the answer: still a finding
    assert fate(op, AgentRecord([]), [], {session_id: session}).startswith("claimed, delivery")


def test_message_retry__first_attempt_while_the_agent_was_down__told_dispatch_failed__explained() -> None:
    """The agent was killed before the first attempt and back only after it: the admission ended refused, and
    the retry with the same client_message_id is told the same (final), after the agent is back."""
    j = Journal()
    op = AnswerOp("mk2", "message", "s1")
    op.attempts.append(Attempt(502, "dispatch_failed", None, 101.0, 101.8))
    j.answers.append(op)
    j.faults.append(Fault("agent", killed=100.0, pid=1, back=102.0))
    retry = Request("send message (auto)", 103.3, 103.4, 502, "dispatch_failed", context={"marker": "mk2"})
    assert classify(retry, j, {}) == \
        "502 dispatch_failed: an earlier attempt met the agent down (its retry is told the same)"
    j.faults[0] = Fault("agent", killed=50.0, pid=1, back=52.0)  # down only long before: unexplained
    assert classify(retry, j, {}) is None
