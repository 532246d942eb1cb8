"""The load run's verdict explains a failed request only by a fault that really explains it."""
from __future__ import annotations

from scripts.loadtest.journal import AnswerOp, Attempt, Fault, Journal, Request
from scripts.loadtest.verdict import classify

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
